"""untranspose_tile: a shared operand tile stored transposed goes back to the global layout.

    __shared__ float As[BK][BM];                       __shared__ float As[BM][BK];
    As[a_k + 0][a_r] = ra.x;                    ->     As[a_r][a_k + 0] = ra.x;
    a0 = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
                                                ->     a0 = make_float4(As[ty * 4][k], As[ty * 4 + 1][k], As[ty * 4 + 2][k], As[ty * 4 + 3][k]);

The transposed (k-major) layout exists so that a thread's fragment along m is contiguous and can
be read with one vector load; in the natural layout the same fragment is n scalar loads from
n rows. The rewrite is a pure permutation of where each element lives: the last two dimensions of
the declaration swap, every plain access `T[..][a][b]` becomes `T[..][b][a]`, a vector read of the
elements `T[..][a][b .. b+n-1]` becomes n scalar reads assembled with `make_<vec>`, and a vector
store `*reinterpret_cast<vec*>(&T[..][a][b]) = v;` becomes n scalar stores of `v`'s components.
Every access has to be one of these forms (the array is never passed, offset or aliased
otherwise) and index expressions must be free of side effects (a vector access's are repeated).
A vector access whose elements crossed into the next row in the original would leave the array
now; the gate's memory checker rejects such a candidate.

Forward, `transpose_operand_tile`: the same permutation the other way. A 2-D (or stacked 2-D)
shared tile in the natural layout whose reads walk a row along the reduction axis while the thread's
fragment spans several rows - inside a loop whose variable indexes the last dimension only, either
two or more reads with different row indices (`As[ty * 4 + 0][k]`, `As[ty * 4 + 1][k]`, ...) or a
read in an inner loop whose variable indexes the row only (`for (i) a[i] = As[ty + 16 * i][k]`) -
is stored transposed: its last two extents swap and every access `T[..][a][b]` becomes
`T[..][b][a]`, so the fragment is contiguous along the now last dimension (one vector load later:
`vector_load`'s forward). Sound for the reason above: every element keeps one home and every
access moves with it (all accesses are plain subscripts or the vector forms above; an address that
escapes otherwise, a side effect in an index, or a tile not written through subscripts refuses).
Not a site: a tile already flagged transposed (its fill's last index is a row of the global
operand), a tile already read with wide (vector) loads along its rows (attention's `Qs`: the
transposed layout would split them), one-dimensional tiles, `extern` tiles (their extents are not
in the declaration).
`stage_matmul_tiles` (shared_tile_to_global.py) lists transposed_tile in `serves` but stages
tiles in the natural layout; after it, this rewrite is the one that transposes them.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import same
from corpora.code.source import Source
from mining.carriers import transposed_tile_sites
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, candidate
from mining.operators.nodes import FunctionIndex, subscript_chain
from mining.operators.rewrite_util import has_side_effects, splice_range, structural
from corpora.code.parse import text, walk


_VEC = re.compile(r"reinterpret_cast\s*<\s*(const\s+)?(?:volatile\s+)?((?:u?int|float|double|u?short|u?char|u?long)"
                  r"([234]))\s*(?:const\s*)?\*\s*>$")


# calls that take their arguments by value: an element passed to them is a plain read
_BY_VALUE = re.compile(r"make_\w+|fmaf|fmaxf|fminf|fabsf|__fmaf_r[nzdu]|__fmul_r[nzdu]|__fadd_r[nzdu]|expf|__expf")


def _up(node: Node) -> Node:
    """The node's parent, skipping parentheses."""
    p = node.parent
    while p is not None and p.type == "parenthesized_expression":
        p = p.parent
    return p


def _is_lhs(node: Node) -> Optional[Node]:
    p, n = node.parent, node
    while p is not None and p.type == "parenthesized_expression":
        n, p = p, p.parent
    if p is not None and p.type == "assignment_expression" and same(p.child_by_field_name("left"), n):
        return p
    return None


