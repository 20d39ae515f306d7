"""Backend lineages on the toy targets: operators, the batched compile-gate checker (real
clang-15), lifting and merging into backend skills, `skills lineage`, and skill-guided generation."""
import json
import shutil
from contextlib import contextmanager

import pytest
from typer.testing import CliRunner

from _backend_support import TOY, TOY_TARGETS, gate_skip_reason, indexed_toy_store
from cli import app
from corpora.backends.tree import load_target, parse_definition
from mining.backend.operators import TargetNames, propose_edits
from skills.store import Store

runner = CliRunner()
needs_clang = pytest.mark.skipif(gate_skip_reason() is not None, reason=str(gate_skip_reason()))
RELOCS = TOY / "include" / "llvm" / "BinaryFormat" / "ELFRelocs"


@contextmanager
def opened(root):
    st = Store(root)
    try:
        yield st
    finally:
        st.close()


@pytest.fixture(autouse=True)
def _release_store_connections():
    # CLI commands open the store (read-only or not) and drop it on return; duckdb refuses a second
    # connection of another kind to the same file while one lives, so collect them between tests
    yield
    import gc

    gc.collect()


def _lark():
    tt = load_target(TOY_TARGETS / "Lark", RELOCS)
    return tt, TargetNames.from_tree(tt)


def _text(tt, role):
    f = next(f for f in tt.functions if f.role == role)
    return (TOY_TARGETS / tt.target / f.path).read_bytes()[f.start_byte:f.end_byte].decode()


# ---------------------------------------------------------------- operators (no gate)
def test_operators_on_get_reloc_type_walk_to_the_skeleton():
    tt, names = _lark()
    text = _text(tt, "ELFObjectWriter::getRelocType")
    edits = propose_edits(text, names)
    ops = [e.operator for e in edits]
    assert ops == sorted(ops, key=["drop_case_label", "drop_case_arm", "drop_target_statement", "drop_if_branch",
                                   "switch_to_default"].index)  # priority order
    arms = [e for e in edits if e.operator == "drop_case_arm"]
    assert len(arms) == 6 and not any("default" in e.fragment for e in arms)
    assert arms[0].anchor["enclosing"] == ["if ( IsPCRel )", "switch ( Kind )"]
    assert arms[0].target_identifiers == ["Lark::fixup_lark_pc16", "ELF::R_LARK_PC16"]
    # formatting outside the edit is kept byte for byte
    out = arms[0].apply(text)
    assert out == text.replace("    case Lark::fixup_lark_pc16:\n      return ELF::R_LARK_PC16;\n", "")
    state = text
    for _ in range(40):
        es = propose_edits(state, names)
        if not es:
            break
        state = es[0].apply(state)
    stmts, _ = parse_definition(state)
    assert stmts == ["unsigned Kind = Fixup . getTargetKind ( ) ;",
                     'Ctx . reportError ( Fixup . getLoc ( ) , "unsupported relocation type" ) ;',
                     "return ELF :: R_LARK_NONE ;"]
    assert "\n  return ELF::R_LARK_NONE;\n}" in state  # the default path re-indented to the switch's level


def test_case_operators_respect_fall_through_and_labels():
    tt, names = _lark()
    code = """unsigned f(unsigned K) {
  switch (K) {
  case Lark::fixup_lark_hi16:
  case Lark::fixup_lark_lo16:
    return 1;
  case Lark::fixup_lark_pc16:
    g();
  case Lark::fixup_lark_branch:
    return 2;
  default:
    return 0;
  }
}"""
    edits = propose_edits(code, names)
    labels = [e for e in edits if e.operator == "drop_case_label"]
    assert [e.fragment for e in labels] == ["case Lark::fixup_lark_hi16:", "case Lark::fixup_lark_lo16:"]
    assert "case Lark::fixup_lark_hi16:\n    return 1;" in labels[1].apply(code)
    arms = [e.fragment.split(":")[2] for e in edits if e.operator == "drop_case_arm"]
    # the pc16 arm falls into the branch arm: the branch arm cannot go alone
    assert arms == ["fixup_lark_hi16", "fixup_lark_pc16"]
    sw = [e for e in edits if e.operator == "switch_to_default"]
    assert len(sw) == 1 and "return 0;" in sw[0].apply(code) and "switch" not in sw[0].apply(code)


