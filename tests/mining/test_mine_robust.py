"""`skills mine` and the store under interrupts, kills and bad input (issue 18): real processes."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from mining.gate.sandbox import isolation

CUDA = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"  # test kernels too long to read inline

ROOT = Path(__file__).resolve().parents[2]
SCALE = ROOT / "tests" / "fixtures" / "hostile" / "scale"
CLI = "import sys; from cli import app; sys.argv[0] = 'skills'; app()"

SPIN = (CUDA / "spin.cu").read_text()


def _env(tmp: Path, **extra) -> dict:
    (tmp / "tmpdir").mkdir(exist_ok=True)
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TMPDIR": str(tmp / "tmpdir"), **extra}


def _run(tmp: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLI, *args], cwd=ROOT, env=_env(tmp), capture_output=True, text=True,
                          timeout=kw.get("timeout", 600))


def _problem(tmp: Path, kernel: str | None = None, **solution) -> Path:
    d = tmp / "scale"
    shutil.copytree(SCALE, d)
    for cu in d.glob("*.cu"):
        if cu.name != "kernel.cu":
            cu.unlink()
    if kernel is not None:
        (d / "kernel.cu").write_text(kernel)
    if solution:
        (d / "solution.toml").write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in solution.items()))
    return d


def _procs_named(name: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and Path(f"/proc/{pid}/comm").read_text().strip() == name:
                out.append(int(pid))
        except OSError:
            pass
    return out


def _default_sigint() -> None:
    """Ctrl-C as a terminal's foreground job gets it: a suite started in the background of a
    non-interactive shell runs with SIGINT ignored, and children inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(pred, timeout: float) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(isolation() is None, reason="needs bubblewrap")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupted_or_killed_mine_leaves_no_process(tmp_path, sig):
    name = "ks_spin_" + uuid.uuid4().hex[:7]
    d = _problem(tmp_path, SPIN.replace("@NAME@", name))
    proc = subprocess.Popen([sys.executable, "-c", CLI, "mine", str(d), "--executor", "cpu", "--jobs", "2",
                             "--seeds", "0", "--no-probe", "--no-index", "--store", str(tmp_path / "store")],
                            cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_sigint)
    try:
        assert _wait_for(lambda: len(_procs_named(name)) >= 2, 300), "the spinning harness never started"
        if sig == signal.SIGINT:
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
        else:
            proc.kill()  # only the mine process: its workers and sandboxes must follow
        out, err = proc.communicate(timeout=240)  # generous: the suite may run at load 9 on 2 cores
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _wait_for(lambda: not _procs_named(name), 10), f"left behind: {_procs_named(name)}"
    if sig == signal.SIGINT:
        assert proc.returncode == 130, err
        assert "Traceback" not in err
        # progress lines ("mining scale ...", "[   0.1s] mining scale (1/1)") aside, one line says what happened
        lines = [ln for ln in err.splitlines() if ln.strip() and not re.match(r"^(mining |\[\s*[\d.]+s\])", ln)]
        assert len(lines) == 1 and lines[0].startswith("error: interrupted: saved 0 lineage(s)"), err
        assert "scale was being mined" in lines[0]
    # the gate's temporary folders are gone too
    assert _wait_for(lambda: not list((tmp_path / "tmpdir").glob("ks-gate-*")), 10) or sig == signal.SIGKILL


def test_mine_and_gate_agree_on_bad_input(tmp_path):
    d = _problem(tmp_path, entry="no_such_entry")
    gate = _run(tmp_path, "gate", str(d), "--executor", "cpu", "--stages", "correctness", "--store", str(tmp_path / "s"))
    mine = _run(tmp_path, "mine", str(d), "--executor", "cpu", "--no-index", "--store", str(tmp_path / "s"))
    assert gate.returncode == 2 and mine.returncode == 2, (gate.stderr, mine.stderr)
    assert "no_such_entry" in gate.stderr and "no_such_entry" in mine.stderr
    (d / "solution.toml").write_text('entry = "scale"\n')
    (d / "kernel.cu").write_bytes(b"\xff\xfe\x00binary")
    mine = _run(tmp_path, "mine", str(d), "--executor", "cpu", "--no-index", "--store", str(tmp_path / "s"))
    assert mine.returncode == 2 and "UTF-8" in mine.stderr and "Traceback" not in mine.stderr


