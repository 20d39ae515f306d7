"""register_array_to_recompute: a per-thread array that caches global data in registers across
several loops over the same range (`for (int k = 0; k < V; ++k)`) is replaced by one value per
iteration that each loop recomputes (reloads) for itself.

    float4 v[V];                                            for (int k = 0; k < V; ++k) {
    for (k...) v[k] = LOAD(k);                                  float4 ks_v_k;
    for (k...) m = fmaxf(m, v[k].x);                  ->        { ks_v_k = LOAD(k); }
    for (k...) { v[k].x = expf(v[k].x - m); s += ...; }          m = fmaxf(m, ks_v_k.x); }
    for (k...) y[...] = v[k].x * inv;                       for (k...) { float4 ks_v_k; { ks_v_k = LOAD(k); }
                                                                         ks_v_k.x = expf(ks_v_k.x - m); s += ...; }
                                                            for (k...) { float4 ks_v_k; { ks_v_k = LOAD(k); }
                                                                         { ks_v_k.x = expf(ks_v_k.x - m); }
                                                                         y[...] = ks_v_k.x * inv; }

Each loop starts its iteration k by replaying, in order, the part of every earlier loop's body
that computes element k (a backward slice: the statements that write the element, the local
declarations and `if`s they depend on; stores, accumulations into outer variables and other side
effects are left out), then runs its own body on the local. A fill loop that does nothing else
is deleted. The register_cache reversed: data is re-read from memory in every pass instead of
staying in registers between the passes (one DRAM/L2 read per pass).

Why it is sound: element k of the array at the start of loop i's iteration k is what the slices
of loops 0..i-1 compute for k, in that order, provided (checked): every access is `A[k]` with k
the enclosing loop's variable and every loop has the same header (iteration k of one loop
matches iteration k of the others); the loops are not nested in each other nor in a loop that
does not also enclose the array's declaration (the array is not carried across an outer loop);
a loop that rewrites the array after the fill runs whenever the later loops run (they are
siblings with no exit between them); no loop breaks, continues or returns; the slices assign
nothing but the element and their own locals, read no array and no memory this function writes,
and every outer variable they read keeps its value from the replayed loop to the last reader.
The fill's slice must read global memory (a register cache of global data).

Forward, `cache_sweep_in_registers`: the reverse. Sibling loops with the same header over a
compile-time trip count V (a literal, macro or template parameter; V <= 64) that each load the same
value for iteration k - a declaration `T y = E;` at the top of the loop body, or `T y; { ...; y =
E; }` as this operator leaves it, with E reading global memory - load it once: `T ks_c_y[V];`
before the first loop, `ks_c_y[k] = y;` right after the first loop's load, and every later loop's
E becomes `ks_c_y[k]`. Why it is sound: E in a later loop's iteration k computes what it did in
the first loop's iteration k when everything it reads is the same there - checked: the loop
variable, variables declared before the loops and never assigned after their declaration, and
locals of the loop body declared before the load with the same text in both loops (`const int j
= k * 32 + lane;`), over the same; the memory E reads (its pointer roots) is not written anywhere in
the function; the first loop stores slot k on every iteration (no `break`, `continue`, `return`
in it) and runs whenever a later loop runs (siblings with no exit between them). The value a
later loop modifies after its load is its own copy: the slot keeps the loaded value.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name, contains, same, writer_of
from corpora.code.source import Source
from mining.carriers import pointer_roots
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, candidate
from mining.operators.nodes import (FunctionIndex, int_value, kernels, loops_around, norm, reads_global, rename_identifiers,
                                    subscript_chain, tokens)
from mining.operators.reduction_tree import fresh, template_params
from mining.operators.rewrite_util import (after_open_brace, body_indent, line_indent, pragma_before, splice_range,
                                           structural)
from corpora.code.parse import text, walk


_IMPURE_CALL = re.compile(r"(atomic\w*|__sync\w*|__shfl\w*|__ballot\w*|__any\w*|__all\w*|__activemask|__threadfence\w*|"
                          r"printf|malloc|free|memcpy|memset|__st\w+|__pipeline\w*)$")
_LOOPS = ("for_statement", "while_statement", "do_statement", "switch_statement")
_EXITS = ("break_statement", "continue_statement", "return_statement", "goto_statement")


@dataclass
class _Loop:
    node: Node
    var: str
    body: Node


def _header_key(loop: Node, var: str) -> Optional[str]:
    parts = []
    for fld in ("initializer", "condition", "update"):
        n = loop.child_by_field_name(fld)
        if n is None:
            return None
        parts.append(" ".join(t if t != var else "@" for t, _, _ in tokens(text(n))))
    return " ; ".join(parts)


def _loop_var(loop: Node) -> Optional[str]:
    init = loop.child_by_field_name("initializer")
    if init is None or init.type != "declaration":
        return None
    ds = [d for d in init.named_children if d.type == "init_declarator"]
    if len(ds) != 1:
        return None
    d = ds[0].child_by_field_name("declarator")
    return text(d) if d is not None and d.type == "identifier" else None


def _statements(node: Node) -> list[Node]:
    if node.type == "compound_statement":
        return [c for c in node.named_children if c.type != "comment"]
    return [node]


def _idents(node: Node) -> set[str]:
    out = set()
    toks = tokens(text(node))
    for i, (t, _, _) in enumerate(toks):
        if re.fullmatch(r"[A-Za-z_]\w*", t) and (i == 0 or toks[i - 1][0] not in (".", "->", "::")):
            out.add(t)
    return out


def _write_target(n: Node) -> Optional[Node]:
    if n.type == "assignment_expression":
        return n.child_by_field_name("left")
    if n.type == "update_expression":
        return n.child_by_field_name("argument")
    return None


def _base(node: Node) -> Node:
    while node.type in ("subscript_expression", "field_expression", "parenthesized_expression"):
        node = node.named_children[0] if node.type == "parenthesized_expression" else node.child_by_field_name("argument")
    return node


class _Slicer:
    """Backward slice of one loop body for the array element: kept statements, rendered."""

    def __init__(self, src: Source, array: str, var: str):
        self.src, self.array, self.var = src, array, var
        self.fail = ""
        self.kept: list[Node] = []  # every kept statement (for the purity checks)
        self.locals: set[str] = set()

    def writes_element(self, node: Node) -> bool:
        return any(_write_target(n) is not None and text(_base(_write_target(n))) == self.array for n in walk(node))

    def run(self, stmts: list[Node], needed: set[str]) -> Optional[list[tuple[str, Node, list]]]:
        """[(kind, node, children)] in source order; `needed` grows with what kept statements read."""
        out = []
        for st in reversed(stmts):
            if self.fail:
                return None
            if st.type == "expression_statement":
                if not st.named_children:
                    continue
                targets = [t for t in (_write_target(n) for n in walk(st)) if t is not None]
                names = {text(_base(t)) for t in targets}
                if names & (needed | {self.array}):
                    if st.named_children[0].type not in ("assignment_expression", "update_expression"):
                        self.fail = "the element is written inside a larger expression"
                        return None
                    self.kept.append(st)
                    needed |= _idents(st)
                    out.insert(0, ("stmt", st, []))
            elif st.type == "declaration":
                declared = set()
                for d in st.named_children:
                    if d.type in ("init_declarator", "identifier"):
                        nm = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
                        if nm is not None and nm.type == "identifier":
                            declared.add(text(nm))
                        else:
                            declared.add("?")
                self.locals |= declared
                if declared & needed:
                    if "?" in declared:
                        self.fail = "a needed declaration that is not a plain scalar"
                        return None
                    self.kept.append(st)
                    needed |= _idents(st)
                    out.insert(0, ("stmt", st, []))
            elif st.type == "if_statement":
                cons = st.child_by_field_name("consequence")
                alt = st.child_by_field_name("alternative")
                alt_body = None
                if alt is not None:
                    alt_body = next((c for c in alt.named_children if c.type != "comment"), None)
                n1, n2 = set(needed), set(needed)
                k1 = self.run(_statements(cons), n1)
                k2 = self.run(_statements(alt_body), n2) if alt_body is not None else []
                if k1 is None or k2 is None:
                    return None
                if k1 or k2:
                    needed |= n1 | n2 | _idents(st.child_by_field_name("condition"))
                    self.kept.append(st.child_by_field_name("condition"))
                    out.insert(0, ("if", st, [k1, k2]))
            elif st.type == "compound_statement":
                k = self.run(_statements(st), needed)
                if k is None:
                    return None
                if k:
                    out.insert(0, ("block", st, [k]))
            elif st.type == "comment" or st.type.startswith("preproc"):
                continue
            else:
                if _idents(st) & (needed | {self.array}):
                    self.fail = f"a {st.type} takes part in computing the element"
                    return None
        return out

    def render(self, items, indent: str, rename: dict[str, str]) -> list[str]:
        lines = []
        for kind, node, children in items:
            if kind == "stmt":
                lines.append(indent + _renamed(self.src, node, rename))
            elif kind == "block":
                lines.append(indent + "{")
                lines += self.render(children[0], indent + "    ", rename)
                lines.append(indent + "}")
            else:
                cond = _renamed(self.src, node.child_by_field_name("condition"), rename)
                lines.append(f"{indent}if {cond} {{")
                lines += self.render(children[0], indent + "    ", rename)
                if children[1]:
                    lines.append(indent + "} else {")
                    lines += self.render(children[1], indent + "    ", rename)
                lines.append(indent + "}")
        return lines


def _renamed(src: Source, node: Node, rename: dict[str, str]) -> str:
    """Comment-free text of a node with `A[k]` (key "A[k]") and identifiers renamed."""
    code = src.code[node.start_byte:node.end_byte].decode("utf-8", "replace")
    code = " ".join(code.split())
    for key, new in rename.items():
        if "[" in key:
            a, k = key[:-1].split("[")
            code = re.sub(r"\b%s\s*\[\s*%s\s*\]" % (re.escape(a), re.escape(k)), new, code)
    ids = {k: v for k, v in rename.items() if "[" not in k}
    if ids:
        toks = tokens(code)
        out, pos = [], 0
        for i, (t, a, b) in enumerate(toks):
            if t in ids and (i == 0 or toks[i - 1][0] not in (".", "->", "::")):
                out.append(code[pos:a])
                out.append(ids[t])
                pos = b
        out.append(code[pos:])
        code = "".join(out)
    return code


class RegisterArrayToRecompute(Operator):
    name = "register_array_to_recompute"
    carrier = "register_cache"
    description = "recompute a register-cached array element in every loop instead of keeping the array"

    def edits(self, src: Source):
        st = structural(src)
        for f in st.funcs:
            fn = st.func_node(f)
            if fn is None:
                continue
            for decl in st.nodes("declaration", within=fn):
                if re.search(rb"\b(__shared__|extern|static)\b", st.code[decl.start_byte:decl.end_byte]):
                    continue
                ds = [d for d in decl.named_children if d.type.endswith("declarator") or d.type == "identifier"]
                if len(ds) != 1 or ds[0].type != "array_declarator":
                    continue
                inner = ds[0].child_by_field_name("declarator")
                if inner is None or inner.type != "identifier":
                    continue
                e = self.rewrite(st, f, fn, decl, text(inner))
                if e is not None:
                    yield e

    def rewrite(self, src: Source, f, fn: Node, decl: Node, name: str) -> Optional[Edit]:
        idx = FunctionIndex(src, fn)
        var = next((v for v in idx.vars if v.name == name and same(v.decl, decl)), None)
        if var is None:
            return None
        uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == name and
                not contains(var.declarator, n) and idx.visible(name, n.start_byte) is var]
        loops: list[_Loop] = []
        element_nodes = []
        for u in uses:
            outer, indices = subscript_chain(u)
            if len(indices) != 1 or indices[0] is None or indices[0].type != "identifier":
                return None
            w = writer_of(outer)
            if w is not None and w.type == "pointer_expression":
                return None  # address taken
            loop = next((p for p in loops_around(u) if p.type == "for_statement"), None)
            if loop is None or loops_around(u)[0].type != "for_statement" or not same(loops_around(u)[0], loop):
                return None
            lv = _loop_var(loop)
            if lv is None or lv != text(indices[0]):
                return None
            if not any(same(L.node, loop) for L in loops):
                loops.append(_Loop(loop, lv, loop.child_by_field_name("body")))
            element_nodes.append(outer)
        loops.sort(key=lambda L: L.node.start_byte)
        if len(loops) < 2:
            return None
        key = _header_key(loops[0].node, loops[0].var)
        decl_loops = loops_around(decl)
        for L in loops:
            if key is None or _header_key(L.node, L.var) != key or L.body is None:
                return None
            if any(n.type in _EXITS for n in walk(L.body)):
                return None
            if any(contains(M.node, L.node) for M in loops if M is not L):
                return None
            if any(not any(same(a, b) for b in decl_loops) for a in loops_around(L.node)):
                return None  # carried across an enclosing loop
        # slices
        slicers, slices = [], []
        for L in loops:
            sl = _Slicer(src, name, L.var)
            items = sl.run(_statements(L.body), set())
            if items is None:
                return None
            slicers.append(sl)
            slices.append(items)
        if not slices[0]:
            return None
        writers = [i for i in range(1, len(loops)) if slices[i]]
        for i in writers:
            for j in range(i + 1, len(loops)):
                if not self._always_before(loops[i].node, loops[j].node):
                    return None
        # the slices' purity and the stability of what they read
        roots = pointer_roots(src, f)
        written_roots = self._written_roots(src, fn, roots)
        last = loops[-1].node
        fill_reads_global = False
        for i, sl in enumerate(slicers):
            if not slices[i]:
                continue
            for node in sl.kept:
                for n in walk(node):
                    if n.type == "call_expression" and _IMPURE_CALL.match(call_name(n) or ""):
                        return None
                    t = _write_target(n)
                    if t is not None:
                        b = text(_base(t))
                        if b != name and b not in sl.locals:
                            return None  # the slice would change an outer variable again
                for ident in _idents(node) - sl.locals - {name, loops[i].var}:
                    v = idx.visible(ident, node.start_byte)
                    if v is None:
                        continue  # a macro, a function, a global
                    if ident in roots:
                        if roots[ident] & written_roots:
                            return None
                        continue
                    if v.shape == "array":
                        return None
                    if any(loops[i].node.start_byte <= a.start_byte < last.start_byte for a in v.assigned):
                        return None
                if i == 0 and node.type != "condition_clause" and reads_global(src, fn, text(node)):
                    fill_reads_global = True
        if not fill_reads_global:
            return None
        # the element's type and a fresh local name
        t = decl.child_by_field_name("type")
        if t is None:
            return None
        typ = " ".join(text(t).split())
        quals = [text(c) for c in decl.children if c.type == "type_qualifier"]
        if quals:
            return None
        fcode = text(fn)
        local = f"ks_{name}_k"
        while re.search(r"\b%s\b" % re.escape(local), fcode):
            local += "_"
        # edits
        subs = []
        ds, de = src.line_span(decl.start_byte, decl.end_byte)
        subs.append(Edit(ds, de, ""))
        for i, L in enumerate(loops):
            if i == 0 and self._only_slice(L.body, slicers[0]):
                s0 = pragma_before(src, L.node.start_byte) or L.node.start_byte
                a, b = src.line_span(s0, L.node.end_byte)
                subs.append(Edit(a, b, ""))
                continue
            ind = body_indent(src, L.body) if L.body.type == "compound_statement" else \
                line_indent(src, L.node.start_byte) + "    "
            head = [f"{ind}{typ} {local};"]
            for p in range(i):
                if slices[p] and (p == 0 or p in writers):
                    rename = {f"{name}[{loops[p].var}]": local}
                    if loops[p].var != L.var:
                        rename[loops[p].var] = L.var
                    head.append(ind + "{")
                    head += slicers[p].render(slices[p], ind + "    ", rename)
                    head.append(ind + "}")
            inner = [Edit(n.start_byte, n.end_byte, local) for n in element_nodes if contains(L.body, n)]
            if L.body.type == "compound_statement":
                pos = after_open_brace(src, L.body)
                body_text = splice_range(src, L.body.start_byte, L.body.end_byte,
                                         [Edit(pos, pos, "\n" + "\n".join(head))] + inner)
            else:
                old = splice_range(src, L.body.start_byte, L.body.end_byte, inner)
                body_text = "{\n" + "\n".join(head) + "\n" + ind + old + "\n" + line_indent(src, L.node.start_byte) + "}"
            subs.append(Edit(L.body.start_byte, L.body.end_byte, body_text))
        subs.sort()
        for (a1, b1, _), (a2, b2, _) in zip(subs, subs[1:]):
            if a2 < b1:
                return None
        lo, hi = subs[0][0], max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))

    @staticmethod
    def _only_slice(body: Node, sl: _Slicer) -> bool:
        """Every statement of the loop body is part of the element's slice (the loop does nothing else)."""
        kept = {(n.start_byte, n.end_byte) for n in sl.kept}
        for n in walk(body):
            if n.type in ("expression_statement", "declaration") and (n.start_byte, n.end_byte) not in kept:
                return False
        return True

    @staticmethod
    def _always_before(a: Node, b: Node) -> bool:
        """`a` and `b` are statements of one block, `a` first, with nothing between them that leaves it."""
        if a.parent is None or b.parent is None or not same(a.parent, b.parent) or a.start_byte >= b.start_byte:
            return False
        for c in a.parent.named_children:
            if a.end_byte <= c.start_byte < b.start_byte and any(n.type in _EXITS for n in walk(c)):
                return False
        return True

    @staticmethod
    def _written_roots(src: Source, fn: Node, roots: dict[str, set[str]]) -> set[str]:
        written = set()
        for n in walk(fn):
            target = _write_target(n)
            if n.type == "call_expression":
                fnm = n.child_by_field_name("function")
                if fnm is not None and re.match(r"(atomic\w+|__st\w+|memcpy|memset)$", text(fnm)):
                    args = n.child_by_field_name("arguments")
                    target = args.named_children[0] if args is not None and args.named_children else None
            if target is None:
                continue
            for m in walk(target):
                if m.type == "identifier" and text(m) in roots:
                    written |= roots[text(m)]
        return written


