"""Mining: the backward walk (pure, with a scripted checker), precondition induction, and real
walks through the CPU gate: a guarded fast path whose precondition is discovered by probing, the
CLI over the duckdb store (idempotent re-runs, merging across problems, all-or-nothing writes),
and an LLM-proposed step through a mocked endpoint."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mining.probe import Hypothesis, ProbeOutcome, code_guard_text, force_guard, guard_conditions, hypotheses, induce
from mining.walk import Candidate, Verdict, backward_walk

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "corpora" / "kernels"
GUARDED = ROOT / "tests" / "fixtures" / "mine_guarded"
SKILLS = [str(ROOT / ".venv" / "bin" / "skills")] if (ROOT / ".venv" / "bin" / "skills").exists() else \
    [sys.executable, "-c", "from cli import main; main()"]


# --------------------------------------------------------------------------- the walk, scripted
class ScriptedChecker:
    """Texts are strings of tokens; a text passes unless it contains a token in `breaks`."""
    can_time = True

    def __init__(self, breaks=(), costs=None):
        self.breaks, self.costs, self.checked = set(breaks), costs or {}, []

    def check_many(self, sources):
        self.checked += list(sources)
        return [Verdict(passed=not (set(s.split()) & self.breaks), verdict="pass" if not (set(s.split()) & self.breaks)
                        else "fail", reason="broken" if set(s.split()) & self.breaks else "") for s in sources]

    def time(self, source):
        return 1.0 + sum(self.costs.get(t, 0.0) for t in source.split())


def _remove_one(source, step):
    """Candidates: drop one token (in order); dropping 'x*' tokens breaks correctness."""
    toks = source.split()
    return [Candidate(operator=f"drop_{t}", carrier=t, source=" ".join(toks[:i] + toks[i + 1:]),
                      retry_key=f"{t}") for i, t in enumerate(toks)]


def test_walk_priority_runs_to_completion_and_records_rejections():
    res = backward_walk("a b xa c", _remove_one, ScriptedChecker(), strategy="priority", jobs=2)
    assert res.termination == "complete" and res.states[-1] == ""
    # a token whose removal breaks the text is never removed; the walk ends with it and the reason
    res = backward_walk("a b c", _remove_one, _Broken(None, "c"), strategy="priority", jobs=1)
    assert res.termination == "complete" and res.states[-1] == "c"
    assert [c.carrier for _, c, _ in res.rejected] == ["c"]  # tried once: its retry key is remembered
    assert [c.carrier for c, _ in res.accepted] == ["a", "b"]


class _Broken:
    """Removing the token `tok` breaks the text (the result no longer contains it)."""
    can_time = False

    def __init__(self, inner, tok):
        self.inner, self.tok = inner, tok

    def check_many(self, sources):
        return [Verdict(passed=self.tok in s.split(), verdict="pass" if self.tok in s.split() else "fail",
                        reason=f"removing {self.tok} breaks correctness") for s in sources]

    def time(self, source):
        return None


def test_walk_budgets_and_start_failure():
    res = backward_walk("a b c d", _remove_one, ScriptedChecker(), max_steps=2)
    assert res.termination == "step_limit" and len(res.accepted) == 2
    res = backward_walk("a b c", _remove_one, _Broken(None, "zz"), max_rejections=2, jobs=1)
    assert res.termination == "start_failed"
    res = backward_walk("zz a b c", _remove_one, _Broken(None, "zz"), max_rejections=2, jobs=1)
    # 'zz' is the first candidate and breaks; then a is accepted; then zz is not retried (same key)
    assert res.termination in ("complete", "rejection_limit")
    assert all(c.carrier == "zz" for _, c, _ in res.rejected)


def test_walk_smallest_effect_removes_the_cheapest_first():
    costs = {"big": 5.0, "small": 0.1, "mid": 1.0}
    checker = ScriptedChecker(costs=costs)
    res = backward_walk("big small mid", _remove_one, checker, strategy="smallest_effect", jobs=3)
    assert [c.carrier for c, _ in res.accepted] == ["small", "mid", "big"]
    with pytest.raises(ValueError):
        backward_walk("a", _remove_one, _Broken(None, "q"), strategy="smallest_effect")


class _AtomicsChecker(ScriptedChecker):
    """Every text passes; without the token `agg` the text is 20x slower (atomics from every thread)."""

    def time(self, source):
        return 1.0 if "agg" in source.split() else 20.0


@pytest.mark.parametrize("strategy", ["priority", "smallest_effect"])
def test_walk_rejects_a_step_above_the_cost_ceiling(strategy):
    res = backward_walk("agg b c", _remove_one, _AtomicsChecker(), strategy=strategy, jobs=1, max_cost=2.0)
    assert res.termination == "complete" and res.states[-1] == "agg"
    assert sorted(c.carrier for c, _ in res.accepted) == ["b", "c"]
    slow = [(c.carrier, v) for _, c, v in res.rejected]
    assert [c for c, _ in slow] == ["agg"]  # rejected once, with its measured cost, never retried
    assert slow[0][1].verdict == "too_slow" and "20 ms" in slow[0][1].reason and slow[0][1].summary["time"] == 20.0
    # without the ceiling the same walk removes everything
    assert backward_walk("agg b c", _remove_one, _AtomicsChecker(), strategy=strategy, jobs=1).states[-1] == ""


def _add_one(source, step):
    """Forward candidates: append one of the tokens not yet present (a text's cost falls with each)."""
    toks = source.split()
    return [Candidate(operator=f"add_{t}", carrier=t, source=" ".join(toks + [t])) for t in ("p", "q", "r")
            if t not in toks]


def test_walk_forward_fastest_keeps_going_and_stops_on_budget():
    """The forward walk of `skills optimize`: the fastest passing candidate is kept when it beats the
    current text by min_gain; a step that keeps nothing moves on; stop() ends it with its reason."""
    costs = {"p": -0.1, "q": -0.5, "r": -0.001}  # r gains less than min_gain
    res = backward_walk("s", _add_one, ScriptedChecker(costs=costs), strategy="fastest", min_gain=0.02,
                        keep_going=True, check_start=False, max_steps=4)
    # steps 3 and 4 offer only r again (this proposer never leaves it out): nothing kept, budget spent
    assert [c.carrier for c, _ in res.accepted] == ["q", "p"] and res.termination == "step_limit"
    assert res.times == {0: 1.0, 1: 0.5, 2: 0.4}
    # a step that keeps nothing (r is correct but not faster) is not the end while candidates remain
    proposals = []

    def once_each(source, step):
        proposals.append(step)
        return [c for c in _add_one(source, step) if c.carrier == "r"] if step == 1 else \
            [c for c in _add_one(source, step) if c.carrier == "q"] if step == 2 else []
    res = backward_walk("s", once_each, ScriptedChecker(costs=costs), strategy="fastest", min_gain=0.02,
                        keep_going=True, check_start=False)
    assert proposals == [1, 2, 3] and [c.carrier for c, _ in res.accepted] == ["q"]
    res = backward_walk("s", _add_one, ScriptedChecker(costs=costs), strategy="fastest", keep_going=True,
                        check_start=False, stop=lambda step: "budget_attempts" if step > 1 else None)
    assert res.termination == "budget_attempts" and len(res.accepted) == 1
    with pytest.raises(ValueError):
        backward_walk("a", _remove_one, _Broken(None, "q"), strategy="fastest")


# --------------------------------------------------------------------------- induction, guards
def test_induce_picks_the_weakest_consistent_hypothesis():
    space = hypotheses(["N"], tiles=[32], row_axes={"N": 4})
    probes = [1, 3, 4, 8, 17, 32, 33, 64]
    opt = [ProbeOutcome({"N": n}, passed=(n % 4 == 0)) for n in probes]
    simple = [ProbeOutcome({"N": n}, passed=True) for n in probes]
    h = induce(opt, simple, space)
    assert (h.kind, h.axis, h.value) == ("alignment", "N", 4)  # 4 floats = 16-byte rows
    opt = [ProbeOutcome({"N": n}, passed=(n >= 8)) for n in probes]
    h = induce(opt, simple, space)
    assert (h.kind, h.value) == ("minimum", 8)
    # no failure: no precondition; a failure the simpler form shares says nothing
    assert induce(simple, simple, space) is None
    assert induce([ProbeOutcome({"N": 3}, False)], [ProbeOutcome({"N": 3}, False)], space) is None
    assert Hypothesis("power_of_two", "N", 0, "").holds({"N": 64}) and not Hypothesis("power_of_two", "N", 0, "").holds({"N": 96})


def test_guard_detection_and_forcing():
    src = (GUARDED / "kernel.cu").read_text()
    site = src.index("reinterpret_cast<float4*>")
    guards = guard_conditions(src, site, site + 10)
    assert len(guards) == 1 and "n % 4 == 0" in guards[0][2]
    forced = force_guard(src, guards[0][0], guards[0][1])
    assert "if (1)" in forced and forced.count("\n") == src.count("\n")
    assert code_guard_text("(n % 4 == 0 && (m & 31) == 0)") == [("divisible", "n", 4), ("divisible", "m", 32)]


# --------------------------------------------------------------------------- real walks (CPU gate)
def test_guarded_fast_path_precondition_is_discovered(tmp_path):
    from mining.mine import MineConfig, mine_problem
    from skills.kernel_store import KernelStore, MinedLineages
    from skills.store import Store

    cfg = MineConfig(executor="cpu", jobs=1, seeds=(0,), store=tmp_path / "s",
                     operators=("vector_store_to_scalar", "vector_load_to_scalar"))
    out = mine_problem(GUARDED, cfg, lineages=MinedLineages(cfg.store))
    lin = out.lineage
    assert lin.termination == "complete" and [s.operator for s in lin.steps] == ["vector_store_to_scalar",
                                                                                "vector_load_to_scalar"]
    assert set(out.removed_carriers) == {"vector_load", "vector_store"} and out.remaining_carriers == ["restrict"]
    store_skill = next(s for s in out.skills if s.carrier == "vector_store")
    kinds = {(p.kind, p.axis, p.value, p.source) for p in store_skill.preconditions}
    # found twice: written in the code, and by forcing the guard and probing odd sizes
    assert ("divisible", "N", 4, "code_guard") in kinds
    assert ("alignment", "N", 4, "probe") in kinds
    assert store_skill.risks and store_skill.risks[0].probe["N"] % 4 != 0
    assert "unwritten" in store_skill.risks[0].failure or "wrong" in store_skill.risks[0].failure
    assert any(e.method == "static" and "STG.E.128" in e.sass_delta for e in store_skill.effect)
    assert not any(e.method == "gpu_timing" for e in store_skill.effect)  # no speed claims from the CPU
    assert store_skill.evidence[0].diff.startswith("--- simpler.cu")
    assert store_skill.anchor.function == "scale_kernel" and "if_statement" in store_skill.anchor.ast_path
    # the final kernel still passes the gate
    from mining.gate import GateConfig, run_gate

    ks = KernelStore(Store(tmp_path / "s"))
    final = ks.source(lin.final_hash)
    assert "float4" not in final.replace("make_float4", "") or "reinterpret_cast<float4*>" not in final
    assert run_gate(GUARDED, None, GateConfig(executor="cpu", stages=("correctness",), seeds=(1,),
                                              store=tmp_path / "s"), source=final).passed


def _skills(*args, store):
    res = subprocess.run([*SKILLS, *args, "--store", str(store)], capture_output=True, text=True, cwd=ROOT,
                         timeout=900)
    return res


def test_mine_cli_store_is_idempotent_and_merges_across_problems(tmp_path):
    store = tmp_path / "store"
    ops = "drop_launch_bounds,drop_restrict"
    r = _skills("mine", str(KERNELS / "vector_add"), "--executor", "cpu", "--operators", ops, "--seeds", "0",
                "--no-probe", "--no-index", "--json", store=store)
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)
    row = first["problems"][0]
    assert row["steps"] == 2 and row["new_skills"] == 2 and row["termination"] == "complete"
    assert set(row["carriers_removed"]) == {"restrict", "launch_bounds"}
    # unchanged input, same settings: the stored lineage is reused, no gate work
    r = _skills("mine", str(KERNELS / "vector_add"), "--executor", "cpu", "--operators", ops, "--seeds", "0",
                "--no-probe", "--no-index", "--json", store=store)
    again = json.loads(r.stdout)["problems"][0]
    assert again["cached"] and again["wall_s"] < 5
    # a second problem with the same optimizations: evidence is merged, not copied
    r = _skills("mine", str(KERNELS / "tiled_matmul"), "--executor", "cpu", "--operators", "drop_restrict", "--seeds", "0",
                "--no-probe", "--no-index", "--json", store=store)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["problems"][0]["merged_skills"] == 1
    listed = json.loads(_skills("list", "--json", store=store).stdout)
    assert len(listed) == 2
    restrict = next(s for s in listed if s["carrier"] == "restrict")
    assert restrict["evidence"] == 2 and set(restrict["problems"]) == {"vector_add", "tiled_matmul"}
    # re-walking (no cache) replaces the lineage's evidence instead of adding a copy
    r = _skills("mine", str(KERNELS / "tiled_matmul"), "--executor", "cpu", "--operators", "drop_restrict", "--seeds", "0",
                "--no-probe", "--no-cache", "--no-index", "--json", store=store)
    assert r.returncode == 0
    restrict = next(s for s in json.loads(_skills("list", "--json", store=store).stdout) if s["carrier"] == "restrict")
    assert restrict["evidence"] == 2
    shown = json.loads(_skills("show", restrict["skill_id"], "--json", store=store).stdout)
    assert shown["intent"] and shown["anchor"]["function"] and shown["before"] and shown["after"]
    assert {e["problem"] for e in shown["evidence"]} == {"vector_add", "tiled_matmul"}
    lin = json.loads(_skills("lineage", "vector_add", "--json", store=store).stdout)
    assert [s["operator"] for s in lin["steps"]] == ["drop_launch_bounds", "drop_restrict"]
    text = _skills("lineage", "vector_add", store=store).stdout
    assert "termination: complete" in text and "-__global__ void __launch_bounds__(256)" in text
    # bad input: one line, exit 2
    r = _skills("show", "sk-doesnotexist", store=store)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no skill" in r.stderr
    r = _skills("list", store=tmp_path / "empty")
    assert r.returncode == 2 and "skills mine" in r.stderr
    r = _skills("mine", str(tmp_path), "--executor", "cpu", store=store)
    assert r.returncode == 2 and str(tmp_path) in r.stderr


