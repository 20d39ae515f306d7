"""privatized_to_global_atomics: a private copy of a count table in shared memory (cleared,
incremented with shared atomics, then merged into a global table bin by bin) is replaced by
atomics on the global table itself.

    extern __shared__ int hist[];
    for (int b = threadIdx.x; b < bins; b += blockDim.x) hist[b] = 0;      // deleted
    ... count(hist, v, bins) ...  /  atomicAdd(hist + v, 1)                 // hist -> counts
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {                  // deleted
        const int v = hist[b];
        if (v) atomicAdd(counts + b, v);
    }

Found by meaning, whatever the spelling (issue 19):
* the copy is static or `extern` shared memory, reached directly (`H + e`, `&H[e]`), through a
  local pointer bound once to it (`T *mine = H + warp * B;`, `&H[warp * B]`), or through device
  functions that only pass the pointer on to an `atomicAdd` (helpers of helpers, to a fixpoint);
* several copies (one per warp) are read by the merge as `s += H[b + i * B]` over the copies i
  (a mask with all 32 bits set, `& 0xFFFFFFFFU` through a macro, changes nothing), each alias
  then pointing at a whole copy (`W * B`); or the copies are the rows of a 2-D array, read as
  `s += H[i][b]` and updated through a row (`&H[w][e]`, `f(H[w])`, `T *p = H[w];`); one copy is
  read as `H[b]`; the clear may be nested loops (`for (w ..) for (b ..) H[w][b] = 0;`);
* the merge publishes `atomicAdd(&G[X], v)` / `atomicAdd(G + X, v)` (optionally `if (v)`) or
  stores `G[X] = v`, where X is b or `E + b` (E free of b: the block's row of a table of
  per-block partial histograms, `blockIdx.x * B + b`).
The rewrite points the copy (or its alias) at `G + E`; a storing merge turns the clear into a
clear of the global entries the merge wrote (`for (<merge header>) G[X] = 0;`); the merge and the
shared declaration go, and launches stop passing the dynamic shared bytes of an `extern` copy.

Why it is sound: the private copies start at zero and only ever receive `atomicAdd`s, and the
merge adds (or stores) the sum over the copies of bin b into G[E + b]; an update of bin e of any
copy lands in G[E + e] directly, so each global entry ends with the same sum of increments
(integer addition is associative and commutative; an all-ones mask keeps every bit of a 32-bit
count). A storing merge overwrote G[E + b]: the global entry is cleared by the thread that stored
it, a barrier before the first update (required between the clear and the updates), and E must
hold the block index (each block its own row; blocks storing over each other are no sum). Sites
need: one clear loop (`H[...] = 0`), one merge loop, every other use of the copy or an alias an
atomic target, the updates between the two, the alias pointers never rebound, G a pointer that is
not rebound, and several copies told apart only through aliases. An update outside the merged
bins was an out-of-bounds access of the original (or of another warp's copy); the gate judges it.

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
from dataclasses import dataclass
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name, contains, same
from corpora.code.source import Source
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, apply_edits, candidate
from mining.operators.grid_clamp import clamp_edits
from mining.operators.grid_stride import grid_stride_edits, grid_stride_x_loops, one_element
from mining.operators.nodes import (FunctionIndex, code, has, idents, indent_at, kernel_launches, kernels, line_start,
                                    raw, split_top, statements, strip_parens, sub_base, sub_index)
from mining.operators.reduction_tree import SYNC_RE
from mining.operators.rewrite_util import params_of, splice_range, structural
from corpora.code.parse import text, walk


def _atomic_target(arg: Node) -> Optional[str]:
    """`H + e` / `&H[e]` / `H` -> H."""
    t = " ".join(text(arg).split())
    m = re.fullmatch(r"\(?\s*([A-Za-z_]\w*)\s*(\+\s*.+)?\)?", t) or re.fullmatch(r"&\s*([A-Za-z_]\w*)\s*\[.+\]", t)
    return m.group(1) if m else None


def _param_name(p: Node) -> Optional[str]:
    d = p.child_by_field_name("declarator")
    while d is not None:
        if d.type == "identifier":
            return text(d)
        d = d.child_by_field_name("declarator")
    return None


def _atomic_arg(ident: Node, atomic_params: dict[str, set[int]]) -> bool:
    """`ident` is passed, as is, at an atomic-only position of a device function of the file."""
    args = ident.parent
    if args is None or args.type != "argument_list" or args.parent is None or args.parent.type != "call_expression":
        return False
    pos = [i for i, a in enumerate(args.named_children) if same(a, ident)]
    return bool(pos) and pos[0] in atomic_params.get(call_name(args.parent), set())


def _atomic_only_params(src: Source) -> dict[str, set[int]]:
    """Device function name -> positions of pointer parameters used only as atomicAdd targets,
    directly or by passing them on to such a parameter of another device function (to a fixpoint:
    `addWord(h, w)` that calls `addByte(h, b)` that does `atomicAdd(h + b, 1)`)."""
    cands = []
    for f in src.funcs:
        if f.is_kernel:
            continue
        fn = src.func_node(f)
        if fn is None:
            continue
        for i, p in enumerate(params_of(fn)):
            name = _param_name(p)
            if not name or not f.params or i >= len(f.params) or not f.params[i].is_pointer:
                continue
            uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == name and not contains(p, n)]
            if uses:
                cands.append((f.name, i, uses))
    out: dict[str, set[int]] = {}
    changed = True
    while changed:
        changed = False
        for fname, i, uses in cands:
            if i in out.get(fname, set()):
                continue
            if all(_enclosing_atomic(u) is not None or _atomic_arg(u, out) for u in uses):
                out.setdefault(fname, set()).add(i)
                changed = True
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


def _single_statement(body: Node) -> Optional[Node]:
    if body is None:
        return None
    if body.type == "compound_statement":
        kids = [k for k in body.named_children if k.type != "comment"]
        return kids[0] if len(kids) == 1 else None
    return body


@dataclass
class _Merge:
    """The merge loop `for (b ...) PUBLISH(G[X], sum of the private copies at bin b)`."""
    bin: str
    target: str  # G
    index: str  # X, the global index of bin b
    base: str  # X with b taken out ("" when X is b): private bin e goes to G[base + e]
    store: bool  # G[X] = sum (the global entry is overwritten) rather than atomicAdd(&G[X], sum)
    copy_stride: str  # "" for one private copy, else S in H[b + i * S] (copies i = 0, 1, ...)


_TYPE = r"(?:const\s+)?(?:(?:unsigned|signed|long|short)\s+)*\w+"
_ALL_ONES = r"\(?\s*(?:0[xX][fF]{8}|4294967295|~\s*0)[uUlL]*\s*\)?"


def _publish(body: str, value: str) -> Optional[tuple[str, str, bool]]:
    """(G, X, store) for `atomicAdd(&G[X], v);` / `atomicAdd(G + X, v);` / `G[X] = v;` (an optional
    `if (v)` / `if (v != 0)` in front), v matching the regex `value`."""
    guard = r"(?:if\s*\(\s*(?:%s)\s*(?:!=\s*0\s*)?\)\s*)?" % value
    for pat, store in ((r"atomicAdd\s*\(\s*&\s*(?P<g>\w+)\s*\[\s*(?P<x>.+?)\s*\]\s*,\s*(?:%s)\s*\)\s*;", False),
                       (r"atomicAdd\s*\(\s*(?P<g>\w+)\s*\+\s*(?P<x>.+?)\s*,\s*(?:%s)\s*\)\s*;", False),
                       (r"(?P<g>\w+)\s*\[\s*(?P<x>.+?)\s*\]\s*=\s*(?:%s)\s*;", True)):
        m = re.fullmatch(guard + pat % value, body)
        if m is not None:
            return m.group("g"), strip_parens(m.group("x")), store
    return None


def _base_of(index: str, b: str) -> Optional[str]:
    """X = b, `E + b` or `b + E` (E free of b) -> E ("" for b), else None."""
    terms = [strip_parens(t) for t in split_top(strip_parens(index), "+")]
    hits = [t for t in terms if t == b]
    rest = [t for t in terms if t != b]
    if len(hits) != 1 or any(re.search(r"\b%s\b" % re.escape(b), t) or t.lstrip().startswith("-") for t in rest):
        return None
    return " + ".join(rest)


def _merge(src: Source, loop: Node, name: str, elem32: bool, rows2d: bool = False) -> Optional[_Merge]:
    """Read a merge loop over the bins of private array `name` (see _Merge), else None."""
    init, body = loop.child_by_field_name("initializer"), loop.child_by_field_name("body")
    if init is None or body is None:
        return None
    mb = re.fullmatch(r"(?:%s\s+)?(\w+)\s*=.+?;?" % _TYPE, code(src, init))
    if mb is None:
        return None
    b, h = re.escape(mb.group(1)), re.escape(name)
    t = code(src, body)
    t = t[1:-1].strip() if t.startswith("{") and t.endswith("}") else t
    one = r"%s\s*\[\s*%s\s*\]" % (h, b)
    pub, stride = None, ""
    m = re.fullmatch(r"%s\s+(\w+)\s*=\s*%s\s*;\s*(.+)" % (_TYPE, one), t)
    if m is not None:  # const int v = H[b]; [if (v)] PUBLISH(v);
        pub = _publish(m.group(2), re.escape(m.group(1)))
    else:  # PUBLISH(H[b]);
        pub = _publish(t, one)
    if pub is None:  # T s = 0; for (i = 0; i < C; i++) s += H[b + i * S] [& ALL_ONES]; PUBLISH(s);
        m = re.fullmatch(r"%s\s+(?P<s>\w+)\s*=\s*0[uUlL]*\s*;\s*for\s*\(\s*(?:%s\s+)?(?P<i>\w+)\s*=\s*0\s*;\s*(?P=i)\s*<\s*"
                         r"[^;]+;\s*(?:(?P=i)\s*\+\+|\+\+\s*(?P=i)|(?P=i)\s*\+=\s*1)\s*\)\s*\{?\s*(?P=s)\s*\+=\s*"
                         r"(?P<read>[^;]+);\s*\}?\s*(?P<pub>.+)" % (_TYPE, _TYPE), t)
        if m is None:
            return None
        i = re.escape(m.group("i"))
        read = strip_parens(m.group("read"))
        mm = re.fullmatch(r"(.+?)\s*&\s*(\w+)", read)
        if mm is not None:  # a mask that keeps every bit of a 32-bit count changes nothing
            mask = strip_parens(src.expand(mm.group(2)))
            if not elem32 or not re.fullmatch(_ALL_ONES, mask):
                return None
            read = strip_parens(mm.group(1))
        if rows2d:  # copies as the rows of a 2-D array: H[i][b]
            if not re.fullmatch(r"%s\s*\[\s*%s\s*\]\s*\[\s*%s\s*\]" % (h, i, b), read):
                return None
            pub = _publish(m.group("pub"), re.escape(m.group("s")))
            if pub is None:
                return None
            g, x, store = pub
            base = _base_of(x, mb.group(1))
            return _Merge(mb.group(1), g, x, base, store, "[row]") if base is not None else None
        mr = re.fullmatch(r"%s\s*\[\s*(.+?)\s*\]" % h, read)
        if mr is None:
            return None
        terms = [strip_parens(x) for x in split_top(strip_parens(mr.group(1)), "+")]
        if len(terms) != 2 or mb.group(1) not in terms:
            return None
        other = terms[1 - terms.index(mb.group(1))]
        ms = re.fullmatch(r"%s\s*\*\s*(.+)|(.+?)\s*\*\s*%s" % (i, i), other)
        if ms is None:
            return None
        stride = strip_parens(ms.group(1) or ms.group(2))
        if re.search(r"\b%s\b" % i, stride):
            return None
        pub = _publish(m.group("pub"), re.escape(m.group("s")))
    if pub is None:
        return None
    g, x, store = pub
    base = _base_of(x, mb.group(1))
    if base is None:
        return None
    return _Merge(mb.group(1), g, x, base, store, stride)


def _alias(src: Source, idx: FunctionIndex, ident: Node):
    """(Var, value node, offset text) when `ident` is the whole initializer of a local pointer:
    `T *P = H;`, `T *P = H + off;` (either order) or `T *P = &H[off];`, else None."""
    n = ident
    while n.parent is not None and n.parent.type in ("binary_expression", "subscript_expression",
                                                     "pointer_expression", "parenthesized_expression"):
        n = n.parent
    d = n.parent
    if d is None or d.type != "init_declarator" or not same(d.child_by_field_name("value"), n):
        return None
    if d.child_by_field_name("declarator") is None or d.child_by_field_name("declarator").type != "pointer_declarator":
        return None
    v = next((v for v in idx.vars if same(v.declarator, d)), None)
    if v is None:
        return None
    h = re.escape(text(ident))
    t = strip_parens(code(src, n))
    if re.fullmatch(h, t):
        return v, n, ""
    m2 = re.fullmatch(r"%s\s*\[\s*([^\[\]]+)\s*\]|&\s*%s\s*\[\s*([^\[\]]+)\s*\]\s*\[\s*0\s*\]" % (h, h), t)
    if m2 is not None:  # a row of a 2-D array: one whole copy
        return v, n, "[row]"
    m = re.fullmatch(r"%s\s*\+\s*(.+)|(.+?)\s*\+\s*%s|&\s*%s\s*\[\s*(.+)\s*\]" % (h, h, h), t)
    if m is None:
        return None
    return v, n, strip_parens(m.group(1) or m.group(2) or m.group(3))


def _rebound(v) -> bool:
    """The pointer variable itself is assigned or stepped (element writes through it are not)."""
    for a in v.assigned:
        t = a.child_by_field_name("left") if a.type == "assignment_expression" else a.child_by_field_name("argument")
        while t is not None and t.type == "parenthesized_expression":
            t = t.named_children[0]
        if t is not None and t.type == "identifier":
            return True
    return False


def _copy_offset(offset: str, stride: str) -> bool:
    """`W * S` / `S * W` (a whole copy of S bins), or no offset at all."""
    if not offset:
        return True
    terms = [strip_parens(x) for x in re.split(r"\s*\*\s*", offset)]
    return len(terms) == 2 and " ".join(stride.split()) in (" ".join(terms[0].split()), " ".join(terms[1].split()))


def _span_with_pragma(src: Source, node: Node) -> tuple[int, int]:
    """The node's whole lines and a `#pragma unroll` above it (blank lines between allowed)."""
    s, e = src.line_span(node.start_byte, node.end_byte)
    a = s
    while a > 0:
        b = src.code.rfind(b"\n", 0, a - 1) + 1
        line = src.code[b:a]
        if not line.strip():
            a = b
            continue
        if re.match(rb"[ \t]*#[ \t]*pragma[ \t]+unroll\b", line):
            return b, e
        break
    return s, e


