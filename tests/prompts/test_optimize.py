"""`skills optimize` (issue 7): forward rewrites, the loop under the CPU gate, the LLM materializer
with a mocked endpoint, budgets, leave-one-out and bad input."""
from __future__ import annotations

import json
from dataclasses import replace
import shutil
from pathlib import Path

import pytest

from mining.gate import BadInput
from mining.operators.base import Context
from mining.operators.forward import materialize, run_rewrite
from mining.operators.registry import rewrites_for
from prompts.optimize import (OptimizeConfig, SkillSource, check_preconditions, optimize, parse_optimization,
                             rank_memory, flat_memory, sanitize, skill_card)
from mining.records import Skill

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "corpora" / "kernels"
VECTOR_ADD = KERNELS / "vector_add"
NAIVE = (VECTOR_ADD / "naive.cu").read_text()


def gpp_missing() -> bool:
    return shutil.which("g++") is None


needs_cpu_gate = pytest.mark.skipif(gpp_missing(), reason="the cpu executor needs g++")


def skill(carrier: str, operator: str, problems=("reduce_sum",), **extra) -> dict:
    ev = [{"problem": p, "op_type": "", "lineage_id": "ln-x", "step": 1, "kernel_hash": "h", "executor": "cpu",
           "before": f"before {p}", "after": f"after {p}", "diff": f"--- s\n+++ o\n-old {p}\n+new {p}\n"} for p in problems]
    rec = {"skill_id": f"sk-{carrier}", "key": f"{carrier}:{operator}", "name": f"{carrier} skill",
           "intent": f"introduce {carrier}", "carrier": carrier, "operator": operator, "variant": "",
           "anchor": {"function": "", "ast_path": [], "enclosing_loop": "", "line": 0, "excerpt": ""},
           "before": ev[0]["before"], "after": ev[0]["after"], "diff": ev[0]["diff"], "preconditions": [],
           "effect": [], "evidence": ev, "risks": [], "scope": {"problems": list(problems)}, "requires": [],
           "provides": [], "conflicts": [], "verification": [], "provenance": {}, "kind": "kernel"}
    rec.update(extra)
    return rec


