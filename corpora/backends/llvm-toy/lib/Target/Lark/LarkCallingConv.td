//===-- LarkCallingConv.td - Calling Conventions for Lark --*- tablegen -*-===//

def CC_Lark : CallingConv<[
  CCIfType<[i8, i16], CCPromoteToType<i32>>,
  CCIfType<[i32], CCAssignToReg<[R4, R5, R6]>>,
  CCAssignToStack<4, 4>
]>;

def RetCC_Lark : CallingConv<[
  CCIfType<[i32], CCAssignToReg<[R4, R5]>>
]>;

def CSR_Lark : CalleeSavedRegs<(add R1, R3, R7)>;
