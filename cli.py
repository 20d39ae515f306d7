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
    results, bad = [], []
    for problem, k in jobs:
        try:
            results.append(run_gate(problem, kernel=k, config=config))
            if len(jobs) > 1:  # progress for corpus runs, on stderr so --json stays clean
                r = results[-1]
                typer.echo(f"{r.problem}/{Path(r.kernel).name}: {r.verdict} ({r.wall_s:.1f}s) {r.reason[:160]}", err=True)
        except BadInput as exc:
            if len(jobs) == 1:
                fail(str(exc), 2)
            bad.append(str(exc))  # a corpus run reports every bad problem and goes on
        except KeyboardInterrupt:
            fail("interrupted", 130)
    if as_json:
        payload = results[0].to_dict() if len(jobs) == 1 else [r.to_dict() for r in results] + \
            [{"verdict": "bad_input", "reason": b} for b in bad]
        typer.echo(json.dumps(payload, indent=2))
    elif len(jobs) == 1:
        typer.echo(render_text(results[0]))
    else:
        typer.echo(render_summary(results))
    for message in bad:
        typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2 if bad else 0 if all(r.passed for r in results) else 1)


# --------------------------------------------------------------------------- corpora, backend
corpora_app = typer.Typer(help="Fetch corpora that are downloaded at use time (never committed).",
                          no_args_is_help=True)
app.add_typer(corpora_app, name="corpora")
backend_app = typer.Typer(help="Compiler backends: index LLVM targets, retrieve, generate functions.",
                          no_args_is_help=True)
app.add_typer(backend_app, name="backend")


def _store(store: Optional[Path]):
    from skills.store import Store

    return Store(store)


