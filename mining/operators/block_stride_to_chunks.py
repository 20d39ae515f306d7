"""block_stride_to_chunks: a block-stride loop, in which the threads of one block walk a range
together with stride `blockDim.x`,

    for (int j = threadIdx.x; j < L; j += blockDim.x) body

becomes one contiguous chunk per thread:

    for (int ks_chunk = (L + blockDim.x - 1) / blockDim.x, j = threadIdx.x * ks_chunk;
         j < L && j < (threadIdx.x + 1) * ks_chunk; ++j) body

This is the simpler form where a block cannot grow to one thread per element (a row longer than
1024 elements swept by one block): every index in [0, L) is still visited exactly once, by one
thread, but a warp's accesses in one iteration are no longer consecutive (uncoalesced), which is
what the block-stride form buys. Per-thread accumulations then run over another subset of the
range in another order: the results agree up to rounding, and the gate judges that.

Sites: the start is `threadIdx.x` (or a local initialised to it and never assigned), the stride
`blockDim.x` (or such a local), the condition `j < L`; the body has no barrier, warp
collective, `break`, `continue` or `return`, does not assign the variables of L, and does not
read the thread index (its work may depend only on j).

Forward, `chunks_to_block_stride`: the reverse. A loop in which each thread of a block sweeps its
own contiguous chunk of C indices,

    for (T C = (L + blockDim.x - 1) / blockDim.x, j = tid * C; j < L && j < (tid + 1) * C; ++j) body
    int begin = tid * C, end = min(begin + C, L);  for (int j = begin; j < end; j++) body

(the chunk's start `tid * C`, directly or through a local never assigned again; its end `(tid + 1)
* C`, `tid * C + C` or `begin + C`, alone, in a `&&` chain or in a `min`, beside limits L that do
not depend on the thread) becomes the block-stride loop `for (T j = tid; j < L && j < blockDim.x *
C; j += blockDim.x) body` (the bound `blockDim.x * C` dropped when C is the ceiling of L over the
block, as in the operator's own form). Why it is sound: the chunks of threads 0..blockDim.x-1 tile
[0, blockDim.x * C); the strided loops of the same threads visit the same indices, each once, by
one thread; so each index's iteration still runs exactly once, by another thread of the same block.
That is the same result where the iterations are independent or only accumulate associatively into
a thread-local value, so sites need a body in which every write is to a name declared inside it, an
accumulation (`x op= e` with op one of + * & | ^, `x = x + e`, `x = max/min/fmaxf/fminf(x, e)`) of a
scalar that the body reads nowhere else, or an element `A[e]` with e mentioning j and every access
of A in the body at that same index; no barrier, warp collective, atomic, `break`, `continue`,
`return`; no read of the thread index, the chunk bounds or the chunk's locals (the work may depend
only on j); C and L not written in the body; `tid` is `threadIdx.x` or a local initialised to it
and never assigned. A thread's partial accumulation now covers another subset (another order:
rounding differs); a kernel that reads one thread's partial as the sum of its own chunk (a scan over
chunk totals) fails the gate, which judges every candidate.
"""
from __future__ import annotations

import re
from typing import Optional

from corpora.code.source import Source
from mining.carriers import grid_stride_loops
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, candidate, raw_text
from mining.operators.nodes import FunctionIndex, kernels, norm, split_top, strip_parens
from mining.operators.rewrite_util import structural
from corpora.code.parse import text, walk


_SYNC = re.compile(r"\b(__syncthreads\w*|__syncwarp|__shfl\w*|__ballot\w*|__any\w*|__all\w*|__activemask|"
                   r"atomic\w*|__threadfence\w*)\s*\(")


