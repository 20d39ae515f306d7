"""The project's store: one duckdb file plus a chromadb folder under one root.

    <root>/store.duckdb     tables (made by the migrations of skills/migrations.py)
    <root>/store.duckdb.lock  empty; flocked around opens and closes (see below)
    <root>/chroma/          vector collections (retrieval/vector_index.py)
    <root>/models/          trained encoders (checkpoints; their metadata is in `models`)
    <root>/cache/           content-addressed caches (gates, tblgen outputs)

Root: ``--store`` / ``SKILLS_STORE`` / ``./.skills``.

The schema is the ordered list of migrations in skills/migrations.py (model registry, backend
corpus, kernel tables, fetched sources); the store records which it has, and an open applies the
missing ones under the write lock, so a store written by an earlier release is upgraded in place
(a read-only open upgrades it too, or says in one line why it cannot).

Writes go through :meth:`Store.transaction`: one transaction per ingest batch, so a killed
run leaves either the whole batch or none of it.

Several processes share a store through duckdb's file lock (one writer or many readers), plus
``<root>/store.duckdb.lock``: duckdb reads the file's header *before* it takes its lock and goes on
with that copy, so an open that straddles another process's closing checkpoint would see the store
as it was before that process's last save, and its own next checkpoint would overwrite the save.
Every open holds that file shared and every writer's close holds it alone (:meth:`Store._guard`).
"""
from __future__ import annotations

import atexit
import json
import os
import re
import sys
import tempfile
import time
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

from corpora.store_root import resolve_root
from skills import migrations

try:
    import fcntl
