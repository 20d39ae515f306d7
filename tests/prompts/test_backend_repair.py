"""Gate-guided repair without an LLM (prompts/backend/repair.py) with the real clang-15 gate on the toy
targets, and multi-donor fusion wired into fork-and-adapt (retrieval/backend/fuse.py)."""
import json
import shutil

import pytest
from typer.testing import CliRunner

from _backend_support import TOY_TARGETS, copy_toy, gate_skip_reason, indexed_toy_store
from cli import app
from corpora.backends.tree import load_target, parse_definition
from skills.store import Store

needs_clang = pytest.mark.skipif(gate_skip_reason() is not None, reason=str(gate_skip_reason()))
runner = CliRunner()


@pytest.fixture(scope="module")
def toy_store(tmp_path_factory):
    dst = tmp_path_factory.mktemp("repair") / "store"
    shutil.copytree(indexed_toy_store(), dst)
    return dst


def test_undeclared_diagnostics_are_recognized():
    from prompts.backend.repair import undeclared

    got = undeclared([{"message": "use of undeclared identifier 'Foo'"},
                      {"message": "no member named 'R3x' in namespace 'llvm::Lark'; did you mean 'R3'?"},
                      {"message": "unknown type name 'LarkFrameLowerng'; did you mean 'LarkFrameLowering'?"},
                      {"message": "no member named 'hasFPx' in 'llvm::LarkFrameLowering'"}])
    assert [(g["name"], g["scope"], g["hint"]) for g in got] == [
        ("Foo", None, None), ("R3x", "llvm::Lark", "R3"), ("LarkFrameLowerng", None, "LarkFrameLowering"),
        ("hasFPx", "llvm::LarkFrameLowering", None)]
    # one error of another kind: repair does not apply
    assert undeclared([{"message": "use of undeclared identifier 'Foo'"},
                       {"message": "expected expression"}]) is None
    assert undeclared([]) is None


def test_plan_uses_the_targets_own_names(tmp_path):
    from corpora.backends.profile import TargetProfile
    from prompts.backend.repair import NamePool, plan

    prof = TargetProfile("Lark", ["Lark"], "Lark", by_kind={"register": ["R0", "R1", "SP_REG"],
                                                           "relocation": ["R_LARK_32"]})
    pool = NamePool.for_target(prof, TOY_TARGETS / "Lark")
    assert "R_LARK_32" in pool.scoped["ELF"] and "R1" in pool.scoped["Lark"]
    assert "LarkFrameLowering" in pool.plain  # from Lark's own headers
    code = "unsigned f() { return Lark::SP_REGS + ELF::R_LARK_33; }"
    diags = [{"message": "no member named 'SP_REGS' in namespace 'llvm::Lark'"},
             {"message": "no member named 'R_LARK_33' in namespace 'llvm::ELF'"}]
    tried: dict = {}
    new, reps = plan(code, diags, pool, tried)
    assert new == "unsigned f() { return Lark::SP_REG + ELF::R_LARK_32; }"
    assert [(r["from"], r["to"], r["why"]) for r in reps] == [("SP_REGS", "SP_REG", "closest name"),
                                                            ("R_LARK_33", "R_LARK_32", "closest name")]
    # a later round never picks the same name again; nothing close: no replacement
    again, reps2 = plan(code, diags[:1], pool, tried)
    assert "SP_REG " not in again and all(r["to"] != "SP_REG" for r in reps2)
    assert plan("int g() { return Zzqx; }", [{"message": "use of undeclared identifier 'Zzqx'"}], pool, {})[1] == []


def _frame_register(root):
    tt = load_target(root / "lib" / "Target" / "Lark")
    return next(f for f in tt.functions if f.role == "RegisterInfo::getFrameRegister")


