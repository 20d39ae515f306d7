"""async_copy_to_sync: an asynchronous global-to-shared copy becomes a plain copy through registers.

    __pipeline_memcpy_async(dst, src, 16);
->  for (int ks_e = 0; ks_e < 16 / (int)sizeof(*(dst)); ++ks_e) (dst)[ks_e] = (src)[ks_e];

element by element, when both pointers have the same element type (read from their declarations),
so no vector access (and no vector_load carrier) is introduced. The same copy written in inline PTX
(`cp.async.cg.shared.global [%0], [%1], 16;` in an `asm` statement, a macro such as
`CP_ASYNC_CG(dst, src, 16)` or a device function; found by meaning in mining/operators/ptx_async.py)
is rewritten the same way, its 32-bit shared address traced back to the generic pointer that
`__cvta_generic_to_shared` converted:

    uint32_t sp = __cvta_generic_to_shared(&s_a[0][m][k]);     (kept; dead once the copy is plain)
    CP_ASYNC_CG(sp, &A[g], 16);
->  for (int ks_e = 0; ks_e < 16 / (int)sizeof(*(&s_a[0][m][k])); ++ks_e) (&s_a[0][m][k])[ks_e] = (&A[g])[ks_e];

There the element types come from the pointed-to declarations (a shared array indexed in every
dimension, a pointer indexed once or offset), since `.cg` copies of 16 bytes move any type. Why it is sound: the data is in shared
memory when the statement completes, which is no later than the `__pipeline_wait_prior` /
barrier that made it visible before; the pipeline calls that remain become no-ops (no copy is in
flight), which drop_pipeline_sync then removes. Only `__pipeline_memcpy_async` statements with a
literal size of 4, 8 or 16, no zero-fill argument and matching element types are sites. A
synchronous copy is one of the timings the asynchronous one allows (its bytes land at the issue
point, which is before the wait that publishes them), so a kernel race-free with the asynchronous
copy is race-free with the plain one.

Forward, `async_copy_fill`: a shared tile filled element by element from global memory and
published by a barrier becomes an asynchronous copy, waited for just before that barrier:

    s[ty][tx] = A[row * K + k0 + tx];           __pipeline_memcpy_async(&s[ty][tx], &A[row * K + k0 + tx], 4);
    ...                                  ->     ...
    __syncthreads();                            __pipeline_commit();
                                                __pipeline_wait_prior(0);
                                                __syncthreads();

(`#include <cuda_pipeline.h>` added when missing). A site is an expression statement `S[..]..[..]
= G[e];`: S a non-volatile `__shared__` array indexed in every dimension, G a pointer parameter
(global memory) read as one element (`G[e]`, `__ldg(&G[e])`, `__ldg(G + e)`, `*(G + e)`), both of the same element type of 4, 8 or 16 bytes
(float, int, double, float2, float4, ...), so the copy moves exactly the bytes the assignment did
with no conversion; no side effect on either side. Refused: a conversion or a computed value on
the right (`(float)h[i]`, `i < n ? G[i] : 0`), a zero-filling `else` branch, a shared or local
source, and any fill whose barrier cannot be found as below.

The barrier is the first `__syncthreads();` statement after the fill in its block or an enclosing
one; everything the thread executes between the fill and that barrier (the statements after it,
and the whole body of any loop it leaves) must not name S or G, write through a pointer parameter,
call anything that synchronizes or copies, or jump (`return`, `break`, `continue`, `goto`); other
fills of the same kind may sit there. S must be named only through subscripts in the kernel (no
pointer to it escapes), so nothing else can read the destination. Two fills of one barrier
interval with the same destination text are refused (two in-flight copies to one element finish in
either order); a fill inside a loop must index S with that loop's variable.

Why it is sound: the thread issues the copy where it did the store and waits for all its copies
before the barrier, so every element is in shared memory when the barrier publishes it, exactly
as before; between the issue and the wait nothing the thread runs reads the destination or
writes the source. Alignment holds because both addresses point to objects of the element type,
whose alignment equals its size for these types. This is async_copy_to_sync's inverse (and
drop_pipeline_sync's: the wait it deletes is the one added here): the walk's backward steps give
back the element copies. The CPU gate runs the result (cpu_runtime/include/cuda_pipeline_primitives.h
defers each copy to its wait, the latest timing the hardware allows).
"""
from __future__ import annotations

import re