def test_if_and_statement_operators():
    tt, names = _lark()
    code = """int f(const MachineFunction &MF, bool P) {
  const LarkFrameLowering *TFI = getFrameLowering(MF);
  int Unused = Lark::R3;
  if (P)
    g(Lark::R2);
  else if (TFI->hasFP(MF))
    g(Lark::R3);
  else
    h();
  return TFI ? 1 : 0;
}"""
    edits = propose_edits(code, names)
    stmts = [e.fragment for e in edits if e.operator == "drop_target_statement"]
    assert stmts == ["int Unused = Lark::R3;"]  # TFI is used later; unbraced branch bodies are not statements here
    ifs = {(e.variant, e.depth): e for e in edits if e.operator == "drop_if_branch"}
    then_outer = next(e for (v, d), e in ifs.items() if v == "then" and d == 0)
    assert then_outer.apply(code).count("if (") == 1 and "g(Lark::R2)" not in then_outer.apply(code)
    inner_else = next(e for (v, d), e in ifs.items() if v == "else" and d == 1)
    assert "h();" not in inner_else.apply(code) and "g(Lark::R3);" in inner_else.apply(code)
    assert [e.operator for e in edits].index("drop_if_branch") > [e.operator for e in edits].index(
        "drop_target_statement")
    # inner ifs come first among the branch edits
    branch = [e for e in edits if e.operator == "drop_if_branch"]
    assert branch[0].depth >= branch[-1].depth


def test_skill_preconditions_are_the_names_of_its_own_level():
    from retrieval.backend.adapt import Mapping
    from prompts.backend.skills import guard_identifiers, missing_attributes

    arm = "case FK_Data_4:\n  if (IsPCRel)\n    return ELF::R_LARK_PC16;\n  return ELF::R_LARK_32;"
    # the arm's own statement needs R_LARK_32; the nested branch's relocation does not decide it
    assert guard_identifiers("drop_case_arm", "arm", arm, ["ELF::R_LARK_PC16", "ELF::R_LARK_32"]) == \
        ["ELF::R_LARK_32"]
    branch = """if (IsPCRel) {
  switch (Kind) {
  case Lark::fixup_lark_pc16:
    return ELF::R_LARK_PC16;
  }
  Ctx.reportError(Loc, Lark::R3);
} else {
  g(Lark::R2);
}"""
    ids = ["Lark::fixup_lark_pc16", "ELF::R_LARK_PC16", "Lark::R3", "Lark::R2"]
    assert guard_identifiers("drop_if_branch", "whole", branch, ids) == ["Lark::R3"]
    assert guard_identifiers("drop_if_branch", "else", "else {\n  g(Lark::R2);\n}", ids) == ["Lark::R2"]
    assert guard_identifiers("drop_case_label", "label", "case Lark::fixup_lark_pc16:", ids) == \
        ["Lark::fixup_lark_pc16"]
    loop = "for (MCPhysReg R : {Lark::R2, Lark::R3})\n  if (Lark::R2 == R)\n    g(Lark::fixup_lark_pc16);"
    assert guard_identifiers("drop_target_statement", "", loop, ids) == ["Lark::R3", "Lark::R2"]
    maps = {"ELF::R_LARK_32": Mapping("ELF::R_LARK_32", "ELF::R_KITE_32", "unmapped", "relocation"),
            "ISD::MUL": Mapping("ISD::MUL", "ISD::MUL", "generic"),
            "LarkHelper": Mapping("LarkHelper", "KiteHelper", "unmapped"),
            "Lark::R3": Mapping("Lark::R3", "Kite::R3", "rename", "register")}
    # only an unmapped, qualified target attribute fails the precondition
    assert missing_attributes(list(maps), maps) == ["ELF::R_LARK_32"]


def test_wrapper_return_types():
    from mining.backend.mine import make_wrapper

    cases = {
        "const MCPhysReg *X::f(int a) const { return 0; }": "const MCPhysReg *",
        "static std::unique_ptr<A> g() { return nullptr; }": "std::unique_ptr<A>",
        "X::X(int a) : B(a) { }": "void",
        "auto h() -> const int & { return x; }": "const int &",
        "unsigned getRelocType(MCContext &Ctx) const override { return 1; }": "unsigned",
        "auto k() { return 1; }": None,
    }
    for text, want in cases.items():
        w = make_wrapper(text)
        assert w.return_type == want, text
        if want:
            assert text.startswith(w.head) and w.head.endswith("{")


# ---------------------------------------------------------------- mining on the toy targets (real clang-15)
@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    if gate_skip_reason() is not None:
        pytest.skip(gate_skip_reason())
    from mining.backend.mine import BackendMineConfig, mine_backends, select_functions
    from skills.kernel_store import KernelStore

    dst = tmp_path_factory.mktemp("lineage") / "store"
    shutil.copytree(indexed_toy_store(), dst)
    st = Store(dst)
    fids = select_functions(st, roles=["ELFObjectWriter::getRelocType"]) + \
        select_functions(st, targets=["Lark", "Wren"], roles=["RegisterInfo::getReservedRegs"])
    outs = mine_backends(st, fids, BackendMineConfig(), lineages=KernelStore(st))
    st.close()
    return dst, outs


