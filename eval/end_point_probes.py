"""Are the backward walk's end points correct on the probe set, not only on the problem's own
workloads? (issue 19 target)

    python -m eval.end_point_probes RESULT.json --store DIR [--only a,b] [--out FILE]

For every judged expert of a `bench_lineage` result: the end point (the lineage's last kernel,
read from the store the walk saved it in) and the expert are gated (correctness, CPU executor)
on the adversarial workloads `mining/probe.py` derives from the definition's axes and from the
*expert's* own constants (tiles, vector widths, geometry bounds, each at the boundary and one
past it). A probe the expert itself fails lies outside the expert's domain and says nothing
about the walk; an end point *regresses* only on a probe the expert passes. A probe that times out
or crashes stops the harness, so every probe the end point seems to fail is gated again on its own
(600 s limit) before it counts: a regression, or a timeout (reported apart: the machine's load
decides those). Table to stdout, JSON (stamped: eval/stamp.py) only where --out names it.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from eval.stamp import stamp, write_result

ROOT = Path(__file__).resolve().parent.parent


def _final_source(store: Path, problem: str) -> Optional[str]:
    from skills.kernel_store import KernelStore
    from skills.store import Store

    with Store(store, read_only=True) as st:
        ks = KernelStore(st)
        lins = [l for l in ks.lineages() if l.problem == problem]
        if not lins:
            return None
        return ks.source(lins[-1].final_hash)


def check_expert(expert, store: Path, work: Path, max_probes: int) -> dict[str, Any]:
    from corpora.problem import load_problem
    from corpora.real import materialize
    from mining.gate import GateConfig, run_gate
    from mining.probe import outcomes_from_gate, probe_problem_dir, probe_workloads, workload_subset_dir

    t0 = time.perf_counter()
    d = materialize(expert, store / "sources", work / expert.source / expert.problem)
    problem = load_problem(d)
    expert_src = (d / "kernel.cu").read_text()
    end_src = _final_source(store, problem.name)
    row: dict[str, Any] = {"problem": expert.problem, "source": expert.source}
    if end_src is None:
        return {**row, "status": "no lineage in the store"}
    probes = probe_workloads(problem, expert_src, max_probes=max_probes)
    pdir = probe_problem_dir(problem, probes, store / "cache")
    cfg = GateConfig(executor="cpu", stages=("correctness",), store=store)
    outs = {}
    for label, text in (("expert", expert_src), ("end", end_src)):
        res = run_gate(pdir, kernel=Path("kernel.cu"), config=cfg, source=text).to_dict()
        outs[label] = outcomes_from_gate(res, probes)
    suspects = [i for i, (x, e) in enumerate(zip(outs["expert"], outs["end"])) if x.passed and not e.passed]
    # a probe that timed out or crashed stops the harness: the probes after it were never run.
    # Each suspect is gated again on its own, with a longer limit, before it counts.
    regressions, timeouts = [], []
    long_cfg = GateConfig(executor="cpu", stages=("correctness",), store=store, timeout_s=600)
    for i in suspects:
        line = probes.workloads[i]
        one = workload_subset_dir(problem, [line], store / "cache")
        res = run_gate(one, kernel=Path("kernel.cu"), config=long_cfg, source=end_src).to_dict()
        stage = res.get("stages", {}).get("correctness", {})
        if stage.get("status") == "pass":
            continue
        (timeouts if "timed out" in stage.get("reason", "") else regressions).append(
            {"axes": line["axes"], "reason": stage.get("reason", "")[:300]})
    status = "regressed" if regressions else ("timeout" if timeouts else "ok")
    return {**row, "status": status, "probes": len(probes.workloads),
            "expert_pass": sum(o.passed for o in outs["expert"]), "end_pass": sum(o.passed for o in outs["end"]),
            "regressions": regressions, "timeouts": timeouts, "end_is_expert": end_src == expert_src,
            "wall_s": round(time.perf_counter() - t0, 1)}


def main(argv: Optional[list[str]] = None) -> int:
    from corpora.real import list_experts

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("result", type=Path, help="a bench_lineage JSON (its judged experts are checked)")
    ap.add_argument("--store", type=Path, required=True, help="the store the walk saved its lineages in")
    ap.add_argument("--only", default=None)
    ap.add_argument("--max-probes", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here (eval/results/... to record it)")
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    origin = stamp("eval.end_point_probes", raw_argv)
    try:
        res = json.loads(args.result.read_text())
    except (OSError, ValueError) as exc:
        print(f"error: {args.result}: {exc}", file=sys.stderr)
        return 2
    judged = {(e["source"], e["problem"]) for e in res.get("experts", []) if "steps" in e}
    only = set(args.only.split(",")) if args.only else None
    experts = [e for e in list_experts() if (e.source, e.problem) in judged and
               (only is None or e.problem in only or f"{e.source}/{e.problem}" in only)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="ks-probes-") as tmp:
        for e in experts:
            row = check_expert(e, args.store, Path(tmp), args.max_probes)
            rows.append(row)
            print(f"{e.source + '/' + e.problem:40s} {row['status']:10s} probes {row.get('probes', '-'):>3} "
                  f"expert {row.get('expert_pass', '-'):>3} end {row.get('end_pass', '-'):>3} "
                  f"{row.get('wall_s', '')} s", flush=True)
    bad = [r for r in rows if r["status"] == "regressed"]
    summary = {"experts": len(rows), "regressed": len([r for r in rows if r["status"] == "regressed"]),
               "timeout": len([r for r in rows if r["status"] == "timeout"]),
               "not_checked": len([r for r in rows if r["status"] not in ("ok", "regressed", "timeout")])}
    print(f"total: {summary['experts']} end points on their probes, {summary['regressed']} regressed, "
          f"{summary['timeout']} with a probe timing out, {summary['not_checked']} not checked")
    if args.out:
        write_result({**origin, "result": str(args.result), "rows": rows, "summary": summary}, args.out,
                     "end_point_probes.json")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
