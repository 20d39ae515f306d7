"""drop_unroll_pragma: delete one `#pragma unroll [N]` line (the loop keeps its default unrolling).

Forward, `add_unroll`: `#pragma unroll` before loops with a compile-time trip count (at most 256),
`#pragma unroll 4` before innermost runtime loops with a unit or constant stride. A pragma never
changes what a loop computes, only how it is scheduled.
"""
from __future__ import annotations

import re

from tree_sitter import Node

from corpora.code.source import Source
from mining.operators.base import (Context, Edit, Materialization, Operator, Pair, Rewrite, candidate)
from mining.operators.nodes import (at_line_start, code, const_stride, const_trip, device_functions, indent_at,
                                    int_value, line_start, loop_var, unit_update)
from corpora.code.parse import walk


class DropUnrollPragma(Operator):
    name = "drop_unroll_pragma"
    carrier = "unroll_pragma"
    description = "remove a `#pragma unroll` before a loop"

    def edits(self, src):
        for m in src.regex(rb"(?m)^[ \t]*#[ \t]*pragma[ \t]+unroll\b[^\n]*(\n|$)"):
            yield Edit(m.start(), m.end(), "")


# --------------------------------------------------------------------------- forward half
def _pragma_before(src: Source, node: Node) -> bool:
    before = src.code[:line_start(src, node.start_byte)].decode("utf-8", "replace").rstrip().split("\n")[-1]
    return re.match(r"\s*#\s*pragma\s+unroll", before) is not None


def add_unroll(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    const_edits, runtime_edits = [], []
    for f, fn in device_functions(src):
        for loop in src.nodes("for_statement", within=fn):
            if loop.parent is None or loop.parent.type != "compound_statement" or not at_line_start(src, loop):
                continue
            if _pragma_before(src, loop):
                continue
            lv = loop_var(src, loop)
            cond = loop.child_by_field_name("condition")
            if lv is None or cond is None:
                continue
            m = re.fullmatch(r"%s\s*<=?\s*(.+)" % re.escape(lv[1]), code(src, cond))
            pos = line_start(src, loop.start_byte)
            ind = indent_at(src, loop.start_byte)
            trip = int_value(src, m.group(1)) if m else None
            start = int_value(src, lv[2])
            if trip is not None and start is not None and unit_update(src, loop, lv[1]) and 0 < trip - start <= 256:
                const_edits.append(Edit(pos, pos, f"{ind}#pragma unroll\n"))
            elif m and not any(n.type in ("while_statement", "do_statement") or
                               (n.type == "for_statement" and not const_trip(src, n))
                               for n in walk(loop.child_by_field_name("body") or loop) if n is not loop) \
                    and (unit_update(src, loop, lv[1]) or const_stride(src, loop, lv[1])):
                runtime_edits.append(Edit(pos, pos, f"{ind}#pragma unroll 4\n"))
    out = []
    if const_edits:
        out.append(candidate(src, const_edits, "add_unroll", f"`#pragma unroll` on {len(const_edits)} constant-trip loop(s)"))
    if runtime_edits:
        out.append(candidate(src, runtime_edits, "add_unroll",
                        f"`#pragma unroll 4` on {len(runtime_edits)} innermost runtime loop(s)"))
    return out


PAIR = Pair(DropUnrollPragma, (Rewrite("add_unroll", "unroll_pragma", add_unroll, prior=1.05),))
