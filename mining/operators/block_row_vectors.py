"""Forward `vectorize_block_rows` (issue 20): a kernel whose block owns a row and gives each thread
one element of it (`idx = blockIdx.x * blockDim.x + threadIdx.x`, straight-line per-element code
around block reductions) gives each thread four consecutive floats instead, read and written with
one 16-byte access, on a block a quarter the size:

    int idx = bid * blockDim.x + tid;                 int idx = (bid * blockDim.x + tid) * 4;
    float v = (idx < n) ? x[idx] : 0.0f;              float ks_x[4]; ... one float4 load of x[idx..idx+3]
    float s = v * v;                                  float v_ks0 = (idx + 0 < n) ? ks_x[0] : 0.0f;  ... v_ks3
    s = block_reduce_sum<NT>(s);              ->      float s_ks0 = v_ks0 * v_ks0;  ... s_ks3
    if (idx < n) y[idx] = v * s;                      float s = block_reduce_sum<NT>(s_ks0 + s_ks1 + s_ks2 + s_ks3);
    kernel<128><<<rows, 128>>>(...)                   ... one float4 store of the four results
                                                      kernel<32><<<rows, 32>>>(...)

Detection by meaning: a one-dimensional kernel launched in this file with literal block sizes B
(B / 4 whole warps); one top-level index declaration `idx = blockIdx.x * blockDim.x + threadIdx.x`
(its only use of blockDim); the per-element values are the variables computed from idx or from
other per-element values, in top-level declarations and assignments; they meet other threads only
as the argument of a group reduction (a one-value device function that shuffles or shares through
memory: block_per_row_to_thread.group_reductions), whose combination (sum or max) is read off the
shuffles in its body; global memory is touched per element only as `p[idx]` of float pointers (read
only, or written only as `if (idx < E) p[idx] = V;` / unguarded). Template arguments of a launch
equal to its block size are the block size (the reductions' thread count), so they shrink with it,
and only where the kernel passes that parameter to group reductions and nowhere else.

Why it is sound: the new block's thread t does the work of old threads 4t .. 4t + 3 of the same
block (B % 4 == 0, so the same rows), statement by statement: each per-element statement runs four
times with idx + k; a reduction's argument is the combination of the four values, which the
reduction then combines across threads (sum or max: associative and commutative; float sums are
reassociated, the gate's tolerance judges it); everything else is the same in all threads. A read
or a write of the four elements is one 16-byte access only when all four are in bounds (the guard
holds at idx + 3) and the address is 16-byte aligned, checked at run time; otherwise each element
is read or written alone under its own guard. Refused: any other use of a per-element value (a
loop, a shared-memory write, a return), other threads' elements (`p[idx + 1]`), pointers read and
written, non-float elements, reductions of other operations, blocks that would not be whole warps.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.parse import text, walk
from corpora.code.source import Source
from mining.operators.base import Context, Edit, Materialization, candidate, rewrite_range
from mining.operators.block_per_row_to_thread import group_reductions
from mining.operators.nodes import (IndexDecl, block_dims, code, declarator_name, global_index_axis, identifiers,
                                    indent_at, kernels, launches, rename_identifiers, statements, type_before)

_SIZES = {"float": 4, "double": 8, "half": 2, "__half": 2}
_VEC = {16: "uint4", 8: "uint2"}
_DIMS = re.compile(r"\b(threadIdx|blockIdx|blockDim|gridDim)\s*\.\s*[yz]\b")


def _callee(call: Node) -> str:
    fn = call.child_by_field_name("function")
    while fn is not None and fn.type in ("qualified_identifier", "template_function"):
        fn = fn.child_by_field_name("name")
    return text(fn) if fn is not None else ""


def reduce_kind(src: Source, name: str, seen: Optional[set[str]] = None) -> str:
    """"sum" or "max": how a group reduction combines, read off the shuffles (or the shared-memory
    tree steps) of its body and of the functions it calls; "" when they disagree or combine otherwise."""
    seen = (seen or set()) | {name}
    kinds = set()
    for f in src.funcs:
        if f.name != name or f.is_kernel:
            continue
        body = src.func_code(f).decode("utf-8", "replace")
        # a shared-memory tree: `buf[t] += buf[t + s];` / `buf[t] = fmaxf(buf[t], buf[t + s]);`
        for line in re.findall(r"[^;{}]*\w+\s*\[[^\]]+\]\s*(?:\+=|=\s*\w+\s*\()\s*\w+\s*\[[^;]*;", body):
            kinds.add("sum" if "+=" in line else "max" if re.search(r"=\s*(fmaxf|fmax|max)\s*\(", line) else "other")
        for line in re.findall(r"[^;{}]*__shfl\w*\s*\([^;]*;", body):
            if re.search(r"\+=\s*__shfl|=\s*\w+\s*\+\s*__shfl", line):
                kinds.add("sum")
            elif re.search(r"\b(fmaxf|fmax|max)\s*\(", line):
                kinds.add("max")
            elif not re.search(r"__shfl\w*\s*\(\s*[^,]+,\s*\w+\s*,\s*0\b", line):  # a broadcast of lane 0
                kinds.add("other")
        for callee in re.findall(r"\b(\w+)\s*(?:<[^<>;]*>)?\s*\(", body):
            if callee != name and callee not in seen and any(g.name == callee for g in src.funcs if not g.is_kernel):
                k = reduce_kind(src, callee, seen)
                if k:
                    kinds.add(k)
    return kinds.pop() if len(kinds) == 1 and kinds != {"other"} else ""


def vectorize_block_rows(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    reductions = group_reductions(src)
    out = []
    for k in kernels(src):
        r = _site(src, k, reductions)
        if r is not None:
            edits, what = r
            out.append(candidate(src, edits, "vectorize_block_rows", f"{k.name}: {what}"))
    return out


class _Refuse(Exception):
    pass


def _site(src: Source, k, reductions: set[str]) -> Optional[tuple[list[Edit], str]]:
    try:
        return _rewrite(src, k, reductions)
    except _Refuse:
        return None


def _rewrite(src: Source, k, reductions: set[str]) -> tuple[list[Edit], str]:
    body_code = code(src, k.body)
    if _DIMS.search(body_code) or "ks_" in body_code:
        raise _Refuse
    decls = _index_decls(src, k)
    if len(decls) != 1 or len(re.findall(r"\bblockDim\b", body_code)) != 1:
        raise _Refuse
    d = decls[0]
    idx = d.name
    _thread_uses(src, k, d)
    ls = [l for l in launches(src) if l.kernel.split("<")[0].strip() == k.name]
    if not ls:
        raise _Refuse
    pointers = {p.name: p for p in k.sig.params if p.is_pointer}
    types = {p.base_type for p in pointers.values()}
    if len(types) != 1 or any(p.pointer_depth != 1 for p in pointers.values()) or types.copy().pop() not in _SIZES:
        raise _Refuse  # one element type: one access of 16 (else 8) bytes covers W of them
    ty = types.pop()
    dims = [block_dims(src, l) for l in ls]
    if any(x is None or x[1:] != (1, 1) for x in dims):
        raise _Refuse
    W = 0
    for width in (16, 8):  # the widest access whose smaller block is still whole warps
        if not W and all(x[0] % (width // _SIZES[ty] * 32) == 0 for x in dims):
            W = width // _SIZES[ty]
    if W < 2:
        raise _Refuse
    launch_edits = _launch_edits(src, k, ls, reductions, W)
    per: set[str] = {idx}
    edits: list[Edit] = [Edit(d.value.start_byte, d.value.end_byte, f"({code(src, d.value)}) * {W}")]
    vec = _VEC[W * _SIZES[ty]]
    stmts = [s for s in statements(k.body)]
    start = stmts.index(next(s for s in stmts if s.start_byte == d.stmt.start_byte)) + 1
    reads, writes = _accesses(src, k, idx, pointers)
    if set(reads) & set(writes):
        raise _Refuse
    cached: set[str] = set()
    n_red = 0
    threaded = _thread_functions(src)
    for st in stmts[start:]:
        ids = identifiers(code(src, st))
        red = _reduction(src, st, per, reductions) if ids & per else None
        if red is None and any(n.type == "call_expression" and (_callee(n) in threaded or
                                                              re.match(r"__sync|__shfl|__ballot|__any|__all", _callee(n)))
                               for n in walk(st)):
            # a collective or thread-dependent call outside a reduction of the elements: it would
            # run once per element, or see a thread count and thread indices that changed
            if not re.fullmatch(r"__syncthreads\s*\(\s*\)\s*;", code(src, st).strip()):
                raise _Refuse
        if not ids & per:
            continue
        ind = indent_at(src, st.start_byte)
        fill = []
        for p in sorted(reads):
            if p in ids and p not in cached:
                fill.append(_fill(p, idx, reads[p], ind, ty, W, vec))
                cached.add(p)
        if red is not None:
            target, rty, arg, kind = red
            parts = [_lifted(src, arg, per, idx, cached, j) for j in range(W)]
            comb = " + ".join(f"({p})" for p in parts) if kind == "sum" else \
                _max_tree(parts, "fmax" if ty == "double" else "fmaxf")
            call = arg.parent.parent  # argument_list -> call_expression
            new_call = rewrite_range(src, call.start_byte, call.end_byte, [Edit(arg.start_byte, arg.end_byte, comb)])
            decl = f"{rty} " if rty else ""
            if target in per:
                if not rty:
                    ty_ = _declared_type(src, k, target, st)
                    if ty_ is None:
                        raise _Refuse
                    decl = f"{ty_} "
                per.discard(target)
            edits.append(Edit(st.start_byte, st.end_byte, "\n".join(fill + [f"{ind}{decl}{target} = {new_call};"]).lstrip()))
            n_red += 1
            continue
        store = _store(src, st, idx, pointers, per)
        if store is not None:
            p, guard, value = store
            edits.append(Edit(st.start_byte, st.end_byte, "\n".join(fill + _store_text(
                src, p, guard, value, per, idx, cached, ind, ty, W, vec)).lstrip()))
            continue
        if st.type == "declaration":
            ds = [c for c in st.named_children if c.type == "init_declarator"]
            if len(ds) != 1 or ds[0].child_by_field_name("declarator").type != "identifier":
                raise _Refuse
            name = declarator_name(ds[0].child_by_field_name("declarator"))
            per.add(name)
            copies = [_lifted(src, st, per, idx, cached, j) for j in range(W)]
            edits.append(Edit(st.start_byte, st.end_byte, "\n".join(fill + [ind + c for c in copies]).lstrip()))
            continue
        if st.type == "expression_statement" and st.named_children and \
                st.named_children[0].type == "assignment_expression" and \
                st.named_children[0].child_by_field_name("left").type == "identifier" and \
                text(st.named_children[0].child_by_field_name("left")) in per:
            copies = [_lifted(src, st, per, idx, cached, j) for j in range(W)]
            edits.append(Edit(st.start_byte, st.end_byte, "\n".join(fill + [ind + c for c in copies]).lstrip()))
            continue
        raise _Refuse
    if not n_red or not cached:
        raise _Refuse  # no reduction (an elementwise kernel: vectorize_elementwise's) or no row read
    return edits + launch_edits, (f"{W} consecutive elements per thread on a block 1/{W} the size; "
                                  f"{', '.join(sorted(cached))} read {W * _SIZES[ty]} bytes at a time, "
                                  f"{n_red} reduction(s) fed their sum or max")


def _max_tree(parts: list[str], fmax: str) -> str:
    while len(parts) > 1:
        parts = [f"{fmax}({a}, {b})" for a, b in zip(parts[::2], parts[1::2])]
    return parts[0]


def _thread_functions(src: Source) -> set[str]:
    """Device functions that read the thread geometry or exchange values across threads, directly
    or through each other (group reductions among them)."""
    bodies = {f.name: src.func_code(f).decode("utf-8", "replace") for f in src.funcs if not f.is_kernel and f.name}
    out = {n for n, b in bodies.items() if re.search(r"\b(threadIdx|blockDim|__shfl\w*|__syncthreads|__syncwarp)\b", b)}
    for _ in range(3):
        out |= {n for n, b in bodies.items() if any(re.search(r"\b%s\s*[<(]" % re.escape(g), b) for g in out)}
    return out


def _index_decls(src: Source, k) -> list[IndexDecl]:
    """Top-level declarations of the global x index, the block and thread indices possibly read
    through local copies (`int bid = blockIdx.x; int idx = bid * blockDim.x + threadIdx.x;`)."""
    copies = {}
    for st in statements(k.body):
        if st.type != "declaration":
            continue
        for dd in st.named_children:
            v = dd.child_by_field_name("value") if dd.type == "init_declarator" else None
            if v is not None and re.fullmatch(r"(threadIdx|blockIdx)\s*\.\s*x", code(src, v).strip()):
                copies[declarator_name(dd.child_by_field_name("declarator"))] = "".join(code(src, v).split())
    out = []
    for st in statements(k.body):
        ds = [c for c in st.named_children if c.type == "init_declarator"] if st.type == "declaration" else []
        if len(ds) != 1 or ds[0].child_by_field_name("declarator").type != "identifier":
            continue
        v = ds[0].child_by_field_name("value")
        if v is None:
            continue
        if global_index_axis(rename_identifiers(code(src, v), copies)) == "x":
            name = text(ds[0].child_by_field_name("declarator"))
            out.append(IndexDecl(st, name, type_before(code(src, st), name), v, "x"))
    return out


def _thread_uses(src: Source, k, d) -> None:
    """threadIdx.x (or a local copy of it) is used only in the index declaration and in `== 0`
    tests: the first thread of the smaller block is still thread 0, any other use would change."""
    aliases, blank = set(), [(d.stmt.start_byte, d.stmt.end_byte)]
    for st in statements(k.body):
        for dd in (st.named_children if st.type == "declaration" else []):
            v = dd.child_by_field_name("value") if dd.type == "init_declarator" else None
            if v is not None and re.fullmatch(r"threadIdx\s*\.\s*x", code(src, v).strip()):
                if len([c for c in st.named_children if c.type == "init_declarator"]) != 1:
                    raise _Refuse
                aliases.add(declarator_name(dd.child_by_field_name("declarator")))
                blank.append((st.start_byte, st.end_byte))
    body = bytearray(src.code[k.body.start_byte:k.body.end_byte])
    for a, b in blank:
        body[a - k.body.start_byte:b - k.body.start_byte] = b" " * (b - a)
    text_ = body.decode("utf-8", "replace")
    names = [r"\b%s\b" % re.escape(a) for a in aliases] + [r"\bthreadIdx\s*\.\s*x\b"]
    for m in re.finditer("|".join(names), text_):
        if not (re.match(r"\s*==\s*0\b", text_[m.end():]) or re.search(r"\b0\s*==\s*$", text_[:m.start()])):
            raise _Refuse


def _launch_edits(src: Source, k, ls, reductions: set[str], W: int) -> list[Edit]:
    """Each launch's block B -> B / W; template arguments equal to B -> B / W where the kernel passes
    that template parameter only to group reductions."""
    tparams = _template_params(k)
    body = code(src, k.body)
    edits = []
    for l in ls:
        dims = block_dims(src, l)
        if dims is None or dims[1:] != (1, 1) or dims[0] % (W * 32):
            raise _Refuse  # checked by the caller; kept as the edit's own precondition
        b = dims[0]
        edits.append(Edit(l.block.start_byte, l.block.end_byte, str(b // W)))
        fn = l.call.child_by_field_name("function")
        if fn is not None and fn.type == "template_function":
            targs = fn.child_by_field_name("arguments")
            args = [a for a in targs.named_children if a.type != "comment"]
            for i, a in enumerate(args):
                if text(a).strip() != str(b):
                    continue
                if i >= len(tparams):
                    raise _Refuse
                name = tparams[i]
                uses = len(re.findall(r"\b%s\b" % re.escape(name), body))
                as_reduce = sum(len(re.findall(r"\b%s\s*<\s*%s\s*>\s*\(" % (re.escape(g), re.escape(name)), body))
                                for g in reductions)
                if uses != as_reduce:
                    raise _Refuse
                edits.append(Edit(a.start_byte, a.end_byte, str(b // W)))
    return edits


def _template_params(k) -> list[str]:
    t = k.node.parent
    if t is None or t.type != "template_declaration":
        return []
    plist = t.child_by_field_name("parameters")
    out = []
    for p in (plist.named_children if plist is not None else []):
        names = [c for c in walk(p) if c.type in ("identifier", "type_identifier")]
        names = [c for c in names if c.parent is not None and c.parent.type != "primitive_type"]
        decl = p.child_by_field_name("declarator") or p.child_by_field_name("name")
        out.append(text(decl) if decl is not None and decl.type == "identifier" else
                   (text(names[-1]) if names else ""))
    return out


def _accesses(src: Source, k, idx: str, pointers) -> tuple[dict[str, Optional[str]], set[str]]:
    """Pointers read as `p[idx]` (with the bound E of their `idx < E` guard, "" when read
    unguarded) and pointers written; any other subscript by a per-element index is refused."""
    reads: dict[str, Optional[str]] = {}
    writes: set[str] = set()
    for n in walk(k.body):
        if n.type != "subscript_expression":
            continue
        arr = n.child_by_field_name("argument")
        p = text(arr) if arr is not None and arr.type == "identifier" else ""
        ind = n.child_by_field_name("indices") or n.child_by_field_name("index")
        itext = code(src, ind).strip("[] ") if ind is not None else ""
        if p not in pointers:
            if idx in identifiers(itext):
                raise _Refuse  # a per-element index into shared or local memory
            continue
        if itext != idx:
            raise _Refuse  # another thread's element
        parent = n.parent
        if parent is not None and parent.type == "assignment_expression" and \
                parent.child_by_field_name("left") is not None and parent.child_by_field_name("left").id == n.id:
            if parent.children[1].type != "=":
                raise _Refuse
            writes.add(p)
            continue
        bound = _guard(src, n, idx)
        if p in reads and reads[p] != bound:
            raise _Refuse  # read under different guards: one fill cannot serve them
        reads[p] = bound
    return reads, writes


def _guard(src: Source, n: Node, idx: str) -> str:
    """E of the innermost `idx < E` condition (a conditional expression or an `if`) holding at n,
    "" when none does; other conditions on idx are refused."""
    child, p = n, n.parent
    while p is not None and p.type != "function_definition":
        cond = None
        if p.type == "conditional_expression" and p.child_by_field_name("consequence") is not None and \
                p.child_by_field_name("consequence").id == child.id:
            cond = p.child_by_field_name("condition")
        elif p.type == "if_statement" and p.child_by_field_name("consequence") is not None and \
                p.child_by_field_name("consequence").id == child.id:
            cond = p.child_by_field_name("condition")
        if cond is not None and idx in identifiers(code(src, cond)):
            m = re.fullmatch(r"\(?\s*%s\s*<\s*(.+?)\s*\)?" % re.escape(idx), code(src, cond).strip())
            if m is None or idx in identifiers(m.group(1)):
                raise _Refuse
            return m.group(1)
        child, p = p, p.parent
    return ""


def _fill(p: str, idx: str, bound: Optional[str], ind: str, ty: str, W: int, vec: str) -> str:
    """The thread's W elements of p: one vector access when all are in bounds and aligned, else one
    by one under their own guard (an element out of bounds is never read, nor used)."""
    last = f"{idx} + {W - 1} < {bound}" if bound else "true"
    i2 = ind + "    "
    one = f"if ({idx} + ks_k < {bound}) " if bound else ""
    return "\n".join([
        f"{ind}alignas(16) {ty} ks_{p}[{W}];  // ks-optimize: this thread's {W} elements of {p}",
        f"{ind}if (({last}) && ((unsigned long long)({p} + {idx}) & {W * _SIZES[ty] - 1}) == 0) {{",
        f"{i2}*reinterpret_cast<{vec}*>(ks_{p}) = *reinterpret_cast<const {vec}*>({p} + {idx});",
        f"{ind}}} else {{",
        f"{i2}#pragma unroll  // constant indices: the array stays in registers",
        f"{i2}for (int ks_k = 0; ks_k < {W}; ++ks_k) {one}ks_{p}[ks_k] = {p}[{idx} + ks_k];",
        f"{ind}}}"])


def _lifted(src: Source, node: Node, per: set[str], idx: str, cached: set[str], j: int) -> str:
    """node's text for element j: idx -> (idx + j), p[idx] -> ks_p[j], per-element v -> v_ksj."""
    subs = []
    skip = []
    for n in walk(node):
        if any(a <= n.start_byte < b for a, b in skip):
            continue
        if n.type == "subscript_expression":
            arr = n.child_by_field_name("argument")
            if arr is not None and arr.type == "identifier" and text(arr) in cached:
                subs.append(Edit(n.start_byte, n.end_byte, f"ks_{text(arr)}[{j}]"))
                skip.append((n.start_byte, n.end_byte))
            continue
        if n.type == "identifier" and text(n) in per:
            subs.append(Edit(n.start_byte, n.end_byte, f"({idx} + {j})" if text(n) == idx else f"{text(n)}_ks{j}"))
    return rewrite_range(src, node.start_byte, node.end_byte, subs)


