"""online_rescale_to_two_pass: a flash-style sweep that keeps a running max and rescales what it
has accumulated whenever the max grows becomes two sweeps: the first computes only the final max,
the second accumulates with that max and never rescales.

    for (kv0 ...) {                                      for (kv0 ...) {          // pass 1: the max
        ... scores s ...                                     ... scores s ...
        mx = max of s (and across lanes)                     mx = max of s (and across lanes)
        const float m_new = fmaxf(m[r], mx);                 const float m_new = fmaxf(m[r], mx);
        const float alpha = expf(m[r] - m_new);     ->       m[r] = m_new;
        s = expf(s - m_new); rs = sum of s;              }
        l[r] = l[r] * alpha + rs;                        for (kv0 ...) {          // pass 2: sums, outputs
        m[r] = m_new;                                        ... scores s ...
        acc *= alpha;                                        s = expf(s - m[r]); rs = sum of s;
        acc += P V;                                          l[r] = l[r] + rs;
    }                                                        acc += P V;
                                                         }

Pass 1 is the backward slice of the loop body for the running max (the statements its value
depends on, through scalars, arrays and shared tiles, plus every barrier); pass 2 is the body
with the new max replaced by the running max (which already is final), the rescale factor by 1
(`x = x * alpha + r` -> `x = x + r`, `x *= alpha` deleted), `m = m_new` deleted, and the
statements of the rescaling block that no longer feed anything (the max of the tile) removed.

Why it is sound: after pass 1 the running max M is the maximum over every tile; in pass 2,
fmaxf(M, tile max) = M, so the new max equals M, alpha = exp(M - M) = 1 and m = m_new changes
nothing: pass 2 computes what the original loop computes once its running max had reached M,
and the rescalings of the original are exact changes of reference max (rounding differs; the
gate's tolerance judges it). Sites need: `T n = fmaxf(M, x)` and `T a = EXP(M - n)` in one block
of a loop (the sweep: the innermost enclosing loop whose variable M does not use), M's variable
declared outside the sweep and written in it only by `M = n`, every use of `a` a rescale
(`x = x * a + r`, `x *= a`), pass 1 writing nothing declared outside the sweep but M and shared
memory, a sweep header without side effects, and no `return` / `break` / `goto` in the sweep.

Forward: fuse_rescale_passes, the picture above read right to left. A max sweep L1 (its body
holds `float n = fmaxf(M, x); ... M = n;` in one block, or `M = fmaxf(M, x);`, the new max then
named ks_m_new) and a later sweep L2 with the same header become one sweep: L1 goes (with the
barriers right after it; what lies between them, the accumulators' initialisation, stays where it
is and may not touch M or anything L1 writes), and the block B2 of L2 under the same chain of loop
headers as L1's block B1 becomes the merge of the two (statements and loops both have once; in
the stretches between, loops with the same header whose statements are a subset one of the other
merged recursively, the rest of B1 before the rest of B2, in order: both are slices of one original
block; barriers never matched, so the max's exchange through a shared slot is not interleaved with
the sum's; refused when a statement would then run twice), with the new max, `ks_alpha = EXP(M - n)` right after it, every accumulator
rescaled: `x = x + r` / `x += r` of B2 itself becomes `x = x * ks_alpha + r`; an accumulator added
to in a loop of B2 or after B2 is multiplied by ks_alpha right after the factor (its rows: the
running max's index, or every element when M is a scalar or when the rows' loop runs one row,
`r = p; r < p + 1`, and the accumulator has no row index: a register tile's pass); M's reads in B2 become reads of n and
`M = n;` closes the block. Accumulators are the variables declared outside L2, other than shared
memory, that L2 writes; each must be added to (`+=`, `x = x + r`) with a value fed by the
exponentials (data flow through locals, arrays and shared tiles from B2's reads of M).
Why it is sound: after each iteration M is the max over the tiles so far; an accumulator holding
sum_t f(t) * EXP(s_t - M_old) times ks_alpha = EXP(M_old - n) holds sum_t f(t) * EXP(s_t - n)
(EXP(a - b) * EXP(b - c) = EXP(a - c)), to which the iteration adds its own terms with the new max,
so after the last tile each accumulator equals what L2 computed with the final max; the first
iteration multiplies zero-initialised accumulators by EXP(-inf) = 0. Every read of M in L2 must be
the subtrahend of an exponential's argument `EXP(x - M)` in B2 (so the factor uses the same base;
`exp2f((s - m) * log2e)` is refused), and L2 may not mention M elsewhere. Floating point: each
rescale rounds (a few ulps per tile whose max grows), and `__expf` factors carry their own error;
the gate's tolerance must accept this reassociation of the accumulators, like the backward half's.
Refused: outputs or other non-additive writes of outside variables in L2, accumulations not fed by
the exponentials, sweeps with other headers, the running max written between the sweeps,
`return` / `break` / `continue` / `goto` or preprocessor lines in the sweeps, a max under an `if`.
"""
from __future__ import annotations

