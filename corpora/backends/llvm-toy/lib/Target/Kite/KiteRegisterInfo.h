//===-- KiteRegisterInfo.h - Kite Register Information Impl -----*- C++ -*-===//

#ifndef LLVM_LIB_TARGET_KITE_KITEREGISTERINFO_H
#define LLVM_LIB_TARGET_KITE_KITEREGISTERINFO_H

#include "MCTargetDesc/KiteMCTargetDesc.h"
#include "llvm/CodeGen/TargetRegisterInfo.h"

#define GET_REGINFO_HEADER
#include "KiteGenRegisterInfo.inc"

namespace llvm {

class KiteRegisterInfo : public KiteGenRegisterInfo {
public:
  KiteRegisterInfo();

  const MCPhysReg *getCalleeSavedRegs(const MachineFunction *MF) const override;

  BitVector getReservedRegs(const MachineFunction &MF) const override;

  void eliminateFrameIndex(MachineBasicBlock::iterator MI, int SPAdj,
                           unsigned FIOperandNum,
                           RegScavenger *RS = nullptr) const override;

  Register getFrameRegister(const MachineFunction &MF) const override;
};

} // end namespace llvm

#endif
