"""Cost of the backend index: a full build, and re-indexing after one target changed.

    python -m eval.bench_backend_index --llvm L15 [--queries L19 --targets Xtensa,LoongArch,...]
        --store EMPTY_STORE [--change-target Lanai] [--out eval/results/backend_index_cost.json]

Full: the store the benchmark uses (eval/bench_backend.ingest_for_run: with ``--queries``, the
held-out targets from that tree and the index tree's other targets), then every embedding and
both GNNs (trained without the held-out targets), from an empty store. Incremental: one function
is appended to one file of ``--change-target`` (a copy of the tree's file, restored afterwards)
and the same two steps run again: only that target is parsed again, only its new or changed
functions are embedded, and the function GNN is kept (less than 20% of its training set
changed); then the file is restored and re-indexed once more (the store ends as it started).
Each step's wall and CPU seconds per phase (on a shared machine CPU seconds are the cost, wall
seconds how busy it was) and the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

from eval.stamp import machine, stamp, write_result

PROBE = ("\n// appended by eval/bench_backend_index.py: one changed function\n"
         "static unsigned benchIndexProbe(unsigned X) { return X + 1; }\n")


def _step(store, llvm: Path, queries: Optional[Path], targets: list[str], jobs: int, log) -> dict:
    from eval.bench_backend import ingest_for_run
    from retrieval.backend.index import PhaseClock, build_indexes

    clock = PhaseClock()
    t0 = time.monotonic()
    ing = ingest_for_run(llvm, queries, store, targets, jobs, log)
    phases = {"ingest": clock.lap("ingest")}
    models = build_indexes(store, exclude=targets, log=log)
    phases.update(models.get("phases", {}))
    return {"wall_s": round(time.monotonic() - t0, 1), "cpu_s": round(sum(p["cpu_s"] for p in phases.values()), 1),
            "phases": phases, "n_functions": int(store.scalar("SELECT count(*) FROM functions") or 0),
            "n_shared_role_functions": models["n_shared_role_functions"], "n_embedded": models.get("n_embedded"),
            "func_gnn": {k: v for k, v in (models.get("func_gnn") or {}).items() if k in ("status", "why", "embedded", "removed", "seconds")},
            "target_gnn": {k: v for k, v in (models.get("target_gnn") or {}).items()
                           if k in ("status", "why", "embedded", "removed", "seconds")},
            "files_with_syntax_errors": ing["failed"], "load_average_after": list(os.getloadavg())}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.bench_backend_index", description=__doc__.split("\n\n")[0])
    ap.add_argument("--llvm", required=True, type=Path, help="the index tree (as `skills corpora fetch` writes it)")
    ap.add_argument("--queries", type=Path, default=None, help="held-out targets' tree (the unseen-targets protocol)")
    ap.add_argument("--targets", default="RISCV,XCore", help="held-out targets (out of GNN training)")
    ap.add_argument("--store", required=True, type=Path, help="an empty store folder (the full build is measured)")
    ap.add_argument("--change-target", default="Lanai", help="the target changed for the incremental re-index")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="result file (default: an untracked temporary file)")
    raw = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    origin = stamp("eval.bench_backend_index", raw)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from corpora.backends.tree import BackendInputError
    from skills.store import Store

    def log(msg: str) -> None:
        print(f"[index] {msg}", file=sys.stderr, flush=True)

    targets = [t for t in args.targets.split(",") if t]
    tree = args.queries if args.change_target in targets and args.queries else args.llvm
    tdir = Path(tree) / "lib" / "Target" / args.change_target
    host = next((f for f in sorted(tdir.glob("*.cpp"))), None) if tdir.is_dir() else None
    if host is None:
        print(f"error: {tdir}: no .cpp file to change (is --change-target a target of the tree?)", file=sys.stderr)
        return 2
    fresh = not (args.store / "store.duckdb").exists() and not any(args.store.glob("*.duckdb"))
    try:
        store = Store(args.store)
        full = _step(store, args.llvm, args.queries, targets, args.jobs, log)
        original = host.read_bytes()
        try:
            host.write_bytes(original + PROBE.encode())
            changed = _step(store, args.llvm, args.queries, targets, args.jobs, log)
        finally:
            host.write_bytes(original)
        restored = _step(store, args.llvm, args.queries, targets, args.jobs, log)
    except BackendInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    res = {**origin, "machine": {**machine(), "load_average_at_end": list(os.getloadavg())},
           "settings": {"llvm": str(args.llvm), "queries": str(args.queries) if args.queries else None,
                        "held_out": targets, "change": f"{host.relative_to(Path(tree))}: one function appended",
                        "store_was_empty": fresh},
           "full": full, "incremental_one_target_changed": changed, "incremental_restored": restored,
           "goals": {"full_within_s": 1200, "incremental_within_s": 120,
                     "full_met": full["wall_s"] <= 1200, "incremental_met": changed["wall_s"] <= 120}}
    write_result(res, args.out, "backend_index_cost.json")
    print(json.dumps({k: res[k] for k in ("full", "incremental_one_target_changed", "goals")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
