//===-- WrenCallingConv.td - Calling Conventions for Wren --*- tablegen -*-===//

def CC_Wren : CallingConv<[
  CCIfType<[i8, i16], CCPromoteToType<i32>>,
  CCIfType<[i32], CCAssignToReg<[R4, R5, R6]>>,
  CCAssignToStack<4, 4>
]>;

def RetCC_Wren : CallingConv<[
  CCIfType<[i32], CCAssignToReg<[R4, R5]>>
]>;

def CSR_Wren : CalleeSavedRegs<(add R1, R3, R6, R7)>;
