"""A static register budget for rewrites that put global loads into fully unrolled loops.

Forwarding a shared tile into its reads turns every read into a global load. Inside a loop that
carries a bare `#pragma unroll` the compiler unrolls the loop completely and, with no shared
memory barrier left between the loads, may issue all of them before the first use: each load in
flight holds a register. `tiled_matmul` with both tiles forwarded into its 32-iteration unrolled
product loop needs 80 registers per thread (nvcc 13, sm_90), and its 1024-thread block can only
have 64: the kernel compiles, passes the CPU executor, and fails to launch on the GPU.

The budget here is deliberately simple and static (no compiler run): the global loads a fully
unrolled loop nest issues per thread (loads in the body x the product of the unrolled trip counts)
may use at most half of the registers a thread of the kernel's largest launched block can have
(65536 per SM / threads per block, at most 255). Loops with an unknown trip count, or with
`#pragma unroll N`, count N (1 when unknown: the compiler does not unroll them completely).
Kernels whose block size cannot be read from a launch are assumed to run 1024-thread blocks.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.operators.nodes import block_dims, int_value, launches
from mining.operators.rewrite_util import pragma_before
from corpora.code.parse import text, walk


REGISTERS_PER_SM = 65536
MAX_REGISTERS_PER_THREAD = 255


def unroll_factor(src: Source, loop: Node) -> int:
    """How many copies of `loop`'s body a `#pragma unroll` directly above it asks for (1: none)."""
    p = pragma_before(src, loop.start_byte)
    if p is None:
        return 1
    line = src.code[p:src.code.find(b"\n", p)].decode("utf-8", "replace")
    m = re.match(r"\s*#\s*pragma\s+unroll\s*\(?\s*([^)\s]*)", line)
    count = m.group(1) if m else ""
    trips = trip_count(src, loop)
    if count:
        n = int_value(src, count)
        if n is None:
            return 1
        return max(1, min(n, trips) if trips else n)
    return trips or 1


def trip_count(src: Source, loop: Node) -> Optional[int]:
    """Iterations of `for (int i = A; i < B; i += S)` (or `++i`) with A, B, S compile-time constants."""
    init = loop.child_by_field_name("initializer")
    cond = loop.child_by_field_name("condition")
    upd = loop.child_by_field_name("update")
    if init is None or cond is None or upd is None:
        return None
    m = re.fullmatch(r"(?:const\s+)?(?:unsigned\s+)?\w+\s+(\w+)\s*=\s*(.+?);?", " ".join(text(init).split()))
    if not m:
        return None
    var, a = m.group(1), int_value(src, m.group(2))
    c = re.fullmatch(r"%s\s*(<=?)\s*(.+)" % re.escape(var), " ".join(text(cond).split()))
    u = " ".join(text(upd).split())
    if re.fullmatch(r"\+\+\s*%s|%s\s*\+\+" % (re.escape(var), re.escape(var)), u):
        step: Optional[int] = 1
    else:
        mu = re.fullmatch(r"%s\s*\+=\s*(.+)" % re.escape(var), u)
        step = int_value(src, mu.group(1)) if mu else None
    if a is None or not c or not step or step <= 0:
        return None
    b = int_value(src, c.group(2))
    if b is None:
        return None
    b += 1 if c.group(1) == "<=" else 0
    return max(0, (b - a + step - 1) // step)


def block_threads(src: Source, kernel: str) -> int:
    """The most threads per block any launch of `kernel` in the file uses (1024 when unknown)."""
    best = 0
    for launch in launches(src, kernel):
        dims = block_dims(src, launch)
        if dims is None:
            return 1024
        best = max(best, dims[0] * dims[1] * dims[2])
    return best or 1024


def load_budget(src: Source, kernel: str) -> int:
    regs = min(MAX_REGISTERS_PER_THREAD, REGISTERS_PER_SM // max(1, block_threads(src, kernel)))
    return regs // 2


def global_loads(src: Source, fn_sig, expr: str) -> int:
    """Global loads in an expression: subscripts / dereferences of the function's global pointers
    and load intrinsics."""
    n = len(re.findall(r"\b__ld\w+\s*\(", expr))
    for g in src.global_names(fn_sig):
        g = re.escape(g)
        n += len(re.findall(r"\b%s\s*\[|\*\s*\(\s*%s\b|\*\s*%s\b|\(\s*%s\b[^;()]*\)\s*\[" % (g, g, g, g), expr))
    return n


def unrolled_loads(src: Source, fn_sig, loop: Node) -> int:
    """Global loads per thread in a fully unrolled loop nest: every load statement counted once
    per copy the unrolling makes of it (stores and loads behind them on the left side excluded)."""
    total = 0
    for n in walk(loop):
        if n.type not in ("expression_statement", "declaration", "return_statement"):
            continue
        t = src.code[n.start_byte:n.end_byte].decode("utf-8", "replace")
        m = re.match(r"([^=;]*[^=!<>+\-*/%&|^])=(?!=)(.*)$", t, re.S) if n.type == "expression_statement" else None
        loads = global_loads(src, fn_sig, m.group(2) if m else t)
        if loads:
            total += loads * _copies(src, n, loop)
    return total


def _copies(src: Source, node: Node, top: Node) -> int:
    n, p = 1, node.parent
    while p is not None:
        if p.type == "for_statement":
            n *= unroll_factor(src, p)
        if p.start_byte == top.start_byte and p.end_byte == top.end_byte:
            break
        p = p.parent
    return n
