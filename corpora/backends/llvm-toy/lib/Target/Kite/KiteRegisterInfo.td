//===-- KiteRegisterInfo.td - Kite Register defs -----------*- tablegen -*-===//

class KiteReg<bits<16> num, string n> : Register<n> {
  let HWEncoding = num;
  let Namespace = "Kite";
}

def A   : KiteReg<0, "a">,  DwarfRegNum<[0]>;
def X   : KiteReg<1, "x">,  DwarfRegNum<[1]>;
def Y   : KiteReg<2, "y">,  DwarfRegNum<[2]>;
def SP  : KiteReg<3, "sp">, DwarfRegNum<[3]>;
def IX  : KiteReg<4, "ix">, DwarfRegNum<[4]>;

def GR8   : RegisterClass<"Kite", [i8], 8, (add A, X, Y)>;
def GR16  : RegisterClass<"Kite", [i16], 16, (add IX, SP)>;
def PTR16 : RegisterClass<"Kite", [i16], 16, (add IX)>;
