"""The project's store: one duckdb file plus a chromadb folder under one root.

    <root>/store.duckdb     tables (schema below, grouped in sections)
    <root>/chroma/          vector collections (retrieval/vector_index.py)
    <root>/models/          trained encoders (checkpoints; their metadata is in `models`)
    <root>/cache/           content-addressed caches (gates, tblgen outputs)

Root: ``--store`` / ``SKILLS_STORE`` / ``./.skills``.

The schema is a list of *sections*, each a list of idempotent ``CREATE ... IF NOT EXISTS``
statements. ``core`` holds what every part shares (schema versions, model registry); the
``backends`` section holds the compiler-backend corpus. Kernel tables (kernels, problems,
lineages, steps, gate_runs, skills) go in their own section, registered with
:func:`register_section`, and are created next to these on open.

Writes go through :meth:`Store.transaction`: one transaction per ingest batch, so a killed
run leaves either the whole batch or none of it.
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

from corpora.store_root import resolve_root


# --------------------------------------------------------------------------- schema
CORE_SCHEMA: list[str] = [
    """CREATE TABLE IF NOT EXISTS schema_sections (
        section VARCHAR PRIMARY KEY,
        version INTEGER NOT NULL,
        created_at TIMESTAMP DEFAULT current_timestamp
    )""",
    # Trained encoders and other models: checkpoint path (under <root>/models) and metadata
    # (seed, epochs, data fingerprint, losses) so a reader knows what it is using.
    """CREATE TABLE IF NOT EXISTS models (
        name VARCHAR PRIMARY KEY,
        kind VARCHAR NOT NULL,
        path VARCHAR NOT NULL,
        data_fingerprint VARCHAR,
        metadata JSON,
        created_at TIMESTAMP DEFAULT current_timestamp
    )""",
]

# ---- compiler backends (LLVM-style target trees) -----------------------------------
BACKEND_SCHEMA: list[str] = [
    # One row per ingest run (bookkeeping; what was asked and what came out).
    """CREATE TABLE IF NOT EXISTS backend_ingests (
        ingest_id VARCHAR PRIMARY KEY,
        root VARCHAR NOT NULL,
        started_at TIMESTAMP,
        finished_at TIMESTAMP,
        targets VARCHAR[],
        n_files INTEGER,
        n_failed INTEGER,
        options JSON
    )""",
    """CREATE TABLE IF NOT EXISTS targets (
        target VARCHAR PRIMARY KEY,
        root VARCHAR NOT NULL,
        fingerprint VARCHAR NOT NULL,
        n_files INTEGER,
        n_failed INTEGER,
        n_functions INTEGER,
        n_attributes INTEGER,
        ingest_id VARCHAR,
        ingested_at TIMESTAMP DEFAULT current_timestamp
    )""",
    # Every source file looked at; parse failures are rows with parsed = false and a reason.
    """CREATE TABLE IF NOT EXISTS target_files (
        target VARCHAR NOT NULL,
        path VARCHAR NOT NULL,
        kind VARCHAR NOT NULL,
        sha256 VARCHAR NOT NULL,
        parsed BOOLEAN NOT NULL,
        n_errors INTEGER,
        error VARCHAR,
        n_functions INTEGER,
        PRIMARY KEY (target, path)
    )""",
    """CREATE TABLE IF NOT EXISTS functions (
        func_id VARCHAR PRIMARY KEY,
        target VARCHAR NOT NULL,
        path VARCHAR NOT NULL,
        qualified_name VARCHAR NOT NULL,
        name VARCHAR NOT NULL,
        class_name VARCHAR,
        role VARCHAR NOT NULL,
        signature VARCHAR NOT NULL,
        body VARCHAR NOT NULL,
        statements VARCHAR[],
        identifiers VARCHAR[],
        start_line INTEGER,
        end_line INTEGER,
        start_byte INTEGER,
        end_byte INTEGER,
        in_class BOOLEAN,
        n_errors INTEGER
    )""",
    """CREATE INDEX IF NOT EXISTS functions_role ON functions(role)""",
    # Target attributes: register, register_class, instruction_format, instruction,
    # subtarget_feature, calling_convention, processor, fixup, relocation.
    """CREATE TABLE IF NOT EXISTS target_attributes (
        target VARCHAR NOT NULL,
        kind VARCHAR NOT NULL,
        name VARCHAR NOT NULL,
        parents VARCHAR[],
        refs VARCHAR[],
        value VARCHAR,
        path VARCHAR,
        line INTEGER,
        PRIMARY KEY (target, kind, name)
    )""",
]

SECTIONS: dict[str, tuple[int, list[str]]] = {
    "core": (1, CORE_SCHEMA),
    "backends": (1, BACKEND_SCHEMA),
}
_SECTION_LOCK = threading.Lock()


def register_section(name: str, version: int, statements: Sequence[str]) -> None:
    """Add a schema section (e.g. the kernel tables); created on every later open."""
    with _SECTION_LOCK:
        SECTIONS[name] = (version, list(statements))


class StoreError(RuntimeError):
    """The store cannot be used (not a folder, not a duckdb file). One line, naming the path."""


class StoreBusy(StoreError):
    """Another process kept the store's write lock past the wait limit."""


def lock_timeout_s() -> float:
    """How long to wait for another process's write lock (SKILLS_STORE_LOCK_TIMEOUT, seconds)."""
    try:
        return float(os.environ.get("SKILLS_STORE_LOCK_TIMEOUT", "120"))
    except ValueError:
        return 120.0


