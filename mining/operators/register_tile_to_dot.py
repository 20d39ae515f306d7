"""register_tile_to_dot: an outer-product register tile becomes one dot product per output.

    float s[R][C];
    for (int a = 0; a < R; ++a) for (int b = 0; b < C; ++b) s[a][b] = V;
    for (k ...) {                                   // the reduction loop
        <fragment loads: qf[..] = ..., kf[..] = ...>
        for (int r = 0; r < R; ++r) for (int c = 0; c < C; ++c) { s[r][c] = fmaf(qf[r].x, kf[c].x, s[r][c]); ... }
    }
->  for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            float ks_dot_s = V;
            for (k ...) {
                <the same fragment loads>
                { ks_dot_s = fmaf(qf[r].x, kf[c].x, ks_dot_s); ... }
            }
            s[r][c] = ks_dot_s;
        }

The tile existed so that each fragment loaded per reduction step is reused R (or C) times from
registers; without it every output runs the whole reduction on its own and reloads its operands
R x C times. Every output sees the same sequence of updates in the same order, so the result is
bit-identical. Sound when (checked): the initialisation nest stores a constant into every element
right before the reduction loop; the reduction loop's body ends with the accumulation nest, whose
loops run exactly over the tile's extents and whose body only updates `s[r][c]` (assignments to
that element, nothing else written, no barriers, atomics or warp collectives); the statements
before the nest (run R x C times now) touch no tile element, write only variables they declare
themselves, and synchronize nothing; nothing there or in the loop header can see an outer
variable named like the nest's loop variables (they become the new outer loops).

Forward: `fuse_output_passes` (register_tile_per_output.py) inverts this operator's form: the
output nest around the reduction loop goes, the accumulator becomes a tile `ks_dot_s[R][C]` with its
initialisation nest, the reduction's per-output statements become the accumulation nest again, and
`s[r][c] = ks_dot_s[r][c]` copies the tile after the loop. `stage_matmul_tiles`
(shared_tile_to_global.py) writes register tiles of R x R outputs per thread for
one-output-per-thread matmuls, as part of staging shared tiles.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import same
from corpora.code.source import Source
from mining.operators.base import Edit, Pair
from mining.operators.nodes import FunctionIndex, int_value, subscript_chain
from mining.operators.rewrite_util import line_indent, pragma_before, splice_range, type_text
from mining.operators.shrink_register_tile import RegisterTileOperator
from corpora.code.parse import text, walk


_SYNC = re.compile(r"\b(__syncthreads\w*|__syncwarp|__shfl\w*|__ballot\w*|__any\w*|__all\w*|atomic\w+|__threadfence\w*|"
                   r"__pipeline\w*|asm)\b")


def _stmts(body: Node) -> list[Node]:
    return [c for c in body.named_children if c.type != "comment"]


def _single(stmt: Node) -> Node:
    """A loop body that is one statement (possibly braced): that statement."""
    while stmt.type == "compound_statement":
        inner = _stmts(stmt)
        if len(inner) != 1:
            return stmt
        stmt = inner[0]
    return stmt


def _counted_loop(src: Source, loop: Node) -> Optional[tuple[str, int]]:
    """(variable, trip count) of `for (int v = 0; v < N; ++v)` with N a compile-time constant."""
    if loop.type != "for_statement":
        return None
    init, cond, upd = (loop.child_by_field_name(k) for k in ("initializer", "condition", "update"))
    if init is None or cond is None or upd is None:
        return None
    m = re.fullmatch(r"(?:const\s+)?(?:unsigned\s+)?int\s+(\w+)\s*=\s*0\s*;?", " ".join(text(init).split()))
    if not m:
        return None
    v = m.group(1)
    c = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(v), " ".join(text(cond).split()))
    if not c or not re.fullmatch(r"\+\+\s*%s|%s\s*\+\+|%s\s*\+=\s*1" % ((re.escape(v),) * 3), " ".join(text(upd).split())):
        return None
    n = int_value(src, c.group(1))
    return (v, n) if n else None


def _nest(src: Source, stmt: Node) -> Optional[tuple[Node, Node, str, str, int, int, Node]]:
    """A perfectly nested pair of counted loops: (outer, inner, var1, var2, n1, n2, innermost body)."""
    o = _counted_loop(src, stmt)
    if o is None:
        return None
    inner = _single(stmt.child_by_field_name("body"))
    i = _counted_loop(src, inner)
    if i is None:
        return None
    return stmt, inner, o[0], i[0], o[1], i[1], inner.child_by_field_name("body")


class RegisterTileToDot(RegisterTileOperator):
    name = "register_tile_to_dot"
    description = "compute each output of an outer-product register tile as its own dot product"

    def rewrite(self, src: Source, fn: Node, decl: Node, name: str) -> Optional[Edit]:
        idx = FunctionIndex(src, fn)
        var = next((v for v in idx.vars if v.name == name and same(v.decl, decl)), None)
        if var is None or var.value is not None or len([d for d in decl.named_children
                                                        if d.type.endswith("declarator") or d.type == "identifier"]) < 1:
            return None
        dims = []
        d = var.declarator
        while d is not None and d.type == "array_declarator":
            size = d.child_by_field_name("size")
            dims.insert(0, int_value(src, text(size)) if size is not None else None)
            d = d.child_by_field_name("declarator")
        if len(dims) != 2 or None in dims:
            return None
        elem = type_text(src, decl)
        if not elem or not re.fullmatch(r"(?:const\s+)?(float|double|int|unsigned|half|__half|long)", elem):
            return None
        body = decl.parent
        if body is None or body.type != "compound_statement":
            return None
        stmts = _stmts(body)
        k = next((i for i, c in enumerate(stmts) if same(c, decl)), None)
        uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == name and
                not (var.declarator.start_byte <= n.start_byte < var.declarator.end_byte) and
                idx.visible(name, n.start_byte) is var]
        # the initialisation nest and the reduction loop that follows it
        for j in range(k + 1, len(stmts) - 1):
            init = _nest(src, stmts[j])
            if init is None:
                continue
            red = stmts[j + 1]
            e = self._plan(src, idx, name, dims, elem, stmts[j], init, red, uses)
            if e is not None:
                return e
        return None

    def _plan(self, src, idx, name, dims, elem, init_stmt, init, red, uses) -> Optional[Edit]:
        _, _, a, b, na, nb, ibody = init
        if (na, nb) != tuple(dims):
            return None
        st = _single(ibody)
        m = re.fullmatch(r"%s\s*\[\s*%s\s*\]\s*\[\s*%s\s*\]\s*=\s*([^=;][^;]*);" % (re.escape(name), a, b),
                         " ".join(src.code[st.start_byte:st.end_byte].decode("utf-8", "replace").split()))
        if st.type != "expression_statement" or not m:
            return None
        value = m.group(1).strip()
        for tok in re.findall(r"[A-Za-z_]\w*", value):
            if idx.visible(tok, st.start_byte) is not None:
                return None  # not a constant
        if red.type not in ("for_statement", "while_statement", "do_statement"):
            return None
        rbody = red.child_by_field_name("body")
        if rbody is None or rbody.type != "compound_statement":
            return None
        rstmts = _stmts(rbody)
        if not rstmts:
            return None
        nest = _nest(src, rstmts[-1])
        if nest is None:
            return None
        outer, inner, v1, v2, n1, n2, nbody = nest
        # which nest variable indexes which tile dimension
        tile_uses = [u for u in uses if _inside(u, nbody)]
        if not tile_uses or any(not _inside(u, init_stmt) and not _inside(u, nbody) for u in uses
                                if _inside(u, red)):
            return None
        order = None
        for u in tile_uses:
            sub, ind = subscript_chain(u)
            if len(ind) != 2 or any(i is None or i.type != "identifier" for i in ind):
                return None
            got = (text(ind[0]), text(ind[1]))
            if got not in ((v1, v2), (v2, v1)) or (order is not None and got != order):
                return None
            order = got
        row, col = order
        if {(v1, n1), (v2, n2)} != {(row, dims[0]), (col, dims[1])}:
            return None
        # the nest body: only updates of s[row][col]
        nb_code = src.code[nbody.start_byte:nbody.end_byte].decode("utf-8", "replace")
        if _SYNC.search(nb_code) or re.search(r"\b(return|break|continue|goto)\b", nb_code):
            return None
        for n in walk(nbody):
            if n.type == "update_expression":
                return None
            if n.type == "assignment_expression":
                left = n.child_by_field_name("left")
                if not (left.type == "subscript_expression" and
                        re.fullmatch(r"%s\s*\[\s*%s\s*\]\s*\[\s*%s\s*\]" % (re.escape(name), row, col), text(left))):
                    return None
            if n.type == "declaration":
                return None
        # the statements before the nest: run R x C times now
        head_end = rbody.start_byte
        for s in rstmts[:-1]:
            c = src.code[s.start_byte:s.end_byte].decode("utf-8", "replace")
            if _SYNC.search(c) or re.search(r"\b(return|break|continue|goto)\b", c) or re.search(r"\b%s\b" % re.escape(name), c):
                return None
            for n in walk(s):
                target = None
                if n.type == "assignment_expression":
                    target = n.child_by_field_name("left")
                elif n.type == "update_expression":
                    target = n.child_by_field_name("argument")
                if target is None:
                    continue
                base = target
                while base.type in ("subscript_expression", "field_expression", "parenthesized_expression"):
                    base = base.child_by_field_name("argument") if base.type != "parenthesized_expression" \
                        else base.named_children[0]
                if base.type != "identifier":
                    return None
                v = idx.visible(text(base), base.start_byte)
                if v is None or not _inside(v.decl, rbody):
                    return None  # writes something that outlives one reduction step
                if v.kind == "param":
                    return None
        # no outer variable named like the nest variables may be seen where the new loops capture it
        for n in walk(red):
            if n.type != "identifier" or text(n) not in (v1, v2):
                continue
            if _inside(n, outer):
                continue
            v = idx.visible(text(n), n.start_byte)
            if v is None or not _inside(v.decl, red):
                return None
        for s in rstmts[:-1]:
            if s.type == "declaration" and any(re.search(r"\b%s\b" % re.escape(x), text(dd))
                                               for dd in s.named_children for x in (v1, v2)
                                               if dd.type.endswith("declarator") or dd.type == "identifier"):
                return None
        if _SYNC.search(src.code[red.start_byte:head_end].decode("utf-8", "replace")):
            return None
        # the loop header runs R x C times too: it may only step its own variable
        for n in walk(red):
            if n.start_byte >= head_end:
                break
            target = n.child_by_field_name("left") if n.type == "assignment_expression" else \
                n.child_by_field_name("argument") if n.type == "update_expression" else None
            if target is None:
                continue
            v = idx.visible(text(target), target.start_byte) if target.type == "identifier" else None
            if v is None or not (red.start_byte <= v.decl.start_byte < head_end):
                return None

        acc = f"ks_dot_{name}"
        if re.search(r"\b%s\b" % re.escape(acc), src.code.decode("utf-8", "replace")):
            return None
        # the nest body with the element replaced by the accumulator
        subs = []
        for u in tile_uses:
            sub, _ = subscript_chain(u)
            subs.append(Edit(sub.start_byte, sub.end_byte, acc))
        new_body = splice_range(src, nbody.start_byte, nbody.end_byte, subs)
        shift = len(line_indent(src, nbody.start_byte)) - len(line_indent(src, outer.start_byte))
        if shift > 0:  # two loop levels are gone: their body moves left
            new_body = "\n".join([new_body.split("\n")[0]] + [ln[shift:] if ln[:shift].strip() == "" else ln
                                                              for ln in new_body.split("\n")[1:]])
        # the reduction loop with the nest replaced by its body (pragmas above the nest go with it)
        nest_start = outer.start_byte
        p = pragma_before(src, nest_start)
        while p is not None:
            nest_start = p
            p = pragma_before(src, nest_start)
        nest_start = src.raw.rfind(b"\n", 0, nest_start) + 1
        ind_nest = line_indent(src, outer.start_byte)
        red_start = red.start_byte
        rp = pragma_before(src, red_start)
        red_text = splice_range(src, rp if rp is not None else red_start, red.end_byte,
                                [Edit(nest_start, outer.end_byte, ind_nest + new_body)])
        ind = line_indent(src, init_stmt.start_byte)
        start = init_stmt.start_byte
        ip = pragma_before(src, start)
        while ip is not None:
            start = ip
            ip = pragma_before(src, start)
        line0 = src.raw.rfind(b"\n", 0, start) + 1
        if src.code[line0:start].strip():
            return None
        start = line0
        hdr_outer = _header(src, outer)
        hdr_inner = _header(src, inner)
        lines = red_text.split("\n")
        red_ind = line_indent(src, red_start)
        moved = []
        for ln in lines:
            if ln.startswith(red_ind):
                ln = ln[len(red_ind):]
            moved.append((ind + "        " + ln) if ln.strip() and not ln.lstrip().startswith("#") else ln)
        rep = (f"{ind}{hdr_outer}\n{ind}    {hdr_inner} {{\n{ind}        {elem} {acc} = {value};\n"
               + "\n".join(moved) + f"\n{ind}        {name}[{row}][{col}] = {acc};\n{ind}    }}")
        return Edit(start, red.end_byte, rep)


def _header(src: Source, loop: Node) -> str:
    """`for (...)` of a loop, without the pragma lines that may sit between it and its body."""
    t = src.code[loop.start_byte:loop.child_by_field_name("body").start_byte].decode("utf-8", "replace")
    return " ".join(re.sub(r"(?m)^[ \t]*#[^\n]*", " ", t).split())


def _inside(node: Node, outer: Node) -> bool:
    return outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte


PAIR = Pair(RegisterTileToDot, inverted_by=("fuse_output_passes",))  # register_tile_per_output.py
