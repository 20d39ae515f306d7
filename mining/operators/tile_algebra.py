"""Forwarding a shared tile whatever its fill looks like, by solving the fill's index equations
(issue 19: forwarding of shared tiles filled by multi-row loops and transposed stores).

`fill_forwarding` replaces a fill index by the reader's only where the index stands as a whole
summand of the value. Tiles filled by loops over several rows per thread, through locals that mix
the thread's coordinates, do not have that shape:

    int x = bx * T + threadIdx.x, y = by * T + threadIdx.y, in = x + y * w;
    for (int i = 0; i < T; i += R) tile[threadIdx.y + i][threadIdx.x] = idata[in + i * w];
    __syncthreads();
    for (int i = 0; i < T; i += R) odata[out + i * h] = tile[threadIdx.x][threadIdx.y + i];

Here the value's index, with the locals inlined, is the polynomial bx*T + tx + (by*T + ty)*w + i*w;
the fill indices are r = ty + i and c = tx. Solving them for the writer's unknowns (ty = r - i,
tx = c) and substituting gives bx*T + c + (by*T + r)*w: the writer's loop variable cancels, so
the element at (r, c) holds idata[bx*T + c + (by*T + r)*w] whoever wrote it. Each read
`tile[a][b]` becomes that value at r = a, c = b; the fill (with its loop) and the tile go.

Why it is sound: the substitution is exact integer algebra (sympy over the integers; every
coefficient of the result must be an integer, and no writer unknown may remain), so the value
the reader gets is the one the fill stored at that element; the writer-independent symbols
(block indices, sizes, locals computed from them) must not change between the fill and the
reads, the value may read only global memory the kernel never writes, and the fill must be the
tile's only write, before a barrier that precedes every read, outside any loop that also holds
reads. A guarded fill (`if (r < R && c < C) tile[..] = ..;`) gives the reads `(G) ? value : 0`
with the guard solved the same way: an element the guard skipped was never written, so the
original read there was undefined. Whether the fill covered every element read is not proven
(as in fill_forwarding): an element nobody wrote was undefined before; the gate judges the result.

Tiles filled from registers (issue 19):

* Lane stores. Consecutive stores `T[i][4 * x + k] = v.<k>` (k = 0..3) of a register vector built
  once (`v = make_float4(..)`), of a prefetch array (`for (q..) r[q] = E(q); T[..][..+k] = r[k]`),
  or one wide store `FLOAT4(T[i][j]) = FLOAT4(r[0])` (split into its lanes) are one store with a
  lane unknown n in [0, k): the index equation `c = k * u + n` is solved as u = c / k, n = c % k
  (exact for non-negative indices), every lane's value must be the template's at its n.
* Writer-dependent divisions, remainders and masks in a fill index (`tid / 2`, `(tid & 1) << 2`,
  a shift by a constant is a product) are unknowns of their own (atoms): the value must depend on
  the writer only through the same terms. In a value they are evaluated at the solved writer.
* The fill and its reads may sit in one block under `if`s without `else` (their conditions guard
  the value) or in one iteration of a loop (then no guard inside the loop: a skipped fill would
  leave the last iteration's element).
* `pipelined_forward`: a tile filled before `for (v = A; v < N; ++v)` and refilled at the end of
  its body (after the body's reads, between barriers). The body's reads at v see the refill of
  v - 1 (the prologue's at v = A), the reads after the loop the last refill (the prologue's when
  the loop does not run): when the refill's value at v = A - 1 is the prologue's, the body's reads
  get the refill's value at v - 1 and the later ones at `max(A, N) - 1`. Reads through a row
  pointer `(&T[i][j])[c]` are read as `T[i][j + c]`.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.carriers_meaning import type_bytes, wide_accesses
from mining.operators.base import Edit
from mining.operators.rewrite_util import splice_range
from corpora.code.parse import text, walk

_FIELD = re.compile(r"^(threadIdx|blockIdx|blockDim|gridDim)\.([xyz])$")
_THREAD = {"ks_f_threadIdx_x", "ks_f_threadIdx_y", "ks_f_threadIdx_z"}
_SELECT = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
_LANES = {"x": 0, "y": 1, "z": 2, "w": 3}
_BARRIER = re.compile(r"^(__syncthreads\s*\(\s*\)|(\w+::)*sync\s*\(\s*\w+\s*\)|\w+\s*\.\s*sync\s*\(\s*\))\s*;$")


class NotAlgebra(Exception):
    pass


def _top_stmt(node: Node, body: Node) -> Optional[Node]:
    """The statement of the function body that contains node."""
    p = node
    while p is not None and p.parent is not None and not (p.parent.start_byte == body.start_byte and
                                                          p.parent.end_byte == body.end_byte):
        p = p.parent
    return p


class IndexAlgebra:
    """sympy translation of C index arithmetic (+, -, *, integer literals, names, launch fields,
    subscripts of read-only pointers as uninterpreted functions)."""

    def __init__(self, src: Source, body: Node, fill_top: Node, writer_loops: list[Node], readonly: set[str]):
        import sympy
        self.sp = sympy
        self.src, self.body, self.fill_top = src, body, fill_top
        self.loop_vars = {}
        for lp in writer_loops:
            init = lp.child_by_field_name("initializer")
            m = re.search(r"\b(?:int|unsigned|size_t|long)?\s*(\w+)\s*=", text(init)) if init is not None else None
            if m is None:
                raise NotAlgebra("loop variable")
            self.loop_vars[m.group(1)] = lp
        self.readonly = readonly
        self.functions: dict[str, object] = {}
        self.invariant_names: set[str] = set()
        self.symbols: dict[str, object] = {}
        self.opaque_ok = False  # set while translating a value (selects, float constants, registers)
        self.bound: dict[str, int] = {}
        self.inline_within: Optional[tuple[int, int]] = None  # a register-load loop's variable, fixed to the lane read
        self.earliest = fill_top.start_byte  # the first statement the value was read from

    def sym(self, name: str):
        if name not in self.symbols:
            self.symbols[name] = self.sp.Symbol(name, integer=True)
        return self.symbols[name]

    def writer_unknowns(self, expr) -> set:
        return {s for s in expr.free_symbols if s.name in _THREAD or s.name in self.loop_vars or
                s.name.startswith("ks_atom_")}

    # ---- locals: the definition that reaches a position, straight-line at the top of the body
    def _reaching(self, name: str, before: int) -> Optional[Node]:
        """The definition of local `name` that reaches position `before`: the nearest earlier
        statement of an enclosing block that writes it, if that statement is its declaration or a
        plain `name = ...;` (a write nested in a branch or loop: None)."""
        node = self.body.descendant_for_byte_range(before, before)
        blocks = []
        while node is not None:
            if node.type == "compound_statement":
                blocks.append(node)
            if node.start_byte == self.body.start_byte and node.end_byte == self.body.end_byte:
                break
            node = node.parent
        for blk in blocks:
            for st in reversed([c for c in blk.named_children if c.end_byte <= before]):
                for n in walk(st):
                    if n.type == "init_declarator" and n.child_by_field_name("declarator") is not None and \
                            n.child_by_field_name("declarator").type == "identifier" and \
                            text(n.child_by_field_name("declarator")) == name:
                        ok = st.type == "declaration" and not self._rewritten_in_loop(name, before, blk)
                        return n.child_by_field_name("value") if ok else None
                    if n.type == "assignment_expression" and text(n.child_by_field_name("left")) == name:
                        if st.type != "expression_statement" or text(n.children[1]) != "=" or \
                                self._rewritten_in_loop(name, before, blk):
                            return None  # assigned under a branch or a loop: not straight-line
                        return n.child_by_field_name("right")
        return None

    def _thread_dependent(self, name: str, seen=None) -> bool:
        """Some assignment to `name` anywhere in the body reads the thread index (or such a local)."""
        seen = set() if seen is None else seen
        if name in seen:
            return False
        seen.add(name)
        for n in walk(self.body):
            value = None
            if n.type == "init_declarator" and n.child_by_field_name("declarator") is not None and \
                    text(n.child_by_field_name("declarator")) == name:
                value = n.child_by_field_name("value")
            elif n.type == "assignment_expression" and text(n.child_by_field_name("left")) == name:
                value = n.child_by_field_name("right")
            if value is None:
                continue
            t = text(value)
            if re.search(r"\bthreadIdx\b", t):
                return True
            for ident in set(re.findall(r"\b[A-Za-z_]\w*\b", t)):
                if ident != name and self._is_local(ident) and self._thread_dependent(ident, seen):
                    return True
        return False

    def _vector_lane(self, node: Node, pos: int) -> Optional[Node]:
        """`v.y` of a register vector built once as `v = make_float4(a, b, c, d)` (never assigned
        again, its address never taken): the lane's expression `b`."""
        arg, fld = node.child_by_field_name("argument"), node.child_by_field_name("field")
        if arg is None or fld is None or arg.type != "identifier" or text(fld) not in _LANES:
            return None
        name, init = text(arg), None
        for n in walk(self.body):
            if n.type == "init_declarator" and n.child_by_field_name("declarator") is not None and \
                    text(n.child_by_field_name("declarator")) == name:
                if init is not None or n.start_byte >= pos:
                    return None
                init = n.child_by_field_name("value")
            elif n.type == "identifier" and text(n) == name and not _lane_read(n):
                return None  # passed whole (by reference, through a cast macro) or written: not fixed
        if init is None or init.type != "call_expression":
            return None
        callee = init.child_by_field_name("function")
        m = re.fullmatch(r"make_\w+?([1-4])", text(callee)) if callee is not None else None
        args = init.child_by_field_name("arguments")
        lanes = [c for c in (args.named_children if args is not None else []) if c.type != "comment"]
        k = _LANES[text(fld)]
        if m is None or len(lanes) != int(m.group(1)) or k >= len(lanes):
            return None
        return lanes[k]

    def _select(self, cond: Node, a, b, pos: int, depth: int):
        while cond.type in ("parenthesized_expression", "condition_clause") and len(cond.named_children) == 1:
            cond = cond.named_children[0]
        if cond.type != "binary_expression":
            raise NotAlgebra("condition")
        op = text(cond.child_by_field_name("operator") or cond.children[1])
        left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
        if op == "&&":
            return self._select(left, self._select(right, a, b, pos, depth + 1), b, pos, depth + 1)
        if op == "||":
            return self._select(left, a, self._select(right, a, b, pos, depth + 1), pos, depth + 1)
        if op not in _SELECT:
            raise NotAlgebra(f"condition {op}")
        fn = self.sp.Function("ks_sel_" + _SELECT[op])
        return fn(self.expr(left, pos, depth + 1), self.expr(right, pos, depth + 1), a, b)

    def _register_lane(self, name: str, lane: int, pos: int) -> Optional[tuple[Node, dict[str, int]]]:
        """`r[lane]` of a per-thread register array, from the nearest earlier statement of an
        enclosing block that writes `r`: `r[c] = E;` (c == lane; another constant is skipped) or a
        prefetch loop `for (int v = 0; v < n; ++v) r[v] = E;` -> (E, {v: lane}). Any other write
        (under a branch, through a pointer, a vector cast): None."""
        decl = [n for n in walk(self.body) if n.type == "declaration" and not re.search(r"\b__shared__\b", text(n)) and
                any(d.type == "array_declarator" and text(d).split("[")[0].strip() == name for d in walk(n))]
        if len(decl) != 1:
            return None
        node = self.body.descendant_for_byte_range(pos, pos)
        blocks = []
        while node is not None:
            if node.type == "compound_statement":
                blocks.append(node)
            if node.start_byte == self.body.start_byte and node.end_byte == self.body.end_byte:
                break
            node = node.parent
        word = re.compile(r"\b%s\b" % re.escape(name))
        for blk in blocks:
            for st in reversed([c for c in blk.named_children if c.end_byte <= pos]):
                if not word.search(text(st)) or st.start_byte == decl[0].start_byte:
                    continue
                if st.type == "expression_statement":
                    m = re.fullmatch(r"%s\s*\[\s*(\d+)\s*\]\s*=([^=].*);" % re.escape(name), text(st), re.S)
                    if m is None:
                        if any(n.type == "assignment_expression" and word.search(text(n.child_by_field_name("left")))
                               for n in walk(st)) or re.search(r"&\s*\(?\s*%s\b" % re.escape(name), text(st)):
                            return None
                        continue  # a read of the array
                    if int(m.group(1)) != lane:
                        continue
                    if self._rewritten_in_loop(name, pos, blk):
                        return None
                    asg = next(n for n in walk(st) if n.type == "assignment_expression")
                    self.earliest = min(self.earliest, st.start_byte)
                    return asg.child_by_field_name("right"), {}
                if st.type == "for_statement":
                    m = re.fullmatch(r"for\s*\(\s*(?:int|unsigned)?\s*(\w+)\s*=\s*0\s*;\s*\1\s*<\s*(\d+)\s*;\s*"
                                     r"(?:\+\+\s*\1|\1\s*\+\+|\1\s*\+=\s*1)\s*\)\s*\{?\s*%s\s*\[\s*\1\s*\]\s*=([^=;]*);\s*\}?"
                                     % re.escape(name), text(st), re.S)
                    if m is None or not 0 <= lane < int(m.group(2)) or self._rewritten_in_loop(name, pos, blk):
                        return None
                    asg = next(n for n in walk(st) if n.type == "assignment_expression")
                    self.earliest = min(self.earliest, st.start_byte)
                    return asg.child_by_field_name("right"), {m.group(1): lane}
                return None
        return None

    def _rewritten_in_loop(self, name: str, pos: int, blk: Node) -> bool:
        """Some loop inside `blk` around `pos` writes `name` anywhere: from its second iteration
        on, the value at `pos` may be that write's, not the definition found before the loop."""
        word = re.compile(r"\b%s\b" % re.escape(name))
        node = self.body.descendant_for_byte_range(pos, pos)
        while node is not None and not (node.start_byte == blk.start_byte and node.end_byte == blk.end_byte):
            if node.type in ("for_statement", "while_statement", "do_statement"):
                for n in walk(node):
                    if n.type in ("assignment_expression", "update_expression"):
                        target = n.child_by_field_name("left") or n.child_by_field_name("argument")
                        target = _written_base(target)
                        if target is None or (target.type == "identifier" and text(target) == name) or \
                                (target.type != "identifier" and word.search(text(target))):
                            return True  # the variable itself, or a write through something naming it
                    elif n.type == "pointer_expression" and n.children[0].type == "&" and word.search(text(n)):
                        return True
            node = node.parent
        return False

    def _declared_within(self, name: str) -> bool:
        """A local declared inside `inline_within` (a pipelined loop: its per-iteration values are
        followed to their definitions, so that they can be taken at another iteration)."""
        if self.inline_within is None:
            return False
        lo, hi = self.inline_within
        return any(n.type == "init_declarator" and n.child_by_field_name("declarator") is not None and
                   text(n.child_by_field_name("declarator")) == name and lo <= n.start_byte < hi for n in walk(self.body))

    def _is_local(self, name: str) -> bool:
        return any(n.type == "init_declarator" and n.child_by_field_name("declarator") is not None and
                   text(n.child_by_field_name("declarator")) == name for n in walk(self.body))

    def expr(self, node: Node, pos: int, depth: int = 0):
        sp = self.sp
        if depth > 40:
            raise NotAlgebra("too deep")
        t = node.type
        if t == "parenthesized_expression":
            return self.expr(node.named_children[0], pos, depth + 1)
        if t == "number_literal":
            s = text(node).rstrip("uUlL")
            if not re.fullmatch(r"\d+|0[xX][0-9a-fA-F]+", s):
                if not self.opaque_ok or not re.fullmatch(r"[\d.]+(?:[eE][-+]?\d+)?[fF]?", text(node)):
                    raise NotAlgebra("literal")
                # a floating constant of a value: carried as an opaque symbol, printed as written
                return self.sym("ks_lit_" + re.sub(r"\W", "_", text(node)))
            return sp.Integer(int(s, 0))
        if t == "field_expression":
            m = _FIELD.match("".join(text(node).split()))
            if not m:
                lane = self._vector_lane(node, pos)
                if lane is None:
                    raise NotAlgebra("field")
                return self.expr(lane, lane.start_byte, depth + 1)
            return self.sym(f"ks_f_{m.group(1)}_{m.group(2)}")  # never a C identifier of the kernel
        if t == "identifier":
            name = text(node)
            if name in self.bound:
                return self.sp.Integer(self.bound[name])
            if name in self.loop_vars:
                return self.sym(name)
            if self._is_local(name) and (self._thread_dependent(name) or self._declared_within(name)):
                value = self._reaching(name, pos)
                if value is None:
                    raise NotAlgebra(f"no straight-line definition of {name}")
                return self.expr(value, value.start_byte, depth + 1)
            self.invariant_names.add(name)
            return self.sym(name)
        if t == "binary_expression":
            op = text(node.child_by_field_name("operator") or node.children[1])
            a = self.expr(node.child_by_field_name("left"), pos, depth + 1)
            b = self.expr(node.child_by_field_name("right"), pos, depth + 1)
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "<<" and b.is_Integer and 0 <= int(b) < 32:
                return a * 2 ** int(b)
            if op in ("/", "%", "<<", ">>", "&") and not self.writer_unknowns(b):
                # a value may divide a writer's coordinate: it is evaluated at the solved
                # coordinate; in a fill index the whole term becomes one unknown (an atom)
                fn = self.sp.Function({"/": "ks_div", "%": "ks_mod", "<<": "ks_shl", ">>": "ks_shr", "&": "ks_and"}[op])
                return fn(a, b)
            raise NotAlgebra(f"operator {op}")
        if t == "conditional_expression" and self.opaque_ok:
            # `c ? a : b` in a value: evaluated at the solved coordinates, never solved through
            return self._select(node.child_by_field_name("condition"), self.expr(node.child_by_field_name("consequence"),
                                pos, depth + 1), self.expr(node.child_by_field_name("alternative"), pos, depth + 1),
                                pos, depth + 1)
        if t == "unary_expression" and text(node.children[0]) == "-":
            return -self.expr(node.child_by_field_name("argument"), pos, depth + 1)
        if t == "subscript_expression":
            return self.element(node, 0, pos, depth)
        if t == "cast_expression":
            return self.expr(node.child_by_field_name("value"), pos, depth + 1)
        raise NotAlgebra(t)

    def element(self, node: Node, offset: int, pos: int, depth: int = 0):
        """The value of `p[i + offset]` for the subscript `p[i]`: a load of read-only global memory,
        or the register lane's value (see _register_lane)."""
        if node.type != "subscript_expression":
            raise NotAlgebra("element")
        base = node.child_by_field_name("argument")
        while base is not None and base.type == "parenthesized_expression" and len(base.named_children) == 1:
            base = base.named_children[0]  # `(x)[i]`, as devectorizing rewrites print it
        idx = node.child_by_field_name("indices")
        inner = [c for c in (idx.named_children if idx is not None else []) if c.type != "comment"]
        if base is not None and base.type == "identifier" and len(inner) == 1 and \
                text(base) not in self.readonly and self.opaque_ok:
            lane = self.expr(inner[0], pos, depth + 1) + offset
            if lane.is_Integer:
                got = self._register_lane(text(base), int(lane), pos)
                if got is not None:
                    value, bind = got
                    saved = dict(self.bound)
                    self.bound.update(bind)
                    try:
                        return self.expr(value, value.start_byte, depth + 1)
                    finally:
                        self.bound = saved
        if base is None or base.type != "identifier" or text(base) not in self.readonly or len(inner) != 1:
            raise NotAlgebra("subscript")
        fn = self.functions.setdefault(text(base), self.sp.Function("ks_load_" + text(base)))
        return fn(self.expr(inner[0], pos, depth + 1) + offset)


