"""SKILL.md export/import (skills/skillmd.py) and `skills export` / `skills import`.

Skill records are built here the way lifting builds them: a real deterministic operator applied
to a real corpus kernel gives the simpler form, the expert is the optimized form, and the
evidence/effect/precondition fields carry realistic values."""
import difflib
import json
import re
from pathlib import Path

import pytest
import yaml

from mining.operators import get_operator
from mining.records import Anchor, Effect, Evidence, Precondition, Risk, Skill, skill_identity
from skills.skillmd import (
    DESCRIPTION_MAX, NAME_MAX, SkillMdError, export_skills, import_skills, save_skills, skill_slugs, slugify,
)

KERNELS = Path(__file__).resolve().parents[2] / "corpora" / "kernels"


def _lines(text: str, start: int, end: int) -> str:
    a = text.rfind("\n", 0, start) + 1
    b = text.find("\n", max(end - 1, start))
    return text[a:len(text) if b < 0 else b + 1]


def _skill(problem: str, op_name: str, name: str, intent: str, *, op_type: str, site: int = 0,
           preconditions=(), risks=(), ratio=None, variant: str = "") -> Skill:
    src = (KERNELS / problem / "kernel.cu").read_text()
    op = get_operator(op_name)
    s = op.find_sites(src)[site]
    simpler = op.apply(src, s)
    diff = "".join(difflib.unified_diff(simpler.splitlines(keepends=True), src.splitlines(keepends=True),
                                        fromfile="a/simpler.cu", tofile="b/kernel.cu", n=2))
    after = _lines(src, s.start_byte, s.end_byte)
    delta = len(src.encode()) - len(simpler.encode())
    before = _lines(simpler, s.start_byte, max(s.start_byte + 1, s.end_byte - delta))
    key, sid = skill_identity(op.carrier, op.name, variant)
    lineage = "ln-" + sid[3:]
    effects = [Effect(device="static:sm_90", method="static", registers_delta=-2, smem_delta=0, spill_delta=0,
                      sass_delta={"LDG.E.128": 2, "LDG.E": -8})]
    if ratio:
        effects.insert(0, Effect(device="NVIDIA H200 (sm_90)", method="gpu_timing", time_ratio=ratio,
                                 time_ratio_q1=round(ratio * 0.97, 4), time_ratio_q3=round(ratio * 1.02, 4),
                                 workload="w3[N=67108864]",
                                 timings_ms={"simpler": {"median_ms": 0.41 * ratio}, "optimized": {"median_ms": 0.41}}))
    ev = Evidence(problem=problem, op_type=op_type, lineage_id=lineage, step=1, kernel_hash="ab" * 32,
                  executor="cuda", workloads=["w0[N=4096]", "w1[N=100003]", "w2[N=7]"], seeds=[0, 1, 2],
                  tolerances={"y": [1e-4, 1e-5]}, before=before, after=after, diff=diff, effect=effects)
    return Skill(
        skill_id=sid, key=key, name=name, intent=intent, carrier=op.carrier, operator=op.name, variant=variant,
        anchor=Anchor(function=s.function, ast_path=["function_definition", "compound_statement", "for_statement"],
                      enclosing_loop="for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride)",
                      line=s.line, excerpt=s.excerpt),
        before=before, after=after, diff=diff, preconditions=list(preconditions), effect=effects, evidence=[ev],
        risks=list(risks), scope={"op_types": [op_type], "problems": [problem], "dtypes": ["float32"],
                                  "archs": ["sm_80", "sm_90"]},
        requires=[], provides=[op.carrier], conflicts=[],
        verification=[f"gate cuda correctness pass on 3 workloads x 3 seeds ({problem})",
                      "probe N=4097: optimized fail (misaligned float4), simpler pass"],
        provenance={"lineages": [lineage], "kernel_hashes": ["ab" * 32], "tool_version": "kernel-skills-mining-1",
                    "per_lineage": {lineage: {"dtypes": ["float32"], "archs": ["sm_80", "sm_90"]}}})