def record(carrier: str, operator: str, problems=("reduce_sum",), **extra) -> Skill:
    """The same skill as a record (what optimize reads)."""
    return Skill.model_validate(skill(carrier, operator, problems, **extra))


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One gate cache for the module: the input kernel is gated once."""
    return tmp_path_factory.mktemp("opt-cache")


@pytest.fixture
def skills_file(tmp_path: Path) -> Path:
    recs = [skill("restrict", "drop_restrict"), skill("vector_load", "vector_load_to_scalar"),
            skill("grid_stride", "grid_stride_to_single")]
    p = tmp_path / "skills.json"
    p.write_text(json.dumps(recs))
    return p


# --------------------------------------------------------------------------- forward rewrites (no gate)
def test_rewrites_map_skills_to_forward_edits():
    assert rewrites_for("drop_restrict", "restrict") == ["add_restrict"]
    assert "warp_per_row" in rewrites_for("shuffle_to_shared", "warp_shuffle_reduce")
    assert rewrites_for("llm", "vector_store")[0] == "vectorize_elementwise"
    assert rewrites_for("llm", "online_softmax") == ["fuse_softmax_sweeps", "fuse_rescale_passes"]
    assert rewrites_for("llm", "tensor_core_wmma") == []  # no deterministic forward: the LLM's


def test_vector_add_materializations():
    r = materialize(record("restrict", "drop_restrict"), NAIVE)
    assert len(r) == 1 and "const float* __restrict__ a" in r[0].source and "float* __restrict__ y" in r[0].source
    assert r[0].site_line == 4 and r[0].rewrite == "add_restrict"
    v = materialize(record("vector_load", "vector_load_to_scalar"), NAIVE)
    src = v[0].source
    assert "reinterpret_cast<const float4*>(a)" in src and "reinterpret_cast<float4*>(y)" in src
    assert "gridDim.x * blockDim.x" in src and "ks_clamp_grid(" in src  # grid-stride form, clamped launch
    assert v[0].guards and "alignment" in v[0].guards[0]  # the precondition is checked at run time
    g = materialize(record("grid_stride", "grid_stride_to_single"), NAIVE)[0].source
    assert "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)" in g
    # outside its edits the file is byte-identical
    assert g.startswith(NAIVE[:NAIVE.index("__global__")])


def test_structural_rewrites_find_their_sites():
    ctx = Context()
    soft = (KERNELS / "softmax" / "naive.cu").read_text()
    w = run_rewrite("warp_per_row", soft, ctx)
    assert w and "__shfl_xor_sync(0xffffffffu, s, ks_o)" in w[0].source and "fmaxf(m, __shfl_xor_sync" in w[0].source
    assert "((M + 127) / 128) * 32" in w[0].source
    scan = run_rewrite("warp_scan", (KERNELS / "exclusive_scan" / "naive.cu").read_text(), ctx)
    assert scan and "__shfl_up_sync" in scan[0].source and "scan_sums<<<1, 32>>>" in scan[0].source
    hist = run_rewrite("privatize_atomics", (KERNELS / "histogram" / "naive.cu").read_text(), ctx)
    assert hist and "__shared__ int ks_priv" in hist[0].source and "(bins) <= 4096" in hist[0].source
    tr = run_rewrite("stage_transpose_tile", (KERNELS / "transpose" / "naive.cu").read_text(), ctx)
    assert tr and "__shared__ float ks_tile[8][36]" in tr[0].source
    mm = run_rewrite("stage_matmul_tiles", (KERNELS / "sgemm" / "naive.cu").read_text(), ctx)
    assert mm and "ks_As[threadIdx.y][ks_kk] * ks_Bs[ks_kk][threadIdx.x]" in mm[0].source
    assert run_rewrite("stage_matmul_tiles", NAIVE, ctx) == []  # no site: no candidate, no exception


def test_leave_one_out_sanitizes_records():
    only = record("ldg", "ldg_to_plain_load", problems=("softmax",))
    assert sanitize(only, {"softmax"}) is None
    shared = record("restrict", "drop_restrict", problems=("softmax", "reduce_sum"))
    s = sanitize(shared, {"softmax"})
    assert [e.problem for e in s.evidence] == ["reduce_sum"] and s.scope["problems"] == ["reduce_sum"]
    assert "softmax" not in s.diff and "reduce_sum" in s.diff  # the exemplar came from the held-out problem
    assert [e.problem for e in shared.evidence] == ["softmax", "reduce_sum"]  # the loaded record is not changed
    mem = flat_memory([s])
    assert mem == [{"problem": "reduce_sum", "diff": s.diff}] and rank_memory(mem, NAIVE, 3) == mem


def test_preconditions_checked_against_every_workload():
    rec = record("vector_load", "vector_load_to_scalar",
                 preconditions=[{"kind": "divisible", "axis": "N", "value": 4, "text": "N % 4 == 0",
                                 "source": "probe", "probes": [], "status": "discovered"}])
    assert rec.preconditions[0].check({"N": 4096}) == ("satisfied", "N=4096")  # the record checks itself
    assert rec.preconditions[0].check({"M": 8})[0] == "unknown"
    checks = check_preconditions(rec, [{"N": 4096}, {"N": 7}])
    assert checks[0]["check"] == "violated" and checks[0]["violated_by_workloads"] == [1] and checks[0]["needs_guard"]
    card = skill_card(rec, {"line": 5, "code": "y[i] = a[i] + b[i];", "reason": "scalar load"}, checks)
    assert "N % 4 == 0" in card and "VIOLATED" in card and "line 5" in card and "introduce vector_load" in card


def test_parse_optimization_blocks_and_whole_kernel():
    reply = ("CARRIER: restrict\nDESCRIPTION: no aliasing\n<<<<<<< SEARCH\n"
             "__global__ void add(const float* a, const float* b, float* y, int n) {\n=======\n"
             "__global__ void add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y, "
             "int n) {\n>>>>>>> REPLACE\n")
    new, carrier, desc = parse_optimization(NAIVE, reply)
    assert carrier == "restrict" and "__restrict__ a" in new and new.count("\n") == NAIVE.count("\n")
    whole = "CARRIER: restrict\nDESCRIPTION: all of it\n```cuda\n" + new + "```\n"
    assert parse_optimization(NAIVE, whole)[0] == new
    from mining.llm_operator import ReplyError
    with pytest.raises(ReplyError):
        parse_optimization(NAIVE, "I would use shared memory.")


# --------------------------------------------------------------------------- the loop on the cpu gate
@needs_cpu_gate
def test_optimize_vector_add_deterministic(skills_file, cache, tmp_path):
    # the skills alone (the library fallback, tested below, would spend the third step)
    cfg = OptimizeConfig(executor="cpu", budget_steps=3, seeds=(0,), jobs=1, store=skills_file, cache=cache,
                         library_fallback=False)
    res = optimize(VECTOR_ADD, Path("naive.cu"), cfg)
    final = res.final_source
    assert "__restrict__" in final and "reinterpret_cast<const float4*>" in final and "gridDim.x * blockDim.x" in final
    # vector accesses come with the grid-stride loop; restrict follows; then nothing applies
    assert res.retrieval["backend"] == "scan" and len(res.lineage) == 3 and res.termination == "nothing_applies"
    assert all(a.verdict == "pass" for a in res.attempts if a.kept)
    res.write(tmp_path / "out")
    lin = json.loads((tmp_path / "out" / "lineage.json").read_text())
    assert [s["step"] for s in lin["steps"]] == [0, 1, 2] and lin["steps"][1]["rewrite"] == "vectorize_elementwise"
    assert (tmp_path / "out" / "final.cu").read_text() == final
    assert (tmp_path / "out" / "states" / "step00.cu").read_text() == NAIVE
    rows = [json.loads(x) for x in (tmp_path / "out" / "attempts.jsonl").read_text().splitlines()]
    assert rows and all({"skill_id", "diff", "verdict", "why", "kept"} <= set(r) for r in rows)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["final_correct"] and summary["kept"] == 2 and "no speed claim" in summary["timing"]


@needs_cpu_gate
def test_structural_rewrites_pass_the_cpu_gate(cache):
    """A row per warp with all-reduced accumulators, then float4 row loops with the alignment guard:
    correct on every softmax workload (odd N, N < 4, M not a multiple of the block)."""
    from mining.gate import GateConfig, run_gate

    soft = (KERNELS / "softmax" / "naive.cu").read_text()
    w = run_rewrite("warp_per_row", soft, Context())[0].source
    v = run_rewrite("vectorize_loop", w, Context())[0].source
    assert "ks_lane" in v and "reinterpret_cast<const float4*>(xr + (0))" in v
    r = run_gate(KERNELS / "softmax", Path("naive.cu"), GateConfig(executor="cpu", stages=("correctness",), seeds=(0,),
                                                                   store=cache), source=v)
    assert r.passed, r.reason


@needs_cpu_gate
def test_budget_and_nothing_applies(skills_file, cache):
    cfg = OptimizeConfig(executor="cpu", budget_steps=5, max_attempts=1, seeds=(0,), jobs=1, store=skills_file,
                         cache=cache)
    res = optimize(VECTOR_ADD, Path("naive.cu"), cfg)
    assert res.termination == "budget_attempts" and len(res.attempts) == 1
    only_restrict = skills_file.parent / "one.json"
    only_restrict.write_text(json.dumps([skill("restrict", "drop_restrict")]))
    # the library fallback off: the old behaviour, stop once the skills have nothing left (budget left over)
    cfg = OptimizeConfig(executor="cpu", budget_steps=5, seeds=(0,), jobs=1, store=only_restrict, cache=cache,
                         library_fallback=False)
    res = optimize(VECTOR_ADD, Path("naive.cu"), cfg)
    assert res.termination == "nothing_applies" and res.steps_used == 2 and len(res.lineage) == 2
    assert all(a.origin == "skill" for a in res.attempts) and res.library_fallback["enabled"] is False
    assert res.library_fallback["proposed_at_steps"] == [] and "library_fallback" not in res.step_log[-1]


# --------------------------------------------------------------------------- the library fallback (issue 20)
def test_library_fallback_order_and_key():
    """The fallback ranks the library as the no-skills baseline does, and its qualifier candidates
    come after every skill candidate (deterministic and LLM)."""
    from mining.operators.registry import get_rewrite
    from prompts.optimize import Candidate, library_source, retrieve
    from prompts.optimize_plan import candidate_key

    lib = retrieve(library_source(), NAIVE, [], 8)
    assert len(lib) > 8 and all(r.skill.skill_id.startswith("lib-") for r in lib)
    priors = [max(get_rewrite(w).prior for w in rewrites_for("", r.skill.carrier)) for r in lib]
    assert priors == sorted(priors, reverse=True)  # the library's fixed order of expected effect
    mats = [(r.skill.carrier, m.rewrite) for r in lib for m in materialize(r.skill, NAIVE)]
    assert mats[0] == ("vector_load", "vectorize_elementwise")  # the library's biggest prior that applies
    cands = [Candidate("add_ldg", "ldg", "lib", "deterministic", rank=1, prior=9.0, origin="library", fallback=True),
             Candidate("llm_skill", "", "llm", "llm", rank=0, prior=1.5),
             Candidate("add_restrict", "restrict", "skill", "deterministic", rank=7, prior=1.1)]
    # an LLM materialization of a structural skill before a qualifier skill's rewrite (issue 20)
    assert [c.source for c in sorted(cands, key=candidate_key)] == ["llm", "skill", "lib"]


def test_structural_steps_before_qualifiers():
    """Issue 20: the library's structural rewrites are gated before a skill's qualifier-level
    candidate (restrict, unroll, ...), after the skills' structural ones (deterministic, then LLM);
    the library's qualifiers last."""
    from prompts.optimize import Candidate
    from prompts.optimize_plan import candidate_key, is_qualifier

    cands = [Candidate("add_ldg", "ldg", "lib-qual", "deterministic", rank=1, prior=1.1, origin="library", fallback=True),
             Candidate("add_restrict", "restrict", "skill-qual", "deterministic", rank=1, prior=1.1),
             Candidate("llm_skill", "", "llm", "llm", rank=0, prior=1.5),
             Candidate("privatize_atomics", "privatized_atomics", "lib-struct", "deterministic", rank=2, prior=8.0,
                       origin="library", fallback=True),
             Candidate("stage_matmul_tiles", "shared_tile", "skill-struct", "deterministic", rank=4, prior=6.0)]
    assert [c.source for c in sorted(cands, key=candidate_key)] == ["skill-struct", "llm", "lib-struct", "skill-qual",
                                                                    "lib-qual"]
    assert [is_qualifier(c) for c in cands] == [True, True, False, False, False]
    # an LLM candidate is placed by its skill's carrier, whatever carrier its reply names
    llm_qual = Candidate("llm_skill", "shared_tile", "llm-qual", "llm", rank=0, prior=1.5, skill=record("restrict", ""))
    assert is_qualifier(llm_qual) and candidate_key(llm_qual) > candidate_key(cands[1])


