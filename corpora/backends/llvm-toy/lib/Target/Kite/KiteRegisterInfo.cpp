//===-- KiteRegisterInfo.cpp - Kite Register Information ------------------===//

#include "KiteRegisterInfo.h"
#include "KiteFrameLowering.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/CodeGen/MachineFrameInfo.h"
#include "llvm/CodeGen/MachineFunction.h"
#include "llvm/CodeGen/TargetSubtargetInfo.h"
#include "llvm/IR/Function.h"
#include "llvm/Support/ErrorHandling.h"

#define GET_REGINFO_TARGET_DESC
#include "KiteGenRegisterInfo.inc"

using namespace llvm;

KiteRegisterInfo::KiteRegisterInfo() : KiteGenRegisterInfo(0) {}

const MCPhysReg *
KiteRegisterInfo::getCalleeSavedRegs(const MachineFunction *MF) const {
  static const MCPhysReg None[] = {0};
  return MF && MF->getFunction().hasFnAttribute("interrupt") ? CSR_Kite_SaveList
                                                            : None;
}

BitVector KiteRegisterInfo::getReservedRegs(const MachineFunction &MF) const {
  BitVector Reserved(getNumRegs());
  Reserved.set(Kite::SP);
  return Reserved;
}

void KiteRegisterInfo::eliminateFrameIndex(MachineBasicBlock::iterator II,
                                           int SPAdj, unsigned FIOperandNum,
                                           RegScavenger *RS) const {
  report_fatal_error("Kite has no frame indices to eliminate");
}

Register KiteRegisterInfo::getFrameRegister(const MachineFunction &MF) const {
  return Kite::SP;
}
