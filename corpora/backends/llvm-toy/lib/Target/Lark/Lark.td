//===-- Lark.td - Describe the Lark Target Machine ---------*- tablegen -*-===//
//
// A toy 32-bit RISC used by kernel-skills' tests.
//
//===----------------------------------------------------------------------===//

include "llvm/Target/Target.td"

//===----------------------------------------------------------------------===//
// Subtarget features
//===----------------------------------------------------------------------===//

def FeatureMul : SubtargetFeature<"mul", "HasMul", "true", "Enable multiply instructions">;
def FeatureDiv : SubtargetFeature<"div", "HasDiv", "true", "Enable divide instructions",
                                  [FeatureMul]>;
def FeatureRelax : SubtargetFeature<"relax", "EnableLinkerRelax", "true",
                                    "Enable linker relaxation">;

include "LarkRegisterInfo.td"
include "LarkCallingConv.td"
include "LarkInstrFormats.td"
include "LarkInstrInfo.td"

def LarkInstrInfo : InstrInfo;

def : ProcessorModel<"generic-lark", NoSchedModel, []>;
def : ProcessorModel<"lark-m", NoSchedModel, [FeatureMul, FeatureDiv]>;

def Lark : Target {
  let InstructionSet = LarkInstrInfo;
}