import re
from typing import Callable, Optional

from tree_sitter import Node

from corpora.code.nodes import same
from corpora.code.source import Source
from mining.operators.base import Edit, Materialization, Operator, Pair, Rewrite, candidate
from mining.operators.nodes import identifiers, kernels, rename_identifiers
from mining.operators.rewrite_util import line_indent, structural
from mining.operators.running_update import read_update
from corpora.code.parse import parse_cuda, text, walk


_EXP = r"(?:__expf|expf|exp|__exp2f|exp2f)"
_BARRIER = re.compile(r"\s*(__syncthreads|__syncwarp)\s*\([^;]*\)\s*;\s*")
_SIDE = re.compile(r"\b(atomic\w*|__st\w+|printf|memcpy|memset)\s*\(")


def _norm(s: str) -> str:
    return " ".join(s.split())




def _target_base(node: Node) -> Optional[str]:
    """The variable an assignment target writes: `a`, `a[i][j]`, `a.x`, `*(p + i)`,
    `*reinterpret_cast<float4*>(&a[r][c])`, `(p + i)[k]`."""
    t = _norm(text(node))
    t = re.sub(r"\b(reinterpret_cast|static_cast|const_cast)\s*<[^>]*>", "", t)
    m = re.search(r"[A-Za-z_]\w*", t)
    return m.group(0) if m else None


class _Stmt:
    """One leaf statement with its (possibly transformed) text and what it writes and reads."""

    def __init__(self, node: Node, code: str):
        self.node, self.code = node, code
        self.scalars: set[str] = set()
        self.arrays: set[str] = set()
        self.kills: set[str] = set()
        self.reads: set[str] = set()
        self.declares: set[str] = set()
        tree = parse_cuda(("void __ks_f() { " + code + " }").encode())
        body = next(n for n in walk(tree.root_node) if n.type == "compound_statement")
        st = next((c for c in body.named_children if c.type != "comment"), None)
        self.ok = st is not None and not any(n.type == "ERROR" for n in walk(st))
        if not self.ok:
            return
        if st.type == "declaration":
            for d in st.named_children:
                if d.type == "init_declarator":
                    inner = d.child_by_field_name("declarator")
                    nm = _target_base(inner)
                    (self.scalars if inner.type == "identifier" else self.arrays).add(nm)
                    self.declares.add(nm)
                    self.kills.add(nm)
                    self.reads |= identifiers(text(d.child_by_field_name("value")))
                elif d.type in ("identifier", "array_declarator"):
                    nm = _target_base(d)
                    (self.scalars if d.type == "identifier" else self.arrays).add(nm)
                    self.declares.add(nm)
            return
        self.reads = identifiers(text(st))
        top = st.named_children[0] if st.type == "expression_statement" and st.named_children else None
        if top is not None and top.type == "assignment_expression" and text(top.child_by_field_name("operator")) == "=":
            # a plain store reads its value and its indices, not the variable it overwrites
            tgt = top.child_by_field_name("left")
            self.reads = identifiers(text(top.child_by_field_name("right"))) | (identifiers(text(tgt)) - {_target_base(tgt)})
        for n in walk(st):
            tgt = n.child_by_field_name("left") if n.type == "assignment_expression" else \
                n.child_by_field_name("argument") if n.type == "update_expression" else None
            if tgt is None:
                continue
            base = _target_base(tgt)
            if tgt.type == "identifier":
                self.scalars.add(base)
                op = n.child_by_field_name("operator") if n.type == "assignment_expression" else None
                if op is not None and text(op) == "=" and base not in identifiers(text(n.child_by_field_name("right"))):
                    self.kills.add(base)
                    self.reads.discard(base)
            elif tgt.type == "field_expression" and tgt.child_by_field_name("argument").type == "identifier":
                self.scalars.add(base)
            else:
                self.arrays.add(base)
                # a per-lane exchange slot: the readers after it read what this statement wrote
                if re.fullmatch(r"\w+\s*\[\s*ks_tid\s*\]", _norm(text(tgt))):
                    self.kills.add(base)

    @property
    def writes(self) -> set[str]:
        return self.scalars | self.arrays


Item = tuple  # (kind, node, payload): ("stmt", node, _Stmt) | ("for"/"if"/"block", node, [children...])


def _children(node: Node) -> list[Node]:
    if node.type == "compound_statement":
        return [c for c in node.named_children if c.type != "comment"]
    return [node]