def to_c(expr, names: dict[str, str]) -> str:
    """C text of a sympy expression built by IndexAlgebra (names: symbol -> C spelling)."""
    import sympy
    if isinstance(expr, sympy.Integer):
        v = int(expr)
        return str(v) if v >= 0 else f"({v})"
    if isinstance(expr, sympy.Symbol):
        return names.get(expr.name, expr.name)
    if isinstance(expr, sympy.Add):
        parts = [to_c(a, names) for a in sympy.Add.make_args(expr)]
        pos = [p for p in parts if not p.startswith("(-")]
        neg = [p[2:-1] if p.startswith("(-") and p.endswith(")") and re.fullmatch(r"\(-[\w.]+\)", p) else None
               for p in parts if p.startswith("(-")]
        out = " + ".join(pos) if pos else "0"
        for p, n in zip([p for p in parts if p.startswith("(-")], neg):
            out += f" - {n}" if n is not None else f" + {p}"
        return out
    if isinstance(expr, sympy.Mul):
        coeff, rest = expr.as_coeff_Mul()
        factors = [to_c(f, names) for f in sympy.Mul.make_args(rest)]
        factors = [f if re.fullmatch(r"[\w.]+|\w+\(.*\)", f) else f"({f})" for f in factors]
        if coeff == 1:
            return " * ".join(factors)
        if coeff == -1:
            return "(-" + " * ".join(factors) + ")"
        return f"({to_c(coeff, names)} * " + " * ".join(factors) + ")" if coeff < 0 else \
            f"{to_c(coeff, names)} * " + " * ".join(factors)
    if isinstance(expr, sympy.Function) or isinstance(expr, sympy.core.function.AppliedUndef):
        name = type(expr).__name__
        args = [to_c(a, names) for a in expr.args]
        ops = {"ks_div": "/", "ks_mod": "%", "ks_shl": "<<", "ks_shr": ">>", "ks_and": "&"}
        if name in ops:
            return f"(({args[0]}) {ops[name]} ({args[1]}))"
        if name.startswith("ks_sel_"):
            op = next(k for k, v in _SELECT.items() if v == name[len("ks_sel_"):])
            return f"(({args[0]}) {op} ({args[1]}) ? ({args[2]}) : ({args[3]}))"
        if name.startswith("ks_load_"):
            return f"{name[len('ks_load_'):]}[{args[0]}]"
    raise NotAlgebra(f"cannot print {expr}")