@needs_cpu_gate
def test_library_fallback_when_no_skill_applies(tmp_path, cache):
    """The store holds a skill no rewrite materializes: the skills arm used to stop at once with its
    budget unspent; now the step takes the library's first rewrite that passes, recorded as the library's."""
    store = tmp_path / "none_applies.json"
    store.write_text(json.dumps([skill("online_softmax", "llm")]))
    cfg = OptimizeConfig(executor="cpu", budget_steps=1, seeds=(0,), jobs=1, store=store, cache=cache)
    res = optimize(VECTOR_ADD, Path("naive.cu"), cfg)
    assert len(res.lineage) == 2 and res.termination == "budget_steps"
    step = res.lineage[1]
    assert step["rewrite"] == "vectorize_elementwise" and step["origin"] == "library" and step["skill_id"] == ""
    assert "reinterpret_cast<const float4*>" in res.final_source
    assert "none of the 1 retrieved skills materializes" in step["origin_why"]
    assert all(a.origin == "library" and not a.skill_id for a in res.attempts)
    s = res.summary()
    assert s["library_fallback"]["enabled"] and s["library_fallback"]["proposed_at_steps"] == [1]
    assert s["library_fallback"]["kept_steps"] == [1] and s["lineage"][1]["origin"] == "library"
    assert res.step_log[0]["library_fallback"]["candidates"] >= 1
    off = optimize(VECTOR_ADD, Path("naive.cu"), OptimizeConfig(executor="cpu", budget_steps=1, seeds=(0,), jobs=1,
                                                                store=store, cache=cache, library_fallback=False))
    assert off.termination == "nothing_applies" and len(off.lineage) == 1 and not off.attempts