class _Pass:
    """Backward dead-code elimination of a statement list, statements transformed first."""

    def __init__(self, src: Source, transform: Callable[[Node, str], Optional[str]],
                 output: Callable[[_Stmt], bool]):
        self.src, self.transform, self.output = src, transform, output
        self.fail = ""

    def code(self, node: Node) -> str:
        return _norm(self.src.code[node.start_byte:node.end_byte].decode("utf-8", "replace"))

    def run(self, stmts: list[Node], live: set[str]) -> Optional[list[Item]]:
        items: list[Item] = []
        for st in reversed(stmts):
            if self.fail:
                return None
            if st.type == "compound_statement":
                sub = self.run(_children(st), live)
                if sub is None:
                    return None
                if sub:
                    items.insert(0, ("block", st, [sub]))
            elif st.type == "for_statement":
                body = _children(st.child_by_field_name("body"))
                live_in = set(live)
                sub: Optional[list[Item]] = []
                for _ in range(4):  # loop-carried values: iterate to a fixpoint
                    trial = set(live_in)
                    sub = self.run(body, trial)
                    if sub is None:
                        return None
                    if trial <= live_in:
                        break
                    live_in |= trial
                if sub:
                    items.insert(0, ("for", st, [sub]))
                    hdr = self.src.code[st.start_byte:st.child_by_field_name("body").start_byte].decode()
                    live |= live_in | identifiers(hdr)
            elif st.type == "if_statement":
                cons = st.child_by_field_name("consequence")
                alt = st.child_by_field_name("alternative")
                alt_stmts = [c for c in alt.named_children if c.type != "comment"] if alt is not None else []
                l1, l2 = set(live), set(live)
                a = self.run(_children(cons), l1)
                b = self.run(alt_stmts, l2) if alt_stmts else []
                if a is None or b is None:
                    return None
                if a or b:
                    items.insert(0, ("if", st, [a, b]))
                    live |= l1 | l2 | identifiers(self.code(st.child_by_field_name("condition")))
            elif st.type in ("expression_statement", "declaration"):
                new = self.transform(st, self.code(st))
                if new is None:
                    continue
                s = _Stmt(st, new)
                if not s.ok:
                    self.fail = f"cannot read `{new}`"
                    return None
                if self.output(s) or s.writes & live:
                    items.insert(0, ("stmt", st, s))
                    live -= s.kills
                    live |= s.reads
            elif st.type in ("comment",) or st.type.startswith("preproc"):
                continue
            else:
                self.fail = f"a {st.type} in the sweep"
                return None
        return items

    def render(self, items: list[Item], indent: str) -> list[str]:
        out: list[str] = []
        for kind, node, payload in items:
            if kind == "stmt":
                line = indent + payload.code
                if out and out[-1] == line and _BARRIER.fullmatch(payload.code):
                    continue
                out.append(line)
            elif kind == "block":
                out += [indent + "{"] + self.render(payload[0], indent + "    ") + [indent + "}"]
            elif kind == "for":
                hdr = _norm(self.src.code[node.start_byte:node.child_by_field_name("body").start_byte].decode())
                out += [f"{indent}{hdr} {{"] + self.render(payload[0], indent + "    ") + [indent + "}"]
            else:
                cond = self.code(node.child_by_field_name("condition"))
                out += [f"{indent}if {cond} {{"] + self.render(payload[0], indent + "    ")
                if payload[1]:
                    out += [indent + "} else {"] + self.render(payload[1], indent + "    ")
                out.append(indent + "}")
        return out


def _stmts_in(items: list[Item]):
    for kind, node, payload in items:
        if kind == "stmt":
            yield payload
        elif kind in ("for", "block"):
            yield from _stmts_in(payload[0])
        else:
            yield from _stmts_in(payload[0])
            yield from _stmts_in(payload[1])


