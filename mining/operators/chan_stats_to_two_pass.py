"""chan_stats_to_two_pass: mean and variance merged in one reduction of (count, mean, M2) triples
(Chan et al.'s pairwise merge) become two reductions over plain sums: the block mean first, then
the sum of squared deviations from that mean.

    Stats s; s.n = cnt; s.mean = ...; s.m2 = 0.0f;       float ks_n = cnt;
    D: s.m2 += (x - s.mean)^2 ...                         float ks_mean = ...;
    { sn[i] = s.n; smean[i] = s.mean; sm2[i] = s.m2; }    { sn[i] = ks_n; smean[i] = ks_n * ks_mean; }
    __syncthreads();                                      __syncthreads();
    s.n = sn[0]; s.mean = smean[0]; s.m2 = sm2[0];   ->   ks_n = sn[0]; ks_mean = smean[0];
    for (w = 1; w < W; ++w) { Stats o; o.n = sn[w];       for (w = 1; w < W; ++w) { ks_n += sn[w]; ks_mean += smean[w]; }
        o.mean = smean[w]; o.m2 = sm2[w];                 ks_mean = ks_n > 0.0f ? ks_mean / ks_n : 0.0f;
        s = merge(s, o); }                                float ks_sq = 0.0f;
    ... s.mean ... s.m2 ...                               D with s.m2 -> ks_sq, s.mean -> ks_mean
                                                          { sm2[i] = ks_sq; }  __syncthreads();
                                                          ks_sq = sm2[0]; for (w...) ks_sq += sm2[w];
                                                          ... ks_mean ... ks_sq ...

The per-thread sums of squared deviations are taken around the block mean (a second sweep over
the thread's elements), so no merge has to correct M2 for the difference of the means; the merge
function, and the unused device functions that call it, are deleted with their last call.

Why it is sound: Chan's merge gives the exact count, mean and M2 of the union; the two-pass form
computes the same mean as total / count and M2 = sum over all elements of (x - mean)^2, which is
what the merged M2 equals (float rounding differs: the gate judges it). Sites need the shape
above, in the single-level (serial fold) form of the reduction (block_reduce_to_serial first): a
merge function `T f(T a, T b)` of the Chan form, the triple's initialisation with M2 = 0, the
statements that accumulate M2 (reading the mean, writing nothing else outside themselves), the
slot stores, a barrier, the slot loads and the fold, with the slot arrays used nowhere else and
the triple used afterwards only through reads of its fields.

Forward: none yet. No deterministic rewrite introduces this carrier; `skills optimize` applies
this operator's skills through the LLM materializer only (the pair's forward half is empty).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.operators.base import Edit, Operator, Pair
from mining.operators.nodes import tokens
from mining.operators.rewrite_util import line_indent, splice_range, structural
from corpora.code.parse import text, walk


def _norm(s: str) -> str:
    return " ".join(s.split())


def chan_merges(src: Source) -> dict[str, tuple[str, str, str, str]]:
    """name -> (struct type, count field, mean field, M2 field) for Chan merge functions."""
    out = {}
    for f in src.funcs:
        if f.is_kernel or len(f.params) != 2:
            continue
        fn = src.func_node(f)
        if fn is None:
            continue
        head = _norm(src.code[fn.start_byte:fn.child_by_field_name("body").start_byte].decode("utf-8", "replace"))
        body = _norm(src.code[fn.child_by_field_name("body").start_byte:fn.end_byte].decode("utf-8", "replace"))
        a, b = f.params[0].name, f.params[1].name
        h = re.search(r"(\w+)\s+%s\s*\(\s*(?:const\s+)?\1\s+%s\s*,\s*(?:const\s+)?\1\s+%s\s*\)" % (f.name, a, b), head)
        if h is None:
            continue
        st = h.group(1)
        # the Chan merge, token by token (@x@: a name captured once, used again after)
        template = ("{ float @c@ = A . @n@ + B . @n@ ; if ( @c@ == 0.0f ) return A ; "
                    "float @d@ = B . @mean@ - A . @mean@ , @f@ = B . @n@ / @c@ ; T @r@ ; "
                    "@r@ . @n@ = @c@ ; @r@ . @mean@ = A . @mean@ + @d@ * @f@ ; "
                    "@r@ . @m2@ = A . @m2@ + B . @m2@ + @d@ * @d@ * A . @n@ * @f@ ; return @r@ ; }")
        seen: list[str] = []
        parts = []
        for tok in template.split():
            if tok.startswith("@"):
                if tok in seen:
                    parts.append(r"(?P=%s)" % tok.strip("@"))
                else:
                    seen.append(tok)
                    parts.append(r"(?P<%s>\w+)" % tok.strip("@"))
            elif tok == "0.0f":
                parts.append(r"0(?:\.0*)?f?")
            else:
                parts.append(re.escape({"A": a, "B": b, "T": st}.get(tok, tok)))
        m = re.fullmatch(" ".join(parts), " ".join(t for t, _, _ in tokens(body)))
        if m:
            out[f.name] = (st, m.group("n"), m.group("mean"), m.group("m2"))
    return out


class ChanStatsToTwoPass(Operator):
    name = "chan_stats_to_two_pass"
    carrier = "single_pass_stats"
    description = "reduce the mean first and the squared deviations from it second, instead of merging (n, mean, M2)"

    def edits(self, src: Source):
        st = structural(src)
        merges = chan_merges(st)
        if not merges:
            return
        for n in walk(st.tree.root_node):
            if n.type == "expression_statement":
                m = re.fullmatch(r"(\w+)\s*\.\s*(\w+)\s*=\s*0(?:\.0*)?f?\s*;", _norm(text(n)))
                if m:
                    e = self.rewrite(st, n, m.group(1), merges)
                    if e is not None:
                        yield e

    def rewrite(self, src: Source, init_m2: Node, var: str, merges) -> Optional[Edit]:
        block = init_m2.parent
        f = src.function_at(init_m2.start_byte)
        fn = src.func_node(f) if f is not None else None
        if block is None or block.type != "compound_statement" or fn is None or not f.is_kernel:
            return None
        code = lambda n: _norm(src.code[n.start_byte:n.end_byte].decode("utf-8", "replace"))  # noqa: E731
        kids = [c for c in block.named_children if c.type != "comment"]
        k = next(i for i, c in enumerate(kids) if c.start_byte == init_m2.start_byte)
        if k < 3:
            return None
        decl, i_n, i_mean = kids[k - 3], kids[k - 2], kids[k - 1]
        d = re.fullmatch(r"(\w+)\s+%s\s*;" % var, code(decl))
        if d is None:
            return None
        found = [(name, fields) for name, fields in merges.items() if fields[0] == d.group(1)]
        if len(found) != 1:
            return None
        mname, (stype, fn_, fmean, fm2) = found[0]
        if not re.fullmatch(r"%s\s*\.\s*%s\s*=.*" % (var, fm2), code(init_m2)):
            return None
        mn = re.fullmatch(r"%s\s*\.\s*%s\s*=\s*(.+);" % (var, fn_), code(i_n))
        mm = re.fullmatch(r"%s\s*\.\s*%s\s*=\s*(.+);" % (var, fmean), code(i_mean))
        if mn is None or mm is None or var in _ids(mn.group(1)) or var in _ids(mm.group(1)):
            return None
        fld = lambda F: r"\b%s\s*\.\s*%s\b" % (var, F)  # noqa: E731
        # D: the statements after the initialisation that accumulate M2
        j = k + 1
        dstmts = []
        while j < len(kids) and re.search(fld(fm2), code(kids[j])) and kids[j].type != "declaration" and \
                not re.search(r"\b__sync", code(kids[j])):
            t = code(kids[j])
            if re.search(fld(fn_), t) or re.search(r"%s\s*\.\s*%s\s*=[^=]" % (var, fmean), t) or \
                    re.search(r"\b%s\s*=[^=]" % var, t):
                return None
            dstmts.append(kids[j])
            j += 1
        if not dstmts:
            return None
        # R: declarations, the slot stores, a barrier, the slot loads, the fold
        hoist = []
        while j < len(kids) and kids[j].type == "declaration" and var not in _ids(code(kids[j])):
            hoist.append(kids[j])
            j += 1
        if j + 5 >= len(kids):  # the stores, the barrier, three loads, the fold
            return None
        store = kids[j]
        slots: dict[str, str] = {}
        idx = None
        for st in (list(store.named_children) if store.type == "compound_statement" else [store]):
            m = re.fullmatch(r"(\w+)\s*\[\s*(.+?)\s*\]\s*=\s*%s\s*\.\s*(\w+)\s*;" % var, code(st))
            if m is None or (idx is not None and m.group(2) != idx) or m.group(1) not in src.shared_names:
                return None
            idx = m.group(2)
            slots[m.group(3)] = m.group(1)
        if set(slots) != {fn_, fmean, fm2}:
            return None
        if not re.fullmatch(r"__syncthreads\s*\(\s*\)\s*;", code(kids[j + 1])):
            return None
        loads = kids[j + 2:j + 5]
        want = {f"{var}.{F} = {slots[F]}[0];" for F in (fn_, fmean, fm2)}
        if {re.sub(r"\s*\.\s*", ".", code(x)) for x in loads} != want:
            return None
        fold = kids[j + 5]
        if fold.type != "for_statement":
            return None
        fm = re.fullmatch(r"for \( int (\w+) = 1 ; \1 < (.+?) ; \+\+ \1 \) \{ (\w+) (\w+) ; (.+) \}",
                          " ".join(t for t, _, _ in tokens(code(fold))))
        if fm is None or fm.group(3) != stype:
            return None
        w, o = fm.group(1), fm.group(4)
        lim = re.sub(r"^%s\s*<\s*" % w, "", code(fold.child_by_field_name("condition")))
        body = set(re.sub(r"\s+", "", s) for s in fm.group(5).split(";") if s.strip())
        want_body = {f"{o}.{F}={slots[F]}[{w}]" for F in (fn_, fmean, fm2)} | {f"{var}={mname}({var},{o})"}
        if body != want_body:
            return None
        end = fold
        # the slot arrays: used only here; the triple afterwards only through reads of its fields
        region_lo, region_hi = decl.start_byte, end.end_byte
        for a in slots.values():
            for n in walk(fn):
                if n.type == "identifier" and text(n) == a and not (region_lo <= n.start_byte < region_hi):
                    dn = src.shared_names[a]
                    if not (dn.start_byte <= n.start_byte < dn.end_byte):
                        return None
        for m in re.finditer(rb"(?m)^[ \t]*#[^\n]*", src.code[region_lo:region_hi]):
            at = region_lo + m.start()
            if not any(x.start_byte <= at < x.end_byte for x in dstmts):
                return None  # a preprocessor line the rewritten region would lose
        after_subs = []
        for n in walk(fn):
            if n.start_byte < region_hi or n.type != "identifier" or text(n) != var:
                continue
            p = n.parent
            if p is None or p.type != "field_expression" or text(p.child_by_field_name("field")) not in (fn_, fmean, fm2):
                return None
            q = p.parent
            if q is not None and ((q.type == "assignment_expression" and q.child_by_field_name("left") == p) or
                                  q.type == "update_expression" or (q.type == "pointer_expression" and text(q).startswith("&"))):
                return None
            new = {fn_: "ks_n", fmean: "ks_mean", fm2: "ks_sq"}[text(p.child_by_field_name("field"))]
            after_subs.append(Edit(p.start_byte, p.end_byte, new))
        # names must be free
        ftext = text(fn)
        if re.search(r"\bks_(n|mean|sq)\b", ftext):
            return None
        ind = line_indent(src, decl.start_byte)
        ren = lambda t: re.sub(fld(fm2), "ks_sq", re.sub(fld(fmean), "ks_mean", re.sub(fld(fn_), "ks_n", t)))  # noqa: E731
        lines = [code(h) for h in hoist]
        lines += [f"float ks_n = {mn.group(1)};", f"float ks_mean = {mm.group(1)};",
                  f"{{ {slots[fn_]}[{idx}] = ks_n; {slots[fmean]}[{idx}] = ks_n * ks_mean; }}",
                  "__syncthreads();", f"ks_n = {slots[fn_]}[0];", f"ks_mean = {slots[fmean]}[0];",
                  f"for (int {w} = 1; {w} < {lim}; ++{w}) {{ ks_n += {slots[fn_]}[{w}]; ks_mean += {slots[fmean]}[{w}]; }}",
                  "ks_mean = ks_n > 0.0f ? ks_mean / ks_n : 0.0f;", "float ks_sq = 0.0f;"]
        out = "\n".join(ind + ln if i else ln for i, ln in enumerate(lines))
        # D keeps its text (and comments), renamed
        dtext = [ren(src.raw[x.start_byte:x.end_byte].decode("utf-8", "replace")) for x in dstmts]
        out += "\n" + ind + ("\n" + ind).join(dtext)
        out += "\n" + "\n".join(ind + ln for ln in [
            f"{{ {slots[fm2]}[{idx}] = ks_sq; }}", "__syncthreads();", f"ks_sq = {slots[fm2]}[0];",
            f"for (int {w} = 1; {w} < {lim}; ++{w}) ks_sq += {slots[fm2]}[{w}];"])
        subs = [Edit(decl.start_byte, end.end_byte, out)] + after_subs
        # the merge function and the device functions that call it go, when nothing else calls them
        dead = {mname} | {g.name for g in src.funcs if not g.is_kernel and g.name != mname and
                          src.func_node(g) is not None and re.search(r"\b%s\s*\(" % re.escape(mname), text(src.func_node(g)))}
        dead_nodes = [src.func_node(g) for g in src.funcs if g.name in dead and not g.is_kernel]
        for n in walk(src.tree.root_node):
            if n.type == "call_expression" and text(n.child_by_field_name("function")) in dead:
                if not (region_lo <= n.start_byte < region_hi) and \
                        not any(g.start_byte <= n.start_byte < g.end_byte for g in dead_nodes):
                    return None
        for gn in dead_nodes:
            a, b = src.line_span(gn.start_byte, gn.end_byte)
            while a > 0:
                prev = src.raw.rfind(b"\n", 0, a - 1) + 1
                if src.raw[prev:a].strip().startswith(b"//"):
                    a = prev
                else:
                    break
            subs.append(Edit(a, b, ""))
        subs.sort()
        for (a1, b1, _), (a2, b2, _) in zip(subs, subs[1:]):
            if a2 < b1:
                return None
        lo, hi = subs[0][0], max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))


def _ids(s: str) -> set[str]:
    return {t for t, _, _ in tokens(s) if re.fullmatch(r"[A-Za-z_]\w*", t)}


PAIR = Pair(ChanStatsToTwoPass)