def _c_names(sym: IndexAlgebra) -> dict[str, str]:
    out = {}
    for name in sym.symbols:
        m = re.match(r"^ks_f_(threadIdx|blockIdx|blockDim|gridDim)_([xyz])$", name)
        out[name] = f"{m.group(1)}.{m.group(2)}" if m else name
        if name.startswith("ks_lit_"):
            out[name] = next(text(n) for n in walk(sym.body) if n.type == "number_literal" and
                             "ks_lit_" + re.sub(r"\W", "_", text(n)) == name)
    return out


def algebraic_forward(src: Source, fn: Node, decl: Node, name: str) -> Optional[Edit]:
    """One edit that forwards the shared tile `name` into its reads (see the module docstring)."""
    import sympy

    body = fn.child_by_field_name("body")
    if body is None:
        return None
    got = _collect(src, body, decl, name, row_pointers=False)
    if got is None:
        return None
    writes, reads = got[0], [r[0] for r in got[1]]
    if not writes or not reads:
        return None
    # the innermost block that holds every write and read; above it only `if`s without `else`,
    # whose conditions every writer passed (they guard the forwarded value)
    block, outer_guards, in_loop = _common_block([w[0] for w in writes] + reads, body)
    if block is None:
        return None
    stmts = list({w[1].parent.start_byte: w[1].parent for w in writes}.values())
    fill_tops = [_top_stmt(st, block) for st in stmts]
    if any(ft is None for ft in fill_tops):
        return None
    if len(writes) > 1:
        # a group of stores, one per lane (`t[y][4 * x + k] = v.<k>`): plain statements of the
        # block, one after the other, nothing else between them
        kids = [c for c in block.named_children if c.type != "comment"]
        pos = [next((i for i, c in enumerate(kids) if c.start_byte == ft.start_byte and c.end_byte == ft.end_byte), None)
               for ft in fill_tops]
        if None in pos or pos != list(range(pos[0], pos[0] + len(pos))) or \
                any(ft.start_byte != st.start_byte or ft.end_byte != st.end_byte for ft, st in zip(fill_tops, stmts)):
            return None
    fill_top = fill_tops[0]
    fill_end = fill_tops[-1].end_byte
    read_tops = [_top_stmt(r, block) for r in reads]
    if any(rt is None or rt.start_byte < fill_end for rt in read_tops):
        return None
    first_read = min(rt.start_byte for rt in read_tops)
    between = [st for st in block.named_children if fill_end <= st.start_byte < first_read]
    if not any(_BARRIER.match(" ".join(text(st).split())) for st in between):
        return None
    # the fill's loops (inside its top statement): they must hold nothing but the fill
    writer_loops, guards = [], []
    if len(writes) == 1:
        asg = writes[0][1]
        if writes[0][3] is not None:
            return None
        p = asg.parent.parent
        while p is not None and p.start_byte >= fill_top.start_byte and p is not block:
            if p.type == "for_statement":
                writer_loops.append(p)
            elif p.type == "if_statement" and p.child_by_field_name("alternative") is None:
                guards.append(p.child_by_field_name("condition"))
            elif p.type not in ("compound_statement", "condition_clause"):
                return None
            if p.start_byte == fill_top.start_byte and p.end_byte == fill_top.end_byte:
                break
            p = p.parent
        for lp in writer_loops + ([fill_top] if fill_top.type == "if_statement" else []):
            inner = lp.child_by_field_name("body") or lp.child_by_field_name("consequence")
            stmts = [c for c in walk(inner) if c.type.endswith("_statement") and c.type not in ("compound_statement",)]
            if any(s.type not in ("expression_statement", "for_statement", "if_statement") for s in stmts) or \
                    len([s for s in stmts if s.type == "expression_statement"]) != 1:
                return None
    if in_loop and guards:
        return None  # an element this iteration's guard skipped still holds the last iteration's value
    guards += outer_guards
    # memory the kernel writes may not be read by the value
    written = set()
    for n in walk(body):
        if n.type == "assignment_expression":
            base = n.child_by_field_name("left")
            while base is not None and base.type == "subscript_expression":
                base = base.child_by_field_name("argument")
            if base is not None and base.type == "identifier":
                written.add(text(base))
    f = src.function_at(fn.start_byte)
    readonly = {pp.name for pp in f.params if pp.is_pointer} - written
    try:
        sym = IndexAlgebra(src, body, fill_top, writer_loops, readonly)
        at = fill_top.start_byte
        got = _solve_fill(sym, writes, at)
        if got is None:
            return None
        solution, solved, atoms, n_dims = got
        # the fill's guards, seen from the element: (r < R && c < C) at the writer's coordinates
        sym.opaque_ok = True
        guard_parts = []
        for g in guards:
            for lhs, op, rhs in _comparisons(g):
                a = sympy.expand(sympy.expand(sym.expr(lhs, at)).xreplace(atoms).subs(solution))
                b = sympy.expand(sympy.expand(sym.expr(rhs, at)).xreplace(atoms).subs(solution))
                if sym.writer_unknowns(a) or sym.writer_unknowns(b):
                    return None
                guard_parts.append((a, op, b))
    except (NotAlgebra, NotImplementedError, TypeError, ValueError):
        return None
    # the writer-independent names keep their values from the fill to the last read
    last = max(r.end_byte for r in reads)
    first = min(fill_top.start_byte, sym.earliest)
    for nm in sym.invariant_names:
        for n in walk(body):
            if n.type in ("assignment_expression", "update_expression") and \
                    text(n.child_by_field_name("left") or n.child_by_field_name("argument")) == nm and \
                    first <= n.start_byte < last:
                return None
    names = _c_names(sym)
    subs = []
    for r in reads:
        try:
            ridx = _indices(r)
        except NotAlgebra:
            return None
        if len(ridx) != n_dims:
            return None
        rn = dict(names)
        for k, node in enumerate(ridx):
            rn[f"ks_r{k}"] = "(" + " ".join(text(node).split()) + ")"
        try:
            value_text = to_c(solved, rn)
            if guard_parts:
                cond = " && ".join(f"({to_c(a, rn)}) {op} ({to_c(b, rn)})" for a, op, b in guard_parts)
                value_text = f"({cond}) ? {value_text} : 0"
            subs.append(Edit(r.start_byte, r.end_byte, "(" + value_text + ")"))
        except NotAlgebra:
            return None
    raw = src.code
    for ft in fill_tops:  # with its line break and the next line's indent, so no blank lines stay
        m = re.match(rb"[ \t]*\n[ \t]*", raw[ft.end_byte:])
        subs.append(Edit(ft.start_byte, ft.end_byte + (m.end() if m else 0), ""))
    subs.append(Edit(decl.start_byte, decl.end_byte, ""))
    subs.sort()
    if any(b[0] < a[1] for a, b in zip(subs, subs[1:])):
        return None
    lo, hi = subs[0][0], max(e for _, e, _ in subs)
    return Edit(lo, hi, splice_range(src, lo, hi, subs))


