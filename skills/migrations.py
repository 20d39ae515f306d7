"""The store's schema as one ordered list of migrations, and the code that applies them.

Every table of ``store.duckdb`` is made by a migration below; ``schema_migrations`` records which
ones a store has (id, name, when). Opening a store for writing applies the missing ones in order,
in one transaction, under the file's write lock (duckdb lets one process write the file), so an
old store is upgraded in place the first time this release writes it; `Store` also upgrades an
old store opened read-only (skills/store.py).

Rules for a new migration: append it (never edit or reorder an applied one; ids are its place
in the list, from 1), make it work on every store an earlier release could have written, and add
a row to the old-store fixture's checks (tests/skills/test_store_migrations.py) when it changes data.

Migrations 1-4 are the tables as the first releases created them (idempotent ``CREATE ... IF NOT
EXISTS``: a store written before migrations existed already has them, and its data stays as is);
5 drops that release's ``schema_sections`` table, a per-section version number that every open
overwrote and that this list replaces.

``python -m skills.store [STORE]`` upgrades a store and lists its migrations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Migration:
    name: str
    statements: tuple[str, ...]


LEDGER = """CREATE TABLE IF NOT EXISTS schema_migrations (
    id INTEGER PRIMARY KEY,
    name VARCHAR NOT NULL,
    applied_at TIMESTAMP DEFAULT current_timestamp
)"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration("core: trained models", (
        # checkpoint path (under <root>/models) and metadata (seed, epochs, data fingerprint,
        # losses), so a reader knows what it is using
        """CREATE TABLE IF NOT EXISTS models (
            name VARCHAR PRIMARY KEY,
            kind VARCHAR NOT NULL,
            path VARCHAR NOT NULL,
            data_fingerprint VARCHAR,
            metadata JSON,
            created_at TIMESTAMP DEFAULT current_timestamp
        )""",
    )),
    Migration("backends: ingests, targets, files, functions, attributes", (
        # one row per ingest run (what was asked and what came out)
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
        # every source file looked at; parse failures are rows with parsed = false and a reason
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
        # register, register_class, instruction_format, instruction, subtarget_feature,
        # calling_convention, processor, fixup, relocation
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
    )),
    # queryable columns flat (SQL answers directly), the whole record as JSON (`record`, what the
    # Python API reads); skills/kernel_store.py writes them
    Migration("kernels: problems, kernels, lineages, steps, gate runs, skills", (
        """CREATE TABLE IF NOT EXISTS problems (
            problem VARCHAR PRIMARY KEY,
            op_type VARCHAR,
            dir VARCHAR,
            definition JSON,
            updated_at TIMESTAMP DEFAULT current_timestamp
        )""",
        """CREATE TABLE IF NOT EXISTS kernels (
            kernel_hash VARCHAR PRIMARY KEY,
            problem VARCHAR NOT NULL,
            role VARCHAR NOT NULL,
            source VARCHAR NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS lineages (
            lineage_id VARCHAR PRIMARY KEY,
            problem VARCHAR NOT NULL,
            kernel VARCHAR NOT NULL,
            kernel_hash VARCHAR NOT NULL,
            executor VARCHAR NOT NULL,
            strategy VARCHAR NOT NULL,
            termination VARCHAR NOT NULL,
            n_steps INTEGER NOT NULL,
            n_rejections INTEGER NOT NULL,
            final_hash VARCHAR,
            wall_s DOUBLE,
            llm_tokens INTEGER,
            kind VARCHAR DEFAULT 'kernel',
            record JSON NOT NULL,
            created_at TIMESTAMP DEFAULT current_timestamp
        )""",
        """CREATE TABLE IF NOT EXISTS steps (
            lineage_id VARCHAR NOT NULL,
            seq INTEGER NOT NULL,
            step INTEGER NOT NULL,
            accepted BOOLEAN NOT NULL,
            operator VARCHAR NOT NULL,
            carrier VARCHAR NOT NULL,
            proposer VARCHAR,
            site_line INTEGER,
            verdict VARCHAR,
            reason VARCHAR,
            skill_id VARCHAR,
            before_hash VARCHAR,
            after_hash VARCHAR,
            record JSON NOT NULL,
            PRIMARY KEY (lineage_id, seq)
        )""",
        """CREATE TABLE IF NOT EXISTS gate_runs (
            source_hash VARCHAR NOT NULL,
            problem VARCHAR NOT NULL,
            executor VARCHAR NOT NULL,
            verdict VARCHAR NOT NULL,
            reason VARCHAR,
            summary JSON,
            PRIMARY KEY (source_hash, problem, executor)
        )""",
        """CREATE TABLE IF NOT EXISTS skills (
            skill_id VARCHAR PRIMARY KEY,
            key VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            carrier VARCHAR NOT NULL,
            operator VARCHAR NOT NULL,
            intent VARCHAR,
            n_evidence INTEGER NOT NULL,
            problems VARCHAR[],
            has_precondition BOOLEAN,
            record JSON NOT NULL,
            updated_at TIMESTAMP DEFAULT current_timestamp
        )""",
    )),
    # which kernel collections were fetched, from where, at which commit (skills/sources.py)
    Migration("sources: fetched kernel collections", (
        """CREATE TABLE IF NOT EXISTS sources (
            name VARCHAR PRIMARY KEY,
            url VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            commit VARCHAR,
            version VARCHAR,
            dir VARCHAR NOT NULL,
            fetched_at TIMESTAMP,
            info JSON
        )""",
    )),
    Migration("drop schema_sections (replaced by schema_migrations)", (
        "DROP TABLE IF EXISTS schema_sections",
    )),
)
LATEST = len(MIGRATIONS)


class SchemaError(RuntimeError):
    """A store this release cannot use as it is (written by a newer release)."""


def applied(con: Any) -> dict[int, str]:
    """id -> name of the migrations recorded in the store (empty for a store older than them)."""
    import duckdb

    try:
        return {int(i): n for i, n in con.execute("SELECT id, name FROM schema_migrations").fetchall()}
    except duckdb.CatalogException:
        return {}


def check_known(done: dict[int, str], where: str) -> None:
    """Refuse a store with migrations this release does not have (a later release wrote it)."""
    newer = sorted(i for i in done if i > LATEST)
    if newer:
        raise SchemaError(f"{where}: written by a newer kernel-skills (migration {newer[0]} "
                          f"{done[newer[0]]!r} is unknown to this release, which knows 1-{LATEST}); "
                          "upgrade kernel-skills to use it")


def missing(con: Any, where: str) -> list[int]:
    """Ids of the migrations the store lacks, in order; SchemaError when it is from a later release."""
    done = applied(con)
    check_known(done, where)
    return [i for i in range(1, LATEST + 1) if i not in done]


def migrate(con: Any, where: str) -> list[int]:
    """Apply the missing migrations in order, all in one transaction; returns their ids.

    The caller holds a read-write connection, i.e. the store's write lock."""
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(LEDGER)
        todo = missing(con, where)
        for i in todo:
            for stmt in MIGRATIONS[i - 1].statements:
                con.execute(stmt)
            con.execute("INSERT INTO schema_migrations (id, name) VALUES (?, ?)", [i, MIGRATIONS[i - 1].name])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return todo
