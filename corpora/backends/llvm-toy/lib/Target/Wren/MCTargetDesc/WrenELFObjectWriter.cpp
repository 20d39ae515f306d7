//===-- WrenELFObjectWriter.cpp - Wren ELF Writer -------------------------===//

#include "MCTargetDesc/WrenFixupKinds.h"
#include "MCTargetDesc/WrenMCTargetDesc.h"
#include "llvm/MC/MCContext.h"
#include "llvm/MC/MCELFObjectWriter.h"
#include "llvm/MC/MCFixup.h"
#include "llvm/MC/MCObjectWriter.h"
#include "llvm/MC/MCValue.h"
#include "llvm/Support/ErrorHandling.h"

using namespace llvm;

namespace {
class WrenELFObjectWriter : public MCELFObjectTargetWriter {
public:
  WrenELFObjectWriter(uint8_t OSABI);
  ~WrenELFObjectWriter() override = default;

protected:
  unsigned getRelocType(MCContext &Ctx, const MCValue &Target,
                        const MCFixup &Fixup, bool IsPCRel) const override;
};
} // end anonymous namespace

WrenELFObjectWriter::WrenELFObjectWriter(uint8_t OSABI)
    : MCELFObjectTargetWriter(/*Is64Bit=*/false, OSABI, ELF::EM_NONE,
                              /*HasRelocationAddend=*/true) {}

unsigned WrenELFObjectWriter::getRelocType(MCContext &Ctx,
                                           const MCValue &Target,
                                           const MCFixup &Fixup,
                                           bool IsPCRel) const {
  unsigned Kind = Fixup.getTargetKind();
  if (IsPCRel) {
    switch (Kind) {
    default:
      Ctx.reportError(Fixup.getLoc(), "unsupported PC-relative relocation");
      return ELF::R_WREN_NONE;
    case Wren::fixup_wren_pc16:
      return ELF::R_WREN_PC16;
    case Wren::fixup_wren_branch:
      return ELF::R_WREN_BRANCH;
    }
  }

  switch (Kind) {
  default:
    Ctx.reportError(Fixup.getLoc(), "unsupported relocation type");
    return ELF::R_WREN_NONE;
  case FK_Data_4:
    return ELF::R_WREN_32;
  case Wren::fixup_wren_hi16:
    return ELF::R_WREN_HI16;
  case Wren::fixup_wren_lo16:
    return ELF::R_WREN_LO16;
  case Wren::fixup_wren_got16:
    return ELF::R_WREN_GOT16;
  }
}

std::unique_ptr<MCObjectTargetWriter>
llvm::createWrenELFObjectWriter(uint8_t OSABI) {
  return std::make_unique<WrenELFObjectWriter>(OSABI);
}
