//===-- LarkInstrInfo.td - Lark Instructions ---------------*- tablegen -*-===//

def simm16 : Operand<i32>;
def brtarget : Operand<OtherVT>;

def ADD  : FormatR<0b000001, (outs GPR:$rd), (ins GPR:$rs1, GPR:$rs2), "add $rd, $rs1, $rs2", []>;
def SUB  : FormatR<0b000010, (outs GPR:$rd), (ins GPR:$rs1, GPR:$rs2), "sub $rd, $rs1, $rs2", []>;
def ADDI : FormatI<0b000011, (outs GPR:$rd), (ins GPR:$rs1, simm16:$imm), "addi $rd, $rs1, $imm", []>;
def LUI  : FormatI<0b000100, (outs GPR:$rd), (ins simm16:$imm), "lui $rd, $imm", []>;
def BR   : FormatB<0b001000, (ins brtarget:$offset), "br $offset">;
