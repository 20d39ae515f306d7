"""Learned donor selection for fork-and-adapt: a linear ranking over cheap per-candidate features.

Fork-and-adapt forks ONE implementation of a role from another target. ``candidate_features``
describes each candidate with what is known at generation time (nothing about T's real
implementation); ``LinearSelector`` scores them with weights fitted on development targets
(``fit_pointwise``, ``fit_pairwise``, ``fit_listwise``) and stored as JSON with their provenance.
``eval/bench_backend.py --selector-study`` collects the features and labels (each candidate's
aligned statement accuracy against the real implementation) and cross-validates the fits. On
six development targets no fit beat the hand-made rule, so none is the default (results in
eval/results/backend_selection_study.json, ``learned_selector``; docs/backends.md section 7).
``consensus_medoid`` (opt-in) re-votes among the rule's top five only; it did not help either.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from corpora.backends.tree import strip_target
from retrieval.backend.adapt import statement_accuracy

# the hand-made rule the selector is measured against (role_candidates' default):
# consensus + TARGET_TIEBREAK x target similarity (level 1)
TARGET_TIEBREAK = 0.05

FEATURES = (
    "consensus",            # MBR vote: share of the others' statements it reproduces (recall side)
    "consensus_precision",  # share of its own statements the others reproduce (precision side)
    "target_similarity",    # level-1 cosine of the donor target to T
    "declaration_overlap",  # Jaccard of header declarations, target names stripped
    "typicality",           # mean text+graph cosine to the role's other implementations
    "mappability",          # share of its target identifiers T can express
    "log_length_ratio",     # log of its adapted statement count over the candidates' median
    "abs_log_length_ratio",
    "rule_rank",            # position under consensus + 0.05 x target similarity, 0 = first, 1 = last
    "log_declaration_ratio",  # log of the donor's header size over T's
)


# --------------------------------------------------------------------------- features
def agreement_matrix(statements: dict[str, Sequence[str]]) -> list[list[float]]:
    """A[i][j]: share of candidate j's statements candidate i reproduces in order (both adapted
    to T); row means (diagonal left out) are ``consensus_scores``, column means the precision vote."""
    ids = list(statements)
    return [[statement_accuracy(statements[i], statements[j])[0] if i != j else 1.0 for j in ids] for i in ids]


def votes(ids: Sequence[str], A: Sequence[Sequence[float]]) -> tuple[dict[str, float], dict[str, float]]:
    """(recall vote, precision vote) per candidate from ``agreement_matrix``; the recall vote is
    ``consensus_scores``."""
    n = len(ids)
    rec = {i: (sum(A[a][b] for b in range(n) if b != a) / (n - 1)) if n > 1 else 0.0 for a, i in enumerate(ids)}
    prec = {i: (sum(A[b][a] for b in range(n) if b != a) / (n - 1)) if n > 1 else 0.0 for a, i in enumerate(ids)}
    return rec, prec


def declaration_sets(store) -> dict[str, set]:
    """Per target, its header declarations with the target's name stripped
    (``XCoreTargetLowering::LowerCCCCallTo`` -> ``TargetLowering::LowerCCCCallTo``)."""
    aliases: dict[str, list] = defaultdict(list)
    for r in store.query("SELECT target, name FROM target_attributes WHERE kind = 'alias'"):
        aliases[r["target"]].append(r["name"])
    out: dict[str, set] = defaultdict(set)
    for r in store.query("SELECT target, value FROM target_attributes WHERE kind = 'declaration'"):
        out[r["target"]].add(strip_target(r["value"] or "", aliases.get(r["target"]) or [r["target"]]))
    return dict(out)


def candidate_features(ids: Sequence[str], donor_target: dict[str, str], consensus: dict[str, float],
                       precision: dict[str, float], target_similarity: dict[str, float],
                       declarations: dict[str, set], target: str, typicality: dict[str, float],
                       mappability: dict[str, float], lengths: dict[str, int]) -> list[list[float]]:
    """One row of ``FEATURES`` per candidate, in ``ids`` order (the rule rank is computed here so
    training and generation see the same definition)."""
    n = len(ids)
    rule = sorted(range(n), key=lambda a: (-(consensus.get(ids[a], 0.0)
                                             + TARGET_TIEBREAK * target_similarity.get(donor_target[ids[a]], 0.0)), a))
    rank = {ids[a]: r for r, a in enumerate(rule)}
    ls = sorted(lengths.get(i, 0) for i in ids)
    med = (ls[(n - 1) // 2] + ls[n // 2]) / 2 if n else 0.0
    dT = declarations.get(target, set())
    rows = []
    for i in ids:
        S = donor_target[i]
        dS = declarations.get(S, set())
        lr = math.log((lengths.get(i, 0) + 1) / (med + 1))
        rows.append([
            consensus.get(i, 0.0),
            precision.get(i, 0.0),
            target_similarity.get(S, 0.0),
            (len(dT & dS) / len(dT | dS)) if (dT or dS) else 0.0,
            typicality.get(i, 0.0),
            mappability.get(i, 0.0),
            lr,
            abs(lr),
            rank[i] / (n - 1) if n > 1 else 0.0,
            math.log((len(dS) + 1) / (len(dT) + 1)),
        ])
    return rows


# --------------------------------------------------------------------------- the model
@dataclass
class LinearSelector:
    """score = weights . features; ties go to the hand-made rule's order."""
    weights: list[float]
    features: tuple = FEATURES
    provenance: dict = field(default_factory=dict)

    def scores(self, rows: Sequence[Sequence[float]]) -> list[float]:
        return [sum(w * x for w, x in zip(self.weights, r)) for r in rows]

    def order(self, rows: Sequence[Sequence[float]]) -> list[int]:
        """Candidate positions, best first."""
        s = self.scores(rows)
        ri = self.features.index("rule_rank")
        return sorted(range(len(rows)), key=lambda a: (-round(s[a], 12), rows[a][ri], a))

    def to_dict(self) -> dict:
        return {"features": list(self.features), "weights": [round(w, 8) for w in self.weights],
                "provenance": self.provenance}

    @classmethod
    def from_dict(cls, d: dict) -> "LinearSelector":
        """``{"features": [...], "weights": [...]}``, or ``{"weights": {feature: w}}`` as the
        selector study records its chosen fit."""
        full = dict(d["weights"]) if isinstance(d["weights"], dict) else dict(zip(d["features"], d["weights"]))
        unknown = set(full) - set(FEATURES)
        if unknown:
            raise ValueError(f"selector weights name unknown features: {sorted(unknown)}")
        # stored weights may cover a subset; missing features weigh 0
        return cls([float(full.get(f, 0.0)) for f in FEATURES], FEATURES, d.get("provenance", {}))

    @classmethod
    def rule(cls) -> "LinearSelector":
        """The hand-made rule as a selector: consensus + 0.05 x target similarity."""
        w = [0.0] * len(FEATURES)
        w[FEATURES.index("consensus")] = 1.0
        w[FEATURES.index("target_similarity")] = TARGET_TIEBREAK
        return cls(w, FEATURES, {"source": "hand-made rule"})


