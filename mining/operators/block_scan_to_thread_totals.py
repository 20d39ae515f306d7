"""block_scan_to_thread_totals: the block-level step of a two-level scan sums every thread's total
instead of one total per warp.

    int incl = total;
    for (int off = 1; off < 32; off <<= 1) { <t = incl of lane - off>; if (lane >= off) incl += t; }
    if (lane == 31) warp_total[warp] = incl;          ->   ks_thread_total[warp * 32 + lane] = total;
    __syncthreads();
    for (int w = 0; w < THREADS / 32; ++w) {          ->   for (int ks_u = 0; ks_u < (THREADS / 32) * 32; ++ks_u) {
        const int v = warp_total[w];                 ->       const int v = ks_thread_total[ks_u];
        warp_prefix += w < warp ? v : 0;             ->       warp_prefix += (ks_u / 32) < warp ? v : 0;
        aggregate += v;                                       aggregate += v;
    }

The two-level scan lets lane 31 publish its warp's inclusive scan value - the warp total - and
every thread then folds one value per warp. Without it, every thread publishes its own total and
folds all of them: 32x the shared-memory reads, and the block step no longer builds on the warp
scan. Why it is the same value: lane 31's inclusive warp scan of `total` is the sum of the warp's
32 totals, and the reader loop is linear in the value it reads (each statement adds the value, or
adds it under a condition of the warp index only), so summing the 32 thread totals of warp w under
the condition for w adds exactly what adding the warp total did.

Checked: the published value is the variable of a warp inclusive scan (`int incl = X;` followed
by one loop with doubling offsets below 32 whose only update is `if (lane >= off) incl += t;`,
`t` coming from `__shfl_up_sync(.., incl, off)` or from the lane `off` below through a
shared exchange slot), `X` does not change before the publication, lane and warp are `tid & 31`
and `tid >> 5` (or `% 32`, `/ 32`) of the same thread index, the warp-total array is written only
there and read only as `v = W[w]` in loops `for (w = 0; w < N; ++w)` whose other statements are
`A += v;` or `A += cond(w) ? v : 0;`.

Forward, `warp_totals_block_scan`: the reverse on any spelling of "every thread publishes its total,
every thread folds all of them". A 1-D `__shared__` array written once, by the statement `T[i] = X;`
at the top level of the kernel body with i the thread's own slot (`warp * 32 + lane`, or the block
thread index itself), and read only as `v = T[u]` at the top of loops `for (int u = 0; u < S; ++u)`
whose other statements are `A += v;` or `A += cond ? v : 0;` with `cond` reading u only as its warp,
`u / 32` (`(u >> 5)`), becomes one total per warp: `W[S / 32]`, lane 31 publishes the warp inclusive
scan of X when the kernel already computes one (`int incl = X;` and the shuffle scan loop
`_warp_scan` recognises), else a butterfly `__shfl_xor_sync` sum of X that lane 0 publishes; the
loops run over the S / 32 warps with `u / 32 -> u`. Why the same value: the 32 slots of warp w hold
the totals its lanes publish, the reader adds each of them under a condition that is the same for
the whole warp, so adding the warp's sum once under that condition adds the same (exactly for
integers; a float sum is reassociated, the gate's tolerance decides). Checked besides: every launch
of the kernel has a 1-D block of exactly S threads, S a multiple of 32 (so slot i is hardware lane
i & 31 of warp i >> 5, and every slot is written), no `return` before the publication (every lane
of every warp is there for the shuffles), the slot index built from `threadIdx.x`. Not a site: a
reader whose condition reads u otherwise (`u < tid`: a per-thread prefix inside the warp would need
the warp scan's in-warp part too, not written here), a slot that is not the thread's own.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import same
from corpora.code.source import Source
from mining.carriers import block_scan_sites
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, candidate
from mining.operators.nodes import FunctionIndex, block_dims, int_value, kernel_launches, kernels, subscript_chain
from mining.operators.rewrite_util import splice_range, structural, type_text
from corpora.code.parse import text, walk


_LAST_LANE = re.compile(r"\(\s*(\w+)\s*==\s*(?:31|WARP_SIZE\s*-\s*1|warpSize\s*-\s*1)\s*\)")
_DOUBLING = re.compile(r"(\w+)\s*(?:<<=\s*1|\*=\s*2)")


def _code(src: Source, node: Node) -> str:
    return " ".join(src.code[node.start_byte:node.end_byte].decode("utf-8", "replace").split())


def _stmts(block: Node) -> list[Node]:
    return [c for c in block.named_children if c.type != "comment"]


def _thread_parts(idx: FunctionIndex, lane: str, warp: str, at: int) -> bool:
    """`lane` and `warp` are the low 5 bits and the rest of one thread index (never reassigned)."""
    lv, wv = idx.visible(lane, at), idx.visible(warp, at)
    if lv is None or wv is None or lv.value is None or wv.value is None or lv.assigned or wv.assigned:
        return False
    lm = re.fullmatch(r"\(?\s*(\w+(?:\.x)?)\s*(?:&\s*31|%\s*32)\s*\)?", " ".join(text(lv.value).split()))
    wm = re.fullmatch(r"\(?\s*(\w+(?:\.x)?)\s*(?:>>\s*5|/\s*32)\s*\)?", " ".join(text(wv.value).split()))
    return bool(lm and wm and lm.group(1) == wm.group(1))


class BlockScanToThreadTotals(Operator):
    name = "block_scan_to_thread_totals"
    carrier = "block_scan"
    description = "fold every thread's total in the block step of a scan instead of one warp total per warp"

    def edits(self, src: Source):
        flagged = {s.start_byte for s in block_scan_sites(src)}
        if not flagged:
            return
        src = structural(src)
        for ifs in src.nodes("if_statement"):
            if ifs.start_byte in flagged:
                f = src.function_at(ifs.start_byte)
                fn = src.func_node(f) if f is not None else None
                if fn is not None:
                    e = self.rewrite(src, fn, ifs)
                    if e is not None:
                        yield e

    def rewrite(self, src: Source, fn: Node, ifs: Node) -> Optional[Edit]:
        idx = FunctionIndex(src, fn)
        cond = ifs.child_by_field_name("condition")
        m = _LAST_LANE.fullmatch(_code(src, cond)) if cond is not None else None
        if m is None or ifs.child_by_field_name("alternative") is not None:
            return None
        lane = m.group(1)
        body = ifs.child_by_field_name("consequence")
        if body.type == "compound_statement":
            inner = _stmts(body)
            if len(inner) != 1:
                return None
            body = inner[0]
        pm = re.fullmatch(r"(\w+)\s*\[\s*(\w+)\s*\]\s*=\s*(\w+)\s*;", _code(src, body))
        if body.type != "expression_statement" or pm is None:
            return None
        arr, warp, incl = pm.groups()
        if not _thread_parts(idx, lane, warp, ifs.start_byte):
            return None
        # the warp-total array: a 1-D __shared__ array of this function
        decl = next(((d, n, dims) for d, n, dims in src.shared_decls if n == arr and
                     fn.start_byte <= d.start_byte < fn.end_byte), None)
        if decl is None or len(decl[2]) != 1:
            return None
        d_node, _, dims = decl
        n_text = _code(src, dims[0])
        elem = type_text(src, d_node)
        if not elem:
            return None
        elem = re.sub(r"\b(__shared__|volatile|static)\b", "", elem).strip()
        # the published value: a warp inclusive scan of X
        iv = idx.visible(incl, ifs.start_byte)
        if iv is None or iv.value is None or iv.kind != "local":
            return None
        block = ifs.parent
        if block is None or block.type != "compound_statement" or not same(iv.decl.parent, block):
            return None
        sibs = _stmts(block)
        k_decl = next(i for i, c in enumerate(sibs) if same(c, iv.decl))
        k_if = next(i for i, c in enumerate(sibs) if same(c, ifs))
        between = sibs[k_decl + 1:k_if]
        if len(between) != 1 or between[0].type != "for_statement":
            return None
        scan = between[0]
        if not self._warp_scan(src, idx, scan, incl, lane):
            return None
        if any(iv.decl.start_byte <= a.start_byte < ifs.start_byte and
               not (scan.start_byte <= a.start_byte < scan.end_byte) for a in iv.assigned):
            return None
        total = iv.value
        for n in walk(total):
            if n.type == "identifier":
                v = idx.visible(text(n), n.start_byte)
                if v is not None and any(iv.decl.start_byte <= a.start_byte < ifs.end_byte for a in v.assigned):
                    return None
            if n.type in ("call_expression", "assignment_expression", "update_expression"):
                return None
        # every other use of the array: `v = W[w]` at the top of a counted loop over the warps
        uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == arr and
                not (d_node.start_byte <= n.start_byte < d_node.end_byte)]
        new = "ks_thread_total"
        if re.search(rb"\b%s\b" % new.encode(), src.code):
            return None
        subs: list[Edit] = []
        size = f"({n_text}) * 32" if not re.fullmatch(r"\w+", n_text) else f"{n_text} * 32"
        subs.append(Edit(d_node.start_byte, d_node.end_byte, _code(src, d_node).replace(
            _code(src, dims[0]), size, 1).replace(arr, new, 1)))
        subs.append(Edit(ifs.start_byte, ifs.end_byte, f"{new}[{warp} * 32 + {lane}] = {_code(src, total)};"))
        for u in uses:
            if body.start_byte <= u.start_byte < body.end_byte:
                continue
            e = self._reader(src, idx, u, arr, n_text, new)
            if e is None:
                return None
            subs.extend(e)
        subs = sorted(set(subs))
        for (s1, e1, _), (s2, e2, _) in zip(subs, subs[1:]):
            if s2 < e1:
                return None
        lo, hi = subs[0][0], max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))

    def _warp_scan(self, src: Source, idx: FunctionIndex, loop: Node, incl: str, lane: str) -> bool:
        init = _code(src, loop.child_by_field_name("initializer") or loop)
        cond = _code(src, loop.child_by_field_name("condition") or loop)
        upd = _code(src, loop.child_by_field_name("update") or loop)
        im = re.fullmatch(r"int\s+(\w+)\s*=\s*1\s*;?", init)
        if not im:
            return False
        off = im.group(1)
        if not re.fullmatch(r"%s\s*<\s*(32|WARP_SIZE|warpSize)" % off, cond) or not _DOUBLING.fullmatch(upd) or \
                _DOUBLING.fullmatch(upd).group(1) != off:
            return False
        body = _code(src, loop.child_by_field_name("body"))
        # the only update of the scan variable
        writes = re.findall(r"\b%s\s*([-+*/|&^]?=)(?!=)" % re.escape(incl), body)
        if writes != ["+="]:
            return False
        am = re.search(r"if\s*\(\s*%s\s*>=\s*%s\s*\)\s*\{?\s*%s\s*\+=\s*(\w+)\s*;" % (lane, off, re.escape(incl)), body)
        if am is None:
            return False
        t = re.escape(am.group(1))
        shfl = re.search(r"\b%s\s*=\s*__shfl_up_sync\s*\(\s*[^,]+,\s*%s\s*,\s*%s\s*(,\s*32\s*)?\)" %
                         (t, re.escape(incl), off), body)
        xm = re.search(r"(\w+)\s*\[\s*(\w+)\s*\]\s*=\s*%s\s*;\s*__syncwarp\s*\([^)]*\)\s*;\s*(?:const\s+)?\w+\s+%s\s*=\s*"
                       r"\1\s*\[\s*\(\s*\2\s*&\s*31\s*\)\s*>=\s*%s\s*\?\s*\2\s*-\s*%s\s*:\s*\2\s*\]\s*;"
                       % (re.escape(incl), t, off, off), body)
        return bool(shfl or xm)

    def _reader(self, src: Source, idx: FunctionIndex, use: Node, arr: str, n_text: str, new: str):
        outer, ind = subscript_chain(use)
        if len(ind) != 1 or ind[0] is None or ind[0].type != "identifier":
            return None
        w = text(ind[0])
        decl = outer.parent
        while decl is not None and decl.type not in ("declaration",):
            if decl.type not in ("init_declarator",):
                return None
            decl = decl.parent
        if decl is None:
            return None
        dd = [d for d in decl.named_children if d.type == "init_declarator"]
        if len(dd) != 1 or not same(dd[0].child_by_field_name("value"), outer):
            return None
        v = text(dd[0].child_by_field_name("declarator"))
        body = decl.parent
        loop = body.parent if body is not None else None
        if body is None or body.type != "compound_statement" or loop is None or loop.type != "for_statement":
            return None
        init = _code(src, loop.child_by_field_name("initializer"))
        cond = _code(src, loop.child_by_field_name("condition"))
        upd = _code(src, loop.child_by_field_name("update"))
        if not re.fullmatch(r"int\s+%s\s*=\s*0\s*;?" % w, init) or cond != f"{w} < {n_text}" or \
                not re.fullmatch(r"\+\+\s*%s|%s\s*\+\+" % (w, w), upd):
            return None
        stmts = _stmts(body)
        if not same(stmts[0], decl):
            return None
        subs = [Edit(outer.start_byte, outer.end_byte, f"{new}[ks_u]")]
        for s in stmts[1:]:
            c = _code(src, s)
            am = re.fullmatch(r"(\w+)\s*\+=\s*(.+);", c)
            if s.type != "expression_statement" or am is None:
                return None
            rhs = am.group(2).strip()
            cm = re.fullmatch(r"(.+?)\s*\?\s*%s\s*:\s*0\s*" % re.escape(v), rhs)
            if rhs != v and (cm is None or re.search(r"\b%s\b" % re.escape(v), cm.group(1))):
                return None  # not linear in the value read
            if am.group(1) in (v, w):
                return None
            for n in walk(s):
                if n.type == "identifier" and text(n) == w:
                    subs.append(Edit(n.start_byte, n.end_byte, "(ks_u / 32)"))
        header = loop.child_by_field_name("body").start_byte
        size = f"({n_text}) * 32" if not re.fullmatch(r"\w+", n_text) else f"{n_text} * 32"
        subs.append(Edit(loop.start_byte, header, f"for (int ks_u = 0; ks_u < {size}; ++ks_u) "))
        return subs


# --------------------------------------------------------------------------- forward: warp_totals_block_scan
def _thread_slot(idx: FunctionIndex, e: str, at: int) -> Optional[tuple[str, str]]:
    """(lane, warp) expressions of a slot index that is the block thread index: `warp * 32 + lane`
    (lane / warp the low 5 bits and the rest of `threadIdx.x`), `tid` (= threadIdx.x) or threadIdx.x."""
    e = " ".join(e.split())

    def is_tid(name: str) -> bool:
        if re.fullmatch(r"threadIdx\s*\.\s*x", name):
            return True
        v = idx.visible(name, at)
        return v is not None and v.value is not None and not v.assigned and \
            re.fullmatch(r"\(?\s*(?:int|unsigned)?\s*\)?\s*threadIdx\s*\.\s*x\s*\)?", " ".join(text(v.value).split())) is not None

    m = re.fullmatch(r"(\w+) \* 32 \+ (\w+)|(\w+) \+ (\w+) \* 32", e)
    if m:
        warp, lane = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
        lv, wv = idx.visible(lane, at), idx.visible(warp, at)
        if lv is None or wv is None or lv.value is None or wv.value is None or lv.assigned or wv.assigned:
            return None
        lm = re.fullmatch(r"\(?\s*(\w+(?:\.x)?)\s*(?:&\s*31|%\s*32)\s*\)?", " ".join(text(lv.value).split()))
        wm = re.fullmatch(r"\(?\s*(\w+(?:\.x)?)\s*(?:>>\s*5|/\s*32)\s*\)?", " ".join(text(wv.value).split()))
        if lm and wm and lm.group(1) == wm.group(1) and is_tid(lm.group(1)):
            return lane, warp
        return None
    if re.fullmatch(r"\w+(?:\.x)?", e.replace(" ", "")) and is_tid(e.replace(" ", "")):
        t = e.replace(" ", "")
        return f"({t} & 31)", f"({t} >> 5)"
    return None


_WARP_OF = r"\(\s*%s\s*/\s*32\s*\)|\(\s*%s\s*>>\s*5\s*\)|(?<![\w)\]./*%%\s])(\s*)%s\s*/\s*32\b"


def _per_warp(stmt: str, u: str) -> Optional[str]:
    """The statement with every `u / 32` made `u`; None when u is read otherwise."""
    pat = re.compile(_WARP_OF % ((re.escape(u),) * 3))
    if re.search(r"\b%s\b" % re.escape(u), pat.sub("", stmt)):
        return None
    return pat.sub(lambda m: (m.group(1) or "") + u, stmt)


def _warps(n: str) -> str:
    """`n / 32` written plainly: `(W) * 32` (this operator's own spelling) gives back W."""
    n = " ".join(n.split())
    m = re.fullmatch(r"\((.+)\) \* 32|(\w+) \* 32", n)
    if m and (m.group(2) or m.group(1).count("(") == m.group(1).count(")")):
        return m.group(1) or m.group(2)
    return f"{n} / 32" if re.fullmatch(r"\w+", n) else f"({n}) / 32"


def _reader_edits(src: Source, use: Node, arr: str, new: str, size: int) -> Optional[list[Edit]]:
    """`for (int u = 0; u < S; ++u) { T v = ARR[u]; A += v; A += c(u / 32) ? v : 0; }` -> over warps."""
    outer, ind = subscript_chain(use)
    if len(ind) != 1 or ind[0] is None or ind[0].type != "identifier":
        return None
    u = text(ind[0])
    dd = outer.parent
    decl = dd.parent if dd is not None and dd.type == "init_declarator" else None
    if decl is None or decl.type != "declaration" or not same(dd.child_by_field_name("value"), outer) or \
            len([d for d in decl.named_children if d.type == "init_declarator"]) != 1:
        return None
    v = text(dd.child_by_field_name("declarator"))
    body = decl.parent
    loop = body.parent if body is not None else None
    if body is None or body.type != "compound_statement" or loop is None or loop.type != "for_statement":
        return None
    init, cond, upd = (loop.child_by_field_name(k) for k in ("initializer", "condition", "update"))
    if init is None or cond is None or upd is None:
        return None
    cm = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(u), _code(src, cond))
    if not re.fullmatch(r"(?:const\s+)?int\s+%s\s*=\s*0\s*;?" % re.escape(u), _code(src, init)) or cm is None or \
            int_value(src, cm.group(1)) != size or not re.fullmatch(r"\+\+\s*%s|%s\s*\+\+" % (u, u), _code(src, upd)):
        return None
    stmts = _stmts(body)
    if not same(stmts[0], decl):
        return None
    edits = [Edit(outer.start_byte, outer.end_byte, f"{new}[{u}]"),
             Edit(cond.start_byte, cond.end_byte, f"{u} < {_warps(cm.group(1))}")]
    for st in stmts[1:]:
        c = _code(src, st)
        am = re.fullmatch(r"(\w+)\s*\+=\s*(.+);", c)
        if st.type != "expression_statement" or am is None or am.group(1) in (u, v):
            return None
        rhs = am.group(2).strip()
        tm = re.fullmatch(r"(.+?)\s*\?\s*%s\s*:\s*0\s*" % re.escape(v), rhs)
        if rhs != v and (tm is None or re.search(r"\b%s\b" % re.escape(v), tm.group(1))):
            return None  # not linear in the value read
        raw = src.raw[st.start_byte:st.end_byte].decode("utf-8", "replace")
        new_st = _per_warp(raw, u)
        if new_st is None:
            return None  # reads the slot index itself (a per-thread prefix)
        if new_st != raw:
            edits.append(Edit(st.start_byte, st.end_byte, new_st))
    return edits


