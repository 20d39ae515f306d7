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

Forward: none yet. No deterministic rewrite introduces this carrier; `skills optimize` applies
this operator's skills through the LLM materializer only (the pair's forward half is empty).
"""
from __future__ import annotations

import re
from typing import Callable, Optional

from tree_sitter import Node

from corpora.code.nodes import same
from corpora.code.source import Source
from mining.operators.base import Edit, Operator, Pair
from mining.operators.nodes import identifiers, rename_identifiers
from mining.operators.rewrite_util import line_indent, structural
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


def _target_base_text(t: str) -> str:
    m = re.search(r"[A-Za-z_]\w*", t)
    return m.group(0) if m else t


PAIR = Pair(OnlineRescaleToTwoPass)