def load_selector(path) -> LinearSelector:
    """Weights stored as JSON (``LinearSelector.to_dict``). None is adopted by default: pass one
    to ``BackendIndex.role_candidates(selector=...)`` to try it."""
    return LinearSelector.from_dict(json.loads(Path(path).read_text()))


# --------------------------------------------------------------------------- fitting (numpy)
def _standardize(groups):
    """Within-group centred features (only differences inside a group matter to a ranking),
    scaled by their pooled standard deviation."""
    import numpy as np

    cen = [g["X"] - g["X"].mean(axis=0) for g in groups]
    if not cen:
        raise ValueError("no training groups")
    allc = np.concatenate(cen)
    sd = allc.std(axis=0)
    sd = np.where(sd > 1e-9, sd, 1.0)
    return [c / sd for c in cen], sd


def fit_pointwise(groups, l2: float = 1.0) -> list[float]:
    """Ridge regression of the within-group centred label on the centred features."""
    import numpy as np

    Z, sd = _standardize(groups)
    X = np.concatenate(Z)
    y = np.concatenate([g["y"] - g["y"].mean() for g in groups])
    w = np.linalg.solve(X.T @ X + l2 * len(X) * 1e-3 * np.eye(X.shape[1]), X.T @ y)
    return list(w / sd)


