"""What `skills list`, `show` and `lineage` print, from the store's JSON records (no pydantic, no
CLI framework): the typer commands in cli.py and the console entry's fast path (skills_entry.py)
both call these, so a read costs Python's start, duckdb and the query.

Each function returns the text to print, or raises ReadError (bad input: no store, nothing by
that name; the caller exits 2 with its one line).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from skills.record_reads import find_lineage, find_skill, parse, skill_rows


class ReadError(ValueError):
    """A read that cannot be answered: one line for the user."""


def open_store(store: Optional[os.PathLike | str]):
    """The store opened read-only, or ReadError naming the folder and the problem."""
    from corpora.store_root import resolve_root
    from skills.store import Store, StoreError

    root = resolve_root(store)
    if root.exists() and not root.is_dir():
        raise ReadError(f"{root}: a store is a folder, this is a file (--store / SKILLS_STORE)")
    if not (root / "store.duckdb").exists():
        raise ReadError(f"{root}: no store here; build one with `skills mine corpora/kernels` (or pass --store DIR)")
    st = Store(root, read_only=True)
    try:
        st.con  # open now: a corrupt, locked or newer file is one line here, not a traceback later
    except StoreError as exc:
        raise ReadError(str(exc)) from None
    return st


def effect_text(skill) -> str:
    for e in skill.effect:
        if e.method == "gpu_timing" and e.time_ratio:
            return f"{e.time_ratio:.2f}x ({e.device})"
    for e in skill.effect:
        if e.method == "static":
            return f"regs {e.registers_delta:+d}, smem {e.smem_delta:+d} ({e.device})"
    return "-"


def _table(header: list[str], rows: list[list[str]], width: int = 60) -> str:
    """Left-aligned columns, cells cut at ``width`` characters."""
    rows = [[c if len(c) <= width else c[:width - 3] + "..." for c in r] for r in rows]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def list_text(store, kind: Optional[str] = None, carrier: Optional[str] = None, as_json: bool = False) -> str:
    skills = [parse(r) for r in skill_rows(open_store(store), kind=kind, carrier=carrier)]
    if as_json:
        return json.dumps([{"skill_id": s.skill_id, "name": s.name, "carrier": s.carrier, "operator": s.operator,
                            "kind": s.kind, "evidence": len(s.evidence), "problems": s.scope.get("problems", []),
                            "preconditions": [p.text for p in s.preconditions if p.kind != "none_found"],
                            "effect": effect_text(s)} for s in skills], indent=2)
    rows = [[s.skill_id, s.name, s.carrier, f"{len(s.evidence)} ({len(s.scope.get('problems', []))} problems)",
             ", ".join(p.text for p in s.preconditions if p.kind != "none_found") or "-", effect_text(s)]
            for s in skills]
    return f"{len(skills)} skills\n" + _table(["id", "name", "carrier", "evidence", "preconditions", "effect"], rows)


def show_text(store, ident: str, as_json: bool = False) -> str:
    if not ident.strip():
        raise ReadError("no skill named '': give a skill id, key, name or SKILL.md folder name (see `skills list`)")
    rec = find_skill(open_store(store), ident)
    if rec is None:
        raise ReadError(f"no skill {ident!r} in the store (see `skills list`)")
    s = parse(rec)
    if as_json:
        return json.dumps(s, indent=2, ensure_ascii=False)
    lines = [f"{s.name}  [{s.skill_id}]", f"  intent: {s.intent}", f"  carrier: {s.carrier}   operator (reversed): {s.operator}",
             f"  anchor: {s.anchor.function} line {s.anchor.line}: {s.anchor.excerpt}"]
    if s.anchor.enclosing_loop:
        lines.append(f"  in loop: {s.anchor.enclosing_loop}")
    lines.append("  preconditions:")
    lines += [f"    - {p.text} [{p.status}, {p.source}]" for p in s.preconditions]
    lines.append("  effect:")
    for e in s.effect:
        if e.method == "gpu_timing":
            lines.append(f"    - {e.device}: {e.time_ratio}x (spread {e.time_ratio_q1}-{e.time_ratio_q3}) on {e.workload}")
        else:
            lines.append(f"    - {e.device}: registers {e.registers_delta:+d}, smem {e.smem_delta:+d} B, spills "
                         f"{e.spill_delta:+d}; SASS {', '.join(f'{k} {v:+d}' for k, v in list(e.sass_delta.items())[:5])}")
    if s.risks:
        lines.append("  risks:")
        lines += [f"    - {r.text} (probe {r.probe}): {r.failure[:160]}" for r in s.risks]
    lines.append(f"  scope: {json.dumps(s.scope)}")
    if s.requires or s.conflicts:
        lines.append(f"  requires: {', '.join(s.requires) or '-'}   conflicts: {', '.join(s.conflicts) or '-'}")
    lines.append(f"  evidence ({len(s.evidence)}):")
    lines += [f"    - {e.problem} lineage {e.lineage_id} step {e.step} ({e.executor})" for e in s.evidence]
    example = s.get("example") or {}  # records mined before examples existed have none
    for half in ("before", "after"):
        if example.get(half):
            lines.append(f"  example {half} ({example.get(half + '_from', '')}):")
            lines += ["    " + ln for ln in example[half].splitlines()[:40]]
    lines.append("  the mined step (simpler -> optimized):")
    lines += ["    " + ln for ln in s.diff.splitlines()[:40]]
    return "\n".join(lines)


def lineage_text(store, ident: str, diffs: bool = True, as_json: bool = False) -> str:
    rec = find_lineage(open_store(store), ident)
    if rec is None:
        raise ReadError(f"no lineage for {ident!r} in the store (mine it with `skills mine`)")
    lin = parse(rec)
    if as_json:
        return json.dumps({k: v for k, v in lin.items() if k != "sources"}, indent=2, ensure_ascii=False)
    out = [f"{lin.problem}: {lin.kernel} ({lin.kernel_hash[:12]}), executor {lin.executor}, strategy {lin.strategy}",
           f"  {len(lin.steps)} steps, {len(lin.rejections)} rejections, termination: {lin.termination}, "
           f"{lin.wall_s:.1f} s, LLM tokens {lin.llm_tokens}"]
    for st in lin.steps:
        eff = next((f"{e.time_ratio}x slower without it ({e.device})" for e in st.effect if e.method == "gpu_timing"), "")
        if not eff:
            eff = next((f"regs {e.registers_delta:+d}, smem {e.smem_delta:+d} ({e.device})" for e in st.effect
                        if e.method == "static"), "")
        out.append(f"step {st.index}: {st.operator} at line {st.site_line} [{st.carrier}] -> skill {st.skill_id}  {eff}")
        if diffs:
            out += ["    " + ln for ln in st.diff.splitlines()[2:60]]
    if lin.rejections:
        out.append("rejected:")
        out += [f"  step {r.index}: {r.operator} at line {r.site_line} [{r.carrier}]: {r.reason[:160]}" for r in lin.rejections]
    return "\n".join(out)


# argv of a read command -> (function, positional parameter, options) for the console entry's fast path
_FLAGS = {"--json": "as_json"}
_VALUES = {"--store": "store"}
READS = {"list": (list_text, None, {"--carrier": "carrier", "--kind": "kind"}, {}),
         "show": (show_text, "ident", {}, {}),
         "lineage": (lineage_text, "ident", {}, {"--diffs": ("diffs", True), "--no-diffs": ("diffs", False)})}


def run_read(argv: list[str]) -> Optional[str]:
    """``argv`` = [command, args...] of `skills list|show|lineage`: the text to print, ReadError on
    bad input, or None when the arguments are not ones this parser takes (--help, an unknown
    option...): then the full CLI answers, with its own messages."""
    if not argv or argv[0] not in READS:
        return None
    fn, positional, values, flags = READS[argv[0]]
    values = {**_VALUES, **values}
    kwargs: dict = {"store": os.environ.get("SKILLS_STORE") or None}
    pos: list[str] = []
    args = argv[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            pos += args[i + 1:]
            break
        name, eq, value = a.partition("=")
        if name in values:
            if not eq:
                if i + 1 >= len(args):
                    return None
                i += 1
                value = args[i]
            kwargs[values[name]] = value
        elif a in _FLAGS:
            kwargs[_FLAGS[a]] = True
        elif a in flags:
            kwargs[flags[a][0]] = flags[a][1]
        elif a.startswith("-") and a != "-":
            return None
        else:
            pos.append(a)
        i += 1
    if len(pos) != (1 if positional else 0):
        return None
    if positional:
        kwargs[positional] = pos[0]
    if kwargs.get("store"):
        kwargs["store"] = Path(kwargs["store"])
    return fn(**kwargs)
