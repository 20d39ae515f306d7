"""Loading LLVM-style target trees: functions, roles, statements, attributes, bad input."""

import pytest

from _backend_support import TOY, TOY_TARGETS, copy_toy
from corpora.backends.tree import (
    BackendInputError, extract_declarations, find_aliases, find_target_dirs, function_declarations,
    is_target_identifier, load_target, neutralize, normalize_code, parse_cpp, parse_definition, strip_target,
)


def test_roles_strip_the_target_prefix():
    assert strip_target("RISCVELFObjectWriter::getRelocType", ["RISCV"]) == "ELFObjectWriter::getRelocType"
    assert strip_target("createPPCELFObjectWriter", ["PPC", "PowerPC"]) == "createELFObjectWriter"
    assert strip_target("LLVMInitializeXCoreTargetMC", ["XCore", "XCORE"]) == "LLVMInitializeTargetMC"
    assert strip_target("SIInstrInfo::copyPhysReg", find_aliases("AMDGPU", [])) == "InstrInfo::copyPhysReg"
    # a name that merely contains the letters stays whole
    assert strip_target("VectorInfo::get", ["VE"]) == "VectorInfo::get"


def test_aliases_from_class_names():
    aliases = find_aliases("PowerPC", ["PPCInstrInfo", "PPCSubtarget", "MCInstrInfo", "TargetLowering"])
    assert "PPC" in aliases and "MC" not in aliases and "Target" not in aliases


def test_target_identifiers_and_neutral_text():
    a = ["RISCV"]
    assert is_target_identifier("RISCV::X1", a, set())
    assert is_target_identifier("RISCVII::MO_CALL", a, set())
    assert is_target_identifier("ELF::R_RISCV_32", a, set(), ["R_RISCV_"])
    assert is_target_identifier("fixup_riscv_hi20", a, set())
    assert not is_target_identifier("ELF::R_MIPS_32", a, set(), ["R_RISCV_"])
    assert not is_target_identifier("MachineFunction", a, set())
    assert neutralize("case RISCV::fixup_riscv_hi20: return ELF::R_RISCV_HI20;", a) == \
        "case TGT::fixup_tgt_hi20: return ELF::R_TGT_HI20;"


def test_statements_are_normalized():
    stmts, body = parse_definition("""
      unsigned f(unsigned K) {
        // comment
        switch (K) {   default: return 0;
        case 1:
        case 2: return   K + 1; }
        if (K) { return 3; } else return 4;
      }""")
    assert stmts == ["switch ( K )", "default :", "return 0 ;", "case 1 :", "case 2 :", "return K + 1 ;",
                     "if ( K )", "return 3 ;", "else", "return 4 ;"]
    assert "comment" not in body
    assert normalize_code("a  =  b; // x\n /* y */ c(\"//no\");") == 'a = b ; c ( "//no" ) ;'


def test_header_declarations_through_return_pointers_and_references():
    # the return type's * and & wrap the function's declarator: FunctionPass *createXPass();
    src = b"""namespace llvm {
class FunctionPass;
FunctionPass *createARCBranchFinalizePass();
FunctionPass **createTwice();
const FunctionPass &theRef();
FunctionPass *const *constPtr();
int plain(int N);
void (*hook)(int);
class ARCInstrInfo {
  const ARCRegisterInfo &getRegisterInfo() const;
  static MCInst *make(unsigned Op);
  bool (*callback)(int);
};
}
"""
    decls = {a.name: a.value for a in extract_declarations(parse_cpp(src), "ARC", "ARC.h")}
    for name in ("createARCBranchFinalizePass", "createTwice", "theRef", "constPtr", "plain"):
        assert decls[name] == name
    assert decls["getRegisterInfo"] == "ARCInstrInfo::getRegisterInfo"
    assert decls["make"] == "ARCInstrInfo::make"
    # pointers to functions declare variables, not functions
    assert "hook" not in decls and "callback" not in decls
    fdecls = dict(function_declarations(src))
    assert fdecls["ARCInstrInfo::make"] == [("unsigned Op", "Op")]
    assert fdecls["createTwice"] == [] and fdecls["plain"] == [("int N", "N")]
    assert "hook" not in fdecls and "ARCInstrInfo::callback" not in fdecls