def fit_pairwise(groups, l2: float = 1.0, margin: float = 0.02, iters: int = 300) -> list[float]:
    """RankNet-style logistic loss on candidate pairs whose labels differ by more than ``margin``,
    each pair weighted by the label difference (getting a big gap wrong costs more)."""
    import numpy as np

    Z, sd = _standardize(groups)
    D, W = [], []
    for z, g in zip(Z, groups):
        y = g["y"]
        i, j = np.nonzero(y[:, None] - y[None, :] > margin)
        if len(i):
            D.append(z[i] - z[j])
            W.append((y[i] - y[j]) / len(i))  # each group counts once whatever its size
    if not D:
        return [0.0] * len(sd)
    D, W = np.concatenate(D), np.concatenate(W)
    W = W / W.sum()
    w = np.zeros(D.shape[1])
    lam = l2 * 1e-3
    for _ in range(iters):  # Newton steps: convex, small
        m = D @ w
        p = 1.0 / (1.0 + np.exp(np.clip(m, -30, 30)))  # = sigmoid(-m)
        grad = -(D * (W * p)[:, None]).sum(axis=0) + lam * w
        H = (D * (W * p * (1 - p))[:, None]).T @ D + lam * np.eye(len(w))
        step = np.linalg.solve(H, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return list(w / sd)


def fit_listwise(groups, l2: float = 1.0, temperature: float = 0.05, iters: int = 400, lr: float = 0.5,
                 init: Optional[Sequence[float]] = None) -> list[float]:
    """Maximize the expected label of a softmax choice per group (a smooth top-1 accuracy),
    by gradient ascent from ``init`` (default: the hand-made rule)."""
    import numpy as np

    Z, sd = _standardize(groups)
    w = np.array(init if init is not None else LinearSelector.rule().weights, dtype=float) * sd
    # groups padded to one array so each step is a few matrix products
    G, m, F = len(Z), max(len(z) for z in Z), Z[0].shape[1]
    Zp = np.zeros((G, m, F))
    Yp = np.zeros((G, m))
    mask = np.zeros((G, m), dtype=bool)
    for k, (z, g) in enumerate(zip(Z, groups)):
        Zp[k, :len(z)] = z
        Yp[k, :len(z)] = g["y"]
        mask[k, :len(z)] = True
    lam = l2 * 1e-3
    for _ in range(iters):
        s = np.where(mask, Zp @ w / temperature, -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        ey = (p * Yp).sum(axis=1, keepdims=True)
        grad = np.einsum("gm,gmf->f", p * (Yp - ey), Zp) / temperature / G - lam * w
        w += lr * grad
    return list(w / sd)


def top1_accuracy(selector: LinearSelector, groups) -> list[float]:
    """The label of the candidate the selector puts first, per group."""
    return [float(g["y"][selector.order(g["X"].tolist())[0]]) for g in groups]


# --------------------------------------------------------------------------- consensus medoid of the top k
# A second vote among the rule's top MEDOID_K donors only: the one whose adaptation reproduces most of
# what the other k - 1 adaptations say (mean of A[i][j] over the others, as agreement_matrix). Chosen on
# the six validation targets (Sparc, Lanai, MSP430, AVR, BPF, M68k; docs/backends.md section 7) over
# k 3-8, rank weights 1/r^a (a 0-2: none helped), symmetric or recall agreement and these thresholds.
MEDOID_K = 5
MEDOID_MIN_AGREEMENT = 0.4   # below it the top donors disagree too much for the vote to say anything
MEDOID_MARGIN = 0.1          # the medoid must out-agree rank 1 by more than this, else rank 1 stays
MEDOID_DEFAULT = False       # off: it did not raise the unseen LLVM 19 targets (docs/backends.md section 7)


def consensus_medoid(statements: Sequence[Sequence[str]], k: int = MEDOID_K,
                     min_agreement: float = MEDOID_MIN_AGREEMENT, margin: float = MEDOID_MARGIN) -> int:
    """Position (0 = the rule's first) of the donor to fork among the first ``k`` of ``statements``
    (adapted statements, in the rule's order). Rank 1 stays with fewer than 3 candidates, when the
    best agreement is below ``min_agreement``, or when it beats rank 1's own by ``margin`` or less;
    ties go to the better-ranked candidate."""
    top = list(statements[:k])
    if len(top) < 3:
        return 0
    return medoid_of_agreement(agreement_matrix(dict(enumerate(top))), min_agreement, margin)


def medoid_of_agreement(A: Sequence[Sequence[float]], min_agreement: float = MEDOID_MIN_AGREEMENT,
                        margin: float = MEDOID_MARGIN) -> int:
    """``consensus_medoid`` over an ``agreement_matrix`` of the top k, in the rule's order."""
    n = len(A)
    if n < 3:
        return 0
    agree = [sum(A[i][j] for j in range(n) if j != i) / (n - 1) for i in range(n)]
    best = max(range(n), key=lambda i: (agree[i], -i))
    if agree[best] < min_agreement or agree[best] - agree[0] <= margin:
        return 0
    return best
