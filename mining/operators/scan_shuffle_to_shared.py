"""scan_shuffle_to_shared: the `__shfl_up_sync` of a warp scan becomes an exchange through shared
memory, exactly as shuffle_to_shared rewrites other shuffles (see that module for the rewrite and
why it is sound): `const int t = __shfl_up_sync(m, incl, off);` becomes

    ks_xchg_int[ks_tid] = incl;
    __syncwarp(m);
    const int t = ks_xchg_int[(ks_tid & 31) >= off ? ks_tid - off : ks_tid];
    __syncwarp(m);

Lanes below the offset read their own slot (their own value), as `__shfl_up_sync` returns it; the
scan's `lane >= off` guard then ignores it. Sites are the calls the warp_scan detector reports.
"""
from __future__ import annotations

from mining.carriers import warp_scan_sites
from mining.operators.base import Operator
from mining.operators.rewrite_util import node_at, structural
from mining.operators.shuffle_to_shared import first_hoist_per_scope


class ScanShuffleToShared(Operator):
    name = "scan_shuffle_to_shared"
    carrier = "warp_scan"
    description = "exchange a warp scan's shuffle-up through a shared-memory slot per thread with __syncwarp"

    def edits(self, src):
        st = structural(src)
        calls = [node_at(st, s.start_byte, s.end_byte, "call_expression") for s in warp_scan_sites(src)]
        yield from first_hoist_per_scope(st, [c for c in calls if c is not None])