class UntransposeTile(Operator):
    name = "untranspose_tile"
    carrier = "transposed_tile"
    description = "store a transposed shared operand tile in the global layout (scalar fragment reads)"

    def edits(self, src: Source):
        flagged = {s.start_byte for s in transposed_tile_sites(src)}
        if not flagged:
            return
        src = structural(src)
        for decl, name, dims, f, fn in _static_2d_tiles(src):
            writes = [n for n in walk(fn) if n.type == "subscript_expression" and n.start_byte in flagged and
                      re.match(r"\s*%s\b" % re.escape(name), text(n))]
            if not writes:
                continue
            e = self.rewrite(src, fn, decl, name, dims)
            if e is not None:
                yield e

    def rewrite(self, src: Source, fn: Node, decl: Node, name: str, dims: list[Node]) -> Optional[Edit]:
        idx = FunctionIndex(src, fn)
        var = next((v for v in idx.vars if v.name == name and same(v.decl, decl)), None)
        if var is None:
            return None
        nd = len(dims)
        subs: list[Edit] = []
        # the declaration: swap the last two extents
        a, b = dims[-2], dims[-1]
        subs.append(Edit(a.start_byte, a.end_byte, _code(src, b)))
        subs.append(Edit(b.start_byte, b.end_byte, _code(src, a)))
        uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == name and
                not (var.declarator.start_byte <= n.start_byte < var.declarator.end_byte) and
                idx.visible(name, n.start_byte) is var]
        if not uses:
            return None
        for u in uses:
            outer, indices = subscript_chain(u)
            if len(indices) != nd or any(i is None for i in indices):
                return None
            lead = "".join(f"[{_code(src, i)}]" for i in indices[:-2])
            r, c = _code(src, indices[-2]), _code(src, indices[-1])
            p = _up(outer)
            if p is not None and p.type == "pointer_expression" and text(p.children[0]) == "&":
                # &T[..][r][c] inside reinterpret_cast<vec*>(...), dereferenced
                if any(has_side_effects(i, allow_calls=False) for i in indices):
                    return None
                args = _up(p)
                call = args.parent if args is not None and args.type == "argument_list" else None
                fnode = call.child_by_field_name("function") if call is not None else None
                m = _VEC.match(re.sub(r"\s+", " ", text(fnode)).replace("< ", "<")) if fnode is not None else None
                deref = _up(call) if m else None
                if deref is None or deref.type != "pointer_expression" or text(deref.children[0]) != "*":
                    return None
                vec, n = m.group(2), int(m.group(3))
                elems = [f"{name}{lead}[{_plus(c, q)}][{r}]" for q in range(n)]
                asg = _is_lhs(deref)
                if asg is not None:
                    stmt = asg.parent
                    if text(asg.child_by_field_name("operator")) != "=" or stmt is None or \
                            stmt.type != "expression_statement":
                        return None
                    val = _code(src, asg.child_by_field_name("right"))
                    parts = " ".join(f"{e} = ks_v.{'xyzw'[q]};" for q, e in enumerate(elems))
                    subs.append(Edit(stmt.start_byte, stmt.end_byte, f"{{ const {vec} ks_v = ({val}); {parts} }}"))
                else:
                    dp = deref.parent
                    if dp is not None and dp.type in ("update_expression", "pointer_expression"):
                        return None
                    subs.append(Edit(deref.start_byte, deref.end_byte, f"make_{vec}({', '.join(elems)})"))
                continue
            if p is not None and p.type == "argument_list" and _BY_VALUE.fullmatch(
                    text(p.parent.child_by_field_name("function")) if p.parent is not None else ""):
                pass  # an element passed by value (`make_float4(T[a][k], ...)`, `fmaf(T[a][k], ...)`)
            elif p is not None and p.type in ("pointer_expression", "call_expression", "argument_list"):
                return None  # an element's address taken, or the element passed by reference
            i1, i2 = indices[-2], indices[-1]
            subs.append(Edit(i1.start_byte, i1.end_byte, c))
            subs.append(Edit(i2.start_byte, i2.end_byte, r))
        subs.sort()
        for (s1, e1, _), (s2, e2, _) in zip(subs, subs[1:]):
            if s2 < e1:
                return None
        lo, hi = subs[0][0], max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))


def _code(src: Source, node: Node) -> str:
    return " ".join(src.raw[node.start_byte:node.end_byte].decode("utf-8", "replace").split())


