"""Several processes, one store: real writer and reader processes (not threads).

The writers save lineages the way `skills mine` does (skills.kernel_store.save_to_store: the write lock
is held inside the save transaction only); a reader process and the real `skills list` /
`skills lineage` CLI read meanwhile. A writer that finds the lock held past its wait limit keeps
its finished lineage in <store>/pending/, and the next save moves it in.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WRITER = r"""
import sys, time
from pathlib import Path
from skills.kernel_store import LineageNotSaved, save_to_store
from mining.records import Evidence, Lineage, Skill
root, name, n, pause = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
for i in range(n):
    time.sleep(pause)  # the walk: no store access
    lid = f"{name}-{i}"
    lin = Lineage(lineage_id=lid, problem=f"{name}_p{i}", problem_dir="/nowhere", kernel="kernel.cu", kernel_hash=lid,
                  executor="cpu", strategy="priority", termination="complete")
    ev = Evidence(problem=lin.problem, lineage_id=lid, step=1, kernel_hash=lid, executor="cpu")
    shared = Skill(skill_id="shared-skill", key="c+o", name="shared", intent="", carrier="c", operator="o", evidence=[ev])
    own = Skill(skill_id=f"sk-{lid}", key=f"c+{lid}", name=lid, intent="", carrier="c", operator=lid, evidence=[ev])
    try:
        save_to_store(root, lin, [shared, own], {"definition": {}}, [])
    except LineageNotSaved as exc:
        print("NOT SAVED", exc, flush=True)
        sys.exit(5)
print("saved", n, flush=True)
"""

READER = r"""
import sys, time
from pathlib import Path
from skills.kernel_store import KernelStore
from skills.store import Store
root, stop = Path(sys.argv[1]), Path(sys.argv[2])
reads, most = 0, 0
while not (stop.exists() and reads):
    if not (root / "store.duckdb").exists():
        time.sleep(0.05)
        continue
    with Store(root, read_only=True).session() as st:
        most = max(most, len(KernelStore(st).lineages()))
    reads += 1
print(reads, most, flush=True)
"""

HOLDER = r"""
import sys, time
from pathlib import Path
from skills.store import Store
st = Store(sys.argv[1])
st.con  # takes the write lock and keeps it until the test says so
print("holding", flush=True)
while not Path(sys.argv[2]).exists():
    time.sleep(0.05)
st.close()
"""


def _env(**extra: str) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **extra}


def _py(code: str, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, env=_env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _cli(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from cli import app; sys.argv[0] = 'skills'; app()"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=120)


def test_two_writers_and_readers_at_once(tmp_path):
    store = tmp_path / "store"
    n = 15
    writers = [_py(WRITER, store, name, n, 0.05) for name in ("a", "b")]
    stop = tmp_path / "writers-done"
    reader = _py(READER, store, stop)
    cli_runs = []
    while any(w.poll() is None for w in writers) or not cli_runs:
        if (store / "store.duckdb").exists():
            cli_runs.append(_cli("list", "--json", "--store", str(store)))
        else:
            time.sleep(0.1)
    for w in writers:
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
        assert "Traceback" not in err
    stop.touch()
    out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    reads, _ = map(int, out.split())
    assert reads > 0
    for r in cli_runs:  # the real CLI read the store while the writers were saving
        assert r.returncode == 0, r.stderr
        json.loads(r.stdout)
    listed = json.loads(_cli("list", "--json", "--store", str(store)).stdout)
    ids = {s["skill_id"] for s in listed}
    assert {f"sk-{w}-{i}" for w in "ab" for i in range(n)} <= ids  # no lineage lost
    shared = next(s for s in listed if s["skill_id"] == "shared-skill")
    assert shared["evidence"] == 2 * n  # both writers' evidence merged into one skill
    lin = _cli("lineage", "a-3", "--json", "--store", str(store))
    assert lin.returncode == 0 and json.loads(lin.stdout)["lineage_id"] == "a-3"


def test_a_writer_that_cannot_get_the_lock_keeps_its_lineage(tmp_path):
    store = tmp_path / "store"
    first = _py(WRITER, store, "first", 1, 0)
    assert first.wait(60) == 0
    release = tmp_path / "release"
    holder = _py(HOLDER, store, release)
    assert holder.stdout.readline().strip() == "holding"
    late = _py(WRITER, store, "late", 1, 0, SKILLS_STORE_LOCK_TIMEOUT="1")
    out, err = late.communicate(timeout=60)
    assert late.returncode == 5 and "NOT SAVED" in out, (out, err)
    assert "waiting for the store" in err and err.count("\n") == 1  # said once who holds it
    assert "kept in" in out
    assert (store / "pending" / "late-0.json").is_file()
    release.touch()
    holder.wait(60)
    nxt = _py(WRITER, store, "next", 1, 0)
    assert nxt.wait(60) == 0
    assert not (store / "pending" / "late-0.json").exists()
    ids = {s["skill_id"] for s in json.loads(_cli("list", "--json", "--store", str(store)).stdout)}
    assert {"sk-first-0", "sk-late-0", "sk-next-0"} <= ids


def test_readers_wait_for_a_short_write(tmp_path):
    store = tmp_path / "store"
    assert _py(WRITER, store, "w", 1, 0).wait(60) == 0
    release = tmp_path / "release"
    holder = _py(HOLDER, store, release)
    assert holder.stdout.readline().strip() == "holding"
    code = "import sys; from cli import app; sys.argv[0] = 'skills'; app()"
    reader = subprocess.Popen([sys.executable, "-c", code, "list", "--json", "--store", str(store)], cwd=ROOT,
                              env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "waiting for the store" in reader.stderr.readline()
    release.touch()  # the writer's transaction ends: the reader goes on
    out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    assert [s["skill_id"] for s in json.loads(out)] == ["shared-skill", "sk-w-0"] or len(json.loads(out)) == 2
    holder.wait(30)
