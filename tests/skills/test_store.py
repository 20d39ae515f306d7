import pytest

from corpora.store_root import resolve_root
from skills.store import Store


def test_root_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("SKILLS_STORE", raising=False)
    assert str(resolve_root(None)) == ".skills"
    monkeypatch.setenv("SKILLS_STORE", str(tmp_path / "env"))
    assert resolve_root(None) == tmp_path / "env"
    assert resolve_root(tmp_path / "x") == tmp_path / "x"


def test_schema_is_created_idempotently(tmp_path):
    st = Store(tmp_path / "s")
    tables = set(st.tables())
    assert {"targets", "functions", "target_attributes", "target_files", "backend_ingests", "models",
            "schema_migrations", "skills", "sources"} <= tables
    assert st.db_path.is_file() and st.db_path.parent == tmp_path / "s"
    st.close()
    st2 = Store(tmp_path / "s")  # reopening applies nothing (tests/skills/test_store_migrations.py: old stores)
    assert set(st2.tables()) == tables


def test_transaction_rolls_back_a_failed_batch(tmp_path):
    st = Store(tmp_path / "s")
    with st.transaction() as con:
        con.execute("INSERT INTO targets (target, root, fingerprint) VALUES ('A', '/a', 'f1')")
    with pytest.raises(RuntimeError):
        with st.transaction() as con:
            con.execute("DELETE FROM targets WHERE target = 'A'")
            con.execute("INSERT INTO targets (target, root, fingerprint) VALUES ('B', '/b', 'f2')")
            raise RuntimeError("killed half-way")
    assert [r["target"] for r in st.query("SELECT target FROM targets ORDER BY 1")] == ["A"]


def test_bulk_insert_round_trips_lists_and_nulls(tmp_path):
    st = Store(tmp_path / "s")
    rows = [(f"id{i}", "T", "a.cpp", f"T::f{i}", f"f{i}", "T", f"X::f{i}", "void f()", "{}",
             ["return 1 ;", "x = \"q\" ;"], ["T::R0"] if i % 2 else [], i, i + 1, 0, 10, i % 2 == 0, 0)
            for i in range(250)]
    cols = ("func_id", "target", "path", "qualified_name", "name", "class_name", "role", "signature", "body",
            "statements", "identifiers", "start_line", "end_line", "start_byte", "end_byte", "in_class", "n_errors")
    with st.transaction() as con:
        assert st.bulk_insert(con, "functions", cols, rows) == 250
    got = st.query("SELECT * FROM functions WHERE func_id = 'id7'")[0]
    assert got["statements"] == ["return 1 ;", "x = \"q\" ;"] and got["identifiers"] == ["T::R0"]
    assert got["in_class"] is False and got["start_line"] == 7
    assert st.scalar("SELECT count(*) FROM functions") == 250


def test_model_registry(tmp_path):
    st = Store(tmp_path / "s")
    st.register_model("m1", "graph-encoder", tmp_path / "m1.pt", "fp1", {"seed": 0, "losses": [1.0]})
    st.register_model("m1", "graph-encoder", tmp_path / "m1.pt", "fp2", {"seed": 1})
    m = st.model("m1")
    assert m["data_fingerprint"] == "fp2" and m["metadata"] == {"seed": 1}
    assert st.model("nope") is None


def test_read_only_store_requires_existing_db(tmp_path):
    with pytest.raises(FileNotFoundError, match="no store"):
        Store(tmp_path / "missing", read_only=True).con
