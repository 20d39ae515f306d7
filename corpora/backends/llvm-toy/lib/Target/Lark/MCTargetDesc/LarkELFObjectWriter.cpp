//===-- LarkELFObjectWriter.cpp - Lark ELF Writer -------------------------===//

#include "MCTargetDesc/LarkFixupKinds.h"
#include "MCTargetDesc/LarkMCTargetDesc.h"
#include "llvm/MC/MCContext.h"
#include "llvm/MC/MCELFObjectWriter.h"
#include "llvm/MC/MCFixup.h"
#include "llvm/MC/MCObjectWriter.h"
#include "llvm/MC/MCValue.h"
#include "llvm/Support/ErrorHandling.h"

using namespace llvm;

namespace {
class LarkELFObjectWriter : public MCELFObjectTargetWriter {
public:
  LarkELFObjectWriter(uint8_t OSABI);
  ~LarkELFObjectWriter() override = default;

protected:
  unsigned getRelocType(MCContext &Ctx, const MCValue &Target,
                        const MCFixup &Fixup, bool IsPCRel) const override;
};
} // end anonymous namespace

LarkELFObjectWriter::LarkELFObjectWriter(uint8_t OSABI)
    : MCELFObjectTargetWriter(/*Is64Bit=*/false, OSABI, ELF::EM_NONE,
                              /*HasRelocationAddend=*/true) {}

unsigned LarkELFObjectWriter::getRelocType(MCContext &Ctx,
                                           const MCValue &Target,
                                           const MCFixup &Fixup,
                                           bool IsPCRel) const {
  unsigned Kind = Fixup.getTargetKind();
  if (IsPCRel) {
    switch (Kind) {
    default:
      Ctx.reportError(Fixup.getLoc(), "unsupported PC-relative relocation");
      return ELF::R_LARK_NONE;
    case Lark::fixup_lark_pc16:
      return ELF::R_LARK_PC16;
    case Lark::fixup_lark_branch:
      return ELF::R_LARK_BRANCH;
    case Lark::fixup_lark_call:
      return ELF::R_LARK_CALL;
    }
  }

  switch (Kind) {
  default:
    Ctx.reportError(Fixup.getLoc(), "unsupported relocation type");
    return ELF::R_LARK_NONE;
  case FK_Data_4:
    return ELF::R_LARK_32;
  case Lark::fixup_lark_hi16:
    return ELF::R_LARK_HI16;
  case Lark::fixup_lark_lo16:
    return ELF::R_LARK_LO16;
  }
}

std::unique_ptr<MCObjectTargetWriter>
llvm::createLarkELFObjectWriter(uint8_t OSABI) {
  return std::make_unique<LarkELFObjectWriter>(OSABI);
}