class Store:
    """Handle on a store root. Cheap to create; the duckdb connection opens on first use.

    duckdb lets one process at a time open the file for writing (and no reader meanwhile), so
    long-running writers (`skills mine`, indexing) hold a connection only around their reads and
    save transactions (`session()`, `close()`); an open that finds the file locked waits, up to
    `lock_timeout_s()`, saying once on stderr who holds it, then raises StoreBusy."""

    def __init__(self, root: Optional[os.PathLike | str] = None, read_only: bool = False):
        self.root = resolve_root(root)
        self.read_only = read_only
        self._con = None

    # ---- paths
    @property
    def db_path(self) -> Path:
        return self.root / "store.duckdb"

    @property
    def chroma_dir(self) -> Path:
        return self.root / "chroma"

    @property
    def models_dir(self) -> Path:
        return self.root / "models"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    def exists(self) -> bool:
        return self.db_path.is_file()

    # ---- connection
    @property
    def con(self):
        if self._con is None:
            if self.root.exists() and not self.root.is_dir():
                raise StoreError(f"{self.root}: a store is a folder, this is a file (--store / SKILLS_STORE)")
            if self.read_only:
                if not self.exists():
                    raise FileNotFoundError(f"no store at {self.root} (build one with `skills backend index` or `skills mine`)")
                self._con = self._connect()
            else:
                try:
                    self.root.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StoreError(f"{self.root}: cannot create the store folder: {exc.strerror or exc}") from None
                self._con = self._connect()
                self._ensure_schema()
        return self._con

    def _connect(self):
        import duckdb

        deadline = time.monotonic() + lock_timeout_s()
        delay, said = 0.02, False
        while True:
            try:
                return duckdb.connect(str(self.db_path), read_only=self.read_only)
            except duckdb.IOException as exc:
                msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                if "lock" not in msg.lower():
                    raise StoreError(f"{self.db_path}: not a usable store ({msg.removeprefix('IO Error: ')})") from None
                holder = re.search(r"held in (.*?)(?:\. See|$)", msg)
                who = holder.group(1) if holder else "another process"
                if time.monotonic() >= deadline:
                    raise StoreBusy(f"{self.db_path}: still locked by {who} after {lock_timeout_s():g} s "
                                    "(SKILLS_STORE_LOCK_TIMEOUT)") from None
                if not said:
                    sys.stderr.write(f"waiting for the store {self.db_path} (locked by {who}) ...\n")
                    said = True
                time.sleep(delay)
                delay = min(0.5, delay * 1.5)
            except duckdb.Error as exc:
                msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise StoreError(f"{self.db_path}: not a usable store ({msg})") from None

    @contextmanager
    def session(self) -> Iterator["Store"]:
        """Hold the connection (and so the file lock) only inside this block."""
        try:
            yield self
        finally:
            self.close()

    def _ensure_schema(self) -> None:
        con = self._con
        con.execute("BEGIN TRANSACTION")
        try:
            for stmt in CORE_SCHEMA:
                con.execute(stmt)
            for name, (version, stmts) in list(SECTIONS.items()):
                for stmt in stmts:
                    con.execute(stmt)
                con.execute("INSERT INTO schema_sections (section, version) VALUES (?, ?) "
                            "ON CONFLICT (section) DO UPDATE SET version = excluded.version", [name, version])
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """All-or-nothing block; yields the connection."""
        con = self.con
        con.execute("BEGIN TRANSACTION")
        try:
            yield con
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")

    # ---- helpers
    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        cur = self.con.cursor()
        try:
            cur.execute(sql, list(params or []))
            cols = [d[0] for d in cur.description] if cur.description else []
            return [dict(zip(cols, row)) for row in cur.fetchall()]
        finally:
            cur.close()

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        cur = self.con.cursor()
        try:
            cur.execute(sql, list(params or []))
            row = cur.fetchone()
            return row[0] if row else None
        finally:
            cur.close()

    def tables(self) -> list[str]:
        return [r["table_name"] for r in self.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY 1")]

    # ---- bulk load (inside a caller's transaction)
    def bulk_insert(self, con: Any, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
        """Insert many rows fast: write them as JSON lines, let duckdb read them in one statement.

        (executemany costs ~1 ms per row in duckdb; 50k functions would take a minute.)
        """
        rows = list(rows)
        if not rows:
            return 0
        cols = list(columns)
        types = {r[0]: r[1] for r in con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?", [table]).fetchall()}
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.cache_dir, prefix=".bulk-", suffix=".jsonl")
        try:
            with os.fdopen(fd, "w") as fh:
                for row in rows:
                    fh.write(json.dumps(dict(zip(cols, row)), default=str))
                    fh.write("\n")
            spec = ", ".join(f"'{c}': '{types[c]}'" for c in cols)
            con.execute(f"INSERT INTO {table} ({', '.join(cols)}) "
                        f"SELECT {', '.join(cols)} FROM read_json(?, format='newline_delimited', "
                        f"columns={{{spec}}}, maximum_object_size=67108864)", [tmp])
        finally:
            os.unlink(tmp)
        return len(rows)

    # ---- models registry
    def register_model(self, name: str, kind: str, path: Path, fingerprint: str, metadata: dict) -> None:
        with self.transaction() as con:
            con.execute("INSERT INTO models (name, kind, path, data_fingerprint, metadata) VALUES (?, ?, ?, ?, ?) "
                        "ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, path = excluded.path, "
                        "data_fingerprint = excluded.data_fingerprint, metadata = excluded.metadata, "
                        "created_at = now()",
                        [name, kind, str(path), fingerprint, json.dumps(metadata)])

    def model(self, name: str) -> Optional[dict[str, Any]]:
        rows = self.query("SELECT name, kind, path, data_fingerprint, metadata FROM models WHERE name = ?", [name])
        if not rows:
            return None
        row = rows[0]
        row["metadata"] = json.loads(row["metadata"]) if row["metadata"] else {}
        return row
