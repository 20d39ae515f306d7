"""Retrieval, fork-and-adapt, prompts, the LLM path (mocked) and the CLI, on the toy targets."""
import json
import shutil

import pytest
from typer.testing import CliRunner

from _backend_support import TOY_TARGETS, gate_skip_reason, indexed_toy_store
from cli import app
from corpora.backends.tree import BackendInputError, parse_definition
from skills.store import Store

runner = CliRunner()


@pytest.fixture(scope="module")
def toy_store(tmp_path_factory):
    # a private copy of the session store, so tests may write (gate cache, models) freely
    dst = tmp_path_factory.mktemp("gen") / "store"
    shutil.copytree(indexed_toy_store(), dst)
    return dst


def test_target_level_similarity_prefers_the_sibling(toy_store):
    from retrieval.backend.search import BackendIndex

    idx = BackendIndex(Store(toy_store))
    sims = idx.target_similarity("Wren")
    assert set(sims) == {"Lark", "Kite"}
    assert sims["Lark"] > sims["Kite"]


def test_code_search_finds_the_same_role(toy_store):
    from retrieval.backend.search import BackendIndex

    st = Store(toy_store)
    idx = BackendIndex(st)
    rows = [r for r in idx.rows if r["target"] == "Wren" and r["role"] in
            ("ELFObjectWriter::getRelocType", "RegisterInfo::getReservedRegs", "AsmBackend::getFixupKindInfo")]
    assert len(rows) == 3
    for r in rows:
        doc, tv, gv = idx.stored_query(r["func_id"])
        res = idx.search(doc, tv, gv, query_target="Wren", k=5)
        assert set(res) == {"bm25", "text", "graph", "fused", "fused_function_level"}
        assert all(h.target != "Wren" for hits in res.values() for h in hits)
        assert res["fused"][0].role == r["role"], (r["role"], [h.role for h in res["fused"]])
        assert res["fused"][0].ranks["fused"] == 1


def test_fork_and_adapt_maps_identifiers_onto_the_target(toy_store):
    from corpora.backends.profile import load_profile
    from retrieval.backend.adapt import adapt

    st = Store(toy_store)
    lark, wren, kite = (load_profile(st, t) for t in ("Lark", "Wren", "Kite"))
    src = st.query("SELECT signature || ' ' || body AS text, identifiers FROM functions "
                   "WHERE target = 'Lark' AND role = 'ELFObjectWriter::getRelocType'")[0]
    a = adapt(src["text"], src["identifiers"], lark, wren)
    assert "Lark" not in a.text and "LARK" not in a.text
    assert "case Wren::fixup_wren_pc16:" in a.text and "ELF::R_WREN_HI16" in a.text
    # Lark's call fixup has no counterpart in Wren: its case arm is dropped, not renamed
    assert "fixup_wren_call" not in a.text and "R_WREN_CALL" not in a.text
    how = {m.source: m.how for m in a.mappings}
    assert how["Lark::fixup_lark_hi16"] == "rename" and how["Lark::fixup_lark_call"] == "unmapped"
    assert 0.5 < a.mappability < 1.0
    # onto Kite nothing renames: the matches go by kind and name similarity, one to one
    k = adapt(src["text"], src["identifiers"], lark, kite)
    targets = [m.target for m in k.mappings if m.how == "match"]
    assert len(targets) == len(set(targets)) and targets
    assert all(m.kind in ("fixup", "relocation") for m in k.mappings if m.how == "match")


