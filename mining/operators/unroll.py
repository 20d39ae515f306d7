"""drop_unroll_pragma: delete one `#pragma unroll [N]` line (the loop keeps its default unrolling)."""
from __future__ import annotations

from mining.operators.base import Edit, Operator


class DropUnrollPragma(Operator):
    name = "drop_unroll_pragma"
    carrier = "unroll_pragma"
    description = "remove a `#pragma unroll` before a loop"

    def edits(self, src):
        for m in src.regex(rb"(?m)^[ \t]*#[ \t]*pragma[ \t]+unroll\b[^\n]*(\n|$)"):
            yield Edit(m.start(), m.end(), "")
