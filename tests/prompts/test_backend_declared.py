"""A fork's parameters from the target's own declaration (corpora/backends/tree.function_declarations,
retrieval/backend/adapt.fit_parameters, prompts/backend/generate.fit_declared), and multi-donor fusion
that counts a statement wherever each donor puts it and admits the target's names."""
import shutil

import pytest

from _backend_support import TOY_TARGETS, indexed_toy_store
from corpora.backends.tree import function_declarations, load_target, parse_definition
from skills.store import Store


@pytest.fixture(scope="module")
def toy_store(tmp_path_factory):
    dst = tmp_path_factory.mktemp("declared") / "store"
    shutil.copytree(indexed_toy_store(), dst)
    return dst


def test_function_declarations_read_a_headers_parameters():
    src = (TOY_TARGETS / "Lark" / "LarkRegisterInfo.h").read_bytes()
    decls = dict(function_declarations(src))
    # a pointer return type, a default argument dropped (a definition must not repeat it)
    assert decls["LarkRegisterInfo::getCalleeSavedRegs"] == [("const MachineFunction *MF", "MF")]
    assert decls["LarkRegisterInfo::eliminateFrameIndex"] == [
        ("MachineBasicBlock::iterator MI", "MI"), ("int SPAdj", "SPAdj"), ("unsigned FIOperandNum", "FIOperandNum"),
        ("RegScavenger *RS", "RS")]
    assert decls["LarkRegisterInfo::getFrameRegister"] == [("const MachineFunction &MF", "MF")]
    snippet = (b"namespace llvm { class K { void inl(int A) { (void)A; }\n  int var(int A, ...);\n"
               b"  int anon(int, const char *Name = \"x\");\n}; }")
    got = dict(function_declarations(snippet))
    assert "K::inl" not in got  # a definition, not a declaration: its body is the function itself
    assert got["K::var"] is None and got["K::anon"] == [("int", None), ("const char *Name", "Name")]


def test_fit_parameters_takes_the_declaration_and_renames_the_uses():
    from retrieval.backend.adapt import definition_parameters, fit_parameters

    code = ("void KitePrinter::printOp(const MCInst *MI, unsigned OpNo, raw_ostream &OS) {\n"
            "  unsigned CC = MI->getOperand(OpNo).getImm();\n  OS << CC << Info.OpNo;\n}")
    decl = [("const MCInst *MI", "MI"), ("int OpNum", "OpNum"), ("raw_ostream &O", "O")]
    new, renamed = fit_parameters(code, decl)
    assert renamed == {"OpNo": "OpNum", "OS": "O"}
    assert new.startswith("void KitePrinter::printOp(const MCInst *MI, int OpNum, raw_ostream &O) {")
    # uses follow; a member of the same spelling does not
    assert "getOperand(OpNum)" in new and "O << CC << Info.OpNo;" in new
    assert definition_parameters(new) == decl
    # a new name that is already another name of the function: nothing changes
    assert fit_parameters(code, [("const MCInst *MI", "MI"), ("int CC", "CC"), ("raw_ostream &O", "O")]) == (code, {})
    # another count of parameters (API drift changed the arity): nothing changes
    assert fit_parameters(code, decl[:2]) == (code, {})
    # a parameter the declaration leaves unnamed keeps the donor's text, since the body reads it
    new2, renamed2 = fit_parameters(code, [("const MCInst *", None), ("unsigned Op", "Op"), ("raw_ostream &OS", "OS")])
    assert renamed2 == {"OpNo": "Op"} and "(const MCInst *MI, unsigned Op, raw_ostream &OS)" in new2


def test_fit_parameters_of_another_arity_pairs_by_type_then_position():
    from retrieval.backend.adapt import definition_parameters, fit_parameters, pair_parameters

    # LLVM 15's loadRegFromStackSlot against LLVM 19's declaration, which appends Register VReg
    code = ("void KiteInstrInfo::loadRegFromStackSlot(MachineBasicBlock &MBB, MachineBasicBlock::iterator I, "
            "unsigned DstReg, int FI, const TargetRegisterClass *RC, const TargetRegisterInfo *TRI) const {\n"
            "  BuildMI(MBB, I, DL, get(Kite::LDW), DstReg).addFrameIndex(FI);\n}")
    decl = [("MachineBasicBlock &MBB", "MBB"), ("MachineBasicBlock::iterator MI", "MI"),
            ("Register DestReg", "DestReg"), ("int FrameIndex", "FrameIndex"),
            ("const TargetRegisterClass *RC", "RC"), ("const TargetRegisterInfo *TRI", "TRI"),
            ("Register VReg", "VReg")]
    own = definition_parameters(code)
    # same types pair in order; the unsigned -> Register stretch pairs by position (same length)
    assert pair_parameters(own, decl) == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]
    assert fit_parameters(code, decl) == (code, {})  # without any_arity: unchanged
    new, renamed = fit_parameters(code, decl, any_arity=True)
    assert renamed == {"I": "MI", "DstReg": "DestReg", "FI": "FrameIndex"}
    assert definition_parameters(new) == decl
    assert "BuildMI(MBB, MI, DL, get(Kite::LDW), DestReg).addFrameIndex(FrameIndex);" in new
    # a parameter the target dropped: its uses stay as they were (the porter sees the old name)
    code2 = "bool KiteAsmBackend::fixupNeedsRelaxation(const MCFixup &Fixup, uint64_t Value, const MCAsmLayout &L) const {\n  return use(Value, L);\n}"
    new2, renamed2 = fit_parameters(code2, [("const MCFixup &Fixup", "Fixup"), ("uint64_t Val", "Val")],
                                    any_arity=True)
    assert renamed2 == {"Value": "Val"} and "(const MCFixup &Fixup, uint64_t Val) const {" in new2
    assert "return use(Val, L);" in new2
    # an added parameter whose name the body already uses for something else: unchanged
    code3 = "void KiteX::f(int A) {\n  int VReg = A;\n}"
    assert fit_parameters(code3, [("int A", "A"), ("Register VReg", "VReg")], any_arity=True) == (code3, {})
    # an unnamed declared parameter the body reads: T's type, the donor's name
    code4 = "KiteInstrInfo::KiteInstrInfo(const KiteSubtarget &ST) {\n  init(ST);\n}"
    new4, _ = fit_parameters(code4, [("const KiteSubtarget &", None), ("int Mode", "Mode")], any_arity=True)
    assert "KiteInstrInfo::KiteInstrInfo(const KiteSubtarget & ST, int Mode) {" in new4


