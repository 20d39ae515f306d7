"""drop_launch_bounds: delete one `__launch_bounds__(...)` qualifier (and the blanks after it)."""
from __future__ import annotations

from mining.operators.base import Edit, Operator


class DropLaunchBounds(Operator):
    name = "drop_launch_bounds"
    carrier = "launch_bounds"
    description = "remove `__launch_bounds__(...)` from a kernel"

    def edits(self, src):
        for m in src.regex(rb"\b__launch_bounds__\s*\([^()]*(?:\([^()]*\)[^()]*)*\)"):
            end = m.end()
            while end < len(src.raw) and src.raw[end] in b" \t":
                end += 1  # the blanks after it (in the original text: a trailing comment stays)
            yield Edit(m.start(), end, "")
