"""drop_launch_bounds: delete one `__launch_bounds__(...)` qualifier (and the blanks after it).

Forward, `add_launch_bounds`: `__launch_bounds__(B)` on a kernel whose every launch has the same
literal block size B (<= 1024). Sound because every launch then runs at most B threads per block;
a kernel launched with other or unknown block sizes is not a site.
"""
from __future__ import annotations



from corpora.code.source import Source
from mining.operators.base import (Context, Edit, Materialization, Operator, Pair, Rewrite, candidate)
from mining.operators.nodes import block_dims, kernels, launches
from corpora.code.parse import walk


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


# --------------------------------------------------------------------------- forward half
def add_launch_bounds(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    edits, names = [], []
    for k in kernels(src):
        head = src.code[k.sig.start_byte:k.body.start_byte]
        if b"__launch_bounds__" in head:
            continue
        ls = launches(src, k.name)
        dims = {block_dims(src, l) for l in ls}
        if not ls or None in dims or len(dims) != 1:
            continue
        bx, by, bz = dims.pop()
        threads = bx * by * bz
        if not 0 < threads <= 1024:
            continue
        decl = next((d for d in walk(k.node) if d.type == "function_declarator"), None)
        ident = decl.child_by_field_name("declarator") if decl is not None else None
        if ident is None:
            continue
        edits.append(Edit(ident.start_byte, ident.start_byte, f"__launch_bounds__({threads}) "))
        names.append(f"{k.name}({threads})")
    if not edits:
        return []
    return [candidate(src, edits, "add_launch_bounds", "`__launch_bounds__` from the launch block size: " + ", ".join(names))]


PAIR = Pair(DropLaunchBounds, (Rewrite("add_launch_bounds", "launch_bounds", add_launch_bounds, prior=1.02),))
