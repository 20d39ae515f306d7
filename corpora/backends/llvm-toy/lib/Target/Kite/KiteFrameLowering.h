//===-- KiteFrameLowering.h - Frame info for Kite Target --------*- C++ -*-===//

#ifndef LLVM_LIB_TARGET_KITE_KITEFRAMELOWERING_H
#define LLVM_LIB_TARGET_KITE_KITEFRAMELOWERING_H

#include "llvm/CodeGen/TargetFrameLowering.h"

namespace llvm {

class KiteFrameLowering : public TargetFrameLowering {
public:
  KiteFrameLowering()
      : TargetFrameLowering(TargetFrameLowering::StackGrowsDown, Align(1), 0) {}

  void emitPrologue(MachineFunction &MF, MachineBasicBlock &MBB) const override;
  void emitEpilogue(MachineFunction &MF, MachineBasicBlock &MBB) const override;
  bool hasFP(const MachineFunction &MF) const override { return false; }
};

} // end namespace llvm

#endif