# --------------------------------------------------------------------------- forward
MAX_CACHE = 64  # slots per thread: more would spill the cache to local memory


@dataclass
class _Load:
    """One load of a sweep: `T y = E;` (or `T y; { ...; y = E; }`)."""
    type: str
    name: str
    value: Node  # E
    after: Node  # the statement after which the first sweep stores the slot
    prelude: dict[str, tuple[str, Node]]  # body locals declared before E: name -> (text, `@` for k; node)
    key: str  # E normalized, the loop variable written `@`


def _trip(src: Source, fn: Node, loop: Node, var: str) -> Optional[str]:
    """The bound V of `for (int k = 0; k < V; ++k)` when it is a compile-time constant <= MAX_CACHE."""
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or cond is None or upd is None or \
            not re.fullmatch(r"(?:const\s+)?(?:unsigned\s+)?int\s+%s\s*=\s*0\s*;?" % var, " ".join(text(init).split())):
        return None
    m = re.fullmatch(r"%s\s*<\s*(\w+)" % var, " ".join(text(cond).split()))
    if m is None or norm(text(upd)) not in (f"++ {var}", f"{var} ++", f"{var} += 1"):
        return None
    v = int_value(src, m.group(1))
    if v is not None:
        return m.group(1) if 1 <= v <= MAX_CACHE else None
    return m.group(1) if m.group(1) in template_params(src, fn) else None