def _reduction(src: Source, st: Node, per: set[str], reductions: set[str]):
    """`v = R(e);` / `T v = R(e);` with R a group reduction of e over per-element values ->
    (v, T or "", the argument node, "sum" | "max")."""
    if st.type == "declaration":
        ds = [c for c in st.named_children if c.type == "init_declarator"]
        if len(ds) != 1:
            return None
        target, value = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
        ty = src.code[st.start_byte:ds[0].start_byte].decode("utf-8", "replace")  # `const float `
    elif st.type == "expression_statement" and st.named_children and st.named_children[0].type == "assignment_expression":
        a = st.named_children[0]
        if a.children[1].type != "=":
            return None
        target, value, ty = a.child_by_field_name("left"), a.child_by_field_name("right"), ""
    else:
        return None
    if target is None or value is None or target.type != "identifier" or value.type != "call_expression":
        return None
    if _callee(value) not in reductions:
        return None
    args = value.child_by_field_name("arguments")
    xs = [x for x in (args.named_children if args is not None else []) if x.type != "comment"]
    if len(xs) != 1 or not identifiers(code(src, xs[0])) & per:
        raise _Refuse
    kind = reduce_kind(src, _callee(value))
    if not kind:
        raise _Refuse
    return text(target), ty.strip(), xs[0], kind