def test_a_failed_save_leaves_nothing_half_written(tmp_path, monkeypatch):
    from mining.mine import MineConfig, mine_problem
    from skills.kernel_store import KernelStore, MinedLineages
    from skills.store import Store

    cfg = MineConfig(executor="cpu", jobs=1, seeds=(0,), store=tmp_path / "s", operators=("drop_restrict",), probe=False)

    def boom(con, skill):
        raise KeyboardInterrupt("killed while writing skills")
    monkeypatch.setattr(KernelStore, "_put_skill", staticmethod(boom))
    with pytest.raises(KeyboardInterrupt):
        mine_problem(KERNELS / "vector_add", cfg, lineages=MinedLineages(cfg.store))
    monkeypatch.undo()
    counts = KernelStore(Store(tmp_path / "s")).counts()
    assert counts == {"problems": 0, "lineages": 0, "steps": 0, "skills": 0}


def test_llm_proposed_step_is_gated_and_counted(tmp_path):
    from mining.mine import MineConfig, mine_problem
    from skills.kernel_store import MinedLineages

    reply = ("CARRIER: restrict\nDESCRIPTION: drop __restrict__ from the output pointer\n"
             "<<<<<<< SEARCH\n__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {\n"
             "=======\n__global__ void scale_kernel(const float* __restrict__ x, float* y, int n) {\n>>>>>>> REPLACE\n")
    cfg = MineConfig(executor="cpu", jobs=1, seeds=(0,), store=tmp_path / "s", operators=("vector_store_to_scalar",),
                     model="openai/gpt-4o", probe=False)
    out = mine_problem(GUARDED, cfg, llm_kwargs={"mock_response": reply}, lineages=MinedLineages(cfg.store))
    lin = out.lineage
    assert [s.proposer for s in lin.steps] == ["deterministic", "llm"]
    llm_step = lin.steps[1]
    assert llm_step.carrier == "restrict" and llm_step.operator == "llm"
    assert lin.llm_tokens > 0 and lin.config["llm_failures"]  # later replies no longer apply, and say why
    assert any(s.operator == "llm" and s.carrier == "restrict" for s in out.skills)


