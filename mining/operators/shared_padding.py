"""drop_shared_padding: remove the bank-conflict padding of a shared array.

Three forms: a `__shared__` dimension `X + c` (c a literal, a *PAD* name, or a name the kernel uses
only in shared dimensions, e.g. a template parameter OFFSET: an extent no index reads) -> `X`; a padded pitch
macro `#define LD (X + c)` (names like LD, *_LD, *PAD*, *PITCH*) -> `(X)`; an index remap
`q + (q >> s)` -> `q`.

Forward, `add_shared_padding`: `[R][C]` -> `[R][C + 1]` on 2-D shared arrays whose last dimension is
a multiple of 16 or 32. Sound because indexing is by the declared shape: every element keeps its
own slot, only the row pitch (and so the bank of column accesses) changes.
"""
from __future__ import annotations

import re


from corpora.code.source import Source
from mining.carriers import PAD_MACRO, padding_term
from mining.operators.base import (Context, Edit, Materialization, Operator, Pair, Rewrite, candidate, code_text)
from mining.operators.nodes import code, int_value, raw


class DropSharedPadding(Operator):
    name = "drop_shared_padding"
    carrier = "shared_padding"
    description = "shrink a padded shared dimension / pitch back to its logical size"

    def edits(self, src):
        for decl, name, dims in src.shared_decls:
            for d in dims:
                if d.type != "binary_expression":
                    continue
                op = d.child_by_field_name("operator")
                left, right = d.child_by_field_name("left"), d.child_by_field_name("right")
                if op is None or left is None or right is None or op.type != "+":
                    continue
                r = code_text(src, right.start_byte, right.end_byte)
                if re.fullmatch(r"\d+|\w*PAD\w*", r, re.I) or (right.type == "identifier" and padding_term(src, d)):
                    yield Edit(d.start_byte, d.end_byte, code_text(src, left.start_byte, left.end_byte))
        for m in src.regex(rb"(?m)^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+(\(?\s*(\w+)\s*\+\s*(?:\d+|\w+\s*/\s*\d+)\s*\)?)"):
            if PAD_MACRO.search(m.group(1).decode()):
                yield Edit(m.start(2), m.end(2), "(" + m.group(3).decode() + ")")
        for m in src.regex(rb"\b(\w+)\s*\+\s*\(\s*\1\s*>>\s*\d+\s*\)"):
            yield Edit(m.start(), m.end(), m.group(1).decode())


# --------------------------------------------------------------------------- forward half
def add_shared_padding(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    edits = []
    for decl, name, dims in src.shared_decls:
        if len(dims) < 2:
            continue
        last = code(src, dims[-1])
        if re.search(r"\+\s*(\d+|\w*PAD\w*)\s*$", last, re.I):
            continue
        v = int_value(src, last)
        if v is None or v % 32 != 0 and v % 16 != 0:
            continue
        edits.append(Edit(dims[-1].start_byte, dims[-1].end_byte, f"{raw(src, dims[-1])} + 1"))
    if not edits:
        return []
    return [candidate(src, edits, "add_shared_padding", f"one padding column on {len(edits)} 2-D shared array(s)")]


PAIR = Pair(DropSharedPadding, (Rewrite("add_shared_padding", "shared_padding", add_shared_padding, prior=1.02),))
