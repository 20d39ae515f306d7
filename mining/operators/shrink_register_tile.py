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

Forward, `merge_register_passes`: the reverse. A loop `for (int p = 0; p < P; ++p) { REGION }` over
passes (any name, `p++` or `p += 1`, P a compile-time constant >= 2) whose region declares a
thread-local array `acc[H][...]` used only as `acc[i - p * H][...]` inside row loops `for (int i =
p * H; i < p * H + H; ++i)` (`H * p`, `(p + 1) * H` spelled either way; at H = 1 also the form with
the row dimension dropped: `acc[...]` inside `for (int i = p; i < p + 1; ++i)`), with p read
nowhere else (no initialiser, or a zero one `= {}`), becomes one pass over all P * H rows: the wrapper goes, the tile is declared
`acc[P * H][...]`, the row loops run `for (int i = 0; i < P * H; ++i)` and the tile is indexed
`acc[i][...]` (a second candidate, for even P >= 4, merges pairs of passes: P / 2 passes of 2 * H
rows). Why it is sound: the passes are the same region run again with only the rows of the tile
changing (p appears nowhere but in the row loops and the tile's row index); each row's work reads
the same inputs in every pass (loads and staging repeated per pass, no state carried from one pass
to the next: the region is one `repeatable_region` would accept, checked here the same way), so
doing every row's work at each point of one run of the region gives each row the same values. The
barrier that closed each pass goes with the wrapper when nothing follows the loop in its block;
otherwise it stays (it ran once after the last pass already). Correctness is still the gate's
call.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.carriers import local_arrays, register_tile_sites
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, candidate
from corpora.code.nodes import declarator_shape, same
from mining.operators.nodes import FunctionIndex, int_value, kernels, norm, strip_parens, subscript_chain
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


# --------------------------------------------------------------------------- forward
def _pass_loop(src: Source, loop: Node) -> Optional[tuple[str, int]]:
    """(p, P) for `for (int p = 0; p < P; ++p) { ... }` with P a compile-time constant >= 2."""
    init, cond = loop.child_by_field_name("initializer"), loop.child_by_field_name("condition")
    upd, body = loop.child_by_field_name("update"), loop.child_by_field_name("body")
    if init is None or cond is None or upd is None or body is None or body.type != "compound_statement":
        return None
    m = re.fullmatch(r"(?:const\s+)?(?:unsigned\s+)?(?:int|long|size_t|unsigned)\s+(\w+)\s*=\s*0\s*;?", " ".join(text(init).split()))
    if m is None:
        return None
    p = m.group(1)
    c = re.fullmatch(r"%s\s*<\s*(.+)" % p, " ".join(text(cond).split()))
    if c is None or norm(text(upd)) not in (f"++ {p}", f"{p} ++", f"{p} += 1"):
        return None
    n = int_value(src, c.group(1))
    return (p, n) if n and n >= 2 else None


def _scaled(e: str, p: str, h: int) -> bool:
    """`e` is p * H (`H * p`; `p` when H = 1)."""
    e = norm(strip_parens(e))
    return e in {norm(f"{p} * {h}"), norm(f"{h} * {p}")} | ({p} if h == 1 else set())


def _row_range(src: Source, loop: Node, p: str, h: int) -> Optional[str]:
    """The variable of a row loop `for (int i = p * H; i < p * H + H; ++i)`, else None."""
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or cond is None or upd is None:
        return None
    m = re.fullmatch(r"(?:const\s+)?\w+\s+(\w+)\s*=\s*(.+?)\s*;?", " ".join(text(init).split()))
    if m is None or not _scaled(m.group(2), p, h):
        return None
    i = m.group(1)
    c = re.fullmatch(r"%s\s*<\s*(.+)" % i, " ".join(text(cond).split()))
    if c is None or norm(text(upd)) not in (f"++ {i}", f"{i} ++", f"{i} += 1"):
        return None
    hi = norm(strip_parens(c.group(1)))
    forms = {f"{a} + {h}" for a in (f"{p} * {h}", f"{h} * {p}")} | {f"{h} + {a}" for a in (f"{p} * {h}", f"{h} * {p}")}
    forms |= {f"({p} + 1) * {h}", f"{h} * ({p} + 1)"} | ({f"{p} + 1", f"1 + {p}"} if h == 1 else set())
    return i if hi in {norm(f) for f in forms} else None


def merge_register_passes(source: str, ctx: Context) -> list[Materialization]:
    """Passes over a register tile's rows -> one pass over all of them (see the module docstring)."""
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        idx = FunctionIndex(src, k.node)
        for loop in walk(k.body):
            if loop.type != "for_statement" or (pp := _pass_loop(src, loop)) is None:
                continue
            site = _tile_in_passes(src, idx, loop, *pp)
            if site is None:
                continue
            for merged in ([1, 2] if pp[1] >= 4 and pp[1] % 2 == 0 else [1]):
                m = _merged(src, loop, site, *pp, passes=1 if merged == 1 else pp[1] // 2)
                if m is not None:
                    out.append(m)
    return out


class _Tile:
    def __init__(self, name, decl, dims, h, rows, uses):
        self.name, self.decl, self.dims, self.h = name, decl, dims, h
        self.rows = rows  # row loops: [(loop node, var)]
        self.uses = uses  # [(use identifier, the row index node or None when the row dimension is dropped, row var)]


def _tile_in_passes(src: Source, idx: FunctionIndex, loop: Node, p: str, npass: int) -> Optional[_Tile]:
    body = loop.child_by_field_name("body")
    for decl in body.named_children:
        if decl.type != "declaration" or re.search(rb"\b(__shared__|static|extern)\b",
                                                   src.code[decl.start_byte:decl.end_byte]):
            continue
        for d in decl.named_children:
            node = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            sizes = []
            while node is not None and node.type == "array_declarator":
                sz = node.child_by_field_name("size")
                sizes.insert(0, int_value(src, text(sz)) if sz is not None else None)
                node = node.child_by_field_name("declarator")
            zero = d.type != "init_declarator" or re.fullmatch(r"\{\s*(?:0(?:\.0*)?f?\s*)?\}",
                                                               " ".join(text(d.child_by_field_name("value")).split()))
            if node is None or node.type != "identifier" or not sizes or None in sizes or not zero:
                continue  # (a zero initialiser zeroes every row, whatever the extent)
            t = _tile_uses(src, loop, decl, text(node), sizes, p)
            if t is not None:
                return t
    return None


def _tile_uses(src: Source, loop: Node, decl: Node, name: str, sizes: list, p: str) -> Optional[_Tile]:
    body = loop.child_by_field_name("body")
    for h, dropped in ([(sizes[0], False)] if len(sizes) >= 2 else []) + [(1, True)]:
        rows: dict[int, tuple[Node, str]] = {}
        uses = []
        ok = True
        for n in walk(body):
            if n.type != "identifier" or text(n) != name or decl.start_byte <= n.start_byte < decl.end_byte:
                continue
            # the innermost enclosing row loop
            q, row = n.parent, None
            while q is not None and not same(q, loop):
                if q.type == "for_statement" and (v := _row_range(src, q, p, h)) is not None:
                    row = (q, v)
                    break
                q = q.parent
            outer, indices = subscript_chain(n)
            if row is None or not indices or None in indices:
                ok = False
                break
            if dropped:
                if len(indices) != len(sizes):
                    ok = False
                    break
                uses.append((n, None, row[1]))
            else:
                i0 = " ".join(text(indices[0]).split())
                mm = re.fullmatch(r"%s\s*-\s*(.+)" % re.escape(row[1]), i0)
                if mm is None or not _scaled(mm.group(1), p, h) or len(indices) != len(sizes):
                    ok = False
                    break
                uses.append((n, indices[0], row[1]))
            rows[row[0].start_byte] = row
        if not ok or not uses:
            continue
        # p is read only by the row loops' headers and the tile's row index
        allowed = []
        for rl, _ in rows.values():
            allowed += [(rl.child_by_field_name(f).start_byte, rl.child_by_field_name(f).end_byte)
                        for f in ("initializer", "condition")]
        allowed += [(i0.start_byte, i0.end_byte) for _, i0, _ in uses if i0 is not None]
        if any(n.type == "identifier" and text(n) == p and not any(a <= n.start_byte < b for a, b in allowed)
               for n in walk(body)):
            continue
        # nothing carried from one pass to the next: the region reruns as a whole
        if re.search(rb"\b(goto|atomic\w*|return)\b", src.code[body.start_byte:body.end_byte]):
            return None
        f = src.function_at(loop.start_byte)
        fidx = FunctionIndex(src, src.func_node(f))
        for v in fidx.vars:  # a thread-local from before the loop written in a pass: state across passes
            if v.decl.start_byte < loop.start_byte and v.kind != "param" and \
                    not re.search(rb"\b__shared__\b", src.code[v.decl.start_byte:v.decl.end_byte]) and \
                    any(body.start_byte <= a.start_byte < body.end_byte for a in v.assigned):
                return None
        return _Tile(name, decl, sizes, h, list(rows.values()), uses)
    return None


def _merged(src: Source, loop: Node, t: _Tile, p: str, npass: int, passes: int) -> Optional[Materialization]:
    rows_total = npass * t.h
    h2 = rows_total // passes
    name_node = next(n for n in walk(t.decl) if n.type == "identifier" and text(n) == t.name)
    subs: list[Edit] = []
    # the declaration: the row extent grows (a dropped row dimension comes back)
    if t.h == 1 and t.uses[0][1] is None:
        subs.append(Edit(name_node.end_byte, name_node.end_byte, f"[{h2}]"))
    else:
        d = name_node.parent
        sz = d.child_by_field_name("size")
        subs.append(Edit(sz.start_byte, sz.end_byte, str(h2)))
    ph = lambda k: p if k == 1 else f"{p} * {k}"  # noqa: E731
    for rl, i in t.rows:
        init, cond = rl.child_by_field_name("initializer"), rl.child_by_field_name("condition")
        m = re.match(r"(\s*(?:const\s+)?\w+\s+%s\s*=\s*)" % re.escape(i), text(init))
        semi = ";" if text(init).rstrip().endswith(";") else ""
        lo, hi = ("0", str(rows_total)) if passes == 1 else (ph(h2), f"{ph(h2)} + {h2}")
        subs.append(Edit(init.start_byte, init.end_byte, f"{m.group(1)}{lo}{semi}"))
        subs.append(Edit(cond.start_byte, cond.end_byte, f"{i} < {hi}"))
    for use, i0, i in t.uses:
        row = i if passes == 1 else f"{i} - {ph(h2)}"
        if i0 is None:
            subs.append(Edit(use.end_byte, use.end_byte, f"[{row}]"))
        else:
            subs.append(Edit(i0.start_byte, i0.end_byte, row))
    if passes > 1:
        cond = loop.child_by_field_name("condition")
        subs.append(Edit(cond.start_byte, cond.end_byte, f"{p} < {passes}"))
        return candidate(src, subs, "merge_register_passes",
                         f"{t.name}: {npass} passes of {t.h} rows become {passes} passes of {h2} rows",
                         excerpt=" ".join(text(t.decl).split()))
    # one pass: the wrapper goes, its body moves out one level
    body = loop.child_by_field_name("body")
    stmts = [c for c in body.named_children if c.type != "comment"]
    last = stmts[-1] if stmts else None
    parent = loop.parent
    follows = parent is not None and any(c.start_byte >= loop.end_byte and c.type not in ("comment", "}")
                                         for c in parent.named_children)
    if last is not None and re.fullmatch(r"__syncthreads\s*\(\s*\)\s*;", " ".join(text(last).split())) and \
            not follows:
        a, b = src.line_span(last.start_byte, last.end_byte)
        if src.code[a:last.start_byte].strip():
            return None
        subs.append(Edit(a, b, ""))
    a = src.raw.rfind(b"\n", 0, loop.start_byte) + 1
    if src.code[a:loop.start_byte].strip():
        return None
    open_brace = body.start_byte + 1
    close = body.end_byte - 1
    for e in subs:
        if not (open_brace <= e.start and e.end <= close):
            return None
    inner = splice_range(src, open_brace, close, subs)
    ind = line_indent(src, loop.start_byte)
    lines = inner.strip("\n").split("\n") if inner.strip() else []
    cut = min((len(ln) - len(ln.lstrip(" \t")) for ln in lines if ln.strip()), default=0)
    cut = max(0, cut - len(ind))
    new = "\n".join(ln[cut:] if ln.strip() else "" for ln in lines).rstrip()
    b = body.end_byte
    return Materialization(src.raw[:a].decode("utf-8") + new + src.raw[b:].decode("utf-8"), "merge_register_passes", "",
                           f"{t.name}: {npass} passes of {t.h} rows become one register tile of {rows_total} rows",
                           site_excerpt=" ".join(text(t.decl).split()))


PAIR = Pair(ShrinkRegisterTile, (Rewrite("merge_register_passes", "register_tile", merge_register_passes, prior=2.0),))