def test_load_toy_target():
    dirs, relocs = find_target_dirs(TOY_TARGETS)
    assert [d.name for d in dirs] == ["Kite", "Lark", "Wren"]
    assert relocs == TOY / "include" / "llvm" / "BinaryFormat" / "ELFRelocs"
    # the corpus root (holding lib/Target) and one target folder are accepted too
    assert [d.name for d in find_target_dirs(TOY)[0]] == ["Kite", "Lark", "Wren"]
    assert [d.name for d in find_target_dirs(TOY_TARGETS / "Lark")[0]] == ["Lark"]

    tt = load_target(TOY_TARGETS / "Lark", relocs)
    assert not tt.failed_files
    by_role = {f.role: f for f in tt.functions}
    rt = by_role["ELFObjectWriter::getRelocType"]
    assert rt.qualified_name == "LarkELFObjectWriter::getRelocType" and not rt.in_class
    assert "Lark::fixup_lark_hi16" in rt.identifiers and "ELF::R_LARK_HI16" in rt.identifiers
    assert "Ctx" not in rt.identifiers and "Fixup" not in rt.identifiers
    assert rt.statements[0] == "unsigned Kind = Fixup . getTargetKind ( ) ;"
    assert rt.signature.startswith("unsigned LarkELFObjectWriter::getRelocType(MCContext &Ctx")
    nfk = by_role["AsmBackend::getNumFixupKinds"]
    assert nfk.in_class and nfk.qualified_name == "LarkAsmBackend::getNumFixupKinds"
    assert by_role["adjustFixupValue"].class_name is None
    assert "createELFObjectWriter" in by_role and "RegisterInfo::RegisterInfo" in by_role

    kinds = {}
    for a in tt.attributes:
        kinds.setdefault(a.kind, set()).add(a.name)
    assert {"R0", "R7"} <= kinds["register"]
    assert kinds["register_class"] == {"GPR", "SPR"}
    assert {"FormatR", "FormatI", "FormatB", "LarkInst"} <= kinds["instruction_format"]
    assert {"ADD", "ADDI", "BR"} <= kinds["instruction"]
    assert kinds["subtarget_feature"] == {"FeatureMul", "FeatureDiv", "FeatureRelax"}
    assert {"CC_Lark", "RetCC_Lark", "CSR_Lark"} <= kinds["calling_convention"]
    assert kinds["fixup"] == {"fixup_lark_hi16", "fixup_lark_lo16", "fixup_lark_pc16", "fixup_lark_branch",
                              "fixup_lark_call"}
    assert "R_LARK_BRANCH" in kinds["relocation"] and not any("WREN" in r for r in kinds["relocation"])
    gpr = next(a for a in tt.attributes if a.name == "GPR")
    assert {"R4", "R0"} <= set(gpr.refs)
    div = next(a for a in tt.attributes if a.name == "FeatureDiv")
    assert "FeatureMul" in div.refs


def test_files_that_fail_to_parse_are_listed(tmp_path):
    root = copy_toy(tmp_path / "llvm")
    bad = root / "lib" / "Target" / "Kite" / "KiteBroken.cpp"
    bad.write_text("int ok() { return 1; }\nint broken( { return ; ) }\n")
    tt = load_target(root / "lib" / "Target" / "Kite", root / "include" / "llvm" / "BinaryFormat" / "ELFRelocs")
    failed = {f.path: f for f in tt.failed_files}
    assert "KiteBroken.cpp" in failed
    assert failed["KiteBroken.cpp"].error.startswith("KiteBroken.cpp:2:")
    assert any(f.name == "ok" for f in tt.functions)  # the rest of the file still counts


def test_bad_input_paths(tmp_path):
    from retrieval.backend.index import ingest_targets
    from skills.store import Store

    st = Store(tmp_path / "store")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BackendInputError, match="no LLVM targets"):
        ingest_targets(empty, st)
    with pytest.raises(BackendInputError, match="does not exist"):
        ingest_targets(tmp_path / "nope", st)
    with pytest.raises(BackendInputError, match="unknown target"):
        ingest_targets(TOY_TARGETS, st, targets=["Nope"])
    # a target whose every source is unparsable
    root = tmp_path / "junk" / "lib" / "Target" / "Junk"
    root.mkdir(parents=True)
    (root / "Junk.td").write_text("def { oops <<<\n")
    (root / "Junk.cpp").write_text("}}}} ((( int\n")
    (root / "CMakeLists.txt").write_text("add_llvm_target(Junk)\n")
    with pytest.raises(BackendInputError, match="Junk has no parsable sources"):
        ingest_targets(tmp_path / "junk" / "lib" / "Target", st)
    assert st.scalar("SELECT count(*) FROM targets") == 0  # nothing half-written


def test_ingest_is_incremental_and_atomic(tmp_path):
    from retrieval.backend.index import ingest_targets
    from skills.store import Store

    root = copy_toy(tmp_path / "llvm")
    st = Store(tmp_path / "store")
    r1 = ingest_targets(root / "lib" / "Target", st)
    assert {t["status"] for t in r1.targets} == {"indexed"}
    n = st.scalar("SELECT count(*) FROM functions")
    r2 = ingest_targets(root / "lib" / "Target", st)
    assert {t["status"] for t in r2.targets} == {"unchanged"}
    assert st.scalar("SELECT count(*) FROM functions") == n
    f = root / "lib" / "Target" / "Kite" / "KiteRegisterInfo.cpp"
    f.write_text(f.read_text() + "\nint kiteExtraHelper() { return 42; }\n")
    r3 = ingest_targets(root / "lib" / "Target", st)
    status = {t["target"]: t["status"] for t in r3.targets}
    assert status == {"Kite": "indexed", "Lark": "unchanged", "Wren": "unchanged"}
    assert st.scalar("SELECT count(*) FROM functions") == n + 1
    assert st.scalar("SELECT count(*) FROM target_attributes WHERE target = 'Kite' AND kind = 'alias'") >= 1