def _wide_store(views: dict, acc) -> Optional[tuple[Node, Node, int]]:
    """`W(T[..]) = W(r[c]);` (a wide store into the tile from a wide view of an array of the same
    scalar type): (assignment, source element r[c], lanes), else None."""
    stmt_asg = acc.node.parent
    while stmt_asg is not None and stmt_asg.type == "parenthesized_expression":
        stmt_asg = stmt_asg.parent
    if stmt_asg is None or stmt_asg.type != "assignment_expression" or text(stmt_asg.children[1]) != "=" or \
            stmt_asg.parent is None or stmt_asg.parent.type != "expression_statement":
        return None
    left = stmt_asg.child_by_field_name("left")
    while left.type == "parenthesized_expression" and left.named_children:
        left = left.named_children[0]
    if left.start_byte != acc.node.start_byte or left.end_byte != acc.node.end_byte:
        return None
    right = stmt_asg.child_by_field_name("right")
    while right.type == "parenthesized_expression" and right.named_children:
        right = right.named_children[0]
    src_acc = next((a for a in views.values() if a.node.start_byte == right.start_byte and
                    a.node.end_byte == right.end_byte), None)
    if src_acc is None or src_acc.view_arg is None or src_acc.view_arg.type != "subscript_expression":
        return None
    wb, sb = type_bytes(acc.wide_type), type_bytes(acc.scalar_type)
    if not wb or not sb or wb % sb or src_acc.scalar_type != acc.scalar_type or \
            type_bytes(src_acc.wide_type) != wb:
        return None
    return stmt_asg, src_acc.view_arg, wb // sb


