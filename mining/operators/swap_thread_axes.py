"""swap_thread_axes: a two-dimensional kernel's x and y thread axes trade places - in the kernel
(`threadIdx`, `blockIdx`, `blockDim`, `gridDim`) and in the launch's `dim3` shapes - so the
threads of a warp, which are consecutive in x, now walk what y walked (issue 19: coalescing
undone, the thread index moved to the other dimension).

    dim3 grid(W / T, H / T), threads(T, R);          dim3 grid(H / T, W / T), threads(R, T);
    out[(by * T + threadIdx.y) * W + bx * T + threadIdx.x]   ->   out[(bx * T + threadIdx.x) * W + by * T + threadIdx.y]

Why it is sound: it is a relabeling. Every thread and block of the new launch plays the role of
exactly one of the old launch (coordinates swapped, shapes swapped with them), and the kernel
computes from the swapped coordinates what the old one computed from the originals. What changes
is which threads form a warp: so kernels with warp-level code (shuffles, votes, `__syncwarp`,
lane arithmetic on the thread index, `warpSize`) are not sites, nor kernels that call device
functions reading the thread index, nor launches whose `dim3` values other launches share.
The grid's y extent is smaller than its x extent (65535): the gate's workloads judge the launch.
Which side gets coalesced is the point: where the kernel's stores (or loads) were contiguous
across a warp, they now stride.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.operators.base import Edit, Materialization, Operator, Pair, Rewrite
from mining.operators.rewrite_util import splice_range, structural
from mining.operators.tile_algebra import IndexAlgebra, NotAlgebra
from corpora.code.parse import text, walk

_AXIS = re.compile(r"^(threadIdx|blockIdx|blockDim|gridDim)\s*\.\s*([xy])$")
_WARP = re.compile(r"\b(__shfl\w*|__syncwarp|__ballot\w*|__any\w*|__all\w*|__activemask|__match\w*|__reduce_\w+|"
                   r"warpSize|tiled_partition|coalesced_threads)\b|threadIdx\.x\s*(&\s*31|%\s*32|>>\s*5|/\s*32)")


def _callee(call: Node) -> str:
    fn = call.child_by_field_name("function")
    while fn is not None and fn.type in ("qualified_identifier", "template_function"):
        fn = fn.child_by_field_name("name")
    return text(fn) if fn is not None else ""


def _dim3_args(src: Source, host: Node, name: str, at: int) -> Optional[list[Node]]:
    """The constructor arguments of `dim3 name(a, b[, c])` declared in `host` before `at`."""
    for d in walk(host):
        if d.type != "declaration" or d.start_byte >= at or not re.match(r"\s*dim3\b", text(d)):
            continue
        for c in d.named_children:
            if c.type == "init_declarator" and text(c.child_by_field_name("declarator")) == name:
                val = c.child_by_field_name("value")
                if val is not None and val.type == "argument_list":
                    return [a for a in val.named_children if a.type != "comment"]
                return None
            # `dim3 threads(TILE, ROWS);` with plain names parses as a function declarator
            if c.type == "function_declarator" and text(c.child_by_field_name("declarator")) == name:
                plist = c.child_by_field_name("parameters")
                return [a for a in (plist.named_children if plist is not None else []) if a.type != "comment"]
    return None


class SwapThreadAxes(Operator):
    name = "swap_thread_axes"
    carrier = "coalesced_access"
    description = "swap a 2-D kernel's x and y thread axes (kernel and launch shapes): warps walk the other dimension"

    def edits(self, source: Source):
        src = structural(source)
        device_reading_tid = {f.name for f in src.funcs if not f.is_kernel and
                              re.search(rb"\bthreadIdx\b", src.func_code(f))}
        for f in src.funcs:
            if not f.is_kernel:
                continue
            e = self._rewrite(src, f, device_reading_tid)
            if e is not None:
                yield e

    def _rewrite(self, src: Source, f, device_reading_tid: set[str], transposing: bool = True) -> Optional[Edit]:
        fn = src.func_node(f)
        body = fn.child_by_field_name("body") if fn is not None else None
        if body is None:
            return None
        code = " ".join(src.code[body.start_byte:body.end_byte].decode("utf-8", "replace").split())
        if not (re.search(r"threadIdx\.y", code) and re.search(r"threadIdx\.x", code)) or _WARP.search(code) or \
                re.search(r"\b(threadIdx|blockIdx|blockDim|gridDim)\.z\b", code):
            return None
        calls = {_callee(c) for c in walk(body) if c.type == "call_expression"}
        if calls & device_reading_tid:
            return None
        # a transposing kernel whose stores are coalesced: some global store moves one element per
        # lane of threadIdx.x while some global load moves one element per step of threadIdx.y
        # (the coalescing the human bought, here undone); a kernel whose accesses all follow x is
        # coalesced by nature and not a site
        stores_x, loads_y = unit_strides(src, f)
        if transposing and (not stores_x or not loads_y):
            return None
        subs = []
        for n in walk(body):
            if n.type == "field_expression":
                m = _AXIS.match(" ".join(text(n).split()).replace(" ", ""))
                if m:
                    subs.append(Edit(n.start_byte, n.end_byte, f"{m.group(1)}.{'y' if m.group(2) == 'x' else 'x'}"))
        launches = [c for c in src.nodes("call_expression") if _callee(c) == f.name and
                    any(k.type == "kernel_call_syntax" for k in c.children)]
        if not launches or not subs:
            return None
        shapes: dict[tuple[int, int], list[Node]] = {}
        for launch in launches:
            host = launch.parent
            while host is not None and host.type != "function_definition":
                host = host.parent
            cfg = next(k for k in launch.children if k.type == "kernel_call_syntax")
            args = [a for a in cfg.named_children if a.type != "comment"]
            if len(args) < 2 or host is None:
                return None
            for a in args[:2]:
                if a.type == "identifier":
                    dims = _dim3_args(src, host, text(a), launch.start_byte)
                    others = [c for c in walk(host) if c.type == "identifier" and text(c) == text(a) and
                              not (cfg.start_byte <= c.start_byte < cfg.end_byte)]
                    if dims is None or len(others) != 1:
                        return None  # not a local dim3, or one other launches (or code) share
                elif a.type == "call_expression" and text(a.child_by_field_name("function")) == "dim3":
                    dims = [x for x in a.child_by_field_name("arguments").named_children if x.type != "comment"]
                else:
                    return None  # a 1-D shape: nothing to swap
                if len(dims) < 2 or (len(dims) == 3 and text(dims[2]).strip() != "1"):
                    return None
                shapes[(dims[0].start_byte, dims[1].end_byte)] = dims
        for dims in shapes.values():
            a, b = dims[0], dims[1]
            subs.append(Edit(a.start_byte, a.end_byte, src.raw[b.start_byte:b.end_byte].decode("utf-8", "replace")))
            subs.append(Edit(b.start_byte, b.end_byte, src.raw[a.start_byte:a.end_byte].decode("utf-8", "replace")))
        subs.sort()
        if any(y[0] < x[1] for x, y in zip(subs, subs[1:])):
            return None
        lo, hi = subs[0][0], max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))


def forward(source: str, ctx=None) -> list:
    """The inverse is the same relabeling: offered where it makes the innermost index of a
    kernel's global stores move with threadIdx.x (a coalesced store) where it did not."""
    op = SwapThreadAxes()
    src = structural(Source(source))
    reading = {f.name for f in src.funcs if not f.is_kernel and re.search(rb"\bthreadIdx\b", src.func_code(f))}
    out = []
    for f in src.funcs:
        e = op._rewrite(src, f, reading, transposing=False) if f.is_kernel else None
        if e is None:
            continue
        new = (src.raw[:e.start] + e.replacement.encode() + src.raw[e.end:]).decode("utf-8")
        if _x_contiguous_stores(new) > _x_contiguous_stores(source):
            out.append(Materialization(source=new, rewrite="coalesce_by_axis_swap", carrier="coalesced_access",
                                       description="swap the thread axes so consecutive threads store to "
                                                   "consecutive addresses"))
    return out


