//===-- KiteMCTargetDesc.h - Kite Target Descriptions -----------*- C++ -*-===//

#ifndef LLVM_LIB_TARGET_KITE_MCTARGETDESC_KITEMCTARGETDESC_H
#define LLVM_LIB_TARGET_KITE_MCTARGETDESC_KITEMCTARGETDESC_H

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

// Kite is not in ELF.h: its relocation names join the ELF namespace from its .def.
namespace ELF {
#define ELF_RELOC(name, value) constexpr unsigned name = value;
#include "llvm/BinaryFormat/ELFRelocs/Kite.def"
#undef ELF_RELOC
} // end namespace ELF

MCAsmBackend *createKiteAsmBackend(const Target &T, const MCSubtargetInfo &STI,
                                   const MCRegisterInfo &MRI,
                                   const MCTargetOptions &Options);

std::unique_ptr<MCObjectTargetWriter> createKiteELFObjectWriter(uint8_t OSABI);
} // end namespace llvm

#define GET_REGINFO_ENUM
#include "KiteGenRegisterInfo.inc"

#endif
