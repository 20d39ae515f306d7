"""Leave-one-problem-out retrieval benchmark over a mined store.

For each problem P of the corpus that the store has a lineage for: index every skill *as if P had
not been mined* (P's evidence removed; skills only P produced dropped; the graph encoder trained
on the remaining skills only), query with P's `naive.cu`, and score the answer against the skills
P's own expert walk produced (matched by skill identity: the held-out lineage is not indexed).

    python -m eval.bench_retrieval --store /tmp/ks-mined [--json] [--out eval/results/bench_retrieval.json]

Metrics per mode (bm25, text, graph, fused), averaged over problems, on the answer an agent gets
(applicability filters on; `k` hits):
* Recall@5 (capped): |relevant in top 5| / min(5, |relevant|) (a problem's walk often produces more
  than 5 skills; uncapped recall is reported as well);
* MRR: 1 / rank of the first relevant hit (0 if none in the top 10);
* nDCG@5 with binary relevance.
The same metrics on the raw ranking (filters off) are reported as `unfiltered`, and on the
kernel-specific skills only (produced by fewer than half of the indexed problems) as `specific`:
on this corpus a handful of optimizations (`__restrict__`, `__ldg`, `__launch_bounds__`,
`#pragma unroll`, float4 loads) occur in nearly every expert, so ranking by popularity alone is a
strong baseline for the full metrics; `specific` shows what the modalities add beyond it.

`fused` is the shipped fusion: weighted RRF of bm25, text, graph and the evidence prior (how many
mined kernels produced the skill, counted without the held-out one), with the weights each fold's
index chose by leave-one-problem-out over the fold's *own* problems (retrieval/skill_fusion.py:
nested, so the held-out problem never influences its weights; `per_problem[].fusion_weights`).
`fused_equal` (all four weights 1), `fused_no_prior` (the three modalities alone) and `prior_only`
(the prior alone, query-independent) are reported for comparison.

Exit status 0 only if fused beats BM25, text-only and graph-only on MRR and fused Recall@5 >= 0.8.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from eval.stamp import stamp, write_result

MODES = ("bm25", "text", "graph", "fused")
EXTRA = {"fused_equal": {"bm25": 1.0, "text": 1.0, "graph": 1.0, "prior": 1.0},  # reported, not checked
         "fused_no_prior": {"bm25": 1.0, "text": 1.0, "graph": 1.0, "prior": 0.0},
         "prior_only": {"bm25": 0.0, "text": 0.0, "graph": 0.0, "prior": 1.0}}
K_EVAL = 10
CACHE_VERSION = 3


def fold_skills(skills: list[dict], held_out: str) -> list[dict]:
    """The store's skills as if ``held_out`` had never been mined."""
    from skills.merge import merge_skill
    from mining.records import Skill

    out = []
    for s in skills:
        ev = [e for e in s.get("evidence") or [] if e.get("problem") != held_out]
        if not ev:
            continue
        gone = {e["lineage_id"] for e in s["evidence"] if e.get("problem") == held_out}
        d = json.loads(json.dumps(s))
        d["evidence"] = ev
        per = dict(d.get("provenance", {}).get("per_lineage", {}))
        for lid in gone:
            per.pop(lid, None)
        d.setdefault("provenance", {})["per_lineage"] = per
        if not any(e.get("before") == d.get("before") and e.get("after") == d.get("after") for e in ev):
            best = min(ev, key=lambda e: len(e.get("diff") or e.get("before", "") + e.get("after", "")))
            d["before"], d["after"], d["diff"] = best.get("before", ""), best.get("after", ""), best.get("diff", "")
            d["anchor"] = {"excerpt": (best.get("after") or "").strip().splitlines()[0][:160]
                           if (best.get("after") or "").strip() else ""}
        merged = merge_skill(None, Skill.model_validate(d))
        out.append(merged.model_dump(mode="json"))
    return out