@needs_clang
def test_repair_renames_undeclared_names_until_the_gate_passes(tmp_path):
    from corpora.backends.profile import TargetProfile
    from mining.backend.gate import CompileGate
    from prompts.backend.generate import _gate_check
    from prompts.backend.repair import NamePool, repair

    root = copy_toy(tmp_path / "llvm")
    gate = CompileGate(root, tmp_path / "cache")
    fr = _frame_register(root)
    host = {"path": fr.path, "start_byte": fr.start_byte, "end_byte": fr.end_byte}
    prof = TargetProfile("Lark", ["Lark"], "Lark", by_kind={"register": ["R0", "R1", "R2", "R3"]})
    pool = NamePool.for_target(prof, gate.target_dir("Lark"))

    def check(code):
        return _gate_check(gate, "Lark", host, code)

    # a donor's names that Lark lacks: a misspelt class and registers that do not exist
    broken = fr.text.replace("LarkFrameLowering", "LarkFrameLowerng").replace("Lark::R3", "Lark::R3x")
    first = check(broken)
    assert first["verdict"] == "fail"
    res = repair(broken, first, check, pool, rounds=3)
    assert res.passed and res.rounds == 1 and res.stopped == "passes"
    assert res.code == fr.text
    assert {(r["from"], r["to"]) for r in res.replacements} == {("LarkFrameLowerng", "LarkFrameLowering"),
                                                               ("R3x", "R3")}
    # an error that is not an undeclared identifier: no repair, the code stays as it was
    other = fr.text.replace("return TFI", "return 1 +; return TFI").replace("Lark::R3", "Lark::R3x")
    res2 = repair(other, check(other), check, pool, rounds=3)
    assert not res2.passed and res2.rounds == 0 and res2.code == other
    assert res2.stopped == "an error other than an undeclared identifier"
    # no rounds allowed: nothing is re-gated
    res3 = repair(broken, first, check, pool, rounds=0)
    assert not res3.passed and res3.rounds == 0 and res3.code == broken


@needs_clang
def test_bench_repairs_a_host_files_functions_together(tmp_path):
    """The benchmark's batched repair: one clang run per round for all failing functions of a file,
    the repaired function rescored, the first verdict kept."""
    from corpora.backends.profile import TargetProfile
    from eval.bench_backend import gate_functions
    from mining.backend.gate import CompileGate
    from prompts.backend.repair import NamePool

    root = copy_toy(tmp_path / "llvm")
    gate = CompileGate(root, tmp_path / "cache")
    fr = _frame_register(root)
    good = fr.text
    entries = [{"fork_adapt": {"code": fr.text.replace("Lark::R3", "Lark::R3x")}, "fork_flow": {"code": good},
                "_host": (fr.path, fr.start_byte, fr.end_byte)}]
    prof = TargetProfile("Lark", ["Lark"], "Lark", by_kind={"register": ["R0", "R1", "R2", "R3"]})
    rescored = []
    summary = gate_functions(gate, "Lark", entries, ("fork_adapt", "fork_flow"), 0, lambda m: None, 3,
                             NamePool.for_target(prof, gate.target_dir("Lark")),
                             lambda e, st: rescored.append(st))
    fa = entries[0]["fork_adapt"]
    assert summary["files_checked"] == 1
    assert fa["gate_before_repair"] == "fail" and fa["gate_verdict"] == "pass" and fa["gate"] is True
    assert fa["repair"]["rounds"] == 1 and fa["repair"]["passed"] and fa["code"] == good
    assert rescored == ["fork_adapt"]
    assert entries[0]["fork_flow"]["gate_verdict"] == "pass" and "repair" not in entries[0]["fork_flow"]


def test_fuse_top_counts_two_of_the_top_k_donors():
    from retrieval.backend.fuse import fuse_top

    fork = "unsigned T::f(unsigned K) const {\n  unsigned V = K + 1;\n  return V;\n}"

    def donor(extra: str) -> str:
        return f"unsigned T::f(unsigned K) const {{\n  unsigned V = K + 1;\n  {extra}\n  return V;\n}}"

    others = [donor("(void)K;"), donor("(void)K;"), donor("V += 1;"), donor("V += 1;"), donor("V *= 2;")]
    # k = 6: five others, a statement needs 2 of them (MIN_SHARE 0.4); one vote is not enough
    six = fuse_top(fork, others, 6)
    assert sorted(a["statement"] for a in six.added) == ["( void ) K ;", "V += 1 ;"]
    assert all(a["of"] == 5 and a["votes"] == 2 for a in six.added)
    # k = 3: the next two only, both must have it
    three = fuse_top(fork, others, 3)
    assert [a["statement"] for a in three.added] == ["( void ) K ;"]
    assert parse_definition(three.code)[0] == ["unsigned V = K + 1 ;", "( void ) K ;", "return V ;"]
    # one donor: the fork as it is; too few donors to vote: the fork too
    assert fuse_top(fork, others, 1).code == fork and fuse_top(fork, others[:1], 6).code == fork


