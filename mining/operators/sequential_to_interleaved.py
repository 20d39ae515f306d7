"""sequential_to_interleaved: a shared-memory tree with sequential addressing (the stride halves
from blockDim.x / 2, thread T adds slot T + s into slot T: contiguous active threads, no bank
conflicts; Harris's kernel 3, the CUDA samples' reduce2) goes back to interleaved addressing by a
strided index (the stride doubles from 1, thread T works on slot 2 * s * T; kernel 2, reduce1):

    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {      for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        if (tid < s) sdata[tid] += sdata[tid + s];           ->      unsigned int index = 2 * s * tid;
        SYNC;                                                         if (index < blockDim.x) sdata[index] += sdata[index + s];
    }                                                                 SYNC;
                                                                  }

Why it is sound: with a power-of-two block of D threads both loops combine all D slots into slot 0
with the same step, along two different trees (sequential: slot i meets slot i + D/2 first;
interleaved: neighbours meet first). For `+` over integers and for `max` / `min` the result is
identical; a float sum changes its rounding order (each tree adds every element once; the gate's
tolerance decides, as for the other reductions' rewrites). The other slots end differently, so
after the loop the function may read only slot 0 and write the array nowhere (checked), and every
launch of the kernel must have a constant power-of-two block (checked: with any other size the two
trees drop different elements). Steps accepted: `A[T] += A[T + s]`, `A[T] = A[T] + A[T + s]` and
`A[T] = max/min/fmaxf/fminf(A[T], A[T + s])`, and the register-carrying `A[T] = v = v + A[T + s]`
(the CUDA samples' reduce3..6: the thread's running value v beside its slot, set by `A[T] = v;
SYNC` before the loop) where v is read after the loop only under `if (T == 0)` and the array not
at all: there v is slot 0's value, so those reads become `A[0]` and the loop adds slots only
(interleaved, the thread that writes a slot is not its owner). A loop that stops above 0 is
refused (a warp tail follows: warp_tail_to_loop folds it first).

Forward, `sequential_addressing`: the interleaved loop with its strided index becomes the
sequential one, under the same conditions.
"""
from __future__ import annotations

import re

from corpora.code.source import Source
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, per_kernel_and_all
from mining.operators.reduction_tree import (aliases, before, fresh, is_sync, kernel_launches,
                                             only_slot_zero_after, pow2, thread_zero_reads_only, tree_loops, value_of)
from mining.operators.rewrite_util import ctext, line_indent, splice_range


def _power_of_two_blocks(src: Source, t) -> bool:
    launches = kernel_launches(src, t.fn)
    return launches is not None and all(pow2(a.block) and value_of(src, t.bound, a) == a.block for a in launches)


def _steppable(t) -> bool:
    return t.step.op in ("+", "max", "min", "fmaxf", "fminf", "fmax", "fmin")


class SequentialToInterleaved(Operator):
    name = "sequential_to_interleaved"
    carrier = "sequential_addressing"
    description = "reduce a shared-memory tree with interleaved addressing (stride doubling from 1) instead of sequential"

    def edits(self, src: Source):
        for t in tree_loops(src):
            if t.kind != "sequential" or t.low != 0 or not _power_of_two_blocks(src, t):
                continue
            names = aliases(src, t.fn, t.step.array)
            reads: list = []
            if t.step.op == "chain":
                reads = self._running_value_reads(src, t, names)
                if reads is None:
                    continue
            elif not _steppable(t) or not only_slot_zero_after(src, t.loop, t.fn, names):
                continue
            var, index = t.var, fresh(src, t.fn, "index")
            ind = line_indent(src, t.loop.start_byte)
            decl = t.decl or "unsigned int"
            form = t.step.form if t.step.op != "chain" else t.step.array + "[{at}] += " + t.step.array + "[{at} + {stride}];"
            step = form.format(at=index, stride=var)
            sync = ctext(src, t.sync)
            text = (f"for ({decl} {var} = 1; {var} < {t.bound}; {var} *= 2) {{\n"
                    f"{ind}    unsigned int {index} = 2 * {var} * {t.thread};\n"
                    f"{ind}    if ({index} < {t.bound}) {{\n{ind}        {step}\n{ind}    }}\n"
                    f"{ind}    {sync}\n{ind}}}")
            if not reads:
                yield Edit(t.loop.start_byte, t.loop.end_byte, text)
                continue
            subs = [Edit(t.loop.start_byte, t.loop.end_byte, text)] + \
                [Edit(n.start_byte, n.end_byte, f"{t.step.array}[0]") for n in reads]
            end = max(n.end_byte for n in reads)
            yield Edit(t.loop.start_byte, end, splice_range(src, t.loop.start_byte, end, subs))

    @staticmethod
    def _running_value_reads(src: Source, t, names: set[str]):
        """The register-carrying step `A[T] = V = V + A[T + s]` (the thread's running value V beside
        its slot, set by `A[T] = V; SYNC` before the loop): the reads of V after the loop, all under
        `if (T == 0)` (there V is slot 0's value), else None."""
        prev = before(t.loop)
        v = t.step.value
        if len(prev) < 2 or not is_sync(src, prev[-1]) or re.fullmatch(
                r"(\w+)\s*\[\s*%s\s*\]\s*=\s*%s\s*;" % (re.escape(t.thread), re.escape(v)), ctext(src, prev[-2])) is None:
            return None
        if thread_zero_reads_only(src, t.loop, t.fn, v, names) is None:
            return None
        body = t.fn.child_by_field_name("body")
        return [n for n in src.nodes("identifier", within=body)
                if n.start_byte >= t.loop.end_byte and src.code[n.start_byte:n.end_byte].decode() == v]


# --------------------------------------------------------------------------- forward half
def sequential_addressing(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    per = []
    for t in tree_loops(src):
        if t.kind != "strided" or not _steppable(t) or not _power_of_two_blocks(src, t) or \
                not re.fullmatch(r"blockDim\s*\.\s*x", t.bound):
            continue
        if not only_slot_zero_after(src, t.loop, t.fn, aliases(src, t.fn, t.step.array)):
            continue
        ind = line_indent(src, t.loop.start_byte)
        decl = t.decl or "unsigned int"
        step = t.step.form.format(at=t.thread, stride=t.var)
        v = t.var
        text = (f"for ({decl} {v} = {t.bound} / 2; {v} > 0; {v} >>= 1) {{\n"
                f"{ind}    if ({t.thread} < {v}) {{\n{ind}        {step}\n{ind}    }}\n"
                f"{ind}    {ctext(src, t.sync)}\n{ind}}}")
        f = src.function_at(t.loop.start_byte)
        per.append((f.name if f else "", [Edit(t.loop.start_byte, t.loop.end_byte, text)], ctext(src, t.loop)[:160]))
    return per_kernel_and_all(src, "sequential_addressing", per,
                              "sequential addressing: contiguous active threads, no shared bank conflicts")


PAIR = Pair(SequentialToInterleaved, (Rewrite("sequential_addressing", "sequential_addressing", sequential_addressing,
                                              prior=2.01),))
