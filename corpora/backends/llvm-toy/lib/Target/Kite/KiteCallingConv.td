//===-- KiteCallingConv.td - Calling Conventions for Kite --*- tablegen -*-===//

def CC_Kite : CallingConv<[
  CCIfType<[i8], CCAssignToReg<[A, X]>>,
  CCIfType<[i16], CCAssignToReg<[IX]>>,
  CCAssignToStack<2, 1>
]>;

def RetCC_Kite : CallingConv<[
  CCIfType<[i8], CCAssignToReg<[A]>>,
  CCIfType<[i16], CCAssignToReg<[IX]>>
]>;

def CSR_Kite : CalleeSavedRegs<(add Y)>;