class OnlineRescaleToTwoPass(Operator):
    name = "online_rescale_to_two_pass"
    carrier = "online_softmax"
    description = "find the running max in a first sweep, then accumulate without rescaling in a second"

    def edits(self, src: Source):
        st = structural(src)
        for n in walk(st.tree.root_node):
            if n.type == "declaration":
                e = self.rewrite(st, n)
                if e is not None:
                    yield e

    def rewrite(self, src: Source, ndecl: Node) -> Optional[Edit]:
        code = lambda n: _norm(src.code[n.start_byte:n.end_byte].decode("utf-8", "replace"))  # noqa: E731
        m = re.fullmatch(r"(?:const\s+)?float\s+(\w+)\s*=\s*fmaxf\s*\(\s*(.+?)\s*,\s*(.+?)\s*\)\s*;", code(ndecl))
        block = ndecl.parent
        if m is None or block is None or block.type != "compound_statement":
            return None
        new = m.group(1)
        # the rescale factor next to it fixes which argument is the running max
        alpha, run = None, None
        for c in block.named_children:
            if c.type != "declaration" or c.start_byte <= ndecl.start_byte:
                continue
            a = re.fullmatch(r"(?:const\s+)?float\s+(\w+)\s*=\s*%s\s*\(\s*(.+?)\s*-\s*%s\s*\)\s*;" % (_EXP, new), code(c))
            if a and _norm(a.group(2)) in (_norm(m.group(2)), _norm(m.group(3))):
                alpha, run = a.group(1), _norm(a.group(2))
                break
        if alpha is None:
            return None
        mvar = _target_base_text(run)
        # the sweep: the innermost loop around the block whose variable the running max does not use
        sweep = block.parent
        while sweep is not None:
            if sweep.type == "for_statement":
                init = sweep.child_by_field_name("initializer")
                lv = re.search(r"(\w+)\s*=", text(init)) if init is not None else None
                if lv is not None and lv.group(1) not in identifiers(run):
                    break
            if sweep.type in ("function_definition",):
                return None
            sweep = sweep.parent
        if sweep is None or sweep.parent is None or sweep.parent.type != "compound_statement":
            return None
        body = sweep.child_by_field_name("body")
        stext = src.code[sweep.start_byte:sweep.end_byte].decode("utf-8", "replace")
        if re.search(r"\b(return|break|goto)\b", stext) or re.search(rb"(?m)^[ \t]*#", src.code[sweep.start_byte:sweep.end_byte]):
            return None  # (the sweep is rendered again: preprocessor lines inside it would be lost)
        f = src.function_at(sweep.start_byte)
        fn = src.func_node(f) if f is not None else None
        if fn is None:
            return None
        # declared outside the sweep: the running max's variable
        decl_inside = {d for n in walk(sweep) if n.type == "declaration" for d in _Stmt(n, code(n)).declares}
        if mvar in decl_inside:
            return None
        hdr = src.code[sweep.start_byte:body.start_byte].decode("utf-8", "replace")
        if _SIDE.search(hdr):
            return None
        # the running max is written in the sweep only by `run = new;`
        for n in walk(body):
            if n.type in ("assignment_expression", "update_expression"):
                tgt = n.child_by_field_name("left") if n.type == "assignment_expression" else \
                    n.child_by_field_name("argument")
                if _target_base(tgt) == mvar and _norm(text(n)) != f"{run} = {new}":
                    return None
        rescale_mul = re.compile(r"(.+?)\s*=\s*\1\s*\*\s*%s\s*\+\s*(.+);" % re.escape(alpha))
        rescale_mul2 = re.compile(r"(.+?)\s*=\s*%s\s*\*\s*\1\s*\+\s*(.+);" % re.escape(alpha))
        rescale_scale = re.compile(r"(.+?)\s*\*=\s*%s\s*;" % re.escape(alpha))
        bad = []

        def sum_transform(node: Node, t: str) -> Optional[str]:
            if same(node, ndecl) or re.fullmatch(r"(?:const\s+)?float\s+%s\s*=.*" % re.escape(alpha), t):
                return None
            if t == f"{run} = {new};" or rescale_scale.fullmatch(t):
                return None
            r = rescale_mul.fullmatch(t) or rescale_mul2.fullmatch(t)
            if r:
                t = f"{r.group(1)} = {r.group(1)} + {r.group(2)};"
            if alpha in identifiers(t):
                bad.append(t)  # a use of the rescale factor that is not a rescale
            return rename_identifiers(t, {new: run if re.fullmatch(r"[\w.]+(\[\w+\])*", run) else f"({run})"})

        # pass 1: the slice of the body for the running max (barriers kept), iterated over the
        # values one iteration hands to the next
        p1 = _Pass(src, lambda n, t: t, lambda s: bool(_BARRIER.fullmatch(s.code)) or mvar in s.writes)
        live_in: set[str] = set()
        items1: Optional[list[Item]] = None
        for _ in range(4):
            trial = set(live_in)
            items1 = p1.run(_children(body), trial)
            if items1 is None or trial <= live_in:
                break
            live_in |= trial
        if items1 is None or not any(mvar in s.writes for s in _stmts_in(items1)):
            return None
        shared = set(src.shared_names)
        for s in _stmts_in(items1):
            if _SIDE.search(s.code) or s.writes - decl_inside - shared - {mvar}:
                return None
        # pass 2: the body transformed; inside the rescaling block, what no longer feeds anything goes
        inside = {d for n in walk(block) if n.type == "declaration" for d in _Stmt(n, code(n)).declares}
        keep_all = _Pass(src, sum_transform, lambda s: True)
        # (a per-lane exchange slot is written for the readers that follow, not an output)
        dead_code = _Pass(src, sum_transform, lambda s: bool(_BARRIER.fullmatch(s.code) or _SIDE.search(s.code) or
                                                             s.writes - inside - (s.arrays & s.kills)))

        def body_items(node: Node) -> Optional[list[Item]]:
            if same(node, block):
                return dead_code.run(_children(node), set())
            out: list[Item] = []
            for st in _children(node):
                if not (st.start_byte <= block.start_byte and block.end_byte <= st.end_byte):
                    sub = keep_all.run([st], set())
                    if sub is None:
                        return None
                    out += sub
                elif st.type == "for_statement":
                    sub = body_items(st.child_by_field_name("body"))
                    if sub is None:
                        return None
                    out.append(("for", st, [sub]))
                elif st.type == "compound_statement":
                    sub = body_items(st)
                    if sub is None:
                        return None
                    out.append(("block", st, [sub]))
                else:
                    return None  # the rescaling block under an `if`: not handled
            return out

        items2 = body_items(body)
        if items2 is None or keep_all.fail or dead_code.fail or bad:
            return None
        if any(alpha in identifiers(s.code) or new in identifiers(s.code) for s in _stmts_in(items2)):
            return None
        ind = line_indent(src, sweep.start_byte)
        head = _norm(hdr)
        lines = [f"{head} {{"] + p1.render(items1, ind + "    ") + [ind + "}"]
        if "__syncthreads" in stext:
            lines.append(ind + "__syncthreads();")
        lines += [f"{ind}{head} {{"] + keep_all.render(items2, ind + "    ") + [ind + "}"]
        return Edit(sweep.start_byte, sweep.end_byte, "\n".join(lines))