def _dynamic_smem_edits(src: Source, fn: Node, decl: Node) -> list[Edit]:
    """With the kernel's only `extern __shared__` array gone, its launches stop asking for dynamic
    shared memory (the size argument dropped, or 0 where a stream follows)."""
    if "extern" not in code(src, decl):
        return []
    f = src.function_at(fn.start_byte)
    if f is None or sum(1 for d, _, _ in src.shared_decls if contains(fn, d) and "extern" in code(src, d)) != 1:
        return []
    out = []
    for la in kernel_launches(src, f.name):
        ks = next((c for c in la.call.children if c.type == "kernel_call_syntax"), None)
        args = ks.named_children if ks is not None else []
        if len(args) == 3:
            out.append(Edit(args[1].end_byte, args[2].end_byte, ""))
        elif len(args) == 4:
            out.append(Edit(args[2].start_byte, args[2].end_byte, "0"))
    return out


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
            if fn is None or len(dims) > 2:
                continue
            e = self.rewrite(st, fn, decl, name, atomic_params, len(dims) == 2)
            if e is not None:
                yield e

    def rewrite(self, src: Source, fn: Node, decl: Node, name: str, atomic_params, rows2d: bool = False) -> Optional[Edit]:
        idx = FunctionIndex(src, fn)
        var = next((v for v in idx.vars if v.name == name and same(v.decl, decl)), None)
        body = fn.child_by_field_name("body")
        if var is None or body is None:
            return None
        elem32 = not re.search(r"\b(long|double|size_t|u?int64_t|float)\b", code(src, decl))
        top = statements(body)

        def top_of(n: Node) -> Optional[Node]:
            while n is not None and n.parent is not None and not same(n.parent, body):
                n = n.parent
            return n if n is not None and n.parent is not None else None

        uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == name and not contains(decl, n)
                and idx.visible(name, n.start_byte) is var]
        clear = merge = None
        info: Optional[_Merge] = None
        direct, aliases = [], []
        for u in uses:
            t = top_of(u)
            if t is None:
                return None
            if t.type == "for_statement":
                # the clear: for (...) H[e] = 0; (or for (...) for (...) H[w][e] = 0;)
                stmt = _single_statement(t.child_by_field_name("body"))
                while stmt is not None and stmt.type == "for_statement":
                    stmt = _single_statement(stmt.child_by_field_name("body"))
                if stmt is not None and re.fullmatch(r"%s\s*\[[^;]+\]\s*=\s*0[uUlL]*\s*;" % re.escape(name),
                                                     code(src, stmt)):
                    if clear is not None and not same(clear, t):
                        return None
                    clear = t
                    continue
                if merge is not None and same(merge, t):
                    continue
                m = _merge(src, t, name, elem32, rows2d) if merge is None else None
                if m is not None:
                    merge, info = t, m
                    continue
            a = _alias(src, idx, u)
            if a is not None and (a[2] == "[row]") == rows2d:
                aliases.append(a)
                continue
            # an atomic target, directly or through a device function's atomic-only parameter
            # (a 2-D copy through its row, `&H[w][e]` / `f(H[w])`)
            ref = u.parent if rows2d else u
            if rows2d and (ref is None or ref.type != "subscript_expression" or not same(ref.named_children[0], u)):
                return None
            if _enclosing_atomic(u) is not None and (not rows2d or ref.parent.type == "subscript_expression") or \
                    _atomic_arg(ref, atomic_params):
                direct.append(ref)
                continue
            return None
        if clear is None or merge is None or info is None:
            return None
        updates = list(direct)
        for v, _, off in aliases:
            if _rebound(v) or (info.copy_stride and not rows2d and not _copy_offset(off, info.copy_stride)) or \
                    (not info.copy_stride and off):
                return None
            a_uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == v.name and
                      not contains(v.declarator, n) and idx.visible(v.name, n.start_byte) is v]
            if not all(_enclosing_atomic(n) is not None or _atomic_arg(n, atomic_params) for n in a_uses):
                return None
            updates += a_uses
        # several copies are told apart only through their aliases' whole-copy offsets
        if not updates or (info.copy_stride and direct and not rows2d):
            return None
        if not all(clear.end_byte <= u.start_byte and u.end_byte <= merge.start_byte for u in updates):
            return None
        g = info.target
        gv = idx.visible(g, merge.start_byte)
        if gv is None or gv.shape != "pointer" or _rebound(gv) or \
                any(idx.visible(g, n.start_byte) is not gv for n in updates + [a[1] for a in aliases]):
            return None
        if info.store:
            # the global entries are overwritten by the merge: they are cleared where the private
            # copy was, a barrier before the first update, one block per row (blockIdx in X)
            first = min(updates, key=lambda n: n.start_byte)
            ci, ui = next(i for i, s in enumerate(top) if same(s, clear)), \
                next(i for i, s in enumerate(top) if top_of(first) is not None and same(s, top_of(first)))
            if not any(re.fullmatch(SYNC_RE, code(src, s)) for s in top[ci + 1:ui]):
                return None
            if not re.search(r"\bblockIdx\b", info.base):
                return None
        at = f"{g} + ({info.base})" if info.base else g
        subs = [Edit(u.start_byte, u.end_byte, f"({at})" if info.base else g) for u in direct]
        subs += [Edit(n.start_byte, n.end_byte, at) for _, n, _ in aliases]
        if info.store:
            loop_body = merge.child_by_field_name("body")
            header = " ".join(src.code[merge.start_byte:loop_body.start_byte].decode().split())
            subs.append(Edit(clear.start_byte, clear.end_byte, f"{header} {g}[{info.index}] = 0;"))
        else:
            subs.append(Edit(*_span_with_pragma(src, clear), ""))
        subs.append(Edit(*_span_with_pragma(src, merge), ""))
        subs.append(Edit(*src.line_span(decl.start_byte, decl.end_byte), ""))
        subs += _dynamic_smem_edits(src, fn, decl)
        subs.sort()
        for (s1, e1, _), (s2, e2, _) in zip(subs, subs[1:]):
            if s2 < e1:
                return None
        lo, hi = subs[0][0], max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))


