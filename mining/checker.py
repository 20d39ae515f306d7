"""The kernel gate as a walk `Checker`, shared by mining (backward) and optimization (forward).

    checker = KernelGateChecker(problem, kernel_path, GateConfig(...), jobs, make_pool(jobs))
    verdicts = checker.check_many([source_a, source_b])   # correctness, in worker processes
    ms = checker.time(source_a)                           # GPU only: the kernel's time

Correctness (and any other configured stage) runs in spawned worker processes; GPU timing runs
in this process, the timed run under a file lock shared by every process timing on the GPU
(mining/gate/gpu_lock.py).

**A kernel's time** (`kernel_time`), for mining and optimization alike: the geometric mean of the
median times of the profiled workloads tagged `large` (of all profiled workloads when none is
tagged). Mining profiles the problem's primary large workload only (`mine.primary_profile_dir`,
unless `profile_all_workloads`), so its time is that workload's median; `skills optimize` profiles
the problem's workloads and times it by the large ones. Both committed GPU figures
(`bench_mining_cuda_h200.json`, `optimize_h200.json`) were measured under these definitions.
"""
from __future__ import annotations

import math
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Optional, Sequence

from mining.gate import BadInput, GateConfig, run_gate
from mining.gate.gpu_lock import gpu_timing_lock  # noqa: F401 - re-exported: callers time under it
from mining.gate.sandbox import gate_worker_init
from mining.walk import Verdict
from mining.records import sha256


def gate_worker(args: tuple) -> dict[str, Any]:
    """One gate run (in a worker process): the result as a dict; bad input is a failed verdict."""
    problem_dir, kernel, cfg, source = args
    try:
        return run_gate(Path(problem_dir), Path(kernel), cfg, source=source).to_dict()
    except BadInput as exc:
        return {"passed": False, "verdict": "error", "reason": str(exc), "stages": {}, "wall_s": 0.0}


def run_many(problem_dir: Path, kernel: Path, cfg: GateConfig, sources: Sequence[str],
             pool: Optional[ProcessPoolExecutor]) -> list[dict[str, Any]]:
    """Gate several sources (in the pool when there is one and more than one source)."""
    args = [(str(problem_dir), str(kernel), cfg, s) for s in sources]
    return list(pool.map(gate_worker, args)) if pool is not None and len(args) > 1 else [gate_worker(a) for a in args]


def make_pool(jobs: int) -> Optional[ProcessPoolExecutor]:
    """Worker processes for gate runs (spawned: the parent holds threads and a duckdb handle)."""
    return ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"),
                               initializer=gate_worker_init) if jobs > 1 else None


def stop_pool(pool: Optional[ProcessPoolExecutor], grace_s: float = 5.0) -> None:
    """Stop the gate workers now (Ctrl-C): queued work is cancelled, running gates are unwound."""
    if pool is None:
        return
    pool.shutdown(wait=False, cancel_futures=True)
    children = multiprocessing.active_children()
    for p in children:
        p.terminate()
    deadline = time.monotonic() + grace_s
    for p in children:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1.0)


def kernel_time(profile: dict[str, Any]) -> Optional[float]:
    """A kernel's time in ms from a passing profile stage (module docstring): the geometric mean of
    the median times of the workloads tagged large, of all workloads when none is."""
    w = profile.get("workloads") or {}
    large = [v["median_ms"] for v in w.values() if "large" in v.get("tags", []) and v.get("median_ms", 0) > 0]
    meds = large or [v["median_ms"] for v in w.values() if v.get("median_ms", 0) > 0]
    return math.exp(sum(map(math.log, meds)) / len(meds)) if meds else None


def gate_summary(d: dict[str, Any], detail: bool = False) -> dict[str, Any]:
    """A gate result in a few fields (stored with a step or an attempt); `detail` adds the
    workloads and seeds checked."""
    st = d.get("stages", {})
    c = st.get("correctness", {})
    out = {"verdict": d.get("verdict"), "stages": {k: v.get("status") for k, v in st.items()},
           "cases": f"{c.get('cases_passed', 0)}/{c.get('cases_total', 0)}" if c else ""}
    if detail:
        out |= {"workloads": c.get("workloads", []), "seeds": c.get("seeds", [])}
    return out | {"wall_s": d.get("wall_s")}


