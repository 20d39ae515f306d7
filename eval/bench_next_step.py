"""Next-step benchmark: is the human lineage's next step among the top answers for each version?

On the real corpus (corpora/real/, docs/corpora.md), leave one source out: the store the query runs
against was mined from every other source and the house corpus (eval/next_step_stores.py cuts that
fold from one mined store). For every version of an expert but the last (its naive version and
each intermediate one), `skills query --code <that version>` is asked for its top 3 entries; the
*next step* is what the following version adds, as the lineage data says it (`versions.steps`
carriers in lineage.toml).

How a human step is matched to an answer (no ranker output is trusted beyond the carrier name of
the skills it returns):
* an entry matches when the carrier of its skill (`carrier`, the vocabulary of mining/carriers.py
  and docs/corpora.md) equals the carrier of one of the next version's steps, after the spelling
  aliases of ALIASES (one idea spelled two ways inside the lineage vocabulary itself);
* the "also" entry (qualifiers grouped) matches when one of its skills does; a similarity answer
  (``--rank similarity``: one hit per skill) is matched hit by hit;
* a version that adds several steps at once is matched when any of them is in the top k: the
  lineage does not say which of them came first.

recall@k = matched versions / versions. A next step is *answerable* when the queried store holds a
skill of that carrier at all; `recall@k` counts every version, `answerable` the share that could be
matched, and `recall@k_answerable` the recall over those only.

The house corpus figure beside it: leave-one-problem-out over corpora/kernels in a store mined from
the house corpus alone (the all store without the real corpus' lineages), querying each problem's
naive.cu; its "next step" is any structural carrier the expert lists in solution.toml (the five
qualifiers excluded: a list of what the expert carries, not an ordered lineage). Both rankings are
run: `value` (what the query returns now) and `similarity` (the order before the value ranking).

    python -m eval.next_step_stores --root /work/wt/ranking-stores mine     # once: mines the stores
    python -m eval.next_step_stores --root /work/wt/ranking-stores folds
    python -m eval.bench_next_step --root /work/wt/ranking-stores [--out eval/results/bench_next_step.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from eval.stamp import stamp, write_result
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
ALIASES = {"shared_vector_load": "vector_shared_load"}
QUALIFIERS = ("restrict", "unroll_pragma", "ldg", "launch_bounds", "fast_math")
KS = (1, 3)
RANKS = ("value", "similarity")


def canon(carrier: str) -> str:
    return ALIASES.get(carrier, carrier)


def entry_carriers(ans: dict, k: int) -> list[set[str]]:
    """The carriers each of the answer's first k entries stands for."""
    out = []
    for h in ans.get("hits", [])[:k]:
        if h.get("kind") == "also":
            out.append({canon(m.get("carrier", "")) for m in h.get("skills", [])})
        else:
            out.append({canon(h.get("carrier", ""))})
    return out


def first_match(ans: dict, wanted: set[str], k: int = 10) -> Optional[int]:
    """1-based position of the first entry whose carriers meet ``wanted`` (None: not in the first k)."""
    for n, cs in enumerate(entry_carriers(ans, k), start=1):
        if cs & wanted:
            return n
    return None


def store_carriers(searcher) -> set[str]:
    return {canon(c) for c in searcher.index.table["carrier"]}


def _searcher(store: Path):
    from retrieval.skill_search import Searcher, SkillIndex

    return Searcher(SkillIndex.open(store))


def real_rows(root: Path, ranks=RANKS, only: Optional[set[str]] = None, log=print) -> list[dict]:
    """One row per (expert, version but the last) of the real corpus, each fold's store queried."""
    from corpora.real import list_experts
    from retrieval.skill_search import QueryError

    experts = list_experts()
    rows = []
    by_source: dict[str, list] = {}
    for e in experts:
        if only and e.problem not in only and e.source not in only:
            continue
        by_source.setdefault(e.source, []).append(e)
    for source, exps in sorted(by_source.items()):
        fold = root / "folds" / source
        if not (fold / "store.duckdb").is_file():
            log(f"[next_step] no fold store for {source} at {fold}: run `python -m eval.next_step_stores --root {root} folds`")
            continue
        s = _searcher(fold)
        have = store_carriers(s)
        for e in exps:
            d = root / "problems" / e.source / e.problem
            for i, v in enumerate(e.versions[:-1]):
                nxt = e.versions[i + 1]
                path = d / "versions" / f"{i}_{v.name}.cu"
                if not path.is_file():
                    log(f"[next_step] {path}: missing (materialize the corpus: eval/next_step_stores.py)")
                    continue
                wanted = {canon(st.carrier) for st in nxt.steps}
                row: dict[str, Any] = {"source": source, "problem": e.problem, "op_type": e.op_type,
                                       "version": v.name, "next_version": nxt.name, "next_steps": sorted(wanted),
                                       "answerable": bool(wanted & have),
                                       "answerable_carriers": sorted(wanted & have)}
                code = path.read_text()
                for rank in ranks:
                    t0 = time.perf_counter()
                    try:
                        ans = s.query(code=code, path=str(path.name), k=10, rank=rank, include_filtered=False)
                    except QueryError as exc:  # a version the query parser refuses: a miss, with the reason
                        row[rank] = {"position": None, "top3": [], "error": exc.message[:200]}
                        continue
                    row[rank] = {"position": first_match(ans, wanted),
                                 "top3": [sorted(cs) for cs in entry_carriers(ans, 3)],
                                 "ms": round((time.perf_counter() - t0) * 1e3, 1)}
                    if rank == "value":
                        row[rank]["kernel"] = {k: ans.get("ranking", {}).get("kernel", {}).get(k)
                                               for k in ("regimes", "boundness", "op_type_guess")}
                rows.append(row)
                log(f"[next_step] {source}/{e.problem} {v.name} -> {nxt.name} {sorted(wanted)}: " +
                    ", ".join(f"{r} {row[r]['position']}" for r in ranks) + ("" if row["answerable"] else " (unanswerable)"))
    return rows