def _exp_reads(t: str, run: str) -> Optional[list[str]]:
    """The exponential functions of `t` when every mention of `run` in it is `EXP(x - run)` with run
    nowhere in x, else None."""
    fns, rest, pos = [], "", 0
    for m in re.finditer(r"\b(%s)\s*\(" % _EXP, t):
        if m.start() < pos:
            continue
        depth, i = 1, m.end()
        while i < len(t) and depth:
            depth += (t[i] == "(") - (t[i] == ")")
            i += 1
        arg = t[m.end():i - 1]
        parts = _split_minus(arg)
        if len(parts) >= 2 and parts[-1] == run and not any(_mentions(x, run) for x in parts[:-1]):
            fns.append(m.group(1))
            rest += t[pos:m.start()] + " "
            pos = i
    rest += t[pos:]
    return None if _mentions(rest, run) else fns


def _split_minus(t: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in t:
        depth += (ch in "([") - (ch in ")]")
        if ch == "-" and depth == 0 and not re.search(r"(?<![\w.])[\d.]+[eE]$", cur):  # not 1e-3
            out.append(_norm(cur))
            cur = ""
        else:
            cur += ch
    return out + [_norm(cur)]


def _mentions(t: str, run: str) -> bool:
    return re.search(r"(?<![\w.])%s(?![\w])" % re.escape(run).replace(r"\ ", r"\s*"), t) is not None


def _split_args(t: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in t:
        depth += (ch in "([") - (ch in ")]")
        if ch == "," and depth == 0:
            out.append(_norm(cur))
            cur = ""
        else:
            cur += ch
    return out + [_norm(cur)]


def _target_base_text(t: str) -> str:
    m = re.search(r"[A-Za-z_]\w*", t)
    return m.group(0) if m else t


# ==================================================================================== forward
# fuse_rescale_passes: a max sweep followed by an accumulation sweep with the same header become
# one flash-style sweep (see "Forward" in the module docstring).

def _header_of(src: Source, loop: Node, rename: Optional[dict[str, str]] = None) -> str:
    h = src.code[loop.start_byte:loop.child_by_field_name("body").start_byte].decode("utf-8", "replace")
    return _norm(rename_identifiers(h, rename) if rename else h)


def _loop_var(loop: Node) -> Optional[str]:
    init = loop.child_by_field_name("initializer")
    m = re.search(r"(\w+)\s*=", text(init)) if init is not None else None
    return m.group(1) if m else None


def _leaves(node: Node):
    """Leaf statements (expression statements and declarations) under a node, in order."""
    for n in walk(node):
        if n.type in ("expression_statement", "declaration") and \
                not any(p.type in ("expression_statement", "declaration") for p in _ancestors(n, node)):
            yield n


def _ancestors(n: Node, stop: Node):
    p = n.parent
    while p is not None and not same(p, stop):
        yield p
        p = p.parent


def _merge(src: Source, a: list[Node], b: list[Node], key_b: Callable[[str], str]) -> Optional[list[tuple]]:
    """Interleave the max pass' statements `a` with the accumulation pass' `b` (both slices of one
    original block, in its order) -> [(origin, node, merged children)]: statements (and whole
    loops) equal in both once; in the stretches between, loops with the same header whose bodies'
    statements are a subset one of the other merged recursively, the rest of `a` before the rest
    of `b`. Barriers are never matched (each pass keeps its own, so two exchanges through one slot
    are not interleaved). None when a statement would run twice (a wrong pairing)."""
    import difflib

    def text_of(n: Node, own: bool) -> str:
        t = _norm(src.code[n.start_byte:n.end_byte].decode("utf-8", "replace"))
        return t if own else key_b(t)

    def key(n: Node, own: bool, i: int) -> str:
        t = text_of(n, own)
        return f"{'ab'[not own]}#{i}" if _BARRIER.fullmatch(t) else t

    def stmts(n: Node, own: bool) -> set[str]:
        return {text_of(x, own) for x in _leaves(n.child_by_field_name("body"))}

    ka, kb = [key(n, True, i) for i, n in enumerate(a)], [key(n, False, i) for i, n in enumerate(b)]
    out: list[tuple] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ka, kb, autojunk=False).get_opcodes():
        if op == "equal":
            for x, y in zip(a[i1:i2], b[j1:j2]):
                out.append(("a", x, None) if x.type in ("expression_statement", "declaration") else ("b", y, None))
            continue
        ra, rb, q = a[i1:i2], b[j1:j2], 0
        for x in ra:
            y = next((rb[t] for t in range(q, len(rb)) if x.type == "for_statement" and rb[t].type == "for_statement"
                      and _header_of(src, x) == _header_of(src, rb[t]) and
                      (stmts(x, True) <= stmts(rb[t], False) or stmts(rb[t], False) <= stmts(x, True))), None)
            if y is None:
                out.append(("a", x, None))
                continue
            t = next(t for t in range(q, len(rb)) if same(rb[t], y))
            sub = _merge(src, _children(x.child_by_field_name("body")), _children(y.child_by_field_name("body")), key_b)
            if sub is None:
                return None
            out += [("b", z, None) for z in rb[q:t]] + [("loop", x, sub)]
            q = t + 1
        out += [("b", z, None) for z in rb[q:]]
    # a statement of one pass left unmatched while the other has it too would run twice
    only_a = {text_of(n, True) for o, n, _ in out if o == "a" and n.type in ("expression_statement", "declaration")}
    only_b = {text_of(n, False) for o, n, _ in out if o == "b" and n.type in ("expression_statement", "declaration")}
    matched = {text_of(n, True) for i, (o, n, _) in enumerate(out) if o == "a"} & set(ka) & set(kb)
    if (only_a & only_b) - matched - {t for t in only_a if _BARRIER.fullmatch(t)}:
        return None
    return out


def fuse_rescale_passes(source: str, ctx) -> list[Materialization]:
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        for block in walk(k.body):
            if block.type != "compound_statement":
                continue
            kids = [c for c in block.named_children if c.type != "comment"]
            for i, l1 in enumerate(kids):
                if l1.type != "for_statement":
                    continue
                j = next((q for q in range(i + 1, len(kids)) if kids[q].type == "for_statement" and
                          _header_of(src, kids[q]) == _header_of(src, l1)), None)
                if j is None:
                    continue
                r = _fuse_rescale(src, l1, kids[j], kids[i + 1:j])
                if r is not None:
                    out.append(candidate(src, r[0], "fuse_rescale_passes", f"{k.name}: {r[1]}",
                                         excerpt=src.excerpt(l1.start_byte, kids[j].end_byte)))
    return out


def _fuse_rescale(src: Source, l1: Node, l2: Node, between: list[Node]) -> Optional[tuple[list[Edit], str]]:
    code = lambda n: _norm(src.code[n.start_byte:n.end_byte].decode("utf-8", "replace"))  # noqa: E731
    if re.search(rb"(?m)^[ \t]*#", src.code[l1.start_byte:l2.end_byte]) or \
            re.search(r"\b(return|break|goto|continue)\b", src.code[l1.start_byte:l2.end_byte].decode("utf-8", "replace")):
        return None
    # the new max and the running max's update in one block of the max pass
    new = run = b1 = None
    for n in walk(l1.child_by_field_name("body")):
        if n.type != "declaration":
            continue
        d = re.fullmatch(r"(?:const\s+)?float\s+(\w+)\s*=\s*fmaxf\s*\(\s*(.+?)\s*,\s*(.+?)\s*\)\s*;", code(n))
        if d is None or n.parent is None or n.parent.type != "compound_statement":
            continue
        for c in n.parent.named_children:
            u = re.fullmatch(r"(.+?)\s*=\s*%s\s*;" % re.escape(d.group(1)), code(c)) if c.start_byte > n.start_byte else None
            if u and _norm(u.group(1)) in (_norm(d.group(2)), _norm(d.group(3))):
                new, run, b1 = d.group(1), _norm(u.group(1)), n.parent
        if new:
            break
    update = None  # `M = fmaxf(M, X);`: the new max is named here (ks_m_new)
    if new is None:
        for n in walk(l1.child_by_field_name("body")):
            u = re.fullmatch(r"(.+?)\s*=\s*fmaxf\s*\((.+)\)\s*;", code(n)) if n.type == "expression_statement" else None
            args = _split_args(u.group(2)) if u else []
            if len(args) == 2 and _norm(u.group(1)) in args and n.parent is not None and \
                    n.parent.type == "compound_statement":
                run, b1, new = _norm(u.group(1)), n.parent, "ks_m_new"
                x = args[1] if args[0] == run else args[0]
                update = (n, x)
                break
            # the same float max spelled `M = X > M ? X : M;` or `if (X > M) M = X;` (issue 20)
            ru = read_update(src, n) if n.type in ("expression_statement", "if_statement") else None
            if ru is not None and ru.op == "max" and ru.fn == "fmaxf" and n.parent is not None and \
                    n.parent.type == "compound_statement":
                run, b1, new = _norm(ru.target), n.parent, "ks_m_new"
                update = (n, _norm(ru.operand))
                break
    if new is None or not re.fullmatch(r"\w+(\s*\[\s*\w+\s*\])?", run):
        return None
    mvar = _target_base_text(run)
    if "ks_m_new" in identifiers(src.code.decode("utf-8", "replace")) or \
            any(mvar in identifiers(code(b)) for b in between):
        return None
    # what lies between the sweeps (accumulators' initialisation) runs before the fused sweep: it
    # may not read what the max sweep writes; barriers right after the max sweep go with it
    l1_writes = set()
    for x in _leaves(l1):
        l1_writes |= _Stmt(x, code(x)).writes
    l1_writes -= {d for x in _leaves(l1) if x.type == "declaration" for d in _Stmt(x, code(x)).declares}
    for b in between:
        if identifiers(code(b)) & (l1_writes - {mvar}) and not _BARRIER.fullmatch(code(b)):
            return None
    nb = 0
    while nb < len(between) and _BARRIER.fullmatch(code(between[nb])):
        nb += 1
    cut = between[nb].start_byte if nb < len(between) else l2.start_byte
    row = re.search(r"\[\s*(\w+)\s*\]", run)
    row = row.group(1) if row else None
    # the same chain of loops in the accumulation pass, down to the block that reads the running max
    chain = []
    p = b1.parent
    while p is not None and not same(p, l1):
        if p.type == "for_statement":
            chain.insert(0, p)
        elif p.type != "compound_statement":
            return None  # the max under an `if`
        p = p.parent
    node = l2
    for h in chain:
        cands = [c for c in _children(node.child_by_field_name("body")) if c.type == "for_statement" and
                 _header_of(src, c) == _header_of(src, h) and mvar in identifiers(code(c))]
        if len(cands) != 1:
            return None
        node = cands[0]
    b2 = node.child_by_field_name("body")
    if b2.type != "compound_statement" or mvar not in identifiers(code(b2)):
        return None
    r_loop = node if chain else None
    # every leaf of the max pass outside its block is a statement of the accumulation pass
    l2_text = {code(x) for x in _leaves(l2)}
    if any(code(x) not in l2_text for x in _leaves(l1) if not (b1.start_byte <= x.start_byte < b1.end_byte)):
        return None
    # the exponential of the accumulation pass
    # every read of the running max in the accumulation pass is the subtrahend of an exponential's
    # argument, `EXP(x - M)`, in the block (elsewhere it would read a max that is not final yet)
    fns = _exp_reads(code(b2), run)
    outside = code(l2).replace(code(b2), "")
    if not fns or mvar in identifiers(outside) or len({"2" in f for f in fns}) != 1:
        return None
    exp_fn = fns[0]
    if "ks_alpha" in identifiers(src.code.decode("utf-8", "replace")):
        return None
    run_re = re.compile(r"(?<![\w.])%s" % re.escape(run).replace(r"\ ", r"\s*"))
    merged = _merge(src, _children(b1), _children(b2), lambda t: run_re.sub(new, t))
    if merged is None:
        return None
    declared_in = {d for x in _leaves(l2) if x.type == "declaration" for d in _Stmt(x, code(x)).declares}
    # accumulators: what the accumulation pass adds to, declared outside it, fed by the exponentials
    tainted: set[str] = set()
    acc_after: dict[str, list[Node]] = {}  # added to in loops of the block or after it: rescaled apart
    inplace: dict[str, list[Node]] = {}  # added to by statements of the block itself: `x = x * a + r`
    shared = set(src.shared_names)
    for x in _leaves(l2):
        st = _Stmt(x, run_re.sub(new, code(x)) if b2.start_byte <= x.start_byte < b2.end_byte else code(x))
        if not st.ok:
            return None
        reads_run = b2.start_byte <= x.start_byte < b2.end_byte and new in identifiers(st.code)
        if reads_run or st.reads & tainted:
            tainted |= st.writes
        outside = st.writes - declared_in - shared
        if not outside or _BARRIER.fullmatch(st.code):
            continue
        t = st.code
        add = re.fullmatch(r"(\w+)((?:\s*\[[^\]]+\])*)\s*(?:\+=\s*(.+)|=\s*\1\2\s*\+\s*(.+));", t)
        if add is None or outside != {add.group(1)} or add.group(1) == mvar or not (st.reads & tainted) and \
                not reads_run:
            return None
        if x.start_byte < b2.start_byte:
            return None
        top = x.parent is not None and same(x.parent, b2)
        (inplace if top else acc_after).setdefault(add.group(1), []).append(x)
    for a in set(inplace) & set(acc_after):
        acc_after[a] += inplace.pop(a)
    # rescales of the accumulators added to after the block, at the running max's update; when the
    # block's row loop runs one row (`r = p; r < p + 1`), an accumulator without a row index in a
    # loop like it belongs to that row and is rescaled whole
    one_row = r_loop is not None and row is not None and re.fullmatch(
        r"for \(int %s = (.+); %s < \1 \+ 1; (?:\+\+%s|%s\+\+)\)" % (row, row, row, row), _header_of(src, r_loop))
    rescale: list[str] = []
    fn_text = src.code.decode("utf-8", "replace")
    for a, sites in acc_after.items():
        dm = re.search(r"\b%s\s*((?:\[[^\]]+\]\s*)+)[,;=]" % re.escape(a), fn_text)
        dims = re.findall(r"\[([^\]]+)\]", dm.group(1)) if dm else []
        idx_all = set()
        whole = []  # sites under a one-row loop like the block's own (a register tile's pass)
        for x in sites:
            sub = re.match(r"\w+((?:\s*\[[^\]]+\])*)", code(x))
            idxs = re.findall(r"\[\s*([^\]]+?)\s*\]", sub.group(1))
            if len(idxs) != len(dims):
                return None
            if row is None:
                continue
            if one_row:
                lp = next((q for q in _ancestors(x, l2) if q.type == "for_statement" and _loop_var(q) and
                           _header_of(src, q, {_loop_var(q): row}) == _header_of(src, r_loop)), None)
                if lp is not None and (not idxs or idxs[0] != _loop_var(lp)):
                    whole.append(x)
                    continue
            # the first index names the same rows as the running max's: a loop like the block's own
            if r_loop is None or (x.start_byte < b2.end_byte and idxs[0] == row):
                if idxs[0] != row:
                    return None
                continue
            lp = next((q for q in _ancestors(x, l2) if q.type == "for_statement" and _loop_var(q) == idxs[0]), None)
            if lp is None or _header_of(src, lp, {idxs[0]: row}) != _header_of(src, r_loop):
                return None
            idx_all.add(idxs[0])
        if whole and len(whole) != len(sites):
            return None
        if row is not None and not dims and not whole:
            return None
        free = dims[1:] if row is not None and not whole else dims
        lhs = a + (f"[{row}]" if row is not None and not whole else "")
        loops = ""
        for q, dim in enumerate(free):
            loops += f"for (int ks_i{q} = 0; ks_i{q} < {_norm(dim)}; ++ks_i{q}) "
            lhs += f"[ks_i{q}]"
        rescale.append(f"{loops}{lhs} *= ks_alpha;")
    # the merged block, rendered: after the new max, reads of the running max are reads of the new max
    ind = line_indent(src, b2.start_byte) + "    "
    state: dict = {"after": False, "ok": True}
    add_re = re.compile(r"(.+?)\s*(?:\+=\s*(.+)|=\s*\1\s*\+\s*(.+));")

    def render(items, indent) -> list[str]:
        lines = []
        for origin, n, sub in items:
            if origin == "loop":
                lines += [f"{indent}{_header_of(src, n)} {{"] + render(sub, indent + "    ") + [indent + "}"]
                continue
            t = code(n)
            if update is not None and origin == "a" and same(n, update[0]):
                if state["after"] or "tail" in state:
                    state["ok"] = False
                lines += [f"{indent}const float {new} = fmaxf({run}, {update[1]});",
                          f"{indent}const float ks_alpha = {exp_fn}({run} - {new});"] + [indent + r for r in rescale]
                state["after"], state["tail"] = True, [f"{indent}{run} = {new};"]
                continue
            if origin == "b" and state["after"]:
                t = run_re.sub(new, t)
                a = add_re.fullmatch(t)
                if a and any(same(n, y) for ys in inplace.values() for y in ys):
                    t = f"{a.group(1)} = {a.group(1)} * ks_alpha + {a.group(2) or a.group(3)};"
            elif origin == "b" and any(same(n, y) for ys in inplace.values() for y in ys):
                state["ok"] = False  # an accumulation before the new max
            if not state["after"] and new in identifiers(t) and not (origin == "a" and n.type == "declaration"):
                state["ok"] = False  # the new max read before it is computed
            lines.append(indent + t)
            if origin == "a" and n.type == "declaration" and re.match(r"(?:const\s+)?float\s+%s\s*=" % new, t):
                state["after"] = True
                lines.append(f"{indent}const float ks_alpha = {exp_fn}({run} - {new});")
                lines += [indent + r for r in rescale]
            if origin == "a" and t == f"{run} = {new};":
                # the update and the rescales close the block (as flash kernels write them): what
                # follows reads the new max, never the running one
                lines.pop()
                state["tail"] = [indent + t]
                state["ok"] = state["ok"] and state["after"]
            elif "tail" in state and mvar in identifiers(t):
                state["ok"] = False
        return lines
    body = render(merged, ind)
    body += state.get("tail", [])
    if not state["after"] or not state["ok"] or sum(ln.strip() == f"{run} = {new};" for ln in body) != 1:
        return None
    outer = line_indent(src, b2.start_byte)
    rep = "{\n" + "\n".join(body) + "\n" + outer + "}"
    edits = [Edit(l1.start_byte, cut, ""), Edit(b2.start_byte, b2.end_byte, rep)]
    what = "the max sweep and the accumulation sweep become one sweep rescaling " + \
        ", ".join(sorted({*acc_after, *inplace}))
    return edits, what


PAIR = Pair(OnlineRescaleToTwoPass, (Rewrite("fuse_rescale_passes", "online_softmax", fuse_rescale_passes, prior=1.5),))