# --------------------------------------------------------------------------- forward half
PRIV_CAP = 4096  # shared-memory histogram copy: bins held per block (16 KB of int)


def _conjuncts_around(src: Source, node: Node) -> list[str]:
    """The conditions known true at `node`: the conjuncts of every if / ?: whose true branch holds it
    (inner first; an `else` branch knows the negation, which bounds nothing)."""
    out = []
    child, p = node, node.parent
    while p is not None and p.type != "function_definition":
        if p.type in ("if_statement", "conditional_expression"):
            branch = p.child_by_field_name("consequence")
            if branch is not None and branch.start_byte <= child.start_byte and child.end_byte <= branch.end_byte:
                out += [strip_parens(c) for c in split_top(strip_parens(code(src, p.child_by_field_name("condition"))),
                                                           "&&")]
        child, p = p, p.parent
    return out


def _addressed_element(arg: Node) -> Optional[Node]:
    """`&T[i]` / `&(T[i])` -> the subscript T[i]."""
    while arg.type == "parenthesized_expression" and arg.named_child_count == 1:
        arg = arg.named_children[0]
    if arg.type != "pointer_expression" or code_op(arg) != "&":
        return None
    e = arg.named_children[0]
    while e.type == "parenthesized_expression" and e.named_child_count == 1:
        e = e.named_children[0]
    return e if e.type == "subscript_expression" else None


