//===-- WrenFrameLowering.h - Frame info for Wren Target --------*- C++ -*-===//

#ifndef LLVM_LIB_TARGET_WREN_WRENFRAMELOWERING_H
#define LLVM_LIB_TARGET_WREN_WRENFRAMELOWERING_H

#include "llvm/CodeGen/TargetFrameLowering.h"

namespace llvm {

class WrenFrameLowering : public TargetFrameLowering {
public:
  WrenFrameLowering()
      : TargetFrameLowering(TargetFrameLowering::StackGrowsDown, Align(4), 0) {}

  void emitPrologue(MachineFunction &MF, MachineBasicBlock &MBB) const override;
  void emitEpilogue(MachineFunction &MF, MachineBasicBlock &MBB) const override;
  bool hasFP(const MachineFunction &MF) const override;
};

} // end namespace llvm

#endif
