"""shrink_register_tile: halve the row extent of a per-thread register tile `acc[TM][TN]` by
computing the thread's outputs in passes.

The statements from the tile's declaration to its last use (the *region*: initialisation, main
loop, epilogue) are wrapped in `for (int ks_p_acc = 0; ks_p_acc < 2; ++ks_p_acc) { ... }`; the tile
is declared `acc[TM / 2][TN]`; every loop `for (int i = 0; i < TM; ++i)` whose variable indexes the
tile's rows runs over the pass's rows only, `for (int i = ks_p_acc * H; i < ks_p_acc * H + H; ++i)`
(H = TM / 2), and the tile is indexed `acc[i - ks_p_acc * H][j]`. Applied again, the pass count
doubles and H halves; when H reaches 1 the row dimension is dropped (`acc[TN]`), and the carrier is
gone. An odd TM is split into TM passes at once.

Why the thread still computes the same outputs: every use of the tile sits in a loop over its
rows, and everything such a loop does for row i (accumulate, rescale, store row i) is done in the
pass that owns row i, with the same inputs, because the whole region - loads, barriers, main loop
- runs again in every pass. Work that is not per-row (staging tiles, loading fragments) is simply
repeated. A `__syncthreads()` closes each pass when the region has barriers, so the next pass's
first shared-memory writes cannot overtake the previous pass's last reads. Not a site when the
region could not run twice: it returns, breaks or jumps out, uses atomics, or updates in place
(`+=`, `++`) a variable declared before it; or when some use of the tile is not indexed by such a
loop variable.

Forward: none yet. No deterministic rewrite introduces this carrier; `skills optimize` applies
this operator's skills through the LLM materializer only (the pair's forward half is empty).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.carriers import local_arrays, register_tile_sites
from mining.operators.base import Edit, Operator, Pair
from corpora.code.nodes import declarator_shape, same
from mining.operators.nodes import FunctionIndex, int_value, subscript_chain
from mining.operators.rewrite_util import line_indent, splice_range, structural
from corpora.code.parse import text, walk


_DECLARATORS = ("identifier", "init_declarator", "array_declarator", "pointer_declarator", "reference_declarator")


def _row_loop(src: Source, use: Node, var: str) -> Optional[Node]:
    p = use.parent
    while p is not None:
        if p.type == "for_statement":
            init = p.child_by_field_name("initializer")
            if init is not None and re.match(r"^\s*(const\s+)?(int|unsigned|size_t|long)\s+%s\s*=" % re.escape(var),
                                             text(init)):
                return p
        if p.type in ("function_definition", "lambda_expression"):
            return None
        p = p.parent
    return None


def _loop_shape(src: Source, loop: Node, var: str, pvar: str) -> Optional[tuple[str, int, int]]:
    """('plain', TM, 0) for `for (int i = 0; i < TM; ++i)`, ('pass', H, 0) for the pass form."""
    init = " ".join(text(loop.child_by_field_name("initializer")).split())
    cond = " ".join(text(loop.child_by_field_name("condition") or loop).split())
    upd = loop.child_by_field_name("update")
    u = " ".join(text(upd).split()) if upd is not None else ""
    v = re.escape(var)
    if not re.fullmatch(r"\+\+\s*%s|%s\s*\+\+|%s\s*\+=\s*1" % (v, v, v), u):
        return None
    m = re.fullmatch(r"(?:const\s+)?\w+\s+%s\s*=\s*0\s*;?" % v, init)
    c = re.fullmatch(r"%s\s*<\s*(.+)" % v, cond)
    if m and c:
        n = int_value(src, c.group(1))
        return ("plain", n, 0) if n else None
    p = re.escape(pvar)
    m = re.fullmatch(r"(?:const\s+)?\w+\s+%s\s*=\s*%s(?:\s*\*\s*(\d+))?\s*;?" % (v, p), init)
    c = re.fullmatch(r"%s\s*<\s*%s(?:\s*\*\s*(\d+))?\s*\+\s*(\d+)" % (v, p), cond)
    if m and c and (m.group(1) or "1") == (c.group(1) or "1") and (c.group(1) or "1") == c.group(2):
        return "pass", int(c.group(2)), 0
    return None


class RegisterTileOperator(Operator):
    """Base of the register-tile operators: `rewrite` is offered every 2-D local array that the
    register_tile detector flags."""
    carrier = "register_tile"

    def edits(self, src: Source):
        sites = {s.start_byte for s in register_tile_sites(src)}
        src = structural(src)
        for f in src.funcs:
            fn = src.func_node(f)
            if fn is None:
                continue
            for decl, name, ndims in local_arrays(src, f, 2):
                if decl.start_byte not in sites or ndims != 2:
                    continue
                e = self.rewrite(src, fn, decl, name)
                if e is not None:
                    yield e

    def rewrite(self, src: Source, fn: Node, decl: Node, name: str) -> Optional[Edit]:  # pragma: no cover - abstract
        raise NotImplementedError


class ShrinkRegisterTile(RegisterTileOperator):
    name = "shrink_register_tile"
    description = "halve a register tile's rows by computing the thread's outputs in two passes"

    def rewrite(self, src: Source, fn: Node, decl: Node, name: str) -> Optional[Edit]:
        idx = FunctionIndex(src, fn)
        var = next((v for v in idx.vars if v.name == name and same(v.decl, decl)), None)
        if var is None or var.value is not None:
            return None
        # the row extent
        d = var.declarator
        while d is not None and d.type == "array_declarator" and \
                d.child_by_field_name("declarator").type == "array_declarator":
            d = d.child_by_field_name("declarator")
        if d is None or d.type != "array_declarator":
            return None
        row_size = d.child_by_field_name("size")
        tm = int_value(src, text(row_size)) if row_size is not None else None
        if not tm or tm < 2:
            return None
        pvar = "ks_p_" + name
        body = decl.parent
        if body is None or body.type != "compound_statement":
            return None
        wrapper = body.parent if body.parent is not None and body.parent.type == "for_statement" else None
        wrapped = wrapper is not None and re.match(r"\s*int\s+%s\s*=\s*0\b" % re.escape(pvar),
                                                   text(wrapper.child_by_field_name("initializer") or wrapper))
        # uses: acc[i][...] with i a row loop variable
        uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == name and
                not (d.start_byte <= n.start_byte < d.end_byte) and idx.visible(name, n.start_byte) is var]
        loops: dict[tuple[int, int], tuple[Node, str, tuple]] = {}
        rows: list[tuple[Node, str]] = []
        for u in uses:
            outer, indices = subscript_chain(u)
            first = u.parent if u.parent is not None and u.parent.type == "subscript_expression" else None
            if first is None or not indices or indices[0] is None:
                return None
            i0 = indices[0]
            if i0.type == "identifier":
                iv = text(i0)
            elif wrapped and re.fullmatch(r"(\w+)\s*-\s*%s(\s*\*\s*\d+)?" % re.escape(pvar), text(i0)):
                iv = re.match(r"\w+", text(i0)).group(0)
            else:
                return None
            loop = _row_loop(src, u, iv)
            if loop is None:
                return None
            shape = _loop_shape(src, loop, iv, pvar)
            if shape is None:
                return None
            kind, n, _ = shape
            if (kind == "plain" and (wrapped or n != tm)) or (kind == "pass" and (not wrapped or n != tm)):
                return None
            loops[(loop.start_byte, loop.end_byte)] = (loop, iv, shape)
            rows.append((i0, iv))
        if not rows:
            return None
        for loop, _, _ in loops.values():
            if re.search(rb"\b(break|goto|atomic\w*)\b", src.code[loop.start_byte:loop.end_byte]):
                return None

        passes = 2 if tm % 2 == 0 else tm
        h = tm // passes
        subs: list[Edit] = []
        # declaration extent (the row dimension is dropped at 1)
        if h == 1:
            inner = d.child_by_field_name("declarator")
            subs.append(Edit(inner.end_byte, d.end_byte, ""))  # acc[TM][TN] -> acc[TN]
        else:
            subs.append(Edit(row_size.start_byte, row_size.end_byte, str(h)))

        def scale(k: int) -> str:
            return pvar if k == 1 else f"{pvar} * {k}"

        for loop, iv, _ in loops.values():
            init = loop.child_by_field_name("initializer")
            cond = loop.child_by_field_name("condition")
            t = text(init)
            m = re.match(r"(\s*(?:const\s+)?\w+\s+%s\s*=\s*)" % re.escape(iv), t)
            semi = ";" if t.rstrip().endswith(";") else ""
            subs.append(Edit(init.start_byte, init.end_byte, f"{m.group(1)}{scale(h)}{semi}"))
            subs.append(Edit(cond.start_byte, cond.end_byte, f"{iv} < {scale(h)} + {h}"))
        for i0, iv in rows:
            ind = i0.parent  # subscript_argument_list
            if h == 1:
                sub = ind.parent  # acc[i]
                arg = sub.child_by_field_name("argument")
                subs.append(Edit(arg.end_byte, sub.end_byte, ""))
            else:
                subs.append(Edit(i0.start_byte, i0.end_byte, f"{iv} - {scale(h)}"))
        if wrapped:
            cond = wrapper.child_by_field_name("condition")
            old = re.fullmatch(r"\s*%s\s*<\s*(\d+)\s*" % re.escape(pvar), text(cond))
            if old is None:
                return None
            subs.append(Edit(cond.start_byte, cond.end_byte, f"{pvar} < {int(old.group(1)) * passes}"))
            lo = min(wrapper.start_byte, min(s for s, _, _ in subs))
            hi = max(wrapper.end_byte, max(e for _, e, _ in subs))
            subs = _dedupe(subs)
            if subs is None:
                return None
            return Edit(lo, hi, splice_range(src, lo, hi, subs))

        span = repeatable_region(src, idx, body, decl, name)
        if span is None:
            return None
        start, end = span
        rcode = src.code[start:end]
        barrier = b"__syncthreads" in rcode
        a = src.raw.rfind(b"\n", 0, start) + 1
        if src.code[a:start].strip():
            return None
        b = src.raw.find(b"\n", end)
        b = len(src.raw) if b < 0 else b
        subs = _dedupe(subs)
        if subs is None or min(s for s, _, _ in subs) < a or max(e for _, e, _ in subs) > b:
            return None
        inner_text = splice_range(src, a, b, subs)
        ind = line_indent(src, start)
        lines = [("    " + ln if ln.strip() and not ln.lstrip().startswith("#") else ln)
                 for ln in inner_text.split("\n")]
        rep = f"{ind}for (int {pvar} = 0; {pvar} < {passes}; ++{pvar}) {{\n" + "\n".join(lines)
        if barrier:
            rep += f"\n{ind}    __syncthreads();  // the next pass refills what this one read"
        rep += f"\n{ind}}}"
        return Edit(a, b, rep)


def repeatable_region(src: Source, idx: FunctionIndex, body: Node, decl: Node, name: str,
                      return_before: Optional[int] = None) -> Optional[tuple[int, int]]:
    """Byte span of the statements of `body` from the declaration `decl` of `name` to the last one
    that needs it (or a name declared in between), when that region could run again as a whole:
    no return, goto, atomics, no break/continue leaving it, and no in-place update (`+=`, `++`,
    `y = y * 2`) of a variable declared before it. None otherwise. A bare `return;` that ends before byte
    `return_before` is allowed (the caller knows that nothing before it differs between runs)."""
    stmts = [c for c in body.named_children]
    k0 = next(i for i, c in enumerate(stmts) if same(c, decl))
    declared = {name}
    last = k0
    changed = True
    while changed:
        changed = False
        for i in range(k0, len(stmts)):
            c = stmts[i]
            if i > last and any(re.search(rb"\b%s\b" % re.escape(nm.encode()), src.code[c.start_byte:c.end_byte])
                                for nm in declared):
                last = i
                changed = True
        for i in range(k0, last + 1):
            if stmts[i].type == "declaration":
                for dd in stmts[i].named_children:
                    if dd.type not in _DECLARATORS:
                        continue
                    nm, _ = declarator_shape(dd)
                    if nm and nm not in declared:
                        declared.add(nm)
                        changed = True
    region = stmts[k0:last + 1]
    start, end = region[0].start_byte, region[-1].end_byte
    if re.search(rb"\b(goto|atomic\w*)\b", src.code[start:end]):
        return None
    for n in walk(body):
        if start <= n.start_byte < end and n.type == "return_statement" and \
                (return_before is None or n.end_byte > return_before or n.named_children or _in_loop(n, body)):
            return None
        if not (start <= n.start_byte < end):
            continue
        if n.type in ("break_statement", "continue_statement"):
            p = n.parent
            while p is not None and p.type not in ("for_statement", "while_statement", "do_statement",
                                                   "switch_statement"):
                p = p.parent
            if p is None or p.start_byte < start:
                return None
        if n.type in ("update_expression", "assignment_expression"):
            op = n.child_by_field_name("operator")
            if n.type == "assignment_expression" and op is not None and text(op) == "=":
                # `y = y * 2` on state from before the region compounds like `y *= 2`
                b = n.child_by_field_name("left")
                while b is not None and b.type in ("subscript_expression", "field_expression"):
                    b = b.child_by_field_name("argument")
                v = idx.visible(text(b), b.start_byte) if b is not None and b.type == "identifier" else None
                if v is not None and v.decl.start_byte < start and v.kind != "for" and \
                        re.search(r"\b%s\b" % re.escape(text(b)), text(n.child_by_field_name("right"))):
                    return None
                continue
            target = n.child_by_field_name("left") if n.type == "assignment_expression" else \
                n.child_by_field_name("argument")
            base = target
            while base is not None and base.type in ("subscript_expression", "field_expression"):
                base = base.child_by_field_name("argument")
            if base is None or base.type != "identifier":
                return None
            v = idx.visible(text(base), base.start_byte)
            if v is None or (v.decl.start_byte < start and v.kind != "for"):
                return None  # state from before the region updated in place: not repeatable
            if v.kind == "for" and v.decl.start_byte < start:
                return None
    return start, end


def _in_loop(node: Node, stop: Node) -> bool:
    p = node.parent
    while p is not None and not same(p, stop):
        if p.type in ("for_statement", "while_statement", "do_statement"):
            return True
        p = p.parent
    return False


def _dedupe(subs):
    subs = sorted(set(subs))
    for (s1, e1, _), (s2, e2, _) in zip(subs, subs[1:]):
        if s2 < e1:
            return None
    return subs


PAIR = Pair(ShrinkRegisterTile)