def _alias(fn_code: str, name: str, value: str) -> bool:
    """`name` is a local initialised to `value` (threadIdx.x / blockDim.x) and never assigned again."""
    n = re.escape(name)
    init = re.search(r"\b(?:const\s+)?(?:int|unsigned|unsigned int|size_t|long|long long)\s+(?:[^;]*?,\s*)?%s\s*=\s*"
                     r"\(?\s*(?:int|unsigned)?\s*\)?\s*%s\s*[,;]" % (n, re.escape(value)), fn_code)
    if not init:
        return False
    assigned = re.findall(r"(?<![=!<>])\b%s\s*([-+*/%%&|^]|<<|>>)?=(?!=)|\+\+\s*%s\b|\b%s\s*(\+\+|--)" % (n, n, n),
                          fn_code)
    return len(assigned) == 1  # the initialisation itself


class BlockStrideToChunks(Operator):
    name = "block_stride_to_chunks"
    carrier = "grid_stride"
    description = "let each thread sweep a contiguous chunk instead of striding by the block size"

    def edits(self, src: Source):
        st = structural(src)
        for loop in grid_stride_loops(st):
            e = self.rewrite(st, loop)
            if e is not None:
                yield e

    def rewrite(self, src: Source, loop) -> Optional[Edit]:
        init = loop.child_by_field_name("initializer")
        cond = loop.child_by_field_name("condition")
        upd = loop.child_by_field_name("update")
        body = loop.child_by_field_name("body")
        if init is None or cond is None or upd is None or body is None or init.type != "declaration":
            return None
        f = src.function_at(loop.start_byte)
        if f is None:
            return None
        fn_code = src.func_code(f).decode("utf-8", "replace")
        decls = [d for d in init.named_children if d.type == "init_declarator"]
        if len(decls) != 1 or len([d for d in init.named_children if d.type.endswith("declarator")
                                   or d.type == "identifier"]) != 1:
            return None
        var_node = decls[0].child_by_field_name("declarator")
        start_node = decls[0].child_by_field_name("value")
        if var_node is None or var_node.type != "identifier" or start_node is None:
            return None
        var = text(var_node)
        start = " ".join(text(start_node).split())
        typ = " ".join(text(init.child_by_field_name("type")).split())
        if re.search(r"\b(const|auto)\b", raw_text(src, init.start_byte, var_node.start_byte)):
            return None
        m = re.fullmatch(r"(\w+)\s*\+=\s*(.+)", " ".join(text(upd).split()))
        if m is None or m.group(1) != var:
            return None
        stride = m.group(2).strip()
        if not (stride == "blockDim.x" or (re.fullmatch(r"\w+", stride) and _alias(fn_code, stride, "blockDim.x"))):
            return None
        if not (start == "threadIdx.x" or (re.fullmatch(r"\w+", start) and _alias(fn_code, start, "threadIdx.x"))):
            return None
        c = " ".join(src.code[cond.start_byte:cond.end_byte].decode("utf-8", "replace").split())
        cm = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(var), c)
        if cm is None:
            return None
        limit = cm.group(1).strip()
        if re.search(r"\b%s\b" % re.escape(var), limit):
            return None
        btext = src.code[body.start_byte:body.end_byte].decode("utf-8", "replace")
        if re.search(r"\b(break|continue|return|goto)\b", btext) or _SYNC.search(btext):
            return None
        if re.search(r"\bthreadIdx\b|\b%s\b|\b%s\b" % (re.escape(start), re.escape(stride)), btext):
            return None
        # the body must not change the limit (nor the loop variable: j += ... inside would skip indices)
        for n in walk(body):
            if n.type in ("assignment_expression", "update_expression"):
                target = n.child_by_field_name("left") if n.type == "assignment_expression" else \
                    n.child_by_field_name("argument")
                base = target
                while base is not None and base.type in ("subscript_expression", "field_expression",
                                                         "parenthesized_expression"):
                    base = base.child_by_field_name("argument") if base.type != "parenthesized_expression" \
                        else base.named_children[0]
                name = text(base) if base is not None else ""
                if name == var or re.search(r"\b%s\b" % re.escape(name), limit):
                    return None
        lim = limit if re.fullmatch(r"[\w.]+|\([^()]*\)", limit) else f"({limit})"
        s1 = start if re.fullmatch(r"[\w.]+", start) else f"({start})"
        header = (f"for ({typ} ks_chunk = ({lim} + {stride} - 1) / {stride}, {var} = {s1} * ks_chunk; "
                  f"{var} < {lim} && {var} < ({s1} + 1) * ks_chunk; ++{var})")
        # keep everything from the closing parenthesis of the header on (comments, the body) byte-identical
        close = src.code.rfind(b")", loop.start_byte, body.start_byte)
        return Edit(loop.start_byte, close + 1, header)



