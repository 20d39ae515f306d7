//===-- WrenRegisterInfo.cpp - Wren Register Information ------------------===//

#include "WrenRegisterInfo.h"
#include "WrenFrameLowering.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/CodeGen/MachineFrameInfo.h"
#include "llvm/CodeGen/MachineFunction.h"
#include "llvm/CodeGen/MachineInstrBuilder.h"
#include "llvm/CodeGen/TargetSubtargetInfo.h"
#include "llvm/Support/ErrorHandling.h"

#define GET_REGINFO_TARGET_DESC
#include "WrenGenRegisterInfo.inc"

using namespace llvm;

WrenRegisterInfo::WrenRegisterInfo() : WrenGenRegisterInfo(Wren::R1) {}

const MCPhysReg *
WrenRegisterInfo::getCalleeSavedRegs(const MachineFunction *MF) const {
  return CSR_Wren_SaveList;
}

BitVector WrenRegisterInfo::getReservedRegs(const MachineFunction &MF) const {
  BitVector Reserved(getNumRegs());
  Reserved.set(Wren::R0);
  Reserved.set(Wren::R2);
  Reserved.set(Wren::R8);
  if (getFrameLowering(MF)->hasFP(MF))
    Reserved.set(Wren::R3);
  return Reserved;
}

void WrenRegisterInfo::eliminateFrameIndex(MachineBasicBlock::iterator II,
                                           int SPAdj, unsigned FIOperandNum,
                                           RegScavenger *RS) const {
  MachineInstr &MI = *II;
  MachineFunction &MF = *MI.getParent()->getParent();
  int FrameIndex = MI.getOperand(FIOperandNum).getIndex();
  int Offset = MF.getFrameInfo().getObjectOffset(FrameIndex) +
               MI.getOperand(FIOperandNum + 1).getImm();
  MI.getOperand(FIOperandNum).ChangeToRegister(Wren::R3, false);
  MI.getOperand(FIOperandNum + 1).ChangeToImmediate(Offset);
}

Register WrenRegisterInfo::getFrameRegister(const MachineFunction &MF) const {
  const WrenFrameLowering *TFI = getFrameLowering(MF);
  return TFI->hasFP(MF) ? Wren::R3 : Wren::R2;
}