def warp_totals_block_scan(source: str, ctx: Context) -> list[Materialization]:
    """Per-thread totals folded by every thread -> one total per warp (see the module's docstring)."""
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        fn = k.node
        idx = FunctionIndex(src, fn)
        dims = [block_dims(src, la) for la in kernel_launches(src, k.name)]
        if not dims or any(d is None or d[1:] != (1, 1) for d in dims) or len({d[0] for d in dims}) != 1:
            continue
        size = dims[0][0]
        if size % 32 or size < 64:
            continue
        for d_node, arr, ext in src.shared_decls:
            if not (fn.start_byte <= d_node.start_byte < fn.end_byte) or len(ext) != 1 or \
                    int_value(src, _code(src, ext[0])) != size:
                continue
            m = _warp_totals(src, idx, k, d_node, arr, ext[0], size)
            if m is not None:
                out.append(m)
    return out


def _warp_totals(src: Source, idx: FunctionIndex, k, d_node: Node, arr: str, ext: Node, size: int):
    fn = k.node
    uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == arr and
            not (d_node.start_byte <= n.start_byte < d_node.end_byte)]
    writes = []
    for u in uses:
        outer, _ = subscript_chain(u)
        p = outer.parent
        if p is not None and p.type == "assignment_expression" and same(p.child_by_field_name("left"), outer):
            writes.append((u, p))
    if len(writes) != 1:
        return None
    wu, asg = writes[0]
    stmt = asg.parent
    if stmt is None or stmt.type != "expression_statement" or not same(stmt.parent, k.body) or \
            text(asg.child_by_field_name("operator")) != "=":
        return None
    if any(n.type == "return_statement" and n.start_byte < stmt.start_byte for n in walk(fn)):
        return None
    _, ind = subscript_chain(wu)
    if len(ind) != 1 or ind[0] is None:
        return None
    slot = _thread_slot(idx, text(ind[0]), stmt.start_byte)
    if slot is None:
        return None
    lane, warp = slot
    x = asg.child_by_field_name("right")
    if any(n.type in ("call_expression", "assignment_expression", "update_expression") for n in walk(x)):
        return None
    elem = type_text(src, d_node)
    if not elem:
        return None
    elem = re.sub(r"\b(__shared__|volatile|static)\b", "", elem).strip()
    new = "ks_warp_total"
    if re.search(rb"\b%s\b" % new.encode(), src.code):
        return None
    edits: list[Edit] = []
    size_t = _warps(_code(src, ext))
    dc = src.raw[d_node.start_byte:d_node.end_byte].decode("utf-8", "replace")
    dc = re.sub(r"\b%s\s*\[[^]]*\]" % re.escape(arr), f"{new}[{size_t}]", dc, count=1)
    edits.append(Edit(d_node.start_byte, d_node.end_byte, dc))
    # the warp's total: lane 31 of a warp inclusive scan of X already there, else a butterfly sum
    xt = _code(src, x)
    incl = None
    sibs = _stmts(k.body)
    pos = next(i for i, c in enumerate(sibs) if same(c, stmt))
    op = BlockScanToThreadTotals()
    for i in range(pos - 1, 0, -1):
        d, loop = sibs[i - 1], sibs[i]
        if d.type != "declaration" or loop.type != "for_statement":
            continue
        dm = re.fullmatch(r"(?:const\s+)?\w+\s+(\w+)\s*=\s*(.+);", _code(src, d))
        if dm and dm.group(2) == xt and op._warp_scan(src, idx, loop, dm.group(1), lane):
            iv = idx.visible(dm.group(1), stmt.start_byte)
            if iv is not None and all(loop.start_byte <= a.start_byte < loop.end_byte for a in iv.assigned
                                      if a.start_byte < stmt.start_byte) and \
                    not any(sibs[j].type != "declaration" and re.search(r"\b%s\b" % re.escape(dm.group(1)),
                                                                         _code(src, sibs[j])) and
                            any(a.start_byte >= sibs[j].start_byte and a.end_byte <= sibs[j].end_byte
                                for a in iv.assigned) for j in range(i + 1, pos)):
                incl = dm.group(1)
            break
    if incl is not None:
        pub = f"if ({lane} == 31) {new}[{warp}] = {incl};"
    else:
        pub = (f"{{  // ks-optimize: one total per warp\n"
               f"{_indent(src, stmt)}    {elem} ks_ws = {xt};\n"
               f"{_indent(src, stmt)}    for (int ks_o = 16; ks_o > 0; ks_o >>= 1) "
               f"ks_ws += __shfl_xor_sync(0xffffffffu, ks_ws, ks_o);\n"
               f"{_indent(src, stmt)}    if ({lane} == 0) {new}[{warp}] = ks_ws;\n{_indent(src, stmt)}}}")
    edits.append(Edit(stmt.start_byte, stmt.end_byte, pub))
    readers = 0
    for u in uses:
        if same(u, wu):
            continue
        e = _reader_edits(src, u, arr, new, size)
        if e is None:
            return None
        edits.extend(e)
        readers += 1
    if not readers:
        return None
    edits = sorted(set(edits))
    for (s1, e1, _), (s2, e2, _) in zip(edits, edits[1:]):
        if s2 < e1:
            return None
    how = f"lane 31 of the warp scan {incl}" if incl else "a shuffle sum per warp"
    return candidate(src, edits, "warp_totals_block_scan",
                     f"{k.name}: {arr} holds one total per warp ({how}), the block step folds {size // 32} values",
                     excerpt=_code(src, stmt)[:160])


def _indent(src: Source, node: Node) -> str:
    a = src.raw.rfind(b"\n", 0, node.start_byte) + 1
    return src.raw[a:node.start_byte].decode("utf-8", "replace") if not src.raw[a:node.start_byte].strip() else ""


PAIR = Pair(BlockScanToThreadTotals, (Rewrite("warp_totals_block_scan", "block_scan", warp_totals_block_scan, prior=2.0),))
