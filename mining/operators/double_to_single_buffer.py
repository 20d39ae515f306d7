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

Forward: double_buffer_tiles, the operator's output form read back. A k-loop `for (int v = 0; v <
n; ++v | v++ | v += 1)` whose top-level statements read the shared tiles (R), then a barrier, then
refill them (W: stores, or calls of lambdas that store them), then a barrier, with the tiles filled
before the loop by the same fills (the same lambdas, or stores to the same subscripts) followed by
a barrier: each tile gets a leading stage dimension `[2]`; the prologue fills stage 0, R reads
stage `cur` (a `cur = v & 1` of the body, else `v & 1`), W fills `cur ^ 1` (else `(v + 1) & 1`),
a writer lambda takes the stage through its one parameter, unused in its body (its calls pass 0
and the next stage), and the barrier between R and W goes. Why it is sound: step v reads stage
v & 1, filled by step v - 1 (or the prologue) before the barrier that ends step v - 1; step v fills
stage (v + 1) & 1, last read by step v - 1 before that same barrier, so no thread overwrites what
another still reads and one barrier per step orders every fill before its reads. W fills the
whole part of the tile that the prologue fills (same fills), so no stage keeps data two steps
old. No floating-point change: the same values are read in the same order. Refused: fills that
differ from the prologue's, W statements that read a tile, reads after W in the body, no barrier
between R and W or after W, a tile used after the loop or elsewhere, a lambda that reads a tile, a
writer lambda whose parameter is used or whose argument has effects, a loop not starting at 0.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.carriers import double_buffer_sites
from mining.operators.base import Edit, Materialization, Operator, Pair, Rewrite, candidate
from corpora.code.nodes import contains, same, writer_of
from mining.operators.nodes import FunctionIndex, kernels, subscript_chain
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


# ==================================================================================== forward
# double_buffer_tiles: a k-loop that reads its shared tiles, syncs, refills them for the next step
# and syncs again gets a second stage per tile and loses the first barrier.

_SYNC = re.compile(r"\s*__syncthreads\s*\(\s*\)\s*;\s*")


def _lambdas(src: Source, fn: Node) -> dict[str, Node]:
    out = {}
    for n in walk(fn):
        if n.type == "init_declarator":
            v = n.child_by_field_name("value")
            if v is not None and v.type == "lambda_expression":
                out[text(n.child_by_field_name("declarator"))] = v
    return out


def double_buffer_tiles(source: str, ctx) -> list[Materialization]:
    """Single-stage shared tiles refilled in place by a k-loop -> two stages, one barrier per step
    (see "Forward" in the module docstring)."""
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        for loop in walk(k.body):
            if loop.type == "for_statement" and loop.parent is not None and loop.parent.type == "compound_statement":
                r = _stage_loop(src, k.node, loop)
                if r is not None:
                    out.append(candidate(src, r[0], "double_buffer_tiles", f"{k.name}: {r[1]}",
                                         excerpt=src.excerpt(loop.start_byte, loop.end_byte)))
    return out


def _stage_loop(src: Source, fn: Node, loop: Node) -> Optional[tuple[list[Edit], str]]:
    code = lambda n: " ".join(src.code[n.start_byte:n.end_byte].decode("utf-8", "replace").split())  # noqa: E731
    body = loop.child_by_field_name("body")
    if body is None or body.type != "compound_statement":
        return None
    hdr = code(loop)[:len(code(loop)) - len(code(body))]
    h = re.fullmatch(r"for \(\s*int (\w+) = 0; \1 < [^;]+; (?:\+\+\s*\1|\1\s*\+\+|\1 \+= 1)\s*\) ", hdr)
    if h is None:
        return None
    v = h.group(1)
    stmts = [c for c in body.named_children if c.type != "comment"]
    lams = _lambdas(src, fn)
    shared = dict(src.shared_names)
    # the tiles: shared arrays the body writes, directly or through a lambda
    tiles = set()
    for name in shared:
        lw, _ = _writers(src, fn, name)
        if any(_writes_in(src, s, name) or _calls(s) & lw for s in stmts):
            tiles.add(name)
    if not tiles:
        return None
    writer_l, toucher_l = set(), set()
    for name in tiles:
        lw, lt = _writers(src, fn, name)
        writer_l |= lw
        toucher_l |= lt
    if toucher_l - writer_l:
        return None  # a lambda that reads a tile: which stage it reads is not plain
    pat = re.compile(r"\b(%s)\b" % "|".join(map(re.escape, sorted(tiles))))
    kinds = []
    for s in stmts:
        t = code(s)
        w = any(_writes_in(src, s, nm) for nm in tiles) or bool(_calls(s) & writer_l)
        kinds.append("W" if w else "S" if _SYNC.fullmatch(t) else "R" if pat.search(t) else "N")
    r_at = [i for i, x in enumerate(kinds) if x == "R"]
    w_at = [i for i, x in enumerate(kinds) if x == "W"]
    if not r_at or not w_at or max(r_at) > min(w_at):
        return None
    between = [i for i in range(max(r_at) + 1, min(w_at)) if kinds[i] == "S"]
    if not between or not any(kinds[i] == "S" for i in range(max(w_at) + 1, len(stmts))):
        return None
    # a write statement that also reads a tile (outside its own stores) would read the other stage
    for i in w_at:
        for x in walk(stmts[i]):
            if x.type == "identifier" and text(x) in tiles and writer_of(subscript_chain(x)[0]) is None:
                return None
    # the prologue: the statements before the loop that fill the tiles, then a barrier
    sib = [c for c in loop.parent.named_children if c.type != "comment"]
    at = next(i for i, c in enumerate(sib) if same(c, loop))
    pro = [c for c in sib[:at] if any(_writes_in(src, c, nm) for nm in tiles) or _calls(c) & writer_l]
    if not pro or not any(_SYNC.fullmatch(code(c)) for c in sib[:at] if c.start_byte > pro[-1].end_byte):
        return None

    def fills(nodes) -> tuple[set[str], list[str]]:
        lam = {c for n in nodes for c in _calls(n) & writer_l}
        lhs = []
        for n in nodes:
            for x in walk(n):
                if x.type == "identifier" and text(x) in tiles and not any(
                        lams[q].start_byte <= x.start_byte < lams[q].end_byte for q in lams):
                    outer, _ = subscript_chain(x)
                    if writer_of(outer) is not None:
                        lhs.append(" ".join(text(outer).split()))
        return lam, sorted(lhs)
    if fills(pro) != fills([stmts[i] for i in w_at]) or {t for t in tiles if any(
            re.search(r"\b%s\b" % t, code(c)) for c in pro) or any(re.search(r"\b%s\b" % t, code(lams[q])) for q in
                                                                   fills(pro)[0])} != tiles:
        return None  # the loop refills something else than the prologue filled
    # stages: a `cur = v & 1` of the body, else the expressions
    cur = nxt = None
    for s in stmts[:min(r_at)]:
        c = re.fullmatch(r"(?:const )?int (\w+) = (?:%s & 1|%s %% 2|\(%s & 1\));" % (v, v, v), code(s))
        if c:
            cur, nxt = c.group(1), f"{c.group(1)} ^ 1"
    if cur is None:
        cur, nxt = f"{v} & 1", f"({v} + 1) & 1"
    edits: list[Edit] = []
    allowed = [loop] + pro + [lams[q] for q in writer_l]
    for x in walk(fn):
        if x.type != "identifier" or text(x) not in tiles:
            continue
        decl = shared[text(x)]
        if decl.start_byte <= x.start_byte < decl.end_byte:
            continue
        if not any(a.start_byte <= x.start_byte < a.end_byte for a in allowed):
            return None  # a tile used elsewhere (after the loop): its stage is not known
        p = x.parent
        if p is None or p.type != "subscript_expression" or not same(p.child_by_field_name("argument"), x):
            return None
        lam = next((q for q in writer_l if lams[q].start_byte <= x.start_byte < lams[q].end_byte), None)
        if lam is not None:
            params = [pp for pp in walk(lams[lam].child_by_field_name("declarator") or lams[lam])
                      if pp.type == "parameter_declaration"]
            pname = text(params[0].child_by_field_name("declarator")) if len(params) == 1 else None
            lbody = lams[lam].child_by_field_name("body")
            if pname is None or not re.fullmatch(r"\w+", pname) or \
                    re.search(r"\b%s\b" % pname, src.code[lbody.start_byte:lbody.end_byte].decode("utf-8", "replace")):
                return None  # the stage goes in through the lambda's one unused parameter
            stage = pname
        elif loop.start_byte <= x.start_byte < loop.end_byte:
            stage = nxt if any(stmts[i].start_byte <= x.start_byte < stmts[i].end_byte for i in w_at) else cur
        else:
            stage = "0"
        edits.append(Edit(x.end_byte, x.end_byte, f"[{stage}]"))
    # the tiles' declarations: a leading stage dimension
    for name in tiles:
        d = shared[name]
        ids = [x for x in walk(d) if x.type == "identifier" and text(x) == name]
        if len(ids) != 1 or len([c for c in d.named_children if c.type in ("array_declarator", "init_declarator")]) != 1:
            return None
        edits.append(Edit(ids[0].end_byte, ids[0].end_byte, "[2]"))
    # the writer lambdas' calls pass the stage they fill
    for n, stage in [(c, "0") for c in pro] + [(stmts[i], nxt) for i in w_at]:
        for call in walk(n):
            if call.type == "call_expression" and text(call.child_by_field_name("function")) in writer_l:
                args = [a for a in call.child_by_field_name("arguments").named_children if a.type != "comment"]
                if len(args) != 1 or re.search(r"\+\+|--|[^=!<>]=[^=]|\w\s*\(", text(args[0])):
                    return None
                edits.append(Edit(args[0].start_byte, args[0].end_byte, stage))
    b = stmts[between[-1]]
    a0, b0 = src.line_span(b.start_byte, b.end_byte)
    edits.append(Edit(a0, b0, ""))
    edits.sort()
    for e1, e2 in zip(edits, edits[1:]):
        if e2.start < e1.end:
            return None
    return edits, f"{', '.join(sorted(tiles))}: two stages, the refill of step {v} + 1 overlaps the reads of step {v}"


PAIR = Pair(DoubleToSingleBuffer, (Rewrite("double_buffer_tiles", "double_buffer", double_buffer_tiles, prior=1.3),))
