"""drop_restrict: remove every `__restrict__` of one function's parameter list (one site per
function) or of one local pointer declaration.

Forward, `add_restrict`: `__restrict__` on every kernel's pointer parameters (one candidate for
all kernels, then one per kernel). Sound when no two of a kernel's pointers alias memory that one
of them writes; that is the caller's promise the rewrite cannot check, so the gate's workloads
(distinct buffers per tensor) decide.
"""
from __future__ import annotations

import re


from corpora.code.source import Source
from mining.operators.base import (Context, Edit, Materialization, Operator, Pair, Rewrite, per_kernel_and_all)
from mining.operators.nodes import code, kernels, param_nodes
from corpora.code.parse import text


_TOKEN = re.compile(rb"\b__restrict(?:__)?\b")


def _strip(src, start: int, end: int) -> str:
    out, pos = bytearray(), start
    for m in _TOKEN.finditer(src.code, start, end):
        out += src.raw[pos:m.start()]
        pos = m.end()
        while pos < end and src.raw[pos] in b" \t":
            pos += 1
    out += src.raw[pos:end]
    return out.decode("utf-8")


class DropRestrict(Operator):
    name = "drop_restrict"
    carrier = "restrict"
    description = "remove `__restrict__` from one function's parameters (or one local pointer)"

    def edits(self, src):
        for plist in src.nodes("parameter_list"):
            if _TOKEN.search(src.code, plist.start_byte, plist.end_byte):
                yield Edit(plist.start_byte, plist.end_byte, _strip(src, plist.start_byte, plist.end_byte))
        for decl in src.nodes("declaration"):
            if decl.parent is not None and decl.parent.type == "translation_unit":
                continue  # prototypes: their parameter lists are sites already
            if _TOKEN.search(src.code, decl.start_byte, decl.end_byte) and \
                    not any(c.type == "function_declarator" for c in decl.named_children):
                yield Edit(decl.start_byte, decl.end_byte, _strip(src, decl.start_byte, decl.end_byte))


# --------------------------------------------------------------------------- forward half
def add_restrict(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    per = []
    for k in kernels(src):
        edits, names = [], []
        for p in param_nodes(k.node):
            ptr = next((c for c in p.named_children if c.type == "pointer_declarator"), None)
            if ptr is None or "__restrict" in code(src, p):
                continue
            inner = ptr.child_by_field_name("declarator")
            if inner is None or inner.type != "identifier":
                continue  # pointer to pointer, function pointer
            edits.append(Edit(inner.start_byte, inner.start_byte, "__restrict__ "))
            names.append(text(inner))
        per.append((k.name, edits, f"{k.name}({', '.join(names)})"))
    return per_kernel_and_all(src, "add_restrict", per, "`__restrict__` on the pointer parameters")


PAIR = Pair(DropRestrict, (Rewrite("add_restrict", "restrict", add_restrict, prior=1.1),))
