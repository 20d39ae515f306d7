"""Measure `skills mine` over the expert corpus: carrier recall, end points, cost, skills.

    python -m eval.bench_mining --executor cpu [--problems a,b] [--store DIR] [--jobs N] [--json] [--out FILE]
    python -m eval.bench_mining --executor cuda ...            (on a GPU: end point timed vs naive.cu)

Per expert (problems tagged "example" are skipped), the backward walk runs from kernel.cu:
- carrier recall: the share of the expert's listed carriers (solution.toml) that the carrier
  detectors find in the expert and no longer find in the walk's last kernel; a listed carrier
  the detectors never saw in the expert is "not detected" (counted in the denominator, never as
  removed); target >= 0.9 over the corpus (micro average over the problems this executor can run);
- end point: the last kernel passes the gate again (fresh seeds); on a GPU its time on the
  primary large workload is compared with naive.cu's (target: within 2x);
- cost: wall time per problem (target <= 300 s for sgemm on 2 CPU cores) and LLM tokens
  (0 in deterministic mode);
- skills: count, merged (evidence from more than one problem), share with a discovered
  precondition.
Exits 1 when the recall target is missed. The table goes to stdout; the JSON (stamped:
eval/stamp.py) to --out, else to an untracked temporary bench_mining_<executor>.json
(eval/results/bench_mining_cpu.json is the committed record). A fresh temporary store is used unless --store is given (then cached lineages and
gate results make a re-run cheap, and the cost column says so).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from eval.stamp import STAMP_KEYS, read_json, stamp, write_result

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpora" / "kernels"
RECALL_TARGET = 0.9
SGEMM_TARGET_S = 300.0
END_RATIO_TARGET = 2.0


def _primary_large(problem) -> str:
    large = [w for w in problem.workloads if "large" in w.tags]
    return (large or problem.workloads)[-1 if not large else 0].label


def end_point_timing(problem_dir: Path, final: str, store: Path) -> dict[str, Any]:
    """Profile the walk's last kernel and naive.cu on the GPU (same gate, same workloads)."""
    from corpora.problem import load_problem
    from mining.gate import GateConfig, run_gate

    problem = load_problem(problem_dir)
    cfg = GateConfig(executor="cuda", stages=("correctness", "profile"), seeds=(7,), store=store)
    fin = run_gate(problem_dir, None, cfg, source=final).to_dict()
    nai = run_gate(problem_dir, problem_dir / "naive.cu", cfg).to_dict()
    w = _primary_large(problem)
    try:
        tf = fin["stages"]["profile"]["workloads"][w]["median_ms"]
        tn = nai["stages"]["profile"]["workloads"][w]["median_ms"]
    except KeyError:
        return {"workload": w, "error": fin.get("reason") or nai.get("reason") or "no timing"}
    return {"workload": w, "final_ms": tf, "naive_ms": tn, "final_over_naive": round(tf / tn, 3),
            "within_2x": tf / tn <= END_RATIO_TARGET}