def test_rename_follows_the_naming_conventions():
    from corpora.backends.profile import TargetProfile
    from retrieval.backend.adapt import rename_target

    gpu = TargetProfile("AMDGPU", ["AMDGPU", "R600", "GCN", "SI"], "AMDGPU")
    lark = TargetProfile("Lark", ["LARK", "Lark"], "Lark")
    wren = TargetProfile("Wren", ["WREN", "Wren"], "Wren")
    # a short alias inside an upper-case word is no prefix; as a CamelCase prefix or namespace it is
    assert rename_target("ISD::SIGN_EXTEND_INREG", gpu, wren) == "ISD::SIGN_EXTEND_INREG"
    assert rename_target("SIRegisterInfo", gpu, wren) == "WrenRegisterInfo"
    assert rename_target("SIISD::CALL", gpu, wren) == "WrenISD::CALL"
    # upper case where the name is upper case, the target's spelling elsewhere
    assert rename_target("ELF::R_LARK_32", lark, wren) == "ELF::R_WREN_32"
    assert rename_target("ELF::R_AMDGPU_ABS32", gpu, wren) == "ELF::R_WREN_ABS32"
    assert rename_target("AMDGPU::VCC", gpu, wren) == "Wren::VCC"


def test_names_outside_the_source_namespaces_are_not_its_attributes():
    from corpora.backends.profile import TargetProfile
    from retrieval.backend.adapt import adapt

    lark = TargetProfile("Lark", ["LARK", "Lark"], "Lark", by_kind={"instruction": ["MUL", "ADD"]},
                         kind_of={"MUL": "instruction", "ADD": "instruction"}, namespaces={"Lark"})
    wren = TargetProfile("Wren", ["WREN", "Wren"], "Wren", by_kind={"instruction": ["MUL_rr"]},
                         kind_of={"MUL_rr": "instruction"}, namespaces={"Wren"})
    text = """SDValue lower(SDValue Op) {
  switch (Op.getOpcode()) {
  case ISD::MUL:
    return emit(Op, Lark::MUL);
  case ISD::ADD:
    return emit(Op, Lark::ADD);
  }
  return Op;
}"""
    a = adapt(text, ["ISD::MUL", "Lark::MUL", "ISD::ADD", "Lark::ADD"], lark, wren)
    by = {m.source: m for m in a.mappings}
    # LLVM's ISD nodes stay as written although Lark has instructions of those names
    assert by["ISD::MUL"].how == by["ISD::ADD"].how == "generic" and by["ISD::MUL"].kind is None
    assert "case ISD::MUL:" in a.text and "case ISD::ADD:" in a.text
    # Lark's own instructions map by kind (MUL -> MUL_rr) or stay unmapped (ADD)
    assert by["Lark::MUL"].how == "match" and by["Lark::MUL"].target == "Wren::MUL_rr"
    assert by["Lark::ADD"].how == "unmapped" and by["Lark::ADD"].kind == "instruction"


def test_callee_saved_sets_map_with_their_generated_names():
    from corpora.backends.profile import TargetProfile
    from prompts.backend.repair import NamePool
    from retrieval.backend.adapt import adapt

    cc = "calling_convention"
    lark = TargetProfile("Lark", ["LARK", "Lark"], "Lark", by_kind={cc: ["CC_Lark", "RetCC_Lark", "CSR_Lark"]},
                         kind_of={"CC_Lark": cc, "RetCC_Lark": cc, "CSR_Lark": cc})
    kite = TargetProfile("Kite", ["KITE", "Kite"], "Kite", by_kind={cc: ["CC_Kite", "RetCC_Kite", "CSR_Std"]},
                         kind_of={"CC_Kite": cc, "RetCC_Kite": cc, "CSR_Std": cc})
    wren = TargetProfile("Wren", ["WREN", "Wren"], "Wren", by_kind={cc: ["CC_Wren", "RetCC_Wren", "CSR_Wren"]},
                         kind_of={"CC_Wren": cc, "RetCC_Wren": cc, "CSR_Wren": cc})
    text = """const MCPhysReg *LarkRegisterInfo::getCalleeSavedRegs(const MachineFunction *MF) const {
  return CSR_Lark_SaveList;
}"""
    a = adapt(text, ["LarkRegisterInfo", "MCPhysReg", "MachineFunction", "CSR_Lark_SaveList"], lark, wren)
    by = {m.source: m for m in a.mappings}
    # TableGen's CSR_X_SaveList of a CalleeSavedRegs record: renamed onto T's record of that kind
    assert by["CSR_Lark_SaveList"].how == "rename" and by["CSR_Lark_SaveList"].kind == cc
    assert "return CSR_Wren_SaveList;" in a.text
    # a record T lacks under the renamed name is matched by its tokens, the suffix kept
    mask = adapt("const uint32_t *f() { return CSR_Std_RegMask; }", ["CSR_Std_RegMask"], kite, wren)
    assert mask.mappings[0].how == "match" and "return CSR_Wren_RegMask;" in mask.text
    # a suffix on a name that is no record of the source is no generated name
    other = adapt("int f() { return Foo_RegMask; }", ["Foo_RegMask"], kite, wren)
    assert other.mappings[0].how == "unmapped" and other.mappings[0].kind is None
    assert wren.knows("CSR_Wren_RegMask") and wren.knows("CSR_Wren_SaveList") and not wren.knows("CSR_Lark_RegMask")
    assert {"CSR_Wren_SaveList", "CSR_Wren_RegMask"} <= wren.generated_names()
    # the gate repair's names: T's generated CSR names are there without reading any source
    assert {"CSR_Wren_SaveList", "CSR_Wren_RegMask"} <= NamePool.for_target(wren).plain