def _x_contiguous_stores(source: str) -> int:
    src = structural(Source(source))
    return sum(unit_strides(src, f)[0] for f in src.funcs if f.is_kernel)


def unit_strides(src: Source, f) -> tuple[int, int]:
    """(global stores whose index moves one element per lane of threadIdx.x, global loads whose
    index moves one element per step of threadIdx.y): d(index)/d(threadIdx) == 1, the index read
    as integer algebra with the kernel's straight-line locals inlined."""
    import sympy

    fn = src.func_node(f)
    body = fn.child_by_field_name("body") if fn is not None else None
    if body is None:
        return 0, 0
    ptrs = {p.name for p in f.params if p.is_pointer}
    stores, loads = 0, 0
    for sub in walk(body):
        if sub.type != "subscript_expression":
            continue
        base = sub.child_by_field_name("argument")
        if base is None or base.type != "identifier" or text(base) not in ptrs:
            continue
        p = sub.parent
        is_store = p is not None and p.type == "assignment_expression" and \
            p.child_by_field_name("left").start_byte == sub.start_byte
        idx = sub.child_by_field_name("indices")
        inner = [c for c in (idx.named_children if idx is not None else []) if c.type != "comment"]
        if len(inner) != 1:
            continue
        top = sub
        while top.parent is not None and not (top.parent.start_byte == body.start_byte and
                                              top.parent.end_byte == body.end_byte):
            top = top.parent
        loops, q = [], sub.parent
        while q is not None and q.start_byte >= body.start_byte and q is not body:
            if q.type == "for_statement":
                loops.append(q)
            q = q.parent
        try:
            sym = IndexAlgebra(src, body, top, loops, set())
            e = sym.expr(inner[0], top.start_byte)
        except (NotAlgebra, ValueError):
            continue
        axis = "x" if is_store else "y"
        t = sym.symbols.get(f"ks_f_threadIdx_{axis}")
        if t is not None and sympy.expand(sympy.diff(e, t)) == 1:
            if is_store:
                stores += 1
            else:
                loads += 1
    return stores, loads


PAIR = Pair(SwapThreadAxes, (Rewrite("coalesce_by_axis_swap", "coalesced_access", forward, prior=2.0),))