def _skills() -> list[Skill]:
    vec = _skill("reduce_sum", "vector_load_to_scalar", "Vectorize global loads with float4",
                 "Load four consecutive floats with one 16-byte instruction (LDG.E.128) instead of four scalar loads",
                 op_type="reduction", ratio=1.84,
                 preconditions=[Precondition(kind="divisible", axis="N", value=4, text="N % 4 == 0", source="code_guard",
                                             probes=[{"axes": {"N": 4097}, "optimized": "pass", "simpler": "pass"}],
                                             status="guarded_in_code"),
                                Precondition(kind="alignment", value=16, text="x is 16-byte aligned",
                                             probes=[{"axes": {"N": 4096}, "offset_bytes": 4, "optimized": "fail",
                                                      "simpler": "pass"}])],
                 risks=[Risk(text="misaligned base pointer: the float4 load faults",
                             probe={"axes": {"N": 4096}, "offset_bytes": 4},
                             failure="correctness: cudaErrorMisalignedAddress | in case w0")])
    res = _skill("vector_add", "drop_restrict", "Mark kernel pointer parameters __restrict__",
                 "Promise the compiler that the kernel's pointers do not alias, so loads can be reordered and cached",
                 op_type="elementwise", ratio=1.03,
                 preconditions=[Precondition(kind="none_found", text="passed every adversarial size probed",
                                             probes=[{"axes": {"N": 7}, "optimized": "pass"}], status="not_needed")])
    unroll = _skill("tiled_matmul", "drop_unroll_pragma", "Unroll the inner k loop", "Fully unroll the tile's k loop",
                    op_type="gemm")
    # awkward names: unicode, punctuation, too long, a name shared by two skills, code with ``` inside
    long_name = "Ünrôll: the *inner* k-loop — with `#pragma unroll` / ILP & constant indexing " * 3
    twin_a = _skill("vector_add", "drop_launch_bounds", long_name, "x " * 900 + "end", op_type="elementwise",
                    variant="a")
    twin_b = _skill("vector_add", "drop_launch_bounds", long_name, "Fix the block size for register allocation",
                    op_type="elementwise", variant="b")
    twin_b = twin_b.model_copy(update={"before": twin_b.before + "// a comment with ``` fences inside\n"})
    return [vec, res, unroll, twin_a, twin_b]


def _by_id(skills):
    return sorted(skills, key=lambda s: s.skill_id)


# --------------------------------------------------------------------------- library
def test_round_trip_is_lossless(tmp_path):
    skills = _skills()
    paths = export_skills(skills, tmp_path / "out")
    assert len(paths) == len(skills) and all(p.name == "SKILL.md" and p.is_file() for p in paths)
    assert all((p.parent / "skill.json").is_file() for p in paths)
    assert len({p.parent for p in paths}) == len(skills)
    back = import_skills(tmp_path / "out")
    assert _by_id(back) == _by_id(skills)
    # exporting again is stable (same folders, same bytes)
    first = {p: p.read_text() for p in paths}
    export_skills(list(reversed(skills)), tmp_path / "out")
    assert {p: p.read_text() for p in paths} == first
    # one skill folder can be imported on its own
    assert import_skills(paths[0].parent) == [skills[0]]


def test_front_matter_parses_and_obeys_the_limits(tmp_path):
    skills = _skills()
    paths = export_skills(skills, tmp_path)
    for s, p in zip(skills, paths):
        text = p.read_text()
        assert text.startswith("---\n")
        front = yaml.safe_load(text.split("---\n")[1])
        assert set(front) == {"name", "description", "metadata"}
        name = front["name"]
        assert name == p.parent.name and len(name) <= NAME_MAX
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name)
        d = front["description"]
        assert 0 < len(d) <= DESCRIPTION_MAX and "\n" not in d and "Use when" in d
        meta = front["metadata"]
        assert all(isinstance(v, str) for v in meta.values())
        assert (meta["skill_id"], meta["key"], meta["carrier"], meta["operator"]) == \
               (s.skill_id, s.key, s.carrier, s.operator)
        assert "op_types=" in meta["scope"]
    names = [p.parent.name for p in paths]
    assert names[0] == "vectorize-global-loads-with-float4"
    assert names[1] == "mark-kernel-pointer-parameters-restrict"
    # the two skills sharing a long unicode name: distinct, ASCII, cut to 64, ids appended
    assert names[3] != names[4] and all(n.startswith("unroll-the-inner-k-loop-with-pragma-unroll") for n in names[3:])
    assert names[3].endswith(skills[3].skill_id[3:15]) and names[4].endswith(skills[4].skill_id[3:15])
    long_desc = yaml.safe_load(paths[3].read_text().split("---\n")[1])["description"]
    # a 1800-character intent is clipped; the "when to use it" half survives whole
    assert len(long_desc) <= DESCRIPTION_MAX
    assert "x x... Use when optimizing a CUDA kernel (elementwise; float32) that lacks it." in long_desc
    assert long_desc.endswith("Mined from 1 expert kernel.") and "plain form" not in long_desc
    # no GPU timing: the description says so and names the architecture of the static figures
    assert "Buys: not timed on a GPU; compiled for sm_90: registers -2, LDG.E.128 +2, LDG.E -8." in long_desc