def test_a_class_maps_onto_the_targets_class_of_the_same_base():
    from corpora.backends.profile import TargetProfile
    from retrieval.backend.adapt import adapt

    lark = TargetProfile("Lark", ["LARK", "Lark"], "Lark",
                         classes={"LarkMachineFunctionInfo": ("MachineFunctionInfo",), "LarkPeephole": ("MachineFunctionPass",),
                                  "LarkInstrInfo": ("GenInstrInfo",)})
    wren = TargetProfile("Wren", ["WREN", "Wren"], "Wren",
                         classes={"WrenFunctionInfo": ("MachineFunctionInfo",), "WrenBranchFinalize": ("MachineFunctionPass",),
                                  "WrenExpand": ("MachineFunctionPass",), "WrenInstrInfo": ("GenInstrInfo",)})
    text = """MachineFunctionInfo *LarkTargetMachine::createMachineFunctionInfo(BumpPtrAllocator &Allocator, const Function &F,
    const TargetSubtargetInfo *STI) const {
  return LarkMachineFunctionInfo::create<LarkMachineFunctionInfo>(Allocator, F, STI);
}"""
    # the ingest lists the qualified call only: the template argument follows its class
    a = adapt(text, ["LarkTargetMachine", "LarkMachineFunctionInfo::create"], lark, wren)
    by = {m.source: m for m in a.mappings}
    # the one class of T deriving from the same LLVM base, though its name differs
    assert by["LarkMachineFunctionInfo"].how == "match" and by["LarkMachineFunctionInfo"].target == "WrenFunctionInfo"
    assert "return WrenFunctionInfo::create<WrenFunctionInfo>(Allocator, F, STI);" in a.text
    # several classes of T share the base: ambiguous, left renamed and unmapped
    b = adapt("void f() { initializeLarkPeepholePass(); LarkPeephole P; }", ["LarkPeephole"], lark, wren)
    assert b.mappings[0].how == "unmapped" and "WrenPeephole P;" in b.text
    # a class T has under the renamed name keeps that name, never matched elsewhere
    c = adapt("const LarkInstrInfo *TII;", ["LarkInstrInfo"], lark, wren)
    assert c.mappings[0].how != "match" and c.mappings[0].target == "WrenInstrInfo"


