"""Forwarding a single fill into its reads: the engine behind shared_tile_to_global and
register_cache_to_reload.

An array `T` (shared, or a per-thread local) that is written by exactly one assignment
`T[e1]..[en] = E;` (the fill) and otherwise only read can be removed: every read `T[a1]..[an]`
becomes `(E)` with the writer's view of the fill indices replaced by the reader's (`e_k -> a_k`),
and the fill and the declaration go away. What makes that substitution sound:

* The writer-specific variables of the fill (for a shared array: threadIdx and every local derived
  from it; for any array: the induction variables of the loops that enclose the fill but not the
  read, and the locals declared inside them) may reach `E` only through the fill indices. A fill
  index is a variable term (`i`, `threadIdx.x`) or a sum (`threadIdx.y + i`); a sum is replaced
  only where it stands as a whole summand (`r0 + threadIdx.y + i` -> `r0 + (a)`: integer addition
  is associative). Locals are followed through their (single) definitions and inlined where the
  substitution changes them or where they are out of scope at the read; any writer-specific
  variable left over means the site is not rewritten.
* Every other variable of `E` holds the same value at the read as at the fill: it is a parameter or
  local that is never assigned after its declaration, or the induction variable of a loop that
  encloses both the fill and the read, with the read after the fill in the loop body (same
  iteration). `E` may read global memory only through pointers the function never writes, and no
  shared memory or local arrays at all.
* Conditions of `if` statements between the fill and the reads become a guard:
  `(G ? E : 0)`; an element the guard skipped was never written, so the original read there was
  undefined. A guarded fill inside a loop that also encloses the reads is refused (the original
  would read the previous iteration's value).

Whether the fill covers every element that is read is not proven here; an element nobody wrote
was garbage before and becomes `E` (possibly an out-of-bounds load): the gate judges that.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.carriers import pointer_roots
from mining.operators.base import Edit
from corpora.code.nodes import contains, same, writer_of
from mining.operators.nodes import FunctionIndex, Var, loops_around, norm, reads_global, subscript_chain, tokens
from mining.operators.rewrite_util import pragma_before, splice_range
from corpora.code.parse import text, walk

_THREAD_VARS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
_OK_PREV = {"+", "(", "[", ",", "=", "?", ":", "<", ">", "<=", ">=", "==", "!=", "&&", "||", "return", "{"}
_OK_NEXT = {"+", "-", ")", "]", ",", ";", "?", ":", "<", ">", "<=", ">=", "==", "!=", "&&", "||", "}"}


def _is_thread_term(node: Node) -> Optional[str]:
    if node.type == "field_expression":
        arg, fld = node.child_by_field_name("argument"), node.child_by_field_name("field")
        if arg is not None and fld is not None and text(arg) == "threadIdx" and text(fld) in "xyz":
            return f"threadIdx.{text(fld)}"
    return None


# ------------------------------------------------------------------------------------ rendering

class Renderer:
    """Text of an expression as the reader sees the writer's value (see the module docstring)."""

    def __init__(self, idx: FunctionIndex, fill: Node, read: Node, terms: dict[str, str], units: list[tuple[list[str], str]],
                 private: bool, writer_loops: list[Node]):
        self.idx, self.src = idx, idx.src
        self.fill, self.read = fill, read
        self.terms, self.units = terms, units
        self.private = private
        self.writer_loops = writer_loops
        self.common_loops = [lp for lp in loops_around(fill) if contains(lp, read)]
        self.fail = ""

    def writer_specific(self, name: str, v: Optional[Var]) -> bool:
        if name in _THREAD_VARS:
            return not self.private
        if v is None:
            return False
        return any(contains(lp, v.declarator) for lp in self.writer_loops)

    def render(self, node: Node, depth: int = 0) -> Optional[str]:
        if depth > 8:
            self.fail = "definition chain too deep"
            return None
        base = node.start_byte
        code = self.src.code[node.start_byte:node.end_byte].decode("utf-8", "replace")
        subs: list[Edit] = []
        # whole-summand occurrences of compound fill indices
        toks = tokens(code)
        for unit, image in self.units:
            n = len(unit)
            for i in range(len(toks) - n + 1):
                if [t for t, _, _ in toks[i:i + n]] != unit:
                    continue
                prev = toks[i - 1][0] if i > 0 else "("
                nxt = toks[i + n][0] if i + n < len(toks) else ")"
                if prev in _OK_PREV and nxt in _OK_NEXT:
                    s, e = toks[i][1], toks[i + n - 1][2]
                    if not any(s < e2 and s2 < e for s2, e2, _ in subs):
                        subs.append(Edit(s, e, _paren(image)))
        covered = [(s, e) for s, e, _ in subs]
        # every other token: identifiers are followed to their declarations (token-wise: robust
        # against tree-sitter reading `a < B && c > d` as a template argument list)
        for i, (t, ts, te) in enumerate(toks):
            if any(s <= ts and te <= e for s, e in covered):
                continue
            if i > 0 and toks[i - 1][0] in (".", "->", "::"):
                continue
            if t.startswith("threadIdx."):
                if t in self.terms:
                    subs.append(Edit(ts, te, _paren(self.terms[t])))
                elif self.writer_specific(t, None):
                    self.fail = f"{t} reaches the value outside the fill indices"
                    return None
                continue
            if not re.fullmatch(r"[A-Za-z_]\w*", t):
                continue
            r = self.identifier(t, base + len(code[:ts].encode("utf-8")), depth)
            if r is None:
                return None
            if r != t:
                subs.append(Edit(ts, te, r))
        out = []
        pos = 0
        for s, e, t in sorted(subs):
            out.append(code[pos:s])
            out.append(t)
            pos = e
        out.append(code[pos:])
        return " ".join("".join(out).split())

    def identifier(self, name: str, at: int, depth: int) -> Optional[str]:
        if name in self.terms:
            return _paren(self.terms[name])
        v = self.idx.visible(name, at)
        if v is None:
            return name  # a macro, an enumerator, a global: uniform
        if self.writer_specific(name, v) and v.value is None:
            self.fail = f"writer-specific variable {name} reaches the value"
            return None
        if v.shape == "array":
            self.fail = f"the value reads the array {name}"
            return None
        at_read = self.idx.visible(name, self.read.start_byte)
        same_at_read = at_read is v
        if not v.assigned:
            if v.value is None:
                if v.kind == "param" and same_at_read:
                    return name
                self.fail = f"{name} has no single definition"
                return None
            body = self.render(v.value, depth + 1)
            if body is None:
                return None
            if same_at_read and body == " ".join(self.src.code[v.value.start_byte:v.value.end_byte]
                                                 .decode("utf-8", "replace").split()) and \
                    not self.writer_specific(name, v):
                return name
            return "(" + body + ")"
        loop = self.idx.loop_of(v)
        if loop is not None and any(same(loop, c) for c in self.common_loops) and same_at_read:
            return name  # same iteration: the read follows the fill in the loop body
        self.fail = f"{name} changes between the fill and the read"
        return None