from corpora.code.nodes import call_name, same
from corpora.code.source import Source
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, per_kernel_and_all
from mining.operators.nodes import indent_at, kernels, loop_var, pointer_params
from mining.operators.ptx_async import copy_sites
from mining.operators.rewrite_util import declaration_of, has_side_effects, structural, type_text
from mining.operators.vector_access import pointer_type
from corpora.code.parse import text, walk


_TYPES = {"16", "8", "4"}


def _element_type(src: Source, at: int, expr: str):
    """Element type behind a pointer expression `p + ...`: a pointer parameter / local, or an array."""
    m = re.match(r"\s*\(?\s*([A-Za-z_]\w*)", expr)
    if m is None:
        return None
    t = pointer_type(src, at, m.group(1))
    if t is None:
        for decl, name, dims in src.shared_decls:
            f = src.function_at(decl.start_byte)
            if name == m.group(1) and len(dims) == 1 and (f is None or f.start_byte <= at < f.end_byte):
                t = type_text(src, decl)
    return " ".join(re.sub(r"\bconst\b", " ", t).split()) if t else None


def _pointee(src: Source, at, expr: str):
    """Element type of a pointer expression `&X[i]...[j]` (every dimension of X indexed), `X + i`
    or `X`, from X's declaration (a pointer, or an array of as many dimensions as subscripts)."""
    e = " ".join(expr.split())
    m = re.fullmatch(r"&\s*\(?\s*([A-Za-z_]\w*)((?:\s*\[[^\[\]]*\])+)\s*\)?", e)
    if m is not None:
        name, subs = m.group(1), m.group(2).count("[")
    else:
        m = re.fullmatch(r"\(?\s*([A-Za-z_]\w*)\s*(?:\+[^?]*)?\)?", e)
        if m is None:
            return None
        name, subs = m.group(1), 0
    d = declaration_of(src, name, at)
    if d is None:
        return None
    t, kind, dims = d
    # `X + i` on a one-dimensional array decays to an element pointer; `&X[i][j]` must index every dimension
    if (kind == "pointer" and subs > 1) or (kind == "array" and subs != dims and not (subs == 0 and dims == 1)) \
            or kind == "scalar":
        return None
    return " ".join(re.sub(r"\b(const|volatile|__shared__)\b", " ", t).split())


class AsyncCopyToSync(Operator):
    name = "async_copy_to_sync"
    carrier = "async_copy"
    description = "replace a cp.async copy by a synchronous vector copy"

    def edits(self, src: Source):
        st = structural(src)
        for call in walk(st.tree.root_node):
            if call.type != "call_expression" or call_name(call) != "__pipeline_memcpy_async":
                continue
            if call.parent is None or call.parent.type != "expression_statement":
                continue
            args = call.child_by_field_name("arguments").named_children
            if len(args) != 3 or text(args[2]).strip() not in _TYPES or any(has_side_effects(a) for a in args):
                continue
            size = text(args[2]).strip()
            dst = " ".join(text(args[0]).split())
            srcp = " ".join(text(args[1]).split())
            types = [_element_type(st, call.start_byte, a) or _pointee(st, call, a) for a in (dst, srcp)]
            if types[0] is None or types[0] != types[1]:
                continue
            yield Edit(call.parent.start_byte, call.parent.end_byte,
                       f"for (int ks_e = 0; ks_e < {size} / (int)sizeof(*({dst})); ++ks_e) "
                       f"({dst})[ks_e] = ({srcp})[ks_e];")
        for site in copy_sites(st):  # inline PTX
            t = _pointee(st, site.stmt, site.dst)
            if t is None or t != _pointee(st, site.stmt, site.src):
                continue
            yield Edit(site.stmt.start_byte, site.stmt.end_byte,
                       f"for (int ks_e = 0; ks_e < {site.size} / (int)sizeof(*({site.dst})); ++ks_e) "
                       f"({site.dst})[ks_e] = ({site.src})[ks_e];")


# --------------------------------------------------------------------------- forward half
# element types whose size is their alignment (a copy of one element is one legal cp.async)
COPY_SIZES = {"float": 4, "int": 4, "unsigned": 4, "unsigned int": 4, "int32_t": 4, "uint32_t": 4, "__half2": 4,
              "double": 8, "long long": 8, "unsigned long long": 8, "int64_t": 8, "uint64_t": 8, "float2": 8,
              "int2": 8, "uint2": 8, "float4": 16, "int4": 16, "uint4": 16, "double2": 16, "longlong2": 16,
              "ulonglong2": 16}
_LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")
_JUMPS = ("return_statement", "break_statement", "continue_statement", "goto_statement")


def _names(node) -> set[str]:
    return {n.text.decode() for n in walk(node) if n.type == "identifier"}


def _is_barrier(stmt) -> bool:
    e = stmt.named_children[0] if stmt.type == "expression_statement" and stmt.named_children else None
    return e is not None and e.type == "call_expression" and call_name(e) == "__syncthreads"


def _global_read(e) -> tuple[str, str]:
    """(pointer name, address text) of a read of one element through a pointer: `G[e]`,
    `__ldg(&G[e])`, `__ldg(G + e)` or `*(G + e)`; else ("", "")."""
    if e.type == "subscript_expression":
        g = e.child_by_field_name("argument")
        return (text(g), "&" + text(e)) if g.type == "identifier" else ("", "")
    if e.type == "call_expression" and call_name(e) == "__ldg":
        args = e.child_by_field_name("arguments").named_children
        addr = " ".join(text(args[0]).split()) if len(args) == 1 else ""
    elif e.type == "pointer_expression" and e.children[0].type == "*":
        addr = " ".join(text(e.named_children[0]).split())
    else:
        return ("", "")
    m = re.fullmatch(r"&\s*([A-Za-z_]\w*)\s*\[.*\]|\(?\s*([A-Za-z_]\w*)\s*(?:\+[^?]*)?\)?", addr, re.S)
    return (m.group(1) or m.group(2), addr) if m else ("", "")


def _fills(st: Source, k, shared: set[str], params: set[str]) -> dict[int, tuple]:
    """Candidate fills of a kernel by start byte: (statement, S, G, dst text, src text, size)."""
    out = {}
    for stmt in walk(k.body):
        if stmt.type != "expression_statement" or not stmt.named_children:
            continue
        a = stmt.named_children[0]
        if a.type != "assignment_expression" or a.children[1].type != "=":
            continue
        left, right = a.child_by_field_name("left"), a.child_by_field_name("right")
        while right.type == "parenthesized_expression" and right.named_children:
            right = right.named_children[0]
        base = left
        while base.type == "subscript_expression":
            base = base.child_by_field_name("argument")
        g, srcp = _global_read(right)
        if base.type != "identifier" or base.text.decode() not in shared or g not in params \
                or has_side_effects(a.child_by_field_name("right")) \
                or any(n.type in ("assignment_expression", "update_expression", "call_expression") for n in walk(left)):
            continue
        dst = "&" + text(left)
        t = _pointee(st, stmt, dst)
        if t is None or t != _pointee(st, stmt, srcp) or t not in COPY_SIZES:
            continue
        out[stmt.start_byte] = (stmt, base.text.decode(), g, dst, srcp, COPY_SIZES[t])
    return out


def _quiet(node, fills: dict[int, tuple], names: set[str], params: set[str], funcs: set[str]) -> bool:
    """Nothing in `node` outside the fills names S or G, writes through a pointer parameter, passes
    one to a call, calls a function of this file (it could read the tile), jumps, synchronizes or
    copies asynchronously."""
    for n in walk(node):
        if any(f[0].start_byte <= n.start_byte < f[0].end_byte for f in fills.values()):
            continue
        if n.type in _JUMPS or n.type == "gnu_asm_expression" or (n.type == "identifier" and n.text.decode() in names):
            return False
        if n.type == "call_expression":
            name = call_name(n) or ""
            args = n.child_by_field_name("arguments")
            if name in funcs or re.match(r"(__syncthreads|__syncwarp|__pipeline|__barrier|cuda::|memcpy_async|asm)",
                                         name) or (args is not None and _names(args) & params):
                return False
        if n.type in ("assignment_expression", "update_expression"):
            t = n.child_by_field_name("left") or n.child_by_field_name("argument")
            if t is not None and _names(t) & params:
                return False
    return True


