//===-- LarkFrameLowering.h - Frame info for Lark Target --------*- C++ -*-===//

#ifndef LLVM_LIB_TARGET_LARK_LARKFRAMELOWERING_H
#define LLVM_LIB_TARGET_LARK_LARKFRAMELOWERING_H

#include "llvm/CodeGen/TargetFrameLowering.h"

namespace llvm {

class LarkFrameLowering : public TargetFrameLowering {
public:
  LarkFrameLowering()
      : TargetFrameLowering(TargetFrameLowering::StackGrowsDown, Align(4), 0) {}

  void emitPrologue(MachineFunction &MF, MachineBasicBlock &MBB) const override;
  void emitEpilogue(MachineFunction &MF, MachineBasicBlock &MBB) const override;
  bool hasFP(const MachineFunction &MF) const override;
};

} // end namespace llvm

#endif
