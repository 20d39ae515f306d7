//===-- WrenFixupKinds.h - Wren Specific Fixup Entries ----------*- C++ -*-===//

#ifndef LLVM_LIB_TARGET_WREN_MCTARGETDESC_WRENFIXUPKINDS_H
#define LLVM_LIB_TARGET_WREN_MCTARGETDESC_WRENFIXUPKINDS_H

#include "llvm/MC/MCFixup.h"

namespace llvm {
namespace Wren {
enum Fixups {
  // 16-bit upper half of an absolute address
  fixup_wren_hi16 = FirstTargetFixupKind,
  // 16-bit lower half of an absolute address
  fixup_wren_lo16,
  // 16-bit PC-relative offset
  fixup_wren_pc16,
  // 16-bit branch displacement, in words
  fixup_wren_branch,
  // 16-bit offset into the global offset table
  fixup_wren_got16,

  // Marker
  LastTargetFixupKind,
  NumTargetFixupKinds = LastTargetFixupKind - FirstTargetFixupKind
};
} // end namespace Wren
} // end namespace llvm

#endif