def _key(s: str, var: str) -> str:
    return norm(rename_identifiers(s, {var: "@"}))


def _declared(st: Node, var: str) -> dict[str, tuple[str, Node]]:
    out = {}
    for d in st.named_children:
        if d.type in ("init_declarator", "identifier"):
            n = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            if n is not None and n.type == "identifier":
                out[text(n)] = (_key(text(st), var), st)
    return out


def _loads(src: Source, loop: Node, var: str) -> list[_Load]:
    body = loop.child_by_field_name("body")
    stmts = _statements(body) if body is not None else []
    out: list[_Load] = []
    prelude: dict[str, tuple[str, Node]] = {}
    for i, st in enumerate(stmts):
        if st.type != "declaration":
            continue
        ds = [d for d in st.named_children if d.type in ("init_declarator", "identifier")]
        tnode = st.child_by_field_name("type")
        if len(ds) != 1 or tnode is None or text(tnode) == "auto":
            prelude.update(_declared(st, var))
            continue
        d = ds[0]
        ttext = " ".join(text(tnode).split())
        if d.type == "init_declarator":
            name_node, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
            if name_node is not None and name_node.type == "identifier" and value is not None and \
                    value.type != "initializer_list":
                out.append(_Load(ttext, text(name_node), value, st, dict(prelude), _key(text(value), var)))
            prelude.update(_declared(st, var))
            continue
        # `T y; { locals; y = E; }`
        nxt = stmts[i + 1] if i + 1 < len(stmts) else None
        if nxt is None or nxt.type != "compound_statement":
            continue
        inner = _statements(nxt)
        last = inner[-1] if inner else None
        m = re.fullmatch(r"%s\s*=\s*(.+);" % re.escape(text(d)), " ".join(text(last).split())) if last is not None else None
        if m is None or not all(c.type == "declaration" for c in inner[:-1]):
            continue
        a = last.named_children[0] if last.named_children else None
        value = a.child_by_field_name("right") if a is not None and a.type == "assignment_expression" else None
        if value is not None:
            pre = dict(prelude)
            for c in inner[:-1]:
                pre.update(_declared(c, var))
            out.append(_Load(ttext, text(d), value, nxt, pre, _key(text(value), var)))
    return out


