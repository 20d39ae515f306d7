"""warp_atomic_to_thread_atomics: a warp sum whose only consumer is one lane's `atomicAdd` is
dropped; every lane adds its own value:

    sum = warp_sum(sum);                      atomicAdd(y, sum);
    if (lane == 0) atomicAdd(y, sum);    ->

Why it is sound: lane 0's warp sum is the sum of the lanes' values, so adding each lane's value to
the target gives the same total (in another order: the gate's tolerance judges the rounding). The
warp sum must be a device function of this file that adds up a value across the warp (its body
adds, `+=` / `+`, values obtained by warp shuffles or through a shared exchange), assigned back to
the same variable that the guarded `atomicAdd` then publishes, in two consecutive statements; the
guard must be a lane-0 test.

Forward: `privatize_atomics` (privatized_to_global_atomics.py) and `warp_per_row`
(shuffle_to_shared.py), in that order: per-thread global atomics are gathered per block again,
through a shared copy or a warp all-reduce.

Any other block or warp sum that only feeds one thread's `atomicAdd` (helpers, shared partials,
barriers, a folding warp) is dropped the same way by `reduce_then_publish.py`: the same
optimization, so the same skill.
"""
from __future__ import annotations

import re
from typing import Optional

from corpora.code.source import Source
from mining.carriers import atomic_per_block_sites
from mining.operators.base import Edit, Operator, Pair
from corpora.code.nodes import same
from mining.operators.reduce_then_publish import publish_edits
from mining.operators.rewrite_util import node_at, structural
from corpora.code.parse import text


_LANE0 = re.compile(r"\(\s*\(?\s*(?:\w*lane\w*|threadIdx\.x\s*(?:&\s*31|%\s*32)|tid\s*(?:&\s*31|%\s*32))\s*\)?\s*==\s*0\s*\)")


def _warp_sums(src: Source) -> set[str]:
    out = set()
    for f in src.funcs:
        if f.is_kernel or len(f.params) != 1:
            continue
        code = src.func_code(f).decode("utf-8", "replace")
        if re.search(r"\+=|\+", code) and re.search(r"__shfl_(xor|down)(_sync)?\s*\(|\bks_xchg_\w+\s*\[", code) and \
                not re.search(r"\b(max|min)\w*\s*\(", code):
            out.add(f.name)
    return out


class WarpAtomicToThreadAtomics(Operator):
    name = "warp_atomic_to_thread_atomics"
    carrier = "atomic_per_block"
    description = "every lane publishes its own value instead of one atomic per warp after a warp sum"

    def edits(self, src: Source):
        sums = _warp_sums(src)
        st = structural(src)
        own = []
        for site in atomic_per_block_sites(src):
            call = node_at(st, site.start_byte, site.end_byte, "call_expression")
            e = self.rewrite(st, call, sums) if call is not None else None
            if e is not None:
                own.append(e)
                yield e
        # any block or warp sum feeding one thread's atomic, however it is computed (issue 19)
        for e in publish_edits(src):
            if not any(o.start < e.end and e.start < o.end for o in own):
                yield e

    def rewrite(self, src: Source, call, sums) -> Optional[Edit]:
        stmt = call.parent  # expression_statement
        guard = stmt.parent if stmt is not None else None
        if guard is None or guard.type != "if_statement" or guard.child_by_field_name("alternative") is not None:
            return None
        if not _LANE0.fullmatch(" ".join(text(guard.child_by_field_name("condition")).split())):
            return None
        args = call.child_by_field_name("arguments").named_children
        if len(args) != 2 or args[1].type != "identifier":
            return None
        v = text(args[1])
        parent = guard.parent
        if parent is None or parent.type != "compound_statement":
            return None
        sibs = list(parent.named_children)
        k = next(i for i, c in enumerate(sibs) if same(c, guard))
        if k == 0:
            return None
        prev = sibs[k - 1]
        m = re.fullmatch(r"%s\s*=\s*(\w+)\s*\(\s*%s\s*\)\s*;" % (re.escape(v), re.escape(v)),
                         " ".join(text(prev).split()))
        if m is None or m.group(1) not in sums:
            return None
        return Edit(prev.start_byte, guard.end_byte, text(stmt))


PAIR = Pair(WarpAtomicToThreadAtomics, inverted_by=("privatize_atomics", "warp_per_row"))