def run(executor: str, problems: list[str] | None, store: Path, jobs: int, model: str | None,
        max_steps: int, seeds: tuple[int, ...], parallel_problems: int = 1, end_points: bool = True,
        strategy: str | None = None, time_limit_s: float | None = None,
        timeout_s: float = 120.0) -> dict[str, Any]:
    from corpora.problem import load_problem
    from mining.gate import BadInput, GateConfig, run_gate
    from mining.gate.executors import resolve_executor
    from mining.checker import make_pool
    from mining.mine import MineConfig, mine_problem
    from skills.kernel_store import KernelStore, MinedLineages
    from skills.store import Store

    executor = resolve_executor(executor)
    dirs = sorted(p.parent for p in CORPUS.glob("*/definition.json"))
    rows: list[dict[str, Any]] = []
    cfg = MineConfig(executor=executor, jobs=jobs, store=store, model=model, max_steps=max_steps, seeds=seeds,
                     strategy=strategy, time_limit_s=time_limit_s, timeout_s=timeout_s)
    selected = []
    for d in dirs:
        problem = load_problem(d)
        if problems and problem.name not in problems:
            continue
        if not problems and "example" in problem.definition.tags:
            continue
        selected.append((d, problem))

    def one(item) -> dict[str, Any]:
        d, problem = item
        listed = list(problem.solution.carriers)
        row: dict[str, Any] = {"problem": problem.name, "listed": listed}
        t0 = time.perf_counter()
        print(f"[bench_mining] {problem.name} ...", file=sys.stderr, flush=True)
        try:
            out = mine_problem(d, cfg, pool=pool, lineages=MinedLineages(cfg.store))
        except BadInput as exc:
            row.update(status="not_run", reason=str(exc), wall_s=round(time.perf_counter() - t0, 1))
            print(f"[bench_mining]   {problem.name} not run: {exc}", file=sys.stderr, flush=True)
            return row
        lin = out.lineage
        final = KernelStore(Store(store)).source(lin.final_hash)
        recheck = run_gate(d, None, GateConfig(executor=executor, stages=("correctness",), seeds=(11, 12),
                                               store=store), source=final)
        probe_check = recheck_on_probes(d, final, store, executor)
        row.update(status="mined", removed=out.removed_carriers, remaining=out.remaining_carriers,
                   not_detected=out.undetected_carriers,
                   recall=round(len(out.removed_carriers) / len(listed), 3) if listed else None,
                   steps=len(lin.steps), rejections=len(lin.rejections), termination=lin.termination,
                   wall_s=round(out.wall_s, 1), walk_wall_s=lin.wall_s, cached=out.cached, llm_tokens=lin.llm_tokens,
                   final_correct=recheck.passed, final_reason=recheck.reason,
                   final_on_probes=probe_check, final_hash=lin.final_hash,
                   step_preconditions=_step_preconditions(lin, KernelStore(Store(store))),
                   operators_used=sorted({s.operator for s in lin.steps}))
        if executor == "cuda" and end_points:
            from mining.checker import gpu_timing_lock

            with gpu_timing_lock(store):
                row["end_point"] = end_point_timing(d, final, store)
        print(f"[bench_mining]   {problem.name}: {row['steps']} steps, recall {row['recall']}, {row['wall_s']} s, "
              f"remaining {row['remaining']}", file=sys.stderr, flush=True)
        return row

    pool = make_pool(jobs)
    try:
        if parallel_problems > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=parallel_problems) as threads:
                rows = list(threads.map(one, selected))
        else:
            rows = [one(item) for item in selected]
    finally:
        if pool is not None:
            pool.shutdown()
    ks = KernelStore(Store(store))
    skills = ks.skills(kind="kernel")
    mined = [r for r in rows if r["status"] == "mined"]
    listed_total = sum(len(r["listed"]) for r in mined)
    removed_total = sum(len(r["removed"]) for r in mined)
    sgemm = next((r for r in mined if r["problem"] == "sgemm"), None)
    summary = {
        "carrier_recall": round(removed_total / listed_total, 4) if listed_total else None,
        "carrier_recall_macro": round(sum(r["recall"] for r in mined) / len(mined), 4) if mined else None,
        "recall_target": RECALL_TARGET,
        "recall_met": bool(listed_total) and removed_total / listed_total >= RECALL_TARGET,
        "problems_mined": len(mined), "problems_not_run": [r["problem"] for r in rows if r["status"] != "mined"],
        "final_correct": sum(bool(r.get("final_correct")) for r in mined),
        "steps": sum(r["steps"] for r in mined), "rejections": sum(r["rejections"] for r in mined),
        "wall_s_total": round(sum(r["wall_s"] for r in rows), 1),
        "sgemm_wall_s": sgemm["wall_s"] if sgemm else None,
        "sgemm_target_s": SGEMM_TARGET_S if executor == "cpu" else None,
        "llm_tokens": sum(r.get("llm_tokens", 0) for r in mined),
        "skills": len(skills),
        "skills_merged": sum(1 for s in skills if len({e.problem for e in s.evidence}) > 1),
        "skills_with_discovered_precondition": sum(
            1 for s in skills if any(p.status == "discovered" for p in s.preconditions)),
        "skills_with_any_precondition": sum(1 for s in skills if any(p.kind != "none_found" for p in s.preconditions)),
        "remaining_by_carrier": _count(c for r in mined for c in r["remaining"]),
        "not_detected_by_carrier": _count(c for r in mined for c in r.get("not_detected", [])),
    }
    if skills:
        summary["share_with_discovered_precondition"] = round(summary["skills_with_discovered_precondition"] / len(skills), 3)
    if executor == "cuda":
        ends = [r["end_point"] for r in mined if "final_over_naive" in r.get("end_point", {})]
        summary["end_within_2x_of_naive"] = f"{sum(e['within_2x'] for e in ends)}/{len(ends)}"
    return {"executor": executor, "jobs": jobs,
            "parallel_problems": parallel_problems, "strategy": cfg.strategy or ("smallest_effect" if executor == "cuda" else "priority"),
            "model": model or "", "max_steps": max_steps, "seeds": list(seeds), "problems": rows, "summary": summary}


