//===-- Wren.td - Describe the Wren Target Machine ---------*- tablegen -*-===//
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

include "WrenRegisterInfo.td"
include "WrenCallingConv.td"
include "WrenInstrFormats.td"
include "WrenInstrInfo.td"

def WrenInstrInfo : InstrInfo;

def : ProcessorModel<"generic-wren", NoSchedModel, []>;
def : ProcessorModel<"wren-m", NoSchedModel, [FeatureMul, FeatureDiv]>;

def Wren : Target {
  let InstructionSet = WrenInstrInfo;
}
