"""A save must survive another process opening the store while it closes.

duckdb 2.0 reads a database file's header before it takes the file lock and goes on with that
copy. A writer whose open read the header just before another writer's closing checkpoint, and
took the lock just after, saw the store without that writer's last save; its own checkpoint then
wrote over that save (test_store_concurrency's `sk-a-12` missing under load). These tests widen
that window on purpose: strace holds one writer's lock call for seconds, right after its header read.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SAVER = r"""
import sys, time
from pathlib import Path
from skills.kernel_store import save_to_store
from mining.records import Evidence, Lineage, Skill
root, lid, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
lin = Lineage(lineage_id=lid, problem=f"p_{lid}", problem_dir="/nowhere", kernel="kernel.cu", kernel_hash=lid,
              executor="cpu", strategy="priority", termination="complete")
ev = Evidence(problem=lin.problem, lineage_id=lid, step=1, kernel_hash=lid, executor="cpu")
skills = [Skill(skill_id="shared-skill", key="c+o", name="shared", intent="", carrier="c", operator="o", evidence=[ev]),
          Skill(skill_id=f"sk-{lid}", key=f"c+{lid}", name=lid, intent="", carrier="c", operator=lid, evidence=[ev])]
print("ready", flush=True)
while not go.exists():
    time.sleep(0.01)
save_to_store(root, lin, skills, {"definition": {}}, [])
print("saved", flush=True)
"""

# a Store left open at exit: the interpreter's exit closes it (checkpoint, unlock)
UNCLOSED = r"""
import sys
from skills.kernel_store import KernelStore
from skills.store import Store
from mining.records import Evidence, Skill
ev = Evidence(problem="p_x", lineage_id="x", step=1, kernel_hash="x", executor="cpu")
st = Store(sys.argv[1])
KernelStore(st).put_skill(Skill(skill_id="sk-unclosed", key="c+u", name="u", intent="", carrier="c", operator="u",
                                evidence=[ev]))
print("saved", flush=True)
"""

# stands for a process inside duckdb's open (between its header read and its lock)
OPENING = r"""
import fcntl, os, sys, time
from pathlib import Path
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o666)
fcntl.flock(fd, fcntl.LOCK_SH)
print("opening", flush=True)
while not Path(sys.argv[2]).exists():
    time.sleep(0.01)
"""


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


def _py(code: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _save(store: Path, lid: str, tmp: Path) -> None:
    go = tmp / f"go-{lid}"
    go.touch()
    p = _py(SAVER, store, lid, go)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err


def _skill_ids(store: Path) -> set[str]:
    code = ("import sys, json; from skills.store import Store; st = Store(sys.argv[1], read_only=True); "
            "print(json.dumps([r['skill_id'] for r in st.query('SELECT skill_id FROM skills')]))")
    out = subprocess.run([sys.executable, "-c", code, str(store)], cwd=ROOT, env=_env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout))


def _can_strace() -> bool:
    if not shutil.which("strace"):
        return False
    probe = subprocess.run(["strace", "-qq", "-e", "trace=none", "true"], capture_output=True, timeout=60)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_strace(), reason="needs strace with ptrace allowed (to hold one open mid-way)")
def test_an_open_that_straddles_another_writers_close_loses_nothing(tmp_path):
    store = tmp_path / "store"
    _save(store, "first", tmp_path)
    late_go, quick_go = tmp_path / "go-late", tmp_path / "go-quick"
    late = _py(SAVER, store, "late", late_go)    # opens, and is held between its header read and its lock
    quick = _py(SAVER, store, "quick", quick_go)  # saves and closes inside that window
    assert late.stdout.readline().strip() == "ready" and quick.stdout.readline().strip() == "ready"
    # the late writer's next fcntl() (duckdb taking its file lock) waits 5 s on entry
    tracer = subprocess.Popen(["strace", "-p", str(late.pid), "-e", "trace=pread64,fcntl", "-e", "signal=none",
                               "-e", "inject=fcntl:delay_enter=5000000:when=1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert "attached" in tracer.stderr.readline()
        late_go.touch()
        for line in tracer.stderr:  # duckdb's header read, before the lock
            if line.startswith("pread64(") and ", 12288, 0)" in line and "DUCK" in line:
                break
        else:
            pytest.fail("the late writer never read the store's header")
        threading.Thread(target=tracer.stderr.read, daemon=True).start()  # strace must never block on a full pipe
        quick_go.touch()  # the other writer saves, checkpoints and unlocks while the late one waits to lock
        out, err = quick.communicate(timeout=120)
        assert quick.returncode == 0, err
    finally:
        tracer.terminate()  # detaches: the late writer's calls run at full speed again
        tracer.wait(60)
    out, err = late.communicate(timeout=120)
    assert late.returncode == 0, err
    ids = _skill_ids(store)
    assert {"sk-first", "sk-quick", "sk-late"} <= ids, sorted(ids)  # before the fix: sk-quick lost


@pytest.mark.parametrize("writer", ["save", "exit"])
def test_a_writers_close_waits_for_an_open_in_progress(tmp_path, writer):
    store = tmp_path / "store"
    _save(store, "first", tmp_path)
    release = tmp_path / "release"
    opening = _py(OPENING, store / "store.duckdb.lock", release)
    assert opening.stdout.readline().strip() == "opening"
    if writer == "save":
        go = tmp_path / "go-w"
        go.touch()
        w = _py(SAVER, store, "w", go)
        want = "sk-w"
    else:
        w = _py(UNCLOSED, store)
        want = "sk-unclosed"
    time.sleep(3)  # ample for a save: the writer's close (checkpoint, unlock) must still be waiting
    assert w.poll() is None, w.communicate()
    release.touch()
    out, err = w.communicate(timeout=120)
    assert w.returncode == 0 and "saved" in out, err
    assert opening.wait(60) == 0
    assert {"sk-first", want} <= _skill_ids(store)
