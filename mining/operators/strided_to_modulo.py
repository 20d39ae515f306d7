"""strided_to_modulo: interleaved addressing by a strided index (thread T works on slot
index = 2 * s * T, the active threads contiguous: Harris's kernel 2, the CUDA samples' reduce1)
goes back to the divergent modulo test (every (2s)-th thread is active: kernel 1, reduce0):

    unsigned int index = 2 * s * tid;                      (deleted)
    if (index < blockDim.x) STEP(index, s);         ->     if ((tid % (2 * s)) == 0) STEP(tid, s);

Why it is exact: with D = blockDim.x threads, the strided form updates the slots 2sk for the
threads k with 2sk < D; the modulo form updates the slots t with t % 2s == 0, t < D, which is the
same set {0, 2s, 4s, ...} below D, each with the same step on the same operands (slot j and slot
j + s) at the same level, so every value is bit-identical whatever the step or the operator.
Sites need the bound of the index test to be blockDim.x (the thread count: the modulo form has one
candidate thread per slot), the index declared in the loop body, used only as the step's slot (the
step written in terms of the index and s), and not used after the loop.

Forward, `divergence_free_indexing`: the modulo test becomes the strided index (the same argument).
"""
from __future__ import annotations

import re

from corpora.code.source import Source
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, per_kernel_and_all
from mining.operators.reduction_tree import fresh, tree_loops
from mining.operators.rewrite_util import ctext, line_indent, splice_range


def _block_bound(t) -> bool:
    return re.fullmatch(r"blockDim\s*\.\s*x", t.bound) is not None


class StridedToModulo(Operator):
    name = "strided_to_modulo"
    carrier = "divergence_free_indexing"
    description = "select the active threads of a shared-memory tree level by tid % (2*s) == 0 instead of a strided index"

    def edits(self, src: Source):
        for t in tree_loops(src):
            if t.kind != "strided" or not _block_bound(t):
                continue
            body = t.loop.child_by_field_name("body")
            ds, de = src.line_span(t.index_decl.start_byte, t.index_decl.end_byte)
            if ds <= body.start_byte or de >= body.end_byte:
                ds, de = t.index_decl.start_byte, t.index_decl.end_byte
            cond = t.guard.child_by_field_name("condition")
            cons = t.guard.child_by_field_name("consequence")
            step_text = ctext(src, cons)
            new_step = re.sub(r"\b%s\b" % re.escape(t.index), t.thread, step_text)
            subs = [Edit(ds, de, ""), Edit(cond.start_byte, cond.end_byte, f"(({t.thread} % (2 * {t.var})) == 0)"),
                    Edit(cons.start_byte, cons.end_byte, new_step)]
            yield Edit(body.start_byte, body.end_byte, splice_range(src, body.start_byte, body.end_byte, subs))


# --------------------------------------------------------------------------- forward half
def divergence_free_indexing(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    per = []
    for t in tree_loops(src):
        if t.kind != "modulo" or not _block_bound(t):
            continue
        body = t.loop.child_by_field_name("body")
        index = fresh(src, t.fn, "index")
        ind = line_indent(src, t.guard.start_byte)
        cond = t.guard.child_by_field_name("condition")
        cons = t.guard.child_by_field_name("consequence")
        step_text = ctext(src, cons)
        th = re.escape(t.thread.strip())
        new_step = re.sub(r"(?<![\w.])%s(?![\w(])" % th, index, step_text)
        subs = [Edit(t.guard.start_byte, t.guard.start_byte, f"unsigned int {index} = 2 * {t.var} * {t.thread};\n{ind}"),
                Edit(cond.start_byte, cond.end_byte, f"({index} < {t.bound})"),
                Edit(cons.start_byte, cons.end_byte, new_step)]
        f = src.function_at(t.loop.start_byte)
        per.append((f.name if f else "", [Edit(body.start_byte, body.end_byte,
                                               splice_range(src, body.start_byte, body.end_byte, subs))],
                    ctext(src, t.guard)[:160]))
    return per_kernel_and_all(src, "divergence_free_indexing", per,
                              "contiguous active threads by a strided index instead of a modulo test")


PAIR = Pair(StridedToModulo, (Rewrite("divergence_free_indexing", "divergence_free_indexing",
                                      divergence_free_indexing, prior=2.33),))
