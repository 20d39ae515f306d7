"""Rank fusion: reciprocal-rank fusion (Cormack et al. 2009) with optional per-ranking weights."""
from __future__ import annotations

from typing import Hashable, Mapping, Optional, Sequence

RRF_K = 60


def rrf(rankings: Sequence[Sequence[Hashable]], k: int = RRF_K,
        weights: Optional[Sequence[float]] = None) -> list[tuple[Hashable, float]]:
    """Fuse ranked lists (best first) into one: score(d) = sum_i w_i / (k + rank_i(d)).

    Ties are broken by first appearance order across the rankings, so the result is
    deterministic for deterministic inputs.
    """
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError("one weight per ranking")
    scores: dict[Hashable, float] = {}
    order: dict[Hashable, int] = {}
    for ranking, w in zip(rankings, weights):
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + w / (k + rank)
            order.setdefault(doc, len(order))
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))


def rank_by_score(scores: Mapping[Hashable, float]) -> list[Hashable]:
    """Keys by descending score (ties: key order of the mapping)."""
    order = {k: i for i, k in enumerate(scores)}
    return sorted(scores, key=lambda d: (-scores[d], order[d]))
