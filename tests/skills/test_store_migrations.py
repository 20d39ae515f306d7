"""Store migrations on a store written by the release before them (tests/fixtures/old_store/, made by
its make_store.py from that release's code): opened by this release it is upgraded in place, under
the write lock, by a writer or a reader, and every row reads as the old release read it."""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skills import migrations
from skills.kernel_store import KernelStore
from skills.store import Store, StoreBusy, StoreError, main as store_main

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "old_store"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())
ALL = list(range(1, migrations.LATEST + 1))


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    """A fresh copy of the fixture store (the upgrade writes to it)."""
    root = tmp_path / "store"
    root.mkdir()
    with gzip.open(FIXTURE / "store.duckdb.gz", "rb") as src, open(root / "store.duckdb", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return root


def _applied(st: Store) -> list[int]:
    return [r["id"] for r in st.query("SELECT id FROM schema_migrations ORDER BY id")]


def _assert_reads_the_same(st: Store) -> None:
    old_tables = {t: rows for t, rows in EXPECTED["tables"].items() if t != "schema_sections"}
    assert set(st.tables()) == set(old_tables) | {"schema_migrations"}
    for table, rows in old_tables.items():
        now = [json.loads(json.dumps(r, default=str)) for r in st.query(f"SELECT * FROM {table} ORDER BY ALL")]
        assert now == rows, table
    ks = KernelStore(st)
    assert [s.model_dump(mode="json") for s in ks.skills()] == EXPECTED["records"]["skills"]
    assert [x.model_dump(mode="json") for x in ks.lineages()] == EXPECTED["records"]["lineages"]
    assert [x.model_dump(mode="json") for x in ks.steps(EXPECTED["lineage_id"])] == EXPECTED["records"]["steps"]


def test_the_fixture_is_a_store_of_the_release_before_migrations(old_store):
    import duckdb

    con = duckdb.connect(str(old_store / "store.duckdb"), read_only=True)
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    con.close()
    assert "schema_sections" in tables and "schema_migrations" not in tables
    assert EXPECTED["written_by"] == "b28e1c5518b913c8b9b4d76f0da41e61e7b5bb87"
    assert sum(map(len, EXPECTED["tables"].values())) >= 20 and len(EXPECTED["tables"]) == 14


def test_a_writer_upgrades_an_old_store_in_place_and_its_data_reads_the_same(old_store, capfd):
    with Store(old_store) as st:
        assert _applied(st) == ALL
        _assert_reads_the_same(st)
    err = capfd.readouterr().err
    assert f"upgraded the store {old_store / 'store.duckdb'} in place: migration(s) 1, 2, 3, 4, 5 of " in err
    with Store(old_store) as st:  # once: the next open applies nothing and says nothing
        stamps = st.query("SELECT id, applied_at FROM schema_migrations ORDER BY id")
    with Store(old_store) as st:
        assert st.query("SELECT id, applied_at FROM schema_migrations ORDER BY id") == stamps
    assert capfd.readouterr().err == ""


def test_a_reader_of_an_old_store_gets_it_upgraded(old_store, capfd):
    from skills.read_views import list_text

    st = Store(old_store, read_only=True)
    with st:
        assert _applied(st) == ALL
        _assert_reads_the_same(st)
        with pytest.raises(Exception, match="read-only"):
            st.con.execute("DELETE FROM skills")  # what it holds after the upgrade is a reader's connection
    assert "upgraded the store" in capfd.readouterr().err
    listed = list_text(old_store)  # `skills list` on it
    assert listed.startswith("2 skills") and "Promise the compiler no aliasing" in listed


def test_a_reader_that_cannot_take_the_write_lock_is_told_in_one_line(old_store, monkeypatch):
    """Another process reads the old file with plain duckdb (the README's SQL line): the upgrade waits
    for the write lock, then gives up with one line saying why a reader wanted it."""
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; "
                               f"c = duckdb.connect({str(old_store / 'store.duckdb')!r}, read_only=True); "
                               "print('open', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        monkeypatch.setenv("SKILLS_STORE_LOCK_TIMEOUT", "1")
        with pytest.raises(StoreBusy) as err:
            Store(old_store, read_only=True).con
        msg = str(err.value)
        assert "\n" not in msg and msg.count(str(old_store / "store.duckdb")) == 1
        assert "written by an earlier release (lacks migration(s) 1, 2, 3, 4, 5)" in msg
        assert "upgrading it needs the write lock: still locked by" in msg
    finally:
        holder.kill()
        holder.wait()
    with Store(old_store, read_only=True) as st:  # the holder gone, the next reader upgrades it
        assert _applied(st) == ALL


def test_two_processes_opening_an_old_store_upgrade_it_once(old_store):
    code = ("import sys; sys.path.insert(0, {root!r}); from skills.store import Store; "
            "st = Store({store!r}); print(st.scalar('SELECT count(*) FROM skills')); st.close()")
    procs = [subprocess.Popen([sys.executable, "-c", code.format(root=str(ROOT), store=str(old_store))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert [o[0].strip() for o in outs] == ["2", "2"]
    assert sum("upgraded the store" in o[1] for o in outs) == 1  # the second one found it done
    with Store(old_store) as st:
        assert st.query("SELECT id, count(*) AS n FROM schema_migrations GROUP BY id ORDER BY id") == \
            [{"id": i, "n": 1} for i in ALL]


def test_a_store_of_a_later_release_is_refused_and_left_alone(tmp_path):
    with Store(tmp_path / "s") as st:
        with st.transaction() as con:
            con.execute("INSERT INTO schema_migrations (id, name) VALUES (?, 'a later change')",
                        [migrations.LATEST + 1])
    before = (tmp_path / "s" / "store.duckdb").read_bytes()
    for read_only in (False, True):
        with pytest.raises(StoreError, match=rf"written by a newer kernel-skills \(migration {migrations.LATEST + 1} "
                                             r"'a later change' is unknown"):
            Store(tmp_path / "s", read_only=read_only).con
    assert (tmp_path / "s" / "store.duckdb").read_bytes() == before


def test_a_new_store_has_every_migration_and_says_nothing(tmp_path, capfd):
    t0 = time.time()
    with Store(tmp_path / "s") as st:
        assert _applied(st) == ALL
        assert "schema_sections" not in st.tables()
        assert {"skills", "lineages", "functions", "sources", "models"} <= set(st.tables())
    assert capfd.readouterr().err == "" and time.time() - t0 < 30


def test_migrations_are_append_only():
    """Ids are places in the list; an applied migration is never edited (its name is recorded)."""
    names = [m.name for m in migrations.MIGRATIONS]
    assert names[:5] == ["core: trained models", "backends: ingests, targets, files, functions, attributes",
                         "kernels: problems, kernels, lineages, steps, gate runs, skills",
                         "sources: fetched kernel collections", "drop schema_sections (replaced by schema_migrations)"]
    assert len(set(names)) == len(names)


def test_python_m_skills_store_upgrades_and_lists(old_store, capsys):
    assert store_main([str(old_store)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == migrations.LATEST + 1 and out[-1].endswith(f"up to date ({migrations.LATEST} migrations)")
    assert out[4].split()[0] == "5" and out[4].endswith("drop schema_sections (replaced by schema_migrations)")
    assert store_main([str(old_store / "nope")]) == 2
