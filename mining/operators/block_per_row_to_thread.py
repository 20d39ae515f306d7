"""block_per_row_to_thread: a kernel whose block cooperates on one row (block-stride sweeps over
the row, block reductions, a value broadcast through shared memory) is launched with one thread
per block, and the kernel is written for that one thread (issue 19: warp/block-per-row -> thread
per row):

    __shared__ float s_var;                               float s_var;
    for (int i = threadIdx.x; i < H; i += blockDim.x)     for (int i = 0; i < H; i += 1)
        v += x[row * H + i] * x[row * H + i];     ->          v += x[row * H + i] * x[row * H + i];
    v = blockReduceSum<float>(v);                         v = (v);
    if (threadIdx.x == 0) s_var = rsqrtf(v / H);          if (0 == 0) s_var = rsqrtf(v / H);
    __syncthreads();
    ...                                                   ...
    kernel<<<rows, min(H, 1024)>>>(...)                   kernel<<<rows, 1>>>(...)

Detection by meaning: a one-dimensional kernel (no `threadIdx.y/z`, `blockDim.y/z`) launched in
this file, in which the thread index (or a local copy of it) is used only to start block-stride
loops (`i += blockDim.x`) and in `== 0` guards, whose calls that exchange values across threads
are calls of one-value device functions (group reductions: their bodies shuffle, or go through
shared memory with barriers), and without dynamic shared memory.

Why it is sound: launched with one thread per block, `threadIdx.x` is 0 and `blockDim.x` is 1 in
every thread, so substituting them is exact; a block-stride loop then visits the whole row in
that thread; a group reduction over a group of one thread returns its one input (what the helper
reduces is read from its body; the gate checks the result); a barrier in a one-thread block
orders nothing; shared memory of a one-thread block is private to it, so plain locals hold the
same values. The grid is unchanged (one block per row).

`forward` is the inverse the optimizer applies: a kernel launched with one thread per block whose
serial row loops accumulate sums or maxima gets block-stride loops, a block reduction of each
accumulator, and 256 threads per block; a kernel with one row per thread of a wider block gets one
row per block (`shuffle_to_shared.block_per_row_rows`, the warp-per-row analysis with the block for
the warp).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.operators.base import Edit, Operator, Pair, Rewrite
from mining.operators.rewrite_util import splice_range, structural
from mining.operators.shuffle_to_shared import block_per_row_rows
from corpora.code.parse import text, walk

_2D = re.compile(r"\b(threadIdx|blockDim)\s*\.\s*[yz]\b")
_EXCHANGE = re.compile(r"\b(__shfl\w*|__syncwarp|__ballot\w*|__any_sync|__all_sync|__reduce_\w+_sync|"
                       r"\w+\s*\.\s*shfl\w*)\s*\(")
_BARRIER = re.compile(r"^(__syncthreads\s*\(\s*\)|(\w+::)*sync\s*\(\s*\w+\s*\)|\w+\s*\.\s*sync\s*\(\s*\))\s*;$")


def _callee(call: Node) -> str:
    """The called function's own name: namespaces and template arguments dropped."""
    fn = call.child_by_field_name("function")
    while fn is not None and fn.type in ("qualified_identifier", "template_function"):
        fn = fn.child_by_field_name("name")
    return text(fn) if fn is not None else ""


def group_reductions(src: Source) -> set[str]:
    """Device functions of one value that combine it across threads (shuffles, or shared memory
    with a barrier), directly or through other such functions."""
    bodies = {}
    for f in src.funcs:
        if f.is_kernel or not f.name:
            continue
        code = src.func_code(f).decode("utf-8", "replace")
        bodies.setdefault(f.name, []).append((f, code.split("{", 1)[1] if "{" in code else ""))
    out = set()
    for _ in range(3):
        for name, defs in bodies.items():
            for f, body in defs:
                values = [p for p in f.params if not p.is_pointer]
                if len(f.params) != 1 or len(values) != 1:
                    continue
                direct = _EXCHANGE.search(body) or (re.search(r"\b__shared__\b", body) and
                                                     re.search(r"\b__syncthreads\s*\(", body))
                via = any(re.search(r"\b%s\s*[<(]" % re.escape(g), body) for g in out)
                if direct or via:
                    out.add(name)
    return out


