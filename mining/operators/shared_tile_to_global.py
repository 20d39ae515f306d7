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
"""
from __future__ import annotations

from mining.operators.base import Operator
from mining.operators.fill_forwarding import forward_fill
from mining.operators.rewrite_util import structural


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
                yield plan.edit
