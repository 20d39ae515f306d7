//===-- LarkRegisterInfo.h - Lark Register Information Impl -----*- C++ -*-===//

#ifndef LLVM_LIB_TARGET_LARK_LARKREGISTERINFO_H
#define LLVM_LIB_TARGET_LARK_LARKREGISTERINFO_H

#include "MCTargetDesc/LarkMCTargetDesc.h"
#include "llvm/CodeGen/TargetRegisterInfo.h"

#define GET_REGINFO_HEADER
#include "LarkGenRegisterInfo.inc"

namespace llvm {

struct LarkRegisterInfo : public LarkGenRegisterInfo {
  LarkRegisterInfo();

  const MCPhysReg *getCalleeSavedRegs(const MachineFunction *MF) const override;

  BitVector getReservedRegs(const MachineFunction &MF) const override;

  void eliminateFrameIndex(MachineBasicBlock::iterator MI, int SPAdj,
                           unsigned FIOperandNum,
                           RegScavenger *RS = nullptr) const override;

  Register getFrameRegister(const MachineFunction &MF) const override;
};

} // end namespace llvm

#endif
