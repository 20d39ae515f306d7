//===-- LarkRegisterInfo.td - Lark Register defs -----------*- tablegen -*-===//

class LarkReg<bits<16> Enc, string n, list<string> alt = []> : Register<n> {
  let HWEncoding = Enc;
  let AltNames = alt;
  let Namespace = "Lark";
}

def R0  : LarkReg<0, "r0", ["zero"]>, DwarfRegNum<[0]>;
def R1  : LarkReg<1, "r1", ["ra"]>,   DwarfRegNum<[1]>;
def R2  : LarkReg<2, "r2", ["sp"]>,   DwarfRegNum<[2]>;
def R3  : LarkReg<3, "r3", ["fp"]>,   DwarfRegNum<[3]>;
def R4  : LarkReg<4, "r4">,           DwarfRegNum<[4]>;
def R5  : LarkReg<5, "r5">,           DwarfRegNum<[5]>;
def R6  : LarkReg<6, "r6">,           DwarfRegNum<[6]>;
def R7  : LarkReg<7, "r7">,           DwarfRegNum<[7]>;

def GPR : RegisterClass<"Lark", [i32], 32, (add R4, R5, R6, R7, R0, R1, R2, R3)>;
def SPR : RegisterClass<"Lark", [i32], 32, (add R2)>;
