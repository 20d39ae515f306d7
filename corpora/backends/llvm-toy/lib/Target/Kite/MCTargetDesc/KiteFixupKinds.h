//===-- KiteFixupKinds.h - Kite Specific Fixup Entries ----------*- C++ -*-===//

#ifndef LLVM_LIB_TARGET_KITE_MCTARGETDESC_KITEFIXUPKINDS_H
#define LLVM_LIB_TARGET_KITE_MCTARGETDESC_KITEFIXUPKINDS_H

#include "llvm/MC/MCFixup.h"

namespace llvm {
namespace Kite {
enum Fixups {
  fixup_kite_pcrel_7 = FirstTargetFixupKind, // 7-bit relative branch
  fixup_kite_hi8,                            // high byte of a 16-bit address
  fixup_kite_lo8,                            // low byte of a 16-bit address

  LastTargetFixupKind,
  NumTargetFixupKinds = LastTargetFixupKind - FirstTargetFixupKind
};
} // end namespace Kite
} // end namespace llvm

#endif
