//===-- KiteELFObjectWriter.cpp - Kite ELF Writer -------------------------===//

#include "MCTargetDesc/KiteFixupKinds.h"
#include "MCTargetDesc/KiteMCTargetDesc.h"
#include "llvm/MC/MCContext.h"
#include "llvm/MC/MCELFObjectWriter.h"
#include "llvm/MC/MCFixup.h"
#include "llvm/MC/MCObjectWriter.h"
#include "llvm/MC/MCValue.h"
#include "llvm/Support/ErrorHandling.h"

using namespace llvm;

namespace {
class KiteELFObjectWriter : public MCELFObjectTargetWriter {
public:
  explicit KiteELFObjectWriter(uint8_t OSABI)
      : MCELFObjectTargetWriter(false, OSABI, ELF::EM_NONE, true) {}

  unsigned getRelocType(MCContext &Ctx, const MCValue &Target,
                        const MCFixup &Fixup, bool IsPCRel) const override {
    switch ((unsigned)Fixup.getKind()) {
    case FK_Data_1:
      return ELF::R_KITE_8;
    case FK_Data_2:
      return ELF::R_KITE_16;
    case Kite::fixup_kite_pcrel_7:
      return ELF::R_KITE_PCREL_7;
    case Kite::fixup_kite_hi8:
      return ELF::R_KITE_ABS_HI8;
    case Kite::fixup_kite_lo8:
      return ELF::R_KITE_ABS_LO8;
    default:
      llvm_unreachable("invalid fixup kind");
    }
  }
};
} // end anonymous namespace

std::unique_ptr<MCObjectTargetWriter>
llvm::createKiteELFObjectWriter(uint8_t OSABI) {
  return std::make_unique<KiteELFObjectWriter>(OSABI);
}