@needs_cpu_gate
def test_library_structure_before_a_skills_qualifier(tmp_path, cache):
    """Issue 20: the budget goes to structural steps first. The store's only skill is a qualifier
    (restrict): the library's vectorization is gated and kept before it, and the skill's restrict
    comes next. A structural skill that applies keeps the step for the skills (no fallback)."""
    store = tmp_path / "restrict.json"
    store.write_text(json.dumps([skill("restrict", "drop_restrict")]))
    cfg = OptimizeConfig(executor="cpu", budget_steps=2, seeds=(0,), jobs=1, store=store, cache=cache)
    res = optimize(VECTOR_ADD, Path("naive.cu"), cfg)
    assert [(s["rewrite"], s["origin"]) for s in res.lineage[1:]] == [("vectorize_elementwise", "library"),
                                                                      ("add_restrict", "skill")]
    assert res.lineage[1]["origin_why"].startswith("library fallback: none of the 1 retrieved skills has a structural")
    assert res.lineage[2]["skill_id"] == "sk-restrict" and not res.lineage[2]["origin_why"]
    first = [a for a in res.attempts if a.step == 1]
    assert first[0].origin == "library" and first[0].rewrite == "vectorize_elementwise"
    assert 1 in res.library_fallback["proposed_at_steps"]

    store.write_text(json.dumps([skill("restrict", "drop_restrict"), skill("vector_load", "vector_load_to_scalar")]))
    res = optimize(VECTOR_ADD, Path("naive.cu"), replace(cfg, budget_steps=1))
    assert [(s["rewrite"], s["origin"]) for s in res.lineage[1:]] == [("vectorize_elementwise", "skill")]
    assert "library_fallback" not in res.step_log[0]