def _paren(s: str) -> str:
    s = " ".join(s.split())
    if re.fullmatch(r"[A-Za-z_]\w*(\s*\.\s*[A-Za-z_]\w*)?|\d[\w.]*", s):
        return s
    return "(" + s + ")"


# ------------------------------------------------------------------------------------ the plan


def _pure_region(node: Node, fill_stmt: Node) -> bool:
    """`node` holds nothing but the fill, pure local declarations, if/for scaffolding."""
    for n in walk(node):
        if n.type == "expression_statement" and not same(n, fill_stmt) and not contains(fill_stmt, n):
            return False
        if n.type in ("return_statement", "break_statement", "continue_statement", "goto_statement",
                      "while_statement", "do_statement"):
            return False
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            name = text(fn) if fn is not None else ""
            if not contains(fill_stmt, n) and re.match(r"(atomic|__sync|__shfl|__ballot|__pipeline)", name):
                return False
        if n.type == "declaration" and n.parent is not None and n.parent.type == "for_statement":
            continue
        if n.type in ("assignment_expression", "update_expression") and not contains(fill_stmt, n):
            p = n.parent
            if not (p is not None and p.type == "for_statement" and same(p.child_by_field_name("update"), n)):
                return False
    return True


@dataclass
class Plan:
    edit: Edit
    reads: int


