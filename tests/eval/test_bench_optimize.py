"""eval/bench_optimize.py's per-problem overhead: times read from the loop's profiles, the expert
and eager timed once per problem (not per arm), the loop's timeline in every row."""
from __future__ import annotations

import argparse
import shutil

import pytest

from eval import bench_optimize as bo


def test_workload_ms_reads_a_profile_stage():
    prof = {"status": "pass", "workloads": {"w4[N=64]": {"median_ms": 2.5}}}
    assert bo._workload_ms(prof, "w4[N=64]") == (2.5, "")
    assert bo._workload_ms(prof, "w0") == (None, "workload w0 not timed")
    assert bo._workload_ms({"status": "fail", "reason": "build failed: x"}, "w4[N=64]") == (None, "build failed: x")


def test_expert_and_eager_are_timed_once_per_problem(monkeypatch):
    monkeypatch.setattr(bo, "_ONCE", {})
    calls = []

    def timer():
        calls.append(1)
        return 1.25, ""

    for _arm in ("deterministic", "no_skills_det", "flat_memory_det"):
        assert bo._once(("expert", "/p/softmax", "w4"), timer) == (1.25, "")
    assert bo._once(("expert", "/p/layernorm", "w4"), timer) == (1.25, "")
    assert len(calls) == 2


@pytest.mark.skipif(shutil.which("g++") is None, reason="the cpu executor needs g++")
def test_a_cpu_row_carries_the_loops_timeline(tmp_path):
    args = argparse.Namespace(corpus="house", executor="cpu", budget=1, per_step=2, k=8, model=None, seeds="0", jobs=1,
                              cache=tmp_path / "cache", max_tokens=None, max_usd=None, timeout=60.0, llm_per_step=0,
                              problem_minutes=5.0, llm_kwargs="", retrieval="scan")
    row = bo.run_problem("vector_add", "deterministic", args, None, bo.FIXTURE_SKILLS, None)
    t = row["timeline"]
    assert row["kept_steps"] == 1 and t["input_gate_s"] > 0 and t["gate_s"] > 0 and t["input_time_s"] == 0.0
    assert "naive_ms" not in row  # the cpu executor times nothing


def test_a_share_needs_an_expert_measurably_faster_than_naive():
    from eval.bench_optimize import MIN_EXPERT_GAIN, log_share

    assert log_share(2.0, 1.0, 0.5) == 0.5
    assert log_share(69.129, 0.358, 69.120) is None  # an expert within noise of its naive: no share
    assert log_share(1.0, 0.9, 1.0 / MIN_EXPERT_GAIN) is not None
    assert log_share(1.0, 0.9, 1.0 / (MIN_EXPERT_GAIN * 0.99)) is None


def test_the_aggregate_recomputes_shares_from_the_rows_times():
    from eval.bench_optimize import aggregate

    rows = [  # a stale stored share (written under an older rule) must not count
        {"problem": "a", "final_correct": True, "naive_ms": 2.0, "final_ms": 1.0, "expert_ms": 0.5, "log_share": 0.5},
        {"problem": "b", "final_correct": True, "naive_ms": 69.129, "final_ms": 0.358, "expert_ms": 69.12,
         "log_share": 1092.0},
        {"problem": "c", "final_correct": True, "naive_ms": 1.0, "final_ms": 1.0, "expert_ms": 0.25, "log_share": 0.0},
    ]
    agg = aggregate(rows, "cuda")
    assert "over 2 problems" in agg["log_ratio_share_note"]
    assert abs(agg["geomean_log_ratio_share"] - (0.5 * 0.01) ** 0.5) < 1e-9
    assert abs(agg["mean_log_ratio_share"] - 0.25) < 1e-9


def _row(problem, final_ms, **extra):
    return {"problem": problem, "final_correct": True, "naive_ms": 8.0, "final_ms": final_ms, "expert_ms": 1.0,
            "steps_used": 1, "attempts": 1, "kept_steps": 1, "correctness_failures_caught": 0, **extra}


def test_versus_compares_arms_problem_by_problem_with_a_seeded_interval():
    arms = {"deterministic": {"problems": [_row("a", 1.0), _row("b", 2.0), _row("c", 4.0), _row("d", 8.0)]},
            "no_skills_det": {"problems": [_row("a", 2.0), _row("b", 2.0), _row("c", 2.0), _row("e", 1.0)]}}
    v = bo.versus(arms)["no_skills_det"]
    # shares (ln 8 = 3 halvings): reference 1, 2/3, 1/3 against 2/3, 2/3, 2/3 on the three common problems
    assert v["problems"] == 3 and abs(v["share_ratio"] - ((1.5 * 1.0 * 0.5) ** (1 / 3))) < 1e-9
    assert v["deterministic_leads"] == ["a"] and v["no_skills_det_leads"] == ["c"]
    lo, hi = v["ci95"]
    assert lo <= v["share_ratio"] <= hi and lo < 1 < hi
    assert bo.versus(arms) == bo.versus(arms)  # seeded
    assert bo.versus({"no_skills_det": arms["no_skills_det"]}) == {}  # no reference arm, no comparison


def test_repeated_row_texts_are_said_once_and_come_back_on_a_second_merge(tmp_path):
    why = "when no retrieved skill has a structural materialization left, the library is gated"
    rows = [_row(p, 2.0, llm={"calls": 0}, library_fallback={"enabled": True, "why": why, "kept_steps": [i]},
                 retrieval_note="short") for i, p in enumerate("ab")]
    slim, common = bo.hoist_common(rows)
    assert common == {"llm": {"calls": 0}, "library_fallback.why": why}
    assert "llm" not in slim[0] and slim[1]["library_fallback"] == {"enabled": True, "kept_steps": [1]}
    assert bo.restore_common(slim, common) == rows
    part = {"commit": "0" * 40, "command": "python -m eval.bench_optimize", "machine": {"cpu": "x"}, "executor": "cuda",
            "budget": 10,
            "arms": {"deterministic": {"problems": [_row("a", 1.0), _row("b", 1.0)]},
                     "no_skills_det": {"problems": rows}}}
    (tmp_path / "p.json").write_text(__import__("json").dumps(part))
    origin = {"commit": "1" * 40, "command": "python -m eval.bench_optimize --merge", "machine": {"cpu": "y"}}
    assert bo.merge([tmp_path / "p.json"], tmp_path / "m.json", False, origin, ["no_skills_det"]) == 0
    merged = bo.read_json(tmp_path / "m.json")
    assert list(merged["arms"]) == ["no_skills_det"] and merged["arms"]["no_skills_det"]["every_row"] == common
    assert merged["versus"]["no_skills_det"]["deterministic_leads"] == ["a", "b"]
    assert bo.merge([tmp_path / "p.json"], tmp_path / "x.json", False, origin, ["flat_memory_det"]) == 2
    assert not (tmp_path / "x.json").exists()  # nothing half-written
    assert bo.merge([tmp_path / "m.json"], tmp_path / "m2.json", False, origin) == 0
    again = bo.read_json(tmp_path / "m2.json")["arms"]["no_skills_det"]
    assert bo.restore_common(again["problems"], again["every_row"]) == rows
