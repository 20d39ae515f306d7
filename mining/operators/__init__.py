"""Deterministic deoptimization operators (DESIGN.md "Mining: the backward walk").

Each operator removes one carrier at one site by a byte-range rewrite of the original text;
`all_operators()` is the registry, in a fixed order.
"""
from __future__ import annotations

from mining.operators.base import Edit, Operator, splice
from mining.operators.fast_math import FastMathToPrecise
from mining.operators.grid_clamp import DropGridClamp
from mining.operators.grid_stride import GridStrideToSingle
from mining.operators.launch_bounds import DropLaunchBounds
from mining.operators.ldg import LdgToPlainLoad
from mining.operators.restrict import DropRestrict
from mining.operators.shared_padding import DropSharedPadding
from mining.operators.unroll import DropUnrollPragma
from mining.operators.vector_load import VectorLoadToScalar
from mining.operators.vector_store import VectorStoreToScalar
from mining.operators.shuffle_to_shared import ShuffleToShared
from mining.operators.scan_shuffle_to_shared import ScanShuffleToShared
from mining.operators.shared_tile_to_global import SharedTileToGlobal
from mining.operators.shrink_register_tile import ShrinkRegisterTile
from mining.operators.double_to_single_buffer import DoubleToSingleBuffer
from mining.operators.register_cache_to_reload import RegisterCacheToReload
from mining.operators.privatized_to_global_atomics import PrivatizedToGlobalAtomics
from mining.operators.block_reduce_to_warp_atomics import BlockReduceToWarpAtomics
from mining.operators.warp_atomic_to_thread_atomics import WarpAtomicToThreadAtomics
from mining.operators.async_copy_to_sync import AsyncCopyToSync
from mining.operators.drop_pipeline_sync import DropPipelineSync
from mining.operators.sliding_window_to_reload import SlidingWindowToReload
# carrier-recall operators (helper A1)
from mining.operators.block_reduce_to_serial import BlockReduceToSerial
from mining.operators.register_array_to_recompute import RegisterArrayToRecompute
from mining.operators.online_softmax_to_two_pass import OnlineSoftmaxToTwoPass
from mining.operators.block_stride_to_chunks import BlockStrideToChunks
from mining.operators.online_rescale_to_two_pass import OnlineRescaleToTwoPass
from mining.operators.chan_stats_to_two_pass import ChanStatsToTwoPass

_CLASSES = (DropUnrollPragma, DropRestrict, LdgToPlainLoad, DropLaunchBounds, FastMathToPrecise, DropSharedPadding,
            VectorLoadToScalar, VectorStoreToScalar, GridStrideToSingle, DropGridClamp,
            ShuffleToShared, ScanShuffleToShared, SharedTileToGlobal, ShrinkRegisterTile, DoubleToSingleBuffer,
            RegisterCacheToReload, PrivatizedToGlobalAtomics, BlockReduceToWarpAtomics, WarpAtomicToThreadAtomics,
            AsyncCopyToSync, DropPipelineSync, SlidingWindowToReload)
_CLASSES += (BlockReduceToSerial, RegisterArrayToRecompute, OnlineSoftmaxToTwoPass, BlockStrideToChunks,
             OnlineRescaleToTwoPass, ChanStatsToTwoPass)
# carrier-recall operators (helper A2)
from mining.operators.register_tile_to_dot import RegisterTileToDot  # noqa: E402
from mining.operators.untranspose_tile import UntransposeTile  # noqa: E402
from mining.operators.lookback_to_chained import LookbackToChained  # noqa: E402
from mining.operators.block_scan_to_thread_totals import BlockScanToThreadTotals  # noqa: E402
_CLASSES += (RegisterTileToDot, UntransposeTile, LookbackToChained, BlockScanToThreadTotals)
# generic simplifications found by meaning (issue 19)
from mining.operators.drop_specialized_dispatch import DropSpecializedDispatch  # noqa: E402
from mining.operators.block_per_row_to_thread import BlockPerRowToThread  # noqa: E402
from mining.operators.cache_hints import HINT_OPERATORS  # noqa: E402
from mining.operators.shrink_work_constant import ShrinkWorkConstant  # noqa: E402
from mining.operators.swap_thread_axes import SwapThreadAxes  # noqa: E402
from mining.operators.block_swizzle_to_natural import BlockSwizzleToNatural  # noqa: E402
from mining.operators.half2_to_scalar import Half2ToScalar  # noqa: E402
_CLASSES += (DropSpecializedDispatch, BlockPerRowToThread, ShrinkWorkConstant, SwapThreadAxes, BlockSwizzleToNatural,
             Half2ToScalar) + HINT_OPERATORS


def all_operators() -> list[Operator]:
    return [cls() for cls in _CLASSES]


def get_operator(name: str) -> Operator:
    for op in all_operators():
        if op.name == name:
            return op
    raise KeyError(name)


__all__ = ["Edit", "Operator", "splice", "all_operators", "get_operator"] + [c.__name__ for c in _CLASSES]