def cache_sweep_in_registers(source: str, ctx: Context) -> list[Materialization]:
    """A value every sweep reloads -> loaded once into a register array (see the module docstring)."""
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        f = src.function_at(k.node.start_byte)
        idx = FunctionIndex(src, k.node)
        roots = pointer_roots(src, f)
        written = RegisterArrayToRecompute._written_roots(src, k.node, roots)
        for blk in walk(k.body):
            if blk.type != "compound_statement":
                continue
            loops = [c for c in blk.named_children if c.type == "for_statement"]
            for i, first in enumerate(loops):
                m = _cache_site(src, k.node, idx, roots, written, first, loops[i + 1:])
                if m is not None:
                    out.append(m)
    return out


def _steady(idx: FunctionIndex, roots, written, node: Node, var: str, prelude, before: int,
            used: set[str], depth: int = 0) -> bool:
    """Everything `node` reads is the same in every sweep's iteration k: the loop variable, body locals
    of `prelude` (collected into `used`; never assigned, themselves steady), or variables declared before
    the first sweep that are never assigned; pointers among them reach no memory the function writes."""
    for n in walk(node):
        if n.type != "identifier" or text(n) == var:
            continue
        nm = text(n)
        if nm in prelude:
            v = idx.visible(nm, prelude[nm][1].end_byte)
            if v is None or v.assigned or depth > 3 or v.value is None or \
                    not _steady(idx, roots, written, v.value, var, prelude, before, used, depth + 1):
                return False
            used.add(nm)
            continue
        v = idx.visible(nm, n.start_byte)
        if v is None:
            continue  # a function, macro or constant
        if v.assigned or v.shape == "array" or v.decl.start_byte >= before:
            return False
        if roots.get(nm, set()) & written:
            return False
    return True


