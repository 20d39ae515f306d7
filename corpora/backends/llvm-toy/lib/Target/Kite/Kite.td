//===-- Kite.td - Describe the Kite Target Machine ---------*- tablegen -*-===//
//
// A toy 8/16-bit accumulator machine used by kernel-skills' tests.
//
//===----------------------------------------------------------------------===//

include "llvm/Target/Target.td"

def FeatureWideIndex : SubtargetFeature<"wide-index", "HasWideIndex", "true",
                                        "16-bit index registers">;
def FeatureBankSwitch : SubtargetFeature<"bank-switch", "HasBankSwitch", "true",
                                         "Banked program memory">;

include "KiteRegisterInfo.td"
include "KiteCallingConv.td"
include "KiteInstrFormats.td"

def KiteInstrInfo : InstrInfo;

def : ProcessorModel<"kite-base", NoSchedModel, []>;
def : ProcessorModel<"kite-plus", NoSchedModel, [FeatureWideIndex]>;

def Kite : Target {
  let InstructionSet = KiteInstrInfo;
}