@corpora_app.command("fetch")
def corpora_fetch(
    name: str = typer.Argument(..., help="Corpus to fetch: llvm."),
    version: int = typer.Option(15, "--version", help="LLVM major version."),
    dest: Optional[Path] = typer.Option(None, "--dest", help="Where to put it (default <store>/corpora/llvm-<version>)."),
    source: str = typer.Option("debian", "--source", help="debian (apt source package) | an LLVM checkout folder | a git URL."),
    ref: Optional[str] = typer.Option(None, "--ref", help="Branch or tag for a git URL (e.g. llvmorg-15.0.6)."),
    force: bool = typer.Option(False, "--force", help="Fetch again even when DEST is complete."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root. Default ./.skills"),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Fetch LLVM's lib/Target and ELF relocation tables (Debian source package, a checkout, or git)."""
    from corpora.llvm import FetchError, fetch_llvm

    if name != "llvm":
        fail(f"unknown corpus {name!r} (known: llvm)")
    try:
        result = fetch_llvm(version, dest=dest, store_root=store, source=source, ref=ref, force=force)
    except FetchError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        how = "reused" if result.reused else f"fetched in {result.seconds:.1f}s"
        typer.echo(f"LLVM {result.version} ({result.method}) {how}: {result.dest}")
        typer.echo(f"{len(result.targets)} targets, {result.n_files} files, {result.bytes / 1e6:.1f} MB: "
                   + " ".join(result.targets))


@backend_app.command("index")
def backend_index(
    path: Path = typer.Argument(..., help="<llvm>/lib/Target, a folder holding lib/Target, or one target folder."),
    targets: Optional[str] = typer.Option(None, "--targets", help="Comma-separated targets (default: all found)."),
    force: bool = typer.Option(False, "--force", help="Re-parse targets even when their files are unchanged."),
    holdout: Optional[str] = typer.Option(None, "--holdout", help="Targets to leave out of GNN training (comma-separated)."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Targets parsed in parallel."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root. Default ./.skills"),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Ingest LLVM-style targets (functions, TableGen records, fixups, relocations) and build the indexes."""
    from corpora.backend_tree import BackendInputError
    from retrieval.backend_index import index_backends

    def log(msg: str) -> None:
        if not as_json:
            typer.echo(msg, err=True)

    st = _store(store)
    try:
        report = index_backends(path, st, targets=[t for t in (targets or "").split(",") if t] or None, force=force,
                                exclude_from_training=[t for t in (holdout or "").split(",") if t], jobs=jobs, log=log)
    except BackendInputError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
        return
    for t in report.targets:
        typer.echo(f"{t['target']:12s} {t['status']:9s} {t['n_functions']:6d} functions {t['n_attributes']:6d} "
                   f"attributes {t['n_files']:4d} files {t['n_failed']:3d} with syntax errors")
    typer.echo(f"{report.n_functions} functions, {report.n_shared_role_functions} with a role shared by 2+ targets "
               f"({report.n_embedded} newly embedded); {len(report.failed_files)} files with syntax errors; "
               f"{report.seconds:.1f}s")
    for name, m in report.models.items():
        typer.echo(f"model {m['name']}: {m['status']}")
    for f in report.failed_files[:20]:
        typer.echo(f"  syntax error: {f['target']}/{f['error'] or f['path']}")
    if len(report.failed_files) > 20:
        typer.echo(f"  ... {len(report.failed_files) - 20} more (see --json)")


@backend_app.command("search")
def backend_search(
    code: Path = typer.Option(..., "--code", help="A C++ file holding one backend function."),
    target: Optional[str] = typer.Option(None, "--target", help="The query's target (its names are neutralized; it is excluded)."),
    k: int = typer.Option(5, "--k", min=1),
    mode: str = typer.Option("fused", "--mode", help="bm25 | text | graph | fused"),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root. Default ./.skills"),
    as_json: bool = typer.Option(False, "--json", help="Print the hits as JSON."),
) -> None:
    """Find implementations in other targets similar to a given function."""
    from corpora.backend_tree import cpp_parser, prepare_cpp, walk
    from retrieval.backend_search import MODES, BackendIndex, SearchError

    if mode not in MODES:
        fail(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    if not code.is_file():
        fail(f"{code}: no such file")
    src = code.read_bytes()
    tree = cpp_parser().parse(prepare_cpp(src))
    fn = next((n for n in walk(tree.root_node) if n.type == "function_definition"), None)
    if fn is None or fn.child_by_field_name("body") is None:
        fail(f"{code}: no C++ function definition found")
    body = fn.child_by_field_name("body")
    signature = " ".join(src[fn.start_byte:body.start_byte].decode(errors="replace").split())
    try:
        idx = BackendIndex(_store(store))
        doc, tvec, gvec = idx.query_vectors(signature, body.text.decode(errors="replace"), target)
        hits = idx.search(doc, tvec, gvec, query_target=target, k=k)[mode]
    except SearchError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps([h.to_dict() for h in hits], indent=2))
    else:
        for n, h in enumerate(hits, 1):
            typer.echo(f"{n}. {h.target:12s} {h.qualified_name}  ({h.role})  ranks {h.ranks}")


@backend_app.command("generate")
def backend_generate(
    target: str = typer.Option(..., "--target", help="The target to write the function for (indexed)."),
    function: str = typer.Option(..., "--function", help="Role, e.g. ELFObjectWriter::getRelocType or getRelocType."),
    k: int = typer.Option(3, "--k", min=1, help="Implementations from other targets to retrieve."),
    model: Optional[str] = typer.Option(None, "--model", help="litellm model string (enables --strategy llm)."),
    strategy: Optional[str] = typer.Option(None, "--strategy", help="fork-adapt (default without --model) | llm."),
    prompt_only: bool = typer.Option(False, "--prompt-only", help="Print the few-shot prompt, generate nothing."),
    repair: int = typer.Option(0, "--repair", min=0, help="With an LLM: feed compile errors back up to N times."),
    no_gate: bool = typer.Option(False, "--no-gate", help="Skip the clang-15 compile gate."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root. Default ./.skills"),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Generate T's implementation of a role from the most similar targets' implementations."""
    from corpora.backend_tree import BackendInputError
    from mining.backend_gate import GateInputError, GateUnavailable
    from prompts.backend import GenerateRequest, generate, render_text
    from retrieval.backend_search import SearchError

    strat = strategy or ("llm" if model else "fork-adapt")
    req = GenerateRequest(target=target, role=function, k=k, strategy=strat, model=model, prompt_only=prompt_only,
                          repair=repair, gate=not no_gate)
    try:
        result = generate(_store(store), req)
    except (BackendInputError, SearchError, GateInputError) as exc:
        fail(str(exc))
    except GateUnavailable as exc:
        fail(str(exc), 2)
    except Exception as exc:  # an LLM endpoint failing is not bad input
        from prompts.llm import LLMError

        if isinstance(exc, LLMError):
            fail(str(exc), 1)
        raise
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    elif prompt_only:
        typer.echo(result["prompt"])
    else:
        typer.echo(render_text(result))
    gate_res = result.get("gate") or {}
    raise typer.Exit(1 if gate_res.get("passed") is False else 0)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
