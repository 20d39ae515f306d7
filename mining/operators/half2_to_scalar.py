"""half2_to_scalar: packed two-lane half-precision arithmetic (`__hadd2`, `__hmul2`, `__hfma2`, ...)
becomes the same operation on each lane (issue 19: generic simplifications):

    HALF2(c[i]) = __hadd2(HALF2(a[i]), HALF2(b[i]));
->  HALF2(c[i]) = ([&]() { auto ks_a = (HALF2(a[i])); const auto ks_b = (HALF2(b[i]));
                          ks_a.x = __hadd(ks_a.x, ks_b.x); ks_a.y = __hadd(ks_a.y, ks_b.y); return ks_a; }());

Detection by meaning: a call of a two-lane intrinsic of cuda_fp16.h / cuda_bf16.h whose operands
are evaluated once (the lambda binds them); the lane operation is the intrinsic's scalar
counterpart. Why it is sound: a packed intrinsic is defined lane by lane as its scalar
counterpart (same IEEE half / bfloat16 rounding per lane), and `.x` / `.y` are the low and high
lanes of `__half2` and `__nv_bfloat162` alike.

The same optimization spelled as a compile-time packed path (vLLM's `_f16Vec`):

    if constexpr (width % 2 == 0) { for (i += 2) { T2 t{data[i], data[i + 1]}; t += T2{..}; data[i] = t.x; .. } }
    else { for (++i) data[i] += other.data[i]; }
->  { for (++i) data[i] += other.data[i]; }

Detection by meaning: an `if constexpr` with an `else` in device code whose taken branch packs two
adjacent elements into one value (`T{v[i], v[i + 1]}`, or a packed intrinsic) and whose `else` is
the lane-by-lane form. Sound because `else` is the general path the template already compiles for
every width; the step removes only the packing. Same skill as the intrinsic spelling.

`forward` is the inverse of the intrinsic spelling: two scalar half operations of the same kind on the `.x` and `.y` lanes of
the same pair of values become one packed intrinsic.
"""
from __future__ import annotations

import re

from tree_sitter import Node

from corpora.code.nodes import call_name
from corpora.code.source import Source
from mining.operators.base import Edit, Operator, Pair, Rewrite, raw_text
from mining.operators.nodes import device_functions

# packed intrinsic -> (scalar intrinsic, operand count)
PACKED = {"__hadd2": ("__hadd", 2), "__hsub2": ("__hsub", 2), "__hmul2": ("__hmul", 2), "__h2div": ("__hdiv", 2),
          "__hfma2": ("__hfma", 3), "__hmax2": ("__hmax", 2), "__hmin2": ("__hmin", 2), "__hneg2": ("__hneg", 1),
          "__habs2": ("__habs", 1), "__hadd2_sat": ("__hadd_sat", 2), "__hmul2_sat": ("__hmul_sat", 2),
          "__hfma2_sat": ("__hfma_sat", 3)}


_PAIR_INIT = re.compile(r"\{\s*([\w.>-]+)\[\s*(\w+)\s*\]\s*,\s*\1\[\s*\2\s*\+\s*1\s*\]\s*\}")


def packed_paths(src: Source) -> list[tuple[Node, Node]]:
    """(if constexpr statement, its else branch's statement) where the taken branch packs pairs."""
    device = [fn for _, fn in device_functions(src)]
    out = []
    for node in src.nodes("if_statement"):
        if not any(c.type == "constexpr" for c in node.children):
            continue
        cons, alt = node.child_by_field_name("consequence"), node.child_by_field_name("alternative")
        if cons is None or alt is None or not any(fn.start_byte <= node.start_byte < fn.end_byte for fn in device):
            continue
        else_stmt = next((c for c in alt.named_children if c.type != "comment"), None) \
            if alt.type == "else_clause" else alt
        if else_stmt is None or else_stmt.type == "if_statement":
            continue
        packed = raw_text(src, cons.start_byte, cons.end_byte)
        if _PAIR_INIT.search(packed) or any(re.search(rf"\b{k}\s*\(", packed) for k in PACKED):
            out.append((node, else_stmt))
    return out


class Half2ToScalar(Operator):
    name = "half2_to_scalar"
    carrier = "packed_half2_math"
    description = "compute a packed two-lane half operation one lane at a time"

    def edits(self, src: Source):
        for node, else_stmt in packed_paths(src):
            yield Edit(node.start_byte, node.end_byte, raw_text(src, else_stmt.start_byte, else_stmt.end_byte))
        for call in src.nodes("call_expression"):
            name = call_name(call)
            if name not in PACKED:
                continue
            scalar, arity = PACKED[name]
            args = call.child_by_field_name("arguments")
            a = [c for c in (args.named_children if args is not None else []) if c.type != "comment"]
            if len(a) != arity:
                continue
            texts = [raw_text(src, n.start_byte, n.end_byte) for n in a]
            names = [f"ks_{c}" for c in "abc"[:arity]]
            binds = [f"auto {names[0]} = ({texts[0]});"] + [f"const auto {n} = ({t});" for n, t in zip(names[1:], texts[1:])]
            lanes = " ".join(f"{names[0]}.{lane} = {scalar}({', '.join(f'{n}.{lane}' for n in names)});"
                             for lane in ("x", "y"))
            yield Edit(call.start_byte, call.end_byte, f"([&]() {{ {' '.join(binds)} {lanes} return {names[0]}; }}())")


# --------------------------------------------------------------------------- forward
def forward(source: str, ctx=None) -> list:
    """`r.x = __hadd(a.x, b.x); r.y = __hadd(a.y, b.y);` -> `r = __hadd2(a, b);` (both lanes of the
    same values, consecutive statements)."""
    from mining.operators.base import Materialization

    src = Source(source)
    code = src.code.decode("utf-8", "replace")
    scalar_of = {v[0]: k for k, v in PACKED.items() if v[1] == 2}
    pat = re.compile(r"(\w+)\.x\s*=\s*(__h\w+)\(\s*(\w+)\.x\s*,\s*(\w+)\.x\s*\)\s*;\s*"
                     r"\1\.y\s*=\s*\2\(\s*\3\.y\s*,\s*\4\.y\s*\)\s*;")
    out = []
    for m in pat.finditer(code):
        if m.group(2) not in scalar_of:
            continue
        new = f"{m.group(1)} = {scalar_of[m.group(2)]}({m.group(3)}, {m.group(4)});"
        s, e = len(code[:m.start()].encode()), len(code[:m.end()].encode())
        text_ = (src.raw[:s] + new.encode() + src.raw[e:]).decode("utf-8")
        out.append(Materialization(source=text_, rewrite="packed_half2", carrier="packed_half2_math",
                                   description=f"one {scalar_of[m.group(2)]} on both lanes"))
    return out


PAIR = Pair(Half2ToScalar, (Rewrite("packed_half2", "packed_half2_math", forward, prior=1.5),))
