"""retrieval/backend/local_names on small C++ bodies: a fork's local of a type T's other functions
name consistently takes T's name in every use; a collision, a member or qualified name, a string,
a parameter and a type below the thresholds stay as they are."""
from retrieval.backend.local_names import TypeNames, declarations_of, rename_locals

# T's other functions: SDLoc is `dl` in three declarations of three functions, MachineOperand
# `MO` twice in one function only, unsigned is no type to learn from
LARK = {
    "a": "SDValue LarkTargetLowering::LowerA(SDValue Op, SelectionDAG &DAG) const { SDLoc dl(Op); "
         "unsigned Reg = 0; return DAG.getNode(LarkISD::A, dl, MVT::i32, Op); }",
    "b": "SDValue LarkTargetLowering::LowerB(SDValue Op, SelectionDAG &DAG) const { SDLoc dl(Op); "
         "return DAG.getNode(LarkISD::B, dl, MVT::i32, Op); }",
    "c": "void LarkInstrInfo::c(MachineInstr &MI) const { SDLoc dl; for (MachineOperand &MO : MI.operands()) "
         "use(MO); MachineOperand &MO2 = MI.getOperand(0); use(MO2); }",
}

FORK = """SDValue LarkTargetLowering::LowerC(SDValue Op, SelectionDAG &DAG) const {
  SDLoc DL(Op);
  MachineOperand &Op0 = getOp(Op);
  Info.DL = 0;
  report("DL");
  return DAG.getNode(LarkISD::C, DL, MVT::i32, Op, Lark::DL);
}"""


def test_declarations_by_type():
    decls = declarations_of("void f(const MachineFunction &MF, int k) { SDLoc DL(Op); "
                            "const LarkSubtarget &ST = MF.getSubtarget<LarkSubtarget>(); X *p, q; "
                            "for (MachineInstr &MI : MBB) {} static Target TheLarkTarget; auto A = 1; }")
    assert decls == [("MachineFunction", "MF"), ("SDLoc", "DL"), ("LarkSubtarget", "ST"), ("X *", "p"),
                     ("X", "q"), ("MachineInstr", "MI")]


def test_local_takes_t_name_in_every_use_but_members_qualified_and_strings():
    names = TypeNames.from_texts(LARK)
    assert names.convention("SDLoc") == "dl"
    code, renamed = rename_locals(FORK, names)
    assert renamed == {"DL": "dl"}
    assert "SDLoc dl(Op);" in code and "DAG.getNode(LarkISD::C, dl, MVT::i32, Op, Lark::DL)" in code
    assert "Info.DL = 0;" in code and 'report("DL");' in code


def test_the_function_itself_is_left_out():
    names = TypeNames.from_texts(LARK)
    # without `a` two declarations remain: below three, no convention
    assert names.convention("SDLoc", exclude=["a"]) is None
    assert rename_locals(FORK, names, exclude=["a"]) == (FORK, {})


def test_below_the_thresholds_nothing_moves():
    names = TypeNames.from_texts(LARK)
    # MachineOperand: three declarations, but `MO` (two of three, in one function) is no convention
    assert names.convention("MachineOperand") is None
    assert names.convention("unsigned") is None


def test_collision_refused():
    names = TypeNames.from_texts(LARK)
    clash = FORK.replace("Info.DL = 0;", "int dl = 0;")
    assert rename_locals(clash, names) == (clash, {})


def test_parameter_not_renamed():
    names = TypeNames.from_texts(LARK)
    code = "SDValue LarkTargetLowering::LowerD(SDLoc DL, SelectionDAG &DAG) const { return DAG.getUNDEF(DL); }"
    assert rename_locals(code, names) == (code, {})
