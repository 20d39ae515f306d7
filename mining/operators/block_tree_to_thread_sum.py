"""block_tree_to_thread_sum: a block sum built from strided per-thread partials and a shared-memory
tree, read by one thread only, becomes that thread's own sum over the whole range.

    T acc = 0;                                              T acc = 0;
    for (i = tid; i < N; i += S) acc += E(i);          ->   for (i = 0; i < N; i += 1) acc += E(i);
    __shared__ T A[B];                                      (deleted)
    A[tid] = acc;                                           (deleted)
    for (s = B / 2; s > 0; s >>= 1) {                       (deleted)
        SYNC; if (tid < s) A[tid] += A[tid + s];            (SYNC first or last)
    }
    if (tid == 0) out[...] = A[0];                          if (tid == 0) out[...] = acc;

(the CUDA samples' histogram merge kernel: one block per bin sums the bin over all partial
histograms; a reduce-style kernel whose block total only thread 0 publishes has the same shape).

Why it is sound: with S equal to the block size at every launch, the strided loops of the threads
0..B-1 visit every i of [0, N) once, so the tree (sequential halving from B / 2 down to 1 over a
power-of-two B: A[0] ends as the sum of every slot) leaves in A[0] the sum of E(i) over [0, N);
thread 0's own loop over [0, N) computes the same sum (another order: float rounding differs, the
gate's tolerance judges it). Every other thread computes it too and never reads it. Sites need:
the accumulation loop, the park `A[tid] = acc;` and the tree loop as statements of the kernel's
body in that order (only barriers between them), `acc` written nowhere after its loop, the tree
combining with `+` only (the partials are sums), A read after the tree only as `A[0]` inside
`if (tid == 0)`, and every launch of the kernel in the file with a constant one-dimensional block
size B, a power of two, with S and the tree's first stride times two both equal to B (`blockDim.x`
counts as B).

Forward, `tree_sum_per_block`: the reverse. A sum over [0, N) that every thread of a kernel
computes (`for (i = 0; i < N; i++) acc += E(i);` at the top level of the body) and that only
`if (tid == 0)` statements read afterwards becomes strided partials (`i = threadIdx.x; i +=
blockDim.x`) parked in a shared array of B slots and folded by a tree (barrier last), thread 0
reading slot 0. Preconditions: every launch of the kernel in the file has the same constant,
power-of-two, one-dimensional block B (the array's size and the tree's first stride), no `return`
in the kernel (every thread reaches the barriers), and `acc` written nowhere after the loop; the
argument above read the other way (the same sum, another order).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import contains, enclosing, same
from corpora.code.parse import text, walk
from corpora.code.source import Source
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, candidate
from mining.operators.nodes import FunctionIndex, indent_at, kernels, statements, strip_parens
from mining.operators.reduction_tree import (SYNC_RE, fresh, is_thread, kernel_launches, pow2, stmts, thread_names,
                                             thread_zero_reads_only, value_of)
from mining.operators.rewrite_util import ctext, splice_range, structural

_TYPE = r"(?:const\s+)?(?:(?:unsigned|signed|long|short)\s+)*\w+"


def _is_sync(src: Source, node: Node) -> bool:
    return node.type == "expression_statement" and re.fullmatch(SYNC_RE, ctext(src, node)) is not None


def _init_value(init: Node) -> Optional[Node]:
    """The value a for-loop initializer gives its variable (`int i = v` or `i = v`)."""
    if init.type == "declaration":
        d = next((c for c in init.named_children if c.type == "init_declarator"), None)
        return d.child_by_field_name("value") if d is not None else None
    return init.child_by_field_name("right") if init.type == "assignment_expression" else None


def _accumulation(src: Source, loop: Node, names: set[str]) -> Optional[tuple[str, Node, Node, str]]:
    """(acc, init value node, update node, stride) of `for (i = tid; i < N; i += S) acc += E(i);`."""
    init, upd, body = (loop.child_by_field_name(f) for f in ("initializer", "update", "body"))
    if init is None or upd is None or body is None:
        return None
    st = stmts(body)
    if len(st) != 1:
        return None
    mi = re.fullmatch(r"(?:%s\s+)?(\w+)\s*=\s*(.+?)\s*;?" % _TYPE, ctext(src, init))
    if mi is None or not is_thread(mi.group(2), names):
        return None
    i = re.escape(mi.group(1))
    mu = re.fullmatch(r"%s\s*\+=\s*(.+)|%s\s*=\s*%s\s*\+\s*(.+)" % (i, i, i), ctext(src, upd))
    ma = re.fullmatch(r"(\w+)\s*\+=\s*[^;]+;", ctext(src, st[0]))
    if mu is None or ma is None or ma.group(1) == mi.group(1):
        return None
    value = _init_value(init)
    if value is None or not is_thread(ctext(src, value), names):
        return None
    return ma.group(1), value, upd, strip_parens(mu.group(1) or mu.group(2))


def _tree(src: Source, loop: Node, array: str, names: set[str]) -> Optional[str]:
    """B / 2 (the first stride's expression) of `for (s = X / 2; s > 0; s >>= 1) { [SYNC] if (tid < s)
    A[tid] += A[tid + s]; [SYNC] }` with exactly one barrier, else None."""
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or cond is None or upd is None:
        return None
    mi = re.fullmatch(r"(?:%s\s+)?(\w+)\s*=\s*(.+?)\s*;?" % _TYPE, ctext(src, init))
    if mi is None:
        return None
    s = re.escape(mi.group(1))
    if not re.fullmatch(r"%s\s*(?:>\s*0|>=\s*1|!=\s*0)" % s, ctext(src, cond)) or \
            not re.fullmatch(r"%s\s*>>=\s*1|%s\s*/=\s*2|%s\s*=\s*%s\s*(?:>>\s*1|/\s*2)" % (s, s, s, s), ctext(src, upd)):
        return None
    body = stmts(loop.child_by_field_name("body"))
    syncs = [b for b in body if _is_sync(src, b)]
    rest = [b for b in body if not _is_sync(src, b)]
    if len(syncs) != 1 or len(rest) != 1 or rest[0].type != "if_statement" or \
            rest[0].child_by_field_name("alternative") is not None:
        return None
    g = strip_parens(ctext(src, rest[0].child_by_field_name("condition")))
    mg = re.fullmatch(r"(.+?)\s*<\s*%s" % s, g)
    inner = stmts(rest[0].child_by_field_name("consequence"))
    if mg is None or not is_thread(mg.group(1), names) or len(inner) != 1:
        return None
    t, a = re.escape(strip_parens(mg.group(1))), re.escape(array)
    if not re.fullmatch(r"%s\s*\[\s*%s\s*\]\s*(?:\+=|=\s*%s\s*\[\s*%s\s*\]\s*\+)\s*%s\s*\[\s*(?:%s\s*\+\s*%s|%s\s*\+\s*%s)\s*\]\s*;"
                        % (a, t, a, t, a, t, s, s, t), ctext(src, inner[0])):
        return None
    m2 = re.fullmatch(r"(.+?)\s*(?:/\s*2|>>\s*1)", strip_parens(mi.group(2)))
    return strip_parens(m2.group(1)) if m2 else None


class BlockTreeToThreadSum(Operator):
    name = "block_tree_to_thread_sum"
    carrier = "block_reduce_shared"
    description = "a block's shared-memory tree sum that one thread reads becomes that thread's own sum"

    def edits(self, src: Source):
        st = structural(src)
        for decl, name, dims in st.shared_decls:
            f = st.function_at(decl.start_byte)
            fn = st.func_node(f) if f is not None else None
            if fn is None or f is None or not f.is_kernel or len(dims) != 1:
                continue
            e = self.rewrite(st, fn, decl, name)
            if e is not None:
                yield e

    def rewrite(self, src: Source, fn: Node, decl: Node, array: str) -> Optional[Edit]:
        names = thread_names(src, fn)
        body = fn.child_by_field_name("body")
        if not names or body is None:
            return None
        top = statements(body)
        a = re.escape(array)
        # the park A[tid] = acc; at the top level, the tree right after it (barriers between)
        k = next((i for i, s in enumerate(top) if s.type == "expression_statement" and
                  (m := re.fullmatch(r"%s\s*\[\s*(.+?)\s*\]\s*=\s*(\w+)\s*;" % a, ctext(src, s))) and
                  is_thread(m.group(1), names)), None)
        if k is None:
            return None
        park = top[k]
        acc = re.fullmatch(r"%s\s*\[\s*.+?\s*\]\s*=\s*(\w+)\s*;" % a, ctext(src, park)).group(1)
        j = k + 1
        while j < len(top) and _is_sync(src, top[j]):
            j += 1
        if j >= len(top) or top[j].type != "for_statement":
            return None
        tree = top[j]
        half = _tree(src, tree, array, names)
        # the accumulation loop before the park (other statements between must not touch acc)
        loops = [s for s in top[:k] if s.type == "for_statement"]
        accum = next(((s, r) for s in reversed(loops) if (r := _accumulation(src, s, names)) and r[0] == acc), None)
        if half is None or accum is None:
            return None
        loop, (_, start, update, stride) = accum
        idx = FunctionIndex(src, fn)
        v = idx.visible(acc, park.start_byte)
        if v is None or v.shape != "scalar":
            return None
        if any(w.start_byte >= loop.end_byte for w in v.assigned):
            return None
        # every launch: a power-of-two block of B threads, S == B, the first stride == B / 2
        launches = kernel_launches(src, fn)
        if not launches:
            return None
        for at in launches:
            if not pow2(at.block) or value_of(src, stride, at) != at.block or value_of(src, half, at) != at.block:
                return None
        # A elsewhere: only A[0] inside `if (tid == 0)` after the tree
        reads = []
        for n in walk(fn):
            if n.type != "identifier" or text(n) != array or contains(decl, n) or contains(park, n) or \
                    contains(tree, n):
                continue
            sub = n.parent
            if sub is None or sub.type != "subscript_expression" or n.start_byte < tree.end_byte or \
                    not re.fullmatch(r"%s\s*\[\s*0[uU]?\s*\]" % a, ctext(src, sub)):
                return None
            if sub.parent is not None and ((sub.parent.type == "assignment_expression" and
                                            same(sub.parent.child_by_field_name("left"), sub)) or
                                           sub.parent.type == "update_expression"):
                return None
            g = enclosing(sub, "if_statement")
            while g is not None:
                c = strip_parens(ctext(src, g.child_by_field_name("condition")))
                mz = re.fullmatch(r"(.+?)\s*==\s*0|0\s*==\s*(.+)", c)
                if mz and is_thread(mz.group(1) or mz.group(2), names) and \
                        contains(g.child_by_field_name("consequence"), sub):
                    break
                g = enclosing(g.parent, "if_statement") if g.parent is not None else None
            if g is None:
                return None
            reads.append(sub)
        if not reads or idx.visible(acc, reads[0].start_byte) is not v:
            return None
        subs = [Edit(start.start_byte, start.end_byte, "0"),
                Edit(update.start_byte, update.end_byte,
                     re.sub(r"(\w+)\s*(?:\+=|=\s*\1\s*\+)\s*.+", r"\1 += 1", ctext(src, update)))]
        subs += [Edit(r.start_byte, r.end_byte, acc) for r in reads]
        for node in (decl, park, tree):
            subs.append(Edit(*src.line_span(node.start_byte, node.end_byte), ""))
        subs.sort()
        for (_, e1, _), (s2, _, _) in zip(subs, subs[1:]):
            if s2 < e1:
                return None
        lo, hi = subs[0][0], max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))


def _serial_sum(src: Source, loop: Node) -> Optional[tuple[str, Node, Node, str]]:
    """(acc, init value node, update node, loop variable) of `for (i = 0; i < N; i++) acc += E(i);`."""
    init, upd, body = (loop.child_by_field_name(f) for f in ("initializer", "update", "body"))
    if init is None or upd is None or body is None or len(stmts(body)) != 1:
        return None
    mi = re.fullmatch(r"(?:%s\s+)?(\w+)\s*=\s*0[uU]?\s*;?" % _TYPE, ctext(src, init))
    ma = re.fullmatch(r"(\w+)\s*\+=\s*[^;]+;", ctext(src, stmts(body)[0]))
    if mi is None or ma is None or ma.group(1) == mi.group(1):
        return None
    i = re.escape(mi.group(1))
    if not re.fullmatch(r"%s\s*\+\+|\+\+\s*%s|%s\s*\+=\s*1|%s\s*=\s*%s\s*\+\s*1" % (i, i, i, i, i), ctext(src, upd)):
        return None
    value = _init_value(init)
    return (ma.group(1), value, upd, mi.group(1)) if value is not None else None


def tree_sum_per_block(source: str, ctx: Context) -> list[Materialization]:
    """Every thread's sum over [0, N), read by thread 0 only -> strided partials folded by a
    shared-memory tree over the block (see the module docstring)."""
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        names = thread_names(src, k.node)
        launches = kernel_launches(src, k.node)
        if not names or not launches or len({la.block for la in launches}) != 1 or not pow2(launches[0].block) \
                or launches[0].block < 2 or re.search(r"\breturn\b", ctext(src, k.body)):
            continue
        block = launches[0].block
        idx = FunctionIndex(src, k.node)
        for loop in statements(k.body):
            if loop.type != "for_statement" or (r := _serial_sum(src, loop)) is None:
                continue
            acc, start, update, i = r
            v = idx.visible(acc, loop.start_byte)
            if v is None or v.shape != "scalar" or v.kind != "local" or \
                    any(w.start_byte >= loop.end_byte for w in v.assigned):
                continue
            tnode = v.decl.child_by_field_name("type")
            ctype = ctext(src, tnode) if tnode is not None else ""
            if not ctype or ctype == "auto":
                continue
            guards = thread_zero_reads_only(src, loop, k.node, acc, set())
            reads = [n for n in walk(k.body) if n.type == "identifier" and text(n) == acc and
                     n.start_byte >= loop.end_byte]
            if not guards or not reads:
                continue
            tree, s = fresh(src, k.node, "ks_tree"), fresh(src, k.node, "ks_s")
            ind = indent_at(src, loop.start_byte)
            park = (f"\n{ind}__shared__ {ctype} {tree}[{block}];\n"
                    f"{ind}{tree}[threadIdx.x] = {acc};\n"
                    f"{ind}__syncthreads();\n"
                    f"{ind}for (unsigned int {s} = {block} / 2; {s} > 0; {s} >>= 1) {{\n"
                    f"{ind}    if (threadIdx.x < {s}) {tree}[threadIdx.x] += {tree}[threadIdx.x + {s}];\n"
                    f"{ind}    __syncthreads();\n"
                    f"{ind}}}")
            edits = [Edit(start.start_byte, start.end_byte, "threadIdx.x"),
                     Edit(update.start_byte, update.end_byte, f"{i} += blockDim.x"),
                     Edit(loop.end_byte, loop.end_byte, park)]
            edits += [Edit(n.start_byte, n.end_byte, f"{tree}[0]") for n in reads]
            out.append(candidate(src, edits, "tree_sum_per_block",
                                 f"{k.name}: the sum of {acc} split over the block's {block} threads and folded "
                                 f"by a shared-memory tree",
                                 guards=[f"every launch of {k.name} has {block} threads"], excerpt=ctext(src, loop)))
    return out


PAIR = Pair(BlockTreeToThreadSum, (Rewrite("tree_sum_per_block", "block_reduce_shared", tree_sum_per_block, prior=2.0),))