except ImportError:  # no flock (Windows): opens and closes go unguarded, as duckdb alone does them
    fcntl = None


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

    @property
    def lock_path(self) -> Path:
        return self.root / "store.duckdb.lock"

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
                self._con = self._open_read_only()
            else:
                try:
                    self.root.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StoreError(f"{self.root}: cannot create the store folder: {exc.strerror or exc}") from None
                self._con = self._open_for_writing()
            _OPEN.add(self)
        return self._con

    def _open_for_writing(self):
        """A read-write connection (the write lock) with every migration applied."""
        existed = self.exists()
        con = self._connect(read_only=False)
        try:
            done = migrations.migrate(con, str(self.db_path))
        except migrations.SchemaError as exc:
            self._close_con(con, wrote=True)
            raise StoreError(str(exc)) from None
        except BaseException:
            self._close_con(con, wrote=True)
            raise
        if done and existed:  # a store made now is not news; an upgraded one is said once, here
            sys.stderr.write(f"upgraded the store {self.db_path} in place: migration(s) {', '.join(map(str, done))} "
                             f"of {migrations.LATEST} (skills/migrations.py)\n")
        return con

    def _open_read_only(self):
        """A read-only connection to an up-to-date store: an old one is upgraded first (a short
        write-locked open), or the reader is told in one line why it cannot be."""
        con = self._connect(read_only=True)
        try:
            todo = migrations.missing(con, str(self.db_path))
        except migrations.SchemaError as exc:
            con.close()
            raise StoreError(str(exc)) from None
        if not todo:
            return con
        con.close()
        why = f"{self.db_path}: written by an earlier release (lacks migration(s) {', '.join(map(str, todo))})"

        def bare(exc: Exception) -> str:  # the path is said once
            return str(exc).removeprefix(f"{self.db_path}: ")

        try:
            self._close_con(self._open_for_writing(), wrote=True)
        except StoreBusy as exc:
            raise StoreBusy(f"{why}; upgrading it needs the write lock: {bare(exc)}") from None
        except StoreError as exc:
            raise StoreError(f"{why} and cannot be upgraded here ({bare(exc)}); open it once with write access: "
                             f"python -m skills.store {self.root}") from None
        return self._connect(read_only=True)

    def _connect(self, read_only: bool):
        import duckdb

        deadline = time.monotonic() + lock_timeout_s()
        delay, said = 0.02, False

        def waiting(who: str) -> None:
            nonlocal said
            if not said:
                sys.stderr.write(f"waiting for the store {self.db_path} (locked by {who}) ...\n")
                said = True

        while True:
            try:
                # duckdb reads the header before its lock: no writer may finish closing meanwhile
                with self._guard(exclusive=False, deadline=deadline, waiting=waiting):
                    return duckdb.connect(str(self.db_path), read_only=read_only)
            except duckdb.IOException as exc:
                msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                if "lock" not in msg.lower():
                    raise StoreError(f"{self.db_path}: not a usable store ({msg.removeprefix('IO Error: ')})") from None
                holder = re.search(r"held in (.*?)(?:\. See|$)", msg)
                who = holder.group(1) if holder else "another process"
                if time.monotonic() >= deadline:
                    raise StoreBusy(f"{self.db_path}: still locked by {who} after {lock_timeout_s():g} s "
                                    "(SKILLS_STORE_LOCK_TIMEOUT)") from None
                waiting(who)
                time.sleep(delay)
                delay = min(0.5, delay * 1.5)
            except duckdb.Error as exc:
                msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise StoreError(f"{self.db_path}: not a usable store ({msg})") from None

    @contextmanager
    def _guard(self, exclusive: bool, deadline: float, waiting=lambda who: None) -> Iterator[None]:
        """Hold <root>/store.duckdb.lock: shared around duckdb's open, alone around a writer's close.

        duckdb 2.0 reads the file's header, closes it, then opens it again to take its lock, and
        goes on with the header it read first. An open whose read comes before another process's
        closing checkpoint and whose lock comes after it sees the store without that process's last
        save, and its next checkpoint writes over that save. Opens share this lock, a writer's close
        (checkpoint, then unlock) takes it alone: no open straddles a close. Held for milliseconds,
        so a wait past the deadline means a process stuck inside an open or close (StoreBusy)."""
        fd = None
        if fcntl is not None:
            try:
                fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError:
                try:  # a folder this process cannot write: flock works on a read-only descriptor
                    fd = os.open(self.lock_path, os.O_RDONLY)
                except OSError:
                    fd = None  # and none there: no writer closes anything in it
        if fd is None:
            yield
            return
        try:
            start = time.monotonic()
            while True:
                try:
                    fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    now = time.monotonic()
                    if now >= deadline:
                        raise StoreBusy(f"{self.db_path}: another process kept {self.lock_path.name} past "
                                        f"{lock_timeout_s():g} s while opening or closing the store "
                                        "(SKILLS_STORE_LOCK_TIMEOUT)") from None
                    if now - start > 1.0:
                        waiting("a process opening or closing it")
                    time.sleep(0.005)
            yield
        finally:
            os.close(fd)  # releases the flock

    def _close_con(self, con, wrote: bool) -> None:
        """Close a duckdb connection; a read-write one checkpoints and unlocks, so under the guard."""
        if not wrote:
            con.close()
            return
        try:
            with self._guard(exclusive=True, deadline=time.monotonic() + lock_timeout_s()):
                con.close()
        except StoreBusy as exc:  # a process stuck in an open: close anyway rather than hang here
            sys.stderr.write(f"{exc}; closing without it\n")
            con.close()

    @contextmanager
    def session(self) -> Iterator["Store"]:
        """Hold the connection (and so the file lock) only inside this block."""
        try:
            yield self
        finally:
            self.close()

    def close(self) -> None:
        if self._con is not None:
            con, self._con = self._con, None
            _OPEN.discard(self)
            self._close_con(con, wrote=not self.read_only)

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


# Stores still open when the interpreter exits: closed here, under the guard, rather than by
# duckdb's destructor later (that close would checkpoint and unlock unguarded).
_OPEN: "weakref.WeakSet[Store]" = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:
    for store in list(_OPEN):
        try:
            store.close()
        except Exception:  # noqa: BLE001 - exiting: one store's failure must not keep the others open
            pass


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m skills.store [STORE]``: upgrade a store in place, list its migrations."""
    args = sys.argv[1:] if argv is None else argv
    store = Store(args[0] if args else None)
    if not store.exists():
        print(f"error: no store at {store.root}", file=sys.stderr)
        return 2
    try:
        with store:
            rows = store.query("SELECT id, name, applied_at FROM schema_migrations ORDER BY id")
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r in rows:
        print(f"{r['id']:3d}  {r['applied_at']:%Y-%m-%d %H:%M:%S}  {r['name']}")
    print(f"{store.db_path}: up to date ({migrations.LATEST} migrations)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