REPLY = ("CARRIER: restrict\nDESCRIPTION: promise no aliasing\n<<<<<<< SEARCH\n"
         "__global__ void add(const float* a, const float* b, float* y, int n) {\n=======\n"
         "__global__ void add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y, "
         "int n) {\n>>>>>>> REPLACE\n")


@needs_cpu_gate
def test_llm_materializer_with_mocked_endpoint(tmp_path, cache):
    recs = [skill("register_cache", "register_cache_to_reload",
                  preconditions=[{"kind": "minimum", "axis": "N", "value": 8, "text": "N >= 8", "source": "probe",
                                  "probes": [], "status": "discovered"}])]
    p = tmp_path / "s.json"
    p.write_text(json.dumps(recs))
    cfg = OptimizeConfig(executor="cpu", budget_steps=2, llm_per_step=1, model="openai/mock-model", seeds=(0,), jobs=1,
                         store=p, cache=cache, llm_kwargs=(("mock_response", REPLY),))
    res = optimize(VECTOR_ADD, Path("naive.cu"), cfg)
    assert "__restrict__ a" in res.final_source and res.lineage[1]["materializer"] == "llm"
    assert res.lineage[1]["skill_id"] == "sk-register_cache"
    assert res.llm["calls"] == 2 and res.lineage[1]["origin"] == "skill"  # before the library's candidates
    failed = [a for a in res.attempts if a.verdict == "not_gated"]
    assert failed and "SEARCH text does not occur" in failed[0].why  # step 2: already applied
    # no skill rewrite at step 2 (the LLM's reply no longer applies): the library fallback spends the step
    assert res.termination == "budget_steps" and res.lineage[2]["origin"] == "library"
    # the token budget stops the no-skills baseline
    cfg = OptimizeConfig(executor="cpu", mode="no_skills", budget_steps=3, llm_per_step=1, model="openai/mock-model",
                         seeds=(0,), jobs=1, cache=cache, max_tokens=1, llm_kwargs=(("mock_response", REPLY),))
    res = optimize(VECTOR_ADD, Path("naive.cu"), cfg)
    assert res.termination == "budget_tokens" and res.llm["calls"] == 1 and res.mode == "no_skills"