def _environment_build_failure(d: dict[str, Any]) -> bool:
    c = d.get("stages", {}).get("correctness", {})
    return bool(c.get("transient")) and str(c.get("reason", "")).startswith("build failed")


class KernelGateChecker:
    """The kernel gate as the walk's Checker: the configured stages in a process pool; the profile
    (GPU timing) one at a time in this process, on `profile_dir`'s workloads."""

    def __init__(self, problem_dir: Path, kernel: Path, gate_cfg: GateConfig, pool: Optional[ProcessPoolExecutor],
                 profile_dir: Optional[Path] = None, profile_repeats: Optional[int] = None):
        self.problem_dir, self.kernel, self.cfg, self.pool = Path(problem_dir), kernel, gate_cfg, pool
        self.can_time = gate_cfg.executor == "cuda"
        self.profile_dir = profile_dir or self.problem_dir
        self.profile_repeats = profile_repeats
        self.results: dict[str, dict[str, Any]] = {}  # source hash -> full gate dict
        self.profiles: dict[str, dict[str, Any]] = {}  # source hash -> profile stage
        self.coverage: dict[str, dict[str, Any]] = {}  # source hash -> coverage stage

    def check_many(self, sources: Sequence[str]) -> list[Verdict]:
        dicts = run_many(self.problem_dir, self.kernel, self.cfg, sources, self.pool)
        # A build that failed for the machine's sake (compiler timed out on a loaded machine, a
        # missing header) says nothing about the candidate: retry it once with more time rather
        # than record a rejection (issue 22: environment failures are not verdicts).
        for i, d in enumerate(dicts):
            if _environment_build_failure(d):
                cfg = replace(self.cfg, timeout_s=self.cfg.timeout_s * 3)
                dicts[i] = gate_worker((str(self.problem_dir), str(self.kernel), cfg, sources[i]))
        out = []
        for s, d in zip(sources, dicts):
            self.results[sha256(s)] = d
            out.append(Verdict(passed=bool(d.get("passed")), verdict=d.get("verdict", "error"),
                               reason=d.get("reason", ""), summary=gate_summary(d),
                               static=d.get("stages", {}).get("static", {}), raw=d, wall_s=d.get("wall_s", 0.0)))
        return out

    def unexercised(self, source: str, start: int, end: int) -> str:
        """Why the gate cannot vouch for a step that removes source's bytes [start, end): none of its lines
        ran on any case (mining/gate/coverage.py); '' when some did or nothing can be said (the
        cuda executor has no line counts)."""
        from mining.gate.coverage import unexercised_reason
        from mining.gate.executors import resolve_executor

        if resolve_executor(self.cfg.executor) != "cpu":
            return ""
        h = sha256(source)
        if h not in self.coverage:
            d = gate_worker((str(self.problem_dir), str(self.kernel), replace(self.cfg, stages=("coverage",)), source))
            self.coverage[h] = d.get("stages", {}).get("coverage", {})
        return unexercised_reason(self.coverage[h], source, start, end)

    def profile_stage(self, source: str) -> dict[str, Any]:
        """The profile stage's result for `source` (timed once, cached here); {} without a GPU."""
        if not self.can_time:
            return {}
        h = sha256(source)
        if h not in self.profiles:
            cfg = replace(self.cfg, stages=("profile",))
            if self.profile_repeats is not None:
                cfg = replace(cfg, profile_repeats=self.profile_repeats)
            # the gate takes the GPU timing lock around the timed run only (mining/gate/gpu_lock.py)
            d = gate_worker((str(self.profile_dir), str(self.kernel), cfg, source))
            self.profiles[h] = d.get("stages", {}).get("profile", {})
        return self.profiles[h]

    def profile(self, source: str) -> Optional[dict[str, Any]]:
        """The passing profile of `source`, else None."""
        p = self.profile_stage(source)
        return p if p.get("status") == "pass" else None

    def time(self, source: str) -> Optional[float]:
        p = self.profile(source)
        return kernel_time(p) if p else None
