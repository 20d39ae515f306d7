"""privatized_to_global_atomics: a per-block shared histogram (cleared, incremented with shared
atomics, then added to the global histogram bin by bin) is replaced by atomics on the global
histogram itself.

    extern __shared__ int hist[];
    for (int b = threadIdx.x; b < bins; b += blockDim.x) hist[b] = 0;      // deleted
    ... count(hist, v, bins) ...  /  atomicAdd(hist + v, 1)                 // hist -> counts
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {                  // deleted
        const int v = hist[b];
        if (v) atomicAdd(counts + b, v);
    }

Why it is sound: the private copy starts at zero and only ever receives `atomicAdd`s, and the merge
adds private bin b to global bin b for every bin the clear covered (same loop bounds); so each
global bin ends with the same sum of increments whether they go through the private copy or
straight to it (integer addition is associative and commutative). Sites need exactly that shape:
one clear loop and one merge loop over the same range, and every other use of the private array
is the target of an `atomicAdd` - directly (`hist + e`, `&hist[e]`) or through a parameter of a
device function of this file that is only used as an `atomicAdd` target. Removes the
privatized_atomics carrier and the per-block merge (atomic_per_block) with it.

Forward, `privatize_atomics`: global atomics into a bounded table (`if (b < bins)
atomicAdd(&counts[b], v)`) -> a per-block copy of the table in shared memory, cleared at block
start and merged with one global atomic per non-zero entry at block end; the backward argument
read the other way (same sums, integer addition associative and commutative). Precondition: the
table fits the shared copy (bins <= PRIV_CAP), checked at run time (larger tables keep the global
atomics). A one-element-per-thread kernel is first turned into a grid-stride loop over a clamped
grid in the same step (privatizing a 256-element block gains nothing).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name, contains, same
from corpora.code.source import Source
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, apply_edits, candidate
from mining.operators.grid_clamp import clamp_edits
from mining.operators.grid_stride import grid_stride_edits, grid_stride_x_loops, one_element
from mining.operators.nodes import (FunctionIndex, code, has, idents, indent_at, kernels, line_start, raw, split_top,
                                    statements, strip_parens, sub_base, sub_index)
from mining.operators.rewrite_util import params_of, pragma_before, splice_range, structural
from corpora.code.parse import text, walk


def _atomic_target(arg: Node) -> Optional[str]:
    """`H + e` / `&H[e]` / `H` -> H."""
    t = " ".join(text(arg).split())
    m = re.fullmatch(r"\(?\s*([A-Za-z_]\w*)\s*(\+\s*.+)?\)?", t) or re.fullmatch(r"&\s*([A-Za-z_]\w*)\s*\[.+\]", t)
    return m.group(1) if m else None


def _atomic_only_params(src: Source) -> dict[str, set[int]]:
    """Device function name -> positions of pointer parameters used only as atomicAdd targets."""
    out: dict[str, set[int]] = {}
    for f in src.funcs:
        if f.is_kernel:
            continue
        fn = src.func_node(f)
        if fn is None:
            continue
        for i, p in enumerate(params_of(fn)):
            d = p.child_by_field_name("declarator")
            name = None
            while d is not None:
                if d.type == "identifier":
                    name = text(d)
                    break
                d = d.child_by_field_name("declarator")
            if not name or not f.params or i >= len(f.params) or not f.params[i].is_pointer:
                continue
            uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == name and
                    not contains(p, n)]
            ok = bool(uses)
            for u in uses:
                call = _enclosing_atomic(u)
                if call is None:
                    ok = False
                    break
            if ok:
                out.setdefault(f.name, set()).add(i)
    return out


def _enclosing_atomic(ident: Node) -> Optional[Node]:
    """The atomicAdd call whose first argument is `ident` (+ offset, or &ident[...])."""
    n = ident
    while n.parent is not None and n.parent.type in ("binary_expression", "subscript_expression",
                                                     "pointer_expression", "parenthesized_expression"):
        n = n.parent
    args = n.parent
    if args is None or args.type != "argument_list" or args.parent is None:
        return None
    call = args.parent
    if call_name(call) != "atomicAdd" or not args.named_children or not same(args.named_children[0], n):
        return None
    if _atomic_target(n) != text(ident):
        return None
    return call


def _merge_target(body: str, name: str) -> Optional[str]:
    """G for a merge body `{ const int v = H[b]; if (v) atomicAdd(G + b, v); }` or
    `atomicAdd(&G[b], H[b]);`, else None."""
    n = re.escape(name)
    tgt = r"(?:(?P<g1>\w+)\s*\+\s*(?P=b)|&\s*(?P<g2>\w+)\s*\[\s*(?P=b)\s*\])"
    m = re.fullmatch(r"\{?\s*(?:const\s+)?\w+\s+(?P<v>\w+)\s*=\s*%s\s*\[\s*(?P<b>\w+)\s*\]\s*;\s*"
                     r"(?:if\s*\(\s*(?P=v)\s*(?:!=\s*0\s*)?\)\s*)?atomicAdd\s*\(\s*%s\s*,\s*(?P=v)\s*\)\s*;\s*\}?"
                     % (n, tgt), body)
    if m is None:
        m = re.fullmatch(r"\{?\s*atomicAdd\s*\(\s*(?:(?P<g1>\w+)\s*\+\s*(?P<b>\w+)|&\s*(?P<g2>\w+)\s*\[\s*(?P<b2>\w+)\s*\])"
                         r"\s*,\s*%s\s*\[\s*(?P<i>\w+)\s*\]\s*\)\s*;\s*\}?" % n, body)
        if m is None or m.group("i") not in (m.group("b"), m.group("b2")):
            return None
    return m.group("g1") or m.group("g2")


def _single_statement(body: Node) -> Optional[Node]:
    if body is None:
        return None
    if body.type == "compound_statement":
        kids = body.named_children
        return kids[0] if len(kids) == 1 else None
    return body


class PrivatizedToGlobalAtomics(Operator):
    name = "privatized_to_global_atomics"
    carrier = "privatized_atomics"
    description = "send a block-private shared histogram's atomics straight to the global histogram"

    def edits(self, src: Source):
        st = structural(src)
        atomic_params = _atomic_only_params(st)
        for decl, name, dims in st.shared_decls:
            f = st.function_at(decl.start_byte)
            fn = st.func_node(f) if f is not None else None
            if fn is None or len(dims) > 1:
                continue
            e = self.rewrite(st, fn, decl, name, atomic_params)
            if e is not None:
                yield e

    def rewrite(self, src: Source, fn: Node, decl: Node, name: str, atomic_params) -> Optional[Edit]:
        idx = FunctionIndex(src, fn)
        var = next((v for v in idx.vars if v.name == name and same(v.decl, decl)), None)
        if var is None:
            return None
        uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == name and not contains(decl, n)
                and idx.visible(name, n.start_byte) is var]
        clear = merge = None
        target = None
        redirect = []
        for u in uses:
            loop = u.parent
            while loop is not None and loop.type != "for_statement":
                loop = loop.parent
            stmt = _single_statement(loop.child_by_field_name("body")) if loop is not None else None
            # the clear: for (...) H[b] = 0;
            if stmt is not None and re.fullmatch(r"\s*%s\s*\[\s*(\w+)\s*\]\s*=\s*0\s*;\s*" % re.escape(name),
                                                 text(stmt)):
                if clear is not None and not same(clear, loop):
                    return None
                clear = loop
                continue
            # the merge: for (...) { const int v = H[b]; if (v) atomicAdd(G + b, v); } / atomicAdd(G + b, H[b])
            if loop is not None:
                body = " ".join(src.code[loop.child_by_field_name("body").start_byte:
                                         loop.child_by_field_name("body").end_byte].decode().split())
                g = _merge_target(body, name)
                if g is not None:
                    if merge is not None and not same(merge, loop):
                        return None
                    merge, target = loop, g
                    continue
            # an atomic target, directly or through a device function's atomic-only parameter
            if _enclosing_atomic(u) is not None:
                redirect.append(u)
                continue
            args = u.parent
            if args is not None and args.type == "argument_list" and args.parent is not None and \
                    args.parent.type == "call_expression":
                pos = [i for i, a in enumerate(args.named_children) if same(a, u)]
                if pos and pos[0] in atomic_params.get(call_name(args.parent), set()):
                    redirect.append(u)
                    continue
            return None
        if clear is None or merge is None or not redirect or not target:
            return None
        # same bounds, clear first, merge last
        def header(loop):
            init = loop.child_by_field_name("initializer")
            var_ = re.search(r"(\w+)\s*=", text(init))
            h = " ".join(text(init).split()) + " " + " ".join(text(loop.child_by_field_name("condition")).split()) + \
                " " + " ".join(text(loop.child_by_field_name("update")).split())
            return re.sub(r"\b%s\b" % var_.group(1), "ks_b", h) if var_ else None
        if header(clear) is None or header(clear) != header(merge):
            return None
        if not all(clear.end_byte <= u.start_byte and u.end_byte <= merge.start_byte for u in redirect):
            return None
        gv = idx.visible(target, merge.start_byte)
        if gv is None or gv.shape != "pointer" or gv.assigned or any(idx.visible(target, u.start_byte) is not gv
                                                                     for u in redirect):
            return None
        subs = [Edit(u.start_byte, u.end_byte, target) for u in redirect]
        for loop in (clear, merge):
            s, e = loop.start_byte, loop.end_byte
            pr = pragma_before(src, s)
            s = pr if pr is not None else s
            subs.append(Edit(*src.line_span(s, e), ""))
        ds, de = src.line_span(decl.start_byte, decl.end_byte)
        subs.append(Edit(ds, de, ""))
        subs.sort()
        for (s1, e1, _), (s2, e2, _) in zip(subs, subs[1:]):
            if s2 < e1:
                return None
        lo, hi = subs[0][0], max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))


# --------------------------------------------------------------------------- forward half
PRIV_CAP = 4096  # shared-memory histogram copy: bins held per block (16 KB of int)


def _conjuncts_around(src: Source, node: Node) -> list[str]:
    out = []
    p = node.parent
    while p is not None and p.type != "function_definition":
        if p.type == "if_statement":
            out += [strip_parens(c) for c in split_top(strip_parens(code(src, p.child_by_field_name("condition"))), "&&")]
        elif p.type == "conditional_expression":
            out += [strip_parens(c) for c in split_top(strip_parens(code(src, p.child_by_field_name("condition"))), "&&")]
        p = p.parent
    return out


def privatize_atomics(source: str, ctx: Context) -> list[Materialization]:
    """Global atomics into a bounded table (`if (b < bins) atomicAdd(&counts[b], v)`) -> a
    per-block copy of the table in shared memory, cleared at block start and merged with one
    global atomic per non-zero entry at block end. Precondition: the table fits the shared copy
    (bins <= PRIV_CAP): checked at run time, larger tables keep the global atomics. A kernel with
    one element per thread is first turned into a grid-stride loop over a clamped grid (same
    step: privatizing a 256-element block gains nothing)."""
    src = Source(source)
    out = []
    for k in kernels(src):
        if has(src, k.body, r"__shared__|__syncthreads|\bks_priv\b"):
            continue
        if not grid_stride_x_loops(src, k) and not any(re.search(r"\b%s\b" % re.escape(lp.name), "") for lp in []):
            oe = one_element(src, k)
            clamp = clamp_edits(src, k.name) if oe is not None else None
            if oe is None or clamp is None:
                continue
            if not has(src, k.body, r"\batomicAdd\s*\("):
                continue
            staged = apply_edits(src.raw, grid_stride_edits(src, oe) + clamp)
            for m in privatize_atomics(staged, ctx):
                if m.description.startswith(k.name + ":"):
                    m.description += " (after turning it into a grid-stride loop over a clamped grid)"
                    out.append(m)
            continue
        if re.search(r"\breturn\b", code(src, k.body)):
            continue
        params = {p.name: p for p in k.sig.params}
        calls = []
        table, bound, elem = None, None, None
        for call in src.nodes("call_expression", within=k.body):
            if call_name(call) != "atomicAdd":
                continue
            args = call.child_by_field_name("arguments")
            a = args.named_children if args is not None else []
            if len(a) != 2 or a[0].type != "pointer_expression" or a[0].named_children[0].type != "subscript_expression":
                continue
            sub = a[0].named_children[0]
            base, idx = sub_base(sub), " ".join(sub_index(sub).split())
            p = params.get(base)
            if p is None or p.pointer_depth != 1 or p.const or p.base_type not in ("int", "unsigned int", "unsigned",
                                                                                 "float", "unsigned long long"):
                continue
            b = None
            for c in _conjuncts_around(src, call):
                m = re.fullmatch(r"(.+?)\s*<\s*(.+)", c)
                if m and " ".join(m.group(1).split()) == idx:
                    b = m.group(2).strip()
            if b is None or not idents(b) <= (set(params) | set(src.defines)):
                continue
            if table not in (None, base) or bound not in (None, b):
                continue
            table, bound, elem = base, b, p.base_type
            calls.append((call, sub, a[1]))
        if not calls:
            continue
        ind = indent_at(src, statements(k.body)[0].start_byte) if statements(k.body) else "    "
        head = (f"\n{ind}// ks-optimize: a per-block copy of {table} in shared memory when it fits "
                f"({bound} <= {PRIV_CAP}), merged with one atomic per non-zero entry\n"
                f"{ind}__shared__ {elem} ks_priv[{PRIV_CAP}];\n"
                f"{ind}const bool ks_priv_on = ({bound}) <= {PRIV_CAP};\n"
                f"{ind}if (ks_priv_on)\n"
                f"{ind}    for (int ks_b = threadIdx.x; ks_b < ({bound}); ks_b += blockDim.x) ks_priv[ks_b] = 0;\n"
                f"{ind}__syncthreads();")
        tail = (f"{ind}__syncthreads();\n"
                f"{ind}if (ks_priv_on)\n"
                f"{ind}    for (int ks_b = threadIdx.x; ks_b < ({bound}); ks_b += blockDim.x) {{\n"
                f"{ind}        const {elem} ks_c = ks_priv[ks_b];\n"
                f"{ind}        if (ks_c) atomicAdd(&{table}[ks_b], ks_c);\n"
                f"{ind}    }}\n")
        edits = [Edit(k.body.start_byte + 1, k.body.start_byte + 1, head)]
        for call, sub, val in calls:
            idx = sub_index(sub)
            v = raw(src, val)
            edits.append(Edit(call.start_byte, call.end_byte,
                                  f"(ks_priv_on ? atomicAdd(&ks_priv[{idx}], {v}) : atomicAdd(&{table}[{idx}], {v}))"))
        close = k.body.end_byte - 1
        edits.append(Edit(line_start(src, close), line_start(src, close), tail))
        out.append(candidate(src, edits, "privatize_atomics",
                        f"{k.name}: atomics into {table} privatized per block in shared memory",
                        guards=[f"{bound} <= {PRIV_CAP} (runtime check; global atomics otherwise)"],
                        excerpt=code(src, calls[0][0])))
    return out


PAIR = Pair(PrivatizedToGlobalAtomics, (Rewrite("privatize_atomics", "privatized_atomics", privatize_atomics,
                                                       prior=8.0),))
