"""Kernel tables of the store: problems, kernels, lineages, steps, gate_runs, skills.

The tables are made by the store's migrations (skills/migrations.py, "kernels"). Each table
keeps the queryable columns flat (so `duckdb .skills/store.duckdb` answers SQL
directly) and the whole record as JSON (`record`), the source of truth the Python API reads.

`save_lineage` writes one lineage, its steps, its gate runs and the skills it touched in ONE
transaction: a killed run leaves the store as it was. Saving the same lineage again (same
problem, expert hash, executor and strategy) replaces it, and its evidence inside merged
skills, instead of adding a copy.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterable, Optional

from corpora.store_root import resolve_root
from mining.records import Lineage, Skill, Step
from skills.merge import merge_skill
from skills.record_reads import find_lineage, find_skill, skill_rows
from skills.store import Store, StoreBusy

_SAVE_LOCK = threading.Lock()  # several problems mined in threads of one process share the file


class KernelStore:
    """Kernel-side API over a Store (also used by backend lineages: `kind` tells them apart)."""

    def __init__(self, store: Store):
        self.store = store

    # ---- writes
    def save_lineage(self, lineage: Lineage, skills: Iterable[Skill], problem_info: dict[str, Any],
                     gate_runs: Iterable[dict[str, Any]] = (), kind: str = "kernel") -> list[Skill]:
        """Write a lineage and merge its skills, all or nothing. Returns the merged skills."""
        skills = list(skills)
        store = self.store
        with _SAVE_LOCK, store.transaction() as con:
            old = con.execute("SELECT skill_id FROM steps WHERE lineage_id = ? AND skill_id IS NOT NULL AND skill_id <> ''",
                              [lineage.lineage_id]).fetchall()
            touched = {r[0] for r in old} | {s.skill_id for s in skills}
            con.execute("DELETE FROM steps WHERE lineage_id = ?", [lineage.lineage_id])
            con.execute("DELETE FROM lineages WHERE lineage_id = ?", [lineage.lineage_id])
            con.execute("INSERT INTO problems (problem, op_type, dir, definition) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (problem) DO UPDATE SET op_type = excluded.op_type, dir = excluded.dir, "
                        "definition = excluded.definition, updated_at = now()",
                        [lineage.problem, lineage.op_type, lineage.problem_dir,
                         json.dumps(problem_info.get("definition", {}))])
            for h, text in lineage.sources.items():
                role = "expert" if h == lineage.kernel_hash else ("final" if h == lineage.final_hash else "step")
                con.execute("INSERT INTO kernels (kernel_hash, problem, role, source) VALUES (?, ?, ?, ?) "
                            "ON CONFLICT (kernel_hash) DO NOTHING", [h, lineage.problem, role, text])
            con.execute("INSERT INTO lineages (lineage_id, problem, kernel, kernel_hash, executor, strategy, termination, "
                        "n_steps, n_rejections, final_hash, wall_s, llm_tokens, kind, record) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [lineage.lineage_id, lineage.problem, lineage.kernel, lineage.kernel_hash, lineage.executor,
                         lineage.strategy, lineage.termination, len(lineage.steps), len(lineage.rejections),
                         lineage.final_hash, lineage.wall_s, lineage.llm_tokens, kind,
                         lineage.model_dump_json(exclude={"sources"})])
            for seq, step in enumerate(sorted(lineage.steps + lineage.rejections, key=lambda s: (s.index, not s.accepted))):
                con.execute("INSERT INTO steps (lineage_id, seq, step, accepted, operator, carrier, proposer, site_line, "
                            "verdict, reason, skill_id, before_hash, after_hash, record) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            [lineage.lineage_id, seq, step.index, step.accepted, step.operator, step.carrier,
                             step.proposer, step.site_line, step.verdict, step.reason, step.skill_id,
                             step.before_hash, step.after_hash, step.model_dump_json()])
            for run in gate_runs:
                con.execute("INSERT INTO gate_runs (source_hash, problem, executor, verdict, reason, summary) "
                            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (source_hash, problem, executor) DO UPDATE SET "
                            "verdict = excluded.verdict, reason = excluded.reason, summary = excluded.summary",
                            [run["source_hash"], lineage.problem, lineage.executor, run["verdict"], run.get("reason", ""),
                             json.dumps(run.get("summary", {}))])
            incoming = {s.skill_id: s for s in skills}
            merged_out = []
            for skill_id in sorted(touched):
                row = con.execute("SELECT record FROM skills WHERE skill_id = ?", [skill_id]).fetchone()
                existing = Skill.model_validate_json(row[0]) if row else None
                if existing is not None and skill_id not in incoming:
                    # this lineage no longer produces the skill: drop its evidence only
                    existing = without_lineage(existing, lineage.lineage_id)
                    if not existing.evidence:
                        con.execute("DELETE FROM skills WHERE skill_id = ?", [skill_id])
                        continue
                    merged = merge_skill(None, existing)
                else:
                    merged = merge_skill(existing, incoming[skill_id])
                self._put_skill(con, merged)
                merged_out.append(merged)
        return merged_out

    # ---- lineages that finished while another process held the store
    @property
    def pending_dir(self) -> Path:
        return self.store.root / "pending"

    def spill_pending(self, lineage: Lineage, skills: Iterable[Skill], problem_info: dict[str, Any],
                      gate_runs: Iterable[dict[str, Any]] = ()) -> Path:
        """Write a finished lineage next to the store (atomic rename) when the store stays locked;
        `save_pending` moves it in at the next save. A finished walk is never thrown away."""
        self.pending_dir.mkdir(parents=True, exist_ok=True)
        payload = {"lineage": json.loads(lineage.model_dump_json()), "skills": [json.loads(s.model_dump_json())
                                                                                for s in skills],
                   "problem_info": problem_info, "gate_runs": list(gate_runs)}
        final = self.pending_dir / f"{lineage.lineage_id}.json"
        fd, tmp = tempfile.mkstemp(dir=self.pending_dir, prefix=".tmp-")
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh)
        os.replace(tmp, final)
        return final

    def save_pending(self) -> list[str]:
        """Save the spilled lineages (oldest first); returns their ids. Each file goes once saved."""
        done = []
        files = sorted(self.pending_dir.glob("*.json"), key=lambda p: p.stat().st_mtime) if self.pending_dir.is_dir() else []
        for path in files:
            try:
                data = json.loads(path.read_text())
                lineage = Lineage.model_validate(data["lineage"])
                skills = [Skill.model_validate(x) for x in data["skills"]]
            except (OSError, ValueError, KeyError):
                continue  # a damaged file stays for a person to look at
            self.save_lineage(lineage, skills, data.get("problem_info", {}), data.get("gate_runs", []))
            path.unlink(missing_ok=True)
            done.append(lineage.lineage_id)
        return done

    def put_skill(self, skill: Skill) -> None:
        """Insert or replace one skill record (SKILL.md import)."""
        self.put_skills([skill])

    def put_skills(self, skills: Iterable[Skill]) -> int:
        """Insert or replace skill records, all in one transaction. Returns the count."""
        skills = list(skills)
        with self.store.transaction() as con:
            for s in skills:
                self._put_skill(con, s)
        return len(skills)

    @staticmethod
    def _put_skill(con, s: Skill) -> None:
        con.execute("DELETE FROM skills WHERE skill_id = ?", [s.skill_id])
        con.execute("INSERT INTO skills (skill_id, key, name, kind, carrier, operator, intent, n_evidence, problems, "
                    "has_precondition, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [s.skill_id, s.key, s.name, s.kind, s.carrier, s.operator, s.intent, len(s.evidence),
                     sorted({e.problem for e in s.evidence}),
                     any(p.kind != "none_found" for p in s.preconditions), s.model_dump_json()])

    # ---- reads
    def skills(self, kind: Optional[str] = None, carrier: Optional[str] = None) -> list[Skill]:
        return [Skill.model_validate_json(r) for r in skill_rows(self.store, kind=kind, carrier=carrier)]

    def skill(self, ident: str) -> Optional[Skill]:
        """By id, id prefix (4+ characters), key, name or SKILL.md folder name (record_reads.find_skill)."""
        rec = find_skill(self.store, ident)
        return Skill.model_validate_json(rec) if rec is not None else None

    def lineages(self, problem: Optional[str] = None, kind: Optional[str] = None) -> list[Lineage]:
        sql, params, where = "SELECT record FROM lineages", [], []
        if problem:
            where.append("problem = ?"), params.append(problem)
        if kind:
            where.append("kind = ?"), params.append(kind)
        if where:
            sql += " WHERE " + " AND ".join(where)
        out = []
        for r in self.store.query(sql + " ORDER BY problem, created_at", params):
            lin = Lineage.model_validate_json(r["record"])
            out.append(lin)
        return out

    def lineage(self, ident: str) -> Optional[Lineage]:
        rec = find_lineage(self.store, ident)
        return Lineage.model_validate_json(rec) if rec is not None else None

    def source(self, kernel_hash: str) -> Optional[str]:
        return self.store.scalar("SELECT source FROM kernels WHERE kernel_hash = ?", [kernel_hash])

    def steps(self, lineage_id: str) -> list[Step]:
        return [Step.model_validate_json(r["record"]) for r in
                self.store.query("SELECT record FROM steps WHERE lineage_id = ? ORDER BY seq", [lineage_id])]

    def counts(self) -> dict[str, int]:
        return {t: int(self.store.scalar(f"SELECT count(*) FROM {t}") or 0)
                for t in ("problems", "lineages", "steps", "skills")}



class LineageNotSaved(RuntimeError):
    """The walk finished but the store stayed locked; the lineage waits in <store>/pending/."""


def save_to_store(store_root: Path, lineage: Lineage, skills: list[Skill], problem_info: dict[str, Any],
                  gate_runs: list[dict[str, Any]]) -> tuple[list[Skill], set[str]]:
    """Save a finished lineage, holding the store's write lock for this transaction only; lineages
    spilled earlier by a process that found the store locked go in first. Returns (merged skills,
    skill ids the store had before). When the lock stays taken past the wait limit the lineage
    is written to <store>/pending/ and LineageNotSaved says where: a finished walk is never lost."""
    store = Store(store_root)
    ks = KernelStore(store)
    try:
        with store.session():
            ks.save_pending()
            existing_ids = {s.skill_id for s in ks.skills()}
            merged = ks.save_lineage(lineage, skills, problem_info, gate_runs)
    except StoreBusy as exc:
        spilled = ks.spill_pending(lineage, skills, problem_info, gate_runs)
        raise LineageNotSaved(f"{exc}; the finished lineage was kept in {spilled} and is saved by the next "
                              "`skills mine` into this store") from None
    return merged, existing_ids


class MinedLineages:
    """The store as `skills mine` uses it (mining.mine.LineageStore): a connection only inside each
    read or save, since a walk takes minutes and other processes may write meanwhile."""

    def __init__(self, root: Optional[Path] = None):
        self.root = resolve_root(root)  # as mine_problem resolves MineConfig.store

    def reusable(self, lineage_id: str, fingerprint: str) -> Optional[tuple[Lineage, list[Skill], Optional[str]]]:
        if not Store(self.root).exists():
            return None
        with Store(self.root, read_only=True).session() as reader:
            rks = KernelStore(reader)
            # a store made by `skills corpora fetch` alone has no kernel tables yet
            has_kernel_tables = bool(reader.query(
                "SELECT 1 FROM information_schema.tables WHERE table_name = 'lineages'"))
            existing = rks.lineage(lineage_id) if has_kernel_tables else None
            if existing is None or existing.config.get("fingerprint") != fingerprint:
                return None
            skills = [s for s in rks.skills() if any(e.lineage_id == lineage_id for e in s.evidence)]
            return existing, skills, rks.source(existing.final_hash)

    def save(self, lineage: Lineage, skills: list[Skill], problem_info: dict[str, Any],
             gate_runs: list[dict[str, Any]]) -> tuple[list[Skill], set[str]]:
        return save_to_store(self.root, lineage, skills, problem_info, gate_runs)


def without_lineage(skill: Skill, lineage_id: str) -> Skill:
    s = skill.model_copy(deep=True)
    s.evidence = [e for e in s.evidence if e.lineage_id != lineage_id]
    per = dict(s.provenance.get("per_lineage", {}))
    per.pop(lineage_id, None)
    s.provenance["per_lineage"] = per
    return s
