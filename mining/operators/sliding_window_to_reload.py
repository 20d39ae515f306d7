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

Forward, `slide_register_window`: the reverse. A loop `for (int k = 0; ...; ++k)` whose body starts
with n + 1 calls of one device function that differ only in the destination (distinct local
arrays of one constant extent W) and in one argument, the row `X + k`, `X + k + 1`, ..., `X + k +
n`, loads rows 0..n-1 of the window before the loop instead (`X`, `X + 1`, ...), keeps only the
last call in the loop, and shifts the window at the end of the body (`for (int q = 0; q < W; ++q)
{ w0[q] = w1[q]; ... }`). Why it is sound: by induction the window holds rows X + k .. X + k +
n - 1 at the start of iteration k, what the deleted calls loaded, provided (checked) the rest of the
body neither writes the window arrays nor passes them anywhere, stores nothing to shared memory
and nothing through a pointer the calls read from (their pointer roots), does not assign X or the
calls' other arguments (which do not mention k), and leaves every iteration through its end (no
`break`, `continue`, `return`); the callee is a device function of the file that writes nothing
but its destination parameter and its own locals; the window arrays are read nowhere outside the
loop (they end one row further along).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name, same
from corpora.code.source import Source
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, candidate
from mining.carriers import pointer_roots
from mining.operators.nodes import FunctionIndex, int_value, kernels, norm
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


# --------------------------------------------------------------------------- forward
def _writes_only(src: Source, fname: str, dest: int) -> bool:
    """The device function `fname` writes nothing but its parameter number `dest` and its own locals."""
    for f in src.funcs:
        if f.name != fname or f.is_kernel:
            continue
        fn = src.func_node(f)
        if fn is None or dest >= len(f.params):
            return False
        idx = FunctionIndex(src, fn)
        for n in walk(fn):
            if n.type not in ("assignment_expression", "update_expression"):
                continue
            t = n.child_by_field_name("left") if n.type == "assignment_expression" else n.child_by_field_name("argument")
            while t is not None and t.type in ("subscript_expression", "field_expression", "parenthesized_expression",
                                               "pointer_expression"):
                t = t.named_children[0] if t.type in ("parenthesized_expression", "pointer_expression") else \
                    t.child_by_field_name("argument")
            if t is None or t.type != "identifier":
                return False
            v = idx.visible(text(t), t.start_byte)
            if v is None or (v.kind == "param" and text(t) != f.params[dest].name) or \
                    (v.kind != "param" and v.shape != "scalar" and v.shape != "array"):
                return False
        return True
    return False


def slide_register_window(source: str, ctx: Context) -> list[Materialization]:
    """Every row of a window loaded in each iteration -> a window preloaded and shifted (see the
    module docstring)."""
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        f = src.function_at(k.node.start_byte)
        idx = FunctionIndex(src, k.node)
        for loop in walk(k.body):
            if loop.type == "for_statement" and (m := _slide(src, f, k.node, idx, loop)) is not None:
                out.append(m)
    return out