def test_a_name_t_lacks_maps_onto_ts_declaration_of_the_same_family():
    from corpora.backends.profile import TargetProfile
    from retrieval.backend.adapt import adapt

    lark = TargetProfile("Lark", ["LARK", "Lark"], "Lark", classes={"LarkRegisterBankInfo": ("GenRegisterBankInfo",)})
    wren = TargetProfile("Wren", ["WREN", "Wren"], "Wren",
                         declared={"getTheWren32Target", "getTheWren64Target", "createWrenBranchFinalizePass",
                                   "createWrenExpandPseudosPass", "WrenRegisterInfo", "WrenTargetStreamer"},
                         classes={"WrenRegisterInfo": ("GenRegisterInfo",)})
    text = """void LLVMInitializeLarkTarget() {
  RegisterTargetMachine<LarkTargetMachine> X(getTheLarkTarget());
  addPass(createLarkBranchTargetsPass());
  const LarkRegisterBankInfo *RBI = nullptr;
  LarkELFStreamer S;
}"""
    a = adapt(text, ["LarkTargetMachine", "getTheLarkTarget", "createLarkBranchTargetsPass", "LarkRegisterBankInfo",
                     "LarkELFStreamer"], lark, wren)
    by = {m.source: m for m in a.mappings}
    # same first and last word once the target's name is out: T's declaration of that family
    assert by["getTheLarkTarget"].how == "match" and by["getTheLarkTarget"].kind == "declaration"
    assert by["getTheLarkTarget"].target == "getTheWren32Target"
    assert by["createLarkBranchTargetsPass"].target == "createWrenBranchFinalizePass"
    assert "X(getTheWren32Target());" in a.text and "addPass(createWrenBranchFinalizePass());" in a.text
    # a class goes by its LLVM base, not its name (register *bank* info is no register info);
    # another family (an ELF streamer is no target streamer): left renamed and unmapped
    assert by["LarkRegisterBankInfo"].how == "unmapped" and "const WrenRegisterBankInfo *RBI" in a.text
    assert by["LarkELFStreamer"].how == "unmapped"
    # T has the renamed name: renamed, never matched elsewhere; one T name per source name
    b = adapt("getTheLarkTarget(); getTheLark64Target();", ["getTheLarkTarget", "getTheLark64Target"], lark,
              wren.__class__("Wren", ["WREN", "Wren"], "Wren", declared={"getTheWren64Target", "getTheWren32Target"}))
    by = {m.source: m.target for m in b.mappings}
    assert by["getTheLark64Target"] == "getTheWren64Target" and by["getTheLarkTarget"] == "getTheWren32Target"


def test_fit_definition_moves_between_class_and_out_of_line():
    from retrieval.backend.adapt import fit_definition

    inline = "unsigned getNumFixupKinds() const override { return 3; }"
    out = fit_definition(inline, "WrenAsmBackend::getNumFixupKinds", in_class=False)
    assert out == "unsigned WrenAsmBackend::getNumFixupKinds() const  { return 3; }"
    back = fit_definition(out, "WrenAsmBackend::getNumFixupKinds", in_class=True)
    assert back.startswith("unsigned getNumFixupKinds() const")


def test_generate_fork_adapt_with_gate(toy_store):
    from prompts.backend.generate import GenerateRequest, generate

    res = generate(Store(toy_store), GenerateRequest(target="Wren", role="getRelocType", k=2,
                                                     gate=gate_skip_reason() is None))
    assert res["role"] == "ELFObjectWriter::getRelocType"
    assert res["candidates"][0]["target"] == "Lark"  # the sibling target ranks first
    stmts, _ = parse_definition(res["code"])
    assert "return ELF :: R_WREN_BRANCH ;" in stmts
    assert res["lint"] == []
    if gate_skip_reason() is None:
        assert res["gate"]["passed"] is True, res["gate"]
        assert res["gate"]["host"] == "Wren/MCTargetDesc/WrenELFObjectWriter.cpp"


def test_prompt_only_holds_examples_and_attributes(toy_store):
    from prompts.backend.generate import GenerateRequest, generate

    res = generate(Store(toy_store), GenerateRequest(target="Kite", role="ELFObjectWriter::getRelocType", k=2,
                                                     prompt_only=True))
    p = res["prompt"]
    assert "code" not in res
    assert "**Kite**" in p and "KiteELFObjectWriter::getRelocType" in p
    assert "`fixup_kite_pcrel_7`" in p and "`R_KITE_ABS_HI8`" in p  # T's relevant attributes
    assert "### 1." in p and "### 2." in p and "LarkELFObjectWriter::getRelocType" in p
    assert "{{" not in p


