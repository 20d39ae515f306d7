"""Applying the forward halves: a retrieved skill materialized on new code, without an LLM.

A mined skill is a deoptimization step reversed. Where that reverse step is mechanical (the
forward half of a pair in mining/operators/), it can be applied to a kernel the skill has never
seen: `materialize(skill, source, ctx)` runs the rewrites the registry names for the skill's
operator, then for its carrier (`registry.rewrites_for`), and returns every candidate they
produce. The gate decides whether a candidate is correct (and, on a GPU, faster); a rewrite only
promises to keep everything outside its edits byte-identical.

Preconditions: a rewrite whose optimized form is only valid under a condition it cannot prove from
the workloads (16-byte alignment of a row start, a size bound for a shared copy) emits a runtime
check with the original code as the fallback, and says so in `Materialization.guards`.
"""
from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Optional

from corpora.code.edit import changed_span
from mining.operators.base import Context, Materialization, Skip
from mining.operators.registry import get_rewrite, rewrites_for
from corpora.code.parse import parse_cuda, syntax_issues
from mining.records import Skill


def materialize(skill: Skill, source: str, ctx: Optional[Context] = None) -> list[Materialization]:
    """Every candidate the skill's forward rewrites produce on `source` (possibly none)."""
    ctx = ctx or Context()
    out: list[Materialization] = []
    seen = {source}
    for name in rewrites_for(skill.operator, skill.carrier):
        for m in run_rewrite(name, source, ctx):
            if m.source in seen:
                continue
            seen.add(m.source)
            m.skill_id = skill.skill_id
            m.skill_name = skill.name
            out.append(m)
    return out


_MEMO: dict[tuple[str, str], list[Materialization]] = {}


def run_rewrite(name: str, source: str, ctx: Optional[Context] = None) -> list[Materialization]:
    """One rewrite, with its failures contained: a rewrite bug yields no candidate, never an exception.
    Memoized per (rewrite, source): several skills often map to the same rewrite."""
    key = (name, hashlib.sha1(source.encode()).hexdigest())
    if key not in _MEMO:
        if len(_MEMO) > 512:
            _MEMO.clear()
        _MEMO[key] = _run_rewrite(name, source, ctx)
    return [replace(m) for m in _MEMO[key]]


def _run_rewrite(name: str, source: str, ctx: Optional[Context] = None) -> list[Materialization]:
    rw = get_rewrite(name)
    try:
        res = rw.fn(source, ctx or Context())
    except (Skip, ValueError, KeyError, IndexError, AttributeError, TypeError, RecursionError):
        return []
    before = len(syntax_issues(parse_cuda(source), limit=50))
    good = []
    for m in res:
        if m.source == source or len(syntax_issues(parse_cuda(m.source), limit=50)) > before:
            continue
        m.carrier = m.carrier or get_rewrite(m.rewrite).carrier
        _locate(source, m)
        good.append(m)
    return good


def _locate(old: str, m: Materialization) -> None:
    """The changed byte range of the old source, its first line and an excerpt of that line."""
    e = changed_span(old, m.source)
    m.start, m.end = e.start, e.end
    m.site_line = old.encode().count(b"\n", 0, e.start) + 1
    if not m.site_excerpt:
        line = old.split("\n")[m.site_line - 1] if m.site_line - 1 < len(old.split("\n")) else ""
        m.site_excerpt = " ".join(line.split())[:160]