def house_rows(root: Path, ranks=RANKS, log=print) -> list[dict]:
    """Leave-one-problem-out over corpora/kernels in the house-only store."""
    import tomllib

    store = root / "folds" / "house"
    if not (store / "store.duckdb").is_file():
        log(f"[next_step] no house store at {store}")
        return []
    s = _searcher(store)
    have = store_carriers(s)
    rows = []
    from eval.next_step_stores import house_problems, problem_name

    for d in house_problems("cpu"):
        sol = tomllib.loads((d / "solution.toml").read_text())
        listed = {canon(c) for c in sol.get("carriers", [])}
        wanted = listed - set(QUALIFIERS)
        code = (d / "naive.cu").read_text()
        row: dict[str, Any] = {"source": "house", "problem": d.name, "version": "naive", "next_version": "kernel",
                               "next_steps": sorted(wanted), "answerable": bool(wanted & have),
                               "answerable_carriers": sorted(wanted & have)}
        for rank in ranks:
            ans = s.query(code=code, path="naive.cu", k=10, rank=rank, include_filtered=False,
                          exclude_problems={problem_name(d)})
            row[rank] = {"position": first_match(ans, wanted), "position_any_listed": first_match(ans, listed),
                         "top3": [sorted(cs) for cs in entry_carriers(ans, 3)]}
        rows.append(row)
        log(f"[next_step] house/{d.name}: " + ", ".join(f"{r} {row[r]['position']}" for r in ranks))
    return rows


def recall(rows: list[dict], rank: str) -> dict:
    n = len(rows)
    ans_rows = [r for r in rows if r["answerable"]]
    out: dict[str, Any] = {"versions": n, "answerable": len(ans_rows)}
    for k in KS:
        hit = sum(1 for r in rows if r[rank]["position"] is not None and r[rank]["position"] <= k)
        out[f"recall@{k}"] = round(hit / n, 3) if n else None
        out[f"recall@{k}_answerable"] = round(hit / len(ans_rows), 3) if ans_rows else None
    return out


def summarize(rows: list[dict], ranks=RANKS) -> dict:
    res: dict[str, Any] = {}
    for rank in ranks:
        per = {}
        for src in sorted({r["source"] for r in rows}):
            per[src] = recall([r for r in rows if r["source"] == src], rank)
        res[rank] = {"overall": recall(rows, rank), "by_source": per}
    return res


def print_table(res: dict) -> None:
    print(f"{'set':<14} {'rank':<11} {'versions':>8} {'answerable':>10} {'R@1':>6} {'R@3':>6} {'R@1 ans':>8} {'R@3 ans':>8}")
    for name, block in (("real", res["real"]), ("house", res["house"])):
        for rank in RANKS:
            if rank not in block:
                continue
            rows = [("overall", block[rank]["overall"])] + sorted(block[rank]["by_source"].items())
            for src, m in rows:
                label = name if src == "overall" else f"  {src}"
                if name == "house" and src != "overall":
                    continue
                f = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
                print(f"{label:<14} {rank:<11} {m['versions']:>8} {m['answerable']:>10} {f(m['recall@1']):>6} "
                      f"{f(m['recall@3']):>6} {f(m['recall@1_answerable']):>8} {f(m['recall@3_answerable']):>8}")


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m eval.bench_next_step", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True, help="the stores (eval/next_step_stores.py --root)")
    ap.add_argument("--only", default="", help="comma-separated sources or problems")
    ap.add_argument("--no-house", action="store_true", help="skip the house corpus figure")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here (else the table only)")
    a = ap.parse_args(argv)
    os.environ.setdefault("SKILLS_BLAS_THREADS", "1")
    info = {**stamp("eval.bench_next_step", argv), "load_at_start": [round(x, 2) for x in os.getloadavg()]}
    only = set(a.only.split(",")) if a.only else None
    rows = real_rows(a.root, only=only)
    hrows = [] if a.no_house else house_rows(a.root)
    real = summarize(rows) if rows else {}
    house = summarize(hrows) if hrows else {}
    res = {**info, "method": __doc__.split("\n\n")[1].replace("\n", " "),
           "matching": "carrier equality with the next version's lineage.toml steps (aliases: "
                       + json.dumps(ALIASES) + "); the also entry matches through its skills; several steps "
                       "in one version: any of them",
           "real": real, "house": house,
           "recall@1": (real.get("value") or {}).get("overall", {}).get("recall@1"),
           "recall@3": (real.get("value") or {}).get("overall", {}).get("recall@3"),
           "by_source": (real.get("value") or {}).get("by_source", {}),
           "rows": rows, "house_rows": hrows}
    print_table(res)
    write_result(res, a.out, "bench_next_step.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