def test_generate_reports_fusion_and_takes_the_flags(toy_store):
    from corpora.backends.tree import BackendInputError
    from prompts.backend.generate import GenerateRequest, generate

    st = Store(toy_store)
    one = generate(st, GenerateRequest(target="Wren", role="getRelocType", k=2, gate=False, fuse_donors=1))
    fused = generate(st, GenerateRequest(target="Wren", role="getRelocType", k=2, gate=False))
    assert one["fusion"] == {"donors": 1, "added": []}
    # two other toy targets: one more donor than the fork, too few for a vote of two
    assert fused["fusion"]["donors"] == 2 and fused["code"] == one["code"]
    assert len(fused["candidates"]) == 2
    with pytest.raises(BackendInputError, match="--fuse-donors"):
        generate(st, GenerateRequest(target="Wren", role="getRelocType", fuse_donors=0))
    r = runner.invoke(app, ["backend", "generate", "--target", "Wren", "--function", "getRelocType", "--store",
                            str(toy_store), "--json", "--one-donor", "--no-gate-repair", "--repair-rounds", "1"]
                      + ([] if gate_skip_reason() is None else ["--no-gate"]))
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["fusion"]["donors"] == 1 and "gate_repair" not in out
    r = runner.invoke(app, ["backend", "generate", "--target", "Wren", "--function", "getRelocType", "--store",
                            str(toy_store), "--fuse-donors", "0"])
    assert r.exit_code == 2


@needs_clang
def test_repair_acts_when_the_batch_also_failed_elsewhere(tmp_path):
    """A host file gated with several spliced functions can fail outside all of them; a function
    whose own errors are all undeclared identifiers is still repaired (the re-check gates it
    without the others), and one with no error of its own is left alone."""
    from corpora.backends.profile import TargetProfile
    from mining.backend.gate import CompileGate
    from prompts.backend.generate import _gate_check
    from prompts.backend.repair import NamePool, repair_many

    root = copy_toy(tmp_path / "llvm")
    gate = CompileGate(root, tmp_path / "cache")
    fr = _frame_register(root)
    host = {"path": fr.path, "start_byte": fr.start_byte, "end_byte": fr.end_byte}
    prof = TargetProfile("Lark", ["Lark"], "Lark", by_kind={"register": ["R0", "R1", "R2", "R3"]})
    pool = NamePool.for_target(prof, gate.target_dir("Lark"))
    broken = fr.text.replace("Lark::R3", "Lark::R3x")
    own = _gate_check(gate, "Lark", host, broken)
    assert own["verdict"] == "fail" and own["diagnostics"]
    elsewhere = [{"message": "expected ';' after top level declarator", "line": 1}]
    batch = {**own, "file_diagnostics": elsewhere}
    clean = {"verdict": "fail", "diagnostics": [], "file_diagnostics": elsewhere}
    got = repair_many([broken, fr.text], [batch, clean],
                      lambda items: [_gate_check(gate, "Lark", host, c) for _, c in items], pool, 3)
    assert got[0].passed and got[0].code == fr.text and got[0].rounds == 1
    assert not got[1].passed and got[1].rounds == 0 and got[1].stopped == "not a failure of the function's own code"


def test_name_pool_leaves_out_the_functions_being_generated():
    """The benchmark repairs T's functions with T's real versions in its tree: a name only the real
    version uses must not be a candidate (it would be the reference picking its own names)."""
    import re

    from corpora.backends.profile import TargetProfile
    from prompts.backend.repair import NamePool

    prof = TargetProfile("Lark", ["Lark"], "Lark")
    root = TOY_TARGETS.parent.parent
    fr = _frame_register(root)
    data = (TOY_TARGETS / "Lark" / fr.path).read_bytes()
    inside = set(re.findall(r"\b[A-Za-z_]\w*\b", data[fr.start_byte:fr.end_byte].decode()))
    full = NamePool.for_target(prof, TOY_TARGETS / "Lark")
    without = NamePool.for_target(prof, TOY_TARGETS / "Lark", exclude={fr.path: [(fr.start_byte, fr.end_byte)]})
    only_there = inside - without.plain
    assert only_there and only_there <= full.plain  # e.g. the function's own locals
    assert without.plain < full.plain