@needs_clang
def test_mining_stores_lineages_and_merges_skills_across_targets(mined):
    from skills.kernel_store import KernelStore

    dst, outs = mined
    by = {o.problem: o for o in outs}
    lark = by["Lark:ELFObjectWriter::getRelocType"]
    assert not lark.skipped and lark.lineage.termination == "complete"
    assert [s.operator for s in lark.lineage.steps] == ["drop_case_arm"] * 6 + ["drop_if_branch", "switch_to_default"]
    assert lark.clang_runs == 1  # the whole walk was speculated into one batched clang run
    cfg = lark.lineage.config
    assert cfg["statements"] == 22 and cfg["skeleton_statements"] == 3 and cfg["target_specific_statements"] == 13
    st = Store(dst)
    try:
        ks = KernelStore(st)
        arm = ks.skill(lark.lineage.steps[0].skill_id)
        assert arm.kind == "backend" and arm.carrier == "case_arm" and arm.operator == "drop_case_arm"
        assert "case TGT :: <fixup> : return ELF :: <relocation> ;" in arm.name
        assert arm.intent.startswith("For each fixup of the target")
        # one skill, evidence from every target's lineage (several steps each)
        assert arm.scope["archs"] == ["Kite", "Lark", "Wren"]
        assert len(arm.evidence) == 13 and {e.executor for e in arm.evidence} == {"clang-15"}
        assert {p.axis for p in arm.preconditions} == {"fixup", "relocation"}
        assert all(p.kind == "guarded" and p.source == "code_guard" for p in arm.preconditions)
        reserved = ks.skill(by["Wren:RegisterInfo::getReservedRegs"].lineage.steps[0].skill_id)
        assert "Reserved . set ( TGT :: <register> ) ;" in reserved.name and reserved.scope["archs"] == ["Lark", "Wren"]
        guard = [s for s in ks.skills(kind="backend") if s.carrier == "guarded_branch"
                 and "hasFP" in s.before + s.after]
        assert guard and any(p.text.startswith("guarded by `if ( getFrameLowering ( MF ) -> hasFP")
                             for p in guard[0].preconditions)
        # mining again reuses the stored lineage
        from mining.backend.mine import BackendMineConfig, mine_function, make_backend_gate

        again = mine_function(st, make_backend_gate(st, "Lark"), lark.func_id, BackendMineConfig(), lineages=ks)
        assert again.cached and again.lineage.lineage_id == lark.lineage.lineage_id
    finally:
        st.close()


@needs_clang
def test_checker_batches_variants_and_attributes_errors(mined):
    from mining.backend.mine import BackendGateChecker, function_site, make_backend_gate

    dst, _ = mined
    st = Store(dst)
    try:
        fid = st.query("SELECT func_id FROM functions WHERE target = 'Lark' AND role = 'RegisterInfo::getFrameRegister'")[0][
            "func_id"]
        site = function_site(st, fid)
        checker = BackendGateChecker(make_backend_gate(st, "Lark"), site, use_cache=False)
        good = site.text.replace("Lark::R3 : Lark::R2", "Lark::R2 : Lark::R3")
        bad = site.text.replace("Lark::R3 :", "Lark::R3_bogus :")
        noret = site.text.replace("return TFI->hasFP(MF) ? Lark::R3 : Lark::R2;", "(void)TFI;")
        checker._run([(good, None), (bad, None), (noret, None)])
        from mining.records import sha256

        v = [checker.verdicts[sha256(t)] for t in (good, bad, noret)]
        # clang skips -Wreturn-type after the first error in a file: `noret` passed behind `bad`
        # and was re-checked on its own
        assert checker.clang_runs == 2
        assert v[0].passed and not v[1].passed and not v[2].passed
        assert "R3_bogus" in v[1].reason and "line 3" in v[1].reason
        assert "does not return" in v[2].reason
    finally:
        st.close()


@needs_clang
def test_checker_starts_no_clang_run_after_the_walks_deadline(mined):
    import time

    from mining.backend.mine import BackendGateChecker, function_site, make_backend_gate

    dst, _ = mined
    st = Store(dst)
    try:
        fid = st.query("SELECT func_id FROM functions WHERE target = 'Lark' AND role = 'RegisterInfo::getFrameRegister'")[0][
            "func_id"]
        site = function_site(st, fid)
        checker = BackendGateChecker(make_backend_gate(st, "Lark"), site, use_cache=False)
        checker.deadline = time.monotonic() - 1.0
        v = checker.check_many([site.text.replace("Lark::R3 :", "Lark::R2 :")])[0]
        assert not v.passed and v.verdict == "error" and "time limit" in v.reason
        assert checker.clang_runs == 0
    finally:
        st.close()


