"""sliding_window_to_reload: a sliding register window (rows kept in registers and shifted by one
each iteration) becomes fresh loads of every row in every iteration.

    load_row(tile, r0, tx, lane, a);                    for (int k = 0; k < RPT; ++k) {
    load_row(tile, r0 + 1, tx, lane, b);                    load_row(tile, r0 + k, tx, lane, a);
    for (int k = 0; k < RPT; ++k) {                 ->      load_row(tile, r0 + k + 1, tx, lane, b);
        load_row(tile, r0 + k + 2, tx, lane, cc);           load_row(tile, r0 + k + 2, tx, lane, cc);
        ... uses a, b, cc ...                               ... uses a, b, cc ...
        for (q...) { a[q] = b[q]; b[q] = cc[q]; }       }
    }

Why it is sound: by induction, at iteration k the window holds rows X + k, X + k + 1, ..., which
is what the new loads read, from data the loop does not change. Sites need exactly that shape:
n preload statements before the loop that are the same call except for the row (`X`, `X + 1`,
...) and the destination array, the loop's first statement the same call for row `X + k + n`
into the last array, its last statement the shift `w0[q] = w1[q]; w1[q] = w2[q]; ...`, no other
write to the window arrays in the loop, a loop-invariant `X`, and no store to shared memory in the
loop body (so the rows read are the rows the preloads read). Removes the sliding-window form of
register_tile.

Forward: none yet. No deterministic rewrite introduces this carrier; `skills optimize` applies
this operator's skills through the LLM materializer only (the pair's forward half is empty).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name, same
from corpora.code.source import Source
from mining.operators.base import Edit, Operator, Pair
from mining.operators.nodes import FunctionIndex, norm
from mining.operators.rewrite_util import line_indent, pragma_before, splice_range, structural
from corpora.code.parse import text, walk


_SHIFT = re.compile(r"(\w+)\s*\[\s*(\w+)\s*\]\s*=\s*(\w+)\s*\[\s*\2\s*\]\s*;")


def _call_parts(stmt: Node) -> Optional[tuple[str, list[str]]]:
    if stmt.type != "expression_statement" or not stmt.named_children or \
            stmt.named_children[0].type != "call_expression":
        return None
    call = stmt.named_children[0]
    args = call.child_by_field_name("arguments")
    return call_name(call), [norm(text(a)) for a in args.named_children]


class SlidingWindowToReload(Operator):
    name = "sliding_window_to_reload"
    carrier = "register_tile"
    description = "load every row of a sliding register window in each iteration instead of shifting it"

    def edits(self, src: Source):
        st = structural(src)
        for loop in walk(st.tree.root_node):
            if loop.type == "for_statement":
                e = self.rewrite(st, loop)
                if e is not None:
                    yield e

    def rewrite(self, src: Source, loop: Node) -> Optional[Edit]:
        body = loop.child_by_field_name("body")
        if body is None or body.type != "compound_statement" or loop.parent is None or \
                loop.parent.type != "compound_statement":
            return None
        stmts = list(body.named_children)
        if len(stmts) < 3:
            return None
        # the shift: for (q...) { w0[q] = w1[q]; w1[q] = w2[q]; ... }
        last = stmts[-1]
        if last.type != "for_statement":
            return None
        shift_body = last.child_by_field_name("body")
        pairs = _SHIFT.findall(" ".join(text(shift_body).split()))
        if not pairs or not re.fullmatch(r"\{?\s*(\w+\s*\[\s*\w+\s*\]\s*=\s*\w+\s*\[\s*\w+\s*\]\s*;\s*)+\}?",
                                         " ".join(text(shift_body).split())):
            return None
        window = [pairs[0][0]] + [p[2] for p in pairs]
        if any(pairs[i][0] != window[i] for i in range(len(pairs))) or len(set(window)) != len(window):
            return None
        n = len(window) - 1  # rows preloaded before the loop
        init = loop.child_by_field_name("initializer")
        m = re.fullmatch(r"(?:const\s+)?int\s+(\w+)\s*=\s*0\s*;?", " ".join(text(init).split())) if init else None
        upd = loop.child_by_field_name("update")
        if m is None or upd is None or not re.fullmatch(r"\+\+\s*%s|%s\s*\+\+|%s\s*\+=\s*1" % ((m.group(1),) * 3),
                                                        " ".join(text(upd).split())):
            return None
        k = m.group(1)
        first = _call_parts(stmts[0])
        if first is None or not first[1]:
            return None
        fname, fargs = first
        if window[-1] not in fargs:
            return None
        dest = fargs.index(window[-1])
        # the preloads: the n statements right before the loop
        sibs = list(loop.parent.named_children)
        i = next(j for j, c in enumerate(sibs) if same(c, loop))
        if i < n:
            return None
        pre = sibs[i - n:i]
        row_pos = None
        base = None
        for j, s in enumerate(pre):
            parts = _call_parts(s)
            if parts is None or parts[0] != fname or len(parts[1]) != len(fargs) or parts[1][dest] != window[j]:
                return None
            diff = [p for p in range(len(fargs)) if p != dest and parts[1][p] != fargs[p]]
            if len(diff) != 1 or (row_pos is not None and diff[0] != row_pos):
                return None
            row_pos = diff[0]
            row = parts[1][row_pos]
            if j == 0:
                base = row
            elif row != norm(f"{base} + {j}"):
                return None
        if base is None or fargs[row_pos] != norm(f"{base} + {k} + {n}"):
            return None
        # the window is written only by the loads and the shift; no shared stores; X loop-invariant
        fn = loop
        while fn is not None and fn.type != "function_definition":
            fn = fn.parent
        if fn is None:
            return None
        idx = FunctionIndex(src, fn)
        for ident in re.findall(r"[A-Za-z_]\w*", base):
            v = idx.visible(ident, loop.start_byte)
            if v is not None and any(loop.start_byte <= a.start_byte < loop.end_byte for a in v.assigned):
                return None
        shared = set(src.shared_names)
        for s in stmts[1:-1]:
            for a in walk(s):
                if a.type in ("assignment_expression", "update_expression"):
                    lhs = a.child_by_field_name("left") if a.type == "assignment_expression" else \
                        a.child_by_field_name("argument")
                    root = re.match(r"\s*\(?\s*\*?\s*(\w+)", text(lhs))
                    if root and (root.group(1) in window or root.group(1) in shared):
                        return None
                if a.type == "call_expression" and any(norm(text(x)) in window for x in
                                                       (a.child_by_field_name("arguments").named_children
                                                        if a.child_by_field_name("arguments") else [])):
                    return None
        # the rewrite
        row_node = stmts[0].named_children[0].child_by_field_name("arguments").named_children[row_pos]
        dst_node = stmts[0].named_children[0].child_by_field_name("arguments").named_children[dest]
        ind = line_indent(src, stmts[0].start_byte)
        loads = []
        for j, w in enumerate(window[:-1]):
            row = f"{base} + {k}" + (f" + {j}" if j else "")
            loads.append(splice_range(src, stmts[0].start_byte, stmts[0].end_byte,
                                      [Edit(row_node.start_byte, row_node.end_byte, row),
                                       Edit(dst_node.start_byte, dst_node.end_byte, w)]))
        subs = [Edit(stmts[0].start_byte, stmts[0].start_byte, "".join(ld + "\n" + ind for ld in loads))]
        pr = pragma_before(src, last.start_byte)
        subs.append(Edit(*src.line_span(pr if pr is not None else last.start_byte, last.end_byte), ""))
        for s in pre:
            subs.append(Edit(*src.line_span(s.start_byte, s.end_byte), ""))
        subs.sort()
        lo, hi = subs[0][0], max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))


PAIR = Pair(SlidingWindowToReload)
