//===-- LarkMCTargetDesc.h - Lark Target Descriptions -----------*- C++ -*-===//

#ifndef LLVM_LIB_TARGET_LARK_MCTARGETDESC_LARKMCTARGETDESC_H
#define LLVM_LIB_TARGET_LARK_MCTARGETDESC_LARKMCTARGETDESC_H

#include "llvm/BinaryFormat/ELF.h"
#include "llvm/MC/MCTargetOptions.h"
#include <cstdint>
#include <memory>

namespace llvm {
class MCAsmBackend;
class MCObjectTargetWriter;
class MCRegisterInfo;
class MCSubtargetInfo;
class Target;

// Lark is not in ELF.h: its relocation names join the ELF namespace from its .def.
namespace ELF {
#define ELF_RELOC(name, value) constexpr unsigned name = value;
#include "llvm/BinaryFormat/ELFRelocs/Lark.def"
#undef ELF_RELOC
} // end namespace ELF

MCAsmBackend *createLarkAsmBackend(const Target &T, const MCSubtargetInfo &STI,
                                   const MCRegisterInfo &MRI,
                                   const MCTargetOptions &Options);

std::unique_ptr<MCObjectTargetWriter> createLarkELFObjectWriter(uint8_t OSABI);
} // end namespace llvm

// Defines symbolic names for Lark registers (Lark::R0 ...) and register classes.
#define GET_REGINFO_ENUM
#include "LarkGenRegisterInfo.inc"

#endif