def _plus(expr: str, q: int) -> str:
    if q == 0:
        return expr
    top = expr
    while True:  # operators inside parentheses do not bind against the added `+ q`
        inner = re.sub(r"\([^()]*\)", "_", top)
        if inner == top:
            break
        top = inner
    return f"{expr} + {q}" if not re.search(r"[?:<>=&|^]", top) else f"({expr}) + {q}"


def _loop_vars(node: Node, stop: Node) -> list[tuple[str, int]]:
    """(variable, loop start) of the `for` loops around `node` (declared in their headers), innermost first."""
    out, p = [], node.parent
    while p is not None and not same(p, stop):
        if p.type == "for_statement":
            init = p.child_by_field_name("initializer")
            d = next((c for c in init.named_children if c.type == "init_declarator"), None) \
                if init is not None and init.type == "declaration" else None
            n = d.child_by_field_name("declarator") if d is not None else None
            if n is not None and n.type == "identifier":
                out.append((text(n), p.start_byte))
        p = p.parent
    return out


def _row_walking_reads(fn: Node, name: str, nd: int) -> bool:
    """Reads of the tile that walk a row (a loop variable only in the last index) for a fragment of
    several rows: two or more row indices under one such loop, or an inner loop over the rows."""
    rows_per_loop: dict[int, set[str]] = {}
    for u in walk(fn):
        if u.type != "identifier" or text(u) != name:
            continue
        outer, indices = subscript_chain(u)
        if len(indices) != nd or any(i is None for i in indices) or _is_lhs(outer) is not None:
            continue
        p = _up(outer)
        if p is not None and p.type == "pointer_expression" and text(p.children[0]) == "&":
            return False  # a wide read along the row already: transposing would split it
        a, b = indices[-2], indices[-1]
        ia = {text(n) for n in walk(a) if n.type == "identifier"}
        ib = {text(n) for n in walk(b) if n.type == "identifier"}
        vs = _loop_vars(outer, fn)
        walk_k = [i for i, (v, _) in enumerate(vs) if v in ib and v not in ia]
        if not walk_k:
            continue
        k = walk_k[0]
        if any(v in ia and v not in ib for v, _ in vs[:k]):
            return True  # an inner loop over the fragment's rows
        rows_per_loop.setdefault(vs[k][1], set()).add(_code_of(a))
    return any(len(rows) >= 2 for rows in rows_per_loop.values())


def _code_of(node: Node) -> str:
    return " ".join(text(node).split())


def _static_2d_tiles(src: Source):
    """(declaration, name, extents, function, its node) of every static shared tile of two or more
    dimensions declared inside a function: what both directions read."""
    for decl, name, dims in src.shared_decls:
        if len(dims) < 2 or b"extern" in src.code[decl.start_byte:decl.end_byte]:
            continue
        f = src.function_at(decl.start_byte)
        fn = src.func_node(f) if f is not None else None
        if fn is not None:
            yield decl, name, dims, f, fn


def transpose_operand_tile(source: str, ctx: Context) -> list[Materialization]:
    """Shared operand tiles read along rows for multi-row fragments -> stored transposed (k-major)."""
    src = structural(Source(source))
    flagged = {s.start_byte for s in transposed_tile_sites(src)}
    out = []
    op = UntransposeTile()
    for decl, name, dims, f, fn in _static_2d_tiles(src):
        subs = [n for n in walk(fn) if n.type == "subscript_expression" and re.match(r"\s*%s\b" % re.escape(name), text(n))]
        if any(n.start_byte in flagged for n in subs) or not _row_walking_reads(fn, name, len(dims)):
            continue
        e = op.rewrite(src, fn, decl, name, dims)
        if e is not None:
            out.append(candidate(src, [e], "transpose_operand_tile",
                                 f"{f.name}: {name} stored transposed, its fragment reads contiguous",
                                 excerpt=" ".join(text(decl).split())[:160]))
    return out


PAIR = Pair(UntransposeTile, (Rewrite("transpose_operand_tile", "transposed_tile", transpose_operand_tile, prior=2.0),))