def _launches(src: Source, name: str) -> list[Node]:
    out = []
    for call in src.nodes("call_expression"):
        if any(c.type == "kernel_call_syntax" for c in call.children) and _callee(call) == name:
            out.append(call)
    return out


def _thread_aliases(body: Node) -> set[str]:
    """Locals (not loop variables) initialised to the thread index: `const int tid = threadIdx.x;`."""
    out = set()
    for d in walk(body):
        if d.type != "declaration" or (d.parent is not None and d.parent.type == "for_statement"):
            continue
        for c in d.named_children:
            if c.type == "init_declarator" and c.child_by_field_name("value") is not None and \
                    re.fullmatch(r"threadIdx\s*\.\s*x", text(c.child_by_field_name("value"))) and \
                    c.child_by_field_name("declarator").type == "identifier":
                out.add(text(c.child_by_field_name("declarator")))
    return out


class BlockPerRowToThread(Operator):
    name = "block_per_row_to_thread"
    carrier = "block_per_row"
    description = "launch one thread per row-block and run the block's cooperative sweep in that thread"

    def edits(self, source: Source):
        src = structural(source)
        reductions = group_reductions(src)
        for f in src.funcs:
            if not f.is_kernel:
                continue
            e = self._rewrite(src, f, reductions)
            if e is not None:
                yield e

    def _rewrite(self, src: Source, f, reductions: set[str]) -> Optional[Edit]:
        fn = src.func_node(f)
        body = fn.child_by_field_name("body") if fn is not None else None
        if body is None:
            return None
        code = src.code[body.start_byte:body.end_byte].decode("utf-8", "replace")
        if _2D.search(code) or re.search(r"\bextern\s+__shared__\b", code) or "threadIdx.x" not in code:
            return None
        launches = _launches(src, f.name)
        if not launches or any(l.start_byte < body.end_byte for l in launches):
            return None
        aliases = _thread_aliases(body)
        subs: list[Edit] = []
        loops = 0
        for n in walk(body):
            if n.type == "field_expression" and re.fullmatch(r"threadIdx\s*\.\s*x", text(n)):
                subs.append(Edit(n.start_byte, n.end_byte, "0"))
                if not self._thread_use_ok(n, aliases, is_alias_decl=True):
                    return None
            elif n.type == "field_expression" and re.fullmatch(r"blockDim\s*\.\s*x", text(n)):
                if not self._stride_use(n):
                    return None
                subs.append(Edit(n.start_byte, n.end_byte, "1"))
                loops += 1
            elif n.type == "identifier" and text(n) in aliases:
                p = n.parent
                if p is not None and p.type == "init_declarator" and p.child_by_field_name("declarator") is not None \
                        and p.child_by_field_name("declarator").start_byte == n.start_byte:
                    continue
                if not self._thread_use_ok(n, aliases, is_alias_decl=False):
                    return None
            elif n.type == "call_expression":
                name = _callee(n)
                if name in reductions:
                    args = [a for a in n.child_by_field_name("arguments").named_children if a.type != "comment"]
                    if len(args) != 1:
                        return None
                    subs.append(Edit(n.start_byte, n.end_byte,
                                 "(" + src.raw[args[0].start_byte:args[0].end_byte].decode("utf-8", "replace") + ")"))
                elif _EXCHANGE.search(text(n).split("(", 1)[0] + "("):
                    return None
            elif n.type == "expression_statement" and _BARRIER.match(" ".join(text(n).split())):
                subs.append(Edit(n.start_byte, n.end_byte, ""))
            elif n.type == "declaration" and re.search(r"\b__shared__\b", text(n)):
                m = re.search(rb"\b(static\s+)?__shared__\s+", src.code[n.start_byte:n.end_byte])
                if m:
                    subs.append(Edit(n.start_byte + m.start(), n.start_byte + m.end(), ""))
        if loops == 0:
            return None  # no block-stride sweep: the threads do not share a row
        subs = _outermost(subs)
        if not subs:
            return None
        for launch in launches:
            cfg = next(c for c in launch.children if c.type == "kernel_call_syntax")
            args = [c for c in cfg.named_children if c.type != "comment"]
            if len(args) < 2 or len(args) > 2 and text(args[2]).strip() not in ("0",):
                return None  # dynamic shared memory sized for the block
            subs.append(Edit(args[1].start_byte, args[1].end_byte, "1"))
        lo, hi = min(s for s, _, _ in subs), max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, sorted(subs)))

    @staticmethod
    def _stride_use(n: Node) -> bool:
        """blockDim.x as the stride of a for loop's update (`i += blockDim.x`)."""
        p = n.parent
        while p is not None and p.type == "parenthesized_expression":
            p = p.parent
        if p is None or p.type != "assignment_expression" or text(p.children[1]) != "+=":
            return False
        loop = p.parent
        return loop is not None and loop.type == "for_statement" and loop.child_by_field_name("update") is not None \
            and loop.child_by_field_name("update").start_byte == p.start_byte

    @staticmethod
    def _thread_use_ok(n: Node, aliases: set[str], is_alias_decl: bool) -> bool:
        """The thread index starts a block-stride loop, is compared with 0, or initialises an alias."""
        p = n.parent
        while p is not None and p.type == "parenthesized_expression":
            p = p.parent
        if p is None:
            return False
        if p.type == "init_declarator":
            decl = p.child_by_field_name("declarator")
            owner = p.parent.parent if p.parent is not None else None
            if owner is not None and owner.type == "for_statement":
                upd = owner.child_by_field_name("update")
                return upd is not None and re.search(r"\+=\s*\(?\s*blockDim\s*\.\s*x", text(upd)) is not None
            return is_alias_decl and decl is not None and text(decl) in aliases
        if p.type == "binary_expression" and text(p.child_by_field_name("operator")) in ("==", "!="):
            other = p.child_by_field_name("right") if p.child_by_field_name("left").start_byte == n.start_byte \
                else p.child_by_field_name("left")
            return text(other).strip() in ("0", "0u")
        if p.type == "assignment_expression" and text(p.children[1]) == "=":
            loop = p.parent
            if loop is not None and loop.type == "for_statement":
                upd = loop.child_by_field_name("update")
                return upd is not None and re.search(r"\+=\s*\(?\s*blockDim\s*\.\s*x", text(upd)) is not None
        return False


