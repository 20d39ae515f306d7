"""fast_math_to_precise: one hardware-approximate intrinsic -> its IEEE-accurate counterpart.

`__expf`->`expf`, `__logf`->`logf`, `__sinf`/`__cosf`/`__tanf`/`__powf`/`__log2f`/`__log10f`/
`__exp10f`/`__sincosf` likewise; `__fdividef(a, b)` and `__fdiv_r?(a, b)` -> `((a) / (b))`;
`rsqrtf(x)` -> `(1.0f / sqrtf(x))`; `__frcp_r?(x)` -> `(1.0f / (x))`; `__fsqrt_r?(x)` -> `sqrtf(x)`;
`__saturatef(x)` -> `fminf(fmaxf((x), 0.0f), 1.0f)`.

Forward, `to_fast_math`: precise math calls -> their hardware intrinsics (`expf` -> `__expf`, ...,
`1/sqrtf(x)` -> `rsqrtf(x)`, `tanhf` through `__expf`), and a second candidate that also turns float
divisions into `__fdividef`. Not bit-exact by design: the gate's tolerances decide whether the
problem accepts the approximation.
"""
from __future__ import annotations

import re

from tree_sitter import Node

from corpora.code.nodes import call_name, declarator_name
from corpora.code.source import Source
from mining.operators.base import (Context, Edit, Materialization, Operator, Pair, Rewrite, candidate, raw_text)
from mining.operators.nodes import code, device_functions, idents, raw
from corpora.code.parse import FunctionSig, text


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


# --------------------------------------------------------------------------- forward half
FAST = {"expf": "__expf", "logf": "__logf", "sinf": "__sinf", "cosf": "__cosf", "tanf": "__tanf", "powf": "__powf",
        "exp10f": "__exp10f", "log2f": "__log2f", "log10f": "__log10f"}


def _float_names(src: Source, f: FunctionSig, fn: Node) -> set[str]:
    names = {p.name for p in f.params if p.base_type in ("float", "double", "__half", "half")}
    for decl in src.nodes("declaration", within=fn):
        c = code(src, decl)
        if re.match(r"^(const\s+)?(float|double)\b", c):
            for d in decl.named_children:
                n = declarator_name(d)
                if n:
                    names.add(n)
    return names


def _is_float_expr(src: Source, node: Node, floats: set[str]) -> bool:
    c = code(src, node)
    if re.search(r"\d\.\d*(?:[eE][-+]?\d+)?f?\b|\d+\.?f\b|\d[eE][-+]?\d+", c):
        return True
    if re.search(r"\b(__)?(expf|logf|sqrtf|rsqrtf|fmaxf|fminf|tanhf|powf|sinf|cosf|fabsf)\s*\(", c):
        return True
    if re.search(r"\(\s*float\s*\)", c):
        return True
    names = idents(c)
    return bool(names & floats)


def to_fast_math(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    intrinsics, divisions = [], []
    for f, fn in device_functions(src):
        floats = _float_names(src, f, fn)
        taken: list[tuple[int, int]] = []
        for b in src.nodes("binary_expression", within=fn):
            op = b.child_by_field_name("operator")
            left, right = b.child_by_field_name("left"), b.child_by_field_name("right")
            if op is None or text(op) != "/" or left is None or right is None:
                continue
            if re.fullmatch(r"1(\.0*)?f?", code(src, left)) and right.type == "call_expression" and \
                    call_name(right) == "sqrtf":
                args = right.child_by_field_name("arguments")
                if args is not None and len(args.named_children) == 1:
                    intrinsics.append(Edit(b.start_byte, b.end_byte, f"rsqrtf({raw(src, args.named_children[0])})"))
                    taken.append((b.start_byte, b.end_byte))
        for call in src.nodes("call_expression", within=fn):
            name = call_name(call)
            if any(a <= call.start_byte < z for a, z in taken):
                continue
            fnode = call.child_by_field_name("function")
            args = call.child_by_field_name("arguments")
            if name in FAST and fnode is not None:
                intrinsics.append(Edit(fnode.start_byte, fnode.end_byte, FAST[name]))
            elif name == "tanhf" and args is not None and len(args.named_children) == 1:
                u = raw(src, args.named_children[0])
                intrinsics.append(Edit(call.start_byte, call.end_byte,
                                           f"(1.0f - 2.0f / (__expf(2.0f * ({u})) + 1.0f))"))
                taken.append((call.start_byte, call.end_byte))
        for b in src.nodes("binary_expression", within=fn):
            op = b.child_by_field_name("operator")
            left, right = b.child_by_field_name("left"), b.child_by_field_name("right")
            if op is None or text(op) != "/" or left is None or right is None:
                continue
            if any(a <= b.start_byte < z for a, z in taken):
                continue
            if any(b.start_byte <= a < b.end_byte for a, _ in taken):
                continue
            if not (_is_float_expr(src, left, floats) or _is_float_expr(src, right, floats)):
                continue
            if re.search(r"\b(sizeof|blockDim|gridDim)\b", code(src, b)):
                continue
            divisions.append(Edit(b.start_byte, b.end_byte, f"__fdividef({raw(src, left)}, {raw(src, right)})"))
    out = []
    if intrinsics:
        out.append(candidate(src, intrinsics, "to_fast_math", f"hardware intrinsics for {len(intrinsics)} precise math call(s)"))
    if divisions:
        # outermost divisions only (a nested one is inside the outer's raw text)
        divisions = [d for d in divisions if not any(o is not d and o.start <= d.start and d.end <= o.end
                                                     for o in divisions)]
        merged = [e for e in intrinsics if not any(d.start <= e.start < d.end for d in divisions)]
        if len(merged) == len(intrinsics):
            out.append(candidate(src, merged + divisions, "to_fast_math",
                            f"hardware intrinsics and `__fdividef` for {len(divisions)} float division(s)"))
    return out


PAIR = Pair(FastMathToPrecise, (Rewrite("to_fast_math", "fast_math", to_fast_math, prior=1.3),))