def test_llm_path_with_mock_response(toy_store):
    from prompts.backend.generate import GenerateRequest, generate

    reply = ("Here it is:\n```cpp\nunsigned KiteELFObjectWriter::getRelocType(MCContext &Ctx, const MCValue &Target,"
             " const MCFixup &Fixup, bool IsPCRel) const {\n  switch ((unsigned)Fixup.getKind()) {\n"
             "  case FK_Data_1: return ELF::R_KITE_8;\n  default: return ELF::R_MIPS_32;\n  }\n}\n```\n")
    res = generate(Store(toy_store), GenerateRequest(target="Kite", role="getRelocType", strategy="llm",
                                                     model="openai/mock", gate=False,
                                                     llm_kwargs={"mock_response": reply}))
    assert res["code"].lstrip().startswith("unsigned getRelocType(")  # Kite defines it inside its class
    assert [w["name"] for w in res["lint"]] == ["ELF::R_MIPS_32"]
    assert res["tokens"]["calls"] >= 1 and res["prompt"]


@pytest.mark.skipif(gate_skip_reason() is not None, reason=str(gate_skip_reason()))
def test_repair_loop_feeds_diagnostics_back(toy_store):
    import litellm

    from prompts.backend.generate import GenerateRequest, generate

    seen = []

    class Scripted(litellm.CustomLLM):
        def completion(self, *args, **kwargs):
            prompt = kwargs["messages"][-1]["content"]
            seen.append(prompt)
            body = "return Kite::SPX;" if len(seen) == 1 else "return Kite::SP;"
            return litellm.completion(model="openai/x", messages=kwargs["messages"],
                                      mock_response=f"```cpp\nRegister KiteRegisterInfo::getFrameRegister("
                                                    f"const MachineFunction &MF) const {{\n  {body}\n}}\n```")

    litellm.custom_provider_map = [{"provider": "scripted", "custom_handler": Scripted()}]
    try:
        res = generate(Store(toy_store), GenerateRequest(target="Kite", role="RegisterInfo::getFrameRegister",
                                                         strategy="llm", model="scripted/any", repair=2))
    finally:
        litellm.custom_provider_map = []
    assert len(seen) == 2
    assert "no member named 'SPX'" in seen[1] and "line 2" in seen[1]
    assert res["gate"]["passed"] is True and "Kite::SP;" in res["code"]
    assert [a["attempt"] for a in res["attempts"]] == [0, 1]


def test_generate_bad_input(toy_store):
    from prompts.backend.generate import GenerateRequest, generate

    st = Store(toy_store)
    with pytest.raises(BackendInputError, match="unknown role 'getRelocTyp'.*did you mean"):
        generate(st, GenerateRequest(target="Wren", role="getRelocTyp"))
    with pytest.raises(BackendInputError, match="unknown target 'Nope'"):
        generate(st, GenerateRequest(target="Nope", role="getRelocType"))
    with pytest.raises(BackendInputError, match="needs --model"):
        generate(st, GenerateRequest(target="Wren", role="getRelocType", strategy="llm"))


# ---------------------------------------------------------------- CLI
def test_cli_generate_json_and_errors(toy_store):
    r = runner.invoke(app, ["backend", "generate", "--target", "Lark", "--function", "getReservedRegs",
                            "--store", str(toy_store), "--json", "--no-gate"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["role"] == "RegisterInfo::getReservedRegs" and "Lark::R0" in out["code"]
    r = runner.invoke(app, ["backend", "generate", "--target", "Lark", "--function", "noSuchRole",
                            "--store", str(toy_store)])
    assert r.exit_code == 2 and "unknown role 'noSuchRole'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = runner.invoke(app, ["backend", "generate", "--target", "Lark", "--function", "getRelocType",
                            "--store", str(toy_store), "--prompt-only"])
    assert r.exit_code == 0 and "## Output" in r.stdout


