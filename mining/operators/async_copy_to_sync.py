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

Forward: none yet. No deterministic rewrite introduces this carrier; `skills optimize` applies
this operator's skills through the LLM materializer only (the pair's forward half is empty).
"""
from __future__ import annotations

import re

from corpora.code.nodes import call_name
from corpora.code.source import Source
from mining.operators.base import Edit, Operator, Pair
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
            types = [_element_type(st, call.start_byte, a) for a in (dst, srcp)]
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


PAIR = Pair(AsyncCopyToSync)
