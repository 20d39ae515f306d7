"""Coverage stage (CPU executor): which lines of the kernel file ran on the problem's cases.

A gate vouches only for code it executed. A rewrite inside a branch that no workload takes (an
`else` for a null pointer the entry never passes, the instance of a template flag no launch uses)
passes every check without being checked at all, and a skill learned from it would carry evidence
that means nothing. The walk therefore asks, before accepting a step, whether any line of the site
it removes ran (mining/checker.py `KernelGateChecker.unexercised`).

The harness is built as for the correctness stage with gcov counters (`cpu_toolchain` mode
`cover`), run once over the same cases (forward order, race checker off: only which lines run
matters), and `gcov --json-format` reads the counts. The result lists the kernel file's
executable lines and those that ran; it is cached like every stage, by the source's hash.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from corpora.problem import Problem, Workload
from mining.gate.binding import EntryBinding
from mining.gate.harness import harness_source, write_cases
from mining.gate.sandbox import run_limited

COVERAGE_VERSION = "coverage-1"


def gcov_path() -> str | None:
    return shutil.which("gcov")


def coverage_stage(problem: Problem, binding: EntryBinding, source: str, kernel_path: Path, flags: list[str],
                   executor, workdir: Path, workloads: list[Workload], seeds: tuple[int, ...], few_seeds: int,
                   timeout_s: float, mem_mb: float) -> dict[str, Any]:
    """{"status": "pass", "lines": executable lines, "ran": lines that ran} of the kernel file."""
    if executor.name != "cpu":
        return {"status": "skip", "reason": "coverage is measured on the cpu executor only"}
    if gcov_path() is None:
        return {"status": "skip", "reason": "gcov not found on PATH (it comes with g++)"}
    if executor.unsupported(source):
        return {"status": "unsupported", "reason": "not runnable on the cpu executor"}
    build_dir = workdir / "build-cover"
    data_dir = workdir / "data-cover"
    build_dir.mkdir(exist_ok=True)
    data_dir.mkdir(exist_ok=True)
    (build_dir / kernel_path.name).write_text(executor.prepare_source(source))
    harness = build_dir / "ks_harness_main.cu"
    harness.write_text(harness_source(binding, kernel_path.name))
    build = executor.build(harness, build_dir / kernel_path.name, flags, build_dir / "harness", False, timeout_s,
                           coverage=True)
    if not build.ok:
        return {"status": "fail", "reason": f"build failed: {build.reason}",
                **({"transient": True} if build.transient else {})}
    _, manifest = write_cases(problem.definition, workloads, seeds, few_seeds, data_dir)
    env = {"KS_ORDER": "forward", "KS_RACECHECK": "0", "KS_GUARD_BYTES": "0"}
    run = run_limited([str(build.binary), str(manifest)], cwd=data_dir, timeout_s=timeout_s, mem_mb=mem_mb, env=env,
                      readable=[build.binary], writable=[data_dir, build_dir])
    counts = sorted(build_dir.glob("*.gcda"))
    if not counts:
        return {"status": "fail", "reason": "the coverage run wrote no counts"
                + (f" (it failed: {run.stderr.strip().splitlines()[-1][:200]})" if not run.ok and run.stderr.strip() else ""),
                **({"transient": True} if run.timed_out or run.mem_exceeded else {})}
    report = run_limited([gcov_path() or "gcov", "--json-format", "--stdout", *map(str, counts)], cwd=build_dir,
                         timeout_s=timeout_s, mem_mb=2048, readable=[build_dir], writable=[build_dir])
    if not report.ok:
        return {"status": "fail", "reason": f"gcov failed: {report.stderr.strip()[-200:]}", "transient": True}
    lines, ran = kernel_lines(report.stdout, kernel_path.name)
    return {"status": "pass", "lines": sorted(lines), "ran": sorted(ran), "run_ok": run.ok}


def kernel_lines(gcov_json: str, kernel_name: str) -> tuple[set[int], set[int]]:
    """(executable lines, lines that ran) of the file named `kernel_name` in gcov's JSON output
    (one document per line; counts of a line summed over its entries)."""
    lines: set[int] = set()
    ran: set[int] = set()
    for doc in gcov_json.splitlines():
        doc = doc.strip()
        if not doc.startswith("{"):
            continue
        for f in json.loads(doc).get("files", []):
            if Path(f.get("file", "")).name != kernel_name:
                continue
            for ln in f.get("lines", []):
                lines.add(int(ln["line_number"]))
                if int(ln.get("count", 0)) > 0:
                    ran.add(int(ln["line_number"]))
    return lines, ran


def unexercised_reason(coverage: dict[str, Any], source: str, start: int, end: int) -> str:
    """Why a gate result cannot vouch for removing the bytes [start, end) of `source` (UTF-8 byte
    offsets, as the parser gives them: none of its executable lines ran on any case), or '' (some
    ran, or the coverage stage has nothing to say)."""
    if coverage.get("status") != "pass":
        return ""
    raw = source.encode("utf-8")
    first = raw.count(b"\n", 0, start) + 1
    last = raw.count(b"\n", 0, max(start, end - 1)) + 1
    span = [n for n in coverage.get("lines", []) if first <= n <= last]
    if not span or set(span) & set(coverage.get("ran", [])):
        return ""
    where = f"line {first}" if first == last else f"lines {first}-{last}"
    return (f"unexercised: no case runs {where} (the gate cannot judge removing code it never executes; "
            "a workload that reaches it would)")


