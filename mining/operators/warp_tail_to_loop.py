"""warp_tail_to_loop: the last warp's levels of a shared-memory tree (Harris's "unroll the last
warp": `if (tid < 32) warpReduce(sdata, tid);` with `cache[tid] += cache[tid + 32]; ... + 1`
through a `volatile` pointer, inline or in a device function, each level optionally behind
`if (blockSize >= 2K)`, `__syncwarp()` allowed between levels; or the race-free register spelling
`v = A[T]; v += A[T + K]; __syncwarp(); A[T] = v; __syncwarp(); ...`) folded back into the
synchronized loop:

    for (s = blockDim.x / 2; s > 32; s >>= 1) { if (tid < s) STEP(s); SYNC }      for (...; s > 0; s >>= 1) { ... }
    if (tid < 32) warpReduce(sdata, tid);                                    ->   (deleted; the helper too
                                                                                  when nothing else calls it)

Why it is sound: the tail runs levels K = 32 .. 1 of the same tree with the threads T < 32, the
loop runs them with the threads T < K and a barrier per level. Both compute slot 0 from the same
operands in the same tree order (threads K <= T < 32 of the tail write slots that no later level
reads for slot 0, as the idiom intends: in lock-step, or separated by `__syncwarp()`, every read of
a level comes before that level's writes), so `A[0]` is bit-identical with `+` and any other step
the tail uses; the other slots differ, so after the tail the function may read only `A[0]` (checked)
and write the array nowhere. The volatile idiom without `__syncwarp` is a data race under
independent thread scheduling (Volta and later): there the loop is the correct program the tail
intended, which the gate confirms against the reference.

Sites need: the tail right after a sequential loop whose lower bound is the tail's first level
(`s > 32`, tail from 32), the same array and step, the tail's thread bound equal to its first level,
every level's guard true at every launch of the kernel exactly when the loop would run it
(`B >= 2K` and K <= blockDim.x / 2), and a power-of-two block at each launch.

The shuffle spelling (the CUDA samples' reduce4..6, after shuffle_to_shared the same through shared
slots): the loop carries the thread's running value V beside its slot (`A[T] = V = V + A[T + s]`)
and the last warp finishes on V: `if (T < 32) { V += A[T + 32]; for (o = 16; o > 0; o /= 2) V +=
shfl_down(V, o); }`. Thread 0's V is then the sum of the same operands in the same tree as the
loop run down to `s > 0` gives thread 0 (lane l + o's V is slot l + o's value at that level), so it
is bit-identical; other threads' V differ, so after the tail V may be read only under
`if (T == 0)` and the array not at all (checked), and every launch has a power-of-two block of at
least 64 threads (the tail's first level runs).

Forward, `unroll_last_warp`: a sequential `+` loop down to `s > 0` over blockDim.x, in a kernel
whose every launch has a power-of-two block of at least 64 threads, stops at `s > 32` and the last
warp finishes with the race-free register spelling (`__syncwarp()` between the read and the
write of every level).
"""
from __future__ import annotations

import re

from corpora.code.source import Source
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, per_kernel_and_all
from mining.operators.reduction_tree import (after, aliases, kernel_launches, only_slot_zero_after, pow2,
                                             rest_of_function, shared_arrays, shuffle_tail, thread_zero_reads_only,
                                             tree_loops, value_of, warp_tail)
from mining.operators.rewrite_util import ctext, line_indent, splice_range


