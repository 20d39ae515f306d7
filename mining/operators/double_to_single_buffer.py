"""double_to_single_buffer: a two-stage shared array `A[2][...]` becomes a single stage `A[...]`.

The leading dimension is dropped from the declaration and the stage subscript from every use
(`As[cur][k][m]` -> `As[k][m]`, `As[s]` -> `As`, whatever the stage expression: `kt & 1`,
`cur ^ 1`, a lambda parameter). With one stage the prefetch store of the next slice would
overwrite the slice other threads are still reading, so a `__syncthreads()` is inserted before the
first statement of the main loop that writes the array (directly or through a lambda / function of
this file that writes it), unless one is already there.

Why it is sound: in a double-buffered loop iteration kt reads the stage that the previous
iteration (or the prologue) stored, and stores the slice iteration kt + 1 reads. The rewrite is
only made when, in the loop body, every statement reading the array comes before every statement
writing it, and a `__syncthreads()` follows the writes in the same body (which also makes the
body's control flow block-uniform, so the inserted barrier is reached by every thread): reads of
slice kt by all threads, barrier, store of slice kt + 1, barrier, reads of slice kt + 1. A loop
that stores before it reads (which would need the statements reordered) is not a site.

Forward: none yet. No deterministic rewrite introduces this carrier; `skills optimize` applies
this operator's skills through the LLM materializer only (the pair's forward half is empty).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.carriers import double_buffer_sites
from mining.operators.base import Edit, Operator, Pair
from corpora.code.nodes import contains, same, writer_of
from mining.operators.nodes import FunctionIndex, subscript_chain
from mining.operators.rewrite_util import line_indent, node_at, splice_range, structural
from corpora.code.parse import text, walk


def _writers(src: Source, fn: Node, name: str) -> tuple[set[str], set[str]]:
    """Names of lambdas (locals) and functions of this file whose bodies write / touch `name`."""
    writes, touches = set(), set()
    pat = re.compile(rb"\b%s\b" % re.escape(name.encode()))
    for n in walk(fn):
        if n.type == "init_declarator":
            v = n.child_by_field_name("value")
            if v is not None and v.type == "lambda_expression":
                body = v.child_by_field_name("body")
                nm = text(n.child_by_field_name("declarator"))
                if body is not None and pat.search(src.code[body.start_byte:body.end_byte]):
                    touches.add(nm)
                    if _writes_in(src, body, name):
                        writes.add(nm)
    return writes, touches


def _writes_in(src: Source, node: Node, name: str) -> bool:
    """Whether `node` stores into the array `name` (an address that escapes counts as a store)."""
    for n in walk(node):
        if n.type == "identifier" and text(n) == name:
            outer, _ = subscript_chain(n)
            if writer_of(outer) is None:
                continue
            p = outer.parent
            if p is None or p.type != "pointer_expression" or p.children[0].type != "&":
                return True  # assigned or updated
            q = p.parent
            while q is not None and q.type in ("parenthesized_expression", "argument_list", "call_expression",
                                               "cast_expression"):
                if q.type == "call_expression":
                    fnm = q.child_by_field_name("function")
                    if fnm is None or not re.match(r"(reinterpret_cast|static_cast|const_cast)\b", text(fnm)):
                        return True  # the address goes to a callee
                q = q.parent
            if q is not None and q.type == "pointer_expression" and q.children[0].type == "*":
                if writer_of(q) is not None:
                    return True
                continue
            return True
    return False


def _calls(node: Node) -> set[str]:
    out = set()
    for n in walk(node):
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            if fn is not None and fn.type == "identifier":
                out.add(text(fn))
    return out


class DoubleToSingleBuffer(Operator):
    name = "double_to_single_buffer"
    carrier = "double_buffer"
    description = "drop the second shared stage; a barrier guards the now in-place refill"

    def edits(self, src: Source):
        sites = list(double_buffer_sites(src))
        st = structural(src)
        for site in sites:
            decl = node_at(st, site.start_byte, site.end_byte, "declaration")
            if decl is None:
                continue
            e = self.rewrite(st, decl)
            if e is not None:
                yield e

    def rewrite(self, src: Source, decl: Node) -> Optional[Edit]:
        f = src.function_at(decl.start_byte)
        fn = src.func_node(f) if f is not None else None
        if fn is None:
            return None
        declarators = [d for d in decl.named_children if d.type == "array_declarator"]
        if len(declarators) != 1:
            return None
        d = declarators[0]
        while d.child_by_field_name("declarator") is not None and \
                d.child_by_field_name("declarator").type == "array_declarator":
            d = d.child_by_field_name("declarator")
        ident = d.child_by_field_name("declarator")
        size = d.child_by_field_name("size")
        if ident is None or ident.type != "identifier" or size is None or \
                src.expand(text(size)).strip("() ") != "2":
            return None
        name = text(ident)
        idx = FunctionIndex(src, fn)
        var = next((v for v in idx.vars if v.name == name and same(v.decl, decl)), None)
        if var is None:
            return None
        subs: list[Edit] = [Edit(ident.end_byte, d.end_byte, "")]
        for n in walk(fn):
            if n.type != "identifier" or text(n) != name or contains(decl, n) or \
                    idx.visible(name, n.start_byte) is not var:
                continue
            p = n.parent
            if p is None or p.type != "subscript_expression" or not same(p.child_by_field_name("argument"), n):
                return None  # the whole two-stage array is used: not a stage access
            ind = p.child_by_field_name("indices")
            if ind is None or any(c.type in ("assignment_expression", "update_expression", "call_expression")
                                  for c in walk(ind)):
                return None
            subs.append(Edit(n.end_byte, p.end_byte, ""))
        # barriers: loops whose body reads, then writes, then synchronizes
        lam_writes, lam_touches = _writers(src, fn, name)
        pat = re.compile(rb"\b%s\b" % re.escape(name.encode()))
        for loop in walk(fn):
            if loop.type not in ("for_statement", "while_statement", "do_statement"):
                continue
            body = loop.child_by_field_name("body")
            if body is None or body.type != "compound_statement":
                continue
            stmts = list(body.named_children)
            reads, writes = [], []
            for i, s in enumerate(stmts):
                code = src.code[s.start_byte:s.end_byte]
                called = _calls(s)
                w = _writes_in(src, s, name) or bool(called & lam_writes)
                t = bool(pat.search(code)) or bool(called & lam_touches)
                if w:
                    writes.append(i)
                elif t:
                    reads.append(i)
            if not writes:
                continue
            if not reads:
                continue  # no in-loop reads to protect
            if max(reads) > min(writes):
                return None
            syncs = [i for i, s in enumerate(stmts) if s.type == "expression_statement" and
                     re.fullmatch(rb"\s*__syncthreads\s*\(\s*\)\s*;\s*", src.code[s.start_byte:s.end_byte])]
            if not any(i > max(writes) for i in syncs):
                return None
            first = min(writes)
            if first - 1 in syncs:
                continue
            s = stmts[first]
            a = src.raw.rfind(b"\n", 0, s.start_byte) + 1
            if src.code[a:s.start_byte].strip():
                return None
            ind = line_indent(src, s.start_byte)
            subs.append(Edit(a, a, f"{ind}__syncthreads();  // one stage: every thread has finished reading it\n"))
        subs.sort()
        for (s1, e1, _), (s2, e2, _) in zip(subs, subs[1:]):
            if s2 < e1:
                return None
        lo, hi = min(s for s, _, _ in subs), max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))


PAIR = Pair(DoubleToSingleBuffer)
