"""ldg_to_plain_load: `__ldg(p)` -> `*(p)` (an ordinary, coherent global load)."""
from __future__ import annotations

from corpora.code.nodes import call_name
from mining.carriers import LOAD_INTRINSICS
from mining.operators.base import Edit, Operator, raw_text


class LdgToPlainLoad(Operator):
    name = "ldg_to_plain_load"
    carrier = "ldg"
    description = "replace a read-only-path load `__ldg(p)` by the plain load `*(p)`"

    def edits(self, src):
        for call in src.nodes("call_expression"):
            if call_name(call) not in LOAD_INTRINSICS:
                continue
            args = call.child_by_field_name("arguments")
            if args is None or len(args.named_children) != 1:
                continue
            arg = args.named_children[0]
            yield Edit(call.start_byte, call.end_byte, f"*({raw_text(src, arg.start_byte, arg.end_byte)})")
