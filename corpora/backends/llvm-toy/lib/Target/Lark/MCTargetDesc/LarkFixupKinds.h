//===-- LarkFixupKinds.h - Lark Specific Fixup Entries ----------*- C++ -*-===//

#ifndef LLVM_LIB_TARGET_LARK_MCTARGETDESC_LARKFIXUPKINDS_H
#define LLVM_LIB_TARGET_LARK_MCTARGETDESC_LARKFIXUPKINDS_H

#include "llvm/MC/MCFixup.h"

namespace llvm {
namespace Lark {
enum Fixups {
  // 16-bit upper half of an absolute address
  fixup_lark_hi16 = FirstTargetFixupKind,
  // 16-bit lower half of an absolute address
  fixup_lark_lo16,
  // 16-bit PC-relative offset
  fixup_lark_pc16,
  // 16-bit branch displacement, in words
  fixup_lark_branch,
  // call target
  fixup_lark_call,

  // Marker
  LastTargetFixupKind,
  NumTargetFixupKinds = LastTargetFixupKind - FirstTargetFixupKind
};
} // end namespace Lark
} // end namespace llvm

#endif