def _common_block(nodes: list[Node], body: Node) -> tuple[Optional[Node], list[Node], bool]:
    """The innermost compound statement holding every node, the conditions of the `if`s between
    it and the function body, and whether a loop is between them (fill and reads then run once
    per iteration, in the same iteration). (None, [], False) when an `if` inside that loop, an
    `else`, a switch or a lambda is between them: a skipped fill would leave the last iteration's
    values for the reads."""
    block = nodes[0].parent
    while block is not None and not (block.type == "compound_statement" and
                                     all(block.start_byte <= n.start_byte and n.end_byte <= block.end_byte
                                         for n in nodes)):
        block = block.parent
    if block is None:
        return None, [], False
    guards, p, loop, inner_ifs = [], block, False, False
    while not (p.start_byte == body.start_byte and p.end_byte == body.end_byte):
        q = p.parent
        if q is None:
            return None, [], False
        if q.type == "if_statement":
            cons = q.child_by_field_name("consequence")
            if q.child_by_field_name("alternative") is not None or cons is None or cons.start_byte != p.start_byte:
                return None, [], False
            guards.append(q.child_by_field_name("condition"))
            inner_ifs = inner_ifs or not loop
        elif q.type in ("for_statement", "while_statement", "do_statement"):
            if q.child_by_field_name("body") is None or q.child_by_field_name("body").start_byte != p.start_byte:
                return None, [], False
            loop = True
        elif q.type != "compound_statement":
            return None, [], False
        p = q
    if loop and inner_ifs:
        return None, [], False
    return block, guards, loop


def _atoms(sym: IndexAlgebra, w: list) -> dict:
    """Each outermost opaque term (division, remainder, mask, right shift) of the fill indices
    that depends on the writer -> a fresh unknown `ks_atom_<i>`."""
    import sympy
    out: dict = {}

    def visit(e):
        if isinstance(e, sympy.core.function.AppliedUndef) and type(e).__name__ in ("ks_div", "ks_mod", "ks_and",
                                                                                  "ks_shr", "ks_shl") \
                and sym.writer_unknowns(e):
            if e not in out:
                out[e] = sym.sym(f"ks_atom_{len(out)}")
            return
        for a in e.args:
            visit(a)
    for wk in w:
        visit(wk)
    return out


