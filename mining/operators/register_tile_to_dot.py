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
`s[r][c] = ks_dot_s[r][c]` copies the tile after the loop.

Forward, `register_tile_outputs`: one output per thread -> R x R (R = 4, 2) per thread, over global
memory (`stage_matmul_tiles`, shared_tile_to_global.py, does the same while staging shared tiles).
The kernel: `row` / `col` from `blockIdx * blockDim + threadIdx` (y / x, a literal B_y x B_x block
at every launch), then nothing but `if (<row bounds> || <col bounds>) return;`, `T acc = 0;`, one
dot-product loop `for (int k = 0; k < K; ++k) acc += A[..row..k..] * B[..k..col..];` (exactly the
two operand reads, nothing else written) and an epilogue without loops, returns or barriers that
writes only through pointer parameters and its own locals. It becomes: rows `ks_row0 + B_y * i`
and columns `ks_col0 + B_x * j` (i, j < R; ks_row0 = blockIdx.y * B_y * R + threadIdx.y, so a warp
still reads consecutive columns), per k-step the R row operands and R column operands loaded once
into registers (zero where the row or column is out of bounds) and the R x R outer product
accumulated into `acc[R][R]`, then the epilogue once per output with its `row`, `col` and `acc`,
skipped where the original returned. The dim3 grid's x and y are divided by R (rounded up), so the
threads cover every original row and column: ceil(g / R) * B * R >= g * B. Why each stored output
is the same: its accumulator gets the same products in the same k order (bit-identical), the zero
operands only reach outputs that are never stored. Refused: a launch whose grid is not a dim3 the
rewrite can divide, a kernel with shared memory or barriers, statements other than these.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import same
from corpora.code.source import Source
from mining.operators.base import Context, Edit, Materialization, Pair, Rewrite, candidate, rewrite_range
from mining.operators.nodes import (code, declared_within, has, has_loop, indent_at, kernels, launches, mentions, pointer_params, raw, reindent, returns_or_syncs, split_top, statements,
                                    strip_parens, sub_base, written_names)
from mining.operators.shared_tile_to_global import _dot_loop, _grid_dim3_edits, _two_d
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


# --------------------------------------------------------------------------- forward: register_tile_outputs
def register_tile_outputs(source: str, ctx: Context) -> list[Materialization]:
    """One output per thread -> R x R outputs per thread in a register tile (module docstring)."""
    src = Source(source)
    out = []
    for k in kernels(src):
        if has(src, k.body, r"__shared__|__syncthreads"):
            continue
        for R in (4, 2):
            m = _outputs_tile(src, k, R)
            if m is not None:
                out.append(m)
    return out


