"""`skills`: the command-line face of kernel-skills.

A thin layer over the library: every command calls one library function and prints its
result (a table for people, `--json` for programs). Heavy imports (torch, chromadb,
sentence-transformers, litellm) happen inside the commands that need them, never here.

Exit codes: 0 success/pass, 1 the checked thing failed, 2 bad input.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(
    name="skills",
    help="Mine, store and retrieve optimization skills from expert kernels and compiler backends.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Mine, store and retrieve optimization skills from expert kernels and compiler backends."""


def fail(message: str, code: int = 2) -> None:
    """Print a one-line error to stderr and exit (2 = bad input by default)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


# --------------------------------------------------------------------------- gate
def _problem_dirs(paths: list[Path]) -> list[Path]:
    """Each path is a problem folder, or a folder whose subfolders are problems (a corpus)."""
    found: list[Path] = []
    for path in paths:
        if (path / "definition.json").exists():
            found.append(path)
        elif path.is_dir() and (subs := sorted(p for p in path.iterdir() if (p / "definition.json").exists())):
            found.extend(subs)
        else:
            fail(f"{path}: not a problem folder (no definition.json) and holds no problem folders")
    return found


@app.command()
def gate(
    paths: list[Path] = typer.Argument(..., help="Problem folder(s), or a corpus folder of problems."),
    kernel: Optional[Path] = typer.Option(None, "--kernel", "-k", help="Kernel file to check (default: the problem's kernel.cu)."),
    all_kernels: bool = typer.Option(False, "--all-kernels", help="Gate every .cu file of each problem."),
    executor: str = typer.Option("auto", "--executor", "-e", help="auto | cpu | cuda"),
    stages: str = typer.Option("static,correctness,profile", "--stages", help="Comma-separated stages to run."),
    seeds: int = typer.Option(3, "--seeds", min=1, help="Random seeds per workload."),
    archs: Optional[str] = typer.Option(None, "--archs", help="Targets for the static stage (default: solution.toml, else sm_80,sm_90)."),
    sanitize: bool = typer.Option(False, "--sanitize", help="CPU: AddressSanitizer build; CUDA: compute-sanitizer memcheck."),
    timeout: float = typer.Option(120.0, "--timeout", help="Wall-clock limit per subprocess, seconds."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Recompute and overwrite cached stage results."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root (the cache lives here). Default ./.skills"),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Check kernels: static (parse, nvcc/ptxas, SASS), correctness (workloads x seeds), profile (GPU only)."""
    from mining.gate import BadInput, GateConfig, run_gate
    from mining.gate.report import render_summary, render_text

    problems = _problem_dirs(paths)
    if kernel is not None and len(problems) != 1:
        fail("--kernel needs exactly one problem folder")
    config = GateConfig(
        executor=executor,
        stages=tuple(s.strip() for s in stages.split(",") if s.strip()),
        seeds=tuple(range(seeds)),
        archs=tuple(a.strip() for a in archs.split(",") if a.strip()) if archs else None,
        sanitize=sanitize,
        timeout_s=timeout,
        use_cache=not no_cache,
        store=store,
    )
    jobs: list[tuple[Path, Optional[Path]]] = []
    for problem in problems:
        if all_kernels:
            jobs.extend((problem, k) for k in sorted(problem.glob("*.cu")))
        else:
            jobs.append((problem, kernel))
    results = []
    for problem, k in jobs:
        try:
            results.append(run_gate(problem, kernel=k, config=config))
        except BadInput as exc:
            fail(str(exc), 2)
        except KeyboardInterrupt:
            fail("interrupted", 130)
    if as_json:
        payload = results[0].to_dict() if len(results) == 1 else [r.to_dict() for r in results]
        typer.echo(json.dumps(payload, indent=2))
    elif len(results) == 1:
        typer.echo(render_text(results[0]))
    else:
        typer.echo(render_summary(results))
    raise typer.Exit(0 if all(r.passed for r in results) else 1)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