def test_launch_guards_found_in_host_code():
    """Experts guard fast paths where they launch them: a bool flag (bias_gelu), a template flag
    picked under a size test (conv2d_3x3), a negated flag (sgemm's unchecked path). The guard is
    found for a size-sensitive site and not for a site in the guard's else branch."""
    from mining.probe import launch_guards, site_guards

    kernels = ROOT / "corpora" / "kernels"
    src = (kernels / "bias_gelu" / "kernel.cu").read_text()
    site = src.index("reinterpret_cast<const float4*>")
    g = site_guards(src, site, site + 10, "vector_load")
    assert [t for _, _, t in g] == ["(N & 3) == 0"]  # the `vec` initializer, so `cols` follows it
    forced = force_guard(src, g[0][0], g[0][1])
    assert "const bool vec = (1);" in forced
    assert site_guards(src, site, site + 10, "restrict") == []  # not what the guard protects

    src = (kernels / "conv2d_3x3" / "kernel.cu").read_text()
    site = src.index("__ldg(reinterpret_cast<const float4*>")  # global rows: under `if (VEC)`
    assert [t for _, _, t in launch_guards(src, site, site + 10)] == ["((W & 3) == 0)"]

    shared = src.index("reinterpret_cast<const float4*>")  # a shared-tile read in a helper: unguarded
    assert launch_guards(src, shared, shared + 10) == []

    src = (kernels / "sgemm" / "kernel.cu").read_text()
    site = src.index("reinterpret_cast<const float4*>")  # under `if (!CHECK)`: the unchecked launch
    assert [t for _, _, t in launch_guards(src, site, site + 10)] == ["(M % BM == 0 && N % BN == 0 && K % BK == 0)"]
    assert code_guard_text("(M % (128) == 0 && N % (128) == 0)") == [("divisible", "M", 128), ("divisible", "N", 128)]

    src = (GUARDED / "kernel.cu").read_text()
    tail = src.index("y[j] = 2.f * x[j]")  # in the else branch of `if (n % 4 == 0)`
    assert guard_conditions(src, tail, tail + 5) == []