def test_fit_declared_reads_the_targets_own_header(toy_store):
    from prompts.backend.generate import GenerateRequest, fit_declared, generate, target_declaration

    st = Store(toy_store)
    code = ("BitVector LarkRegisterInfo::getReservedRegs(const MachineFunction &Fn) const {\n"
            "  BitVector Reserved(getNumRegs());\n  (void)Fn;\n  return Reserved;\n}")
    new, renamed = fit_declared(st, "Lark", "LarkRegisterInfo::getReservedRegs", code)
    assert renamed == {"Fn": "MF"} and "(const MachineFunction &MF) const {" in new and "(void)MF;" in new
    assert parse_definition(new)[0] == ["BitVector Reserved ( getNumRegs ( ) ) ;", "( void ) MF ;", "return Reserved ;"]
    assert target_declaration(st, "Lark", "llvm::LarkRegisterInfo::getReservedRegs", 1) == [
        ("const MachineFunction &MF", "MF")]
    assert target_declaration(st, "Lark", "LarkRegisterInfo::getReservedRegs", 2) is None  # no such overload
    assert fit_declared(st, "Lark", "LarkRegisterInfo::noSuchFunction", code) == (code, {})
    # a donor with another parameter count: T's one declaration of any arity gives the list
    code1 = ("BitVector LarkRegisterInfo::getReservedRegs(const MachineFunction &Fn, bool Extra) const {\n"
             "  BitVector Reserved(getNumRegs());\n  (void)Fn;\n  return Reserved;\n}")
    new1, renamed1 = fit_declared(st, "Lark", "LarkRegisterInfo::getReservedRegs", code1)
    assert renamed1 == {"Fn": "MF"} and "getReservedRegs(const MachineFunction &MF) const {" in new1
    # Lark's definition names its iterator II and has a local MI; the header says MI: a clash, unchanged
    elim = next(f for f in load_target(TOY_TARGETS / "Lark").functions if f.role == "RegisterInfo::eliminateFrameIndex")
    assert fit_declared(st, "Lark", "LarkRegisterInfo::eliminateFrameIndex", elim.text) == (elim.text, {})
    res = generate(st, GenerateRequest(target="Lark", role="getReservedRegs", k=2, gate=False))
    assert isinstance(res["parameters_renamed"], dict) and "(const MachineFunction &MF)" in res["code"]


def test_fuse_counts_a_statement_wherever_each_donor_puts_it():
    from retrieval.backend.fuse import fuse

    fork = "unsigned T::f(unsigned K) const {\n  unsigned V = K + 1;\n  V += 3;\n  return V;\n}"

    def donor(before: str, after: str) -> str:
        return f"unsigned T::f(unsigned K) const {{\n  {before}\n  unsigned V = K + 1;\n  {after}\n  return V;\n}}"

    # two of three donors have the assert, at different places: it counts twice, and goes where
    # the best-ranked of them put it; a declaration and a statement reading it come in together
    others = [donor('assert(K && "k");', "unsigned W = K * 2;\n  Use(W);"),
              donor("", 'assert(K && "k");\n  unsigned W = K * 2;\n  Use(W);'),
              donor("", "Lark_ONE;")]
    res = fuse(fork, others)
    assert parse_definition(res.code)[0] == ['assert ( K && "k" ) ;', "unsigned V = K + 1 ;", "unsigned W = K * 2 ;",
                                             "Use ( W ) ;", "V += 3 ;", "return V ;"]
    assert [(a["statement"], a["votes"]) for a in res.added] == [('assert ( K && "k" ) ;', 2),
                                                                 ("unsigned W = K * 2 ;", 2), ("Use ( W ) ;", 2)]
    # a name the fork lacks: only when the target has it (its attributes and declarations)
    two = [donor("", "Lark_ONE;"), donor("", "Lark_ONE;")]
    assert fuse(fork, two).code == fork
    assert "Lark_ONE;" in fuse(fork, two, known={"Lark_ONE"}).code
