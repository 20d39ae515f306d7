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

Forward: none yet. No deterministic rewrite introduces this carrier; `skills optimize` applies
this operator's skills through the LLM materializer only (the pair's forward half is empty).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.operators.base import Edit, Operator, Pair
from mining.operators.nodes import identifiers, rename_identifiers
from mining.operators.rewrite_util import line_indent, splice_range, structural
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


PAIR = Pair(OnlineSoftmaxToTwoPass)