def code_op(n: Node) -> str:
    op = n.child_by_field_name("operator")
    return text(op) if op is not None else ""


_SIDE_EFFECT = re.compile(r"\+\+|--|(?<![=!<>])=(?!=)")


def _table_bound(src: Source, call: Node, sub: Node, idx: str, known: set[str]) -> tuple[Optional[str], str]:
    """How far the atomic's index reaches: (bins, runtime test). A guard around it (`if (b < bins)`)
    or a mask on the index (`x & 0xFF`: 256 bins) bounds the table, no test; an index known only to
    be an index (`y[a[i]]`: the bins come from the data) gets the copy's capacity as its bound and a
    per-update test `(unsigned long long)(b) < cap`: the low bins are counted in the copy, the rest in
    the global table (the merge only writes bins that were counted, so no entry the original did not
    touch). Side effects in the index refuse the test (it would evaluate them twice)."""
    for c in reversed(_conjuncts_around(src, call)):
        m = re.fullmatch(r"(.+?)\s*<\s*(.+)", c)
        if m and " ".join(m.group(1).split()) == idx and idents(m.group(2)) <= known:
            return m.group(2).strip(), ""
    e = sub.child_by_field_name("indices")
    e = e.named_children[0] if e is not None and e.named_child_count == 1 else None
    while e is not None and e.type == "parenthesized_expression" and e.named_child_count == 1:
        e = e.named_children[0]
    if e is not None and e.type == "binary_expression" and code_op(e) == "&":
        for side in (e.child_by_field_name("left"), e.child_by_field_name("right")):
            lit = text(side).rstrip("uUlL") if side is not None and side.type == "number_literal" else ""
            try:
                mask = int(lit, 0)
            except ValueError:
                continue
            if 0 <= mask < PRIV_CAP:
                return str(mask + 1), ""
    if _SIDE_EFFECT.search(idx) or re.search(r"\w\s*\(", idx):
        return None, ""
    return str(PRIV_CAP), f"(unsigned long long)({idx}) < {PRIV_CAP}ull"


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
            oe = one_element(src, k, loops=True)
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
            sub = _addressed_element(a[0]) if len(a) == 2 else None
            if sub is None:
                continue
            base, idx = sub_base(sub), " ".join(sub_index(sub).split())
            p = params.get(base)
            if p is None or p.pointer_depth != 1 or p.const or p.base_type not in ("int", "unsigned int", "unsigned",
                                                                                 "float", "unsigned long long"):
                continue
            b, test = _table_bound(src, call, sub, idx, set(params) | set(src.defines))
            if b is None:
                continue
            if table not in (None, base) or bound not in (None, b):
                continue
            table, bound, elem = base, b, p.base_type
            calls.append((call, sub, a[1], test))
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
        for call, sub, val, test in calls:
            idx = sub_index(sub)
            v = raw(src, val)
            on = "ks_priv_on" + (f" && {test}" if test else "")
            edits.append(Edit(call.start_byte, call.end_byte,
                              f"({on} ? atomicAdd(&ks_priv[{idx}], {v}) : atomicAdd(&{table}[{idx}], {v}))"))
        close = k.body.end_byte - 1
        edits.append(Edit(line_start(src, close), line_start(src, close), tail))
        out.append(candidate(src, edits, "privatize_atomics",
                        f"{k.name}: atomics into {table} privatized per block in shared memory",
                        guards=[f"{bound} <= {PRIV_CAP} (runtime check; global atomics otherwise)"] +
                               ([f"bins below {PRIV_CAP} in the copy, others in the global table (runtime check)"]
                                if any(c[3] for c in calls) else []),
                        excerpt=code(src, calls[0][0])))
    return out


PAIR = Pair(PrivatizedToGlobalAtomics, (Rewrite("privatize_atomics", "privatized_atomics", privatize_atomics,
                                                       prior=8.0),))
