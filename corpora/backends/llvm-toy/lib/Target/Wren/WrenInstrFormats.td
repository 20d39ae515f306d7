//===-- WrenInstrFormats.td - Wren Instruction Formats -----*- tablegen -*-===//

class WrenInst<dag outs, dag ins, string asmstr, list<dag> pattern> : Instruction {
  field bits<32> Inst;
  let Namespace = "Wren";
  let Size = 4;
  dag OutOperandList = outs;
  dag InOperandList = ins;
  let AsmString = asmstr;
  let Pattern = pattern;
}

// Register-register: op rd, rs1, rs2
class FormatR<bits<6> op, dag outs, dag ins, string asmstr, list<dag> pattern>
    : WrenInst<outs, ins, asmstr, pattern> {
  bits<4> rd;
  bits<4> rs1;
  bits<4> rs2;
  let Inst{31-26} = op;
  let Inst{25-22} = rd;
  let Inst{21-18} = rs1;
  let Inst{17-14} = rs2;
}

// Register-immediate: op rd, rs1, imm16
class FormatI<bits<6> op, dag outs, dag ins, string asmstr, list<dag> pattern>
    : WrenInst<outs, ins, asmstr, pattern> {
  bits<4> rd;
  bits<4> rs1;
  bits<16> imm;
  let Inst{31-26} = op;
  let Inst{25-22} = rd;
  let Inst{21-18} = rs1;
  let Inst{15-0} = imm;
}

// Branch: op offset16
class FormatB<bits<6> op, dag ins, string asmstr> : WrenInst<(outs), ins, asmstr, []> {
  bits<16> offset;
  let Inst{31-26} = op;
  let Inst{15-0} = offset;
  let isBranch = 1;
  let isTerminator = 1;
}
