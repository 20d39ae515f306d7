//===-- KiteAsmBackend.cpp - Kite Assembler Backend -----------------------===//

#include "MCTargetDesc/KiteFixupKinds.h"
#include "MCTargetDesc/KiteMCTargetDesc.h"
#include "llvm/MC/MCAsmBackend.h"
#include "llvm/MC/MCAssembler.h"
#include "llvm/MC/MCContext.h"
#include "llvm/MC/MCELFObjectWriter.h"
#include "llvm/MC/MCFixupKindInfo.h"
#include "llvm/MC/MCObjectWriter.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/MCValue.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace {
class KiteAsmBackend : public MCAsmBackend {
  uint8_t OSABI;

public:
  explicit KiteAsmBackend(uint8_t OSABI)
      : MCAsmBackend(support::little), OSABI(OSABI) {}

  unsigned getNumFixupKinds() const override {
    return Kite::NumTargetFixupKinds;
  }

  const MCFixupKindInfo &getFixupKindInfo(MCFixupKind Kind) const override {
    const static MCFixupKindInfo Infos[Kite::NumTargetFixupKinds] = {
        {"fixup_kite_pcrel_7", 0, 7, MCFixupKindInfo::FKF_IsPCRel},
        {"fixup_kite_hi8", 0, 8, 0},
        {"fixup_kite_lo8", 0, 8, 0},
    };
    if (Kind < FirstTargetFixupKind)
      return MCAsmBackend::getFixupKindInfo(Kind);
    return Infos[Kind - FirstTargetFixupKind];
  }

  void applyFixup(const MCAssembler &Asm, const MCFixup &Fixup,
                  const MCValue &Target, MutableArrayRef<char> Data,
                  uint64_t Value, bool IsResolved,
                  const MCSubtargetInfo *STI) const override {
    unsigned Kind = Fixup.getKind();
    if (Kind == Kite::fixup_kite_pcrel_7) {
      int64_t Disp = int64_t(Value) - 2;
      if (Disp < -64 || Disp > 63)
        Asm.getContext().reportError(Fixup.getLoc(), "branch out of range");
      Data[Fixup.getOffset()] |= uint8_t(Disp & 0x7f);
      return;
    }
    if (Kind == Kite::fixup_kite_hi8)
      Value >>= 8;
    Data[Fixup.getOffset()] = uint8_t(Value & 0xff);
    if (Kind == FK_Data_2)
      Data[Fixup.getOffset() + 1] = uint8_t((Value >> 8) & 0xff);
  }

  bool fixupNeedsRelaxation(const MCFixup &Fixup, uint64_t Value,
                            const MCRelaxableFragment *DF,
                            const MCAsmLayout &Layout) const override {
    return false;
  }

  bool writeNopData(raw_ostream &OS, uint64_t Count,
                    const MCSubtargetInfo *STI) const override {
    for (uint64_t I = 0; I < Count; ++I)
      OS << char(0xEA);
    return true;
  }

  std::unique_ptr<MCObjectTargetWriter>
  createObjectTargetWriter() const override {
    return createKiteELFObjectWriter(OSABI);
  }
};
} // end anonymous namespace

MCAsmBackend *llvm::createKiteAsmBackend(const Target &T,
                                         const MCSubtargetInfo &STI,
                                         const MCRegisterInfo &MRI,
                                         const MCTargetOptions &Options) {
  return new KiteAsmBackend(ELF::ELFOSABI_NONE);
}