def _barrier(st: Source, k, fill, fills: dict[int, tuple], params: set[str], funcs: set[str]):
    """The `__syncthreads();` statement that publishes `fill`, or None (see the module docstring)."""
    stmt, s_name, g_name = fill[0], fill[1], fill[2]
    names = {s_name, g_name}
    node = stmt
    while True:
        parent = node.parent
        if parent is None or same(node, k.body):
            return None
        if parent.type == "compound_statement":
            after = [c for c in parent.named_children if c.start_byte >= node.end_byte and c.type != "comment"]
            for c in after:
                if _is_barrier(c):
                    return c
                if not _quiet(c, fills, names, params, funcs):
                    return None
        elif parent.type in _LOOPS:
            lv = loop_var(st, parent) if parent.type == "for_statement" else None
            if lv is None or lv[1] not in _names(stmt.named_children[0].child_by_field_name("left")):
                return None  # one destination per iteration: the fill must index S with the loop's variable
            if not _quiet(parent, fills, names, params, funcs):  # the whole loop runs again after the fill
                return None
        elif parent.type == "if_statement":
            cond = parent.child_by_field_name("condition")
            others = [c for c in parent.named_children if not same(c, node) and not same(c, cond)]
            if any(s_name in _names(o) for o in others):
                return None  # a zero-filling (or any other) branch that writes the tile another way
        elif parent.type != "else_clause":
            return None
        node = parent


def async_copy_fill(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    st = structural(src)
    per = []
    for k in kernels(st):
        shared = {name for decl, name, dims in st.shared_decls if k.node.start_byte <= decl.start_byte < k.node.end_byte
                  or st.function_at(decl.start_byte) is None}
        shared = {n for n in shared if not _volatile_shared(st, n) and _only_subscripted(k, n)}
        params = {n for n, p in pointer_params(k.sig).items() if p.pointer_depth == 1}
        fills = _fills(st, k, shared, params)
        groups: dict[int, list] = {}
        for f in fills.values():
            b = _barrier(st, k, f, fills, params, {f.name for f in st.funcs if f.name})
            if b is not None:
                groups.setdefault(b.start_byte, [b]).append(f)
        edits = []
        for b, *fs in groups.values():
            dsts = [" ".join(f[3].split()) for f in fs]
            if len(set(dsts)) != len(dsts):
                continue  # two copies in flight to one element finish in either order
            for stmt, _, _, dst, srcp, size in fs:
                edits.append(Edit(stmt.start_byte, stmt.end_byte, f"__pipeline_memcpy_async({dst}, {srcp}, {size});"))
            ind = indent_at(st, b.start_byte)
            edits.append(Edit(b.start_byte, b.start_byte, f"__pipeline_commit();\n{ind}__pipeline_wait_prior(0);\n{ind}"))
        per.append((k.name, edits, " ".join(text(fills[edits[0].start][0]).split()) if edits else ""))
    include = []
    if not re.search(rb"(?m)^[ \t]*#[ \t]*include[ \t]*[<\"]cuda_pipeline(_primitives)?\.h[>\"]", src.code):
        pos = 0
        for m in re.finditer(rb"(?m)^[ \t]*#[ \t]*include[^\n]*\n", src.raw):
            pos = m.end()
        include = [Edit(pos, pos, "#include <cuda_pipeline.h>\n")]
    return per_kernel_and_all(src, "async_copy_fill", per, "shared tiles filled by asynchronous copies",
                              extra=include)


def _volatile_shared(st: Source, name: str) -> bool:
    for decl, n, _ in st.shared_decls:
        if n == name and re.search(rb"\bvolatile\b", st.code[decl.start_byte:decl.end_byte]):
            return True
    return False


def _only_subscripted(k, name: str) -> bool:
    """Every use of the shared array in the kernel is a subscript whose address is not taken."""
    for n in walk(k.body):
        if n.type == "identifier" and n.text.decode() == name:
            p = n.parent
            if p is not None and p.type.endswith("declarator") and same(p.child_by_field_name("declarator"), n):
                continue  # its declaration
            if p is None or p.type != "subscript_expression" or not same(p.child_by_field_name("argument"), n):
                return False
            while p.parent is not None and p.parent.type == "subscript_expression" and \
                    same(p.parent.child_by_field_name("argument"), p):
                p = p.parent
            if p.parent is not None and p.parent.type == "pointer_expression" and p.parent.children[0].type == "&":
                return False
    return True


# One rewrite serves both operators: it adds the copy async_copy_to_sync makes plain and the
# commit / wait drop_pipeline_sync deletes.
PAIR = Pair(AsyncCopyToSync, (Rewrite("async_copy_fill", "async_copy", async_copy_fill),))
