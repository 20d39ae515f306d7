"""block_reduce_to_serial: a two-level block reduction (each warp reduces its lanes, lane 0 parks
the warp's partial in a shared array, a barrier, every warp folds the partials once more) becomes
a single-level one: every thread parks its own value in a shared slot and folds all the slots
serially.

    W:  m, s = warp_reduce(m, s);                           (deleted)
    S1: if (lane == 0) { wm[warp] = m; ws[warp] = s; }  ->  { wm[threadIdx.x] = m; ws[threadIdx.x] = s; }
    S2: __syncthreads();                                    __syncthreads();
    R:  m = lane < nwarps ? wm[lane] : -FLT_MAX; ...   ->  m = wm[0]; s = ws[0];
    F:  m, s = warp_reduce(m, s);                           for (int ks_w = 1; ks_w < blockDim.x; ++ks_w) {
                                                                float m2 = wm[ks_w]; float s2 = ws[ks_w];
                                                                merge_stats(m, s, m2, s2); }

and the partial arrays grow from one slot per warp to one per thread (`[D]` -> `[D * 32]`).

The fold is the warp reduction's own combining step with the partner's values read from the
slots: the body of W's loop (inline, or of the device function W calls, its parameter renamed to
the caller's variable) where every exchange of a value X (a `__shfl_*_sync(mask, X, off)` call, or
the `buf[ks_tid] = X; __syncwarp(); ... buf[ks_tid ^ off] ...; __syncwarp();` form that
shuffle_to_shared leaves) is replaced by `slot_of_X[ks_w]`.

Why it is sound: W and F reduce the same values with the same combining step (the same function,
or the same loop text), and the two-level result is that step applied over all threads' values in
a tree order; the serial fold applies it over the same values in index order, in every thread,
so every thread ends with the block's total as before (float rounding differs: the gate's
tolerance judges it). Sites need: the three statements consecutive in one block with only R
(assignments of the parked values from the arrays) between the barrier and F, the arrays read
and written nowhere else, a one-dimensional block (the slots are indexed by threadIdx.x), no
`return` before the site (every slot is written), and the slot dimension D with
blockDim.x <= 32 * D (what the per-warp layout already needed).

Forward, `warp_reduce_per_block`: the reverse. Every thread parks its value(s) in a slot of its own
(`A[tid] = v;`, one array per value, braced or not), a barrier, and every thread folds all slots
serially (`v = A[0]; for (int w = 1; w < B; ++w) COMBINE`, B `blockDim.x` or the block size of every
launch) becomes the two-level form: the same combining step over a warp-shuffle butterfly
(`__shfl_xor_sync` for the partner's slot), lane 0 parks the warp's value in slot `warp`, a
barrier, each lane below the warp count reads a warp's slot, the rest the combine's identity, and
the same butterfly again. COMBINE may hold, for each parked value, one step the identity of which
is known: a sum (`v += A[w]`, `v = v + A[w]`; identity 0) or an idempotent max / min (`v =
fmaxf(v, A[w])`, `max`, `fminf`, `min`, ...; the spare lanes read slot 0 again, which changes
nothing). Why it is sound: the butterfly leaves every lane of a whole warp with the combine over
the warp's 32 values (commutative and associative steps); the second butterfly, over the warps'
values padded with the identity, leaves every lane of every warp with the block's total, which is
what the serial fold gave every thread (float rounding differs: the gate's tolerance judges it).
Preconditions: a one-dimensional block; the arrays used nowhere but the park, the first read
and the fold; no `return` before the park and the park not under a condition (every lane reaches
the shuffles and the barrier); whole warps: when some launch's block size is not a constant multiple
of 32, the two-level form runs under `if ((blockDim.x & 31) == 0)` with the serial fold as the
fallback (a guard the materialization lists). A slot array sized `X * 32` (the backward half's
widening) is sized X again where the guard is not needed.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name, same
from corpora.code.source import Source
from mining.carriers import block_reduce_shared_sites
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, candidate
from mining.operators.nodes import FunctionIndex, kernels, norm, rename_identifiers, split_top, strip_parens
from mining.operators.reduction_tree import fresh, is_thread, kernel_launches, thread_names
from mining.operators.rewrite_util import line_indent, pragma_before, splice_range, structural
from corpora.code.parse import text, walk


_SHFL = {"__shfl_xor_sync", "__shfl_down_sync", "__shfl_sync", "__shfl_up_sync", "__shfl_xor", "__shfl_down"}


def _stmts(node: Node) -> list[Node]:
    if node.type == "compound_statement":
        out = []
        for c in node.named_children:
            if c.type == "comment":
                continue
            out.extend(_stmts(c) if c.type == "compound_statement" else [c])
        return out
    return [node]


def _splice_code(src: Source, start: int, end: int, subs: list[Edit]) -> str:
    """The comment-free text of [start, end) with sub-edits applied."""
    out, pos = [], start
    for a, b, t in sorted(subs):
        out.append(src.code[pos:a].decode("utf-8", "replace"))
        out.append(t)
        pos = b
    out.append(src.code[pos:end].decode("utf-8", "replace"))
    return "".join(out)



class BlockReduceToSerial(Operator):
    name = "block_reduce_to_serial"
    carrier = "block_reduce_shared"
    description = "fold every thread's value serially from shared slots instead of reducing warps, then warp partials"

    def edits(self, src: Source):
        st = structural(src)
        seen = set()
        for site in block_reduce_shared_sites(src):
            if site.start_byte in seen:
                continue
            seen.add(site.start_byte)
            e = self.rewrite(st, site.start_byte)
            if e is not None:
                yield e

    # ------------------------------------------------------------------ the site
    def rewrite(self, src: Source, at: int) -> Optional[Edit]:
        s1 = next((n for n in walk(src.tree.root_node) if n.type == "if_statement" and n.start_byte == at), None)
        if s1 is None or s1.parent is None or s1.parent.type != "compound_statement" or \
                s1.child_by_field_name("alternative") is not None:
            return None
        f = src.function_at(s1.start_byte)
        fn = src.func_node(f) if f is not None else None
        if fn is None:
            return None
        fcode = src.code[fn.start_byte:fn.end_byte].decode("utf-8", "replace")
        # (the linear index shuffle_to_shared declares mentions y and z: not a use of a 2-D block)
        fcode = re.sub(r"const int ks_tid = [^;]*;", "", fcode)
        if re.search(r"\bthreadIdx\s*\.\s*[yz]\b", fcode) or \
                re.search(rb"\breturn\b", src.code[fn.start_byte:s1.start_byte]):
            return None
        # S1: the parked values
        parked: list[tuple[str, str]] = []  # (array, value)
        for stmt in _stmts(s1.child_by_field_name("consequence")):
            m = re.fullmatch(r"(\w+)\s*\[\s*(\w+)\s*\]\s*=\s*([\w.]+)\s*;", " ".join(text(stmt).split()))
            if m is None or m.group(1) not in src.shared_names:
                return None
            parked.append((m.group(1), m.group(3)))
        arrays = [a for a, _ in parked]
        if not parked or len(set(arrays)) != len(arrays):
            return None
        slot = {norm(v): a for a, v in parked}
        sibs = [c for c in s1.parent.named_children if c.type != "comment"]
        k = next(i for i, c in enumerate(sibs) if same(c, s1))
        if k + 2 >= len(sibs) or not re.fullmatch(r"__syncthreads\s*\(\s*\)\s*;", " ".join(text(sibs[k + 1]).split())):
            return None
        # R ... F: assignments of the parked values from the arrays, then the second warp reduction
        reads_arrays = lambda n: any(re.search(r"\b%s\b" % re.escape(a), text(n)) for a in arrays)  # noqa: E731
        j = k + 2
        values = {norm(v) for _, v in parked}
        while j < len(sibs) and reads_arrays(sibs[j]):
            m = re.fullmatch(r"([\w.]+)\s*=\s*(.+);", " ".join(text(sibs[j]).split()))
            if m is None or norm(m.group(1)) not in values:
                return None
            j += 1
        if j == k + 2:
            return None
        last_read = sibs[j - 1]
        f_stmt = last_read if self._reduce_call(src, last_read) is not None else (sibs[j] if j < len(sibs) else None)
        if f_stmt is None:
            return None
        # W: the first warp reduction, the statement before S1 (declarations skipped)
        i = k - 1
        while i >= 0 and sibs[i].type == "declaration":
            i -= 1
        if i < 0:
            return None
        w_stmt = sibs[i]
        combine = self._combine(src, w_stmt, slot)
        if combine is None or not self._same_reduction(src, w_stmt, f_stmt):
            return None
        # the arrays: used by S1 and R only, one dimension each
        decl_subs = []
        for a in arrays:
            decl = src.shared_names[a]
            uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == a and
                    not (decl.start_byte <= n.start_byte < decl.end_byte)]
            if not all(s1.start_byte <= u.start_byte < s1.end_byte or
                       sibs[k + 2].start_byte <= u.start_byte < last_read.end_byte for u in uses):
                return None
            dims = [d for d_, n_, d in src.shared_decls if n_ == a and same(d_, decl)]
            if len(dims) != 1 or len(dims[0]) != 1:
                return None
            dim = dims[0][0]
            dt = " ".join(text(dim).split())
            decl_subs.append(Edit(dim.start_byte, dim.end_byte, dt + " * 32" if re.fullmatch(r"[\w\s/*()]+", dt)
                              else f"({dt}) * 32"))
        ind = line_indent(src, s1.start_byte)
        park = "{ " + " ".join(f"{a}[threadIdx.x] = {v};" for a, v in parked) + " }"
        first = "\n".join(f"{ind}{v} = {a}[0];" for a, v in parked)
        body = "\n".join(f"{ind}    {c}" for c in combine)
        fold = f"{first}\n{ind}for (int ks_w = 1; ks_w < blockDim.x; ++ks_w) {{\n{body}\n{ind}}}"
        ws, we = src.line_span(pragma_before(src, w_stmt.start_byte) or w_stmt.start_byte, w_stmt.end_byte)
        rs = line_indent(src, sibs[k + 2].start_byte)
        subs = [Edit(ws, we, ""), Edit(s1.start_byte, s1.end_byte, park),
                Edit(sibs[k + 2].start_byte - len(rs.encode()), f_stmt.end_byte, fold)] + decl_subs
        subs.sort()
        for (a1, b1, _), (a2, b2, _) in zip(subs, subs[1:]):
            if a2 < b1:
                return None
        lo, hi = subs[0][0], max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))

    # ------------------------------------------------------------------ the reductions
    def _reduce_call(self, src: Source, stmt: Node) -> Optional[tuple[str, str, Node]]:
        """`X = f(...);` with f a device function of this file holding a warp exchange loop:
        (X, f, the function node)."""
        m = re.fullmatch(r"([\w.]+)\s*=\s*(\w+)\s*\((.*)\)\s*;", " ".join(text(stmt).split()))
        if m is None:
            return None
        for g in src.funcs:
            if g.name == m.group(2) and not g.is_kernel:
                node = src.func_node(g)
                if node is not None and self._exchange_loop(src, node) is not None:
                    return m.group(1), m.group(2), node
        return None

    def _exchange_loop(self, src: Source, fn: Node) -> Optional[Node]:
        """The one warp-exchange loop of a reduction function whose body is only that loop (and the
        exchange buffer's declarations) and `return PARAM;`."""
        body = fn.child_by_field_name("body")
        if body is None:
            return None
        loops, ret = [], None
        for c in body.named_children:
            if c.type == "comment":
                continue
            if c.type == "for_statement":
                loops.append(c)
            elif c.type == "return_statement":
                ret = c
            elif c.type == "declaration" and re.search(r"\bks_(xchg_\w+|tid)\b", text(c)):
                continue
            else:
                return None
        if len(loops) != 1 or ret is None or not self._is_exchange(loops[0]):
            return None
        return loops[0]

    @staticmethod
    def _is_exchange(loop: Node) -> bool:
        t = text(loop)
        return bool(re.search(r"\b__shfl\w*\s*\(|\bks_xchg_\w+\s*\[[^]]*\^", t))

    def _same_reduction(self, src: Source, w: Node, f: Node) -> bool:
        if w.type == "for_statement":
            return f.type == "for_statement" and norm(text(w)) == norm(text(f))
        a, b = self._reduce_call(src, w), self._reduce_call(src, f)
        return a is not None and b is not None and a[1] == b[1] and norm(a[0]) == norm(b[0])

    def _combine(self, src: Source, w: Node, slot: dict[str, str]) -> Optional[list[str]]:
        """W's combining step with the partners' values read from the slots, as statements."""
        rename: dict[str, str] = {}
        if w.type == "for_statement":
            loop = w if self._is_exchange(w) else None
        else:
            call = self._reduce_call(src, w)
            if call is None:
                return None
            target, fname, fnode = call
            m = re.fullmatch(r"[\w.]+\s*=\s*\w+\s*\(\s*([\w.]+)\s*\)\s*;", " ".join(text(w).split()))
            g = next(g for g in src.funcs if g.name == fname and not g.is_kernel)
            if m is None or norm(m.group(1)) != norm(target) or len(g.params) != 1 or not g.params[0].name:
                return None
            ret = [c for c in fnode.child_by_field_name("body").named_children if c.type == "return_statement"]
            if norm(text(ret[0])) != norm(f"return {g.params[0].name};"):
                return None
            rename = {g.params[0].name: target}
            loop = self._exchange_loop(src, fnode)
        if loop is None:
            return None
        init = loop.child_by_field_name("initializer")
        ivar = re.search(r"(\w+)\s*=", text(init)) if init is not None else None
        body = loop.child_by_field_name("body")
        if ivar is None or body is None:
            return None
        ivar_name = ivar.group(1)
        current: dict[str, str] = {}  # exchange buffer -> the value parked in it
        out = []
        for stmt in _stmts(body):
            t = " ".join(src.code[stmt.start_byte:stmt.end_byte].decode("utf-8", "replace").split())
            m = re.fullmatch(r"(ks_xchg_\w+)\s*\[\s*ks_tid\s*\]\s*=\s*(.+);", t)
            if m:
                current[m.group(1)] = norm(rename_identifiers(m.group(2), rename))
                continue
            if re.fullmatch(r"__syncwarp\s*\(.*\)\s*;", t):
                continue
            subs = []
            for n in walk(stmt):
                if n.type == "call_expression" and call_name(n) in _SHFL:
                    args = n.child_by_field_name("arguments").named_children
                    if len(args) < 3:
                        return None
                    v = norm(rename_identifiers(" ".join(text(args[1]).split()), rename))
                    if v not in slot:
                        return None
                    subs.append(Edit(n.start_byte, n.end_byte, f"{slot[v]}[ks_w]"))
                elif n.type == "subscript_expression" and re.fullmatch(r"ks_xchg_\w+", text(n.child_by_field_name("argument"))):
                    buf = text(n.child_by_field_name("argument"))
                    if current.get(buf) not in slot:
                        return None
                    subs.append(Edit(n.start_byte, n.end_byte, f"{slot[current[buf]]}[ks_w]"))
            # outermost substitutions only
            subs = [s for s in subs if not any(o[0] <= s[0] and s[1] <= o[1] and o != s for o in subs)]
            new = _splice_code(src, stmt.start_byte, stmt.end_byte, subs)
            new = " ".join(rename_identifiers(new, rename).split())
            if re.search(r"\b%s\b" % re.escape(ivar_name), new) or re.search(r"\b(ks_tid|ks_xchg_\w+|__shfl\w*)\b", new):
                return None
            if stmt.type not in ("declaration", "expression_statement"):
                return None
            out.append(new)
        return out or None


# --------------------------------------------------------------------------- forward
_IDEM = {"fmaxf", "fmax", "max", "fminf", "fmin", "min"}
_SHFL_TYPES = {"float", "double", "int", "unsigned", "unsigned int", "long long", "unsigned long long", "long",
               "unsigned long"}


def _fold_step(stmt: str, arrays: dict[str, str], w: str) -> Optional[tuple[str, str, str]]:
    """One statement of the serial fold: (value, 'sum' | 'idem', the step with `{P}` for the partner)."""
    for a, v in arrays.items():
        slot = norm(f"{a} [ {w} ]")
        t = norm(stmt)
        if t.count(norm(a)) != 1 or slot not in t:
            continue
        vv = re.escape(norm(v))
        if re.fullmatch(r"%s \+= %s ;" % (vv, re.escape(slot)), t):
            return v, "sum", f"{v} += {{P}};"
        m = re.fullmatch(r"%s = (.+) ;" % vv, t)
        if m is None:
            return None
        rhs = m.group(1)
        if rhs in (f"{norm(v)} + {slot}", f"{slot} + {norm(v)}"):
            return v, "sum", f"{v} = {v} + {{P}};"
        f = re.fullmatch(r"(?:std :: )?(\w+) \( (.+) \)", rhs)
        if f and f.group(1) in _IDEM:
            args = [norm(x) for x in split_top(f.group(2), ",")]
            if sorted(args) == sorted([norm(v), slot]):
                return v, "idem", f"{v} = {f.group(1)}({v}, {{P}});"
        return None
    return None


def _parks(src: Source, stmt: Node, names: set[str]) -> Optional[dict[str, str]]:
    """`A[tid] = v;` or `{ A1[tid] = v1; ... }` with A shared arrays: {array: value}."""
    inner = _stmts(stmt)
    out: dict[str, str] = {}
    for s in inner:
        m = re.fullmatch(r"(\w+)\s*\[\s*([\w.]+)\s*\]\s*=\s*(\w+)\s*;", " ".join(text(s).split()))
        if m is None or m.group(1) not in src.shared_names or not is_thread(m.group(2), names) or \
                m.group(1) in out or m.group(3) in out.values():
            return None
        out[m.group(1)] = m.group(3)
    return out or None


def warp_reduce_per_block(source: str, ctx: Context) -> list[Materialization]:
    """A serial fold of one slot per thread -> warp butterflies around one slot per warp (see the
    module docstring)."""
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        names = thread_names(src, k.node)
        if not names:
            continue
        launches = kernel_launches(src, k.node)
        blocks = {la.block for la in launches} if launches else set()
        whole = bool(blocks) and all(b % 32 == 0 and b >= 32 for b in blocks)
        found = []
        for blk in walk(k.body):
            if blk.type != "compound_statement":
                continue
            sibs = [c for c in blk.named_children if c.type != "comment"]
            for i, s1 in enumerate(sibs):
                if s1.type in ("expression_statement", "compound_statement") and \
                        (m := _site(src, k, sibs, i, names, blocks, whole)) is not None:
                    found.append(m)
        if len(found) > 1:  # every fold of the kernel at once first, then each alone
            out.append(candidate(src, [e for _, es, _ in found for e in es], "warp_reduce_per_block",
                                 f"{k.name}: {len(found)} serial folds over one slot per thread become warp "
                                 f"butterflies around one slot per warp", guards=[g for _, _, gs in found for g in gs]))
        out += [m for m, _, _ in found]
    return out


def _site(src: Source, k, sibs: list[Node], i: int, names: set[str], blocks: set[int], whole: bool):
    parks = _parks(src, sibs[i], names)
    if parks is None or i + 3 >= len(sibs) or \
            not re.fullmatch(r"__syncthreads\s*\(\s*\)\s*;", " ".join(text(sibs[i + 1]).split())):
        return None
    # the first slot read into each value, then the fold over the rest
    firsts = set()
    j = i + 2
    while j < len(sibs) and len(firsts) < len(parks):
        m = re.fullmatch(r"(\w+)\s*=\s*(\w+)\s*\[\s*0\s*\]\s*;", " ".join(text(sibs[j]).split()))
        if m is None or parks.get(m.group(2)) != m.group(1) or m.group(2) in firsts:
            return None
        firsts.add(m.group(2))
        j += 1
    loop = sibs[j] if j < len(sibs) else None
    if len(firsts) != len(parks) or loop is None or loop.type != "for_statement":
        return None
    init, cond = loop.child_by_field_name("initializer"), loop.child_by_field_name("condition")
    upd, body = loop.child_by_field_name("update"), loop.child_by_field_name("body")
    mi = re.fullmatch(r"(?:unsigned\s+)?int\s+(\w+)\s*=\s*1\s*;?", " ".join(text(init).split())) if init else None
    if mi is None or cond is None or upd is None or body is None:
        return None
    w = mi.group(1)
    mc = re.fullmatch(r"%s\s*<\s*(.+)" % w, " ".join(text(cond).split()))
    if mc is None or norm(text(upd)) not in (f"++ {w}", f"{w} ++", f"{w} += 1"):
        return None
    bound = strip_parens(mc.group(1))
    if norm(bound) != norm("blockDim.x"):
        from mining.operators.nodes import int_value
        b = int_value(src, bound)
        if b is None or blocks != {b}:
            return None
    steps = {}
    for st in _stmts(body):
        r = _fold_step(ctext_of(src, st), parks, w)
        if r is None or r[0] in steps:
            return None
        steps[r[0]] = r
    if set(steps) != set(parks.values()):
        return None
    # the arrays: nothing else reads or writes them
    fn = k.node
    for a in parks:
        decl = src.shared_names[a]
        uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == a and
                not (decl.start_byte <= n.start_byte < decl.end_byte)]
        if len(uses) != 3 or any(not (sibs[i].start_byte <= u.start_byte < loop.end_byte) for u in uses):
            return None
    # every lane reaches the shuffles: no return before, no condition around
    if re.search(rb"\breturn\b", src.code[fn.start_byte:sibs[i].start_byte]):
        return None
    p = sibs[i].parent
    while p is not None and not same(p, k.body):
        if p.type in ("if_statement", "while_statement", "do_statement", "switch_statement", "case_statement",
                      "conditional_expression", "else_clause"):
            return None
        p = p.parent
    idx = FunctionIndex(src, fn)
    for v in parks.values():
        var = idx.visible(v, sibs[i].start_byte)
        tnode = var.decl.child_by_field_name("type") if var is not None else None
        if var is None or var.shape != "scalar" or tnode is None or \
                " ".join(text(tnode).split()) not in _SHFL_TYPES:
            return None
    tag = next(iter(parks))  # names of their own per site: several folds may share a scope
    off, lane, warp = fresh(src, fn, "ks_off"), fresh(src, fn, f"ks_lane_{tag}"), fresh(src, fn, f"ks_warp_{tag}")
    shfl = {v: f"__shfl_xor_sync(0xffffffffu, {v}, {off})" for v in parks.values()}
    butterfly = [f"for (int {off} = 16; {off} > 0; {off} >>= 1) {{"] + \
        [f"    {steps[v][2].replace('{P}', shfl[v])}" for v in parks.values()] + ["}"]
    reads = []
    for a, v in parks.items():
        other = "0" if steps[v][1] == "sum" else f"{a}[0]"
        reads.append(f"{v} = {lane} < (blockDim.x >> 5) ? {a}[{lane}] : {other};")
    new = butterfly + [f"const int {lane} = threadIdx.x & 31, {warp} = threadIdx.x >> 5;",
                       f"if ({lane} == 0) {{ " + " ".join(f"{a}[{warp}] = {v};" for a, v in parks.items()) + " }",
                       "__syncthreads();"] + reads + butterfly
    ind = line_indent(src, sibs[i].start_byte)
    a0 = src.raw.rfind(b"\n", 0, sibs[i].start_byte) + 1
    if src.code[a0:sibs[i].start_byte].strip():
        return None
    edits, guards = [], []
    if whole:
        text_new = "\n".join(ind + ln for ln in new)
        for a in parks:  # the backward half's widening undone
            dims = [d for d_, n_, d in src.shared_decls if n_ == a and same(d_, src.shared_names[a])]
            if len(dims) == 1 and len(dims[0]) == 1:
                dm = re.fullmatch(r"(.+?)\s*\*\s*32", " ".join(text(dims[0][0]).split()))
                if dm:
                    edits.append(Edit(dims[0][0].start_byte, dims[0][0].end_byte, strip_parens(dm.group(1))))
    else:
        old = src.raw[a0:loop.end_byte].decode("utf-8", "replace")
        old = "\n".join(("    " + ln if ln.strip() else ln) for ln in old.split("\n"))
        text_new = (f"{ind}if ((blockDim.x & 31) == 0) {{  // whole warps: the butterflies' full mask holds\n" +
                    "\n".join(ind + "    " + ln for ln in new) + f"\n{ind}}} else {{\n{old}\n{ind}}}")
        guards.append(f"{k.name}: the block is whole warps (blockDim.x % 32 == 0), else the serial fold runs")
    edits.append(Edit(a0, loop.end_byte, text_new))
    what = ", ".join(f"{v} ({steps[v][1]})" for v in parks.values())
    return candidate(src, edits, "warp_reduce_per_block",
                     f"{k.name}: the serial fold of {what} over one slot per thread becomes warp butterflies "
                     f"around one slot per warp", guards=guards, excerpt=" ".join(text(sibs[i]).split())), edits, guards


def ctext_of(src: Source, node: Node) -> str:
    return " ".join(src.code[node.start_byte:node.end_byte].decode("utf-8", "replace").split())


PAIR = Pair(BlockReduceToSerial, (Rewrite("warp_reduce_per_block", "block_reduce_shared", warp_reduce_per_block,
                                          prior=2.0),))
