//===-- KiteInstrFormats.td - Kite Instruction Formats -----*- tablegen -*-===//

class KiteInst<int size, dag outs, dag ins, string asmstr> : Instruction {
  let Namespace = "Kite";
  let Size = size;
  dag OutOperandList = outs;
  dag InOperandList = ins;
  let AsmString = asmstr;
}

// One opcode byte, implied operands.
class Implied<bits<8> op, string asmstr> : KiteInst<1, (outs), (ins), asmstr> {
  field bits<8> Inst;
  let Inst = op;
}

// Opcode byte plus an 8-bit immediate or zero-page address.
class Imm8<bits<8> op, dag outs, dag ins, string asmstr> : KiteInst<2, outs, ins, asmstr> {
  field bits<16> Inst;
  bits<8> imm;
  let Inst{15-8} = op;
  let Inst{7-0} = imm;
}

// Opcode byte plus a 7-bit relative branch displacement.
class Rel7<bits<8> op, string asmstr> : KiteInst<2, (outs), (ins), asmstr> {
  field bits<16> Inst;
  bits<7> disp;
  let Inst{15-8} = op;
  let Inst{6-0} = disp;
  let isBranch = 1;
}

def NOP : Implied<0xEA, "nop">;
def LDA : Imm8<0xA9, (outs GR8:$dst), (ins i8imm:$imm), "lda $imm">;
def BNE : Rel7<0xD0, "bne">;
