"""grid_stride_to_single: a grid-stride loop `for (T i = start; cond; i += stride) body` becomes
one element per thread: `{ T i = start; if (cond) body }`.

The while form `while (i < n) { ...; i += gridSize; }` (the update the body's last statement and
only write of `i`) becomes `if (i < n) { ... }`, the update kept: the one iteration, final value
included. A loop spelled by a macro (`#define CUDA_1D_KERNEL_LOOP(i, n) for (int i = ..; i < (n); i += step)`
invoked as `CUDA_1D_KERNEL_LOOP(i, n) { body }`) is rewritten from its expansion, in place of the
invocation and its body.

Correct only when the launch provides a thread for every element; the operator does not try to
prove that (the host clamps grids in many kernels): the gate rejects the rewrite when the
launch does not cover the range. Loops whose body uses `break` / `continue` are not sites.

A loop whose variable is declared outside it (`int i = ...; for (; i + s < n; i += 2 * s)`, an
unrolled main loop followed by a remainder loop that continues from its final `i`) becomes one
guarded iteration that still advances the variable when the rest of the function reads it:
`if (cond) { body  i += stride; }`. With a covering launch the loop ran at most once, and this
is that one iteration, final value included.

Forward, `grid_stride`: a one-element-per-thread kernel (`i = blockIdx.x * blockDim.x +
threadIdx.x;` then an early return or an `if (i < n)` guard, no barriers, shuffles or shared
memory, no other use of the thread indices) becomes a grid-stride loop over `i < n`, and its
launches are clamped to the resident grid (grid_clamp.py). Sound because the loop visits every
`i` the original grid covered, each exactly once, whatever the grid size; the body has no
cross-thread communication that would depend on which thread runs which `i`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.carriers import grid_stride_loops, grid_stride_whiles, macro_grid_stride_loops
from mining.operators.base import (Context, Edit, Materialization, Operator, Pair, Rewrite, candidate, raw_text,
                                   rewrite_range)
from mining.operators.grid_clamp import GRID_PER_SM, clamp_edits
from mining.operators.nodes import (IndexDecl, Kernel, bare_jumps, code, global_index_axis, has_loop, indent_at,
                                    index_decls, kernels, loop_var, raw, reindent, returns_or_syncs, split_top,
                                    statements, strip_parens)
from corpora.code.parse import text


class GridStrideToSingle(Operator):
    name = "grid_stride_to_single"
    carrier = "grid_stride"
    description = "replace a grid-stride loop by one guarded element per thread"

    def edits(self, src):
        for loop in grid_stride_loops(src):
            edit = self._loop_edit(src, loop)
            if edit is not None:
                yield edit
        for loop in grid_stride_whiles(src):
            # `while (i < n) { ...; i += stride; }` runs at most once under a covering launch: `if`
            body = loop.child_by_field_name("body")
            if src.raw[loop.start_byte:loop.start_byte + 5] == b"while" and \
                    not re.search(rb"\b(break|continue)\b", src.code[body.start_byte:body.end_byte]):
                yield Edit(loop.start_byte, loop.start_byte + 5, "if")
        for m in macro_grid_stride_loops(src):
            # the loop a macro spells (CUDA_1D_KERNEL_LOOP(i, n) { body }): rewrite its expansion in place
            start = m.node.start_byte
            expanded = Source((src.raw[:start] + m.loop.encode() + src.raw[m.node.end_byte:]).decode("utf-8", "replace"))
            loop = next((n for n in grid_stride_loops(expanded) if n.start_byte == start), None)
            edit = self._loop_edit(expanded, loop) if loop is not None else None
            if edit is not None and edit.start == start and edit.end == start + len(m.loop.encode()):
                yield Edit(start, m.node.end_byte, edit.replacement)

    def _loop_edit(self, src, loop) -> Optional[Edit]:
        init = loop.child_by_field_name("initializer")
        cond = loop.child_by_field_name("condition")
        body = loop.child_by_field_name("body")
        upd = loop.child_by_field_name("update")
        if cond is None or body is None or upd is None:
            return None
        if re.search(rb"\b(break|continue)\b", src.code[body.start_byte:body.end_byte]):
            return None
        guarded = f"if ({raw_text(src, cond.start_byte, cond.end_byte)}) "
        if init is not None and init.type == "declaration":
            rep = "{ " + raw_text(src, init.start_byte, init.end_byte).rstrip()
            if not rep.endswith(";"):
                rep += ";"
            rep += " " + guarded + raw_text(src, body.start_byte, body.end_byte) + " }"
            return Edit(loop.start_byte, loop.end_byte, rep)
        if init is not None and init.type not in ("assignment_expression", "comma_expression"):
            return None
        var = re.match(r"^(\w+)\s*\+=", " ".join(text(upd).split())).group(1)
        rep = guarded + self._advance(src, loop, body, " ".join(text(upd).split()), var)
        if init is not None:
            rep = "{ " + raw_text(src, init.start_byte, init.end_byte) + "; " + rep + " }"
        return Edit(loop.start_byte, loop.end_byte, rep)

    @staticmethod
    def _advance(src, loop, body, update: str, var: str) -> str:
        """The body, followed by the update when the function reads the variable after the loop."""
        f = src.function_at(loop.start_byte)
        later = src.code[loop.end_byte:f.end_byte] if f is not None else b""
        raw = raw_text(src, body.start_byte, body.end_byte)
        if not re.search(rb"\b" + re.escape(var.encode()) + rb"\b", later):
            return raw
        if body.type != "compound_statement":
            return "{ " + raw + " " + update + "; }"
        head = raw[:-1]
        stripped = head.rstrip(" \t")
        if stripped.endswith("\n"):
            closing = head[len(stripped):]
            inner = next((_indent(src, c.start_byte) for c in body.named_children if c.type != "comment"),
                         closing + "    ")
            return stripped + inner + update + ";\n" + closing + "}"
        return head.rstrip() + " " + update + "; }"


def _indent(src, byte: int) -> str:
    a = src.raw.rfind(b"\n", 0, byte) + 1
    m = re.match(rb"[ \t]*", src.raw[a:byte])
    return m.group(0).decode() if m else ""


# --------------------------------------------------------------------------- forward half
@dataclass
class OneElement:
    """`T i = gidx; if (i >= n) return; REST` or `T i = gidx; ... if (i < n ...) STMT` in a kernel."""
    kernel: Kernel
    decl: IndexDecl
    bound: str  # n
    rest_start: int  # byte range of the statements that become the loop body
    rest_end: int
    drop_guard: Optional[Node]  # the early-return guard to delete
    unwrap: Optional[Node] = None  # `if (i < n) S` whose only condition is the bound: the loop body is S


def one_element(src: Source, k: Kernel) -> Optional[OneElement]:
    c = code(src, k.body)
    if re.search(r"\b(threadIdx|blockIdx)\s*\.\s*[yz]\b|__syncthreads|__shared__|__shfl", c):
        return None
    decls = [d for d in index_decls(src, k) if d.axis == "x"]
    if len(decls) != 1:
        return None
    d = decls[0]
    sts = statements(k.body)
    pos = next(i for i, s in enumerate(sts) if s.start_byte == d.stmt.start_byte)
    rest = sts[pos + 1:]
    if not rest:
        return None
    # threadIdx/blockIdx only in the index declaration
    others = [s for s in sts if s.start_byte != d.stmt.start_byte]
    if any(re.search(r"\b(threadIdx|blockIdx|blockDim|gridDim)\b", code(src, s)) for s in others):
        return None
    first = rest[0]
    i = re.escape(d.name)
    if first.type == "if_statement" and first.child_by_field_name("alternative") is None:
        cond = strip_parens(code(src, first.child_by_field_name("condition")))
        cons = first.child_by_field_name("consequence")
        if cons is not None and re.fullmatch(r"\{?\s*return\s*;\s*\}?", code(src, cons)):
            m = re.fullmatch(r"%s\s*>=\s*(.+)" % i, cond) or re.fullmatch(r"(.+?)\s*<=\s*%s" % i, cond)
            if not m:
                return None
            body = rest[1:]
            if not body or any(returns_or_syncs(src, s) or bare_jumps(src, s) or has_loop(s) for s in body):
                return None
            return OneElement(k, d, m.group(1), body[0].start_byte, body[-1].end_byte, first)
    # guard form: the last statement is `if (i < n && ...) ...` and everything is inside the loop
    last = rest[-1]
    if last.type != "if_statement" or last.child_by_field_name("alternative") is not None:
        return None
    cond = strip_parens(code(src, last.child_by_field_name("condition")))
    bound = None
    for part in split_top(cond, "&&"):
        m = re.fullmatch(r"%s\s*<\s*(.+)" % i, strip_parens(part))
        if m:
            bound = m.group(1)
            break
    if bound is None or any(returns_or_syncs(src, s) or bare_jumps(src, s) or has_loop(s) for s in rest):
        return None
    unwrap = last if len(split_top(cond, "&&")) == 1 else None
    return OneElement(k, d, bound, rest[0].start_byte, rest[-1].end_byte, None, unwrap)


def _stride_expr(ty: str) -> str:
    t = " ".join(ty.replace("const", "").split())
    if t in ("int", "unsigned", "unsigned int", ""):
        return "gridDim.x * blockDim.x"
    return f"({t})gridDim.x * blockDim.x"


def grid_stride_edits(src: Source, oe: OneElement) -> list[Edit]:
    d = oe.decl
    ty = " ".join(d.type.replace("const", "").split())
    ind = indent_at(src, d.stmt.start_byte)
    if oe.unwrap is not None:
        cons = oe.unwrap.child_by_field_name("consequence")
        inner = statements(cons) if cons.type == "compound_statement" else [cons]
        edits = [Edit(oe.unwrap.start_byte, oe.unwrap.end_byte,
                          "\n".join(reindent(raw(src, x), ind + "    ").strip() for x in inner) if inner else ";")]
        body = rewrite_range(src, oe.rest_start, oe.rest_end, edits)
    else:
        body = rewrite_range(src, oe.rest_start, oe.rest_end, [])
    loop = (f"for ({ty} {d.name} = {raw(src, d.value)}; {d.name} < {oe.bound}; {d.name} += {_stride_expr(ty)}) {{\n"
            f"{reindent(body, ind + '    ', first=True)}\n{ind}}}")
    return [Edit(d.stmt.start_byte, oe.rest_end, loop)]


def grid_stride(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    out = []
    for k in kernels(src):
        oe = one_element(src, k)
        if oe is None:
            continue
        edits = grid_stride_edits(src, oe)
        clamp = clamp_edits(src, k.name)
        if clamp is None:
            continue
        out.append(candidate(src, edits + clamp, "grid_stride",
                        f"{k.name}: one element per thread -> grid-stride loop over `{oe.decl.name} < {oe.bound}`, "
                        f"launch clamped to {GRID_PER_SM} blocks per SM", excerpt=code(src, oe.decl.stmt)))
    return out


def grid_stride_x_loops(src: Source, k: Kernel) -> list[tuple[Node, str, str, str, str]]:
    """Grid-stride loops over x: (loop, type, var, bound, stride text) with an index-start init."""
    out = []
    for loop in grid_stride_loops(src):
        if not (k.body.start_byte <= loop.start_byte < k.body.end_byte):
            continue
        lv = loop_var(src, loop)
        cond = loop.child_by_field_name("condition")
        upd = loop.child_by_field_name("update")
        if lv is None or cond is None or upd is None or global_index_axis(lv[2]) != "x":
            continue
        m = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(lv[1]), code(src, cond))
        mu = re.fullmatch(r"%s\s*\+=\s*(.+)" % re.escape(lv[1]), code(src, upd))
        if not m or not mu:
            continue
        out.append((loop, lv[0], lv[1], m.group(1), mu.group(1)))
    return out


PAIR = Pair(GridStrideToSingle, (Rewrite("grid_stride", "grid_stride", grid_stride, prior=1.5),))
