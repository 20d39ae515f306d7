"""block_swizzle_to_natural: block coordinates that a kernel computes as a permutation of the grid
(diagonal order against partition camping, raster swizzles for cache locality) become the natural
ones (issue 19: detection by meaning).

    int bx, by;                                            int bx, by;
    if (W == H) { by = blockIdx.x;                         bx = blockIdx.x; by = blockIdx.y;
                  bx = (blockIdx.x + blockIdx.y) % gridDim.x; }
    else { int bid = blockIdx.x + gridDim.x * blockIdx.y;
           by = bid % gridDim.y;                    ->
           bx = ((bid / gridDim.y) + by) % gridDim.x; }

Detection by meaning: two locals whose every assignment reads only block indices, grid sizes,
constants, parameters and locals of the same kind, with a wrap-around (`%`) in at least one of
them; each local's axis is the grid size its `%` wraps by. The statements that compute them
(consecutive, at the top of the kernel body) are replaced by the identity mapping, and the
kernel may not read `blockIdx` anywhere else.

Why it is sound: the blocks of such a kernel are independent (no atomics, no grid-wide
synchronization are allowed in it), and each block's work is a function of its coordinates
(bx, by); the swizzle is a bijection of the grid onto itself and so is the identity, so every
coordinate pair is still processed exactly once, by one block.

`forward` is the inverse: a kernel whose first statements name its block coordinates from
`blockIdx.x` / `blockIdx.y` on a square grid walks the blocks in diagonal order.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.operators.base import Edit, Operator, Pair, Rewrite
from mining.operators.rewrite_util import structural
from corpora.code.parse import text, walk

_ALLOWED = re.compile(r"^[\s\w.+\-*/%()]*$")


def _assignments(body: Node, name: str) -> list[Node]:
    out = []
    for n in walk(body):
        if n.type == "assignment_expression" and text(n.child_by_field_name("left")) == name:
            out.append(n.child_by_field_name("right"))
        elif n.type == "init_declarator" and n.child_by_field_name("declarator") is not None and \
                text(n.child_by_field_name("declarator")) == name and n.child_by_field_name("value") is not None:
            out.append(n.child_by_field_name("value"))
    return out


class BlockSwizzleToNatural(Operator):
    name = "block_swizzle_to_natural"
    carrier = "block_swizzle"
    description = "process the blocks in their natural order instead of a swizzled (diagonal) one"

    def edits(self, source: Source):
        src = structural(source)
        for f in src.funcs:
            if not f.is_kernel:
                continue
            e = self._rewrite(src, f)
            if e is not None:
                yield e

    def _rewrite(self, src: Source, f) -> Optional[Edit]:
        fn = src.func_node(f)
        body = fn.child_by_field_name("body") if fn is not None else None
        if body is None:
            return None
        code = src.code[body.start_byte:body.end_byte].decode("utf-8", "replace")
        if re.search(r"\batomic\w*\s*\(|\bgrid\.sync\b|this_grid|__threadfence", code):
            return None
        stmts = [c for c in body.named_children if c.type != "comment"]
        # statements that only compute block coordinates: assignments from block / grid values
        region: list[Node] = []
        names: set[str] = set()
        for st in stmts:
            t = " ".join(text(st).split())
            if re.search(r"\bthreadIdx\b", t) or not re.search(r"\b(blockIdx|gridDim)\b", t) and not region:
                if region:
                    break
                continue
            if not _ALLOWED.match(re.sub(r"[{};=,<>!&|]|\bif\b|\belse\b|\bint\b|\bunsigned\b|\bconst\b", " ", t)):
                if region:
                    break
                continue
            if st.type not in ("declaration", "expression_statement", "if_statement"):
                break
            assigned = {text(n.child_by_field_name("left")) for n in walk(st) if n.type == "assignment_expression"}
            assigned |= {text(n.child_by_field_name("declarator")) for n in walk(st) if n.type == "init_declarator"}
            if not assigned:
                break
            region.append(st)
            names |= assigned
        if not region:
            return None
        axis: dict[str, str] = {}
        for nm in names:
            for v in _assignments(body, nm):
                m = re.search(r"%\s*gridDim\.([xy])\s*$", " ".join(text(v).split()).rstrip(")").rstrip() + "") or \
                    re.search(r"%\s*gridDim\.([xy])\s*\)?\s*$", " ".join(text(v).split()))
                if m:
                    axis.setdefault(nm, m.group(1))
        if len(set(axis.values())) != 2 or len(axis) != 2:
            return None
        if not any("%" in text(st) for st in region):
            return None
        # after the region the kernel works from the coordinates only
        after = code[region[-1].end_byte - body.start_byte:]
        if re.search(r"\bblockIdx\b", after):
            return None
        # the region's helper locals (bid) must not be used after it
        helpers = names - set(axis)
        if any(re.search(r"\b%s\b" % re.escape(h), after) for h in helpers):
            return None
        by_axis = {a: n for n, a in axis.items()}
        # plain declarations of the coordinates (`int bx, by;`) stay; everything else in the region goes
        declared = set()
        for st in stmts:
            if st.start_byte > region[-1].start_byte:
                break
            if st.type == "declaration" and not any(n.type == "init_declarator" for n in walk(st)):
                declared |= {text(c) for c in st.named_children if c.type == "identifier"}
        parts = [("" if by_axis[a] in declared else "int ") + f"{by_axis[a]} = blockIdx.{a};" for a in ("x", "y")]
        keep = [st for st in region if st.type == "declaration" and
                not any(n.type == "init_declarator" for n in walk(st))]
        drop = [st for st in region if st not in keep]
        if not drop:
            return None
        lo, hi = drop[0].start_byte, drop[-1].end_byte
        if any(lo < k.start_byte < hi for k in keep):
            return None  # a kept declaration inside the dropped range
        return Edit(lo, hi, " ".join(parts))


# --------------------------------------------------------------------------- forward
def forward(source: str, ctx=None) -> list:
    """Diagonal block order: `int bx = blockIdx.x; int by = blockIdx.y;` at the top of a kernel
    (and no other use of blockIdx) becomes the diagonal walk, for square grids, natural otherwise."""
    from mining.operators.base import Materialization

    src = Source(source)
    out = []
    for f in src.funcs:
        if not f.is_kernel:
            continue
        code = src.func_code(f).decode("utf-8", "replace")
        mx = re.search(r"(\bint\s+)?\b(\w+)\s*=\s*blockIdx\.x\s*;", code)
        my = re.search(r"(\bint\s+)?\b(\w+)\s*=\s*blockIdx\.y\s*;", code)
        if not mx or not my or len(re.findall(r"\bblockIdx\b", code)) != 2 or re.search(r"\batomic\w*\s*\(", code):
            continue
        bx, by = mx.group(2), my.group(2)
        first, last = sorted([mx, my], key=lambda m: m.start())
        decl = f"int {bx}, {by};\n    " if mx.group(1) and my.group(1) else ""
        if bool(mx.group(1)) != bool(my.group(1)):
            continue
        raw = src.raw[f.start_byte:f.end_byte].decode("utf-8", "replace")  # same offsets, comments kept
        new_code = (raw[:first.start()] + decl +
                    f"if (gridDim.x == gridDim.y) {{ {by} = blockIdx.x; "
                    f"{bx} = (blockIdx.x + blockIdx.y) % gridDim.x; }}\n"
                    f"    else {{ {bx} = blockIdx.x; {by} = blockIdx.y; }}" +
                    raw[first.end():last.start()] + raw[last.end():])
        text_ = (src.raw[:f.start_byte] + new_code.encode() + src.raw[f.end_byte:]).decode("utf-8")
        out.append(Materialization(source=text_, rewrite="diagonal_block_order", carrier="block_swizzle",
                                   description=f"{f.name}: blocks walk the grid diagonally on square grids"))
    return out


PAIR = Pair(BlockSwizzleToNatural, (Rewrite("diagonal_block_order", "block_swizzle", forward, prior=1.1),))