def test_exemplars_carry_no_carrier_annotations():
    """`// carrier:` comments are the corpus's ground truth for recall: a skill's exemplar (shown to
    agents and LLMs) holds the code only."""
    from mining.exemplar import exemplar

    optimized = ("__global__ void // carrier: launch_bounds\nk(float* __restrict__ y) {  // carrier: restrict\n"
                 "    // carrier: unroll_pragma\n#pragma unroll\n    for (int i = 0; i < 4; ++i) y[i] = 0.f;\n}\n")
    simpler = ("__global__ void // carrier: launch_bounds\nk(float* __restrict__ y) {  // carrier: restrict\n"
               "    for (int i = 0; i < 4; ++i) y[i] = 0.f;\n}\n")
    before, after, diff = exemplar(optimized, simpler)
    assert "carrier:" not in before + after + diff
    assert "+#pragma unroll" in diff and "k(float* __restrict__ y) {\n" in after


def test_bench_mining_merge_joins_disjoint_runs_and_recomputes_recall(tmp_path):
    """GPU runs are split over device calls: `--merge` joins them, a later row replaces an earlier
    one for the same problem, and recall and end points are recomputed over the union."""
    from eval.bench_mining import merge

    def row(problem, listed, removed, ratio):
        return {"problem": problem, "status": "mined", "listed": listed, "removed": removed,
                "remaining": [c for c in listed if c not in removed], "steps": len(removed), "rejections": 0,
                "termination": "complete", "final_correct": True,
                "end_point": {"final_over_naive": ratio, "within_2x": ratio <= 2.0}}

    def run(rows):
        return {"executor": "cuda", "machine": "m", "strategy": "priority", "model": "", "max_steps": 100,
                "seeds": [0], "problems": rows, "summary": {"skills": len(rows)}}

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(run([row("p", ["x", "y"], ["x"], 13.5), row("q", ["z"], ["z"], 0.5)])))
    b.write_text(json.dumps(run([row("p", ["x", "y"], ["x", "y"], 0.24)])))
    res = merge([a, b])
    assert [(r["problem"], r["from"]) for r in res["problems"]] == [("p", "b.json"), ("q", "a.json")]
    assert res["summary"]["carrier_recall"] == 1.0 and res["summary"]["end_within_2x_of_naive"] == "2/2"
    assert not merge([a])["summary"]["recall_met"]  # 2 of 3 carriers


