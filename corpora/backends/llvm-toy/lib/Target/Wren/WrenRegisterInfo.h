//===-- WrenRegisterInfo.h - Wren Register Information Impl -----*- C++ -*-===//

#ifndef LLVM_LIB_TARGET_WREN_WRENREGISTERINFO_H
#define LLVM_LIB_TARGET_WREN_WRENREGISTERINFO_H

#include "MCTargetDesc/WrenMCTargetDesc.h"
#include "llvm/CodeGen/TargetRegisterInfo.h"

#define GET_REGINFO_HEADER
#include "WrenGenRegisterInfo.inc"

namespace llvm {

struct WrenRegisterInfo : public WrenGenRegisterInfo {
  WrenRegisterInfo();

  const MCPhysReg *getCalleeSavedRegs(const MachineFunction *MF) const override;

  BitVector getReservedRegs(const MachineFunction &MF) const override;

  void eliminateFrameIndex(MachineBasicBlock::iterator MI, int SPAdj,
                           unsigned FIOperandNum,
                           RegScavenger *RS = nullptr) const override;

  Register getFrameRegister(const MachineFunction &MF) const override;
};

} // end namespace llvm

#endif