def metrics(ranked: list[str], relevant: set[str], k: int = 5) -> dict[str, float]:
    top = ranked[:k]
    hit = [1 if s in relevant else 0 for s in top]
    n_rel = len(relevant)
    recall_capped = sum(hit) / min(k, n_rel) if n_rel else 0.0
    recall = sum(hit) / n_rel if n_rel else 0.0
    rr = 0.0
    for i, s in enumerate(ranked[:K_EVAL], start=1):
        if s in relevant:
            rr = 1.0 / i
            break
    dcg = sum(h / math.log2(i + 2) for i, h in enumerate(hit))
    idcg = sum(1 / math.log2(i + 2) for i in range(min(k, n_rel)))
    return {"recall_at_5": recall_capped, "recall_at_5_uncapped": recall, "mrr": rr,
            "ndcg_at_5": dcg / idcg if idcg else 0.0}


class TextVectorCache:
    """MiniLM vectors of documents, shared by all folds: taken from the store's chroma collection
    when the document is there (same id = same content), else computed with sentence-transformers."""

    def __init__(self, store_root: Optional[Path]):
        self.vecs: dict[str, Any] = {}
        self.computed = 0
        if store_root is not None and (store_root / "chroma").is_dir():
            try:
                from retrieval.skill_index import TEXT_COLLECTION
                from retrieval.vector_index import VectorIndex

                vi = VectorIndex(store_root / "chroma")
                if vi.has(TEXT_COLLECTION):
                    ids, mat, _ = vi.get_all(TEXT_COLLECTION)
                    self.vecs = {i: mat[n] for n, i in enumerate(ids)}
            except Exception:
                self.vecs = {}

    def __call__(self, docs):
        import numpy as np

        from retrieval.skill_index import limit_torch_threads
        from retrieval.snapshot import TEXT_MAX_TOKENS

        todo = [d for d in docs if d.doc_id not in self.vecs]
        if todo:
            limit_torch_threads()
            from retrieval.text import get_embedder

            v = get_embedder(TEXT_MAX_TOKENS).embed([d.text for d in todo])
            for d, x in zip(todo, v):
                self.vecs[d.doc_id] = x
            self.computed += len(todo)
        return np.stack([self.vecs[d.doc_id] for d in docs]).astype(np.float32)