def test_body_is_actionable(tmp_path):
    vec = _skills()[0]
    (p,) = export_skills([vec], tmp_path)
    body = p.read_text().split("---\n", 2)[2]
    assert body.startswith("\n# Vectorize global loads with float4\n")
    for heading in ("## When it applies", "### Preconditions", "## How to apply", "### Simpler form (before)",
                    "### Optimized form (after)", "### Diff (simpler -> optimized)", "## Measured effect",
                    "## Risks", "## Evidence", "## Verification", "## Provenance"):
        assert f"\n{heading}\n" in body, heading
    assert "```cuda\n" + vec.before.rstrip("\n") + "\n```" in body
    assert "```cuda\n" + vec.after.rstrip("\n") + "\n```" in body
    assert "```diff\n" + vec.diff.rstrip("\n") + "\n```" in body
    assert "\n+        float4 v0 = __ldg(x4 + i);" in body
    assert "`N % 4 == 0` (divisible, axis N, value 4): guarded in the code" in body
    assert "`x is 16-byte aligned` (alignment, value 16): discovered by probing" in body
    assert "offset_bytes 4" in body
    assert "| NVIDIA H200 (sm_90) | gpu_timing | 1.84x (1.78-1.88) |" in body
    assert "LDG.E.128 +2" in body and "| static:sm_90 | static |" in body
    assert "- misaligned base pointer: the float4 load faults (probe N=4096: offset_bytes 4; gate: correctness: " \
           "cudaErrorMisalignedAddress | in case w0)" in body
    assert "lineage `ln-" in body and "seeds 0, 1, 2" in body and "y rtol 0.0001 atol 1e-05" in body
    assert "- lineages: ln-" in body and "skill.json" in body
    desc = yaml.safe_load(p.read_text().split("---\n")[1])["description"]
    assert "Valid only when N % 4 == 0; x is 16-byte aligned (probed)." in desc
    assert "Buys: 1.84x (1.78-1.88) faster on NVIDIA H200 (sm_90) (w3[N=67108864])." in desc


def test_import_without_record_rebuilds_from_markdown(tmp_path):
    skills = _skills()
    paths = export_skills(skills, tmp_path)
    for p in paths:
        (p.parent / "skill.json").unlink()
    back = {s.skill_id: s for s in import_skills(tmp_path)}
    for s in skills:
        b = back[s.skill_id]
        assert b.name == " ".join(s.name.split())  # a heading holds one line
        for f in ("skill_id", "key", "carrier", "operator", "variant", "kind", "scope", "anchor",
                  "requires", "provides", "conflicts"):
            assert getattr(b, f) == getattr(s, f), f
        assert b.before == s.before and b.after == s.after and b.diff == s.diff  # ``` inside code survives
        assert b.intent == " ".join(s.intent.split()) + ("" if s.intent.endswith(".") else ".")
        assert "imported_from" in b.provenance and b.evidence == []


def _exported(tmp_path) -> tuple[Path, Path]:
    out = tmp_path / "out"
    paths = export_skills(_skills()[:2], out)
    return out, paths[1]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def _sub(path: Path, pattern: str, new: str) -> None:
    text, n = re.subn(pattern, new, path.read_text(), count=1, flags=re.M)
    assert n == 1
    path.write_text(text)


