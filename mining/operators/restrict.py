"""drop_restrict: remove every `__restrict__` of one function's parameter list (one site per
function) or of one local pointer declaration."""
from __future__ import annotations

import re

from mining.operators.base import Edit, Operator

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