def test_prompt_carries_the_skill_card(tmp_path):
    from prompts.optimize import Attempt, build_prompt

    rec = record("vector_load", "vector_load_to_scalar")
    p = build_prompt(NAIVE, problem_summary="- name: vector_add", guidance=skill_card(rec, None, []),
                     history=[Attempt(1, 0, "deterministic", "add_ldg", description="ldg", why="dropped: slower")])
    assert "introduce vector_load" in p and "new reduce_sum" in p and "dropped: slower" in p
    assert "  6|     if (i < n) y[i] = a[i] + b[i];" in p and "{{" not in p


# --------------------------------------------------------------------------- bad input
def test_bad_input(tmp_path, skills_file, cache, problem_copy):
    with pytest.raises(BadInput, match="needs|LLM baseline"):
        optimize(VECTOR_ADD, Path("naive.cu"), OptimizeConfig(executor="cpu", mode="no_skills", cache=cache))
    with pytest.raises(BadInput, match="unknown mode"):
        optimize(VECTOR_ADD, Path("naive.cu"), OptimizeConfig(executor="cpu", mode="best", cache=cache))
    with pytest.raises(BadInput, match="not found"):
        optimize(VECTOR_ADD, Path("missing.cu"), OptimizeConfig(executor="cpu", store=skills_file, cache=cache))
    with pytest.raises(BadInput, match="no skills store"):
        SkillSource(tmp_path / "nowhere")
    bad = tmp_path / "bad.json"
    bad.write_text("{\"x\": 1}")
    with pytest.raises(BadInput, match="skill records"):
        SkillSource(bad)
    bad.write_text(json.dumps([skill("restrict", "drop_restrict", provides="not a list")]))
    with pytest.raises(BadInput, match=r"bad.json: skill sk-restrict: provides: "):
        SkillSource(bad)
    if not gpp_missing():
        d = problem_copy("vector_add")
        (d / "wrong.cu").write_text(NAIVE.replace("a[i] + b[i]", "a[i] - b[i]"))
        with pytest.raises(BadInput, match="does not pass the gate"):
            optimize(d, Path("wrong.cu"), OptimizeConfig(executor="cpu", seeds=(0,), jobs=1, store=skills_file,
                                                         cache=cache))


def test_cli_bad_input(tmp_path):
    from typer.testing import CliRunner

    from cli import app

    r = CliRunner().invoke(app, ["optimize", str(tmp_path / "nope"), "--executor", "cpu"])
    assert r.exit_code == 2 and "error:" in r.output
    r = CliRunner().invoke(app, ["optimize", str(VECTOR_ADD), "--kernel", "missing.cu", "--executor", "cpu"])
    assert r.exit_code == 2 and "missing.cu" in r.output
