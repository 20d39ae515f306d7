"""Fusion weights chosen by leave-one-problem-out over the index's own problems.

Fused ranking is weighted reciprocal-rank fusion (retrieval/skill_search.py ``rankings``) of the
bm25, text and graph rankings and the evidence prior. Which modality deserves how much weight is
a property of the data (how alike the store's kernels are in words, in code tokens, in syntax), so
the index measures it instead of assuming it: ``calibrate`` replays, for every problem Q the store
has a lineage for, the query an agent would make for Q (its ``naive.cu`` when the corpus folder
is readable, else the least-optimized state of Q's walk) against the index *without Q* (Q's
documents masked, skills only Q produced skipped, the prior counted without Q), and scores the
filtered answer against the skills Q's walk produced. Every weight vector of a small grid is
tried; the one with the best mean MRR wins (ties: nDCG@5, then Recall@5, then the vector closest
to equal weights, so that equal weights are kept unless the data says otherwise).

What this does not redo per held-out problem: the graph encoder is trained once on all of the
index's skills (retraining it per problem would cost minutes), and BM25's term statistics include
Q's documents; both make the held-out replay slightly optimistic for graph and bm25. The choice is
made on the index's problems only: the retrieval benchmark calibrates each fold on the fold's own
problems, so the held-out problem of the benchmark is never used to choose its weights.

    cal = calibrate(snapshot_path, [(problem, code), ...])
    cal["weights"]   # {"bm25": .., "text": .., "graph": .., "prior": ..}, stored in the manifest
"""
from __future__ import annotations

import itertools
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Sequence

from retrieval.fusion import RRF_K
from retrieval.skill_search import FUSION_WEIGHTS, QUERY_VERSION, SCAN_LIMIT, QueryError, Searcher, SkillIndex

WEIGHT_LEVELS = (0.0, 0.5, 1.0, 2.0)
MODALITIES = ("bm25", "text", "graph", "prior")
MIN_QUERIES = 3  # fewer held-out problems than this: keep equal weights
CAL_K = 10  # MRR counts the first relevant hit among the top 10, as the benchmark does
METRIC_K = 5


def weight_grid(levels: Sequence[float] = WEIGHT_LEVELS) -> list[dict[str, float]]:
    """Distinct weight vectors (up to scale: RRF ranks the same) with at least one query-dependent
    modality; of equivalent vectors the one whose largest weight is nearest 1 is kept."""
    best: dict[tuple, tuple] = {}
    for combo in itertools.product(levels, repeat=len(MODALITIES)):
        if not any(combo[:3]):
            continue  # the prior alone ignores the query
        top = max(combo)
        key = tuple(round(c / top, 6) for c in combo)
        if key not in best or abs(math.log(top)) < abs(math.log(max(best[key]))):
            best[key] = combo
    return [dict(zip(MODALITIES, (float(c) for c in combo))) for combo in best.values()]


def distance_to_equal(w: dict[str, float]) -> float:
    top = max(w.values())
    return sum(abs(w[m] / top - 1.0) for m in MODALITIES)


def ranking_metrics(ranked: list[int], relevant: set[int]) -> tuple[float, float, float]:
    rr = 0.0
    for r, i in enumerate(ranked[:CAL_K], start=1):
        if i in relevant:
            rr = 1.0 / r
            break
    hit = [1 if i in relevant else 0 for i in ranked[:METRIC_K]]
    dcg = sum(h / math.log2(r + 2) for r, h in enumerate(hit))
    idcg = sum(1 / math.log2(r + 2) for r in range(min(METRIC_K, len(relevant))))
    recall = sum(hit) / min(METRIC_K, len(relevant))
    return rr, (dcg / idcg if idcg else 0.0), recall


def skill_problems(index) -> list[set[str]]:
    """Per skill (index order): the problems whose walks produced it."""
    return [{e.get("problem") for e in index.record(i).get("evidence") or [] if e.get("problem")}
            for i in range(index.n_skills)]


class _Replay:
    """One held-out problem: its masked per-modality scores and the applicability of each skill."""

    def __init__(self, searcher, problem: str, code: str, problems: list[set[str]]):
        import numpy as np

        idx = searcher.index
        prepared, _ = searcher._prepared(code, f"{problem}/naive.cu")
        self.checker, units = prepared[0], prepared[1]
        drop_docs = np.array([p == problem for p in idx.docs["problem"]], dtype=bool)
        self.scores, _ = searcher.scores(code=code, units=units, drop_docs=drop_docs)
        self.drop = np.array([bool(p) and p <= {problem} for p in problems], dtype=bool)
        self.prior_order = searcher.prior_order([len(p - {problem}) for p in problems])
        self.relevant = {i for i, p in enumerate(problems) if problem in p and len(p) > 1}
        self.searcher = searcher
        self.modal = {m: searcher.rank(self.scores[m]) for m in ("bm25", "text", "graph")}  # weight-independent
        self._status: dict[int, str] = {}

    def ranked(self, weights: dict[str, float]) -> list[int]:
        """The filtered answer's skill indices for these weights (the selection of Searcher.select,
        with each skill's verdict computed once: it depends on the ranking only through conflicts
        with higher-ranked hits, which are applied here)."""
        order = self.searcher.rankings(self.scores, weights, self.prior_order, _ranks=self.modal)["fused"]
        tab = self.searcher.index.table
        taken: set[str] = set()
        out: list[int] = []
        for i in order[:SCAN_LIMIT].tolist():
            if len(out) >= CAL_K:
                break
            if self.drop[i]:
                continue
            st = self._status.get(i)
            if st is None:
                st = self.checker.check(self.searcher.index.record(i), ()).status
                self._status[i] = st
            if st != "applicable" or set(tab["conflicts"][i]) & taken:
                continue
            out.append(i)
            rec = self.searcher.index.record(i)
            taken.add(rec.get("carrier", ""))
            taken.update(rec.get("provides") or [])
        return out