def test_gpu_timing_lock_can_be_shared_across_stores(tmp_path, monkeypatch):
    """SKILLS_GPU_LOCK names one lock file for processes mining different stores on one GPU; a
    second holder waits until the first releases it."""
    import fcntl

    from mining.checker import gpu_timing_lock

    shared = tmp_path / "gpu.lock"
    monkeypatch.setenv("SKILLS_GPU_LOCK", str(shared))
    with gpu_timing_lock(tmp_path / "store-a"):
        assert shared.is_file() and not (tmp_path / "store-a" / "cache" / "gpu-timing.lock").exists()
        with open(shared) as other, pytest.raises(BlockingIOError):  # held: another store cannot take it
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(shared) as other:  # released on exit
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    monkeypatch.delenv("SKILLS_GPU_LOCK")
    with gpu_timing_lock(tmp_path / "store-b"):
        assert (tmp_path / "store-b" / "cache" / "gpu-timing.lock").is_file()


def test_a_changed_operator_changes_the_lineage_fingerprint(monkeypatch):
    """A lineage stored before an operator's code changed must not be reused: the mining settings'
    fingerprint covers the operators' (and the walk's) source, not only their names."""
    from pathlib import Path as P

    from mining import mine

    mine.walk_code_hash.cache_clear()
    before_code, before_cfg = mine.walk_code_hash(), mine.MineConfig(executor="cpu").fingerprint()
    real = P.read_bytes
    target = (ROOT / "mining" / "operators" / "restrict.py").resolve()
    monkeypatch.setattr(P, "read_bytes", lambda self: real(self) + (b"\n# edited\n" if self.resolve() == target else b""))
    mine.walk_code_hash.cache_clear()
    try:
        assert mine.walk_code_hash() != before_code
        assert mine.MineConfig(executor="cpu").fingerprint() != before_cfg
    finally:
        monkeypatch.undo()
        mine.walk_code_hash.cache_clear()
    assert mine.walk_code_hash() == before_code  # the same code, the same fingerprint