def _outermost(subs: list[Edit]) -> list[Edit]:
    """Drop sub-edits nested in another (a reduction call containing `threadIdx.x`)."""
    out = []
    for s in sorted(subs, key=lambda x: (x[0], -x[1])):
        if out and s[0] < out[-1][1]:
            if s[1] <= out[-1][1]:
                continue
            return []
        out.append(s)
    return out


# --------------------------------------------------------------------------- forward
_SERIAL = re.compile(r"for\s*\(\s*int\s+(\w+)\s*=\s*0\s*;\s*\1\s*<\s*([^;]+?)\s*;\s*(?:\+\+\s*\1|\1\s*\+\+|\1\s*\+=\s*1)\s*\)")
BLOCK = 256
_HELPER = """// ks-optimize helper: ks_block_reduce -- every thread of the block gets the block's sum (MAX = 0)
// or maximum (MAX = 1) of v; blockDim.x must be a power of two <= 1024
template <int MAX>
__device__ float ks_block_reduce(float v) {
    __shared__ float ks_red[1024];
    ks_red[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) ks_red[threadIdx.x] = MAX ? fmaxf(ks_red[threadIdx.x], ks_red[threadIdx.x + s])
                                                       : ks_red[threadIdx.x] + ks_red[threadIdx.x + s];
        __syncthreads();
    }
    float r = ks_red[0];
    __syncthreads();
    return r;
}

"""


