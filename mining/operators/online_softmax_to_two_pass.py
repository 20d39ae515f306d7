"""online_softmax_to_two_pass: softmax statistics computed online - one sweep keeping a running
max m and a running sum s rescaled whenever the max grows, partial (m, s) pairs merged with the
same rescale - become two passes: the max first (sweep and reduction of m alone), then the sum of
exp(x - max) with the final max (sweep and reduction of s alone).

    float m = -FLT_MAX, s = 0.0f;                       float m = -FLT_MAX, s = 0.0f;
    for (...) { float mx = fmaxf(m, v);                 for (...) { float mx = fmaxf(m, v); m = mx; }
                s = s * expf(m - mx) + expf(v - mx);    ... m's reduction: merge_stats(m, s, m2, s2) -> m = fmaxf(m, m2)
                m = mx; }                        ->     __syncthreads();
    ... pair reduction with merge_stats(m, s, m2, s2)   for (...) { s = s + expf(v - m); }
                                                        ... s's reduction: merge_stats(m, s, m2, s2) -> s += s2

The region rewritten is the run of statements of one block from the first to the last that holds
an online update (`s = s * EXP(m - mx) + REST;` with `mx` the new running max) or a call of a
merge function (a device function whose body is exactly `mx = fmaxf(a, c); b = b * EXP(a - mx) +
d * EXP(c - mx); a = mx;`); the merge function is deleted when nothing else calls it.

Every statement of the region belongs to m's computation (it writes or reads a variable derived
from m), to s's, or to neither (loads, indices, barriers): the max pass keeps m's and the neutral
ones, the sum pass s's and the neutral ones; updates and merges are split as above. Why it is
sound: with the final max M in m, the sum pass adds exp(x - M) for every x and the merges add
the partial sums, which is what the rescaled running sums equal (exp(m - mx) factors are exact
rescalings to the new max, and mx = M throughout the sum pass); float rounding differs and the
gate's tolerance judges it. Refused: statements that couple m and s other than the updates and
merges, neutral statements with effects that a second execution would repeat (global stores,
atomics, writes to variables declared outside the region), top-level declarations of the region
that belong to one pass and are used after it, and regions in a nested block whose barriers
could diverge (a block with `__syncthreads` must be the function body, with no `return` before).

Forward: fuse_softmax_sweeps. A statement P1 holding max sweeps (loops whose body ends with
`m = fmaxf(m, X);`, either argument order, or `float mx = fmaxf(m, X); m = mx;`) and a later
statement P2 of the same shape (the same loop headers up to the loop variable's name, or a max
sweep starting one element later, `m = X[first]` declared right before it: fused from the first
element, where fmaxf(m, m) = m is an exact no-op; `if`s with
the same condition, blocks with the same leading declarations) whose loops end with `s += T;` or
`s = s + T;` become one online sweep: the max update grows into

    float mx = fmaxf(m, X); s = s * EXP(m - mx) + T[m := mx]; m = mx;

and P2 goes; when statements between P1 and P2 read or change m (a warp or block reduction), m is
saved after P1 (`ks_m_own`) and P2 becomes `s = s * EXP(ks_m_own - m);`. The operator's own output
form (both VEC branches, max reductions, barrier, sum sweep) and hand-written spellings (thread per
row, block-stride sweeps with a shared tree between them, the sum's exponential named in a local
first) are sites. Why it is sound: T must be a sum of terms EXP(A - m) with m nowhere else, so
T[m := r] * EXP(r - M) = T[m := M] for any r; s starts at zero (its one declaration, moved before P1
when it sat between the sweeps), so after the fused sweep s = sum of EXP(A - m_thread), and the
final rescale turns it into the sum of EXP(A - M) that P2 computed with the reduced max M. The sum
sweep's extra declarations are pure and substituted into the update; its other statements must be
declarations identical to the max sweep's (the reloads, now read once). Floating point: each
running rescale multiplies by EXP(m_old - m_new), a few ulps per rescale (about log n of them for a
row of n in random order), and the final sum is reassociated; the gate's relative tolerance must
accept that reassociation, like the backward half's. Refused: a sum that does not start at zero, a
term not of the form EXP(A - m) (`exp(x) * exp(-m)`, a weighted term), sweeps over other ranges,
a sum sweep with stores or other non-declaration statements (the register-resident corpus kernel
rewrites its row in place), the sum read or written between the sweeps, anything the sum sweep
reads written between them, a max sweep that reads the sum, preprocessor lines between the sweeps.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.operators.base import Edit, Materialization, Operator, Pair, Rewrite, candidate
from mining.operators.nodes import identifiers, kernels, rename_identifiers, split_top, strip_parens
from mining.operators.rewrite_util import declaration_of, line_indent, splice_range, structural
from mining.operators.running_update import read_update
from corpora.code.parse import text, walk


_EXP = r"(?:__expf|expf|exp|__exp2f|exp2f)"
_UPDATE = re.compile(r"(\w+)\s*=\s*\1\s*\*\s*(" + _EXP + r")\s*\(\s*(\w+)\s*-\s*(\w+)\s*\)\s*\+\s*(.+);")
_CALL4 = re.compile(r"(\w+)\s*\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)\s*;")
_SIDE = re.compile(r"\b(atomic\w*|__st\w+|printf|memcpy|memset)\s*\(")


def _norm(node_or_text) -> str:
    t = node_or_text if isinstance(node_or_text, str) else text(node_or_text)
    return " ".join(t.split())




def merge_functions(src: Source) -> dict[str, Node]:
    """Device functions `void f(T& a, T& b, T c, T d) { T mx = fmaxf(a, c); b = b * EXP(a - mx) + d * EXP(c - mx); a = mx; }`."""
    out = {}
    for f in src.funcs:
        if f.is_kernel or len(f.params) != 4:
            continue
        fn = src.func_node(f)
        if fn is None:
            continue
        a, b, c, d = (p.name for p in f.params)
        body = " ".join(src.code[fn.child_by_field_name("body").start_byte:fn.end_byte].decode("utf-8", "replace").split())
        m = re.fullmatch(r"\{\s*(?:const\s+)?float\s+(\w+)\s*=\s*fmaxf\s*\(\s*%s\s*,\s*%s\s*\)\s*;\s*%s\s*=\s*%s\s*\*\s*%s\s*"
                         r"\(\s*%s\s*-\s*\1\s*\)\s*\+\s*%s\s*\*\s*%s\s*\(\s*%s\s*-\s*\1\s*\)\s*;\s*%s\s*=\s*\1\s*;\s*\}"
                         % (a, c, b, b, _EXP, a, d, _EXP, c, a), body)
        head = src.code[fn.start_byte:fn.child_by_field_name("body").start_byte].decode("utf-8", "replace")
        if m and re.search(r"&\s*%s\b" % a, head) and re.search(r"&\s*%s\b" % b, head):
            out[f.name] = fn
    return out


class _Region:
    def __init__(self, src: Source, m: str, s: str, merges: dict[str, Node]):
        self.src, self.m, self.s, self.merges = src, m, s, merges
        self.M, self.S = {m}, {s}
        self.fail = ""

    # ---------------------------------------------------------------- classification
    def special(self, st: Node) -> Optional[str]:
        t = _norm(self.src.code[st.start_byte:st.end_byte].decode("utf-8", "replace"))
        u = _UPDATE.fullmatch(t)
        if u and u.group(1) == self.s and u.group(3) == self.m:
            return "update"
        c = _CALL4.fullmatch(t)
        if c and c.group(1) in self.merges and c.group(2) == self.m and c.group(3) == self.s:
            return "merge"
        return None

    def leaves(self, stmts: list[Node]):
        for st in stmts:
            if st.type == "compound_statement":
                yield from self.leaves(list(st.named_children))
            elif st.type == "if_statement":
                yield ("cond", st.child_by_field_name("condition"))
                yield from self.leaves([st.child_by_field_name("consequence")])
                alt = st.child_by_field_name("alternative")
                if alt is not None:
                    yield from self.leaves([c for c in alt.named_children])
            elif st.type == "for_statement":
                yield ("header", st)
                yield from self.leaves([st.child_by_field_name("body")])
            elif st.type in ("expression_statement", "declaration"):
                yield ("stmt", st)
            elif st.type == "comment":
                continue
            else:
                yield ("other", st)

    def rw(self, st: Node) -> tuple[set[str], set[str], set[str]]:
        """(scalar writes, array writes, reads) of a leaf statement."""
        code = _norm(self.src.code[st.start_byte:st.end_byte].decode("utf-8", "replace"))
        writes, arrays = set(), set()
        if st.type == "declaration":
            for d in st.named_children:
                if d.type == "init_declarator":
                    n = d.child_by_field_name("declarator")
                    (writes if n.type == "identifier" else arrays).add(_first(text(n)))
                elif d.type == "identifier":
                    writes.add(text(d))
                elif d.type.endswith("declarator"):
                    arrays.add(_first(text(d)))
            reads = set()
            for d in st.named_children:
                if d.type == "init_declarator" and d.child_by_field_name("value") is not None:
                    reads |= identifiers(text(d.child_by_field_name("value")))
            return writes, arrays, reads
        reads = identifiers(code)
        for n in walk(st):
            target = n.child_by_field_name("left") if n.type == "assignment_expression" else \
                n.child_by_field_name("argument") if n.type == "update_expression" else None
            if target is None:
                continue
            if target.type == "identifier":
                writes.add(text(target))
                if n.type == "assignment_expression" and _norm(text(n.child_by_field_name("operator"))) == "=":
                    # a plain assignment does not read its target (unless the value does)
                    if text(target) not in identifiers(text(n.child_by_field_name("right"))):
                        reads.discard(text(target))
            else:
                base = target
                while base.type in ("subscript_expression", "field_expression", "parenthesized_expression"):
                    base = base.named_children[0] if base.type == "parenthesized_expression" else \
                        base.child_by_field_name("argument")
                if base.type == "identifier":
                    (writes if target.type == "field_expression" else arrays).add(text(base))
        return writes, arrays, reads

    def classify(self, stmts: list[Node]) -> bool:
        leaves = list(self.leaves(stmts))
        for kind, n in leaves:
            if kind == "other":
                self.fail = f"a {n.type} in the region"
                return False
        # seeds: the merges' partner values
        for kind, n in leaves:
            if kind == "stmt" and self.special(n) == "merge":
                c = _CALL4.fullmatch(_norm(self.src.code[n.start_byte:n.end_byte].decode("utf-8", "replace")))
                self.M.add(c.group(4))
                self.S.add(c.group(5))
        changed = True
        while changed:
            changed = False
            for kind, n in leaves:
                if kind != "stmt" or self.special(n):
                    continue
                w, _, r = self.rw(n)
                for fam in (self.M, self.S):
                    if (r | w) & fam and not w <= fam:
                        fam |= w
                        changed = True
        if self.M & self.S:
            self.fail = f"{sorted(self.M & self.S)} belong to both passes"
            return False
        return True

    def family(self, st: Node) -> str:
        w, _, r = self.rw(st)
        inm, ins = bool((w | r) & self.M), bool((w | r) & self.S)
        if inm and ins:
            return "both"
        return "m" if inm else "s" if ins else "neutral"

    # ---------------------------------------------------------------- rendering one pass
    def render(self, stmts: list[Node], mode: str, indent: str) -> Optional[list[str]]:
        parts: list[tuple[Node, list[str]]] = []
        for st in stmts:
            r = self.render_one(st, mode, indent)
            if r is None:
                return None
            parts.append((st, r))
        # a local the pass no longer reads (the max of a vector feeding only the max pass) is dropped
        keep = [True] * len(parts)
        for i in range(len(parts) - 1, -1, -1):
            st, lines = parts[i]
            if st.type != "declaration" or not lines or _SIDE.search(lines[0]) or "(" in lines[0] and \
                    re.search(r"\b(?!fmaxf|fminf|make_\w+)\w+\s*\(", lines[0].split("=", 1)[-1]):
                continue
            w, arrays, _ = self.rw(st)
            later = set()
            for j in range(i + 1, len(parts)):
                if keep[j]:
                    later |= identifiers("\n".join(parts[j][1]))
            if w and not arrays and not (w & later):
                keep[i] = False
        out: list[str] = []
        for k, (_, lines) in zip(keep, parts):
            for ln in lines if k else []:
                if out and ln == out[-1] and re.fullmatch(r"\s*__sync\w*\s*\([^;]*\)\s*;", ln):
                    continue  # the other pass's exchange left two barriers in a row
                out.append(ln)
        return out

    def render_one(self, st: Node, mode: str, indent: str) -> Optional[list[str]]:
        code = lambda n: _norm(self.src.code[n.start_byte:n.end_byte].decode("utf-8", "replace"))  # noqa: E731
        if st.type == "comment":
            return []
        if st.type == "compound_statement":
            inner = self.render(list(st.named_children), mode, indent + "    ")
            if inner is None:
                return None
            return [indent + "{"] + inner + [indent + "}"] if inner else []
        if st.type == "if_statement":
            cons = self.render([st.child_by_field_name("consequence")], mode, indent + "    ")
            alt = st.child_by_field_name("alternative")
            alts = self.render([c for c in alt.named_children], mode, indent + "    ") if alt is not None else []
            if cons is None or alts is None:
                return None
            if not cons and not alts:
                return []
            lines = [f"{indent}if {code(st.child_by_field_name('condition'))} {{"] + _unwrap(cons, indent)
            if alts:
                lines += [indent + "} else {"] + _unwrap(alts, indent)
            return lines + [indent + "}"]
        if st.type == "for_statement":
            body = self.render([st.child_by_field_name("body")], mode, indent + "    ")
            if body is None:
                return None
            if not body:
                return []
            return [f"{indent}{self.header(st)} {{"] + _unwrap(body, indent) + [indent + "}"]
        kind = self.special(st)
        t = code(st)
        if kind == "update":
            u = _UPDATE.fullmatch(t)
            if mode == "m":
                return []
            rest = u.group(5)
            if self.m in identifiers(rest) or self.s in identifiers(rest):
                self.fail = "the update's new terms read the running pair"
                return None
            return [f"{indent}{self.s} = {self.s} + {rename_identifiers(rest, {u.group(4): self.m})};"]
        if kind == "merge":
            c = _CALL4.fullmatch(t)
            return [f"{indent}{self.m} = fmaxf({self.m}, {c.group(4)});"] if mode == "m" else \
                [f"{indent}{self.s} += {c.group(5)};"]
        fam = self.family(st)
        if fam == "both":
            self.fail = f"`{t}` couples the max and the sum"
            return None
        if fam == "neutral" or fam == mode:
            if mode == "s":
                _, _, r = self.rw(st)
                if r & (self.M - {self.m}):
                    self.fail = f"`{t}` reads a max-pass temporary in the sum pass"
                    return None
            elif self.rw(st)[2] & self.S:
                self.fail = f"`{t}` reads a sum-pass value in the max pass"
                return None
            return [indent + t]
        return []

    def header(self, loop: Node) -> str:
        body = loop.child_by_field_name("body")
        h = self.src.code[loop.start_byte:body.start_byte].decode("utf-8", "replace")
        return _norm(h)


def _first(s: str) -> str:
    m = re.search(r"[A-Za-z_]\w*", s)
    return m.group(0) if m else s


def _unwrap(lines: list[str], indent: str) -> list[str]:
    """A rendered single block `{ ... }` as a body: its inner lines (one brace level less)."""
    if len(lines) >= 2 and lines[0].strip() == "{" and lines[-1].strip() == "}" and \
            lines[0] == indent + "    {" and lines[-1] == indent + "    }":
        return [ln[4:] if ln.startswith(indent + "        ") else ln for ln in lines[1:-1]]
    return lines


class OnlineSoftmaxToTwoPass(Operator):
    name = "online_softmax_to_two_pass"
    carrier = "online_softmax"
    description = "compute the softmax max in one pass and the sum of exponentials in a second, without rescaling"

    def edits(self, src: Source):
        st = structural(src)
        merges = merge_functions(st)
        done = set()
        for n in walk(st.tree.root_node):
            if n.type != "expression_statement":
                continue
            u = _UPDATE.fullmatch(_norm(st.code[n.start_byte:n.end_byte].decode("utf-8", "replace")))
            if u is None or u.group(3) == u.group(4):
                continue
            f = st.function_at(n.start_byte)
            if f is None or f.is_kernel is False and f.name in merges:
                continue
            key = (f.start_byte, u.group(1), u.group(3))
            if key in done:
                continue
            done.add(key)
            e = self.rewrite(st, f, u.group(3), u.group(1), merges)
            if e is not None:
                yield e

    def rewrite(self, src: Source, f, m: str, s: str, merges: dict[str, Node]) -> Optional[Edit]:
        fn = src.func_node(f)
        if fn is None:
            return None
        reg = _Region(src, m, s, merges)
        specials = [n for n in walk(fn) if n.type == "expression_statement" and reg.special(n)]
        if not specials:
            return None
        # the block holding every special statement, and its run of statements covering them
        block = specials[0].parent
        while block is not None and not all(block.start_byte <= x.start_byte and x.end_byte <= block.end_byte
                                            for x in specials):
            block = block.parent
        while block is not None and block.type != "compound_statement":
            block = block.parent
        if block is None:
            return None
        kids = [c for c in block.named_children if c.type != "comment"]
        idx = [i for i, c in enumerate(kids) if any(c.start_byte <= x.start_byte < c.end_byte for x in specials)]
        lo, hi = idx[0], idx[-1]
        region = kids[lo:hi + 1]
        rtext = src.code[region[0].start_byte:region[-1].end_byte].decode("utf-8", "replace")
        if re.search(r"(?m)^[ \t]*#", rtext):
            return None  # the region is rendered again: preprocessor lines inside it would be lost
        barrier = "__syncthreads" in rtext
        if barrier and (block.parent is None or block.parent.type != "function_definition" or
                        re.search(rb"\breturn\b", src.code[fn.start_byte:region[0].start_byte])):
            return None
        if not reg.classify(region):
            return None
        # top-level declarations: neutral ones are hoisted (declared once), others stay in their pass
        after = src.code[region[-1].end_byte:block.end_byte].decode("utf-8", "replace")
        hoisted, rest = [], []
        for st in region:
            if st.type == "declaration":
                fam = reg.family(st)
                w, arrays, _ = reg.rw(st)
                if fam == "neutral":
                    hoisted.append(st)
                    continue
                if (w | arrays) & identifiers(after):
                    return None
            rest.append(st)
        # neutral statements run twice: they may not have effects beyond their own locals and barriers
        region_locals = set()
        for kind, n in reg.leaves(region):
            if kind == "stmt" and n.type == "declaration":
                w, arrays, _ = reg.rw(n)
                region_locals |= w | arrays
            if kind == "header":
                init = n.child_by_field_name("initializer")
                if init is not None:
                    region_locals |= identifiers(text(init))
        for kind, n in reg.leaves(region):
            if kind != "stmt" or reg.special(n) or reg.family(n) != "neutral":
                continue
            t = text(n)
            if _SIDE.search(t):
                return None
            w, arrays, _ = reg.rw(n)
            if (w | arrays) - region_locals:
                return None
        ind = line_indent(src, region[0].start_byte)
        lines = [ind + _norm(src.code[h.start_byte:h.end_byte].decode("utf-8", "replace")) for h in hoisted]
        p1 = reg.render(rest, "m", ind)
        p2 = reg.render(rest, "s", ind)
        if p1 is None or p2 is None:
            return None
        lines += p1 + ([ind + "__syncthreads();"] if barrier else []) + p2
        rep = "\n".join(lines).lstrip()
        subs = [Edit(region[0].start_byte, region[-1].end_byte, rep)]
        # the merge functions nothing else calls any more
        for name, mfn in merges.items():
            calls = [n for n in walk(src.tree.root_node) if n.type == "call_expression" and
                     text(n.child_by_field_name("function")) == name]
            if calls and all(region[0].start_byte <= c.start_byte < region[-1].end_byte for c in calls):
                a, b = src.line_span(mfn.start_byte, mfn.end_byte)
                # with the comment lines right above it
                while True:
                    prev = src.raw.rfind(b"\n", 0, a - 1) + 1 if a > 0 else 0
                    if a > 0 and src.raw[prev:a].strip().startswith(b"//"):
                        a = prev
                    else:
                        break
                subs.append(Edit(a, b, ""))
        subs.sort()
        for (a1, b1, _), (a2, b2, _) in zip(subs, subs[1:]):
            if a2 < b1:
                return None
        lo_b, hi_b = subs[0][0], max(e for _, e, _ in subs)
        return Edit(lo_b, hi_b, splice_range(src, lo_b, hi_b, subs))


# ==================================================================================== forward
# fuse_softmax_sweeps: the max sweep and the sum sweep over the same row become one online sweep.

_EXP_FN = re.compile(r"(__expf|expf|exp|__exp2f|exp2f|exp2)")
_ZERO = re.compile(r"0(?:\.0*)?[fF]?|0?\.0+[fF]?")
_MAX_FN = ("fmaxf", "fmax", "max")


def _call(e: str) -> Optional[tuple[str, str]]:
    """`f(args)` as a whole expression -> (f, args)."""
    c = re.fullmatch(r"(\w+)\s*\((.*)\)", e.strip())
    if c is None:
        return None
    depth = 0
    for ch in c.group(2):
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return None  # `f(a) * g(b)`: the first parenthesis closes early
    return c.group(1), c.group(2)


def _stmts(body: Node) -> list[Node]:
    if body.type == "compound_statement":
        return [c for c in body.named_children if c.type != "comment"]
    return [body]


def _loop_var(loop: Node) -> Optional[str]:
    init = loop.child_by_field_name("initializer")
    if init is None or init.type != "declaration":
        return None
    ds = [d for d in init.named_children if d.type == "init_declarator"]
    if len(ds) != 1 or ds[0].child_by_field_name("declarator").type != "identifier":
        return None
    return text(ds[0].child_by_field_name("declarator"))


def _header(src: Source, loop: Node, rename: dict[str, str]) -> str:
    body = loop.child_by_field_name("body")
    return _norm(rename_identifiers(src.code[loop.start_byte:body.start_byte].decode("utf-8", "replace"), rename))


def _max_update(src: Source, stmts: list[Node]) -> Optional[tuple[str, str, str, int]]:
    """The running-max update closing a sweep body: `m = fmaxf(m, X);` (either argument order) or
    `float mx = fmaxf(m, X); m = mx;` -> (m, X, the new max's name or "", statements it takes)."""
    def call(e: str) -> Optional[tuple[str, list[str]]]:
        c = _call(e)
        if c is None or c[0] not in _MAX_FN:
            return None
        args = split_top(c[1], ",")
        return (c[0], args) if len(args) == 2 else None

    def pick(m: str, args: list[str]) -> Optional[str]:
        hits = [i for i, a in enumerate(args) if _norm(a) == m]
        if len(hits) != 1 or m in identifiers(args[1 - hits[0]]):
            return None
        return args[1 - hits[0]]

    if not stmts:
        return None
    last = _norm(src.code[stmts[-1].start_byte:stmts[-1].end_byte].decode("utf-8", "replace"))
    a = re.fullmatch(r"(\w+)\s*=\s*(.+);", last)
    if a is None:
        u = read_update(src, stmts[-1])
        return (u.base, _norm(u.operand), "", 1) if u is not None and u.op == "max" and u.target == u.base else None
    m, rhs = a.group(1), a.group(2)
    c = call(rhs)
    if c is not None:
        x = pick(m, c[1])
        return (m, x, "", 1) if x is not None else None
    u = read_update(src, stmts[-1])  # `m = X > m ? X : m;`, `if (X > m) m = X;`: the same max (issue 20)
    if u is not None and u.op == "max" and u.target == u.base:
        return u.base, _norm(u.operand), "", 1
    if len(stmts) < 2 or not re.fullmatch(r"\w+", rhs):
        return None
    prev = _norm(src.code[stmts[-2].start_byte:stmts[-2].end_byte].decode("utf-8", "replace"))
    d = re.fullmatch(r"(?:const\s+)?(?:float|double)\s+%s\s*=\s*(.+);" % re.escape(rhs), prev)
    c = call(d.group(1)) if d else None
    x = pick(m, c[1]) if c else None
    return (m, x, rhs, 2) if x is not None else None


def _sum_update(src: Source, st: Node) -> Optional[tuple[str, str]]:
    """`s += T;` or `s = s + T;` -> (s, T)."""
    t = _norm(src.code[st.start_byte:st.end_byte].decode("utf-8", "replace"))
    u = re.fullmatch(r"(\w+)\s*\+=\s*(.+);", t) or re.fullmatch(r"(\w+)\s*=\s*(\w+)\s*\+\s*(.+);", t)
    if u is None or len(u.groups()) == 3 and u.group(1) != u.group(2):
        return None
    return u.group(1), u.group(u.lastindex)


def _exp_terms(t: str, m: str) -> Optional[list[str]]:
    """The exponential functions of T when T is a sum of terms EXP(X - m) with m nowhere else."""
    t = strip_parens(t)
    parts = split_top(t, "+")
    if len(parts) > 1:
        fns = [_exp_terms(p, m) for p in parts]
        return None if any(f is None for f in fns) else [f for fs in fns for f in fs]
    c = _call(t)
    if c is None or not _EXP_FN.fullmatch(c[0]):
        return None
    diff = split_top(c[1], "-")
    if len(diff) < 2 or _norm(diff[-1]) != m or any(m in identifiers(d) for d in diff[:-1]) or not diff[0]:
        return None
    return [c[0]]


def _writes(node: Node) -> set[str]:
    """Base identifiers assigned, incremented or declared inside a node."""
    out = set()
    for n in walk(node):
        target = n.child_by_field_name("left") if n.type == "assignment_expression" else \
            n.child_by_field_name("argument") if n.type == "update_expression" else None
        while target is not None and target.type in ("subscript_expression", "field_expression",
                                                     "parenthesized_expression", "pointer_expression"):
            target = target.named_children[0] if target.type in ("parenthesized_expression", "pointer_expression") \
                else target.child_by_field_name("argument")
        if target is not None and target.type == "identifier":
            out.add(text(target))
    return out


class _Sweep:
    """One max loop paired with its sum loop."""
    def __init__(self, l1: Node, l2: Node):
        self.l1, self.l2 = l1, l2


def _pair(src: Source, a: Node, b: Node) -> Optional[list[_Sweep]]:
    """The loops of two statements shaped alike: loops, `if`s with the same condition over such
    statements, blocks whose statements before the last one are the same."""
    if a.type == "for_statement" and b.type == "for_statement":
        return [_Sweep(a, b)]
    if a.type == "if_statement" and b.type == "if_statement":
        ca, cb = a.child_by_field_name("condition"), b.child_by_field_name("condition")
        if _norm(text(ca)) != _norm(text(cb)):
            return None
        first = _pair(src, a.child_by_field_name("consequence"), b.child_by_field_name("consequence"))
        aa, ab = a.child_by_field_name("alternative"), b.child_by_field_name("alternative")
        if first is None or (aa is None) != (ab is None):
            return None
        if aa is None:
            return first
        xa, xb = [c for c in aa.named_children if c.type != "comment"], [c for c in ab.named_children if c.type != "comment"]
        second = _pair(src, xa[0], xb[0]) if len(xa) == 1 and len(xb) == 1 else None
        return None if second is None else first + second
    if a.type == "compound_statement" and b.type == "compound_statement":
        ka, kb = _stmts(a), _stmts(b)
        if not ka or len(ka) != len(kb) or any(_norm(code_of(src, x)) != _norm(code_of(src, y))
                                               for x, y in zip(ka[:-1], kb[:-1])):
            return None
        if any(x.type != "declaration" for x in ka[:-1]):
            return None
        return _pair(src, ka[-1], kb[-1])
    return None


def code_of(src: Source, n: Node) -> str:
    return src.code[n.start_byte:n.end_byte].decode("utf-8", "replace")


def _fuse_loop(src: Source, sw: _Sweep, m: str, fn_names: set[str]) -> Optional[tuple[list[Edit], str, str, str]]:
    """The edit fusing one max loop with its sum loop -> (edits, s, exp function, fused excerpt)."""
    l1, l2 = sw.l1, sw.l2
    v1, v2 = _loop_var(l1), _loop_var(l2)
    ren = {v2: v1} if v1 and v2 else {}
    start = None  # the max sweep starts one element later (m holds the first): it starts here too
    h1, h2 = _header(src, l1, {}), _header(src, l2, ren)
    if h1 != h2:
        a, b = re.fullmatch(r"for \(int (\w+) = ([^;]+);(.*)", h1), re.fullmatch(r"for \(int (\w+) = ([^;]+);(.*)", h2)
        if a is None or b is None or a.group(3) != b.group(3) or \
                _norm(a.group(2)) not in (f"{_norm(b.group(2))} + 1", str(int(b.group(2)) + 1) if b.group(2).isdigit()
                                          else None):
            return None
        start = _norm(b.group(2))
    s1, s2 = _stmts(l1.child_by_field_name("body")), _stmts(l2.child_by_field_name("body"))
    mu = _max_update(src, s1)
    if mu is None or mu[0] != m:
        return None
    _, x, mx, k = mu
    if start is not None and s1[:-k]:
        return None  # only `m = fmaxf(m, X)` alone: X at the new first index is m's own first value
    head1 = s1[:-k]
    if not s2:
        return None
    su = _sum_update(src, s2[-1])
    if su is None:
        return None
    s, t = su
    t = rename_identifiers(t, ren)
    hdr_ids = identifiers(_header(src, l1, {})) - ({v1} if v1 else set())
    w1 = set()
    for st in head1:
        c = code_of(src, st)
        if {m, s} & identifiers(c) or st.type not in ("declaration", "expression_statement"):
            return None
        w1 |= _writes(st)
    if w1 & hdr_ids or {s} & identifiers(x):
        return None
    # the sum body: the max body's own declarations again (dropped), new declarations, the update
    seen = {_norm(code_of(src, st)) for st in head1}
    declared1 = identifiers(" ".join(code_of(src, st) for st in s1))
    extras: list[tuple[str, str]] = []  # (name, init)
    for st in s2[:-1]:
        c = _norm(rename_identifiers(code_of(src, st), ren))
        if st.type != "declaration":
            return None
        if c in seen:
            continue
        ds = [d for d in st.named_children if d.type == "init_declarator"]
        if len(ds) != 1 or ds[0].child_by_field_name("declarator").type != "identifier":
            return None
        name = text(ds[0].child_by_field_name("declarator"))
        if name in declared1 or s in identifiers(c):
            return None
        extras.append((name, _norm(rename_identifiers(text(ds[0].child_by_field_name("value")), ren))))
    if s in identifiers(t):
        return None
    # T with the new declarations substituted must be a sum of EXP(X - m) terms
    full = t
    for _ in range(len(extras) + 1):
        full = rename_identifiers(full, {n: "(%s)" % v for n, v in extras})
    fns = _exp_terms(full, m)
    if not fns or len({"2" in f for f in fns}) != 1:
        return None
    new = mx or "ks_mx"
    if not mx and "ks_mx" in fn_names:
        return None
    ind = line_indent(src, s1[-k].start_byte)
    body = l1.child_by_field_name("body")
    lines = []
    if not mx:
        # the new max in m's own type, through the max call of that type (a double row stays double)
        u = read_update(src, s1[-1])
        t = declaration_of(src, m, l1)
        ty = t[0] if t is not None and t[0] in ("float", "double") else "float"
        fmax = u.fn if u is not None and u.fn else "fmaxf"
        lines.append(f"{ty} {new} = {fmax}({m}, {_norm(x)});")
    else:
        lines.append(_norm(code_of(src, s1[-2])))
    # the sum sweep's own declarations are substituted into the update (pure: no effects), which
    # keeps the update in the one-statement form the backward half reads
    lines.append(f"{s} = {s} * {fns[0]}({m} - {new}) + {rename_identifiers(full, {m: new})};")
    lines.append(f"{m} = {new};")
    if body.type == "compound_statement":
        rep = ("\n" + ind).join(lines)
        edit = Edit(s1[-k].start_byte, s1[-1].end_byte, rep)
    else:
        outer = line_indent(src, l1.start_byte)
        inner = outer + "    "
        rep = "{\n" + "".join(inner + ln + "\n" for ln in lines) + outer + "}"
        edit = Edit(body.start_byte, body.end_byte, rep)
    if start is not None:
        init = l1.child_by_field_name("initializer")
        val = [d for d in init.named_children if d.type == "init_declarator"][0].child_by_field_name("value")
        return [edit, Edit(val.start_byte, val.end_byte, start)], s, fns[0], _norm(rename_identifiers(x, {v1: start}))
    return [edit], s, fns[0], ""


def _first_value(src: Source, kids: list[Node], i: int, m: str, first: str) -> bool:
    """m is declared right before the max sweep kids[i] with the element the sweep skips: running the
    sweep from that element too takes fmaxf(m, m) = m there, an exact no-op."""
    if i == 0 or kids[i - 1].type != "declaration":
        return False
    d = re.fullmatch(r"(?:const\s+)?float\s+(\w+)\s*=\s*(.+);", _norm(code_of(src, kids[i - 1])))
    return d is not None and d.group(1) == m and _norm(d.group(2)) == first


def _zero_decl(src: Source, fn: Node, s: str) -> Optional[Node]:
    """The one declaration of s in the function when it starts s at zero."""
    found = []
    for d in walk(fn):
        if d.type != "declaration":
            continue
        for dec in d.named_children:
            if dec.type == "init_declarator" and text(dec.child_by_field_name("declarator")) == s:
                found.append((d, dec))
            elif dec.type == "identifier" and text(dec) == s:
                return None
    if len(found) != 1 or not _ZERO.fullmatch(_norm(text(found[0][1].child_by_field_name("value")))):
        return None
    return found[0][0]


def fuse_softmax_sweeps(source: str, ctx) -> list[Materialization]:
    """A max sweep and a later sum-of-exponentials sweep over the same row -> one online sweep
    (see "Forward" in the module docstring)."""
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        fn_text = code_of(src, k.node)
        fn_names = identifiers(fn_text)
        found = []
        for block in walk(k.body):
            if block.type != "compound_statement":
                continue
            kids = [c for c in block.named_children if c.type != "comment"]
            for i, p1 in enumerate(kids):
                r = _site(src, k, kids, i, fn_names)
                if r is not None:
                    found.append(r)
        if len(found) > 1:
            out.append(candidate(src, [e for es, _, _ in found for e in es], "fuse_softmax_sweeps",
                                 f"{k.name}: {len(found)} max and sum sweeps become online sweeps"))
        out += [candidate(src, es, "fuse_softmax_sweeps", f"{k.name}: {what}", excerpt=ex) for es, what, ex in found]
    return out


def _site(src: Source, k, kids: list[Node], i: int, fn_names: set[str]) -> Optional[tuple[list[Edit], str, str]]:
    p1 = kids[i]
    if p1.type not in ("for_statement", "if_statement", "compound_statement"):
        return None
    if re.search(r"(?m)^[ \t]*#", src.raw[p1.start_byte:kids[-1].end_byte].decode("utf-8", "replace")):
        return None  # preprocessor lines between the sweeps: which code runs is not plain to see
    for j in range(i + 1, len(kids)):
        p2 = kids[j]
        sweeps = _pair(src, p1, p2)
        if not sweeps:
            continue
        mu = _max_update(src, _stmts(sweeps[0].l1.child_by_field_name("body")))
        if mu is None:
            return None
        m = mu[0]
        fused = [_fuse_loop(src, sw, m, fn_names) for sw in sweeps]
        if any(f is None for f in fused):
            continue
        ss, fns = {f[1] for f in fused}, {f[2] for f in fused}
        if len(ss) != 1:
            return None
        s = ss.pop()
        firsts = {f[3] for f in fused if f[3]}
        if firsts and (len(sweeps) != 1 or not _first_value(src, kids, i, m, firsts.pop())):
            return None
        return _finish(src, k, kids, i, j, m, s, sorted(fns)[0], [e for f in fused for e in f[0]], fn_names)
    return None


def _finish(src: Source, k, kids: list[Node], i: int, j: int, m: str, s: str, exp: str, edits: list[Edit],
            fn_names: set[str]) -> Optional[tuple[list[Edit], str, str]]:
    p1, p2 = kids[i], kids[j]
    decl = _zero_decl(src, k.node, s)
    if decl is None or decl.parent is None or decl.parent.start_byte != p1.parent.start_byte:
        return None  # declared in an enclosing block: a loop around the sweeps would carry s over
    between = kids[i + 1:j]
    moved = any(st.start_byte == decl.start_byte for st in between)
    if moved:
        if len([d for d in decl.named_children if d.type in ("init_declarator", "identifier")]) != 1:
            return None
    elif not decl.end_byte <= p1.start_byte or s in identifiers(src.code[decl.end_byte:p1.start_byte].decode()):
        return None
    # the statements between the sweeps: s untouched, nothing the sum sweep reads is written
    reads2 = identifiers(code_of(src, p2)) - {m, s}
    m_changed = False
    for st in between:
        if st.start_byte == decl.start_byte:
            continue
        c = code_of(src, st)
        ids = identifiers(c)
        if s in ids or (_writes(st) - {m}) & reads2 or re.search(r"\batomic\w*\s*\(", c) and ids & reads2:
            return None
        m_changed |= m in ids
    ind = line_indent(src, p1.start_byte)
    decl_text = _norm(code_of(src, decl))
    if moved:
        a, b = src.line_span(decl.start_byte, decl.end_byte)
        edits.append(Edit(a, b, ""))
        edits.append(Edit(p1.start_byte, p1.start_byte, decl_text + "\n" + ind))
    a, b = src.line_span(p2.start_byte, p2.end_byte)
    if m_changed:
        own = f"ks_{m}_own"
        if own in fn_names:
            return None
        t = declaration_of(src, m, p1)
        if t is None or t[0] not in ("float", "double"):
            return None
        edits.append(Edit(p1.end_byte, p1.end_byte, f"\n{ind}const {t[0]} {own} = {m};"))
        edits.append(Edit(p2.start_byte, p2.end_byte, f"{s} = {s} * {exp}({own} - {m});"))
        what = f"the max and the sum sweeps become one online sweep ({s} rescaled to the reduced {m})"
    else:
        edits.append(Edit(a, b, ""))
        what = "the max and the sum sweeps become one online sweep"
    return edits, what, src.excerpt(p1.start_byte, p1.end_byte)


PAIR = Pair(OnlineSoftmaxToTwoPass, (Rewrite("fuse_softmax_sweeps", "online_softmax", fuse_softmax_sweeps, prior=1.5),))