@needs_clang
def test_cli_lineage_shows_backend_lineage(mined):
    dst, _ = mined
    r = runner.invoke(app, ["lineage", "Wren:ELFObjectWriter::getRelocType", "--store", str(dst)])
    assert r.exit_code == 0, r.output
    assert "executor clang-15" in r.stdout and "drop_case_arm" in r.stdout and "[case_arm]" in r.stdout
    assert "-    case Wren::fixup_wren_pc16:" in r.stdout
    r = runner.invoke(app, ["list", "--kind", "backend", "--store", str(dst), "--json"])
    assert r.exit_code == 0 and all(s["kind"] == "backend" for s in json.loads(r.stdout))


# ---------------------------------------------------------------- skill-guided generation
@needs_clang
def test_generate_with_skills_instantiates_for_the_target(mined):
    from prompts.backend.generate import GenerateRequest, generate
    from retrieval.backend.adapt import statement_accuracy

    dst, _ = mined
    st = Store(dst)
    try:
        real = {t: st.query("SELECT statements FROM functions WHERE target = ? AND role = 'ELFObjectWriter::getRelocType'",
                            [t])[0]["statements"] for t in ("Kite", "Wren")}
        out = {}
        for strat in ("skills", "fork-adapt"):
            for t in ("Kite", "Wren"):
                res = generate(st, GenerateRequest(target=t, role="getRelocType", strategy=strat, gate=(t == "Kite")))
                out[strat, t] = res
        kite = out["skills", "Kite"]
        assert kite["skills"]["source"].startswith("Lark:") and not kite["skills"]["fallback"]
        # every Kite fixup gets its arm (pcrel_7 has no similar Lark fixup: it goes to the general switch),
        # the PC-relative branch that holds none of them is left out
        assert "case Kite::fixup_kite_pcrel_7:\n    return ELF::R_KITE_PCREL_7;" in kite["code"]
        assert "IsPCRel)" not in kite["code"].split("{", 1)[1]
        assert kite["gate"]["passed"] is True, kite["gate"]
        wren = out["skills", "Wren"]
        assert "case Wren::fixup_wren_got16:\n    return ELF::R_WREN_GOT16;" in wren["code"]  # Lark has no GOT fixup
        decisions = {s["decision"] for s in wren["skills"]["steps"]}
        assert "expand" in decisions
        for t in ("Kite", "Wren"):
            acc = {s: statement_accuracy(parse_definition(out[s, t]["code"])[0], real[t])[0] for s in ("skills", "fork-adapt")}
            assert acc["skills"] > acc["fork-adapt"], (t, acc)
    finally:
        st.close()


@needs_clang
def test_generate_skills_prompt_and_llm(mined):
    from prompts.backend.generate import GenerateRequest, generate

    dst, _ = mined
    st = Store(dst)
    try:
        res = generate(st, GenerateRequest(target="Kite", role="getRelocType", strategy="skills", prompt_only=True))
        p = res["prompt"]
        assert "## The skeleton (mapped onto Kite)" in p and "For each fixup of the target" in p
        assert "`fixup_kite_pcrel_7`" in p and "{{" not in p and "case Kite::fixup_kite_pcrel_7" in p
        reply = "```cpp\n" + res["skills"]["skeleton"] + "\n```"
        res = generate(st, GenerateRequest(target="Kite", role="getRelocType", strategy="skills", model="openai/mock",
                                           gate=False, llm_kwargs={"mock_response": reply}))
        assert res["tokens"]["calls"] >= 1 and "R_KITE_NONE" in res["code"]
    finally:
        st.close()


@needs_clang
def test_cli_generate_strategies(mined):
    dst, _ = mined
    r = runner.invoke(app, ["backend", "generate", "--target", "Wren", "--function", "getRelocType", "--strategy",
                            "skills", "--no-gate", "--json", "--store", str(dst)])
    assert r.exit_code == 0, r.output
    assert "fixup_wren_got16" in json.loads(r.stdout)["code"]
    r = runner.invoke(app, ["backend", "generate", "--target", "Wren", "--function", "getRelocType", "--strategy",
                            "fork-flow", "--store", str(dst)])
    assert r.exit_code == 2 and "Mips" in r.stderr  # the toy corpus has no Mips to fork from
    r = runner.invoke(app, ["backend", "generate", "--target", "Wren", "--function", "getRelocType", "--strategy",
                            "nope", "--store", str(dst)])
    assert r.exit_code == 2 and "unknown strategy" in r.stderr


@needs_clang
def test_cli_backend_mine(mined, tmp_path):
    dst, _ = mined
    r = runner.invoke(app, ["backend", "mine", "--targets", "Wren", "--roles", "ELFObjectWriter::getRelocType",
                            "--store", str(dst), "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert len(rows) == 1 and rows[0]["cached"] and rows[0]["steps"] == 8
    r = runner.invoke(app, ["backend", "mine", "--roles", "noSuchRole", "--store", str(dst)])
    assert r.exit_code == 2 and "no function matches" in r.stderr
