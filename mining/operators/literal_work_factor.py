"""A thread-coarsening factor written as a literal, found by what it does (issue 19), and its shrink.

    int idx = 8 * (blockIdx.x * blockDim.x + threadIdx.x);      ->  int idx = (blockIdx.x * blockDim.x + threadIdx.x);
    half pack_a[8], pack_b[8];                                  ->  half pack_a[2], pack_b[2];
    for (int k = 0; k < 8; ++k) ...                             ->  for (int k = 0; k < 1; ++k) ...
    for (int i = 0; i < 8; i += 2) HALF2(c[i]) = ...            ->  for (int i = 0; i < 1; i += 2) ...
    if ((idx + 7) < N) ...                                      ->  if ((idx + 0) < N) ...
    k<<<(N + 255) / 256, 256 / 8>>>(...)                        ->  k<<<(N + 255) / 256, 256 / 1>>>(...)

The factor K is an integer literal >= 2 that multiplies the global thread index (`v = K * gidx`,
any operand order, parentheses and casts allowed) and that also sizes the per-thread work: the
extent of a thread-local array or the bound of a loop that starts at 0 in the same kernel. Its
meaning, not its spelling, decides which other literals follow it: the extents and loop bounds
equal to K, the last-lane offset `v + (K - 1)` of a tail test, and in the launch geometry of the
kernel (the grid and block expressions, or the host variables naming them) every `/ K` and `* K`
operand. A kernel with other hard-coded lane offsets (`v + 2` with K = 8: an unrolled body written
for that width) is not a site, and neither is a factor nothing per-thread is sized by (an
interleaved layout, `out[2 * gid]`).

The factor becomes 1; an array that a loop walks with a literal step s > 1 (`i += 2` over half2
pairs) keeps s elements so the step's wide access stays inside it, the lanes past the factor
computed and never stored. Correctness is the gate's call (`shrink_work_constant` documents why 1).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from tree_sitter import Node

from corpora.code.edit import Edit
from corpora.code.parse import text, walk
from corpora.code.source import Source
from mining.operators.nodes import Kernel, global_index_axis, kernel_launches, kernels
from mining.operators.rewrite_util import splice_range


@dataclass
class LiteralFactor:
    kernel: Kernel
    value: int
    index: Node  # the `K * gidx` product
    literal: Node  # K in it
    gidx: Node  # the other operand
    var: str
    arrays: list[Node] = field(default_factory=list)  # array extents equal to K
    bounds: list[Node] = field(default_factory=list)  # loop bounds equal to K
    tails: list[Node] = field(default_factory=list)  # the K - 1 of `v + (K - 1)`
    launch: list[tuple[Node, bool]] = field(default_factory=list)  # K (or log2 K, True) in launch geometry
    step: int = 1  # the largest literal step of a loop bounded by K


def _int(node: Optional[Node]) -> Optional[int]:
    if node is None or node.type != "number_literal":
        return None
    try:
        return int(text(node).rstrip("uUlL"), 0)
    except ValueError:
        return None


def _unparen(node: Node) -> Node:
    while node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    return node


def _operands(node: Node) -> tuple[Optional[Node], str, Optional[Node]]:
    op = node.child_by_field_name("operator")
    return node.child_by_field_name("left"), text(op) if op is not None else "", node.child_by_field_name("right")


def _products(src: Source, k: Kernel) -> list[tuple[str, Node, Node, Node, int]]:
    """(variable, product, literal, index operand, K) for `v = K * gidx` in the kernel."""
    out = []
    for n in walk(k.body):
        if n.type == "init_declarator":
            name, value = n.child_by_field_name("declarator"), n.child_by_field_name("value")
        elif n.type == "assignment_expression" and text(n.child_by_field_name("operator") or n.children[1]) == "=":
            name, value = n.child_by_field_name("left"), n.child_by_field_name("right")
        else:
            continue
        if name is None or value is None or name.type != "identifier":
            continue
        prod = _unparen(value)
        if prod.type != "binary_expression":
            continue
        a, op, b = _operands(prod)
        if op not in ("*", "<<") or a is None or b is None:
            continue
        for lit, other in ((a, b), (b, a)) if op == "*" else ((b, a),):
            kv = _int(lit)
            if kv is not None and op == "<<":
                kv = 1 << kv if 1 <= kv <= 6 else None  # `gidx << 3`: a factor of 8
            if kv is not None and 2 <= kv <= 64 and global_index_axis(text(other)) == "x":
                out.append((text(name), prod, lit, other, kv))
    return out


def _shared(src: Source, node: Node) -> bool:
    d = node
    while d is not None and d.type not in ("declaration", "field_declaration", "parameter_declaration"):
        d = d.parent
    return d is None or d.type == "parameter_declaration" or b"__shared__" in src.code[d.start_byte:d.end_byte]


def _factor_operands(node: Node, value: int) -> list[tuple[Node, bool]]:
    """(literal, is a shift count) for `/ K`, `* K`, `>> log2 K`, `<< log2 K` under `node`."""
    out = []
    for n in walk(node):
        if n.type == "binary_expression":
            a, op, b = _operands(n)
            if op == "/" and _int(b) == value:
                out.append((b, False))
            elif op == "*":
                out += [(x, False) for x in (a, b) if _int(x) == value]
            elif op in (">>", "<<") and _int(b) is not None and 1 << _int(b) == value:
                out.append((b, True))
    return out


def _launch_sites(src: Source, k: Kernel, value: int) -> list[tuple[Node, bool]]:
    """K as a divisor or factor in the grid / block of every launch of the kernel (templated
    launches `k<8><<<...>>>` included), following a grid or block named by a host variable to its
    declaration."""
    out: dict[tuple[int, int], tuple[Node, bool]] = {}
    for launch in kernel_launches(src, k.name):
        call = launch.call
        fn = src.func_node(launch.host) if launch.host is not None else None
        for cfg in (launch.grid, launch.block):
            exprs = [cfg]
            if cfg.type == "identifier" and fn is not None:
                exprs += [d for d in src.nodes("declaration", within=fn) if d.end_byte <= call.start_byte and
                          any(x.type == "identifier" and text(x) == text(cfg) for x in d.named_children[1:2] +
                              [c.child_by_field_name("declarator") for c in d.named_children
                               if c.type == "init_declarator"] if x is not None)]
            for e in exprs:
                for n, shift in _factor_operands(e, value):
                    out[(n.start_byte, n.end_byte)] = (n, shift)
    return sorted(out.values(), key=lambda n: n[0].start_byte)


def literal_factors(src: Source) -> list[LiteralFactor]:
    out = []
    for k in kernels(src):
        for var, prod, lit, gidx, kv in _products(src, k):
            f = LiteralFactor(k, kv, prod, lit, gidx, var)
            hardcoded = False
            for n in walk(k.body):
                if n.type == "array_declarator" and _int(n.child_by_field_name("size")) == kv and not _shared(src, n):
                    f.arrays.append(n.child_by_field_name("size"))
                elif n.type == "for_statement":
                    cond, init, upd = (n.child_by_field_name(x) for x in ("condition", "initializer", "update"))
                    if cond is None or init is None or cond.type != "binary_expression":
                        continue
                    a, op, b = _operands(cond)
                    if op != "<" or _int(b) != kv or a is None or a.type != "identifier" or \
                            not re.fullmatch(r"(?:\w+\s+)*%s\s*=\s*0;?" % re.escape(text(a)), " ".join(text(init).split())):
                        continue
                    f.bounds.append(b)
                    m = re.fullmatch(r"%s\s*\+=\s*(\d+)" % re.escape(text(a)), " ".join(text(upd).split())) \
                        if upd is not None else None
                    if m and kv % int(m.group(1)) == 0:
                        f.step = max(f.step, int(m.group(1)))
                elif n.type == "binary_expression":
                    a, op, b = _operands(n)
                    if op != "+" or a is None or b is None:
                        continue
                    for x, y in ((a, b), (b, a)):
                        off = _int(y)
                        if _unparen(x).type == "identifier" and text(_unparen(x)) == var and off is not None:
                            if off == kv - 1:
                                f.tails.append(y)
                            elif 0 < off < kv - 1:
                                hardcoded = True
            if hardcoded or not (f.arrays or f.bounds):
                continue
            f.launch = _launch_sites(src, k, kv)
            out.append(f)
    return out


def shrink_edit(src: Source, f: LiteralFactor) -> Optional[Edit]:
    """One edit setting the factor to 1 and carrying every use that follows it."""
    subs = [Edit(f.index.start_byte, f.index.end_byte, text(f.gidx))]
    subs += [Edit(n.start_byte, n.end_byte, str(f.step)) for n in f.arrays]
    subs += [Edit(n.start_byte, n.end_byte, "1") for n in f.bounds]
    subs += [Edit(n.start_byte, n.end_byte, "0" if shift else "1") for n, shift in f.launch]
    subs += [Edit(n.start_byte, n.end_byte, "0") for n in f.tails]
    subs.sort()
    if any(b.start < a.end for a, b in zip(subs, subs[1:])):
        return None
    lo, hi = subs[0].start, max(e.end for e in subs)
    return Edit(lo, hi, splice_range(src, lo, hi, subs))


def literal_factor_edits(src: Source) -> list[Edit]:
    """Each factor shrunk to 1."""
    return [e for e in (shrink_edit(src, f) for f in literal_factors(src)) if e is not None]