def test_store_that_is_a_file_or_corrupt_is_one_line(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    for args in (["list"], ["show", "x"], ["lineage", "x"], ["report", "--out", str(tmp_path / "r.html")]):
        r = _run(tmp_path, *args, "--store", str(f))
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, (args, r.stderr)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "store.duckdb").write_bytes(os.urandom(20000))
    for args in (["list"], ["show", "x"], ["lineage", "x"], ["report", "--out", str(tmp_path / "r.html")]):
        r = _run(tmp_path, *args, "--store", str(bad))
        assert r.returncode == 2 and r.stderr.count("\n") == 1, (args, r.stderr)
        assert "not a usable store" in r.stderr or "cannot open store" in r.stderr, r.stderr
    d = _problem(tmp_path)
    r = _run(tmp_path, "mine", str(d), "--executor", "cpu", "--no-index", "--store", str(f))
    assert r.returncode == 2 and "is a file" in r.stderr and "Traceback" not in r.stderr


def test_report_out_into_a_missing_folder_is_refused(tmp_path):
    r = _run(tmp_path, "report", "--out", str(tmp_path / "no" / "such" / "r.html"), "--store", str(tmp_path / "s"))
    assert r.returncode == 2 and "does not exist" in r.stderr
    assert not (tmp_path / "no").exists()


@pytest.mark.skipif(isolation() is None, reason="needs bubblewrap")
def test_mine_with_nothing_to_lift_into_an_empty_store(tmp_path):
    d = _problem(tmp_path)  # the honest kernel has no __restrict__: the walk ends at once
    store = tmp_path / "s"
    r = _run(tmp_path, "mine", str(d), "--executor", "cpu", "--seeds", "0", "--no-probe", "--operators", "drop_restrict",
             "--json", "--store", str(store))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    row = json.loads(r.stdout)["problems"][0]
    assert row["steps"] == 0 and row["new_skills"] == 0
    shown = _run(tmp_path, "show", "", "--store", str(store))
    assert shown.returncode == 2 and "no skill" in shown.stderr


def _save(store: Path, name: str) -> None:
    from skills.kernel_store import save_to_store
    from mining.records import Evidence, Lineage, Skill

    lin = Lineage(lineage_id=name, problem=name, problem_dir="/nowhere", kernel="kernel.cu", kernel_hash=name,
                  executor="cpu", strategy="priority", termination="complete")
    ev = Evidence(problem=name, lineage_id=name, step=1, kernel_hash=name, executor="cpu")
    save_to_store(store, lin, [Skill(skill_id=f"sk-{name}", key=name, name=name, intent="", carrier="c",
                                     operator=name, evidence=[ev])], {"definition": {}}, [])


def test_an_index_left_behind_by_a_killed_run_counts_as_stale(tmp_path):
    """`skills mine` re-indexes when the snapshot does not match the store, even if every lineage
    was cached: a run killed while indexing is repaired by the next one."""
    from retrieval.skill_index import store_stamp_of, index_is_current
    from retrieval.snapshot import snapshot_root
    from skills.store import Store

    store = tmp_path / "s"
    assert index_is_current(store)  # nothing to index
    _save(store, "a")
    assert not index_is_current(store)  # skills, no snapshot: the run died before publishing one
    with Store(store, read_only=True).session() as st:
        stamp = store_stamp_of(st)
    snap = snapshot_root(store)
    (snap / "b1").mkdir(parents=True)
    (snap / "b1" / "manifest.json").write_text(json.dumps({"store_stamp": stamp}))
    (snap / "CURRENT").write_text("b1")
    assert index_is_current(store)
    _save(store, "b")  # saved after the index was built
    assert not index_is_current(store)