class WarpTailToLoop(Operator):
    name = "warp_tail_to_loop"
    carrier = "unrolled_last_warp"
    description = "fold the last warp's unrolled levels of a shared-memory tree back into the synchronized loop"

    def edits(self, src: Source):
        arrays = shared_arrays(src)
        for t in tree_loops(src):
            if t.kind != "sequential":
                continue
            e = self._rewrite(src, t, arrays)
            if e is not None:
                yield e

    def _rewrite(self, src: Source, t, arrays):
        nxt = after(t.loop)
        if not nxt:
            return None
        tail = warp_tail(src, nxt[0], t.fn, arrays)
        if tail is None and t.step.op == "chain":
            return self._shuffle_tail(src, t, nxt, arrays)
        if tail is None or tail.strides[0] != t.low or tail.array not in aliases(src, t.fn, t.step.array) and \
                t.step.array not in aliases(src, t.fn, tail.array):
            return None
        # the same combining operator (`+=` and `= a + b` are one); the register-carrying loop step is refused
        if tail.step.op != t.step.op or t.step.op not in ("+", "max", "min", "fmaxf", "fminf", "fmax", "fmin") or \
                (t.step.op != "+" and tail.step.form.replace(tail.array, t.step.array) != t.step.form):
            return None
        launches = kernel_launches(src, t.fn)
        if launches is None:
            return None
        for at in launches:
            if not pow2(at.block) or value_of(src, t.bound, at) != at.block:
                return None
            for k, g in zip(tail.strides, tail.guards):
                runs = True
                if g is not None:
                    b = value_of(src, g, at)
                    if b is None:
                        return None
                    runs = b >= 2 * k
                if runs != (k <= at.block // 2):
                    return None
        if not only_slot_zero_after(src, tail.stmt, t.fn, aliases(src, t.fn, t.step.array) | {tail.array}):
            return None
        cond = t.loop.child_by_field_name("condition")
        cond_text = src.code[cond.start_byte:cond.end_byte].decode("utf-8", "replace")
        new_cond = re.sub(r"(>=?)\s*\d+\s*$", lambda m: "> 0" if m.group(1) == ">" else ">= 1", cond_text.rstrip())
        ts, te = src.line_span(tail.stmt.start_byte, tail.stmt.end_byte)
        subs = [Edit(cond.start_byte, cond.end_byte, new_cond), Edit(ts, te, "")]
        start, end = t.loop.start_byte, te
        if tail.helper is not None:
            f = src.function_at(tail.helper.start_byte)
            calls = len(re.findall(rb"\b%s\b" % re.escape(f.name.encode()), src.code))
            if calls == 2:  # its definition and this call: the helper goes too
                node = tail.helper.parent if tail.helper.parent is not None and \
                    tail.helper.parent.type == "template_declaration" else tail.helper
                hs, he = src.line_span(node.start_byte, node.end_byte)
                if he <= t.loop.start_byte:
                    subs.append(Edit(hs, he, ""))
                    start = hs
        return Edit(start, end, splice_range(src, start, end, subs))


    def _shuffle_tail(self, src: Source, t, nxt, arrays):
        """The register-carrying loop (`A[T] = V = V + A[T + s]`) and the shuffle tail on V."""
        names = aliases(src, t.fn, t.step.array)
        st = shuffle_tail(src, nxt, t.fn, arrays, t.step.value)
        if st is None or t.low != 32 or st.array not in names:
            return None
        launches = kernel_launches(src, t.fn)
        if launches is None:
            return None
        for at in launches:
            if not pow2(at.block) or at.block < 64 or value_of(src, t.bound, at) != at.block:
                return None
            if st.guard is not None and (value_of(src, st.guard, at) or 0) < 64:
                return None
        if thread_zero_reads_only(src, st.stmt, t.fn, t.step.value, names) is None:
            return None
        cond = t.loop.child_by_field_name("condition")
        cond_text = src.code[cond.start_byte:cond.end_byte].decode("utf-8", "replace")
        subs = [Edit(cond.start_byte, cond.end_byte, re.sub(r">\s*32\s*$", "> 0", cond_text.rstrip()))]
        rest = rest_of_function(src, st.stmt, t.fn)
        for d in st.decls:
            declared = re.findall(r"\b(\w+)\s*=", ctext(src, d))
            if declared and not re.search(r"\b%s\b" % re.escape(declared[0]), rest):
                subs.append(Edit(*src.line_span(d.start_byte, d.end_byte), ""))
        ts, te = src.line_span(st.stmt.start_byte, st.stmt.end_byte)
        subs.append(Edit(ts, te, ""))
        return Edit(t.loop.start_byte, te, splice_range(src, t.loop.start_byte, te, subs))


# --------------------------------------------------------------------------- forward half
def unroll_last_warp(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    per = []
    for t in tree_loops(src):
        if t.kind != "sequential" or t.low != 0 or t.step.op != "+" or \
                not re.fullmatch(r"blockDim\s*\.\s*x", t.bound) or t.step.form.count("=") != 1:
            continue
        launches = kernel_launches(src, t.fn)
        if launches is None or any(not pow2(a.block) or a.block < 64 for a in launches):
            continue
        if not only_slot_zero_after(src, t.loop, t.fn, aliases(src, t.fn, t.step.array)):
            continue
        cond = t.loop.child_by_field_name("condition")
        ind = line_indent(src, t.loop.start_byte)
        a, th = t.step.array, t.thread
        lines = [f"if ({th} < 32) {{", f"    auto v = {a}[{th}];"]
        for k in (32, 16, 8, 4, 2, 1):
            lines += [f"    v += {a}[{th} + {k}];", "    __syncwarp();", f"    {a}[{th}] = v;", "    __syncwarp();"]
        lines.append("}")
        tail = "\n" + "\n".join(ind + ln for ln in lines)
        start, end = cond.start_byte, t.loop.end_byte
        text = splice_range(src, start, end, [Edit(cond.start_byte, cond.end_byte, f"{t.var} > 32")]) + tail
        f = src.function_at(t.loop.start_byte)
        per.append((f.name if f else "", [Edit(start, end, text)], ctext(src, t.loop)[:160]))
    return per_kernel_and_all(src, "unroll_last_warp", per, "the last warp's six levels without block barriers")


PAIR = Pair(WarpTailToLoop, (Rewrite("unroll_last_warp", "unrolled_last_warp", unroll_last_warp, prior=1.8),))