def forward_fill(src: Source, fn: Node, decl: Node, name: str, ndims: int, private: bool,
                 require_global_load: bool = False) -> Optional[Plan]:
    idx = FunctionIndex(src, fn)
    var = next((v for v in idx.vars if v.name == name and same(v.decl, decl)), None)
    if var is None:
        return None
    uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == name and
            not contains(var.declarator, n) and idx.visible(name, n.start_byte) is var]
    writes, reads = [], []
    for u in uses:
        outer, indices = subscript_chain(u)
        if len(indices) != ndims or any(i is None for i in indices):
            return None  # passed whole, sliced or reinterpreted
        w = writer_of(outer)
        if w is not None:
            if w.type != "assignment_expression" or text(w.child_by_field_name("operator")) != "=":
                return None
            writes.append((w, outer, indices))
        else:
            reads.append((outer, indices))
    if len(writes) != 1 or not reads:
        return None
    asg, lhs, findices = writes[0]
    fill_stmt = asg.parent
    if fill_stmt is None or fill_stmt.type != "expression_statement":
        return None
    value = asg.child_by_field_name("right")
    shared = {n for _, n, _ in src.shared_decls}
    vtext = src.code[value.start_byte:value.end_byte].decode("utf-8", "replace")
    if any(re.search(r"\b%s\b" % re.escape(s), vtext) for s in shared):
        return None
    if re.search(r"\b(atomic\w*|__shfl\w*|__syncthreads|__syncwarp|__ballot\w*)\s*\(", vtext):
        return None
    if require_global_load and not reads_global(src, fn, vtext):
        return None
    # global memory the value reads must never be written by this function
    f = src.function_at(fn.start_byte)
    if f is not None and reads_written_memory(src, f, fn, value):
        return None

    # fill indices: variable terms and compound (sum) units
    terms_of: list[Optional[str]] = []
    unit_of: list[Optional[list[str]]] = []
    fixed: list[Optional[str]] = []
    for e in findices:
        t = _is_thread_term(e)
        if t is None and e.type == "identifier":
            t = text(e)
        if t is not None:
            terms_of.append(t)
            unit_of.append(None)
            fixed.append(None)
        elif e.type == "binary_expression" and text(e.child_by_field_name("operator")) == "+":
            terms_of.append(None)
            unit_of.append([tk for tk, _, _ in tokens(src.code[e.start_byte:e.end_byte].decode())])
            fixed.append(None)
        elif e.type == "number_literal":
            terms_of.append(None)
            unit_of.append(None)
            fixed.append(norm(text(e)))
        else:
            return None
    named = [t for t in terms_of if t]
    if len(set(named)) != len(named):
        return None

    # guards between the fill and the reads' common ancestor
    subs: list[Edit] = []
    fill_loops = loops_around(fill_stmt)
    for outer, rindices in reads:
        if outer.start_byte < fill_stmt.end_byte:
            return None
        if not same(_scope(outer), _scope(fill_stmt)):
            return None
        for k, fx in enumerate(fixed):
            if fx is not None and norm(text(rindices[k])) != fx:
                return None
        writer_loops = [lp for lp in fill_loops if not contains(lp, outer)]
        common = [lp for lp in fill_loops if contains(lp, outer)]
        terms = {terms_of[k]: _code(src, rindices[k]) for k in range(ndims) if terms_of[k]}
        units = [(unit_of[k], _code(src, rindices[k])) for k in range(ndims) if unit_of[k]]
        r = Renderer(idx, fill_stmt, outer, terms, units, private, writer_loops)
        body = r.render(value)
        if body is None:
            return None
        guards = []
        anc = _common_ancestor(fill_stmt, outer)
        p, child = fill_stmt.parent, fill_stmt
        while p is not None and not same(p, anc):
            if p.type == "if_statement" and not _implied(idx, p, child, outer, anc):
                cond = p.child_by_field_name("condition")
                g = r.render(cond)
                if g is None:
                    return None
                g = g.strip()
                if g.startswith("(") and g.endswith(")") and _balanced(g[1:-1]):
                    g = g[1:-1].strip()
                alt = p.child_by_field_name("alternative")
                guards.append(f"!({g})" if alt is not None and contains(alt, child) else g)
            elif p.type in ("for_statement", "while_statement", "do_statement", "switch_statement"):
                pass
            child, p = p, p.parent
        if guards and common:
            return None
        if guards and "?" in body and not (body.startswith("(") and body.endswith(")") and _balanced(body[1:-1])):
            body = "(" + body + ")"
        rep = body if not guards else f"{' && '.join(_paren_guard(g) for g in guards)} ? {body} : 0"
        subs.append(Edit(outer.start_byte, outer.end_byte, "(" + rep + ")" if not _atomic_text(rep) else rep))

    # the fill region to delete: the largest pure statement around the fill without reads
    region = fill_stmt
    p = fill_stmt.parent
    while p is not None:
        if p.type == "compound_statement":
            if p.parent is None or p.parent.type not in ("for_statement", "if_statement", "else_clause",
                                                         "while_statement"):
                break
        elif p.type not in ("for_statement", "if_statement", "else_clause", "condition_clause"):
            break
        if any(contains(p, o) for o, _ in reads) or not _pure_region(p, fill_stmt):
            break
        if p.type in ("for_statement", "if_statement", "compound_statement"):
            region = p
        p = p.parent
    start, end = region.start_byte, region.end_byte
    pragma = pragma_before(src, start) if region.type == "for_statement" else None
    if pragma is not None:
        start = pragma
    start, end = src.line_span(start, end)
    if region.parent is not None and region.parent.type != "compound_statement":
        subs.append(Edit(region.start_byte, region.end_byte, ";"))
    else:
        subs.append(Edit(start, end, ""))
    # the declaration, when it declares nothing else
    lo = min(s for s, _, _ in subs)
    hi = max(e for _, e, _ in subs)
    declarators = [d for d in decl.named_children if d.type in ("identifier", "init_declarator", "array_declarator",
                                                                 "pointer_declarator", "reference_declarator")]
    if len(declarators) == 1:
        ds, de = src.line_span(decl.start_byte, decl.end_byte)
        if de <= lo or ds >= hi:
            subs.append(Edit(ds, de, ""))
    subs.sort()
    for (s1, e1, _), (s2, e2, _) in zip(subs, subs[1:]):
        if s2 < e1:
            return None
    lo = min(s for s, _, _ in subs)
    hi = max(e for _, e, _ in subs)
    return Plan(Edit(lo, hi, splice_range(src, lo, hi, subs)), len(reads))


