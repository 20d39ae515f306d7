"""block_reduce_to_warp_atomics: a block reduction that only feeds one global atomic - warp totals
written to shared memory by lane 0, a barrier, one warp folding them and publishing the result
with `atomicAdd` - becomes one `atomicAdd` per warp:

    if (lane == 0) warp_totals[warp] = sum;                 if (lane == 0) atomicAdd(y, sum);
    __syncthreads();                                   ->
    if (warp == 0) { sum = ...warp_totals[lane]...;
                     sum = warp_sum(sum);
                     if (lane == 0) atomicAdd(y, sum); }

and the shared array's declaration goes. Why it is sound: the folding warp adds up exactly the
values the lanes 0 wrote (the shared array has no other use) and adds that sum to the global
target; adding each warp total to the target directly gives the same sum (float addition in
another order: the gate's tolerance judges the rounding). Sites need that shape: the guarded
shared store, `__syncthreads()`, then an `if` block that reads only the shared array and locals,
calls nothing but device functions of this file, and ends with the one `atomicAdd` on global
memory; the three statements are consecutive.

Forward: `warp_per_row` (shuffle_to_shared.py) undoes this step: the row's partial sums are
all-reduced across a warp with shuffles again instead of one atomic per warp.
"""
from __future__ import annotations

import re
from typing import Optional

from corpora.code.nodes import call_name, same
from corpora.code.source import Source
from mining.carriers import block_reduce_shared_sites
from mining.operators.base import Edit, Operator, Pair
from mining.operators.rewrite_util import splice_range, structural
from corpora.code.parse import text, walk


class BlockReduceToWarpAtomics(Operator):
    name = "block_reduce_to_warp_atomics"
    carrier = "block_reduce_shared"
    description = "publish each warp's total with its own atomic instead of folding warps in shared memory"

    def edits(self, src: Source):
        st = structural(src)
        for site in block_reduce_shared_sites(src):
            e = self.rewrite(st, site.start_byte)
            if e is not None:
                yield e

    def rewrite(self, src: Source, at: int) -> Optional[Edit]:
        s1 = next((n for n in walk(src.tree.root_node) if n.type == "if_statement" and n.start_byte == at), None)
        if s1 is None or s1.parent is None or s1.parent.type != "compound_statement":
            return None
        cons = s1.child_by_field_name("consequence")
        if s1.child_by_field_name("alternative") is not None:
            return None
        m = re.fullmatch(r"\{?\s*(\w+)\s*\[\s*(\w+)\s*\]\s*=\s*([^;=]+?)\s*;\s*\}?",
                         " ".join(text(cons).split()))
        if m is None:
            return None
        shared, value = m.group(1), m.group(3)
        if shared not in src.shared_names or not re.fullmatch(r"[\w.]+", value):
            return None
        sibs = list(s1.parent.named_children)
        k = next(i for i, c in enumerate(sibs) if same(c, s1))
        if k + 2 >= len(sibs):
            return None
        s2, s3 = sibs[k + 1], sibs[k + 2]
        if not re.fullmatch(r"__syncthreads\s*\(\s*\)\s*;", text(s2).strip()) or s3.type != "if_statement" or \
                s3.child_by_field_name("alternative") is not None:
            return None
        block = s3.child_by_field_name("consequence")
        if block is None or block.type != "compound_statement" or not block.named_children:
            return None
        last = block.named_children[-1]
        atomic = [c for c in walk(last) if c.type == "call_expression" and call_name(c) == "atomicAdd"]
        if len(atomic) != 1:
            return None
        args = atomic[0].child_by_field_name("arguments").named_children
        if len(args) != 2:
            return None
        target = " ".join(text(args[0]).split())
        f = src.function_at(s1.start_byte)
        if f is None or re.match(r"\s*&?\s*\(?\s*(\w+)", target).group(1) not in src.global_names(f):
            return None
        device = {g.name for g in src.funcs if not g.is_kernel}
        for c in walk(block):
            if c.type == "call_expression" and not same(c, atomic[0]) and call_name(c) not in device:
                return None
            if c.type == "assignment_expression":
                lhs = c.child_by_field_name("left")
                if lhs.type != "identifier":
                    return None
        # the shared array: used only by the store and the folding block
        fn = src.func_node(f)
        uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == shared]
        decl = src.shared_names[shared]
        inside = [n for n in uses if not (decl.start_byte <= n.start_byte < decl.end_byte)]
        if not all(s1.start_byte <= n.start_byte < s1.end_byte or block.start_byte <= n.start_byte < block.end_byte
                   for n in inside):
            return None
        cond = text(s1.child_by_field_name("condition"))
        subs = [Edit(s1.start_byte, s3.end_byte, f"if {cond} atomicAdd({target}, {value});")]
        declarators = [d for d in decl.named_children if d.type in ("array_declarator", "identifier")]
        if len(declarators) == 1:
            ds, de = src.line_span(decl.start_byte, decl.end_byte)
            if de <= s1.start_byte:
                subs.append(Edit(ds, de, ""))
        subs.sort()
        lo, hi = subs[0][0], max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))


PAIR = Pair(BlockReduceToWarpAtomics, inverted_by=("warp_per_row",))
