"""fast_math_to_precise: one hardware-approximate intrinsic -> its IEEE-accurate counterpart.

`__expf`->`expf`, `__logf`->`logf`, `__sinf`/`__cosf`/`__tanf`/`__powf`/`__log2f`/`__log10f`/
`__exp10f`/`__sincosf` likewise; `__fdividef(a, b)` and `__fdiv_r?(a, b)` -> `((a) / (b))`;
`rsqrtf(x)` -> `(1.0f / sqrtf(x))`; `__frcp_r?(x)` -> `(1.0f / (x))`; `__fsqrt_r?(x)` -> `sqrtf(x)`;
`__saturatef(x)` -> `fminf(fmaxf((x), 0.0f), 1.0f)`.
"""
from __future__ import annotations

import re

from corpora.code.nodes import call_name
from mining.operators.base import Edit, Operator, raw_text

RENAMES = {f"__{n}": n for n in ("expf", "exp10f", "logf", "log2f", "log10f", "sinf", "cosf", "tanf", "powf",
                                 "sincosf")}


class FastMathToPrecise(Operator):
    name = "fast_math_to_precise"
    carrier = "fast_math"
    description = "replace one fast-math intrinsic by the precise library function"

    def edits(self, src):
        for call in src.nodes("call_expression"):
            name = call_name(call)
            fn = call.child_by_field_name("function")
            args = call.child_by_field_name("arguments")
            if fn is None or args is None:
                continue
            a = [raw_text(src, x.start_byte, x.end_byte) for x in args.named_children]
            if name in RENAMES:
                yield Edit(fn.start_byte, fn.end_byte, RENAMES[name])
            elif (name == "__fdividef" or re.fullmatch(r"__fdiv_r[nzud]", name)) and len(a) == 2:
                yield Edit(call.start_byte, call.end_byte, f"(({a[0]}) / ({a[1]}))")
            elif name == "rsqrtf" and len(a) == 1:
                yield Edit(call.start_byte, call.end_byte, f"(1.0f / sqrtf({a[0]}))")
            elif re.fullmatch(r"__frcp_r[nzud]", name) and len(a) == 1:
                yield Edit(call.start_byte, call.end_byte, f"(1.0f / ({a[0]}))")
            elif (re.fullmatch(r"__fsqrt_r[nzud]", name) or name == "__frsqrt_rn") and len(a) == 1:
                rep = f"sqrtf({a[0]})" if name.startswith("__fsqrt") else f"(1.0f / sqrtf({a[0]}))"
                yield Edit(call.start_byte, call.end_byte, rep)
            elif name == "__saturatef" and len(a) == 1:
                yield Edit(call.start_byte, call.end_byte, f"fminf(fmaxf(({a[0]}), 0.0f), 1.0f)")