def _cache_site(src: Source, fn: Node, idx: FunctionIndex, roots, written, first: Node, later: list[Node]):
    var = _loop_var(first)
    if var is None or (bound := _trip(src, fn, first, var)) is None or \
            any(n.type in _EXITS for n in walk(first.child_by_field_name("body"))):
        return None
    key = _header_key(first, var)
    for ld in _loads(src, first, var):
        used: set[str] = set()
        if not reads_global(src, fn, text(ld.value)) or _IMPURE_CALL.search(text(ld.value)) or \
                not _steady(idx, roots, written, ld.value, var, ld.prelude, first.start_byte, used):
            continue
        hits = []
        for lp in later:
            lv = _loop_var(lp)
            if lv is None or _header_key(lp, lv) != key or not RegisterArrayToRecompute._always_before(first, lp):
                continue
            for other in _loads(src, lp, lv):
                # the same expression over body locals declared the same way (and never assigned there)
                if other.key == ld.key and other.type == ld.type and \
                        all(nm in other.prelude and other.prelude[nm][0] == ld.prelude[nm][0] and
                            (v := idx.visible(nm, other.prelude[nm][1].end_byte)) is not None and not v.assigned
                            for nm in used):
                    hits.append((other, lv))
                    break
        if not hits:
            continue
        slot = fresh(src, fn, f"ks_c_{ld.name}")
        ind = line_indent(src, first.start_byte)
        at = pragma_before(src, first.start_byte) or first.start_byte
        a = src.raw.rfind(b"\n", 0, at) + 1
        typ = re.sub(r"^const\s+", "", ld.type)
        edits = [Edit(a, a, f"{ind}{typ} {slot}[{bound}];  // {ld.name} of every iteration, loaded once\n"),
                 Edit(ld.after.end_byte, ld.after.end_byte,
                      f"\n{line_indent(src, ld.after.start_byte)}{slot}[{var}] = {ld.name};")]
        edits += [Edit(o.value.start_byte, o.value.end_byte, f"{slot}[{lv}]") for o, lv in hits]
        return candidate(src, edits, "cache_sweep_in_registers",
                         f"{ld.name}: loaded once into {slot}[{bound}] and read from registers by {len(hits)} later "
                         f"sweep(s)", excerpt=" ".join(text(ld.value).split())[:160])
    return None


PAIR = Pair(RegisterArrayToRecompute, (Rewrite("cache_sweep_in_registers", "register_cache", cache_sweep_in_registers,
                                               prior=1.5),))
