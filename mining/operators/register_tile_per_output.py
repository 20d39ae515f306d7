"""register_tile_per_output: a thread's register tile is computed one output at a time.

    T acc[R][C] = {0};                                  // a zero initialiser, or none
    <region: fills of shared tiles, barriers, the reduction loop(s), the epilogue>
        for (int r = 0; r < R; ++r) for (int c = 0; c < C; ++c) acc[r][c] = f(a[r], b[c], acc[r][c]);
        out[i * ldc + j + 4] = acc[i][j];               // any element, any index expressions
->  for (int ks_m_acc = 0; ks_m_acc < R; ++ks_m_acc)
        for (int ks_n_acc = 0; ks_n_acc < C; ++ks_n_acc) {
            T acc = 0;
            <the same region>
                for (int r = ks_m_acc; r < ks_m_acc + 1; ++r) for (int c = ks_n_acc; c < ks_n_acc + 1; ++c)
                    acc = f(a[r], b[c], acc);
                if (i == ks_m_acc && j == ks_n_acc) out[i * ldc + j + 4] = acc;
            __syncthreads();                            // when the region has barriers
        }

The tile existed so that each operand a thread loads per reduction step feeds R x C
accumulators from registers. Here the thread keeps its mapping and its block tile, but the whole
region - global loads, shared fills, barriers, the reduction - runs once per output with a scalar
accumulator: R x C times the loads for the same outputs, the operand reuse and the registers gone.
No index is remapped, so it applies to any tile shape and any load layout; the gate decides.

Why each pass computes exactly its output (checked): the region is repeatable (it starts at the
tile's declaration and ends at its last use; no return, goto, atomics, no in-place update of
state from before it: `shrink_register_tile.repeatable_region`), so every pass recomputes the same
fills from the same inputs. Each element access `acc[e1][e2]` (or `(&acc[e1][e2])[e3]`, element
`[e1][e2 + e3]`) is, per dimension, either indexed by the variable of an enclosing loop
`for (v = 0; v < EXTENT; ++v)` that only works on the tile - its body writes nothing but tile
elements indexed by `v` in that dimension and variables declared inside it, and synchronizes
nothing - which then runs the pass's iteration only, or its expression statement runs under
`if (e == pass index)` (index expressions without side effects). So the pass's element sees the
same updates in the same order as before (bit-identical), the other elements' work is skipped,
and every statement that reads the element (a store of C) runs once, in the element's pass. All
threads run the same passes, so the region's barriers stay uniform; a barrier closes each pass
when the region has one (the next pass's first shared writes must not overtake this pass's
reads). Not a site: the tile's address escapes, or an element is read where no statement can be
guarded (a declaration's initialiser, a loop header) outside such a loop.

Forward, `fuse_output_passes` (also the inverse of `register_tile_to_dot`): a thread that computes
its R x C outputs one after another - `for (int P = 0; P < R; ++P) for (int Q = 0; Q < C; ++Q) {
BODY }`, R and C compile-time constants, written by hand or by either backward operator - runs BODY
once over an R x C register tile. The body's *private* scalars (declared at its top level, with an
initialiser or a write that reads P, Q or another per-output value) become `T x[R][C]`; the body's
inner locals computed from per-output values are *per-output* too. Every statement that reads a
per-output value is wrapped in `for (P) for (Q) { ... }` with `x -> x[P][Q]`; every other statement
(fills of shared tiles, barriers, fragment loads, loop headers) runs once, and the loops and `if`s
whose headers read no per-output value are entered, so the wrappers land inside the reduction loop:
one step of it updates every output (the outer product). Loops pinned to the pass (`for (int i =
P; i < P + 1; ++i)`, `max(0, P) .. min(R, P + 1)`: what register_tile_per_output writes) become
full loops over the tile, with i = P, and a compound statement that is all per-output work becomes
the wrapper's body (register_tile_to_dot's spelling comes back as the accumulation nest).

Why it is sound (checked): the passes of the original differ only in the per-output values, so the
work that reads none of them computed the same in every pass; it may write only the body's own
locals and shared memory by plain assignment (refilled with the same values), never state from
before the nest, global memory, or atomics, so running it once leaves what R x C runs left. The
per-output work writes only its private element, its own locals, and global memory by plain stores
(in one statement at most, a pointer the nest never reads, so no pass sees another's store and the
stores keep their order) or one element `y[P][Q]` of a thread-local array outside the nest; it has
no barriers, atomics, returns or jumps out of itself, and never writes P or Q. So each output's
element sees the same updates in the same order as in its pass (bit-identical), and the shared work
it reads has the values it had. A return in the shared work is refused once a store of an output
precedes it (the first pass would have stored one output, now all would be); a local of one output's
wrapper read after the wrapper is refused. The barrier that closed each pass goes when nothing
follows the nest in the kernel. Not fused (no candidate): nothing per output inside a loop that now
runs once (nothing would be gained), no private scalar (no tile), a pass count that is not a
constant. The launch is not changed: the thread keeps its outputs. Turning one output per thread
into R x R (the grid divided) is `register_tile_outputs` (register_tile_to_dot.py) for a plain
global-memory dot product and `stage_matmul_tiles` (shared_tile_to_global.py) with shared staging;
for kernels that already stage shared tiles per output it is not written: each thread's share of
the tile fills would have to grow with its outputs (a new fill mapping, not a local rewrite).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import same
from corpora.code.parse import text, walk
from corpora.code.source import Source
from mining.operators.base import Context, Edit, Materialization, Pair, Rewrite, candidate
from mining.operators.nodes import FunctionIndex, declared_within, int_value, kernels, subscript_chain
from mining.operators.rewrite_util import has_side_effects, line_indent, splice_range, structural, type_text
from mining.operators.shrink_register_tile import RegisterTileOperator, repeatable_region


_SYNC = re.compile(r"\b(__syncthreads\w*|__syncwarp|__shfl\w*|__ballot\w*|__any\w*|__all\w*|atomic\w+|__threadfence\w*|"
                   r"__pipeline\w*|asm)\b")
# `{0}`, `{0.0}`, `{0.0f}`, `{}`, `{__float2half(0.0f)}`: every element starts at zero
_ZERO = re.compile(r"\{\s*(?:(?:\(\s*\w+\s*\)\s*)?0*\.?0*[fF]?|\w+\s*\(\s*0*\.?0*[fF]?\s*\))?\s*\}")


def _norm(s: str) -> str:
    return re.sub(r"\s+", "", s)


def _atom(e: str) -> str:
    """`e` as an operand of `+` / `==`: parenthesized unless it is a name, a number or a subscript."""
    e = e.strip()
    return e if re.fullmatch(r"[\w.]+(\[[^][]*\])*", e) else f"({e})"


def _solution(e: str, p: str) -> Optional[tuple[str, str, set[str]]]:
    """`v`, `v + C`, `C + v`, `v - C` == p -> (v, the value of v, the names C reads), C built of
    names, numbers and + - * / % only (so `v + C` parses as v plus all of C)."""
    e = e.strip()
    arith = r"[\w\s.+\-*/%()]+"
    for pat, sign in ((r"([A-Za-z_]\w*)", 0), (r"([A-Za-z_]\w*)\s*\+\s*(%s)" % arith, -1),
                      (r"(%s?)\s*\+\s*([A-Za-z_]\w*)" % arith, -2), (r"([A-Za-z_]\w*)\s*-\s*([\w.]+|\([^()]*\))", 1)):
        m = re.fullmatch(pat, e)
        if not m:
            continue
        if sign == 0:
            return m.group(1), p, set()
        v, c = (m.group(2), m.group(1)) if sign == -2 else (m.group(1), m.group(2))
        if c.count("(") != c.count(")") or re.search(r"\b%s\b" % re.escape(v), c):
            return None
        names = set(re.findall(r"[A-Za-z_]\w*", c))
        return v, (f"{p} - {_atom(c)}" if sign < 0 else f"{p} + {_atom(c)}"), names
    return None


def _inside(node: Node, outer: Node) -> bool:
    return outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte


def _full_loop(loop: Node, var: str, extent: str) -> bool:
    """`for (int var = 0; var < extent; ++var)` (any increment spelling), extent as the tile writes it."""
    init, cond, upd = (loop.child_by_field_name(k) for k in ("initializer", "condition", "update"))
    if init is None or cond is None or upd is None:
        return False
    v = re.escape(var)
    return bool(re.fullmatch(r"(?:const)?(?:unsigned)?int%s=0;?" % v, _norm(text(init))) and
                _norm(text(cond)) == f"{var}<{_norm(extent)}" and
                re.fullmatch(r"\+\+%s|%s\+\+|%s\+=1" % (v, v, v), _norm(text(upd))))


def _loop_of(node: Node, var: str, stop: Node) -> Optional[Node]:
    """The nearest loop around `node` (inside `stop`) that declares `var` in its header."""
    p = node.parent
    while p is not None and not same(p, stop):
        if p.type == "for_statement":
            init = p.child_by_field_name("initializer")
            if init is not None and re.search(r"\b%s\s*=" % re.escape(var), text(init)):
                return p
        p = p.parent
    return None


class RegisterTilePerOutput(RegisterTileOperator):
    name = "register_tile_per_output"
    skill_of = "register_tile_to_dot"  # the same optimization, another spelling: one skill
    description = "compute a register tile one output per pass: the region reruns with a scalar accumulator"

    def rewrite(self, src: Source, fn: Node, decl: Node, name: str) -> Optional[Edit]:
        idx = FunctionIndex(src, fn)
        var = next((v for v in idx.vars if v.name == name and same(v.decl, decl)), None)
        if var is None:
            return None
        if len([d for d in decl.named_children if d.type.endswith("declarator") or d.type == "identifier"]) != 1:
            return None
        init_text = ""
        if var.value is not None:
            if not _ZERO.fullmatch(text(var.value).strip()):
                return None
            inner = text(var.value).strip()[1:-1].strip()
            init_text = inner if inner else "0"
        # the two extents, as written (template parameters stay symbolic)
        d = var.declarator
        if d.type == "init_declarator":
            d = d.child_by_field_name("declarator")
        extents = []
        while d is not None and d.type == "array_declarator":
            size = d.child_by_field_name("size")
            if size is None:
                return None
            extents.insert(0, text(size))
            d = d.child_by_field_name("declarator")
        if len(extents) != 2 or d is None or d.type != "identifier":
            return None
        elem = type_text(src, decl)
        if not elem or not re.fullmatch(r"(?:const\s+)?(?:unsigned\s+)?[A-Za-z_]\w*", elem) or elem.startswith("const"):
            return None
        body = decl.parent
        if body is None or body.type != "compound_statement":
            return None
        # an early `return;` before the tile's first access leaves in the first pass exactly as before
        first = min((u.start_byte for u in walk(fn) if u.type == "identifier" and text(u) == name and
                     not _inside(u, var.declarator) and idx.visible(name, u.start_byte) is var), default=None)
        span = repeatable_region(src, idx, body, decl, name, return_before=first)
        if span is None:
            return None
        start, end = span
        pm, pn = f"ks_m_{name}", f"ks_n_{name}"
        code = src.code.decode("utf-8", "replace")
        if re.search(r"\b(%s|%s)\b" % (pm, pn), code):
            return None
        passes = (pm, pn)

        # every element access: (node replaced by the scalar, index expression per dimension)
        accesses: list[tuple[Node, list[str], list[Optional[Node]]]] = []
        for u in walk(fn):
            if u.type != "identifier" or text(u) != name or _inside(u, var.declarator) or \
                    idx.visible(name, u.start_byte) is not var:
                continue
            sub, ind = subscript_chain(u)
            if len(ind) != 2 or None in ind:
                return None
            node, exprs, plain = sub, [text(ind[0]), text(ind[1])], [ind[0], ind[1]]
            p = sub.parent
            if p is not None and p.type == "pointer_expression" and text(p).lstrip().startswith("&"):
                q = p.parent
                if q is None or q.type != "parenthesized_expression" or q.parent is None or \
                        q.parent.type != "subscript_expression" or not same(q.parent.child_by_field_name("argument"), q):
                    return None  # the tile's address escapes
                outer, extra = subscript_chain(q)
                if len(extra) != 1 or extra[0] is None:
                    return None
                node, exprs, plain = outer, [exprs[0], f"{_atom(exprs[1])} + {_atom(text(extra[0]))}"], [plain[0], None]
            elif p is not None and p.type == "pointer_expression":
                return None
            elif p is not None and p.type == "argument_list" and p.parent is not None and \
                    re.search(rb"(?m)^[ \t]*#[ \t]*define[ \t]+%s\(" % re.escape(
                        text(p.parent.child_by_field_name("function")).encode()), src.code):
                return None  # a function-like macro (`FLOAT4(acc[i][0])`) may take the element's address
            if not (start <= node.start_byte and node.end_byte <= end):
                return None
            for e in exprs:
                if name in re.findall(r"\w+", e):
                    return None
            accesses.append((node, exprs, plain))
        if not accesses:
            return None

        # loops that only work on the tile, indexed by their variable in one dimension
        candidates: dict[tuple[int, int], tuple[Node, str, int]] = {}
        for node, exprs, plain in accesses:
            for dim in (0, 1):
                if plain[dim] is None or plain[dim].type != "identifier":
                    continue
                v = text(plain[dim])
                loop = _loop_of(node, v, body)
                if loop is not None and _full_loop(loop, v, extents[dim]):
                    key = (loop.start_byte, loop.end_byte)
                    if key in candidates and candidates[key][2] != dim:
                        candidates[key] = (loop, v, -1)
                    else:
                        candidates[key] = (loop, v, dim)
        ok: dict[tuple[int, int], tuple[Node, str, int]] = {
            k: c for k, c in candidates.items() if c[2] >= 0 and self._tile_only(src, idx, c[0], c[1], c[2], name, var)}

        edits: list[Edit] = []
        guarded: dict[tuple[int, int], tuple[Node, list[str], list[Edit]]] = {}
        for node, exprs, plain in accesses:
            conds = []
            for dim in (0, 1):
                pl = plain[dim]
                covered = False
                if pl is not None and pl.type == "identifier":
                    loop = _loop_of(node, text(pl), body)
                    covered = loop is not None and (loop.start_byte, loop.end_byte) in ok and \
                        ok[(loop.start_byte, loop.end_byte)][2] == dim
                if not covered:
                    conds.append((exprs[dim], passes[dim]))
            rep = Edit(node.start_byte, node.end_byte, name)
            if not conds:
                edits.append(rep)
                continue
            st = node.parent
            while st is not None and st.type != "expression_statement":
                if st.type in ("declaration", "for_statement", "while_statement", "do_statement", "if_statement",
                               "compound_statement", "lambda_expression", "return_statement"):
                    return None  # nowhere to put the guard
                st = st.parent
            if st is None or not (start <= st.start_byte and st.end_byte <= end):
                return None
            if any(has_side_effects(n, allow_calls=False) for n in self._index_nodes(node, name)):
                return None
            key = (st.start_byte, st.end_byte)
            if key in guarded:
                if guarded[key][1] != conds:
                    return None  # two different elements in one statement
                guarded[key][2].append(rep)
            else:
                guarded[key] = (st, conds, [rep])
        edits.extend(self._solve_guards(src, idx, body, guarded))
        for st, conds, reps in guarded.values():
            new_st = splice_range(src, st.start_byte, st.end_byte, reps)
            if conds:
                new_st = "if (" + " && ".join(f"{_atom(e)} == {p}" for e, p in conds) + ") " + new_st
            edits.append(Edit(st.start_byte, st.end_byte, new_st))
        for loop, v, dim in ok.values():
            if not any(_inside(n, loop) for n, _, _ in accesses):
                continue
            init, cond = loop.child_by_field_name("initializer"), loop.child_by_field_name("condition")
            semi = ";" if text(init).rstrip().endswith(";") else ""
            edits.append(Edit(init.start_byte, init.end_byte, f"int {v} = {passes[dim]}{semi}"))
            edits.append(Edit(cond.start_byte, cond.end_byte, f"{v} < {passes[dim]} + 1"))
        # the declaration: one scalar, zero when the tile started at zero
        edits.append(Edit(decl.start_byte, decl.end_byte,
                          f"{elem} {name}" + (f" = {init_text};" if init_text else ";")))
        edits = sorted(set(edits))
        for (s1, e1, _), (s2, e2, _) in zip(edits, edits[1:]):
            if s2 < e1:
                return None

        a = src.raw.rfind(b"\n", 0, start) + 1
        if src.code[a:start].strip():
            return None
        b = src.raw.find(b"\n", end)
        b = len(src.raw) if b < 0 else b
        inner_text = splice_range(src, a, b, edits)
        ind = line_indent(src, start)
        lines = [("        " + ln if ln.strip() and not ln.lstrip().startswith("#") else ln)
                 for ln in inner_text.split("\n")]
        rep = (f"{ind}for (int {pm} = 0; {pm} < {extents[0]}; ++{pm})\n"
               f"{ind}    for (int {pn} = 0; {pn} < {extents[1]}; ++{pn}) {{\n" + "\n".join(lines))
        if b"__syncthreads" in src.code[start:end]:
            rep += f"\n{ind}        __syncthreads();  // the next output's pass refills what this one read"
        rep += f"\n{ind}    }}"
        return Edit(a, b, rep)

    @staticmethod
    def _solve_guards(src: Source, idx: FunctionIndex, body: Node, guarded: dict) -> list[Edit]:
        """Guards `v + C == pass` on the variable of an enclosing loop `for (int v = 0; v < E; ++v)`
        whose every effect outside its own locals sits in a statement guarded so (same solution):
        that loop runs the solved iteration only, `v = max(0, pass - C)` while `v < min(E, pass - C + 1)`,
        and the conjunct goes. Edits of the loop headers; `guarded` loses the solved conjuncts."""
        cands: dict[tuple[int, int], tuple[Node, str, str, str, list]] = {}
        bad: set[tuple[int, int]] = set()
        for key, (st, conds, _) in guarded.items():
            for k, (e, p) in enumerate(conds):
                sol = _solution(e, p)
                if sol is None:
                    continue
                v, value, consts = sol
                loop = _loop_of(st, v, body)
                if loop is None:
                    continue
                lk = (loop.start_byte, loop.end_byte)
                init, cond, upd = (loop.child_by_field_name(x) for x in ("initializer", "condition", "update"))
                m = re.fullmatch(r"%s<(.+)" % re.escape(v), _norm(text(cond))) if cond is not None else None
                if init is None or upd is None or m is None or \
                        not re.fullmatch(r"(?:const)?(?:unsigned)?int%s=0;?" % re.escape(v), _norm(text(init))) or \
                        not re.fullmatch(r"\+\+%s|%s\+\+|%s\+=1" % ((re.escape(v),) * 3), _norm(text(upd))):
                    continue
                extent = text(cond)[text(cond).index("<") + 1:].strip()
                if lk in cands and cands[lk][2] != value:
                    bad.add(lk)
                    continue
                cands.setdefault(lk, (loop, v, value, extent, []))[4].append((key, k, consts))
        edits = []
        drop: dict[tuple[int, int], set[int]] = {}
        for lk, (loop, v, value, extent, hits) in cands.items():
            if lk in bad:
                continue
            lb = loop.child_by_field_name("body")
            code = text(lb)
            if _SYNC.search(code) or re.search(r"\b(return|break|continue|goto|printf|assert|memcpy|memset)\b", code):
                continue
            solved = {key for key, _, _ in hits}
            consts = {c for _, _, cs in hits for c in cs}
            ok = True
            for n in walk(lb):
                target = n.child_by_field_name("left") if n.type == "assignment_expression" else \
                    n.child_by_field_name("argument") if n.type == "update_expression" else None
                if target is None:
                    continue
                base = target
                while base is not None and base.type in ("subscript_expression", "field_expression",
                                                         "parenthesized_expression", "pointer_expression"):
                    base = base.child_by_field_name("argument") if base.type != "parenthesized_expression" \
                        else (base.named_children[0] if base.named_children else None)
                if base is None or base.type != "identifier" or text(base) in consts or text(base) == v:
                    ok = False
                    break
                if any(k[0] <= n.start_byte and n.end_byte <= k[1] for k in solved):
                    continue
                w = idx.visible(text(base), base.start_byte)
                if w is None or not _inside(w.decl, loop) or w.kind == "param":
                    ok = False
                    break
            if not ok:
                continue
            init, cond = loop.child_by_field_name("initializer"), loop.child_by_field_name("condition")
            semi = ";" if text(init).rstrip().endswith(";") else ""
            edits.append(Edit(init.start_byte, init.end_byte, f"int {v} = max(0, {value}){semi}"))
            edits.append(Edit(cond.start_byte, cond.end_byte, f"{v} < min({extent}, {value} + 1)"))
            for key, k, _ in hits:
                drop.setdefault(key, set()).add(k)
        for key, ks in drop.items():
            st, conds, reps = guarded[key]
            guarded[key] = (st, [c for i, c in enumerate(conds) if i not in ks], reps)
        return edits

    @staticmethod
    def _index_nodes(node: Node, name: str) -> list[Node]:
        out = []
        for n in walk(node):
            if n.type == "subscript_expression":
                ind = n.child_by_field_name("indices")
                if ind is not None:
                    out.extend(ind.named_children)
        return out

    @staticmethod
    def _tile_only(src: Source, idx: FunctionIndex, loop: Node, v: str, dim: int, name: str, var) -> bool:
        """The loop's body writes only tile elements indexed by `v` in `dim` and variables declared in
        the loop, synchronizes nothing, never steps `v`, never leaves early."""
        lb = loop.child_by_field_name("body")
        if lb is None:
            return False
        code = text(lb)
        if _SYNC.search(code) or re.search(r"\b(return|break|goto)\b", code):
            return False
        for n in walk(lb):
            if n.type == "identifier" and text(n) == name and idx.visible(name, n.start_byte) is var:
                _, ind = subscript_chain(n)
                if len(ind) != 2 or ind[dim] is None or text(ind[dim]).strip() != v:
                    return False
            target = None
            if n.type == "assignment_expression":
                target = n.child_by_field_name("left")
            elif n.type == "update_expression":
                target = n.child_by_field_name("argument")
            elif n.type == "call_expression":
                f = n.child_by_field_name("function")
                if f is not None and re.fullmatch(r"(printf|memcpy|memset|\w*store\w*)", text(f)):
                    return False
            if target is None:
                continue
            base = target
            while base is not None and base.type in ("subscript_expression", "field_expression",
                                                     "parenthesized_expression"):
                base = base.child_by_field_name("argument") if base.type != "parenthesized_expression" \
                    else (base.named_children[0] if base.named_children else None)
            if base is None or base.type != "identifier":
                return False
            if text(base) == name:
                continue
            w = idx.visible(text(base), base.start_byte)
            if w is None or not _inside(w.decl, loop) or w.kind == "param":
                return False
            if text(base) == v:
                return False
        return True



# --------------------------------------------------------------------------- forward: fuse_output_passes
_BARRIER_OR_ATOMIC = re.compile(r"\b(__syncthreads\w*|__syncwarp|__shfl\w*|__ballot\w*|__any\w*|__all\w*|atomic\w+|"
                                r"__threadfence\w*|__pipeline\w*|asm|printf)\b")
_ATOMIC = re.compile(r"\b(atomic\w+|asm|printf)\b")
_LOOPS = ("for_statement", "while_statement", "do_statement")


class _Refuse(Exception):
    pass


def _counted(src: Source, loop: Node) -> Optional[tuple[str, str, int]]:
    """(variable, extent as written, its value) of `for (int v = 0; v < E; ++v)`, E a compile-time constant."""
    if loop.type != "for_statement":
        return None
    init, cond, upd = (loop.child_by_field_name(k) for k in ("initializer", "condition", "update"))
    if init is None or cond is None or upd is None:
        return None
    m = re.fullmatch(r"(?:const)?(?:unsigned)?int([A-Za-z_]\w*)=0;?", _norm(text(init)))
    if not m:
        return None
    v = m.group(1)
    c = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(v), " ".join(text(cond).split()))
    if not c or not re.fullmatch(r"\+\+%s|%s\+\+|%s\+=1" % ((re.escape(v),) * 3), _norm(text(upd))):
        return None
    n = int_value(src, c.group(1))
    return (v, c.group(1).strip(), n) if n else None


def _unbrace(stmt: Node) -> Node:
    while stmt.type == "compound_statement":
        inner = [c for c in stmt.named_children if c.type != "comment"]
        if len(inner) != 1:
            return stmt
        stmt = inner[0]
    return stmt


def _own_parts(node: Node) -> list[Node]:
    """The parts of a statement that run once per execution of it (its header), not its body."""
    if node.type in _LOOPS or node.type == "if_statement":
        return [c for k in ("initializer", "condition", "update") if (c := node.child_by_field_name(k)) is not None]
    return [node]


def _idents(node: Node) -> set[str]:
    return {text(n) for n in walk(node) if n.type == "identifier"}


class _Fuser:
    """One pass nest `for (P < R) for (Q < C) { BODY }` becoming one run of BODY over a register tile."""

    def __init__(self, src: Source, idx: FunctionIndex, outer: Node, inner: Node, P: str, Q: str,
                 R: str, C: str, nr: int, nc: int):
        self.src, self.idx, self.outer, self.inner = src, idx, outer, inner
        self.P, self.Q, self.R, self.C, self.nr, self.nc = P, Q, R, C, nr, nc
        self.body = inner.child_by_field_name("body")
        self.private: dict[str, str] = {}  # scalar -> element type
        self.derived: set[int] = set()  # ids of the body's inner locals that hold per-output values
        self.global_writes: list[Node] = []  # wrapped statements writing global memory
        self.fused = False  # a wrapped statement sits inside a loop that now runs once for all outputs
        self.depth = 0  # loops entered that now run once for every output
        self.pass_vars = {v.name: v for v in idx.vars if v.kind == "for" and
                          (same(v.container, outer) and v.name == P or same(v.container, inner) and v.name == Q)}

    # ---- analysis
    def mentions(self, node: Node) -> bool:
        return self.refers(node, None)

    def mentions_header(self, node: Node) -> bool:
        return node.type == "compound_statement" or any(self.mentions(p) for p in _own_parts(node))

    def refers(self, node: Node, names: Optional[set[str]]) -> bool:
        """Whether `node` reads one of `names` as the nest's pass variable or the body's private scalar
        (scope-aware: a loop of the body that declares its own `r` does not read the pass's `r`)."""
        if names is None:
            names = {self.P, self.Q} | set(self.private) | {v.name for v in self.idx.vars if id(v) in self.derived}
        for n in walk(node):
            if n.type == "identifier" and text(n) in names:
                v = self.idx.visible(text(n), n.start_byte)
                if v is not None and (v is self.pass_vars.get(text(n)) or id(v) in self.derived or
                                      (text(n) in self.private and _inside(v.decl, self.body) and
                                       same(v.decl.parent, self.body))):
                    return True
        return False

    def find_private(self) -> None:
        top = [c for c in self.body.named_children if c.type == "declaration"]
        scalars: dict[str, tuple[Node, Node]] = {}
        for d in top:
            ds = [c for c in d.named_children if c.type in ("identifier", "init_declarator", "array_declarator",
                                                            "pointer_declarator", "reference_declarator")]
            for dd in ds:
                name_node = dd.child_by_field_name("declarator") if dd.type == "init_declarator" else dd
                if name_node is not None and name_node.type == "identifier":
                    scalars[text(name_node)] = (d, dd)
        top_ids = {id(d) for d in top}
        inner = [v for v in self.idx.vars if v.kind in ("local", "for") and _inside(v.decl, self.body)
                 and id(v.decl) not in top_ids]
        changed = True
        while changed:
            changed = False
            for v in inner:  # locals of the body that hold one output's value: they live in a wrapper
                if id(v) in self.derived:
                    continue
                if (v.value is not None and self.mentions(v.value)) or any(self._d_context(w) for w in v.assigned):
                    self.derived.add(id(v))
                    changed = True
            for nm, (d, dd) in scalars.items():
                if nm in self.private:
                    continue
                value = dd.child_by_field_name("value") if dd.type == "init_declarator" else None
                hit = value is not None and self.mentions(value)
                if not hit:
                    hit = any(self._d_context(w) for w in self.writes_of(nm))
                if hit:
                    if len([c for c in d.named_children if c in (dd,) or c.type in ("init_declarator", "identifier")]) != 1:
                        raise _Refuse(f"{nm}: declared with others")
                    elem = type_text(self.src, d)
                    if not elem or not re.fullmatch(r"(?:const\s+)?(?:unsigned\s+)?[A-Za-z_]\w*", elem):
                        raise _Refuse(f"{nm}: type")
                    self.private[nm] = re.sub(r"^const\s+", "", elem)
                    changed = True

    def _d_context(self, w: Node) -> bool:
        """A write that happens in per-output context: its statement, or the header of a loop or `if`
        around it (inside the body), reads a pass variable, a private scalar or a per-output local."""
        p = w
        while p is not None and not same(p, self.body):
            if p.type in _LOOPS + ("if_statement", "expression_statement") and \
                    any(self.mentions(x) for x in _own_parts(p)):
                return True
            p = p.parent
        return False

    def writes_of(self, name: str) -> list[Node]:
        out = []
        for n in walk(self.body):
            t = n.child_by_field_name("left") if n.type == "assignment_expression" else \
                n.child_by_field_name("argument") if n.type == "update_expression" else None
            if t is not None and t.type == "identifier" and text(t) == name:
                out.append(n)
        return out

    def declared_in_body(self, name: str, at: Node) -> bool:
        v = self.idx.visible(name, at.start_byte)
        return v is not None and _inside(v.decl, self.body)

    def check_wrapped(self, s: Node) -> None:
        """A statement that now runs once per output inside a wrapper: it may only touch its own output."""
        c = src_code(self.src, s)
        if _BARRIER_OR_ATOMIC.search(c) or re.search(r"\b(return|goto)\b", c) or _bare_jump(s):
            raise _Refuse("barrier, atomic or jump in per-output work")
        for n, t, base in _writes(s):
            nm = text(base)
            v = self.idx.visible(nm, base.start_byte)
            if v is not None and v is self.pass_vars.get(nm):
                raise _Refuse("pass variable written")
            if nm in self.private and same(base, t):
                continue
            if v is not None and _inside(v.decl, s) and (v.shape != "pointer" or same(base, t)):
                continue  # its own local (a store through a local pointer is a store to memory)
            if v is not None and v.kind == "param" and v.shape == "pointer" and not same(base, t) and \
                    n.type == "assignment_expression" and text(n.child_by_field_name("operator")) == "=":
                self.global_writes.append(s)
                self.check_global_target(nm)
                continue
            if v is not None and v.kind == "local" and v.shape == "array" and not _inside(v.decl, self.outer) \
                    and not _is_shared(self.src, v.decl) and n.type == "assignment_expression" and \
                    _norm(text(t)) == f"{nm}[{self.P}][{self.Q}]":
                self.check_global_target(nm)  # a thread-local array outside the nest, one element per output
                continue
            raise _Refuse(f"per-output work writes {nm}")

    def check_global_target(self, nm: str) -> None:
        """What per-output work stores is never read inside the nest (passes would now see each other's stores)."""
        for n in walk(self.body):
            if n.type == "identifier" and text(n) == nm:
                sub = n
                while sub.parent is not None and sub.parent.type == "subscript_expression" and \
                        same(sub.parent.child_by_field_name("argument"), sub):
                    sub = sub.parent
                p = sub.parent
                if not (p is not None and p.type == "assignment_expression" and
                        same(p.child_by_field_name("left"), sub) and not same(sub, n)):
                    raise _Refuse(f"{nm} is read inside the nest")

    def check_once(self, s: Node, parts: list[Node]) -> None:
        """Work that ran once per output and now runs once: it must compute the same thing every pass
        (no in-place update of state from before the nest, no global stores, no atomics)."""
        for part in parts:
            c = src_code(self.src, part)
            if _ATOMIC.search(c):
                raise _Refuse("atomic in shared work")
            for n in walk(part):
                if n.type in ("return_statement", "goto_statement"):
                    if self.global_writes:
                        raise _Refuse("early exit after per-output stores")
                    if n.type == "goto_statement":
                        raise _Refuse("goto")
            for n, t, base in _writes(part):
                v = self.idx.visible(text(base), base.start_byte)
                if v is not None and _inside(v.decl, self.body) and (v.shape != "pointer" or same(base, t)):
                    continue
                if v is not None and _is_shared(self.src, v.decl) and n.type == "assignment_expression" and \
                        text(n.child_by_field_name("operator")) == "=":
                    continue  # refilled with the same values in every pass
                raise _Refuse(f"shared work writes {text(base)}")

    # ---- emission
    def tile(self, node: Node, edits: list[Edit], at: tuple[str, str]) -> None:
        for n in walk(node):
            if n.type == "identifier" and text(n) in self.private:
                v = self.idx.visible(text(n), n.start_byte)
                if v is None or not _inside(v.decl, self.body) or v.kind != "local":
                    raise _Refuse("shadowed name")
                edits.append(Edit(n.start_byte, n.end_byte, f"{text(n)}[{at[0]}][{at[1]}]"))

    def wrapped_text(self, s: Node, ind: str) -> str:
        edits: list[Edit] = []
        self.tile(s, edits, (self.P, self.Q))
        return _lead(self.src, s) + _moved(self.src, s, splice_range(self.src, s.start_byte, s.end_byte, edits), ind)

    def _pinned(self, loop: Node, pv: str, ext: int) -> Optional[str]:
        """The variable of `for (int i = P; i < P + 1; ++i)` (also `max(0, P - 0)` / `min(E, P - 0 + 1)`
        with E the tile's extent, register_tile_per_output's spelling): inside the wrapper it runs
        i = P only, so over all passes it runs i = 0 .. extent - 1 once each, in order."""
        if loop.type != "for_statement":
            return None
        init, cond, upd = (loop.child_by_field_name(k) for k in ("initializer", "condition", "update"))
        if init is None or cond is None or upd is None:
            return None
        val = r"%s(?:[-+]0)?" % re.escape(pv)
        m = re.fullmatch(r"int([A-Za-z_]\w*)=(?:%s|max\(0,%s\));?" % (val, val), _norm(text(init)))
        if not m:
            return None
        v = m.group(1)
        e = re.fullmatch(r"%s<(?:%s\+1|min\((.+),%s\+1\))" % (re.escape(v), val, val), _norm(text(cond)))
        if not e or (e.group(1) is not None and int_value(self.src, e.group(1)) != ext) or \
                not re.fullmatch(r"\+\+%s|%s\+\+|%s\+=1" % ((re.escape(v),) * 3), _norm(text(upd))):
            return None
        if any(b is not None and text(b) == v for _, _, b in _all_writes(loop.child_by_field_name("body"))):
            return None
        return v

    def restricted(self, s: Node) -> Optional[str]:
        """Per-output work `for (i pinned to P) { D; for (j pinned to Q) S }` (see `_pinned`) is the
        full nest over the tile, i = P and j = Q: the loops run every row and column once, in the
        wrapper's order, and the statements D between them (which read neither Q nor the tile and
        write only their own locals) run once per row as they ran once per (row, column) before."""
        i = self._pinned(s, self.P, self.nr)
        if i is None:
            return None
        body = s.child_by_field_name("body")
        stmts = [c for c in body.named_children if c.type != "comment"] if body.type == "compound_statement" \
            else [body]
        js = [(k, self._pinned(c, self.Q, self.nc)) for k, c in enumerate(stmts)]
        js = [(k, j) for k, j in js if j is not None]
        if len(js) != 1:
            return None
        k, j = js[0]
        inner = stmts[k]
        for c in stmts[:k] + stmts[k + 1:]:
            if self.refers(c, {self.P, self.Q} | set(self.private)):
                return None
            for _, _, base in _all_writes(c):
                v = self.idx.visible(text(base), base.start_byte) if base is not None else None
                if v is None or not _inside(v.decl, s):
                    return None
        ib = inner.child_by_field_name("body")
        if self.refers(ib, {self.P, self.Q}):
            return None
        edits: list[Edit] = []
        self.tile(ib, edits, (i, j))
        for loop, v, ext in ((s, i, self.R), (inner, j, self.C)):
            init, cond = loop.child_by_field_name("initializer"), loop.child_by_field_name("condition")
            semi = ";" if text(init).rstrip().endswith(";") else ""
            edits.append(Edit(init.start_byte, init.end_byte, f"int {v} = 0{semi}"))
            edits.append(Edit(cond.start_byte, cond.end_byte, f"{v} < {ext}"))
        return splice_range(self.src, s.start_byte, s.end_byte, edits)

    def block(self, stmts: list[Node], ind: str, top: bool) -> list[str]:
        out: list[str] = []
        group: list[str] = []
        group_decls = False
        open_names: set[str] = set()  # declared by the pending group's statements
        closed: set[str] = set()  # declared inside a wrapper already closed: out of scope now

        def flush():
            nonlocal group, group_decls
            closed.update(open_names)
            open_names.clear()
            if group:
                out.append(f"{ind}for (int {self.P} = 0; {self.P} < {self.R}; ++{self.P})\n"
                           f"{ind}    for (int {self.Q} = 0; {self.Q} < {self.C}; ++{self.Q}) {{\n" +
                           "\n".join(group) + f"\n{ind}    }}")
            group, group_decls = [], False

        def flush_before(s: Node):
            if _idents(s) & open_names:
                raise _Refuse("a per-output local is read outside its wrapper")
            flush()

        for s in stmts:
            if s.type == "comment":
                (group if group else out).append(ind + text(s))
                continue
            if _idents(s) & closed:
                raise _Refuse("a per-output local is read after its wrapper")
            if top and s.type == "declaration" and _idents(s) & set(self.private) and \
                    any(text(d.child_by_field_name("declarator") if d.type == "init_declarator" else d) in self.private
                        for d in s.named_children if d.type in ("identifier", "init_declarator")):
                flush_before(s)
                dd = next(d for d in s.named_children if d.type in ("identifier", "init_declarator"))
                nm = text(dd.child_by_field_name("declarator") if dd.type == "init_declarator" else dd)
                value = dd.child_by_field_name("value") if dd.type == "init_declarator" else None
                # `= 0` is register_tile_per_output's spelling of a zero initialiser list
                zero = value is not None and text(value).strip() == "0"
                out.append(f"{ind}{self.private[nm]} {nm}[{self.R}][{self.C}]" + (" = {};" if zero else ";"))
                if value is not None and not zero:
                    edits: list[Edit] = []
                    self.tile(value, edits, (self.P, self.Q))
                    v = splice_range(self.src, value.start_byte, value.end_byte, edits)
                    out.append(f"{ind}for (int {self.P} = 0; {self.P} < {self.R}; ++{self.P})\n"
                               f"{ind}    for (int {self.Q} = 0; {self.Q} < {self.C}; ++{self.Q}) "
                               f"{nm}[{self.P}][{self.Q}] = {v};")
                continue
            if not self.mentions(s):
                flush_before(s)
                self.check_once(s, [s])
                out.append(_lead(self.src, s) + _moved(self.src, s, text_of(self.src, s), ind))
                continue
            inner_stmts = [c for c in s.named_children if c.type != "comment"]
            if s.type == "compound_statement" and inner_stmts and all(self.mentions(c) for c in inner_stmts) and \
                    not any(c.type in _LOOPS + ("compound_statement", "if_statement") and
                            not self.mentions_header(c) for c in inner_stmts):
                self.check_wrapped(s)
                self.fused = self.fused or self.depth > 0
                for c in s.named_children:
                    group.append(self.wrapped_text(c, ind + "        "))
                    if c.type == "declaration":
                        open_names.update(declared_within(self.src, c))
                        group_decls = True
                continue
            if s.type == "compound_statement":
                flush_before(s)
                out.append(f"{ind}{{\n" + "\n".join(self.block(list(s.named_children), ind + "    ", False)) +
                           f"\n{ind}}}")
                continue
            body = s.child_by_field_name("body") if s.type in _LOOPS else \
                s.child_by_field_name("consequence") if s.type == "if_statement" else None
            if body is not None and not any(self.mentions(p) for p in _own_parts(s)) and \
                    (s.type != "if_statement" or s.child_by_field_name("alternative") is None):
                flush_before(s)
                self.check_once(s, _own_parts(s))
                head = text_of(self.src, s, s.start_byte, body.start_byte).rstrip()
                if s.type == "do_statement":
                    raise _Refuse("do loop")
                inner = list(body.named_children) if body.type == "compound_statement" else [body]
                self.depth += s.type in _LOOPS
                lines = self.block(inner, ind + "    ", False)
                self.depth -= s.type in _LOOPS
                out.append(_lead(self.src, s) + _moved(self.src, s, head, ind) + " {\n" + "\n".join(lines) + f"\n{ind}}}")
                continue
            # per-output work
            self.check_wrapped(s)
            full = self.restricted(s)
            if full is not None and not group_decls:
                flush_before(s)
                self.fused = self.fused or self.depth > 0
                out.append(_lead(self.src, s) + _moved(self.src, s, full, ind))
                continue
            self.fused = self.fused or self.depth > 0
            group.append(self.wrapped_text(s, ind + "        "))
            if s.type == "declaration":
                open_names.update(declared_within(self.src, s))
            group_decls = group_decls or s.type == "declaration"
        flush()
        return out


def _moved(src: Source, node: Node, block: str, ind: str) -> str:
    """A statement's text moved from its line's indentation to `ind` (relative indentation kept)."""
    old = line_indent(src, node.start_byte)
    lines = block.split("\n")
    return "\n".join([ind + lines[0].lstrip()] + [
        ln if ln.lstrip().startswith("#") else (ind + ln[len(old):] if ln.startswith(old) else ind + ln.lstrip())
        if ln.strip() else "" for ln in lines[1:]])


def _lead(src: Source, node: Node) -> str:
    """The `#pragma` lines directly above a statement (not part of its node), verbatim."""
    start = src.raw.rfind(b"\n", 0, node.start_byte) + 1
    if src.code[start:node.start_byte].strip():
        return ""
    first = start
    while True:
        b = src.code.rfind(b"\n", 0, first - 1) + 1 if first > 0 else 0
        if first == 0 or not re.match(rb"[ \t]*#[ \t]*pragma\b", src.code[b:first]):
            break
        first = b
    return src.raw[first:start].decode("utf-8", "replace")


def src_code(src: Source, node: Node) -> str:
    return src.code[node.start_byte:node.end_byte].decode("utf-8", "replace")


def text_of(src: Source, node: Node, start: Optional[int] = None, end: Optional[int] = None) -> str:
    return src.raw[node.start_byte if start is None else start:node.end_byte if end is None else end].decode(
        "utf-8", "replace")


def _all_writes(node: Node):
    """(assignment or ++/--, its target, the target's base identifier or None) of every write in `node`."""
    for n in walk(node):
        t = n.child_by_field_name("left") if n.type == "assignment_expression" else \
            n.child_by_field_name("argument") if n.type == "update_expression" else None
        if t is not None:
            yield n, t, _base(t)


def _writes(node: Node):
    """`_all_writes`, a write whose target has no base identifier refused."""
    for n, t, base in _all_writes(node):
        if base is None:
            raise _Refuse("write through an expression")
        yield n, t, base


def _base(t: Node) -> Optional[Node]:
    """The variable a write lands in: through subscripts, fields, `*`/`&`, casts and
    `reinterpret_cast<...>(...)`; None when it is anything else (a call's result, pointer arithmetic)."""
    base = t
    while base is not None and base.type != "identifier":
        if base.type in ("subscript_expression", "field_expression", "pointer_expression"):
            base = base.child_by_field_name("argument")
        elif base.type == "parenthesized_expression":
            base = base.named_children[0] if base.named_children else None
        elif base.type == "cast_expression":
            base = base.child_by_field_name("value")
        elif base.type == "call_expression" and re.match(r"(reinterpret|static)_cast\b",
                                                          text(base.child_by_field_name("function"))):
            args = base.child_by_field_name("arguments")
            base = args.named_children[0] if args is not None and len(args.named_children) == 1 else None
        else:
            return None
    return base


def _bare_jump(node: Node) -> bool:
    """A break/continue whose loop (or switch) is not `node` or inside it: it would leave `node`."""
    for n in walk(node):
        if n.type not in ("break_statement", "continue_statement"):
            continue
        p = n.parent
        while p is not None:
            if p.type in _LOOPS or (p.type == "switch_statement" and n.type == "break_statement"):
                break
            if same(p, node):
                return True
            p = p.parent
        if p is None or not _inside(p, node):
            return True
    return False


def _is_shared(src: Source, decl: Node) -> bool:
    return b"__shared__" in src.code[decl.start_byte:decl.end_byte]


def _fuse(src: Source, fn: Node, outer: Node) -> Optional[tuple[Edit, str]]:
    o = _counted(src, outer)
    if o is None:
        return None
    inner = _unbrace(outer.child_by_field_name("body"))
    i = _counted(src, inner)
    if i is None or inner.child_by_field_name("body") is None or \
            inner.child_by_field_name("body").type != "compound_statement" or o[0] == i[0] or o[2] * i[2] < 2:
        return None
    idx = FunctionIndex(src, fn)
    f = _Fuser(src, idx, outer, inner, o[0], i[0], o[1], i[1], o[2], i[2])
    body = f.body
    try:
        if _bare_jump(body):
            return None
        f.find_private()
        if not f.private:
            return None
        for nm in f.private:  # declared once in the body, never passed by address
            if sum(1 for v in idx.vars if v.name == nm and _inside(v.decl, body)) != 1:
                return None
            for n in walk(body):
                if n.type == "identifier" and text(n) == nm and n.parent is not None and \
                        n.parent.type == "pointer_expression" and text(n.parent).lstrip().startswith("&"):
                    return None
        lines = f.block([c for c in body.named_children], line_indent(src, outer.start_byte), True)
    except _Refuse:
        return None
    if len({id(s) for s in f.global_writes}) > 1 or not f.fused:
        return None
    new = "\n".join(lines)
    # nothing that is per output may stay wrapped around a loop: then nothing was fused
    if not re.search(r"\[\s*\w+\s*\]\s*\[\s*\w+\s*\]", new):
        return None
    ind = line_indent(src, outer.start_byte)
    # the barrier that closed each pass (register_tile_per_output's) goes when nothing follows the nest
    tail = re.compile(r"\n%s__syncthreads\(\);(?:  //[^\n]*)?$" % re.escape(ind))
    if outer.parent is not None and outer.parent.type == "compound_statement" and \
            outer.parent.parent is not None and outer.parent.parent.type == "function_definition" and \
            not [c for c in outer.parent.named_children if c.start_byte > outer.end_byte and c.type != "comment"]:
        new = tail.sub("", new)
    start = src.raw.rfind(b"\n", 0, outer.start_byte) + 1
    if src.code[start:outer.start_byte].strip():
        return None
    start -= len(_lead(src, outer).encode())
    names = ", ".join(f.private)
    return Edit(start, outer.end_byte, new), f"{names}: {o[2]} x {i[2]} outputs per thread in one pass, " \
                                              f"an outer-product register tile"


def fuse_output_passes(source: str, ctx: Context) -> list[Materialization]:
    """Per-output passes of a thread (`for (P < R) for (Q < C) { T acc = 0; ...reduction...; store; }`)
    become one pass over an R x C register tile (see the module's docstring, "Forward")."""
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        for loop in walk(k.body):
            if loop.type != "for_statement":
                continue
            r = _fuse(src, k.node, loop)
            if r is not None:
                out.append(candidate(src, [r[0]], "fuse_output_passes", f"{k.name}: {r[1]}",
                                     excerpt=" ".join(text(loop).split())[:160]))
    return out


PAIR = Pair(RegisterTilePerOutput, (Rewrite("fuse_output_passes", "register_tile", fuse_output_passes, prior=3.0),))