def _implied(idx: FunctionIndex, guard_if: Node, child: Node, read: Node, stop: Node) -> bool:
    """The read sits in the same branch of an `if` with the same condition, whose variables do not
    change: the fill's guard holds there too."""
    cond = guard_if.child_by_field_name("condition")
    alt = guard_if.child_by_field_name("alternative")
    in_alt = alt is not None and contains(alt, child)
    want = norm(idx.src.code[cond.start_byte:cond.end_byte].decode("utf-8", "replace"))
    for tok, _, _ in tokens(want):
        if re.fullmatch(r"[A-Za-z_]\w*", tok):
            v1 = idx.visible(tok, cond.start_byte)
            if v1 is not None and (v1.assigned or idx.visible(tok, read.start_byte) is not v1):
                return False
    p, c = read.parent, read
    while p is not None and not same(p, stop):
        if p.type == "if_statement":
            q = p.child_by_field_name("condition")
            qalt = p.child_by_field_name("alternative")
            if norm(idx.src.code[q.start_byte:q.end_byte].decode("utf-8", "replace")) == want and \
                    (qalt is not None and contains(qalt, c)) == in_alt and not contains(q, read):
                return True
        c, p = p, p.parent
    return False


def _atomic_text(s: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_]\w*|\d[\w.]*", s.strip()))


def _paren_guard(g: str) -> str:
    return g if re.fullmatch(r"[^&|?]*", g) and not re.search(r"[?]", g) else "(" + g + ")"


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


def _code(src: Source, node: Node) -> str:
    return " ".join(src.code[node.start_byte:node.end_byte].decode("utf-8", "replace").split())


def _scope(node: Node) -> Optional[Node]:
    p = node.parent
    while p is not None and p.type not in ("function_definition", "lambda_expression"):
        p = p.parent
    return p


def _common_ancestor(a: Node, b: Node) -> Node:
    p = a.parent
    while p is not None and not contains(p, b):
        p = p.parent
    return p


def reads_written_memory(src: Source, f, fn: Node, value: Node) -> bool:
    roots = pointer_roots(src, f)
    used = set()
    for n in walk(value):
        if n.type == "identifier" and text(n) in roots:
            used |= roots[text(n)]
    if not used:
        return False
    written = set()
    for n in walk(fn):
        target = None
        if n.type == "assignment_expression":
            target = n.child_by_field_name("left")
        elif n.type == "call_expression":
            fnm = n.child_by_field_name("function")
            if fnm is not None and re.match(r"(atomic\w+|__st\w+|memcpy|memset)$", text(fnm)):
                args = n.child_by_field_name("arguments")
                target = args.named_children[0] if args is not None and args.named_children else None
        if target is None:
            continue
        for m in walk(target):
            if m.type == "identifier" and text(m) in roots:
                written |= roots[text(m)]
    return bool(used & written)
