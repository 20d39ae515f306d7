"""Gate soundness suite (eval/soundness): every planted bug rejected, every correct kernel passed.

The full suite runs on the cpu executor with real g++ builds (two worker processes); the pure
pieces (manifest shape, cause classification, the summary) are checked without building anything.
"""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eval.gate_soundness import SUITE, classify, load_manifest, summarize, suite_passed

ROOT = Path(__file__).resolve().parents[2]
REQUIRED_CLASSES = {"missing_syncthreads", "off_by_one_bound", "unwritten_tail", "wrong_shuffle",
                    "shared_padding_index", "int_overflow", "uninitialized_accumulator", "out_of_bounds_read",
                    "early_return_before_barrier", "lost_update", "float4_non_multiple"}


def test_manifest_matches_the_files():
    entries = load_manifest()
    checks = {(e["problem"], e["kernel"], e.get("check", "workloads")) for e in entries}
    assert len(checks) == len(entries), "duplicate manifest entries"
    listed = {(e["problem"], e["kernel"]) for e in entries}
    on_disk = {(p.parent.name, p.name) for p in SUITE.glob("*/*.cu")}
    assert listed == on_disk
    for e in entries:
        name = e["kernel"]
        if e["expect"] == "pass":
            assert e["class"] == "correct" and name.startswith("correct")
        else:
            m = re.fullmatch(r"bug_(.+)_\d+\.cu", name)
            assert m and m.group(1) == e["class"], name
            first = (SUITE / e["problem"] / name).read_text().splitlines()[0]
            assert first.startswith("// PLANTED BUG:"), f"{name}: first line must say what was planted"
    planted = [e for e in entries if e["expect"] == "reject"]
    assert len(planted) >= 25
    assert sum(e["expect"] == "pass" for e in entries) >= 6
    assert REQUIRED_CLASSES <= {e["class"] for e in planted}
    # lost_update covers shared memory (within a block), global memory across blocks, and two
    # lanes of one warp on a global word
    lost = {(e["problem"], e["kernel"]) for e in planted if e["class"] == "lost_update"}
    assert len(lost) >= 3
    # issue 22: each finding has its planted bug (items 1, 2, 3, 4, 5, 8, 9)
    assert {"running_max_init", "no_max_subtraction", "host_heap_overflow", "half_precision_output",
            "size_bound", "size_dependent", "past_end_write"} <= {e["class"] for e in planted}
    assert any(e.get("check") == "probe" and e["expect"] == "reject" for e in entries)
    assert any(e.get("check") == "probe" and e["expect"] == "pass" for e in entries)


def test_classify_causes():
    assert classify("pass", "") == ""
    assert classify("fail", "correctness: forward run, w1[N=1001] seed 0: output 'y' has 0 wrong and 1 unwritten "
                            "of 1001 elements (max abs err 0; first bad {})") == "unwritten"
    assert classify("fail", "correctness: forward run, w0[N=8] seed 0: output 'y' has 3 wrong and 0 unwritten "
                            "of 8 elements") == "wrong_values"
    assert classify("fail", "correctness: forward run, w1[N=1000] seed 0: race: shared write/read k.cu:14") == "race"
    assert classify("fail", "correctness: forward run, w0[N=3] seed 0: timed out after 60s (the kernel never "
                            "returned: hang or deadlock)") == "timeout"
    assert classify("fail", "correctness: gpu run, w2[R=5,C=19] seed 0: cuda: cudaDeviceSynchronize: "
                            "misaligned address") == "misaligned"
    assert classify("fail", "correctness: build failed: k.cu:3: error: x") == "build_failed"
    assert classify("bad_input", "whatever") == "bad_input"


def test_summary_counts():
    rows = [{"class": "race", "expect": "reject", "ok": True}, {"class": "race", "expect": "reject", "ok": False},
            {"class": "oob", "expect": "reject", "ok": True}, {"class": "correct", "expect": "pass", "ok": False},
            {"class": "correct", "expect": "pass", "ok": True}]
    s = summarize(rows)
    assert (s["planted"], s["rejected"], s["correct"], s["false_rejects"]) == (3, 2, 2, 1)
    assert s["by_class"] == {"oob": {"planted": 1, "rejected": 1}, "race": {"planted": 2, "rejected": 1}}
    assert not suite_passed(s)


@pytest.mark.skipif(shutil.which("g++") is None, reason="the cpu executor needs g++")
def test_soundness_suite_cpu(tmp_path: Path):
    out = tmp_path / "soundness.json"
    record = ROOT / "eval" / "results" / "gate_soundness_cpu.json"
    recorded = record.read_bytes() if record.exists() else None
    proc = subprocess.run([sys.executable, "-m", "eval.gate_soundness", "--executor", "cpu", "--json", "--jobs", "2",
                           "--out", str(out), "--store", str(tmp_path / "store")],
                          cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert out.exists(), proc.stderr[-3000:]
    # --out replaces the default destination: the committed record is left alone
    assert (record.read_bytes() if record.exists() else None) == recorded
    summary = json.loads(out.read_text())
    assert {"planted", "rejected", "correct", "false_rejects", "by_class", "entries", "not_applicable"} <= set(summary)
    assert {"commit", "command", "machine", "date_utc"} <= set(summary)  # where the figures came from (eval/stamp.py)
    assert {"cpu", "cores", "gpu", "load_1min"} <= set(summary["machine"])
    assert summary["command"].startswith("python -m eval.gate_soundness --executor cpu")
    assert json.loads(proc.stdout) == summary
    misses = [f"{e['problem']}/{e['kernel']}: {e['verdict']} {e.get('reason', '')}" for e in summary["entries"]
              if not e["ok"]]
    assert summary["rejected"] == summary["planted"], "planted bugs the gate passed:\n" + "\n".join(misses)
    assert summary["false_rejects"] == 0, "correct kernels the gate rejected:\n" + "\n".join(misses)
    assert summary["planted"] >= 25 and summary["correct"] >= 6
    assert len(summary["by_class"]) >= 8
    assert proc.returncode == 0
    # every rejection says why
    assert all(e["why"] for e in summary["entries"] if e["expect"] == "reject")
