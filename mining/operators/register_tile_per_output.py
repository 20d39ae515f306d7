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

Forward: none here, as for `shrink_register_tile`; `stage_matmul_tiles` (shared_tile_to_global.py)
writes register tiles of R x R outputs per thread for one-output-per-thread matmuls.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import same
from corpora.code.parse import text, walk
from corpora.code.source import Source
from mining.operators.base import Edit, Pair
from mining.operators.nodes import FunctionIndex, subscript_chain
from mining.operators.rewrite_util import has_side_effects, line_indent, splice_range, type_text
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


PAIR = Pair(RegisterTilePerOutput)