# --------------------------------------------------------------------------- forward
_ACC_OPS = ("+=", "*=", "&=", "|=", "^=")
_ACC_FNS = ("max", "min", "fmaxf", "fminf", "fmax", "fmin")


def _alias_value(idx: FunctionIndex, name: str, at: int) -> str | None:
    """The initializer text of a local `name` visible at `at` that is never assigned again."""
    v = idx.visible(name, at)
    if v is None or v.kind == "param" or v.value is None or v.assigned or v.shape != "scalar":
        return None
    return norm(text(v.value))


def _is_tid(idx: FunctionIndex, e: str, at: int) -> bool:
    e = strip_parens(e)
    return norm(e) == norm("threadIdx.x") or (re.fullmatch(r"\w+", e) is not None and
                                              _alias_value(idx, e, at) == norm("threadIdx.x"))


def _chunk_start(idx: FunctionIndex, e: str, at: int) -> tuple[str, str] | None:
    """`tid * C` (or C * tid, or a name for it): (tid, C)."""
    e = strip_parens(e)
    if re.fullmatch(r"\w+", e) and (val := _alias_value(idx, e, at)) is not None and not _is_tid(idx, e, at):
        e = strip_parens(val)
    parts = split_top(e, "*")
    if len(parts) != 2:
        return None
    for t, c in (parts, parts[::-1]):
        if _is_tid(idx, t, at) and not re.search(r"threadIdx", c) and not _is_tid(idx, c, at):
            return t, strip_parens(c)
    return None


def _bound_terms(idx: FunctionIndex, e: str, at: int) -> list[str]:
    """The limits of `j < e`: `min(a, b)` (or a local bound to one) splits into its arguments."""
    e = strip_parens(e)
    if re.fullmatch(r"\w+", e) and (val := _alias_value(idx, e, at)) is not None:
        m = re.fullmatch(r"(?:std\s*::\s*)?(?:min|fminf?|umin)\s*\((.*)\)", val)
        if m:
            e = val
    m = re.fullmatch(r"(?:std\s*::\s*)?(?:min|umin)\s*\((.*)\)", e)
    if m:
        args = split_top(m.group(1), ",")
        if len(args) == 2:
            return [t for a in args for t in _bound_terms(idx, a, at)]
    return [e]


def _is_chunk_end(idx: FunctionIndex, e: str, tid: str, c: str, start_names: set[str], at: int) -> bool:
    e = norm(strip_parens(e))
    t, cc = strip_parens(tid), c if re.fullmatch(r"[\w.]+", c) else f"({c})"
    forms = {f"({t} + 1) * {cc}", f"{cc} * ({t} + 1)", f"{t} * {cc} + {cc}", f"{cc} + {t} * {cc}",
             f"{cc} * {t} + {cc}", f"({t} * {cc}) + {cc}"}
    forms |= {f"{s} + {cc}" for s in start_names} | {f"{cc} + {s}" for s in start_names}
    return e in {norm(f) for f in forms}


