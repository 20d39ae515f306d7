"""Gate soundness suite: does the validation gate reject every planted bug and pass every correct kernel?

    python -m eval.gate_soundness --executor cpu --json [--jobs 2] [--out FILE] [--store DIR]
    python -m eval.gate_soundness --executor cuda            # a table for people

The suite lives in eval/soundness/: one small problem folder per kernel family, each with a
`correct.cu` (and sometimes a second correct variant) and planted-bug variants `bug_<class>_<n>.cu`
that differ from `correct.cu` in a few lines. eval/soundness/manifest.json lists every kernel with
its class and the expected verdict (`reject` for planted bugs, `pass` for correct kernels).

Every entry goes through the gate's correctness stage (library API, fresh store, so no cached
verdict is reused). A planted bug counts as rejected when the verdict is anything but pass; the
entry records why (wrong_values, unwritten, race, oob, barrier_divergence, deadlock, timeout, ...).
A correct kernel that does not pass is a false reject. Exit status 0 only when every planted bug
is rejected and no correct kernel is rejected. The JSON summary (stamped: eval/stamp.py) is
written to ``--out FILE``, else to an untracked temporary gate_soundness_<executor>.json
(eval/results/gate_soundness_{cpu,cpu_sanitize,cuda}.json are the committed records).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Optional

from eval.stamp import stamp, write_result

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "eval" / "soundness"
MANIFEST = SUITE / "manifest.json"


def load_manifest(path: Path = MANIFEST) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    entries = data["entries"] if isinstance(data, dict) else data
    for i, e in enumerate(entries):
        for key in ("problem", "kernel", "class", "expect"):
            if key not in e:
                raise SystemExit(f"{path}: entry {i}: missing {key!r}")
        if e["expect"] not in ("pass", "reject"):
            raise SystemExit(f"{path}: entry {i}: expect must be pass or reject, not {e['expect']!r}")
        if e.get("check", "workloads") not in ("workloads", "probe"):
            raise SystemExit(f"{path}: entry {i}: check must be workloads or probe, not {e['check']!r}")
    return entries


def applicable(entry: dict[str, Any], executor: str, sanitize: bool) -> bool:
    """An entry may need a mode: `"requires": {"sanitize": true, "executors": ["cpu"]}` (a host-memory
    bug only AddressSanitizer can see); it is listed as not applicable elsewhere, never counted."""
    req = entry.get("requires") or {}
    if req.get("sanitize") and not sanitize:
        return False
    return executor in req.get("executors", [executor])


# --- why a kernel was rejected -------------------------------------------------------------------

_COMPARE = re.compile(r"has (\d+) wrong and (\d+) unwritten of (\d+) elements")
_KIND = re.compile(r"seed \d+: ([A-Za-z][\w\-]*): ")


def classify(verdict: str, reason: str) -> str:
    """A short machine-readable cause for a verdict that is not pass."""
    if verdict == "pass":
        return ""
    if verdict in ("bad_input", "error", "unsupported"):
        return verdict
    low = reason.lower()
    if "build failed" in low:
        return "build_failed"
    if "timed out" in low:
        return "timeout"
    if "memory limit" in low:
        return "memory_limit"
    m = _COMPARE.search(reason)
    if m:
        wrong, unwritten = int(m.group(1)), int(m.group(2))
        if wrong and unwritten:
            return "wrong_values+unwritten"
        return "unwritten" if unwritten else "wrong_values"
    if "asan:" in low or "addresssanitizer" in low:
        return "oob"
    if ": guard: " in low:
        return "oob_guard"
    m = _KIND.search(reason)
    if m:
        kind = m.group(1).lower()
        if kind == "cuda" or kind == "compute-sanitizer":
            if "misaligned" in low:
                return "misaligned"
            if "illegal address" in low or "out of bounds" in low or "out-of-range" in low:
                return "oob"
            return "cuda_error"
        if "misaligned" in low:
            return "misaligned"
        return {"out_of_bounds": "oob", "oob_read": "oob", "oob_write": "oob", "data_race": "race"}.get(kind, kind)
    if "crashed with" in low:
        return "crash"
    if "exited with code" in low:
        return "exit_code"
    return "other"


# --- one entry -----------------------------------------------------------------------------------

def gate_entry(entry: dict[str, Any], executor: str, store: str, timeout_s: float, sanitize: bool,
               suite: str = str(SUITE)) -> dict[str, Any]:
    """Gate one manifest entry (runs in a worker process). Never raises."""
    from mining.gate import BadInput, GateConfig, run_gate

    problem_dir = Path(suite) / entry["problem"]
    kernel = problem_dir / entry["kernel"]
    out: dict[str, Any] = {"problem": entry["problem"], "kernel": entry["kernel"], "class": entry["class"],
                           "expect": entry["expect"], "check": entry.get("check", "workloads")}
    start = time.perf_counter()
    try:
        cfg = GateConfig(executor=executor, stages=("correctness",), store=Path(store), timeout_s=timeout_s,
                         sanitize=sanitize)
        if entry.get("check") == "probe":
            res = _gate_on_probes(problem_dir, kernel, cfg, out)
        else:
            res = run_gate(problem_dir, kernel=kernel, config=cfg)
        out["verdict"] = res.verdict
        out["reason"] = res.reason
        corr = res.stages.get("correctness", {})
        out["cases_passed"] = corr.get("cases_passed")
        out["cases_total"] = corr.get("cases_total")
        runs = corr.get("runs") or []
        out["runs"] = [r.get("run") for r in runs]
        errors = {r.get("run"): r["error"] for r in runs if r.get("error")}
        if errors:
            out["run_errors"] = errors
    except BadInput as exc:
        out["verdict"], out["reason"] = "bad_input", str(exc)
    except Exception as exc:  # noqa: BLE001 - a gate bug must show up in the report, not kill the suite
        out["verdict"], out["reason"] = "error", f"gate raised {type(exc).__name__}: {exc}"
    out["why"] = classify(out["verdict"], out.get("reason", ""))
    if entry["expect"] == "reject":
        # "rejected" means the gate judged the kernel and said no; a gate that could not judge
        # (bad input, internal error, unsupported) did not catch the bug.
        out["ok"] = out["verdict"] == "fail"
    else:
        out["ok"] = out["verdict"] == "pass"
    out["wall_s"] = round(time.perf_counter() - start, 3)
    if entry.get("note"):
        out["note"] = entry["note"]
    return out


def _gate_on_probes(problem_dir: Path, kernel: Path, cfg, out: dict[str, Any]):
    """Gate a kernel on the miner's probe sizes (mining/probe.py): small and odd sizes and its own
    geometry bounds (block x vector width x unroll ...) and one past each, in CPU-sized shapes."""
    from corpora.problem import load_problem
    from mining.gate import run_gate
    from mining.probe import probe_problem_dir, probe_workloads

    problem = load_problem(problem_dir)
    source = kernel.read_text()
    probes = probe_workloads(problem, source)
    pdir = probe_problem_dir(problem, probes, Path(cfg.store) / "cache")
    out["probe_bounds"] = probes.bounds
    out["probes"] = len(probes.workloads)
    return run_gate(pdir, kernel=kernel, config=cfg, source=source)


# --- the suite -----------------------------------------------------------------------------------

def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    planted = [r for r in results if r["expect"] == "reject"]
    correct = [r for r in results if r["expect"] == "pass"]
    by_class: dict[str, dict[str, int]] = {}
    for r in planted:
        c = by_class.setdefault(r["class"], {"planted": 0, "rejected": 0})
        c["planted"] += 1
        c["rejected"] += int(r["ok"])
    return {"planted": len(planted), "rejected": sum(int(r["ok"]) for r in planted), "correct": len(correct),
            "false_rejects": sum(int(not r["ok"]) for r in correct),
            "by_class": dict(sorted(by_class.items())), "entries": results}


def suite_passed(summary: dict[str, Any]) -> bool:
    return summary["rejected"] == summary["planted"] and summary["false_rejects"] == 0


def _prebuild_runtime(executor: str, store: Path, sanitize: bool) -> None:
    """Build the CPU runtime object once, before workers race to build it into the same store."""
    if executor != "cpu":
        return
    try:
        from mining.gate import cpu_toolchain
    except ImportError:
        return
    build = getattr(cpu_toolchain, "build_runtime_object", None)
    if build is None:
        return
    try:
        build(store / "cache" / "gate", "asan" if sanitize else "check")
    except Exception:  # noqa: BLE001 - the per-entry gate reports a broken toolchain with its reason
        pass


def run_suite(executor: str = "cpu", jobs: int = 1, store: Optional[Path] = None, timeout_s: float = 60.0,
              sanitize: bool = False, only: Optional[str] = None, manifest: Path = MANIFEST,
              progress=None) -> dict[str, Any]:
    from mining.gate.executors import resolve_executor

    executor = resolve_executor(executor)
    entries = load_manifest(manifest)
    if only:
        pat = re.compile(only)
        entries = [e for e in entries if pat.search(f"{e['problem']}/{e['kernel']} {e['class']}")]
    skipped = [e for e in entries if not applicable(e, executor, sanitize)]
    entries = [e for e in entries if applicable(e, executor, sanitize)]
    suite = str(manifest.parent)
    own_store = store is None
    store_path = Path(tempfile.mkdtemp(prefix="ks-soundness-")) if own_store else Path(store)
    try:
        _prebuild_runtime(executor, store_path, sanitize)
        results: list[Optional[dict[str, Any]]] = [None] * len(entries)
        if jobs <= 1:
            for i, e in enumerate(entries):
                results[i] = gate_entry(e, executor, str(store_path), timeout_s, sanitize, suite)
                if progress:
                    progress(results[i])
        else:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = {pool.submit(gate_entry, e, executor, str(store_path), timeout_s, sanitize, suite): i
                           for i, e in enumerate(entries)}
                for fut in as_completed(futures):
                    i = futures[fut]
                    results[i] = fut.result()
                    if progress:
                        progress(results[i])
    finally:
        if own_store:
            shutil.rmtree(store_path, ignore_errors=True)
    summary = summarize([r for r in results if r is not None])
    summary["not_applicable"] = [{"problem": e["problem"], "kernel": e["kernel"], "requires": e.get("requires")}
                                 for e in skipped]
    return summary


# --- output --------------------------------------------------------------------------------------

def format_table(summary: dict[str, Any], executor: str) -> str:
    rows = [("kernel", "class", "expect", "verdict", "why", "", "reason")]
    for r in summary["entries"]:
        reason = r.get("reason", "")
        reason = reason if len(reason) <= 110 else reason[:107] + "..."
        rows.append((f"{r['problem']}/{r['kernel']}" + (" [probes]" if r.get("check") == "probe" else ""), r["class"], r["expect"], r["verdict"], r["why"] or "-",
                     "ok" if r["ok"] else "MISS" if r["expect"] == "reject" else "FALSE-REJECT", reason))
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:6])) + "  " + row[6] for row in rows]
    lines.insert(1, "-" * min(200, sum(widths) + 12 + 20))
    lines.append("")
    lines.append(f"by class ({executor} executor):")
    for cls, c in summary["by_class"].items():
        lines.append(f"  {cls:<30} {c['rejected']}/{c['planted']} rejected")
    lines.append("")
    lines.append(f"planted {summary['planted']}, rejected {summary['rejected']}; correct {summary['correct']}, "
                 f"false rejects {summary['false_rejects']}  ->  "
                 f"{'SOUND' if suite_passed(summary) else 'NOT SOUND'}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.gate_soundness", description=__doc__.splitlines()[0])
    ap.add_argument("--executor", default="cpu", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--json", action="store_true", help="print the JSON summary instead of a table")
    ap.add_argument("--jobs", type=int, default=1, help="entries gated in parallel (processes)")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON summary here (eval/results/... to record it)")
    ap.add_argument("--store", type=Path, default=None, help="gate store (default: a fresh temp dir, removed after)")
    ap.add_argument("--timeout", type=float, default=60.0, help="per harness run, seconds")
    ap.add_argument("--sanitize", action="store_true", help="gate in the executor's sanitizer mode")
    ap.add_argument("--only", default=None, help="regex over 'problem/kernel class' to run a subset")
    ap.add_argument("--manifest", type=Path, default=MANIFEST)
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)

    from mining.gate import BadInput
    from mining.gate.executors import resolve_executor

    try:
        executor = resolve_executor(args.executor)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def progress(r: dict[str, Any]) -> None:
        if not args.json:
            mark = "ok" if r["ok"] else ("MISS" if r["expect"] == "reject" else "FALSE-REJECT")
            print(f"  [{mark}] {r['problem']}/{r['kernel']}: {r['verdict']} {r['why']} ({r['wall_s']:.1f}s)",
                  file=sys.stderr, flush=True)

    start = time.perf_counter()
    origin = {**stamp("eval.gate_soundness", raw_argv), "jobs": args.jobs}  # before anything can change
    summary = run_suite(executor, jobs=max(1, args.jobs), store=args.store, timeout_s=args.timeout,
                        sanitize=args.sanitize, only=args.only, manifest=args.manifest, progress=progress)
    wall = time.perf_counter() - start
    summary = {**origin, "wall_s": round(wall, 1), **summary}
    text = json.dumps(summary, indent=1)
    write_result(summary, args.out, f"gate_soundness_{executor}{'_sanitize' if args.sanitize else ''}.json",
                 quiet=args.json)
    if args.json:
        print(text)
    else:
        print(format_table(summary, executor))
        print(f"({len(summary['entries'])} kernels in {wall:.1f}s with {args.jobs} job(s))")
    return 0 if suite_passed(summary) else 1


if __name__ == "__main__":
    sys.exit(main())