def test_cli_search(toy_store, tmp_path):
    f = tmp_path / "q.cpp"
    f.write_text("BitVector FooRegisterInfo::getReservedRegs(const MachineFunction &MF) const {\n"
                 "  BitVector Reserved(getNumRegs());\n  Reserved.set(Foo::R0);\n  return Reserved;\n}\n")
    r = runner.invoke(app, ["backend", "search", "--code", str(f), "--store", str(toy_store), "--json", "--k", "3"])
    assert r.exit_code == 0, r.output
    hits = json.loads(r.stdout)
    assert hits[0]["role"] == "RegisterInfo::getReservedRegs"
    r = runner.invoke(app, ["backend", "search", "--code", str(tmp_path / "none.cpp"), "--store", str(toy_store)])
    assert r.exit_code == 2


def test_cli_index_bad_path(tmp_path):
    r = runner.invoke(app, ["backend", "index", str(tmp_path), "--store", str(tmp_path / "s")])
    assert r.exit_code == 2 and "no LLVM targets" in r.stderr


def test_prune_cases_keeps_fall_through_bodies():
    from retrieval.backend.adapt import prune_cases

    code = """unsigned f(unsigned K) {
  switch (K) {
  case T::a:
  case T::dead:
    return 1;
  case T::dead2:
    return 2;
  default:
    return 0;
  }
}"""
    out = prune_cases(code, {"T::dead", "T::dead2"})
    assert "dead" not in out
    assert "case T::a:\n    return 1;" in out and "return 2;" not in out and "default:" in out


