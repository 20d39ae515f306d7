"""Order, not just a set: the sequence in which valued skills can be applied, and a short plan.

Some optimizations build on others. A register tile is loaded from a shared tile; vectorized
shared loads read a register tile's fragments; a block-level reduction folds warp-level partials;
a block scan extends a warp scan. Ranking by value alone can put the later step first (a register
tile is worth more than the shared tile it is loaded from). ``order`` keeps the value order except
where a constraint says otherwise: an entry waits until every entry it comes after (AFTER below,
plus the skill records' own ``requires``) is placed, and among the entries that may go next the
most valuable goes first (a topological sort that prefers value).

``make_plan`` cuts that order into a short plan: the structural entries expected to buy at least
MIN_GAIN, up to ``max_steps``, each with the earlier steps it builds on, then the qualifiers as
one last step. ``skills query --plan`` returns it; `skills optimize` gates its candidates in this
order (prompts/optimize_plan.py).
"""
from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

# carrier -> carriers that come first when both are in the answer (soft order: each may also
# apply alone). Hard prerequisites are the records' `requires` (mining/lift.py REQUIRES).
AFTER: dict[str, tuple[str, ...]] = {
    "register_tile": ("shared_tile",),
    "vector_shared_load": ("shared_tile", "register_tile", "transposed_tile"),
    "shared_vector_load": ("shared_tile", "register_tile", "transposed_tile"),
    "transposed_tile": ("shared_tile", "register_tile"),
    "double_buffer": ("shared_tile", "register_tile", "transposed_tile"),
    "async_copy": ("shared_tile", "double_buffer"),
    "multi_stage_pipeline": ("async_copy", "shared_tile", "register_tile", "double_buffer"),
    "shared_padding": ("shared_tile", "coalesced_transpose", "transposed_tile"),
    "tensor_core_wmma": (),
    "block_reduce_shared": ("warp_shuffle_reduce", "warp_per_row", "block_per_row"),
    "atomic_per_block": ("warp_shuffle_reduce", "block_reduce_shared"),
    "block_scan": ("warp_scan",),
    "decoupled_lookback": ("warp_scan", "block_scan", "dynamic_tile_id"),
    "register_cache": ("warp_per_row", "block_per_row", "warp_shuffle_reduce"),
    "online_softmax": ("warp_per_row", "block_per_row", "warp_shuffle_reduce"),
    "single_pass_stats": ("warp_per_row", "block_per_row", "warp_shuffle_reduce"),
    # the reduction ladder in Harris's order: each rung builds on the tree the one before leaves
    "sequential_addressing": ("divergence_free_indexing",),
    "first_add_during_load": ("divergence_free_indexing", "sequential_addressing"),
    "unrolled_last_warp": ("divergence_free_indexing", "sequential_addressing", "first_add_during_load"),
    "compile_time_unroll": ("divergence_free_indexing", "sequential_addressing", "unrolled_last_warp"),
}
MIN_GAIN = 1.02  # a plan step is expected to make the kernel at least this much faster
PLAN_STEPS = 5


def predecessors(carrier: str, requires: Iterable[str] = ()) -> set[str]:
    return set(AFTER.get(carrier, ())) | set(requires or ())


def order(entries: Sequence[Any], carrier_of, score_of, requires_of=lambda e: (), gain_of=None) -> list[Any]:
    """Entries in an order that can be applied: among the entries whose predecessors (present ones
    they build on) are placed, the most valuable next (ties: the given order). ``carrier_of`` /
    ``score_of`` / ``requires_of`` read an entry. With ``gain_of`` (an entry's expected time ratio
    here), a soft predecessor (AFTER) expected to buy less than MIN_GAIN is not waited for: no plan
    takes that step, so nothing needs to come after it; a record's ``requires`` is always waited for."""
    left = list(entries)
    present = {carrier_of(e) for e in left}
    worth = {carrier_of(e) for e in left if gain_of is None or gain_of(e) >= MIN_GAIN}
    placed: set[str] = set()
    out = []

    def waits_for(e) -> set[str]:
        c = carrier_of(e)
        return ((set(AFTER.get(c, ())) & worth) | (set(requires_of(e) or ()) & present)) - placed - {c}

    while left:
        ready = [e for e in left if not waits_for(e)]
        pool = ready or left  # a cycle cannot come from AFTER; records could make one
        pick = max(pool, key=lambda e: (score_of(e), -left.index(e)))
        out.append(pick)
        placed.add(carrier_of(pick))
        left.remove(pick)
    return out


def make_plan(hits: Sequence[dict], max_steps: int = PLAN_STEPS) -> dict:
    """A short plan from the answer's hits (ordered by ``order``): structural steps expected to buy
    at least MIN_GAIN, then the "also" entry's qualifiers as one step. Each step names the earlier
    steps it comes after."""
    steps: list[dict] = []
    left_out: list[dict] = []
    planned: set[str] = set()
    also = None
    for h in hits:
        if h.get("kind") == "also":
            also = h
            continue
        v = h.get("value") or {}
        gain = float(v.get("expected_time_ratio") or 1.0)
        after_flags = [f.split(":", 1)[1].split(",") for f in h.get("flags", []) if f.startswith("after:")]
        needs = {c for grp in after_flags for c in grp}
        if gain < MIN_GAIN:
            left_out.append({"key": h["key"], "reason": f"expected x{gain:.3f} here (below x{MIN_GAIN})"})
            continue
        if needs - planned:
            left_out.append({"key": h["key"], "reason": "builds on " + ", ".join(sorted(needs - planned)) +
                             ", which no earlier step introduces"})
            continue
        if len(steps) >= max_steps:
            left_out.append({"key": h["key"], "reason": f"beyond the plan's {max_steps} steps"})
            continue
        before = sorted(predecessors(h.get("carrier", ""), h.get("requires") or []) & planned)
        site = (h.get("applies_at") or [{}])[0]
        steps.append({"step": len(steps) + 1, "skill_id": h["skill_id"], "key": h["key"], "name": h.get("name", ""),
                      "carrier": h.get("carrier", ""), "expected_time_ratio": gain,
                      "after": before, "at": {k: site.get(k) for k in ("line", "end_line", "function")} if site else {},
                      "why": h.get("why_rank", "")})
        planned.add(h.get("carrier", ""))
    if also is not None:
        steps.append({"step": len(steps) + 1, "kind": "also", "skill_ids": [s["skill_id"] for s in also["skills"]],
                      "keys": [s["key"] for s in also["skills"]], "carriers": [s["carrier"] for s in also["skills"]],
                      "after": sorted(planned), "why": also.get("why_rank", "")})
    total = 1.0
    for s in steps:
        total *= float(s.get("expected_time_ratio") or 1.0)
    return {"steps": steps, "left_out": left_out, "expected_time_ratio": round(total, 3),
            "note": "expected ratios multiply only if the steps' gains are independent; each is gated on its own"}


def plan_order(carriers: Sequence[str], scores: Optional[Sequence[float]] = None) -> list[int]:
    """Indices of ``carriers`` in plan order (value order given by ``scores``, else as given)."""
    idx = list(range(len(carriers)))
    if scores is not None:
        idx.sort(key=lambda i: -scores[i])
    return order(idx, lambda i: carriers[i], lambda i: scores[i] if scores is not None else 0.0)