def calibrate(snapshot: Any, queries: Sequence[tuple[str, str]], levels: Sequence[float] = WEIGHT_LEVELS,
              searcher=None, log=None) -> dict:
    """Leave-one-problem-out choice of fusion weights (module doc). ``snapshot``: a snapshot folder
    or a SkillIndex; ``queries``: (problem, query code) per problem with a lineage."""
    t0 = time.perf_counter()
    if searcher is None:
        index = snapshot if isinstance(snapshot, SkillIndex) else SkillIndex(Path(snapshot))
        searcher = Searcher(index)
    problems = skill_problems(searcher.index)
    replays, skipped = [], {}
    for problem, code in queries:
        try:
            r = _Replay(searcher, problem, code, problems)
        except QueryError as exc:
            skipped[problem] = f"query does not parse: {exc.message}"
            continue
        if not r.relevant:
            skipped[problem] = "no skill it produced is also produced elsewhere"
            continue
        replays.append((problem, r))
    out: dict[str, Any] = {"method": "leave-one-problem-out over the index's own problems",
                           "levels": list(levels), "rrf_k": RRF_K, "query_version": QUERY_VERSION,
                           "queries": [p for p, _ in replays],
                           "skipped": skipped}

    def evaluate(w):
        ms = [ranking_metrics(r.ranked(w), r.relevant) for _, r in replays]
        n = len(ms)
        return tuple(round(sum(m[j] for m in ms) / n, 6) for j in range(3))

    equal = dict(FUSION_WEIGHTS)
    if len(replays) < MIN_QUERIES:
        out.update({"weights": equal, "chosen": "equal (too few problems to calibrate)",
                    "seconds": round(time.perf_counter() - t0, 2)})
        return out
    best, best_key, equal_score = None, None, evaluate(equal)
    for w in weight_grid(levels):
        sc = evaluate(w)
        key = (sc[0], sc[1], sc[2], -distance_to_equal(w))
        if best_key is None or key > best_key:
            best, best_key = (w, sc), key
    w, sc = best
    out.update({"weights": w, "chosen": "grid", "objective": dict(zip(("mrr", "ndcg_at_5", "recall_at_5"), sc)),
                "equal_weights_objective": dict(zip(("mrr", "ndcg_at_5", "recall_at_5"), equal_score)),
                "n_candidates": len(weight_grid(levels)), "seconds": round(time.perf_counter() - t0, 2)})
    if log:
        log(f"fusion weights {w} (held-out MRR {sc[0]:.3f} over {len(replays)} problems; equal weights "
            f"{equal_score[0]:.3f})")
    return out


def lineage_queries(lineages) -> list[tuple[str, str]]:
    """(problem, query code) per problem: the corpus folder's ``naive.cu`` (what an agent would ask
    with) when readable, else the least-optimized state the walk reached."""
    out, seen = [], set()
    for ln in lineages:
        if ln.problem in seen:
            continue
        code = None
        try:
            naive = Path(ln.problem_dir) / "naive.cu"
            if ln.problem_dir and naive.is_file():
                code = naive.read_text()
        except OSError:
            code = None
        if code is None:
            code = (ln.sources or {}).get(ln.final_hash) or ""
        if code.strip():
            seen.add(ln.problem)
            out.append((ln.problem, code))
    return sorted(out)


def is_current(manifest: dict) -> bool:
    """Whether the manifest's fusion weights were calibrated by this version of the query path."""
    return (manifest.get("fusion") or {}).get("query_version") == QUERY_VERSION


def recalibrate(snapshot: Path, queries: Sequence[tuple[str, str]], log=None) -> dict:
    """Calibrate a published snapshot again and rewrite its manifest (atomically). For snapshots
    whose calibration is stale (``is_current``), e.g. the benchmark's cached folds."""

    snapshot = Path(snapshot)
    man = json.loads((snapshot / "manifest.json").read_text())
    man["fusion"] = calibrate(snapshot, queries, log=log)
    tmp = snapshot / "manifest.json.tmp"
    tmp.write_text(json.dumps(man, indent=1, sort_keys=True))
    os.replace(tmp, snapshot / "manifest.json")
    return man["fusion"]
