//===-- LarkAsmBackend.cpp - Lark Assembler Backend -----------------------===//

#include "MCTargetDesc/LarkFixupKinds.h"
#include "MCTargetDesc/LarkMCTargetDesc.h"
#include "llvm/MC/MCAsmBackend.h"
#include "llvm/MC/MCAssembler.h"
#include "llvm/MC/MCContext.h"
#include "llvm/MC/MCELFObjectWriter.h"
#include "llvm/MC/MCFixupKindInfo.h"
#include "llvm/MC/MCObjectWriter.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/MCValue.h"
#include "llvm/Support/EndianStream.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

static uint64_t adjustFixupValue(const MCFixup &Fixup, uint64_t Value,
                                 MCContext &Ctx) {
  switch (Fixup.getTargetKind()) {
  default:
    llvm_unreachable("Unknown fixup kind!");
  case FK_Data_1:
  case FK_Data_2:
  case FK_Data_4:
    return Value;
  case Lark::fixup_lark_hi16:
    return ((Value + 0x8000) >> 16) & 0xffff;
  case Lark::fixup_lark_lo16:
    return Value & 0xffff;
  case Lark::fixup_lark_pc16:
    if (!isInt<16>(Value))
      Ctx.reportError(Fixup.getLoc(), "fixup value out of range");
    return Value & 0xffff;
  case Lark::fixup_lark_branch:
  case Lark::fixup_lark_call:
    if (Value & 0x3)
      Ctx.reportError(Fixup.getLoc(), "fixup value must be 4-byte aligned");
    return (Value >> 2) & 0xffff;
  }
}

namespace {
class LarkAsmBackend : public MCAsmBackend {
  uint8_t OSABI;

public:
  LarkAsmBackend(uint8_t OSABI) : MCAsmBackend(support::little), OSABI(OSABI) {}
  ~LarkAsmBackend() override = default;

  unsigned getNumFixupKinds() const override {
    return Lark::NumTargetFixupKinds;
  }

  const MCFixupKindInfo &getFixupKindInfo(MCFixupKind Kind) const override {
    const static MCFixupKindInfo Infos[Lark::NumTargetFixupKinds] = {
        // name                 offset bits flags
        {"fixup_lark_hi16", 0, 16, 0},
        {"fixup_lark_lo16", 0, 16, 0},
        {"fixup_lark_pc16", 0, 16, MCFixupKindInfo::FKF_IsPCRel},
        {"fixup_lark_branch", 0, 16, MCFixupKindInfo::FKF_IsPCRel},
        {"fixup_lark_call", 0, 16, MCFixupKindInfo::FKF_IsPCRel},
    };
    if (Kind < FirstTargetFixupKind)
      return MCAsmBackend::getFixupKindInfo(Kind);
    assert(unsigned(Kind - FirstTargetFixupKind) < getNumFixupKinds() &&
           "Invalid kind!");
    return Infos[Kind - FirstTargetFixupKind];
  }

  void applyFixup(const MCAssembler &Asm, const MCFixup &Fixup,
                  const MCValue &Target, MutableArrayRef<char> Data,
                  uint64_t Value, bool IsResolved,
                  const MCSubtargetInfo *STI) const override {
    MCContext &Ctx = Asm.getContext();
    Value = adjustFixupValue(Fixup, Value, Ctx);
    if (!Value)
      return;
    MCFixupKindInfo Info = getFixupKindInfo(Fixup.getKind());
    unsigned Offset = Fixup.getOffset();
    unsigned NumBytes = (Info.TargetSize + Info.TargetOffset + 7) / 8;
    Value <<= Info.TargetOffset;
    for (unsigned I = 0; I != NumBytes; ++I)
      Data[Offset + I] |= uint8_t((Value >> (I * 8)) & 0xff);
  }

  bool fixupNeedsRelaxation(const MCFixup &Fixup, uint64_t Value,
                            const MCRelaxableFragment *DF,
                            const MCAsmLayout &Layout) const override {
    return false;
  }

  bool writeNopData(raw_ostream &OS, uint64_t Count,
                    const MCSubtargetInfo *STI) const override {
    if (Count % 4 != 0)
      return false;
    for (uint64_t I = 0; I != Count; I += 4)
      support::endian::write<uint32_t>(OS, 0x00000000, support::little);
    return true;
  }

  std::unique_ptr<MCObjectTargetWriter>
  createObjectTargetWriter() const override {
    return createLarkELFObjectWriter(OSABI);
  }
};
} // end anonymous namespace

MCAsmBackend *llvm::createLarkAsmBackend(const Target &T,
                                         const MCSubtargetInfo &STI,
                                         const MCRegisterInfo &MRI,
                                         const MCTargetOptions &Options) {
  uint8_t OSABI = MCELFObjectTargetWriter::getOSABI(STI.getTargetTriple().getOS());
  return new LarkAsmBackend(OSABI);
}