def _outputs_tile(src: Source, k, R: int) -> Optional[Materialization]:
    two = _two_d(src, k)
    if two is None:
        return None
    dx, dy, (bx, by, _) = two
    col, row = dx.name, dy.name
    sts = statements(k.body)
    if len(sts) < 6 or {sts[0].start_byte, sts[1].start_byte} != {dx.stmt.start_byte, dy.stmt.start_byte}:
        return None
    ret, adecl, loop, epilogue = sts[2], sts[3], sts[4], sts[5:]
    if ret.type != "if_statement" or ret.child_by_field_name("alternative") is not None or \
            not re.fullmatch(r"\{?\s*return\s*;\s*\}?", code(src, ret.child_by_field_name("consequence"))):
        return None
    cond = strip_parens(code(src, ret.child_by_field_name("condition")))
    parts = split_top(cond, "||")
    rowbad = [q for q in parts if mentions(q, row) and not mentions(q, col)]
    colbad = [q for q in parts if mentions(q, col) and not mentions(q, row)]
    if len(rowbad) + len(colbad) != len(parts) or not rowbad or not colbad:
        return None
    if loop.type != "for_statement" or not epilogue or \
            any(returns_or_syncs(src, s) or has_loop(s) for s in epilogue):
        return None
    dot = _dot_loop(src, k, loop, row, col)
    if dot is None:
        return None
    kv, _, body, a, b, acc = dot
    if any(n.type == "update_expression" for n in walk(body)):
        return None
    ptrs = pointer_params(k.sig)
    am = re.fullmatch(r"((?:unsigned\s+)?\w+)\s+%s\s*=\s*0(?:\.0*)?[fF]?\s*;" % re.escape(acc), code(src, adecl))
    if am is None:
        return None
    acc_t = am.group(1)
    # the body reads row and col only inside the operand subscripts (they become registers)
    for n in walk(body):
        if n.type == "identifier" and text(n) in (row, col) and not any(
                x.start_byte <= n.start_byte < x.end_byte for x in (a, b)):
            return None
    own = set()
    for s in epilogue:
        own |= declared_within(src, s)
    for s in epilogue:
        if any(w not in ptrs and w not in own for w in written_names(src, s)):
            return None
    grid_edits = []
    ls = launches(src, k.name)
    if not ls:
        return None
    for la in ls:
        e = _grid_dim3_edits(src, la, R)
        if e is None:
            return None
        grid_edits += e
    ta, tb = ptrs[sub_base(a)].base_type, ptrs[sub_base(b)].base_type
    inner = rewrite_range(src, body.start_byte, body.end_byte,
                          [Edit(a.start_byte, a.end_byte, "ks_a[ks_i]"), Edit(b.start_byte, b.end_byte, "ks_b[ks_j]")] +
                          [Edit(n.start_byte, n.end_byte, "ks_acc[ks_i][ks_j]") for n in walk(body)
                           if n.type == "identifier" and text(n) == acc])
    if re.search(rb"\bks_(row0|col0|acc|a|b|i|j)\b", src.code):
        return None
    ind = indent_at(src, ret.start_byte)
    i2, i3 = ind + "    ", ind + "        "
    rt = " ".join(dy.type.replace("const", "").split()) or "int"
    ct = " ".join(dx.type.replace("const", "").split()) or "int"
    rb = " || ".join(rowbad)
    cb = " || ".join(colbad)
    header = code(src, loop)[:body.start_byte - loop.start_byte].strip()
    i4 = i3 + "    "
    epi = "\n".join(reindent(rewrite_range(src, s.start_byte, s.end_byte,
                                           [Edit(n.start_byte, n.end_byte, "ks_acc[ks_i][ks_j]") for n in walk(s)
                                            if n.type == "identifier" and text(n) == acc]), i4, first=True)
                    for s in epilogue)
    text_ = (f"// ks-optimize: {R} x {R} outputs per thread in registers, rows {by} and columns {bx} apart "
             f"(the grid divided by {R})\n"
             f"{ind}const {rt} ks_row0 = blockIdx.y * {by * R} + threadIdx.y;\n"
             f"{ind}const {ct} ks_col0 = blockIdx.x * {bx * R} + threadIdx.x;\n"
             f"{ind}{acc_t} ks_acc[{R}][{R}] = {{}};\n"
             f"{ind}{header} {{\n"
             f"{i2}{ta} ks_a[{R}];\n"
             f"{i2}{tb} ks_b[{R}];\n"
             f"{i2}for (int ks_i = 0; ks_i < {R}; ++ks_i) {{\n"
             f"{i3}const {rt} {row} = ks_row0 + {by} * ks_i;\n"
             f"{i3}ks_a[ks_i] = !({rb}) ? {raw(src, a)} : {ta}();\n"
             f"{i2}}}\n"
             f"{i2}for (int ks_j = 0; ks_j < {R}; ++ks_j) {{\n"
             f"{i3}const {ct} {col} = ks_col0 + {bx} * ks_j;\n"
             f"{i3}ks_b[ks_j] = !({cb}) ? {raw(src, b)} : {tb}();\n"
             f"{i2}}}\n"
             f"{i2}for (int ks_i = 0; ks_i < {R}; ++ks_i)\n"
             f"{i3}for (int ks_j = 0; ks_j < {R}; ++ks_j) {reindent(inner, i3)}\n"
             f"{ind}}}\n"
             f"{ind}for (int ks_i = 0; ks_i < {R}; ++ks_i)\n"
             f"{i2}for (int ks_j = 0; ks_j < {R}; ++ks_j) {{\n"
             f"{i3}const {rt} {row} = ks_row0 + {by} * ks_i;\n"
             f"{i3}const {ct} {col} = ks_col0 + {bx} * ks_j;\n"
             f"{i3}if (!({cond})) {{\n"
             f"{epi}\n"
             f"{i3}}}\n"
             f"{i2}}}")
    edits = [Edit(ret.start_byte, sts[-1].end_byte, text_)] + grid_edits
    return candidate(src, edits, "register_tile_outputs",
                     f"{k.name}: {R} x {R} outputs per thread in a register tile, the operands of each k-step "
                     f"loaded once (grid divided by {R})", excerpt=code(src, loop)[:160])


PAIR = Pair(RegisterTileToDot, (Rewrite("register_tile_outputs", "register_tile", register_tile_outputs, prior=4.0),),
            inverted_by=("fuse_output_passes", "register_tile_outputs"))  # the first in register_tile_per_output.py
