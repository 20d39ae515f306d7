"""The one registry of operators: every pair, both directions, in the walk's priority order.

`PAIRS` is the only table. Its order is the CPU walk's fixed priority (`skills mine --strategy
priority` proposes candidates operator by operator in this order, then by position in the file):
local, declarative carriers first (a pragma, a qualifier, an intrinsic), then access-width and
data-movement rewrites, then structural ones. Removing vector accesses and double buffers first is
what makes a shared tile's fill simple enough for shared_tile_to_global. After those, the
single-level / recomputed / two-pass forms: a block-stride loop is split into per-thread chunks only
where one element per thread was refused, and before the softmax max gets a pass of its own (a max
over a subset of the row still normalizes correctly: one element per thread in that pass would pass
the gate while computing another max). Splitting a flash-style sweep into a max pass and an
accumulation pass duplicates the sweep, so every other simplification of it comes first.

The forward direction is read off the same pairs: a skill mined by operator O is materialized by
the rewrites that invert O (`Pair.inverses`), then by the rewrites that invert any operator
removing the skill's carrier, then by rewrites that declare that carrier in `Rewrite.serves`
(skills mined by the LLM operator carry only a carrier). How to add an operator:
docs/architecture.md, "Operators".
"""
from __future__ import annotations

from mining.operators import block_tree_to_thread_sum
from mining.operators import register_state_to_shared
from mining.operators import fragment_to_shared_reads, register_tile_per_output
from mining.operators import (async_copy_to_sync, devectorize, block_swizzle_to_natural, half2_to_scalar, block_per_row_to_thread, cache_hints, drop_specialized_dispatch,
                              shrink_work_constant, swap_thread_axes, block_reduce_to_serial, block_reduce_to_warp_atomics,
                              block_scan_to_thread_totals, block_stride_to_chunks, chan_stats_to_two_pass,
                              double_to_single_buffer, drop_pipeline_sync, sequential_to_interleaved, strided_to_modulo,
                              unrolled_tree_to_loop, warp_tail_to_loop, fast_math, grid_clamp, grid_stride,
                              launch_bounds, ldg, lookback_to_chained, online_rescale_to_two_pass,
                              online_softmax_to_two_pass, privatized_to_global_atomics, register_array_to_recompute,
                              register_cache_to_reload, register_tile_to_dot, restrict, scan_shuffle_to_shared,
                              shared_padding, shared_tile_to_global, shrink_register_tile, shuffle_to_shared,
                              sliding_window_to_reload, untranspose_tile, unroll, vector_load, vector_store,
                              warp_atomic_to_thread_atomics, warp_per_row_to_thread)
from mining.operators.base import Operator, Pair, Rewrite

PAIRS: tuple[Pair, ...] = (
    # local, declarative carriers
    unroll.PAIR, launch_bounds.PAIR, restrict.PAIR, ldg.PAIR,
    *cache_hints.PAIRS,  # each cache hint under its own name (issue 19)
    fast_math.PAIR, half2_to_scalar.PAIR, block_swizzle_to_natural.PAIR, shared_padding.PAIR,
    # access width and data movement
    vector_store.PAIR, vector_load.PAIR, devectorize.PAIR, async_copy_to_sync.PAIR, drop_pipeline_sync.PAIR,
    double_to_single_buffer.PAIR, register_cache_to_reload.PAIR,
    # communication, then structure
    shuffle_to_shared.PAIR, scan_shuffle_to_shared.PAIR, block_reduce_to_warp_atomics.PAIR,
    warp_atomic_to_thread_atomics.PAIR, privatized_to_global_atomics.PAIR, shrink_register_tile.PAIR,
    shared_tile_to_global.PAIR, grid_clamp.PAIR, grid_stride.PAIR,
    # single-level, recomputed and two-pass forms; a warp or a block that cooperates on one row becomes
    # one thread per row before its sweeps are split into chunks or its reductions flattened (issue 19)
    warp_per_row_to_thread.PAIR, block_per_row_to_thread.PAIR,
    block_reduce_to_serial.PAIR, register_array_to_recompute.PAIR, block_stride_to_chunks.PAIR,
    online_softmax_to_two_pass.PAIR, chan_stats_to_two_pass.PAIR,
    # outer-product register tiles, transposed operand tiles, decoupled look-back, block scan
    register_tile_to_dot.PAIR, register_tile_per_output.PAIR, fragment_to_shared_reads.PAIR, untranspose_tile.PAIR, lookback_to_chained.PAIR, block_scan_to_thread_totals.PAIR,
    # the classic shared-memory reduction ladder walked down (Harris; mining/operators/reduction_tree.py): the
    # tree written out per stride becomes a loop, the unrolled last warp folds into it, sequential
    # addressing becomes interleaved, the strided index becomes the modulo test
    unrolled_tree_to_loop.PAIR, warp_tail_to_loop.PAIR, sequential_to_interleaved.PAIR, strided_to_modulo.PAIR,
    # a tree sum that only thread 0 reads, once no rung of the ladder is left to walk down (issue 19)
    block_tree_to_thread_sum.PAIR,
    # generic simplifications found by meaning (issue 19): a run-time dispatch to a specialized
    # instance goes once the fine-grained steps above have narrowed what they can of it; then a
    # compile-time constant that sizes one thread's work becomes 1; then the thread axes of a 2-D
    # kernel trade places (coalescing undone) once its tiles and vector accesses are plain
    drop_specialized_dispatch.PAIR, shrink_work_constant.PAIR, swap_thread_axes.PAIR,
    # the flash-loop split duplicates the sweep, so every other simplification of it comes first
    online_rescale_to_two_pass.PAIR,
    sliding_window_to_reload.PAIR,
    # a register array of running state moved to its thread's own shared slots: last, so register tiles
    # and caches are undone by their own operators first (issue 20)
    register_state_to_shared.PAIR,
)