def _independent(src: Source, body, var: str, outside: set[str]) -> bool:
    """Every write of the body is to a name declared inside it, an associative accumulation of a
    scalar the body reads nowhere else, or an element indexed by `var` accessed nowhere else at
    another index."""
    inner: set[str] = set()
    for n in walk(body):
        if n.type == "init_declarator" or (n.type == "declaration"):
            for d in ([n] if n.type == "init_declarator" else n.named_children):
                dn = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
                if dn is not None and dn.type == "identifier":
                    inner.add(text(dn))
    accs: set[str] = set()
    elems: dict[str, str] = {}
    for n in walk(body):
        if n.type not in ("assignment_expression", "update_expression"):
            continue
        target = n.child_by_field_name("left") if n.type == "assignment_expression" else n.child_by_field_name("argument")
        target = target
        while target is not None and target.type == "parenthesized_expression":
            target = target.named_children[0]
        if target is None:
            return False
        if target.type == "identifier":
            name = text(target)
            if name in inner:
                continue
            if name in outside or n.type == "update_expression":
                return False
            op = text(n.child_by_field_name("operator"))
            right = norm(text(n.child_by_field_name("right")))
            if op in _ACC_OPS and not re.search(r"\b%s\b" % re.escape(name), right):
                accs.add(name)
                continue
            m = re.fullmatch(r"(?:(\w+) \( (.+) \)|(.+))", right)
            if op == "=" and m is not None:
                if m.group(1) in _ACC_FNS:
                    args = split_top(m.group(2), ",")
                    if len(args) == 2 and name in (norm(args[0]), norm(args[1])) and \
                            sum(bool(re.search(r"\b%s\b" % re.escape(name), a)) for a in args) == 1:
                        accs.add(name)
                        continue
                elif m.group(3) is not None:
                    terms = split_top(m.group(3), "+")
                    if len(terms) >= 2 and norm(terms[0]) == name and \
                            not any(re.search(r"\b%s\b" % re.escape(name), t) for t in terms[1:]):
                        accs.add(name)
                        continue
            return False
        if target.type == "subscript_expression":
            base = target.child_by_field_name("argument")
            ind = target.child_by_field_name("indices") or target.child_by_field_name("index")
            if base is None or base.type != "identifier" or ind is None or \
                    not re.search(r"\b%s\b" % re.escape(var), text(ind)):
                return False
            key = norm(text(ind))
            if elems.setdefault(text(base), key) != key:
                return False
            continue
        return False
    # an accumulator is read only by its own update; an element only at its own index
    for n in walk(body):
        if n.type == "identifier" and text(n) in accs:
            p = n.parent
            while p is not None and p.type not in ("assignment_expression",) and p.start_byte >= body.start_byte:
                p = p.parent
            if p is None or p.type != "assignment_expression":
                return False
        if n.type == "subscript_expression":
            base = n.child_by_field_name("argument")
            ind = n.child_by_field_name("indices") or n.child_by_field_name("index")
            if base is not None and text(base) in elems and (ind is None or norm(text(ind)) != elems[text(base)]):
                return False
    return True


def chunks_to_block_stride(source: str, ctx: Context) -> list[Materialization]:
    """Each thread's contiguous chunk -> a block-stride loop (see the module docstring)."""
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        idx = FunctionIndex(src, k.node)
        found = [r for loop in walk(k.body) if loop.type == "for_statement" and
                 (r := _chunk_loop(src, idx, loop)) is not None]
        if len(found) > 1:  # every chunk loop of the kernel at once first, then each alone
            out.append(candidate(src, [e for e, _, _ in found], "chunks_to_block_stride",
                                 f"{k.name}: every thread's contiguous chunks become block-stride sweeps "
                                 f"(coalesced accesses), {len(found)} loops"))
        out += [candidate(src, [e], "chunks_to_block_stride", f"{k.name}, {what}", excerpt=ex) for e, what, ex in found]
    return out


