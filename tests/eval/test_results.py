"""eval/results/ hygiene: every committed result is listed in its README, stamped (commit, command,
machine), small or compressed; every benchmark stamps through eval/stamp.py and writes into the
repository only where --out says."""
from __future__ import annotations

import gzip
import json
import re
import subprocess
from pathlib import Path

import pytest

from eval.stamp import STAMP_KEYS, default_path, read_json, stamp, write_json, write_result

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "eval" / "results"
FILES = sorted(p for p in RESULTS.iterdir() if p.name.endswith((".json", ".json.gz")))
# every eval tool that writes a result (it takes --out)
BENCHMARKS = sorted(p for p in (ROOT / "eval").glob("*.py") if 'add_argument("--out"' in p.read_text())


def test_every_result_is_in_the_readme_and_every_listed_file_exists():
    readme = (RESULTS / "README.md").read_text()
    listed = set(re.findall(r"`([a-z0-9_]+\.json(?:\.gz)?)`", readme))
    listed |= {n.replace(".json", ".functions.json.gz") for n in listed if n.startswith("backend_") and
               n.endswith(".json") and "selection" not in n and "index_cost" not in n}
    names = {p.name for p in FILES}
    assert names <= listed, sorted(names - listed)
    assert {n for n in listed if not n.startswith("eval")} <= names, sorted(listed - names)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_result_is_stamped_and_kept_small(path):
    data = read_json(path)
    if path.name.endswith(".functions.json.gz"):  # rows beside a stamped summary
        summary = read_json(path.with_name(path.name.replace(".functions.json.gz", ".json")))
        assert summary["functions_file"] == path.name and set(data) == set(summary["targets"])
        return
    assert set(STAMP_KEYS[:3]) <= set(data), sorted(set(STAMP_KEYS[:3]) - set(data))
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", data["commit"]), data["commit"]
    assert data["command"].startswith(("python -m eval.", "bash scripts/")) and data["machine"]
    if path.suffix == ".json":  # summaries; rows are compressed
        assert path.stat().st_size < 200_000, f"{path.name}: {path.stat().st_size} bytes raw; compress its rows"


def test_the_benchmark_list_is_found():
    assert {"bench_gate", "bench_mining", "bench_optimize", "bench_backend", "gate_soundness", "end_point_probes"} <= \
        {p.stem for p in BENCHMARKS}


@pytest.mark.parametrize("bench", BENCHMARKS, ids=lambda p: p.stem)
def test_every_benchmark_stamps_and_writes_the_repository_only_through_out(bench):
    src = bench.read_text()
    assert "from eval.stamp import" in src or "from eval.stamp import" in src.replace("    ", ""), bench.name
    assert "stamp(" in src and '"--out"' in src
    # no default destination inside the repository
    assert not re.search(r'"results"\s*/|RESULTS\s*/|/ "results"', src), bench.name


def test_stamp_names_the_commit_command_and_machine(monkeypatch):
    monkeypatch.delenv("SKILLS_COMMIT", raising=False)
    s = stamp("eval.bench_x", ["--store", "a b", "--json"])
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert s["commit"].split("+")[0] == head
    assert s["command"] == "python -m eval.bench_x --store 'a b' --json"
    assert {"platform", "cpu", "cores", "gpu", "load_1min"} <= set(s["machine"]) and s["machine"]["cores"] >= 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", s["date_utc"])


def test_the_commit_the_caller_names_wins_over_the_checkouts(monkeypatch):
    """A tree copied onto the GPU machine sits in a checkout of its own: its HEAD is not what ran."""
    monkeypatch.setenv("SKILLS_COMMIT", "a" * 40)
    assert stamp("eval.bench_x", [])["commit"] == "a" * 40


def test_write_result_goes_to_out_or_to_an_untracked_temporary_file(tmp_path, capsys):
    out = write_result({"x": 1}, tmp_path / "a" / "r.json", "r.json")
    assert out == tmp_path / "a" / "r.json" and read_json(out) == {"x": 1}
    assert capsys.readouterr().err == ""
    default = write_result({"x": 2}, None, "hygiene-test.json")
    assert default == default_path("hygiene-test.json") and not default.resolve().is_relative_to(ROOT)
    assert str(default) in capsys.readouterr().err
    default.unlink()
    gz = write_json(tmp_path / "rows.json.gz", {"r": [1, 2]})
    assert gzip.decompress(gz.read_bytes()) == b'{\n "r": [\n  1,\n  2\n ]\n}\n'
    assert write_json(tmp_path / "rows2.json.gz", {"r": [1, 2]}).read_bytes() == gz.read_bytes()  # no timestamp
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "rows.json.gz", "rows2.json.gz"]  # no temp left


def test_a_benchmark_run_without_out_leaves_eval_results_alone(tmp_path, monkeypatch, capsys):
    """bench_mining's --merge (it wrote eval/results/bench_mining_<executor>.json by default before):
    the JSON goes to the temporary folder, stamped with this command and the runs' machine."""
    import tempfile

    from eval.bench_mining import main

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    row = {"problem": "p", "status": "mined", "listed": ["x"], "removed": ["x"], "remaining": [], "steps": 1,
           "rejections": 0, "termination": "complete", "final_correct": True}
    part = tmp_path / "part.json"
    part.write_text(json.dumps({"executor": "cpu", "machine": {"cpu": "the runs' CPU"}, "strategy": "priority",
                                "model": "", "max_steps": 9, "seeds": [0], "problems": [row],
                                "summary": {"skills": 1}, "commit": "c0", "command": "python -m eval.bench_mining"}))
    before = {p.name: p.read_bytes() for p in RESULTS.iterdir()}
    assert main(["--merge", str(part)]) == 0
    assert {p.name: p.read_bytes() for p in RESULTS.iterdir()} == before
    written = tmp_path / "kernel-skills-results" / "bench_mining_cpu.json"
    assert f"JSON: {written}" in capsys.readouterr().err
    res = json.loads(written.read_text())
    assert res["command"] == f"python -m eval.bench_mining --merge {part}" and res["summary"]["carrier_recall"] == 1.0
    assert res["machine"] == {"cpu": "the runs' CPU"} and res["parts"] == [
        {"commit": "c0", "command": "python -m eval.bench_mining", "machine": {"cpu": "the runs' CPU"}, "date_utc": None}]