def merge(paths: list[Path]) -> dict[str, Any]:
    """Combine result files of GPU runs over disjoint problem groups (one device call cannot hold
    the whole corpus). A later file's row replaces an earlier one for the same problem. Skill
    counts are per-run stores and are summed; they are not merged across problems."""
    runs = [read_json(p) for p in paths]
    rows: dict[str, dict[str, Any]] = {}
    for path, run_ in zip(paths, runs):
        for r in run_["problems"]:
            rows[r["problem"]] = {**r, "from": Path(path).name}
    mined = [r for r in rows.values() if r.get("status") == "mined"]
    listed = sum(len(r["listed"]) for r in mined)
    removed = sum(len(r["removed"]) for r in mined)
    ends = {r["problem"]: r["end_point"] for r in mined if "final_over_naive" in r.get("end_point", {})}
    summary = {
        "carrier_recall": round(removed / listed, 4) if listed else None, "recall_target": RECALL_TARGET,
        "recall_met": bool(listed) and removed / listed >= RECALL_TARGET,
        "problems_mined": len(mined), "final_correct": sum(bool(r.get("final_correct")) for r in mined),
        "terminations": {r["problem"]: r["termination"] for r in mined},
        "end_within_2x_of_naive": f"{sum(e['within_2x'] for e in ends.values())}/{len(ends)}",
        "end_over_naive": {k: e["final_over_naive"] for k, e in ends.items()},
        "steps": sum(r["steps"] for r in mined), "rejections": sum(r["rejections"] for r in mined),
        "llm_tokens": sum(r.get("llm_tokens", 0) for r in mined),
        "skills_summed_over_runs": sum(r_["summary"].get("skills", 0) for r_ in runs),
        "remaining_by_carrier": _count(c for r in mined for c in r["remaining"]),
    }
    first = runs[0]
    return {**{k: first[k] for k in ("executor", "machine", "strategy", "model", "max_steps", "seeds")},
            "merged_from": [str(p) for p in paths],
            "parts": [{k: r_.get(k) for k in STAMP_KEYS} for r_ in runs], "problems": sorted(rows.values(), key=lambda r: r["problem"]),
            "summary": summary}


def recheck_on_probes(problem_dir: Path, final: str, store: Path, executor: str) -> dict[str, Any]:
    """The walk's last kernel on the expert's probe sizes (its geometry bounds and one past them,
    small and odd sizes) with a fresh seed: an end point correct only below a bound shows here."""
    from corpora.problem import load_problem
    from mining.gate import GateConfig, run_gate
    from mining.probe import outcomes_from_gate, probe_problem_dir, probe_workloads

    problem = load_problem(problem_dir)
    expert = problem.kernel_path().read_text()
    probes = probe_workloads(problem, expert)
    pdir = probe_problem_dir(problem, probes, store.resolve() / "cache")
    cfg = GateConfig(executor=executor, stages=("correctness",), seeds=(13,), store=store, adversarial=False)
    res = run_gate(pdir, problem.kernel_path(), cfg, source=final).to_dict()
    outs = outcomes_from_gate(res, probes)
    return {"probes": len(outs), "passed": sum(o.passed for o in outs), "bounds": probes.bounds,
            "failed": [o.axes for o in outs if not o.passed], "reason": res.get("reason", "")}


