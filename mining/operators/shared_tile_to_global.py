"""shared_tile_to_global: a shared-memory tile that is filled from global memory by one plain
assignment and otherwise only read is removed; every read loads its element straight from global
memory instead.

    As[threadIdx.y][threadIdx.x] = (row < M && t + threadIdx.x < K) ? A[row * K + t + threadIdx.x] : 0.0f;
    ... acc += As[threadIdx.y][k] * ...
->  ... acc += ((row < M && t + k < K) ? A[row * K + t + k] : 0.0f) * ...

Each read `T[a][b]` becomes the fill expression with the fill indices replaced by the read's
(`threadIdx.y -> a`, `threadIdx.x -> b`; a summand index such as `threadIdx.y + i` is replaced as a
whole), the fill (with its now empty loop) and the declaration are deleted. The substitution is
only made when it is provably the value the read saw: see `fill_forwarding` for the conditions
(fill indices are variable terms or sums, every thread-specific variable reaches the value only
through them, the value reads no shared memory and no global memory the kernel writes, every
other variable is unchanged between fill and read, guards become `G ? E : 0`). The same edit
removes `coalesced_transpose`, `transposed_tile` and `halo_tile` when it removes their tile.
Tiles filled through vector stores, double-buffered tiles or tiles filled from registers are not
sites until other operators have made them plain.

Register budget: when the forwarded global loads land in a loop nest that `#pragma unroll` unrolls
completely and the nest would then issue more loads per thread than the kernel's block size leaves
registers for (see `unroll_budget`), the same edit also drops that nest's outermost `#pragma unroll`
(again until the nest fits): `tiled_matmul` with both tiles forwarded into its unrolled 32-step
product loop otherwise needs 80 registers per thread where its 1024-thread block allows 64, and
fails to launch on the GPU although the CPU executor runs it.
"""
from __future__ import annotations


from corpora.code.source import Source
from mining.operators.base import Edit, Operator, splice
from mining.operators.fill_forwarding import forward_fill
from mining.operators.rewrite_util import pragma_before, structural
from mining.operators.unroll_budget import load_budget, unroll_factor, unrolled_loads


class SharedTileToGlobal(Operator):
    name = "shared_tile_to_global"
    carrier = "shared_tile"
    description = "replace reads of a once-filled shared tile by the global loads that filled it"

    def edits(self, src):
        src = structural(src)
        for decl, name, dims in src.shared_decls:
            if not dims or b"extern" in src.code[decl.start_byte:decl.end_byte]:
                continue
            f = src.function_at(decl.start_byte)
            fn = src.func_node(f) if f is not None else None
            if fn is None:
                continue
            plan = forward_fill(src, fn, decl, name, len(dims), private=False)
            if plan is not None:
                yield within_register_budget(src, f.start_byte, plan.edit)


def within_register_budget(src: Source, fstart: int, edit: Edit, rounds: int = 8) -> Edit:
    """`edit`, widened to also drop the `#pragma unroll` of every fully unrolled loop nest that the
    rewrite leaves over the kernel's load budget (the nest overlaps the rewritten text)."""
    raw = src.raw
    new = splice(raw, edit).encode()
    lo, hi = edit.start, edit.start + len(edit.replacement.encode())
    for _ in range(rounds):
        nsrc = structural(Source(new))
        f = nsrc.function_at(fstart)
        fn = nsrc.func_node(f) if f is not None else None
        if fn is None:
            break
        budget = load_budget(nsrc, f.name)
        drop = None
        for loop in nsrc.nodes("for_statement", within=fn):
            if unroll_factor(nsrc, loop) <= 1 or loop.end_byte <= lo or loop.start_byte >= hi:
                continue
            if _unrolled_ancestor(nsrc, loop):
                continue  # counted with its outermost unrolled loop
            if unrolled_loads(nsrc, f, loop) > budget:
                drop = pragma_before(nsrc, loop.start_byte)
                break
        if drop is None:
            break
        end = new.find(b"\n", drop)
        end = len(new) if end < 0 else end + 1
        new = new[:drop] + new[end:]
        if drop < lo:
            lo -= end - drop
        hi -= end - drop if drop < hi else 0
    if new == splice(raw, edit).encode():
        return edit
    # the smallest byte range of the original that covers every change (and the original edit)
    p = 0
    limit = min(edit.start, len(new))
    while p < limit and raw[p] == new[p]:
        p += 1
    s = 0
    limit = min(len(raw) - edit.end, len(new) - p)
    while s < limit and raw[len(raw) - 1 - s] == new[len(new) - 1 - s]:
        s += 1
    return Edit(p, len(raw) - s, new[p:len(new) - s].decode("utf-8"))


def _unrolled_ancestor(src: Source, loop) -> bool:
    p = loop.parent
    while p is not None and p.type not in ("function_definition", "lambda_expression"):
        if p.type == "for_statement" and unroll_factor(src, p) > 1:
            return True
        p = p.parent
    return False