def _chunk_loop(src: Source, idx: FunctionIndex, loop) -> tuple[Edit, str, str] | None:
    """The header edit of one chunk loop, a description and an excerpt (None: not a site)."""
    init, cond = loop.child_by_field_name("initializer"), loop.child_by_field_name("condition")
    upd, body = loop.child_by_field_name("update"), loop.child_by_field_name("body")
    if init is None or cond is None or upd is None or body is None or init.type != "declaration":
        return None
    decls = [d for d in init.named_children if d.type == "init_declarator"]
    if not decls:
        return None
    var_d = decls[-1]
    var = text(var_d.child_by_field_name("declarator"))
    start = norm(text(var_d.child_by_field_name("value")))
    at = loop.start_byte
    own: dict[str, str] = {}  # the init's other locals (the operator's `ks_chunk`)
    for d in decls[:-1]:
        dn = d.child_by_field_name("declarator")
        if dn is None or dn.type != "identifier":
            return None
        own[text(dn)] = norm(text(d.child_by_field_name("value")))
    u = norm(text(upd))
    if u not in (f"++ {var}", f"{var} ++", f"{var} += 1", f"{var} = {var} + 1"):
        return None
    cs = _chunk_start(idx, start, at)
    if cs is None and re.fullmatch(r"\w+ \* \w+", start):
        a, b = start.split(" * ")
        cs = (a, b) if _is_tid(idx, a, at) else (b, a) if _is_tid(idx, b, at) else None
    if cs is None:
        return None
    tid, c = cs
    if re.search(r"\b%s\b" % re.escape(var), c):
        return None
    start_names = {start} | ({strip_parens(start)} if re.fullmatch(r"\w+", strip_parens(start)) else set())
    terms = [t for part in split_top(" ".join(text(cond).split()), "&&") for t in [part]]
    ends, limits = 0, []
    for t in terms:
        m = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(var), strip_parens(t))
        if m is None:
            return None
        for b in _bound_terms(idx, m.group(1), at):
            if _is_chunk_end(idx, b, tid, c, start_names, at):
                ends += 1
            elif re.search(r"\bthreadIdx\b|\b%s\b|\b%s\b" % (re.escape(var), re.escape(tid)), b) or \
                    any(re.search(r"\b%s\b" % re.escape(s), b) for s in start_names):
                return None
            else:
                limits.append(b)
    if ends != 1:
        return None
    # the work may depend only on j
    btext = src.code[body.start_byte:body.end_byte].decode("utf-8", "replace")
    banned = {tid, c, *own, *start_names, *[strip_parens(x) for x in split_top(strip_parens(start), "*")]}
    for t in terms:
        m = re.fullmatch(r"%s\s*<\s*(\w+)" % re.escape(var), strip_parens(t))
        if m and _alias_value(idx, m.group(1), at) is not None:
            banned.add(m.group(1))  # the chunk's end, named
    if re.search(r"\b(break|continue|return|goto)\b|\bthreadIdx\b", btext) or _SYNC.search(btext) or \
            any(re.fullmatch(r"\w+", b) and re.search(r"\b%s\b" % re.escape(b), btext) for b in banned):
        return None
    outside = {var, *own} | {x for b in limits + [c] for x in re.findall(r"\b[A-Za-z_]\w*\b", b)}
    if not _independent(src, body, var, outside):
        return None
    typ = " ".join(text(init.child_by_field_name("type")).split())
    lims = [b if re.fullmatch(r"[\w.]+|\([^()]*\)", b) else f"({b})" for b in limits]
    cval = own.get(c) or (_alias_value(idx, c, at) if re.fullmatch(r"\w+", c) else None) or norm(c)
    ceil = {norm(f"({x} + blockDim.x - 1) / blockDim.x") for x in limits + lims}
    conds = [f"{var} < {x}" for x in lims]
    if cval not in ceil:  # the chunks may end before L: the sweep stops where they do
        conds.append(f"{var} < blockDim.x * " + (c if re.fullmatch(r"[\w.]+", c) else f"({c})"))
    # the init's own locals stay only where the new condition still reads them
    keep = [f"{n} = {v}" for n, v in own.items() if any(re.search(r"\b%s\b" % re.escape(n), x) for x in conds)]
    header = f"for ({typ} {', '.join(keep + [f'{var} = {tid}'])}; {' && '.join(conds)}; {var} += blockDim.x)"
    close = src.code.rfind(b")", loop.start_byte, body.start_byte)
    line = src.raw.count(b"\n", 0, loop.start_byte) + 1
    return (Edit(loop.start_byte, close + 1, header),
            f"line {line}: each thread's contiguous chunk of {var} becomes a block-stride sweep (coalesced accesses)",
            " ".join(text(loop).split())[:160])


PAIR = Pair(BlockStrideToChunks, (Rewrite("chunks_to_block_stride", "grid_stride", chunks_to_block_stride, prior=1.5),))