def _declared_type(src: Source, k, name: str, before: Node) -> Optional[str]:
    for decl in src.nodes("declaration", within=k.body):
        if decl.start_byte >= before.start_byte:
            break
        for dd in decl.named_children:
            if dd.type == "init_declarator" and declarator_name(dd.child_by_field_name("declarator")) == name:
                t = decl.child_by_field_name("type")
                return code(src, t) if t is not None else None
    return None


def _store(src: Source, st: Node, idx: str, pointers, per: set[str]):
    """`if (idx < E) p[idx] = V;` or `p[idx] = V;` -> (p, E or "", V)."""
    guard = ""
    node = st
    if st.type == "if_statement":
        if st.child_by_field_name("alternative") is not None:
            return None
        cond = code(src, st.child_by_field_name("condition")).strip()
        m = re.fullmatch(r"\(\s*%s\s*<\s*(.+?)\s*\)" % re.escape(idx), cond)
        if m is None or idx in identifiers(m.group(1)):
            return None
        guard = m.group(1)
        node = st.child_by_field_name("consequence")
        if node.type == "compound_statement":
            kids = [c for c in node.named_children if c.type != "comment"]
            if len(kids) != 1:
                return None
            node = kids[0]
    if node.type != "expression_statement" or not node.named_children:
        return None
    a = node.named_children[0]
    if a.type != "assignment_expression" or a.children[1].type != "=":
        return None
    left = a.child_by_field_name("left")
    arr = left.child_by_field_name("argument") if left.type == "subscript_expression" else None
    if arr is None or text(arr) not in pointers:
        return None
    return text(arr), guard, a.child_by_field_name("right")