def run(store: Path, corpus: Path, k: int = 5, steps: Optional[int] = None, seed: int = 0,
        problems: Optional[list[str]] = None, cache_dir: Optional[Path] = None, log=print) -> dict:
    from retrieval.skill_fusion import is_current, recalibrate
    from retrieval.skill_index import GNN_STEP_BUDGET, build_index_dir
    from retrieval.skill_search import Searcher, SkillIndex
    from skills.kernel_store import KernelStore
    from skills.store import Store

    # a copy: the benchmark must not hold (or wait for) a lock on a store someone is writing
    tmp = Path(tempfile.mkdtemp(prefix="ks-bench-retrieval-"))
    try:
        shutil.copy2(store / "store.duckdb", tmp / "store.duckdb")
        if (store / "store.duckdb.wal").exists():
            shutil.copy2(store / "store.duckdb.wal", tmp / "store.duckdb.wal")
        st = Store(tmp)
        ks = KernelStore(st)
        skills = [s.model_dump(mode="json") for s in ks.skills(kind="kernel")]
        lineages = {ln.problem: ln for ln in ks.lineages(kind="kernel")}
        st.close()
        cache = TextVectorCache(store)
        produced: dict[str, set[str]] = {}
        for s in skills:
            for e in s.get("evidence") or []:
                produced.setdefault(e["problem"], set()).add(s["skill_id"])
        names = problems or sorted(p for p in lineages if (corpus / p / "naive.cu").is_file())
        per_problem = []
        t_all = time.perf_counter()
        for p in names:
            t0 = time.perf_counter()
            fold = fold_skills(skills, p)
            ids = {s["skill_id"] for s in fold}
            relevant = produced.get(p, set()) & ids
            only_here = produced.get(p, set()) - ids
            row: dict[str, Any] = {"problem": p, "n_indexed": len(fold), "n_relevant": len(relevant),
                                   "n_produced": len(produced.get(p, set())), "only_this_problem": sorted(only_here)}
            if not relevant:
                row["skipped"] = "no relevant skill is retrievable (every skill it produced is unique to it)"
                per_problem.append(row)
                log(f"{p}: skipped ({row['skipped']})")
                continue
            from retrieval.skill_index import skills_fingerprint
            from retrieval.snapshot import current_snapshot

            fp = f"{skills_fingerprint(fold)}-{steps or GNN_STEP_BUDGET}-{seed}-v{CACHE_VERSION}"
            fold_root = (cache_dir or tmp / "folds") / f"{p}-{fp}"
            path = current_snapshot(fold_root) if cache_dir else None
            # the fold calibrates its fusion weights on its own problems only (retrieval/skill_fusion.py)
            calib = [(q, (corpus / q / "naive.cu").read_text()) for q in sorted(lineages)
                     if q != p and (corpus / q / "naive.cu").is_file()]
            if path is None:
                path = build_index_dir(fold, fold_root, cache, seed=seed, step_budget=steps or GNN_STEP_BUDGET,
                                       calibration=calib)
            elif not is_current(json.loads((path / "manifest.json").read_text())):
                recalibrate(path, calib)  # a cached fold calibrated by an older query path
            searcher = Searcher(SkillIndex(path))
            row["fusion_weights"] = searcher.weights()
            code = (corpus / p / "naive.cu").read_text()
            # "specific": skills fewer than half of the indexed problems produced; the widespread ones
            # (restrict, __ldg, ...) are found by a popularity prior alone, these are not
            tab = searcher.index.table
            n_probs = len({e["problem"] for s in fold for e in s.get("evidence") or []})
            specific = {sid for sid, n in zip(tab["skill_id"], tab["n_problems"]) if n < n_probs / 2}
            row["n_relevant_specific"] = len(relevant & specific)
            for label in ("filtered", "unfiltered", "specific"):
                row[label] = {}
                if label == "specific" and not relevant & specific:
                    continue
                for m in MODES + tuple(EXTRA):
                    mode, weights = ("fused", EXTRA[m]) if m in EXTRA else (m, None)
                    if label != "unfiltered":
                        # one hit per skill in the modality's order: what this benchmark measures (the
                        # value ranking, one entry per carrier, is eval/bench_next_step.py's)
                        ans = searcher.query(code=code, path=f"{p}/naive.cu", k=searcher.index.n_skills, mode=mode,
                                             weights=weights, include_filtered=False, rank="similarity")
                        ranked = [h["skill_id"] for h in ans["hits"]]
                    else:
                        sc, _ = searcher.scores(code=code, units=searcher.units(code))
                        order = searcher.rankings(sc, weights)[mode]
                        ranked = [tab["skill_id"][i] for i in order]
                    rel = relevant
                    if label == "specific":
                        ranked = [sid for sid in ranked if sid in specific]
                        rel = relevant & specific
                    row[label][m] = {**{kk: round(v, 4) for kk, v in metrics(ranked, rel, k).items()},
                                     "top5": [tab["key"][tab["skill_id"].index(s)] for s in ranked[:5]]}
            row["relevant"] = sorted(searcher.index.table["key"][searcher.index.table["skill_id"].index(s)]
                                     for s in relevant)
            row["seconds"] = round(time.perf_counter() - t0, 1)
            per_problem.append(row)
            f = row["filtered"]
            log(f"{p}: {len(relevant)} relevant of {len(fold)} indexed; MRR " +
                " ".join(f"{m} {f[m]['mrr']:.2f}" for m in MODES) + "; R@5 " +
                " ".join(f"{m} {f[m]['recall_at_5']:.2f}" for m in MODES) + f" ({row['seconds']}s)")
        scored = [r for r in per_problem if "filtered" in r]
        summary: dict[str, Any] = {}
        for label in ("filtered", "unfiltered", "specific"):
            rows = [r for r in scored if r.get(label)]
            summary[label] = {m: {key: round(sum(r[label][m][key] for r in rows) / max(1, len(rows)), 4)
                                  for key in ("recall_at_5", "recall_at_5_uncapped", "mrr", "ndcg_at_5")}
                              for m in MODES + tuple(EXTRA)}
            summary[label]["n_problems"] = len(rows)
        f = summary["filtered"]
        checks = {
            "fused_mrr_beats_bm25": f["fused"]["mrr"] > f["bm25"]["mrr"],
            "fused_mrr_beats_text": f["fused"]["mrr"] > f["text"]["mrr"],
            "fused_mrr_beats_graph": f["fused"]["mrr"] > f["graph"]["mrr"],
            "fused_recall_at_5_ge_0.8": f["fused"]["recall_at_5"] >= 0.8,
        }
        return {"benchmark": "leave-one-problem-out kernel-skill retrieval", "store": str(store),
                "n_skills": len(skills), "n_problems_scored": len(scored), "k": k, "seed": seed,
                "gnn_step_budget": steps or GNN_STEP_BUDGET, "summary": summary, "checks": checks,
                "passed": all(checks.values()), "per_problem": per_problem,
                "text_vectors_computed": cache.computed, "seconds": round(time.perf_counter() - t_all, 1),
                "fold_cache": str(cache_dir) if cache_dir else None,
                "machine": {"cpus": os.cpu_count(), "loadavg_end": list(os.getloadavg())},
                "definitions": {"recall_at_5": "|relevant in top 5| / min(5, |relevant|)",
                                "relevant": "skills the held-out problem's own expert walk produced, that other "
                                            "problems also produced (the only ones an index without it can hold)",
                                "filtered": "the answer agents get (applicability filters on)",
                                "unfiltered": "the modality's raw ranking over all indexed skills",
                                "specific": "filtered answers restricted to skills fewer than half of the indexed "
                                            "problems produced (relevance and ranking both), on problems with such a "
                                            "relevant skill: what a popularity prior cannot find"}}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, default=Path(os.environ.get("SKILLS_STORE", ".skills")))
    ap.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parent.parent / "corpora" / "kernels")
    ap.add_argument("--steps", type=int, default=None, help="graph-encoder optimizer steps per fold")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--problems", default=None, help="comma-separated subset")
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="keep each fold's index here and reuse it when the fold is unchanged")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here (eval/results/... to record it)")
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    origin = stamp("eval.bench_retrieval", raw_argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not (args.store / "store.duckdb").is_file():
        print(f"error: no store at {args.store}: build one with `skills mine corpora/kernels --executor cpu "
              f"--store {args.store}`", file=sys.stderr)
        return 2
    log = (lambda m: print(m, file=sys.stderr)) if args.json else print
    res = run(args.store, args.corpus, steps=args.steps, seed=args.seed,
              problems=args.problems.split(",") if args.problems else None, cache_dir=args.cache_dir, log=log)
    res = {**origin, **res, "machine": {**origin["machine"], **res["machine"]}}
    if args.out:
        write_result(res, args.out, "bench_retrieval.json")
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        for label in ("filtered", "unfiltered", "specific"):
            print(f"\n{label} ({res['summary'][label]['n_problems']} problems): mode      R@5    R@5(uncapped)  MRR    nDCG@5")
            for m in MODES + tuple(EXTRA):
                r = res["summary"][label][m]
                print(f"          {m:14s}  {r['recall_at_5']:.3f}  {r['recall_at_5_uncapped']:.3f}          "
                      f"{r['mrr']:.3f}  {r['ndcg_at_5']:.3f}")
        print("\nchecks: " + ", ".join(f"{k} {'ok' if v else 'FAIL'}" for k, v in res["checks"].items()))
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
