"""Human-readable rendering of a GateResult (the CLI's non-JSON output)."""
from __future__ import annotations

import io

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mining.gate.gate import GateResult

_STYLE = {"pass": "green", "fail": "red", "error": "red", "skip": "yellow", "unsupported": "yellow"}


def render_text(result: GateResult) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=120, force_terminal=False, color_system=None)
    console.print(f"{result.problem}  {result.kernel}  executor={result.executor}  "
                  f"verdict={result.verdict.upper()}  ({result.wall_s:.2f}s)")
    stages = Table(title="stages", show_lines=False)
    for col in ("stage", "status", "cached", "time s", "detail"):
        stages.add_column(col)
    for name, stage in result.stages.items():
        detail = stage.get("reason") or stage.get("note") or ""
        if name == "correctness" and stage.get("status") == "pass":
            detail = f"{stage['cases_passed']}/{stage['cases_total']} cases (workloads x seeds x runs)"
            if stage.get("note"):
                detail += f"; {stage['note']}"
        stages.add_row(name, stage.get("status", "?"), "yes" if stage.get("cached") else "no",
                       f"{stage.get('wall_s', 0):.2f}", escape(detail))
    console.print(stages)
    if result.reason:  # the full one-line reason, unwrapped, so file:line stays clickable
        console.print(f"reason: {result.reason}", soft_wrap=True, markup=False, highlight=False)
    static = result.stages.get("static", {})
    if static.get("archs"):
        t = Table(title="static (ptxas)")
        for col in ("arch", "kernel", "regs", "spills st/ld", "stack", "smem", "top SASS"):
            t.add_column(col)
        for arch, data in static["archs"].items():
            for kname, k in data.get("kernels", {}).items():
                top = sorted(k.get("sass", {}).items(), key=lambda kv: -kv[1])[:4]
                t.add_row(arch, escape(kname[:48]), str(k["registers"]), f"{k['spill_stores']}/{k['spill_loads']}",
                          str(k["stack_frame"]), str(k["smem_static"]), " ".join(f"{o}:{n}" for o, n in top))
        console.print(t)
    prof = result.stages.get("profile", {})
    if prof.get("workloads"):
        t = Table(title=f"profile on {prof.get('device', {}).get('name', '?')}")
        for col in ("workload", "median ms", "IQR ms", "min ms", "repeats"):
            t.add_column(col)
        for label, w in prof["workloads"].items():
            t.add_row(escape(label), f"{w['median_ms']:.4f}", f"{w['iqr_ms']:.4f}", f"{w['min_ms']:.4f}", str(w["repeats"]))
        console.print(t)
    return buf.getvalue().rstrip()


def render_summary(results: list[GateResult]) -> str:
    """One row per gated kernel, for corpus-wide runs."""
    buf = io.StringIO()
    console = Console(file=buf, width=140, force_terminal=False, color_system=None)
    t = Table(title=f"gate: {sum(r.passed for r in results)}/{len(results)} pass")
    for col in ("problem", "kernel", "executor", "verdict", "time s", "reason"):
        t.add_column(col)
    for r in results:
        t.add_row(r.problem, r.kernel.rsplit("/", 1)[-1], r.executor, r.verdict, f"{r.wall_s:.2f}", escape(r.reason[:70]))
    console.print(t)
    return buf.getvalue().rstrip()
