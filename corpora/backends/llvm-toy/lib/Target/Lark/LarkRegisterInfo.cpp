//===-- LarkRegisterInfo.cpp - Lark Register Information ------------------===//

#include "LarkRegisterInfo.h"
#include "LarkFrameLowering.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/CodeGen/MachineFrameInfo.h"
#include "llvm/CodeGen/MachineFunction.h"
#include "llvm/CodeGen/MachineInstrBuilder.h"
#include "llvm/CodeGen/TargetSubtargetInfo.h"
#include "llvm/Support/ErrorHandling.h"

#define GET_REGINFO_TARGET_DESC
#include "LarkGenRegisterInfo.inc"

using namespace llvm;

LarkRegisterInfo::LarkRegisterInfo() : LarkGenRegisterInfo(Lark::R1) {}

const MCPhysReg *
LarkRegisterInfo::getCalleeSavedRegs(const MachineFunction *MF) const {
  return CSR_Lark_SaveList;
}

BitVector LarkRegisterInfo::getReservedRegs(const MachineFunction &MF) const {
  BitVector Reserved(getNumRegs());
  Reserved.set(Lark::R0);
  Reserved.set(Lark::R2);
  Reserved.set(Lark::R3);
  return Reserved;
}

void LarkRegisterInfo::eliminateFrameIndex(MachineBasicBlock::iterator II,
                                           int SPAdj, unsigned FIOperandNum,
                                           RegScavenger *RS) const {
  MachineInstr &MI = *II;
  MachineFunction &MF = *MI.getParent()->getParent();
  int FrameIndex = MI.getOperand(FIOperandNum).getIndex();
  int Offset = MF.getFrameInfo().getObjectOffset(FrameIndex) +
               MI.getOperand(FIOperandNum + 1).getImm();
  MI.getOperand(FIOperandNum).ChangeToRegister(Lark::R3, false);
  MI.getOperand(FIOperandNum + 1).ChangeToImmediate(Offset);
}

Register LarkRegisterInfo::getFrameRegister(const MachineFunction &MF) const {
  const LarkFrameLowering *TFI = getFrameLowering(MF);
  return TFI->hasFP(MF) ? Lark::R3 : Lark::R2;
}
