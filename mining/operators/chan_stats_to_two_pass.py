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

The sum of squares D ends at the slot stores of the triple (or at a declaration or a barrier), so
a triple stored right after D is read back too.

Forward: chan_merge_stats, the picture above read right to left, in any spelling of its parts: the
count and the thread's value declared as two floats (either order) right before their slot
stores (one block or two statements) where the mean slot holds `n * mean` (the thread's mean) or
the value itself (the thread's sum: its mean is then `n > 0 ? sum / n : 0`, n written out again),
a barrier, the two slot loads (either order), a fold `for (int w = 1; w < L; ++w | w++ | w += 1)`
over both slots, the guarded mean `a = n > 0 ? a / n : 0` (parentheses free), `float sq = 0;`, the
statements D adding to sq, sq's slot store, a barrier, its load and its fold over the same L. The
result is one triple `ks_s` of a new struct `ks_stats`, initialised from the thread's count and
mean with M2 = 0, D on the thread's own mean adding to `ks_s.m2`, one store of the three fields, a
barrier and a fold that merges by `ks_chan_merge` (Chan's formula, written in the file before the
first rewritten kernel); n, the mean and sq read afterwards become the triple's fields. Why it is
sound: D, which read the block mean, now reads the thread's own mean and adds the squared
deviations of the thread's own elements around it, which is M2 of those elements when D runs over
the elements counted in n and summed in the mean (the kernels' single per-thread sweep; the gate
checks that pairing, which is not proven here); Chan's merge of the per-thread triples gives the
union's exact count, mean and M2, so the block mean and sum of squared deviations are those the
folds computed. An empty block keeps mean 0 as the guarded mean did (the merge returns its left
operand when both counts are zero). Floating point: the mean becomes a chain of weighted updates
`mean_a + d * n_b / n` instead of one division of a sum, and M2 gains the correction terms
`d^2 n_a n_b / n`; the rounding differs by a few ulps per merge, which the gate's tolerance must
accept. Refused: D that reads the count, writes anything but sq and its own locals, assigns sq
other than by `+=`, syncs, returns or breaks; an unguarded mean; folds over different counts;
non-zero starts; slot arrays used elsewhere; n, the mean or sq written after the folds; a count
whose expression has effects (it is written out twice); preprocessor lines outside D.

Forward, one thread's form: welford_sweep. `float mean = 0; for (int j = 0; j < B; ++j) mean += X;
mean /= B; float sq = 0; for (int j = 0; j < B; ++j) sq += (X - mean) * (X - mean);` (or `d = X -
mean; sq += d * d;` in a block, `j++`, `mean = mean / (float)B`, the second loop's variable named
otherwise) becomes one sweep: `ks_x = X; ks_d = ks_x - mean; mean += ks_d / (j + 1); sq += ks_d *
(ks_x - mean);`, the division by B gone. Why it is sound: Welford's recurrence keeps, after j + 1
elements, their exact mean and sum of squared deviations M2 (M2 grows by d (x - mean_new) =
d^2 j / (j + 1)), so after B elements mean and sq are what the two sweeps computed; X is a pure
read (no effects, no call but `__ldg`), the same in both sweeps, and the count is the trip count.
With B = 0 the mean stays 0 where the original divided 0 by 0. Floating point: the running mean
rounds once per element instead of once per sum and the deviations use the running mean; the
gate's tolerance must accept that reassociation. Refused: a
divisor other than the trip count, a start other than 0, deviations from another value or over
another range, sweeps that do more than accumulate, elements read with effects, a mean not
starting at zero. The backward half does not read this form back (it reads Chan merges); the
carrier detector does not name it either (it looks for `mean` / `m2` fields).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.operators.base import Edit, Materialization, Operator, Pair, Rewrite, candidate
from mining.operators.nodes import identifiers, kernels, rename_identifiers, tokens
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
        slot_store = r"\{?\s*(?:\w+\s*\[[^\]]+\]\s*=\s*%s\s*\.\s*\w+\s*;\s*)+\}?" % var
        while j < len(kids) and re.search(fld(fm2), code(kids[j])) and kids[j].type != "declaration" and \
                not re.search(r"\b__sync", code(kids[j])) and not re.fullmatch(slot_store, code(kids[j])):
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


# ==================================================================================== forward
# chan_merge_stats: the two reductions of plain sums become one reduction of (count, mean, M2)
# triples merged with Chan's formula (the inverse of the backward half above).

_STRUCT, _MERGE = "ks_stats", "ks_chan_merge"
HELPER = f"""struct {_STRUCT} {{ float n, mean, m2; }};

// Chan et al. parallel merge of two (count, mean, sum of squared deviations) triples.
__device__ __forceinline__ {_STRUCT} {_MERGE}({_STRUCT} a, {_STRUCT} b) {{
    float c = a.n + b.n;
    if (c == 0.0f) return a;
    float d = b.mean - a.mean, f = b.n / c;
    {_STRUCT} r;
    r.n = c;
    r.mean = a.mean + d * f;
    r.m2 = a.m2 + b.m2 + d * d * a.n * f;
    return r;
}}

"""
_Z = r"0(?:\.0*)?[fF]?|0?\.0+[fF]?"
_INC = r"(?:\+\+\s*{w}|{w}\s*\+\+|{w}\s*\+=\s*1)"


def _tok(s: str) -> str:
    return " ".join(t for t, _, _ in tokens(s))


def _stores(src: Source, kids: list, j: int, count: int) -> Optional[tuple[dict[str, str], str, int]]:
    """`count` slot stores `A[i] = V;` at kids[j], in one block or as consecutive statements ->
    ({value: array}, index, statements taken)."""
    def one(st) -> Optional[tuple[str, str, str]]:
        m = re.fullmatch(r"(\w+)\s*\[\s*(.+?)\s*\]\s*=\s*(.+?)\s*;", _norm(text(st)))
        return (m.group(1), m.group(2), _tok(m.group(3))) if m else None
    if kids[j].type == "compound_statement":
        sts, taken = [c for c in kids[j].named_children if c.type != "comment"], 1
    else:
        sts, taken = kids[j:j + count], count
    if len(sts) != count:
        return None
    got = [one(st) for st in sts]
    if any(g is None for g in got) or len({g[1] for g in got}) != 1 or len({g[0] for g in got}) != count or \
            any(g[0] not in src.shared_names for g in got):
        return None
    return {g[2]: g[0] for g in got}, got[0][1], taken


def _fold(st, folds: dict[str, str]) -> Optional[tuple[str, str]]:
    """`for (int w = 1; w < L; ++w) { x += A[w]; ... }` over exactly `folds` (x -> A) -> (w, L)."""
    if st.type != "for_statement":
        return None
    m = re.fullmatch(r"for \( int (\w+) = 1 ; \1 < (.+?) ; (.+?) \) (.+)", _tok(text(st)))
    if m is None or not re.fullmatch(_INC.format(w=m.group(1)), m.group(3)):
        return None
    w, body = m.group(1), m.group(4)
    if body.startswith("{ ") and body.endswith(" }"):
        body = body[2:-2]
    got = {}
    for s in [x.strip() for x in body.split(";") if x.strip()]:
        f = re.fullmatch(r"(\w+) (?:\+= |= \1 \+ )(\w+) \[ %s \]" % w, s)
        if f is None or f.group(1) in got:
            return None
        got[f.group(1)] = f.group(2)
    return (w, m.group(2)) if got == folds else None


def chan_merge_stats(source: str, ctx) -> list[Materialization]:
    """Two serial-fold reductions (count and sum, then squared deviations from the block mean) ->
    one fold of (count, mean, M2) triples merged by Chan's formula (see "Forward" in the docstring)."""
    src = structural(Source(source))
    if re.search(r"\b(%s|%s|ks_s|ks_o)\b" % (_STRUCT, _MERGE), src.code.decode("utf-8", "replace")):
        return []
    found = []
    for k in kernels(src):
        for block in walk(k.body):
            if block.type == "compound_statement":
                kids = [c for c in block.named_children if c.type != "comment"]
                for i in range(len(kids)):
                    r = _chan_site(src, k, kids, i)
                    if r is not None:
                        found.append((k, r))
                        break
    if not found:
        return []
    out = []

    def helper(ks) -> Edit:
        first = min(ks, key=lambda k: k.node.start_byte).node
        top = first.parent if first.parent is not None and first.parent.type == "template_declaration" else first
        a = src.raw.rfind(b"\n", 0, top.start_byte) + 1
        while a > 0:  # above the kernel's comment lines
            prev = src.raw.rfind(b"\n", 0, a - 1) + 1
            if src.raw[prev:a].strip().startswith(b"//"):
                a = prev
            else:
                break
        return Edit(a, a, HELPER)
    if len(found) > 1:
        out.append(candidate(src, [e for _, (es, _) in found for e in es] + [helper([k for k, _ in found])],
                             "chan_merge_stats", f"{len(found)} mean / deviation reductions merged as (n, mean, M2)"))
    for k, (es, ex) in found:
        out.append(candidate(src, es + [helper([k])], "chan_merge_stats",
                             f"{k.name}: the mean and the squared deviations reduced once, as Chan-merged "
                             f"(n, mean, M2) triples", excerpt=ex))
    return out


def _chan_site(src: Source, k, kids: list, i: int) -> Optional[tuple[list[Edit], str]]:
    code = lambda n: _norm(text(n))  # noqa: E731
    decls = {}
    for st in kids[i:i + 2]:
        d = re.fullmatch(r"float\s+(\w+)\s*=\s*(.+);", code(st)) if st.type == "declaration" else None
        if d is None or "," in _tok(d.group(2)).replace("( ", "(").split("(")[0]:
            return None
        decls[d.group(1)] = d.group(2)
    if len(decls) != 2 or i + 2 >= len(kids):
        return None
    j = i + 2
    s1 = _stores(src, kids, j, 2)
    if s1 is None:
        return None
    slots, idx, taken = s1
    names = list(decls)
    n = a = None
    for cand_n in names:
        other = names[1 - names.index(cand_n)]
        if cand_n in slots and (f"{cand_n} * {other}" in slots or f"{other} * {cand_n}" in slots or other in slots):
            n, a = cand_n, other
            break
    if n is None:
        return None
    a_is_mean = a not in slots  # the slot holds n * a: a is the thread's mean, else its sum
    sa = slots.get(a) or slots.get(f"{n} * {a}") or slots.get(f"{a} * {n}")
    sn = slots[n]
    j += taken
    if j + 9 > len(kids) or not re.fullmatch(r"__syncthreads\s*\(\s*\)\s*;", code(kids[j])):
        return None
    loads = {_tok(code(x)) for x in kids[j + 1:j + 3]}
    if loads != {f"{n} = {sn} [ 0 ] ;", f"{a} = {sa} [ 0 ] ;"}:
        return None
    f1 = _fold(kids[j + 3], {n: sn, a: sa})
    if f1 is None:
        return None
    fin = _tok(code(kids[j + 4])).replace("( ", "").replace(" )", "").replace("(", "").replace(")", "")
    if not re.fullmatch(r"%s = %s > (?:%s) \? %s / %s : (?:%s) ;" % (a, n, _Z, a, n, _Z), fin):
        return None
    d = re.fullmatch(r"float\s+(\w+)\s*=\s*(%s)\s*;" % _Z, code(kids[j + 5])) if kids[j + 5].type == "declaration" else None
    if d is None:
        return None
    sq = d.group(1)
    j += 6
    dstmts = []
    while j < len(kids) and kids[j].type != "declaration" and sq in identifiers(code(kids[j])) and \
            _stores(src, kids, j, 1) is None:
        dstmts.append(kids[j])
        j += 1
    if not dstmts or j + 4 > len(kids):
        return None
    s2 = _stores(src, kids, j, 1)
    if s2 is None or s2[0] != {sq: s2[0].get(sq)} or s2[1] != idx:
        return None
    ssq = s2[0][sq]
    j += s2[2]
    if not re.fullmatch(r"__syncthreads\s*\(\s*\)\s*;", code(kids[j])) or \
            _tok(code(kids[j + 1])) != f"{sq} = {ssq} [ 0 ] ;":
        return None
    f2 = _fold(kids[j + 2], {sq: ssq})
    if f2 is None or f2[1] != f1[1] or len({sn, sa, ssq}) != 3:
        return None
    end = kids[j + 2]
    # D: adds to sq from the thread's own elements; it now runs before the reduction, on the
    # thread's own mean, so it may not write anything else, read the count or sync
    local = set()
    for st in dstmts:
        for x in walk(st):
            if x.type == "declaration":
                local |= {_first(text(c.child_by_field_name("declarator") or c)) for c in x.named_children
                          if c.type in ("init_declarator", "identifier")}
    for st in dstmts:
        t = code(st)
        if re.search(r"\b__sync\w*|\batomic\w*\s*\(|\breturn\b|\bbreak\b", t) or n in identifiers(t) or \
                identifiers(t) & {sn, sa, ssq} or _writes_of(st) - local - {sq}:
            return None
        for x in walk(st):
            if x.type == "assignment_expression" and text(x.child_by_field_name("left")).strip() == sq and \
                    not re.fullmatch(r"\+=", text(x.child_by_field_name("operator")).strip()):
                return None
            if x.type == "update_expression" and text(x.child_by_field_name("argument")).strip() == sq:
                return None
    fn = k.node
    lo, hi = kids[i].start_byte, end.end_byte
    for m in re.finditer(rb"(?m)^[ \t]*#[^\n]*", src.code[lo:hi]):
        at = lo + m.start()
        if not any(x.start_byte <= at < x.end_byte for x in dstmts):
            return None
    # the slot arrays: used only here; n, a, sq afterwards only read (they become the triple's fields)
    for x in walk(fn):
        if x.type == "identifier" and text(x) in (sn, sa, ssq) and not lo <= x.start_byte < hi:
            dn = src.shared_names[text(x)]
            if not dn.start_byte <= x.start_byte < dn.end_byte:
                return None
    fields = {n: "ks_s.n", a: "ks_s.mean", sq: "ks_s.m2"}
    subs = []
    for x in walk(fn):
        if x.start_byte < hi or x.type != "identifier" or text(x) not in fields:
            continue
        p = x.parent
        if p is not None and ((p.type == "assignment_expression" and p.child_by_field_name("left") == x) or
                              p.type == "update_expression" or p.type == "pointer_expression" and text(p).startswith("&")
                              or p.type == "init_declarator" and p.child_by_field_name("declarator") == x
                              or p.type in ("declaration", "parameter_declaration")):
            return None
        if p is not None and p.type == "field_expression" and p.child_by_field_name("field") == x:
            continue
        subs.append(Edit(x.start_byte, x.end_byte, fields[text(x)]))
    ind = line_indent(src, kids[i].start_byte)
    # the thread's count is written out again where the mean needs it (the backward half reads a
    # triple initialised from values, not from its own fields); it must be free of effects
    cnt = decls[n] if re.fullmatch(r"[\w.]+", decls[n]) else f"({decls[n]})"
    if re.search(r"\w\s*\(|\+\+|--|[^=!<>]=[^=]", cnt):
        return None
    mean0 = decls[a] if a_is_mean else f"{cnt} > 0.0f ? ({decls[a]}) / {cnt} : 0.0f"
    w, lim = f1
    lines = [f"{_STRUCT} ks_s;", f"ks_s.n = {decls[n]};", f"ks_s.mean = {rename_identifiers(mean0, {n: cnt})};",
             "ks_s.m2 = 0.0f;"]
    body = "\n".join(ind + ln if q else ln for q, ln in enumerate(lines))
    for st in dstmts:
        body += "\n" + ind + rename_identifiers(src.raw[st.start_byte:st.end_byte].decode("utf-8", "replace"),
                                                {a: "ks_s.mean", sq: "ks_s.m2"})
    body += "\n" + "\n".join(ind + ln for ln in [
        f"{{ {sn}[{idx}] = ks_s.n; {sa}[{idx}] = ks_s.mean; {ssq}[{idx}] = ks_s.m2; }}", "__syncthreads();",
        f"ks_s.n = {sn}[0];", f"ks_s.mean = {sa}[0];", f"ks_s.m2 = {ssq}[0];",
        f"for (int {w} = 1; {w} < {lim}; ++{w}) {{ {_STRUCT} ks_o; ks_o.n = {sn}[{w}]; ks_o.mean = {sa}[{w}]; "
        f"ks_o.m2 = {ssq}[{w}]; ks_s = {_MERGE}(ks_s, ks_o); }}"])
    edits = [Edit(lo, hi, body)] + subs
    return edits, src.excerpt(lo, hi)


def _writes_of(node) -> set[str]:
    out = set()
    for x in walk(node):
        t = x.child_by_field_name("left") if x.type == "assignment_expression" else \
            x.child_by_field_name("argument") if x.type == "update_expression" else None
        while t is not None and t.type in ("subscript_expression", "field_expression", "parenthesized_expression"):
            t = t.named_children[0] if t.type == "parenthesized_expression" else t.child_by_field_name("argument")
        if t is not None and t.type == "identifier":
            out.add(text(t))
    return out


def _first(s: str) -> str:
    m = re.search(r"[A-Za-z_]\w*", s)
    return m.group(0) if m else s


# welford_sweep: one thread's mean sweep and deviation sweep over the same elements -> one sweep
# of Welford's running mean and M2 (see "Forward" in the module docstring).

def welford_sweep(source: str, ctx) -> list[Materialization]:
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        for block in walk(k.body):
            if block.type != "compound_statement":
                continue
            kids = [c for c in block.named_children if c.type != "comment"]
            for i in range(len(kids) - 3):
                r = _welford_site(src, kids, i)
                if r is not None:
                    out.append(candidate(src, [r], "welford_sweep", f"{k.name}: the mean and the squared deviations "
                                         f"in one sweep (Welford's running mean and M2)",
                                         excerpt=src.excerpt(kids[i].start_byte, kids[i + 3].end_byte)))
    return out


def _welford_site(src: Source, kids: list, i: int) -> Optional[Edit]:
    def ctok(n) -> str:  # comment-free tokens
        return _tok(src.code[n.start_byte:n.end_byte].decode("utf-8", "replace"))
    p1, fin, dq, p2 = kids[i:i + 4]
    if p1.type != "for_statement" or p2.type != "for_statement" or dq.type != "declaration":
        return None
    hdr = re.compile(r"for \( int (\w+) = (.+?) ; \1 < (.+?) ; (?:\+\+ \1|\1 \+\+|\1 \+= 1) \) (.+)")
    h1, h2 = hdr.fullmatch(ctok(p1)), hdr.fullmatch(ctok(p2))
    if h1 is None or h2 is None or (h1.group(2), h1.group(3)) != (h2.group(2), h2.group(3)):
        return None
    v, a, b = h1.group(1), h1.group(2), h1.group(3)

    def one(body: str) -> list[str]:
        body = body[2:-2] if body.startswith("{ ") and body.endswith(" }") else body
        return [x.strip() for x in body.split(";") if x.strip()]
    b1 = one(h1.group(4))
    if len(b1) != 1:
        return None
    u = re.fullmatch(r"(\w+) (?:\+= |= \1 \+ )(.+)", b1[0])
    if u is None:
        return None
    mean, x = u.group(1), u.group(2)
    if mean in _ids(x) or re.search(r"\+\+|--|[^=!<>]=[^=]", x) or re.search(r"\b(?!__ldg\b)\w+ \(", x):
        return None  # the element must be a pure read
    # the mean's division by the trip count
    f = re.fullmatch(r"%s (?:/= |= %s / )(.+) ;" % (mean, mean), ctok(fin))
    cnt = re.sub(r"^\( (?:float|double) \) ", "", f.group(1)).strip() if f else None
    trip = b if a == "0" else None
    if cnt is None or trip is None or cnt.replace("( ", "").replace(" )", "") != trip.replace("( ", "").replace(" )", ""):
        return None
    q = re.fullmatch(r"float (\w+) = (?:%s) ;" % _Z, ctok(dq))
    if q is None:
        return None
    sq = q.group(1)
    x2 = _tok(rename_identifiers(x, {v: h2.group(1)}))
    b2 = one(h2.group(4))
    dev = f"{x2} - {mean}"
    w = h2.group(1)
    forms = {(f"{sq} += ( {dev} ) * ( {dev} )",), (f"{sq} = {sq} + ( {dev} ) * ( {dev} )",)}
    if len(b2) == 2:
        d = re.fullmatch(r"(?:const )?float (\w+) = (.+)", b2[0])
        if d is None or d.group(2).replace("( ", "").replace(" )", "") != dev:
            return None
        forms = {(b2[0], f"{sq} += {d.group(1)} * {d.group(1)}"), (b2[0], f"{sq} = {sq} + {d.group(1)} * {d.group(1)}")}
    if tuple(b2) not in forms or w in (mean, sq):
        return None
    # the mean starts at zero, declared in this block before the sweep and untouched until it
    decl = None
    for c in kids[:i]:
        dm = re.fullmatch(r"float (\w+) = (?:%s) ;" % _Z, ctok(c)) if c.type == "declaration" else None
        if dm and dm.group(1) == mean:
            decl = c
    if decl is None or mean in _ids(src.code[decl.end_byte:p1.start_byte].decode("utf-8", "replace")):
        return None
    if re.search(r"\bks_(x|d)\b", src.code.decode("utf-8", "replace")):
        return None
    ind = line_indent(src, p1.start_byte)
    n = f"(float)({v} + 1)"
    hdr_text = src.code[p1.start_byte:p1.child_by_field_name("body").start_byte].decode("utf-8", "replace").strip()
    body1 = p1.child_by_field_name("body")
    st1 = [c for c in body1.named_children if c.type != "comment"] if body1.type == "compound_statement" else [body1]
    xs = re.fullmatch(r"\w+\s*(?:\+=|=\s*\w+\s*\+)\s*(.+?)\s*;",
                      _norm(src.code[st1[0].start_byte:st1[0].end_byte].decode("utf-8", "replace")))
    if xs is None or _tok(xs.group(1)) != x:
        return None
    lines = [f"float {sq} = 0.0f;", f"{hdr_text} {{", f"    const float ks_x = {xs.group(1)};",
             f"    const float ks_d = ks_x - {mean};", f"    {mean} += ks_d / {n};",
             f"    {sq} += ks_d * (ks_x - {mean});", "}"]
    return Edit(p1.start_byte, p2.end_byte, ("\n" + ind).join(lines))


PAIR = Pair(ChanStatsToTwoPass, (Rewrite("chan_merge_stats", "single_pass_stats", chan_merge_stats, prior=1.5),
                                Rewrite("welford_sweep", "single_pass_stats", welford_sweep, prior=1.3)))