def _step_preconditions(lineage, ks) -> list[dict[str, Any]]:
    """Per accepted step: the skill and the preconditions this lineage found for it."""
    skills = {s.skill_id: s for s in ks.skills()}
    out = []
    for st in lineage.steps:
        sk = skills.get(st.skill_id)
        if sk is None:
            continue
        per = (sk.provenance.get("per_lineage", {}) or {}).get(lineage.lineage_id, {})
        pres = per.get("preconditions") if isinstance(per, dict) else None
        texts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in pres] if pres else \
            [p.text for p in sk.preconditions]
        out.append({"step": st.index, "skill": sk.key, "preconditions": texts})
    return out


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def print_table(res: dict[str, Any]) -> None:
    print(f"{'problem':18} {'recall':>7} {'steps':>5} {'rej':>4} {'end':>6} {'time s':>8}  remaining")
    for r in res["problems"]:
        if r["status"] != "mined":
            print(f"{r['problem']:18} {'-':>7} {'-':>5} {'-':>4} {'-':>6} {r['wall_s']:>8}  not run: {r['reason'][:70]}")
            continue
        end = "ok" if r["final_correct"] else "FAIL"
        if "end_point" in r and "final_over_naive" in r["end_point"]:
            end = f"{r['end_point']['final_over_naive']:.2f}x"
        print(f"{r['problem']:18} {r['recall']:>7} {r['steps']:>5} {r['rejections']:>4} {end:>6} {r['wall_s']:>8}  "
              f"{', '.join(r['remaining']) or '-'}")
    s = res["summary"]
    print(f"carrier recall {s['carrier_recall']} (target {s['recall_target']}), skills {s['skills']} "
          f"(merged {s['skills_merged']}, discovered precondition {s['skills_with_discovered_precondition']}), "
          f"LLM tokens {s['llm_tokens']}, sgemm {s['sgemm_wall_s']} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--executor", default="cpu")
    ap.add_argument("--problems", default="")
    ap.add_argument("--store", type=Path, default=None, help="store root (default: a fresh temporary one)")
    ap.add_argument("--jobs", type=int, default=2, help="gate worker processes (shared by all problems)")
    ap.add_argument("--parallel-problems", type=int, default=1, help="problems walked at once (threads)")
    ap.add_argument("--no-end-points", action="store_true", help="GPU: skip timing the end point against naive.cu")
    ap.add_argument("--model", default=os.environ.get("SKILLS_MODEL"))
    ap.add_argument("--max-steps", type=int, default=100)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--strategy", default=None, help="priority or smallest_effect (default: by executor)")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds per walk (termination time_limit)")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="seconds per gate run (a loaded machine times out candidates an idle one passes)")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here (eval/results/... to record it)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="merge result files of runs over disjoint problem groups into --out, then exit")
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    origin = stamp("eval.bench_mining", raw_argv)
    if args.merge:
        res = {**origin, **merge(args.merge)}  # the runs' machine, not the merging one's
        write_result(res, args.out, f"bench_mining_{res['executor']}.json", indent=2)
        print(json.dumps(res["summary"], indent=2))
        return 0 if res["summary"]["recall_met"] else 1
    problems = [p for p in args.problems.split(",") if p] or None
    seeds = tuple(int(s) for s in args.seeds.split(","))
    tmp = None
    store = args.store
    if store is None:
        tmp = tempfile.TemporaryDirectory(prefix="ks-bench-mining-")
        store = Path(tmp.name)
    res = {**origin, **run(args.executor, problems, store.resolve(), args.jobs, args.model, args.max_steps, seeds,
                           args.parallel_problems, not args.no_end_points, args.strategy, args.time_limit,
                           args.timeout)}
    write_result(res, args.out, f"bench_mining_{res['executor']}.json", indent=2)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print_table(res)
    return 0 if res["summary"]["recall_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