def forward(source: str, ctx=None) -> list:
    """One thread per row-block -> the block cooperates on its row: a kernel launched with one
    thread per block (`<<<rows, 1>>>`) whose serial row loops accumulate float scalars with `+=`
    or `x = fmaxf(x, ...)` gets block-stride loops, a block reduction of each accumulator after
    its loop, and 256 threads per block."""
    from mining.operators.base import Materialization

    src = structural(Source(source))
    out = []
    for f in src.funcs:
        if not f.is_kernel:
            continue
        launches = _launches(src, f.name)
        if not launches:
            continue
        cfgs = [next(c for c in l.children if c.type == "kernel_call_syntax") for l in launches]
        blocks = [[c for c in cfg.named_children if c.type != "comment"] for cfg in cfgs]
        if any(len(b) != 2 or text(b[1]).strip() != "1" for b in blocks):
            continue
        fn = src.func_node(f)
        body = fn.child_by_field_name("body")
        code = src.code[body.start_byte:body.end_byte].decode("utf-8", "replace")
        if re.search(r"\b(threadIdx|blockDim)\b|__syncthreads|__shared__", code):
            continue
        subs = []
        for loop in walk(body):
            if loop.type != "for_statement":
                continue
            head = src.code[loop.start_byte:loop.child_by_field_name("body").start_byte].decode()
            m = _SERIAL.match(head)
            if not m or any(p.type == "for_statement" for p in _ancestors(loop, body)):
                continue
            loop_body = text(loop.child_by_field_name("body"))
            accs = {a for a in re.findall(r"\b(\w+)\s*\+=", loop_body)}
            maxs = {a for a, b in re.findall(r"\b(\w+)\s*=\s*fmaxf\s*\(\s*(\w+)\s*,", loop_body) if a == b}
            if re.search(r"\[[^\]]*\b%s\b" % re.escape(m.group(1)), loop_body) is None:
                continue  # the loop does not walk an array
            i = m.group(1)
            subs.append(Edit(loop.start_byte, loop.child_by_field_name("body").start_byte,
                         f"for (int {i} = threadIdx.x; {i} < {m.group(2)}; {i} += blockDim.x) "))
            tail = "".join(f" {a} = ks_block_reduce<0>({a});" for a in sorted(accs)) + \
                "".join(f" {a} = ks_block_reduce<1>({a});" for a in sorted(maxs))
            if tail:
                subs.append(Edit(loop.end_byte, loop.end_byte, tail))
        if not subs:
            continue
        new = bytearray(src.raw)
        edits = subs + [Edit(b[1].start_byte, b[1].end_byte, str(BLOCK)) for b in blocks]
        for s, e, t in sorted(edits, reverse=True):
            new[s:e] = t.encode()
        text_ = _HELPER + new.decode("utf-8") if "ks_block_reduce" not in source else new.decode("utf-8")
        out.append(Materialization(source=text_, rewrite="block_per_row", carrier="block_per_row",
                                   description=f"{f.name}: each block's {BLOCK} threads sweep the row in "
                                               f"block-stride steps and reduce their partials"))
    # a kernel that gives each thread a row (`row = blockIdx.x * blockDim.x + threadIdx.x`), read
    # by the warp-per-row rewrite's analysis, gets the block for the warp (issue 20)
    return out + block_per_row_rows(source, ctx)


def _ancestors(node: Node, stop: Node) -> list[Node]:
    out, p = [], node.parent
    while p is not None and p.start_byte >= stop.start_byte and not (p.start_byte == stop.start_byte and
                                                                      p.end_byte == stop.end_byte):
        out.append(p)
        p = p.parent
    return out


def vectorize_block_rows(source: str, ctx=None) -> list:
    """block_row_vectors.vectorize_block_rows (imported here, where it is registered: that module
    reads this one's group reductions)."""
    from mining.operators.block_row_vectors import vectorize_block_rows as rows
    return rows(source, ctx)


# a block-per-row kernel's threads each take four floats of the row with one 16-byte access
# (issue 20): a vector_load / vector_store skill is applied by it, a block_per_row step is not
PAIR = Pair(BlockPerRowToThread, (Rewrite("block_per_row", "block_per_row", forward, prior=1.5),
                                  Rewrite("vectorize_block_rows", "vector_load", vectorize_block_rows, prior=1.8,
                                          serves=("vector_load", "vector_store"))),
            inverted_by=("block_per_row",))