def test_cli_index_end_to_end(tmp_path):
    store = tmp_path / "s"
    r = runner.invoke(app, ["backend", "index", str(TOY_TARGETS), "--targets", "Lark,Kite", "--store", str(store),
                            "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert [t["target"] for t in rep["targets"]] == ["Kite", "Lark"]
    assert rep["n_shared_role_functions"] > 10 and rep["failed_files"] == []
    assert rep["models"]["func_gnn"]["status"] == "trained"
    r = runner.invoke(app, ["backend", "index", str(TOY_TARGETS), "--targets", "Lark,Kite", "--store", str(store)])
    assert r.exit_code == 0 and "unchanged" in r.stdout and "model backend-func-gnn__all: unchanged" in r.stdout


def test_prune_cases_drops_groups_of_dead_labels_with_their_body():
    from retrieval.backend.adapt import prune_cases

    code = """unsigned f(unsigned K) {
  switch (K) {
  case T::dead1:
  case T::dead2:
    return 7;
  case T::live:
    return 8;
  }
  return 0;
}"""
    out = prune_cases(code, {"T::dead1", "T::dead2"})
    assert "return 7;" not in out and "dead" not in out and "case T::live:\n    return 8;" in out


# ---------------------------------------------------------------- roles from what the target's classes implement
_WINCOFF = """#include "llvm/MC/MCWinCOFFObjectWriter.h"
using namespace llvm;
namespace {
class {T}WinCOFFObjectWriter : public MCWinCOFFObjectTargetWriter {
public:
  unsigned getRelocType(MCContext &Ctx, const MCValue &Target, const MCFixup &Fixup, bool IsCrossSection,
                        const MCAsmBackend &MAB) const override {
    return Fixup.getKind() == FK_Data_4 ? 1u : 0u;
  }
};
} // namespace
"""


def test_roles_follow_the_classes_a_target_implements(tmp_path):
    """Wren's ELF writer renamed WrenObjectWriter (as Xtensa's is) keeps the ELF writer's role;
    with a WinCOFF writer in Lark and Wren, a bare `getRelocType` is resolved by each target's
    own code: Kite implements only the ELF one (LoongArch's case), Lark and Wren both."""
    from prompts.backend.generate import resolve_role
    from retrieval.backend.index import ingest_targets
    from retrieval.backend.search import BackendIndex

    root = tmp_path / "Target"
    shutil.copytree(TOY_TARGETS, root)
    ow = root / "Wren" / "MCTargetDesc" / "WrenELFObjectWriter.cpp"
    ow.write_text(ow.read_text().replace("WrenELFObjectWriter", "WrenObjectWriter")
                  .replace("createWrenObjectWriter", "createWrenELFObjectWriter"))
    for t in ("Lark", "Wren"):
        (root / t / "MCTargetDesc" / f"{t}WinCOFFObjectWriter.cpp").write_text(_WINCOFF.replace("{T}", t))
    st = Store(tmp_path / "s")
    ingest_targets(root, st)
    roles = {r["qualified_name"]: r["role"] for r in st.query("SELECT qualified_name, role FROM functions "
                                                             "WHERE name = 'getRelocType'")}
    assert roles["WrenObjectWriter::getRelocType"] == "ELFObjectWriter::getRelocType"
    assert roles["LarkELFObjectWriter::getRelocType"] == "ELFObjectWriter::getRelocType"
    assert roles["LarkWinCOFFObjectWriter::getRelocType"] == "WinCOFFObjectWriter::getRelocType"
    idx = BackendIndex(st)
    assert resolve_role(idx, "getRelocType", "Kite") == "ELFObjectWriter::getRelocType"
    with pytest.raises(BackendInputError, match=r"ambiguous \(Lark implements 2 of them\).*ELFObjectWriter"):
        resolve_role(idx, "getRelocType", "Lark")
    with pytest.raises(BackendInputError, match="ambiguous: ELFObjectWriter::getRelocType, WinCOFF"):
        resolve_role(idx, "getRelocType")
    # a target that has not written the function yet: its declared class decides
    st.query("DELETE FROM functions WHERE target = 'Kite' AND name = 'getRelocType'")
    assert resolve_role(BackendIndex(st), "getRelocType", "Kite") == "ELFObjectWriter::getRelocType"
    # idempotent, and undone when the reason goes away (Lark and Kite renamed their writers too)
    from retrieval.backend.index import canonical_roles

    canonical_roles(st)
    assert st.scalar("SELECT role FROM functions WHERE qualified_name = 'WrenObjectWriter::getRelocType'") \
        == "ELFObjectWriter::getRelocType"
    for t in ("Lark", "Kite"):
        f = root / t / "MCTargetDesc" / f"{t}ELFObjectWriter.cpp"
        f.write_text(f.read_text().replace(f"{t}ELFObjectWriter", f"{t}ObjectWriter")
                     .replace(f"create{t}ObjectWriter", f"create{t}ELFObjectWriter"))
    ingest_targets(root, st)
    assert {r["role"] for r in st.query("SELECT role FROM functions WHERE name = 'getRelocType' AND "
                                        "qualified_name NOT LIKE '%WinCOFF%'")} == {"ObjectWriter::getRelocType"}


def test_reindex_of_one_changed_target_keeps_the_model(tmp_path):
    """One changed function of ~60 shared ones: the function GNN is kept and embeds the changed
    file's functions (their ids move with the bytes before them); --retrain trains again;
    progress lines with an ETA go through the log."""
    root = tmp_path / "Target"
    shutil.copytree(TOY_TARGETS, root)
    store = tmp_path / "s"
    r = runner.invoke(app, ["backend", "index", str(root), "--store", str(store), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["models"]["func_gnn"]["status"] == "trained"
    f = root / "Kite" / "KiteRegisterInfo.cpp"
    f.write_text(f.read_text().replace("Reserved.set(Kite::", "Reserved.set( Kite::", 1).replace(
        "BitVector Reserved(getNumRegs());", "BitVector Reserved(getNumRegs());\n  (void)MF;", 1))
    r = runner.invoke(app, ["backend", "index", str(root), "--store", str(store)])
    assert r.exit_code == 0, r.output
    assert "Kite         indexed" in r.stdout and "model backend-func-gnn__all: kept (" in r.stdout
    assert "of its training functions changed (< 20%)" in r.stdout
    # one of the toy's three targets is a third of the target GNN's training set (one of LLVM's 24 would not be)
    assert "backend-target-gnn__all: trained (1 training targets new, changed or gone (33% >= 20%))" in r.stdout
    import re

    m = re.search(r"embedding (\d+) new or changed function graphs: (\d+)/\d+ \(100%\)", r.stderr)
    assert m and 1 <= int(m.group(1)) == int(m.group(2)) <= 6, r.stderr  # progress, at its end
    from retrieval.backend.search import BackendIndex

    idx = BackendIndex(Store(store))
    row = next(x for x in idx.rows if x["target"] == "Kite" and x["role"] == "RegisterInfo::getReservedRegs")
    assert "(void)MF;" in row["body"] and idx.graph[1][idx.pos[row["func_id"]]]  # its vector is there
    r = runner.invoke(app, ["backend", "index", str(root), "--store", str(store), "--retrain"])
    assert r.exit_code == 0 and "model backend-func-gnn__all: trained (retrain requested)" in r.stdout
    assert "model backend-target-gnn__all: trained (retrain requested)" in r.stdout
    assert "ETA" in r.stderr or "elapsed" in r.stderr


def test_progress_lines_and_eta():
    import io

    from retrieval.progress import Progress, format_seconds

    assert format_seconds(5) == "5s" and format_seconds(125) == "2m05s" and format_seconds(7300) == "2h01m"
    lines: list[str] = []
    bar = Progress("embedding", 10, log=lines.append, interval=0.0, stream=io.StringIO(), tty=False)
    for _ in range(4):
        bar.advance(2)
    bar.close()
    assert lines[0].startswith("embedding: 2/10 (20%), ") and "ETA" in lines[0]
    assert lines[-1].startswith("embedding: 10/10 (100%)") and "ETA" not in lines[-1]
    term = io.StringIO()
    bar = Progress("parsing", 4, stream=term, tty=True)
    bar.advance(4)
    bar.close()
    assert term.getvalue().startswith("\r[") and "#" * 24 in term.getvalue() and term.getvalue().endswith("\n")


def test_fuse_adds_what_most_other_donors_agree_on():
    from retrieval.backend.fuse import fuse

    fork = ("unsigned T::f(unsigned K) const {\n  unsigned V = K + 1;\n  switch (K) {\n  case 1:\n    return V;\n"
            "  }\n  return 0;\n}")

    def other(top: str, mid: str, case: str = "") -> str:
        return (f"unsigned T::f(unsigned K) const {{\n  {top}\n  unsigned V = K + 1;\n  {mid}\n  switch (K) {{\n"
                f"  case 1:\n    {case}\n    return V;\n  }}\n  return 0;\n}}")

    others = [other('assert(K != 0 && "bad");', "(void)V;", "V += 2;"),
              other('assert(K != 0 && "bad");', "(void)V;", "Foo(Bar);"),      # Bar: the fork has no such name
              other('assert(K != 0 && "bad");', "return 7;", "V += 2;"),       # control flow is never added
              other("", "unsigned W = V;")]                                     # one donor only
    res = fuse(fork, others)
    stmts = parse_definition(res.code)[0]
    assert stmts == ['assert ( K != 0 && "bad" ) ;', "unsigned V = K + 1 ;", "( void ) V ;", "switch ( K )",
                     "case 1 :", "V += 2 ;", "return V ;", "return 0 ;"]
    assert '  assert(K != 0 && "bad");\n  unsigned V' in res.code and "case 1:\n    V += 2;\n    return V;" in res.code
    assert [(a["statement"], a["votes"], a["of"]) for a in res.added] == [
        ('assert ( K != 0 && "bad" ) ;', 3, 4), ("( void ) V ;", 2, 4), ("V += 2 ;", 2, 4)]
    assert fuse(fork, others, min_share=0.75).code.count("\n") == fork.count("\n") + 1  # only the assert: 3 of 4
    assert fuse(fork, []).code == fork and fuse("int x;", others).code == "int x;"
