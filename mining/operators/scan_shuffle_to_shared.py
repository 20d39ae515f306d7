"""scan_shuffle_to_shared: the `__shfl_up_sync` of a warp scan becomes an exchange through shared
memory, exactly as shuffle_to_shared rewrites other shuffles (see that module for the rewrite and
why it is sound): `const int t = __shfl_up_sync(m, incl, off);` becomes

    ks_xchg_int[ks_tid] = incl;
    __syncwarp(m);
    const int t = ks_xchg_int[(ks_tid & 31) >= off ? ks_tid - off : ks_tid];
    __syncwarp(m);

Lanes below the offset read their own slot (their own value), as `__shfl_up_sync` returns it; the
scan's `lane >= off` guard then ignores it. Sites are the calls the warp_scan detector reports.

Forward, `warp_scan` (also serves block_scan skills): warp_per_row that also splits serial
running-sum loops across the warp (shuffle_to_shared.py holds the machinery): each pass takes 32
consecutive elements, an inclusive `__shfl_up_sync` scan gives every lane its prefix, reads of the
running value before its update see the exclusive prefix and later ones the inclusive one, and
lane 31's total carries into the next pass. Sound because a prefix sum over consecutive chunks
with a carried total is the serial running sum, element by element.
"""
from __future__ import annotations

from mining.carriers import warp_scan_sites
from mining.operators.base import Context, Materialization, Operator, Pair, Rewrite
from mining.operators.rewrite_util import node_at, structural
from mining.operators.shuffle_to_shared import all_kernels_too, first_hoist_per_scope


class ScanShuffleToShared(Operator):
    name = "scan_shuffle_to_shared"
    carrier = "warp_scan"
    description = "exchange a warp scan's shuffle-up through a shared-memory slot per thread with __syncwarp"

    def edits(self, src):
        st = structural(src)
        calls = [node_at(st, s.start_byte, s.end_byte, "call_expression") for s in warp_scan_sites(src)]
        yield from first_hoist_per_scope(st, [c for c in calls if c is not None])


# --------------------------------------------------------------------------- forward half
def warp_scan(source: str, ctx: Context) -> list[Materialization]:
    """warp_per_row that also splits running-sum (scan) loops across the warp: each pass takes 32
    consecutive elements, an inclusive `__shfl_up_sync` scan gives every lane its prefix, reads
    of the running value before its update see the exclusive prefix and later ones the
    inclusive one, and lane 31's total carries to the next pass."""
    return [m for m in all_kernels_too(source, ctx, True) if "scan" in m.description]


PAIR = Pair(ScanShuffleToShared, (Rewrite("warp_scan", "warp_scan", warp_scan, prior=9.0, serves=("block_scan",)),))