def _lane_template(sym: IndexAlgebra, writes: list, at: int):
    """k stores `T[i + n*d] = load(a + n*e)`, n = 0..k-1 in statement order, as one store with a
    lane unknown n in [0, k): (index template, value template, {lane symbol: k})."""
    import sympy
    ws, vs = [], []
    sym.opaque_ok = False
    for sub, _, k, _ in writes:
        idx = [sympy.expand(sym.expr(i, at)) for i in _indices(sub)]
        ws.append(idx[:-1] + [idx[-1] + k])
    sym.opaque_ok = True
    for _, asg, k, element in writes:
        if element is None:
            vs.append(sympy.expand(sym.expr(asg.child_by_field_name("right"), at)))
        else:
            vs.append(sympy.expand(sym.element(element, k, at)))
    k = len(writes)
    if any(len(x) != len(ws[0]) for x in ws):
        raise NotAlgebra("rank")
    d = [sympy.expand(a - b) for a, b in zip(ws[1], ws[0])]
    if not all(x.is_Integer for x in d) or not any(d):
        raise NotAlgebra("lane step")
    for n in range(k):
        if any(sympy.expand(ws[n][i] - ws[0][i] - n * d[i]) != 0 for i in range(len(d))):
            raise NotAlgebra("lanes not evenly spaced")
    lane = sym.sym("ks_lane")
    value = _lane_affine(sym, vs[0], vs[1], lane)
    if any(sympy.expand(value.subs(lane, n) - vs[n]) != 0 for n in range(k)):
        raise NotAlgebra("lane values differ by more than their lane")
    sym.loop_vars["ks_lane"] = None
    w = [sympy.expand(w0 + lane * di) for w0, di in zip(ws[0], d)]
    return w, value, {lane: k}


def _lane_affine(sym: IndexAlgebra, e0, e1, lane):
    """A template t(n) with t(0) = e0, t(1) = e1: equal parts kept, integer parts that differ by
    a writer-independent step s become `e0 + n * s`, functions (loads, selects) matched argument
    by argument."""
    import sympy
    if e0 == e1:
        return e0
    if isinstance(e0, sympy.core.function.AppliedUndef) and type(e0) is type(e1) and len(e0.args) == len(e1.args):
        return type(e0)(*[_lane_affine(sym, a, b, lane) for a, b in zip(e0.args, e1.args)])
    step = sympy.expand(e1 - e0)
    if sym.writer_unknowns(step) or any(isinstance(a, sympy.core.function.AppliedUndef)
                                        for a in sympy.preorder_traversal(step)) or \
            any(s.name.startswith("ks_lit_") for s in step.free_symbols):
        raise NotAlgebra("lanes differ in structure")
    return sympy.expand(e0 + lane * step)


def _solve_lanes(sym: IndexAlgebra, w: list, rs: list, unknowns: list, lanes: dict) -> Optional[dict]:
    """Each index equation r = c*u + rest (one unknown, c = +-1) or r = k*u + n (n a lane in
    [0, k), nothing else): u = r / k, n = r % k, exact for the non-negative indices of a tile."""
    import sympy
    sol = {}
    for wk, rk in zip(w, rs):
        us = [u for u in unknowns if wk.has(u)]
        rest = sympy.expand(wk.subs({u: 0 for u in us}))
        coef = {u: sympy.expand(wk.diff(u)) for u in us}
        if sympy.expand(rest + sum(c * u for u, c in coef.items()) - wk) != 0 or \
                any(not c.is_Integer for c in coef.values()):
            return None
        if len(us) == 1 and coef[us[0]] in (1, -1):
            new = {us[0]: sympy.expand((rk - rest) * coef[us[0]])}
        elif len(us) == 2 and rest == 0 and any(u in lanes for u in us):
            n = next(u for u in us if u in lanes)
            u = next(x for x in us if x is not n)
            if coef[n] != 1 or coef[u] != lanes[n]:
                return None
            fdiv, fmod = sympy.Function("ks_div"), sympy.Function("ks_mod")
            new = {u: fdiv(rk, lanes[n]), n: fmod(rk, lanes[n])}
        else:
            return None
        if any(u in sol for u in new):
            return None
        sol.update(new)
    if set(sol) != set(unknowns):
        return None
    return sol


def _written_base(node: Optional[Node]) -> Optional[Node]:
    """The variable a write lands in: `r` of `r[i].x`, `(r)[i]`, `*r`, `FLOAT4(r[0])` (a view
    macro's first argument); other shapes come back as they are."""
    while node is not None:
        if node.type in ("subscript_expression", "field_expression", "pointer_expression"):
            node = node.child_by_field_name("argument")
        elif node.type == "parenthesized_expression" and node.named_children:
            node = node.named_children[0]
        elif node.type == "call_expression":
            args = node.child_by_field_name("arguments")
            first = [c for c in (args.named_children if args is not None else []) if c.type != "comment"]
            if len(first) != 1:
                return node
            node = first[0]
        else:
            return node
    return None


def _lane_read(ident: Node) -> bool:
    """`ident` is the declarator of its declaration or read as `ident.lane` (not written, not
    incremented, its address not taken)."""
    p = ident.parent
    if p is not None and p.type == "init_declarator" and p.child_by_field_name("declarator") is not None and \
            p.child_by_field_name("declarator").start_byte == ident.start_byte:
        return True
    if p is None or p.type != "field_expression" or text(p.child_by_field_name("field") or p) not in _LANES:
        return False
    q = p.parent
    if q is not None and q.type == "assignment_expression" and q.child_by_field_name("left").start_byte == p.start_byte:
        return False
    return q is None or q.type not in ("update_expression", "pointer_expression")


def _comparisons(cond: Node) -> list[tuple[Node, str, Node]]:
    """The comparisons of a guard made of `&&` and relational operators (NotAlgebra otherwise)."""
    c = cond
    while c.type in ("condition_clause", "parenthesized_expression") and c.named_children:
        c = c.named_children[0]
    if c.type != "binary_expression":
        raise NotAlgebra("guard")
    op = text(c.child_by_field_name("operator") or c.children[1])
    if op == "&&":
        return _comparisons(c.child_by_field_name("left")) + _comparisons(c.child_by_field_name("right"))
    if op in ("<", "<=", ">", ">=", "==", "!="):
        return [(c.child_by_field_name("left"), op, c.child_by_field_name("right"))]
    raise NotAlgebra("guard operator")