BAD = {
    "missing front matter": (lambda p: p.write_text(p.read_text().split("---\n", 2)[2]), "SKILL.md", "missing YAML front matter"),
    "unclosed": (lambda p: p.write_text(p.read_text().replace("\n---\n", "\n", 1)), "SKILL.md", "not closed"),
    "invalid yaml": (lambda p: _edit(p, "metadata:\n", "metadata: [unclosed\n"), "SKILL.md", "invalid YAML in front matter: line"),
    "unknown field": (lambda p: _edit(p, "metadata:\n", "colour: red\nmetadata:\n"), "SKILL.md", "unknown front matter field 'colour'"),
    "unknown metadata": (lambda p: _edit(p, "  carrier:", "  author: me\n  carrier:"), "SKILL.md", "unknown metadata field 'author'"),
    "name mismatch": (lambda p: _edit(p, "name: mark-kernel", "name: other-kernel"), "SKILL.md", "does not match its folder"),
    "name format": (lambda p: _edit(p, "name: mark-kernel", "name: Mark_Kernel"), "SKILL.md", "lowercase letters"),
    "long description": (lambda p: _sub(p, r"^description: .*$", "description: " + "y " * 550), "SKILL.md",
                         "description is 1099 characters (at most 1024)"),
    "no description": (lambda p: _sub(p, r"^description: .*$", "description: ''"), "SKILL.md", "needs 'description'"),
    "record json": (lambda p: (p.parent / "skill.json").write_text("{\"skill_id\": "), "skill.json", "invalid JSON: line 1"),
    "record field": (lambda p: (p.parent / "skill.json").write_text(
        json.dumps({**json.loads((p.parent / "skill.json").read_text()), "colour": "red"})), "skill.json", "colour: Extra inputs"),
    "record type": (lambda p: (p.parent / "skill.json").write_text(
        json.dumps({**json.loads((p.parent / "skill.json").read_text()), "evidence": "many"})), "skill.json", "evidence"),
    "disagree": (lambda p: _edit(p, "  carrier: restrict", "  carrier: ldg"), "SKILL.md", "metadata.carrier 'ldg' disagrees"),
    "md only, no identity": (lambda p: ((p.parent / "skill.json").unlink(), _edit(p, "  operator: drop_restrict\n", "")),
                             "SKILL.md", "lacks 'carrier' and 'operator'"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_gives_one_line_error_naming_the_file(tmp_path, case):
    out, target = _exported(tmp_path)
    mutate, fname, words = BAD[case]
    mutate(target)
    with pytest.raises(SkillMdError) as info:
        import_skills(out)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(str(target.parent / fname) + ": "), msg
    assert words in msg, msg


def test_import_needs_skill_folders(tmp_path):
    with pytest.raises(SkillMdError, match="no such folder"):
        import_skills(tmp_path / "nope")
    (tmp_path / "empty" / "x").mkdir(parents=True)
    with pytest.raises(SkillMdError, match=r"no \*/SKILL.md found"):
        import_skills(tmp_path / "empty")
    # the same skill in two folders
    out, target = _exported(tmp_path)
    twin = out / "a-copy"
    twin.mkdir()
    (twin / "skill.json").write_text((target.parent / "skill.json").read_text())
    (twin / "SKILL.md").write_text(target.read_text().replace(f"name: {target.parent.name}", "name: a-copy"))
    with pytest.raises(SkillMdError, match="is also in"):
        import_skills(out)


def test_slugs():
    assert slugify("Vectorize `float4` loads (16 B)!") == "vectorize-float4-loads-16-b"
    assert slugify("—") == ""
    assert len(slugify("a" * 100)) == 64
    s = _skills()
    assert skill_slugs(s) == skill_slugs(list(reversed(s)))
    with pytest.raises(ValueError, match="more than once"):
        skill_slugs([s[0], s[0]])


# --------------------------------------------------------------------------- store and CLI
def _store_skills(root: Path) -> list[Skill]:
    from skills.kernel_store import KernelStore
    from skills.store import Store

    st = Store(root, read_only=True)
    try:
        return KernelStore(st).skills()
    finally:
        st.close()


def _put(root: Path, skills) -> None:
    from skills.store import Store

    st = Store(root)
    try:
        save_skills(st, skills)
    finally:
        st.close()


def test_cli_export_then_import_round_trip(tmp_path):
    from typer.testing import CliRunner

    from cli import app

    skills = _skills()
    _put(tmp_path / "s1", skills)
    runner = CliRunner()
    r = runner.invoke(app, ["export", "--format", "skillmd", str(tmp_path / "md"), "--store", str(tmp_path / "s1"),
                            "--json"])
    assert r.exit_code == 0, r.output
    payload = json.loads(r.stdout)
    assert payload["format"] == "skillmd" and len(payload["skills"]) == len(skills)
    assert all(Path(x["path"]).is_file() for x in payload["skills"])

    r = runner.invoke(app, ["import", str(tmp_path / "md"), "--store", str(tmp_path / "s2"), "--json", "--no-index"])
    assert r.exit_code == 0, r.output
    assert sorted(x["skill_id"] for x in json.loads(r.stdout)["imported"]) == sorted(s.skill_id for s in skills)
    assert _by_id(_store_skills(tmp_path / "s2")) == _by_id(skills)

    # again: replaces (re-indexing is tested on an indexed store: test_skill_retrieval.py)
    r = runner.invoke(app, ["import", str(tmp_path / "md"), "--store", str(tmp_path / "s2"), "--no-index"])
    assert r.exit_code == 0 and f"{len(skills)} skill(s) imported" in r.stdout, r.output
    assert len(_store_skills(tmp_path / "s2")) == len(skills)

    # shown by its SKILL.md folder name; an empty name is an error, not an arbitrary skill
    folder = Path(payload["skills"][1]["path"]).parent.name
    r = runner.invoke(app, ["show", folder, "--store", str(tmp_path / "s2"), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["skill_id"] == payload["skills"][1]["skill_id"], r.output
    r = runner.invoke(app, ["show", "", "--store", str(tmp_path / "s2")])
    assert r.exit_code == 2 and "give a skill id" in r.output
    # a hand-written skill (no skill.json) is found by its folder name too
    hand = tmp_path / "hand" / "my-own-trick"
    hand.mkdir(parents=True)
    (hand / "SKILL.md").write_text("---\nname: my-own-trick\ndescription: Cache the row max in a register.\n"
                                   "metadata:\n  carrier: register_cache\n  operator: manual\n---\n\n# Keep the max\n\n"
                                   "Keep the running max in a register.\n")
    r = runner.invoke(app, ["import", str(tmp_path / "hand"), "--store", str(tmp_path / "s2"), "--no-index"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["show", "my-own-trick", "--store", str(tmp_path / "s2"), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["name"] == "Keep the max", r.output


def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path):
    from typer.testing import CliRunner

    from cli import app

    skills = _skills()
    export_skills(skills[:3], tmp_path / "md")
    bad = tmp_path / "md" / "mark-kernel-pointer-parameters-restrict" / "SKILL.md"
    bad.write_text(bad.read_text().replace("metadata:\n", "metadata: [oops\n", 1))
    _put(tmp_path / "s", skills[3:4])  # what the store held before
    runner = CliRunner()
    r = runner.invoke(app, ["import", str(tmp_path / "md"), "--store", str(tmp_path / "s")])
    assert r.exit_code == 2
    err = r.stderr.strip()
    assert err.count("\n") == 0 and err.startswith(f"error: {bad}: invalid YAML in front matter"), err
    assert _store_skills(tmp_path / "s") == skills[3:4]  # the good skills were not written either
    # a fresh store is not even created
    r = runner.invoke(app, ["import", str(tmp_path / "md"), "--store", str(tmp_path / "fresh")])
    assert r.exit_code == 2 and not (tmp_path / "fresh").exists()

    r = runner.invoke(app, ["export", "--format", "html", str(tmp_path / "x"), "--store", str(tmp_path / "s")])
    assert r.exit_code == 2 and "unknown format 'html'" in r.stderr
    r = runner.invoke(app, ["export", str(tmp_path / "x"), "--store", str(tmp_path / "none")])
    assert r.exit_code == 2 and "no store at" in r.stderr
