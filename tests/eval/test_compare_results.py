"""eval/compare_results: real differences are caught, timing noise is not a failure, bad input exits 2."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from eval.compare_results import compare, failed, is_timing, main

ROOT = Path(__file__).resolve().parents[2]

OLD = {"commit": "a" * 40, "command": "python -m eval.gate_soundness", "date_utc": "2026-12-03T14:58:39Z",
       "machine": {"cores": 2, "load_1min": 41.0}, "load_at_start": [2.7, 3.5, 7.2],
       "planted": 57, "rejected": 57, "false_rejects": 0, "wall_s": 743.3,
       "by_class": {"lost_update": {"planted": 4, "rejected": 4}},
       "cold_reads": {"help": {"wall_s": {"n": 5, "p50": 4.0}}}, "cached_ratio": 0.77,
       "targets": {"cold_le_5s": True, "all_rejected": True}, "recall@1": 0.5,
       "entries": [{"kernel": "k1", "verdict": "reject", "wall_s": 3.0}], "backend": "onnxruntime-int8"}


def write(tmp_path: Path, name: str, data) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def changed(**edits):
    new = json.loads(json.dumps(OLD))
    for dotted, value in edits.items():
        node = new
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return new


def rows_by_figure(old, new, **kw):
    return {r["figure"]: r for r in compare(old, new, **kw)}


def test_a_rerun_with_other_stamp_load_and_timings_within_tolerance_reproduces():
    new = changed(commit="b" * 40, date_utc="2026-12-06T00:00:00Z", machine={"cores": 2, "load_1min": 3.0},
                  load_at_start=[0.1, 0.2, 0.3], wall_s=800.0, cached_ratio=0.9,
                  entries=[{"kernel": "k1", "verdict": "reject", "wall_s": 9.0}])
    new["cold_reads"]["help"]["wall_s"]["p50"] = 4.9
    rows = rows_by_figure(OLD, new)
    assert not failed(list(rows.values()))
    assert "commit" not in rows and "machine.cores" not in rows and "load_at_start" not in rows
    assert [f for f in rows if f.startswith("entries")] == ["entries[#]"] and "backend" not in rows
    assert rows["wall_s"]["verdict"] == "within noise" and rows["wall_s"]["delta"] > 56
    assert rows["cold_reads.help.wall_s.p50"]["verdict"] == "within noise"
    assert rows["planted"]["verdict"] == rows["by_class.lost_update.rejected"]["verdict"] == "equal"


def test_a_committed_result_against_itself_is_all_equal():
    committed = json.loads((ROOT / "eval" / "results" / "gate_soundness_cpu.json").read_text())
    rows = compare(committed, committed)
    assert len(rows) > 30 and {r["verdict"] for r in rows} == {"equal"}


def test_real_differences_are_caught():
    for edit, figure in [({"rejected": 56}, "rejected"), ({"false_rejects": 1}, "false_rejects"),
                         ({"by_class__lost_update__rejected": 3}, "by_class.lost_update.rejected"),
                         ({"targets__all_rejected": False}, "targets.all_rejected"),
                         ({"recall@1": 0.4}, "recall@1"), ({"entries": []}, "entries[#]")]:
        rows = rows_by_figure(OLD, changed(**edit))
        assert rows[figure]["verdict"] == "differs", edit
        assert [r["figure"] for r in failed(list(rows.values()))] == [figure], edit


def test_a_figure_that_vanished_fails_and_one_that_appeared_does_not():
    new = changed()
    del new["by_class"]["lost_update"]["rejected"]
    new["correct"] = 16
    rows = rows_by_figure(OLD, new)
    assert rows["by_class.lost_update.rejected"]["verdict"] == "differs" and rows["correct"]["verdict"] == "added"
    assert [r["figure"] for r in failed(list(rows.values()))] == ["by_class.lost_update.rejected"]


def test_timing_beyond_tolerance_is_reported_but_does_not_fail():
    rows = rows_by_figure(OLD, changed(wall_s=2000.0, targets__cold_le_5s=False))
    assert rows["wall_s"]["verdict"] == "differs" and rows["targets.cold_le_5s"]["verdict"] == "differs"
    assert not failed(list(rows.values()))
    assert rows_by_figure(OLD, changed(wall_s=800.0), time_rtol=0.05)["wall_s"]["verdict"] == "differs"


def test_timing_keys():
    assert all(map(is_timing, ["wall_s", "cold_reads.help.wall_s.p50", "ready_ms", "cold_ratio", "seconds.fold",
                               "targets.cached_le_50ms", "query_latency", "speedup_over_naive"]))
    assert is_timing("targets.cold_within_10pct", boolean=True) and is_timing("cold_cli.meets_target_p50", True)
    assert not is_timing("query_warm_server.int8_check.top1_agreement") and not is_timing("targets.all_rejected", True)
    assert not any(map(is_timing, ["planted", "steps_used", "recall@1", "skills", "gnn_step_budget", "mrr",
                                   "false_rejects"]))


def test_cli_exit_codes_table_and_json(tmp_path):
    old = write(tmp_path, "old.json", OLD)
    same = tmp_path / "same.json.gz"
    same.write_bytes(gzip.compress(json.dumps(changed(wall_s=700.0)).encode()))
    worse = write(tmp_path, "worse.json", changed(rejected=50))
    run = [sys.executable, "-m", "eval.compare_results"]
    ok = subprocess.run(run + [str(old), str(same)], cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0 and "within noise" in ok.stdout and "0 non-timing figure(s) differ" in ok.stdout
    bad = subprocess.run(run + [str(old), str(worse), "--json"], cwd=ROOT, capture_output=True, text=True)
    out = json.loads(bad.stdout)
    assert bad.returncode == 1 and out["failed"] == 1
    assert [r for r in out["rows"] if r["figure"] == "rejected"][0] == {
        "figure": "rejected", "old": 57, "new": 50, "delta": -7, "verdict": "differs", "timing": False}


def test_bad_input_is_one_line_naming_the_file(tmp_path, capsys):
    good = write(tmp_path, "good.json", OLD)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    listed = write(tmp_path, "list.json", [1, 2])
    for path in (broken, listed, tmp_path / "missing.json"):
        assert main([str(good), str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err, err


def test_rows_are_matched_by_key_and_a_subset_rerun_marks_the_rest_not_rerun():
    old = {"problems": [{"problem": "sgemm", "recall": 1.0, "wall_s": 700.0},
                        {"problem": "softmax", "recall": 0.8, "wall_s": 90.0}], "summary": {"recall": 0.9}}
    assert "problems[sgemm].recall" not in rows_by_figure(old, old)  # rows only when asked
    new = {"problems": [{"problem": "softmax", "recall": 0.6, "wall_s": 95.0}], "summary": {"recall": 0.6}}
    rows = rows_by_figure({**old, "runs": [1, 2]}, new, rows_key="problem")
    assert rows["problems[sgemm].recall"]["verdict"] == "not re-run"
    assert rows["runs[#]"]["verdict"] == "differs"  # a list gone is no row of a subset
    assert rows["problems[softmax].wall_s"]["verdict"] == "within noise"
    assert {r["figure"] for r in failed(list(rows.values()))} == {"runs[#]", "problems[softmax].recall",
                                                                  "summary.recall"}


def test_rows_matched_by_two_keys():
    old = {"entries": [{"problem": "a", "kernel": "correct.cu", "ok": True},
                       {"problem": "b", "kernel": "correct.cu", "ok": True}]}
    new = {"entries": [{"problem": "a", "kernel": "correct.cu", "ok": True},
                       {"problem": "b", "kernel": "correct.cu", "ok": False}]}
    rows = rows_by_figure(old, new, rows_key="problem,kernel")
    assert rows["entries[a/correct.cu].ok"]["verdict"] == "equal"
    assert [r["figure"] for r in failed(list(rows.values()))] == ["entries[b/correct.cu].ok"]
