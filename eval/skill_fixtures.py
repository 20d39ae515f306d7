"""Skill records without the gate: for retrieval tests and the synthetic latency scale set.

``proxy_skills(problem_dir)`` walks an expert backward with the deterministic operators exactly
as `skills mine` proposes them (same priority order), but accepts the first candidate of each
step *without* gating it, and lifts each step with mining/lift.py's own exemplar and anchor
functions. The records have the shape `skills mine` writes (identity, intent, exemplar, anchor,
evidence per kernel, guard preconditions) and no measured effects. They are a stand-in for
tests that must not run the gate; the retrieval benchmark uses a really mined store.

``scale_set(skills, n)`` clones records into ``n`` distinct synthetic skills (new identity,
renamed identifiers in the code, a variant tag), for latency and throughput at scale.
"""
from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Optional, Sequence

from mining.records import Anchor, Evidence, Lineage, Precondition, Skill, lineage_identity, sha256, skill_identity

DEFAULT_PROBLEMS = ("reduce_sum", "softmax", "layernorm", "rmsnorm_residual", "sgemm", "transpose", "histogram",
                    "bias_gelu", "conv2d_3x3", "attention_fwd", "exclusive_scan", "hgemm_wmma")


def proxy_walk(expert: str, max_steps: int = 40) -> list[tuple]:
    """[(candidate, optimized text, simpler text)] of an ungated backward walk."""
    from mining.mine import operator_order, deterministic_candidates

    ops = operator_order(None)
    out = []
    cur = expert
    for _ in range(max_steps):
        cands = [c for c in deterministic_candidates(cur, ops) if c.source != cur]
        if not cands:
            break
        c = cands[0]
        out.append((c, cur, c.source))
        cur = c.source
    return out


def proxy_skills(problem_dir: Path, max_steps: int = 40) -> tuple[Lineage, list[Skill]]:
    """(lineage, unmerged skills, one per step) of an ungated walk of ``problem_dir/kernel.cu``."""
    import json

    from mining.exemplar import exemplar
    from mining.lift import CARRIER_SKILLS, CONFLICTS, OPERATOR_SKILLS, REQUIRES, anchor_of
    from mining.probe import code_guard_text, guard_conditions

    problem_dir = Path(problem_dir)
    definition = json.loads((problem_dir / "definition.json").read_text())
    expert = (problem_dir / "kernel.cu").read_text()
    problem, op_type = definition["name"], definition.get("op_type", "")
    khash = sha256(expert)
    lid = lineage_identity(problem, khash, "proxy", "priority")
    skills = []
    for i, (c, optimized, simpler) in enumerate(proxy_walk(expert, max_steps), start=1):
        key, sid = skill_identity(c.carrier, c.operator, c.variant)
        name, intent = OPERATOR_SKILLS.get(c.operator) or CARRIER_SKILLS.get(c.carrier, (c.carrier, c.description))
        before, after, diff = exemplar(optimized, simpler)
        anchor: Anchor = anchor_of(optimized, c.site_start, c.site_end)
        pre = []
        guards = guard_conditions(optimized, c.site_start, c.site_end)
        if guards:
            for kind, axis, value in code_guard_text(guards[0][2]):
                pre.append(Precondition(kind=kind, axis=axis, value=value, text=f"{axis} % {value} == 0",
                                        source="code_guard", status="guarded_in_code"))
        if not pre:
            pre.append(Precondition(kind="none_found", text="no probe (proxy walk)", status="not_needed"))
        ev = Evidence(problem=problem, op_type=op_type, lineage_id=lid, step=i, kernel_hash=khash, executor="proxy",
                      before=before, after=after, diff=diff)
        skills.append(Skill(
            skill_id=sid, key=key, name=name, intent=intent, carrier=c.carrier, operator=c.operator, variant=c.variant,
            anchor=anchor, before=before, after=after, diff=diff, preconditions=pre, evidence=[ev],
            scope={"op_types": [op_type], "problems": [problem]}, requires=REQUIRES.get(c.carrier, []),
            provides=[c.carrier], conflicts=CONFLICTS.get(c.carrier, []),
            verification=[f"{problem} step {i}: proxy walk (not gated)"],
            provenance={"per_lineage": {lid: {"preconditions": [p.model_dump(mode="json") for p in pre],
                                              "risks": [], "verification": [], "dtypes": [], "archs": []}}}))
    lineage = Lineage(lineage_id=lid, problem=problem, problem_dir=str(problem_dir), op_type=op_type,
                      kernel="kernel.cu", kernel_hash=khash, executor="proxy", strategy="priority",
                      termination="complete", sources={khash: expert})
    return lineage, skills


def fill_store(store, corpus: Path, problems: Sequence[str] = DEFAULT_PROBLEMS, max_steps: int = 40) -> list[Skill]:
    """Save the proxy lineages of ``problems`` into a Store (merged as `skills mine` would)."""
    from skills.kernel_store import KernelStore

    ks = KernelStore(store)
    for p in problems:
        lineage, skills = proxy_skills(Path(corpus) / p, max_steps)
        merged: dict[str, Skill] = {}
        from skills.merge import merge_skill

        for s in skills:  # one lineage, several steps of one skill: merge them first
            merged[s.skill_id] = merge_skill(merged.get(s.skill_id), s) if s.skill_id in merged else s
        ks.save_lineage(lineage, list(merged.values()), {"definition": {}})
    return ks.skills()


_IDENT = re.compile(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+)*|[A-Z][a-z]+[A-Za-z]*)\b")
_KEEP = {"float", "int", "for", "if", "else", "return", "const", "void", "unsigned", "size_t", "while", "break",
         "continue", "float4", "int4", "float2", "half", "blockIdx", "threadIdx", "blockDim", "gridDim", "x", "y", "z",
         "pragma", "unroll", "define", "include", "struct", "auto", "sizeof", "static", "inline", "extern", "long"}


def _rename(code: str, rng: random.Random, table: dict[str, str]) -> str:
    def sub(m):
        w = m.group(1)
        if w in _KEEP or w.startswith("__"):
            return w
        if w not in table:
            table[w] = w + rng.choice(["_a", "_b", "_v", "_p", "_t", "2", "_k", "_i"])
        return table[w]
    return _IDENT.sub(sub, code)


def scale_set(skills: Sequence[Skill], n: int, seed: int = 0) -> list[Skill]:
    """``n`` distinct synthetic skills cloned from ``skills`` (identifiers renamed, new identity)."""
    rng = random.Random(seed)
    base = list(skills)
    out = []
    for i in range(n):
        s = base[i % len(base)]
        table: dict[str, str] = {}
        variant = f"syn{i:05d}"
        key, sid = skill_identity(s.carrier, s.operator, variant)
        c = s.model_copy(deep=True)
        c.skill_id, c.key, c.variant = sid, key, variant
        c.name = f"{s.name} [{variant}]"
        c.before, c.after = _rename(s.before, rng, table), _rename(s.after, rng, table)
        c.diff = ""
        c.evidence = []
        for ev in s.evidence[:2]:
            e = ev.model_copy(deep=True)
            e.before, e.after = _rename(ev.before, rng, table), _rename(ev.after, rng, table)
            e.lineage_id = f"ln-syn{i:05d}"
            c.evidence.append(e)
        out.append(c)
    return out


def naive_sources(corpus: Path, problems: Optional[Sequence[str]] = None) -> dict[str, str]:
    corpus = Path(corpus)
    names = problems or [p.name for p in sorted(corpus.iterdir()) if (p / "naive.cu").exists()]
    return {p: (corpus / p / "naive.cu").read_text() for p in names}