def _store_text(src: Source, p: str, guard: str, value: Node, per: set[str], idx: str, cached: set[str],
                ind: str, ty: str, W: int, vec: str) -> list[str]:
    i2, i3 = ind + "    ", ind + "        "
    vals = [_lifted(src, value, per, idx, cached, j) for j in range(W)]
    last = f"{idx} + {W - 1} < {guard}" if guard else "true"
    lines = [f"{ind}{{  // ks-optimize: this thread's {W} results of {p}, one vector store when all are in bounds",
             f"{i2}if (({last}) && ((unsigned long long)({p} + {idx}) & {W * _SIZES[ty] - 1}) == 0) {{",
             f"{i3}alignas(16) {ty} ks_o[{W}];"]
    lines += [f"{i3}ks_o[{j}] = {v};" for j, v in enumerate(vals)]
    lines += [f"{i3}*reinterpret_cast<{vec}*>({p} + {idx}) = *reinterpret_cast<const {vec}*>(ks_o);",
              f"{i2}}} else {{"]
    for j, v in enumerate(vals):
        cond = f"if ({idx} + {j} < {guard}) " if guard else ""
        lines.append(f"{i3}{cond}{p}[{idx} + {j}] = {v};")
    lines += [f"{i2}}}", f"{ind}}}"]
    return lines