def _indices(sub: Node) -> list[Node]:
    out = []
    while sub.type == "subscript_expression":
        idx = sub.child_by_field_name("indices")
        inner = [c for c in (idx.named_children if idx is not None else []) if c.type != "comment"]
        if len(inner) != 1:
            raise NotAlgebra("index")
        out.insert(0, inner[0])
        sub = sub.child_by_field_name("argument")
    return out


def _collect(src: Source, body: Node, decl: Node, name: str, row_pointers: bool = True) -> Optional[tuple[list, list]]:
    """(writes, reads) of the tile, or None for a use the forwarding refuses. writes: (tile
    subscript, assignment, lane, wide source element or None), sorted; reads: (node, index texts).
    A read through a row pointer `(&T[i][j])[c]` is taken only with `row_pointers`."""
    uses = [n for n in walk(body) if n.type == "identifier" and text(n) == name and
            not (decl.start_byte <= n.start_byte < decl.end_byte)]
    writes, reads = [], []
    views = {(a.view_arg.start_byte, a.view_arg.end_byte): a for a in wide_accesses(src) if a.view_arg is not None}
    macros = set(re.findall(r"#\s*define\s+(\w+)\(", src.code.decode("utf-8", "replace")))
    for u in uses:
        sub = u
        while sub.parent is not None and sub.parent.type == "subscript_expression" and \
                sub.parent.child_by_field_name("argument").start_byte == sub.start_byte:
            sub = sub.parent
        if sub.type != "subscript_expression":
            return None
        p = sub.parent
        if p is not None and p.type == "assignment_expression" and p.child_by_field_name("left").start_byte == \
                sub.start_byte:
            if text(p.children[1]) != "=" or p.parent is None or p.parent.type != "expression_statement":
                return None
            writes.append((sub, p, 0, None))
        elif (sub.start_byte, sub.end_byte) in views:
            lanes = _wide_store(views, views[(sub.start_byte, sub.end_byte)])
            if lanes is None:
                return None
            writes += [(sub, lanes[0], k, lanes[1]) for k in range(lanes[2])]
        elif p is not None and p.type == "pointer_expression" and p.children[0].type == "&":
            if not row_pointers:
                return None
            # `(&T[i][j])[c]`: the element c after T[i][j] in its row, read as T[i][j + c]
            q = p.parent
            while q is not None and q.type == "parenthesized_expression":
                q = q.parent
            arg = q.child_by_field_name("argument") if q is not None and q.type == "subscript_expression" else None
            while arg is not None and arg.type == "parenthesized_expression" and arg.named_children:
                arg = arg.named_children[0]
            par = q.parent if arg is not None else None
            if arg is None or arg.start_byte != p.start_byte or arg.end_byte != p.end_byte or par is None or \
                    par.type in ("update_expression", "pointer_expression") or \
                    (par.type == "assignment_expression" and par.child_by_field_name("left").start_byte == q.start_byte):
                return None  # written through the pointer, or its address taken again
            idx = q.child_by_field_name("indices")
            off = [c for c in (idx.named_children if idx is not None else []) if c.type != "comment"]
            try:
                base = [" ".join(text(i).split()) for i in _indices(sub)]
            except NotAlgebra:
                return None
            if len(off) != 1:
                return None
            reads.append((q, base[:-1] + [f"{base[-1]} + ({' '.join(text(off[0]).split())})"]))
        elif p is not None and p.type == "update_expression":
            return None
        elif p is not None and p.type == "argument_list" and p.parent is not None and \
                text(p.parent.child_by_field_name("function") or p.parent) in macros:
            return None
        else:
            try:
                reads.append((sub, [" ".join(text(i).split()) for i in _indices(sub)]))
            except NotAlgebra:
                return None
    writes.sort(key=lambda w: (w[0].start_byte, w[2]))
    return writes, reads


def _readonly(src: Source, fn: Node, body: Node) -> set[str]:
    written = set()
    for n in walk(body):
        if n.type == "assignment_expression":
            base = n.child_by_field_name("left")
            while base is not None and base.type == "subscript_expression":
                base = base.child_by_field_name("argument")
            if base is not None and base.type == "identifier":
                written.add(text(base))
    f = src.function_at(fn.start_byte)
    return {pp.name for pp in f.params if pp.is_pointer} - written


def _solve_fill(sym: IndexAlgebra, writes: list, at: int):
    """A fill's element value in ks_r<k> symbols, its writer solved from the stored indices:
    (solution, value, atoms, dimensions), or None. One plain store, or lane stores / a wide store
    through their lane template. A writer-dependent division, remainder or mask in a fill index
    (`tid / 2`, `(tid & 1) << 2`) is one unknown of its own, the same term in the value the same
    unknown; a value left with a writer unknown or a fraction is no element value."""
    import sympy
    if len(writes) == 1 and writes[0][3] is None:
        w = [sympy.expand(sym.expr(i, at)) for i in _indices(writes[0][0])]
        sym.opaque_ok = True
        value = sympy.expand(sym.expr(writes[0][1].child_by_field_name("right"), at))
        lanes = {}
    else:
        w, value, lanes = _lane_template(sym, writes, at)
    atoms = _atoms(sym, w)
    w = [wk.xreplace(atoms) for wk in w]
    value = value.xreplace(atoms)
    unknowns = sorted(set().union(*(sym.writer_unknowns(x) for x in w + [value])), key=lambda s: s.name)
    rs = [sympy.Symbol(f"ks_r{k}", integer=True) for k in range(len(w))]
    if lanes:
        solution = _solve_lanes(sym, w, rs, unknowns, lanes)
    else:
        sol = sympy.solve([wk - rk for wk, rk in zip(w, rs)], unknowns, dict=True)
        solution = sol[0] if len(sol) == 1 else None
    if solution is None:
        return None
    solved = sympy.expand(value.subs(solution))
    if sym.writer_unknowns(solved) or any(isinstance(a, sympy.Rational) and not isinstance(a, sympy.Integer)
                                          for a in sympy.preorder_traversal(solved)):
        return None
    return solution, solved, atoms, len(w)


def _solve_group(src: Source, body: Node, group: list, readonly: set[str], inline_within=None):
    """(IndexAlgebra, element value in ks_r<k> symbols) of one unguarded fill group (plain
    statements: one store, lane stores or a wide store), or None."""
    top = group[0][1].parent
    try:
        sym = IndexAlgebra(src, body, top, [], readonly)
        sym.inline_within = inline_within
        got = _solve_fill(sym, group, top.start_byte)
        return None if got is None else (sym, got[1], got[3])
    except (NotAlgebra, NotImplementedError, TypeError, ValueError):
        return None