def all_operators() -> list[Operator]:
    """Every backward half, in the walk's priority order."""
    return [p.operator() for p in PAIRS if p.operator is not None]


def skill_operator(name: str) -> str:
    """The operator a step of `name` is a skill of: its `skill_of` when it undoes another operator's
    optimization from another spelling, else itself."""
    p = _BY_OPERATOR.get(name)
    return (p.operator.skill_of or name) if p is not None else name


def get_operator(name: str) -> Operator:
    for p in PAIRS:
        if p.operator is not None and p.operator.name == name:
            return p.operator()
    raise KeyError(name)


def all_rewrites() -> dict[str, Rewrite]:
    """Every forward half by name, in registry order."""
    return {r.name: r for p in PAIRS for r in p.rewrites}


def get_rewrite(name: str) -> Rewrite:
    return _REWRITES[name]


def inverses(operator: str) -> list[str]:
    """The rewrites that undo a step of `operator`, in the order they are tried."""
    pair = _BY_OPERATOR.get(operator)
    return list(pair.inverses) if pair is not None else []


def rewrites_for_carrier(carrier: str) -> list[str]:
    """The rewrites that introduce `carrier`: the inverses of every operator removing it (walk
    order), then the rewrites that declare it in `serves`."""
    names = [n for p in PAIRS if p.operator is not None and p.operator.carrier == carrier for n in p.inverses]
    names += [r.name for r in _REWRITES.values() if carrier in r.serves]
    return list(dict.fromkeys(names))


def rewrites_for(operator: str, carrier: str) -> list[str]:
    """Forward rewrite names for a skill mined by `operator` for `carrier`: operator first, then carrier."""
    first = inverses(operator)
    return first + [n for n in rewrites_for_carrier(carrier) if n not in first]


def _check(pairs: tuple[Pair, ...]) -> tuple[dict[str, Pair], dict[str, Rewrite]]:
    """Names are unique and every inverse names a registered rewrite (checked at import)."""
    by_op: dict[str, Pair] = {}
    rewrites: dict[str, Rewrite] = {}
    for p in pairs:
        if p.operator is not None:
            if p.operator.name in by_op:
                raise ValueError(f"operator {p.operator.name} registered twice")
            by_op[p.operator.name] = p
        for r in p.rewrites:
            if r.name in rewrites:
                raise ValueError(f"rewrite {r.name} registered twice")
            rewrites[r.name] = r
    for p in pairs:
        missing = [n for n in p.inverses if n not in rewrites]
        if missing:
            raise ValueError(f"{p.name}: inverse {missing[0]} is not a registered rewrite")
        op = p.operator
        if op is not None and op.skill_of and (op.skill_of not in by_op or
                                               by_op[op.skill_of].operator.carrier != op.carrier):
            raise ValueError(f"{op.name}: skill_of {op.skill_of} is not a registered operator of carrier {op.carrier}")
    return by_op, rewrites


_BY_OPERATOR, _REWRITES = _check(PAIRS)