def _slide(src: Source, f, fn: Node, idx: FunctionIndex, loop: Node) -> Optional[Materialization]:
    body = loop.child_by_field_name("body")
    init, upd = loop.child_by_field_name("initializer"), loop.child_by_field_name("update")
    if body is None or body.type != "compound_statement" or loop.parent is None or \
            loop.parent.type != "compound_statement" or init is None or upd is None:
        return None
    m = re.fullmatch(r"(?:const\s+)?int\s+(\w+)\s*=\s*0\s*;?", " ".join(text(init).split()))
    if m is None or norm(text(upd)) not in (f"++ {m.group(1)}", f"{m.group(1)} ++", f"{m.group(1)} += 1"):
        return None
    k = m.group(1)
    stmts = [c for c in body.named_children if c.type != "comment"]
    calls = []
    for st in stmts:
        parts = _call_parts(st)
        if parts is None or (calls and (parts[0] != calls[0][1][0] or len(parts[1]) != len(calls[0][1][1]))):
            break
        calls.append((st, parts))
    if len(calls) < 2:
        return None
    fname, args0 = calls[0][1]
    # the destination and the row: the only two arguments that differ
    diff = sorted({p for _, (_, a) in calls[1:] for p in range(len(a)) if a[p] != args0[p]})
    if len(diff) != 2:
        return None
    dests = [[a for _, (_, a) in calls][j] for j in range(len(calls))]
    dpos = next((p for p in diff if all(re.fullmatch(r"\w+", d[p]) for d in dests) and
                 len({d[p] for d in dests}) == len(dests)), None)
    if dpos is None:
        return None
    rpos = next(p for p in diff if p != dpos)
    window = [d[dpos] for d in dests]
    rows = [d[rpos] for d in dests]
    mb = re.fullmatch(r"(.+) \+ %s|%s \+ (.+)" % (k, k), rows[0])
    if mb is None:
        return None
    base = mb.group(1) or mb.group(2)
    if any(rows[j] != norm(f"{rows[0]} + {j}") for j in range(1, len(rows))):
        return None
    if any(re.search(r"\b%s\b" % k, a) for p, a in enumerate(args0) if p not in (dpos, rpos)) or \
            re.search(r"\b%s\b" % k, base) or not _writes_only(src, fname, dpos):
        return None
    # the window: local 1-D arrays of one constant extent, used nowhere outside the loop
    extent = None
    for w in window:
        v = idx.visible(w, loop.start_byte)
        if v is None or v.kind != "local" or v.shape != "array" or v.decl.start_byte >= loop.start_byte:
            return None
        d = v.declarator
        size = d.child_by_field_name("size") if d.type == "array_declarator" else None
        if size is None or d.child_by_field_name("declarator").type != "identifier" or int_value(src, text(size)) is None:
            return None
        if extent not in (None, norm(text(size))):
            return None
        extent = norm(text(size))
        if any(n.type == "identifier" and text(n) == w and idx.visible(w, n.start_byte) is v and
               not (loop.start_byte <= n.start_byte < loop.end_byte) and not (d.start_byte <= n.start_byte < d.end_byte)
               for n in walk(fn)):
            return None
    # the rest of the body: no window write or escape, no shared store, no store the calls read, no exit
    rest = stmts[len(calls):]
    roots = pointer_roots(src, f)
    read_roots = set().union(*[roots.get(a, set()) for a in args0]) if args0 else set()
    fixed = {n for p, a in enumerate(args0) if p not in (dpos, rpos) for n in re.findall(r"[A-Za-z_]\w*", a)}
    fixed |= set(re.findall(r"[A-Za-z_]\w*", base))
    for st in rest:
        for a in walk(st):
            if a.type in ("break_statement", "continue_statement", "return_statement", "goto_statement"):
                return None
            if a.type in ("assignment_expression", "update_expression"):
                lhs = a.child_by_field_name("left") if a.type == "assignment_expression" else a.child_by_field_name("argument")
                names = {text(n) for n in walk(lhs) if n.type == "identifier"}
                root = re.match(r"\s*\(?\s*\*?\s*(\w+)", text(lhs))
                r = root.group(1) if root else ""
                if r in window or r in src.shared_names or r in fixed or names & fixed or \
                        roots.get(r, set()) & read_roots:
                    return None
            if a.type == "call_expression" and a.child_by_field_name("arguments") is not None and \
                    any(norm(text(x)) in window for x in a.child_by_field_name("arguments").named_children):
                return None
    for nm in fixed:
        v = idx.visible(nm, loop.start_byte)
        if v is not None and any(loop.start_byte <= a.start_byte < loop.end_byte for a in v.assigned):
            return None
    # the rewrite
    edits = []
    at = pragma_before(src, loop.start_byte) or loop.start_byte
    a0 = src.raw.rfind(b"\n", 0, at) + 1
    if src.code[a0:at].strip():
        return None
    ind = line_indent(src, loop.start_byte)
    pre = []
    for j, (st, _) in enumerate(calls[:-1]):
        call = st.named_children[0]
        rnode = call.child_by_field_name("arguments").named_children[rpos]
        row = base if j == 0 else f"{base} + {j}"
        pre.append(ind + splice_range(src, st.start_byte, st.end_byte, [Edit(rnode.start_byte, rnode.end_byte, row)]))
        edits.append(Edit(*src.line_span(st.start_byte, st.end_byte), ""))
    edits.append(Edit(a0, a0, "\n".join(pre) + "\n"))
    q = "ks_q"
    while re.search(rb"\b%s\b" % q.encode(), src.code[fn.start_byte:fn.end_byte]):
        q += "_"
    bind = line_indent(src, stmts[0].start_byte)
    shift = " ".join(f"{window[j]}[{q}] = {window[j + 1]}[{q}];" for j in range(len(window) - 1))
    close = body.end_byte - 1
    lb = src.raw.rfind(b"\n", 0, close) + 1
    if src.code[lb:close].strip():
        return None
    edits.append(Edit(lb, lb, f"{bind}// the window moves one row down\n"
                              f"{bind}for (int {q} = 0; {q} < {extent}; ++{q}) {{ {shift} }}\n"))
    return candidate(src, edits, "slide_register_window",
                     f"{', '.join(window)}: rows {base} + {k} .. + {len(window) - 1} kept in a register window that "
                     f"slides one row per iteration (one load per iteration instead of {len(window)})",
                     excerpt=" ".join(text(calls[0][0]).split()))


PAIR = Pair(SlidingWindowToReload, (Rewrite("slide_register_window", "register_tile", slide_register_window, prior=1.5),))