_PIPE_LOOP = re.compile(r"for\s*\(\s*(?:int|unsigned|size_t|long)?\s*(\w+)\s*=\s*([^;]+);\s*\1\s*<\s*([^;]+);\s*"
                        r"(?:\+\+\s*\1|\1\s*\+\+|\1\s*\+=\s*1)\s*\)")


def pipelined_forward(src: Source, fn: Node, decl: Node, name: str) -> Optional[Edit]:
    """A software-pipelined tile: filled once before a loop `for (v = A; v < N; ++v)` (P) and
    again at the end of its body (F, after the body's reads, between barriers), read in the
    body (reads of iteration v see F of iteration v - 1, or P when v = A) and after the loop
    (they see the last F, or P when the loop did not run). When F's element value at v = A - 1
    is P's, every body read is F's value at v - 1 and every read after the loop F's value at
    max(A, N) - 1; both fills and the tile go."""
    import sympy
    body = fn.child_by_field_name("body")
    got = _collect(src, body, decl, name) if body is not None else None
    if got is None or not got[0] or not got[1]:
        return None
    writes, reads = got
    groups: list[list] = []
    for w in writes:
        st = w[1].parent
        if groups and (groups[-1][-1][1].parent.start_byte == st.start_byte or
                       _next_sibling(groups[-1][-1][1].parent) is not None and
                       _next_sibling(groups[-1][-1][1].parent).start_byte == st.start_byte):
            groups[-1].append(w)
        else:
            groups.append([w])
    if len(groups) != 2:
        return None
    pro, fil = groups
    loop_body = fil[0][1].parent.parent
    loop = loop_body.parent if loop_body is not None else None
    if loop_body is None or loop_body.type != "compound_statement" or loop is None or loop.type != "for_statement":
        return None
    m = _PIPE_LOOP.fullmatch(" ".join(src.code[loop.start_byte:loop_body.start_byte].decode("utf-8", "replace").split()))
    outer = loop.parent
    if m is None or outer is None or outer.type != "compound_statement":
        return None
    v, a_text, n_text = m.group(1), m.group(2).strip(), m.group(3).strip()
    pro_top = _top_stmt(pro[0][1].parent, outer)
    if pro_top is None or pro_top.end_byte > loop.start_byte:
        return None
    # the prologue's statements sit in plain blocks inside pro_top
    p = pro[0][1].parent
    while p is not None and not (p.start_byte == pro_top.start_byte and p.end_byte == pro_top.end_byte):
        p = p.parent
        if p is None or p.type != "compound_statement":
            return None
    sync = lambda st: bool(_BARRIER.match(" ".join(text(st).split())))  # noqa: E731
    if not any(sync(st) for st in outer.named_children if pro_top.end_byte <= st.start_byte < loop.start_byte):
        return None
    fill_first, fill_last = fil[0][1].parent, fil[-1][1].parent
    kids = [c for c in loop_body.named_children if c.type != "comment"]
    body_reads = [r for r, _ in reads if loop_body.start_byte <= r.start_byte < loop_body.end_byte]
    after_reads = [r for r, _ in reads if r.start_byte >= loop.end_byte and r.end_byte <= outer.end_byte]
    if len(body_reads) + len(after_reads) != len(reads) or any(r.start_byte >= fill_first.start_byte
                                                               for r in body_reads):
        return None
    last_body_read = max((r.end_byte for r in body_reads), default=loop_body.start_byte)
    if body_reads and not any(sync(st) for st in kids if last_body_read <= st.start_byte < fill_first.start_byte):
        return None
    if not any(sync(st) for st in kids if st.start_byte >= fill_last.end_byte):
        return None
    readonly = _readonly(src, fn, body)
    s0 = _solve_group(src, body, pro, readonly)
    s1 = _solve_group(src, body, fil, readonly, (loop_body.start_byte, loop_body.end_byte))
    if s0 is None or s1 is None or s0[2] != s1[2]:
        return None
    sym, solved = s1[0], s1[1]
    vs = sympy.Symbol(v, integer=True)
    try:
        a_expr = sympy.expand(sym.expr(loop.child_by_field_name("initializer").child_by_field_name("declarator")
                                       .child_by_field_name("value"), loop.start_byte))
    except (NotAlgebra, AttributeError):
        return None
    if sympy.expand(solved.subs(vs, a_expr - 1) - s0[1]) != 0:
        return None
    # locals of the loop body hold this iteration's values, not the filling one's: refused
    for nm in sym.invariant_names | s0[0].invariant_names:
        if nm == v:
            continue
        for n in walk(body):
            if n.type in ("assignment_expression", "update_expression") and \
                    text(n.child_by_field_name("left") or n.child_by_field_name("argument")) == nm and \
                    min(pro_top.start_byte, s0[0].earliest) <= n.start_byte < max(r.end_byte for r, _ in reads):
                return None
            if n.type == "init_declarator" and n.child_by_field_name("declarator") is not None and \
                    text(n.child_by_field_name("declarator")) == nm and loop.start_byte <= n.start_byte < loop.end_byte:
                return None
    names = {**_c_names(s0[0]), **_c_names(sym)}
    last = sympy.Symbol("ks_last", integer=True)
    names["ks_last"] = f"(max({a_text}, {n_text}) - 1)"
    subs = []
    for r, ridx in reads:
        if len(ridx) != s1[2]:
            return None
        rn = dict(names)
        for k, t in enumerate(ridx):
            rn[f"ks_r{k}"] = "(" + t + ")"
        at_v = solved.subs(vs, vs - 1) if r in body_reads else solved.subs(vs, last)
        try:
            subs.append(Edit(r.start_byte, r.end_byte, "(" + to_c(sympy.expand(at_v), rn) + ")"))
        except NotAlgebra:
            return None
    raw = src.code
    for st in list({w[1].parent.start_byte: w[1].parent for w in writes}.values()):
        mm = re.match(rb"[ \t]*\n[ \t]*", raw[st.end_byte:])
        subs.append(Edit(st.start_byte, st.end_byte + (mm.end() if mm else 0), ""))
    subs.append(Edit(decl.start_byte, decl.end_byte, ""))
    subs.sort()
    if any(b[0] < a[1] for a, b in zip(subs, subs[1:])):
        return None
    lo, hi = subs[0][0], max(e for _, e, _ in subs)
    return Edit(lo, hi, splice_range(src, lo, hi, subs))


def _next_sibling(node: Node) -> Optional[Node]:
    s = node.next_named_sibling
    while s is not None and s.type == "comment":
        s = s.next_named_sibling
    return s
