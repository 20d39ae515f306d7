//===-- WrenRegisterInfo.td - Wren Register defs -----------*- tablegen -*-===//

class WrenReg<bits<16> Enc, string n, list<string> alt = []> : Register<n> {
  let HWEncoding = Enc;
  let AltNames = alt;
  let Namespace = "Wren";
}

def R0  : WrenReg<0, "r0", ["zero"]>, DwarfRegNum<[0]>;
def R1  : WrenReg<1, "r1", ["ra"]>,   DwarfRegNum<[1]>;
def R2  : WrenReg<2, "r2", ["sp"]>,   DwarfRegNum<[2]>;
def R3  : WrenReg<3, "r3", ["fp"]>,   DwarfRegNum<[3]>;
def R4  : WrenReg<4, "r4">,           DwarfRegNum<[4]>;
def R5  : WrenReg<5, "r5">,           DwarfRegNum<[5]>;
def R6  : WrenReg<6, "r6">,           DwarfRegNum<[6]>;
def R7  : WrenReg<7, "r7">,           DwarfRegNum<[7]>;
def R8  : WrenReg<8, "r8", ["gp"]>,   DwarfRegNum<[8]>;

def GPR : RegisterClass<"Wren", [i32], 32, (add R4, R5, R6, R7, R8, R0, R1, R2, R3)>;
def SPR : RegisterClass<"Wren", [i32], 32, (add R2)>;
