"""`skills`: the command-line face of kernel-skills.

A thin layer over the library: every command calls one library function and prints its
result (a table for people, `--json` for programs). Heavy imports (torch, chromadb,
sentence-transformers, litellm) happen inside the commands that need them, never here.

Exit codes: 0 success/pass, 1 the checked thing failed, 2 bad input.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

# click's plain help and errors: typer's rich rendering imports rich (~0.3 s of a 0.5 s `--help`)
os.environ.setdefault("TYPER_USE_RICH", "0")
import typer  # noqa: E402

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
def _stamped(echo, t0: Optional[float] = None):
    """``echo`` with the seconds since ``t0`` (now) before each line: progress that reads in a log."""
    import time as _time

    t0 = _time.perf_counter() if t0 is None else t0
    return lambda msg: echo(f"[{_time.perf_counter() - t0:6.1f}s] {msg}")


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
    sanitize: bool = typer.Option(False, "--sanitize", help="Add sanitizer runs: CPU, an AddressSanitizer build (race checker and reverse order stay on); CUDA, compute-sanitizer memcheck, racecheck, initcheck and synccheck."),
    timeout: float = typer.Option(120.0, "--timeout", help="Wall-clock limit per subprocess, seconds."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Recompute and overwrite cached stage results."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root (the cache lives here). Default ./.skills"),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    trust: bool = typer.Option(False, "--trust", help="Without a sandbox (bubblewrap) on this machine, build and run "
                               "the kernel and reference unisolated anyway (docs/security.md)."),
    workload: Optional[list[str]] = typer.Option(None, "--workload", "-w", help="An extra workload to check, as "
                                                 "axes (N=1001,M=3); repeatable. Tagged `extra`."),
) -> None:
    """Check kernels: static (parse, nvcc/ptxas, SASS), correctness (workloads x seeds), profile (GPU only)."""
    from mining.gate import BadInput, GateConfig, run_gate
    from mining.gate.report import render_summary, render_text
    from retrieval.agent_tools import ToolError, gate_payload, problem_with_workloads

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
        trust=trust,
    )
    jobs: list[tuple[Path, Optional[Path]]] = []
    for problem in problems:
        if all_kernels:
            jobs.extend((problem, k) for k in sorted(problem.glob("*.cu")))
        else:
            jobs.append((problem, kernel))
    extra = [_parse_axes(w, "--workload") for w in workload or []]
    results, bad = [], []
    for problem, k in jobs:
        try:
            with problem_with_workloads(problem, extra) as pdir:
                results.append(run_gate(pdir, kernel=k.resolve() if k is not None and pdir != problem and k.exists()
                                        else k, config=config))
            if len(jobs) > 1:  # progress for corpus runs, on stderr so --json stays clean
                r = results[-1]
                typer.echo(f"{r.problem}/{Path(r.kernel).name}: {r.verdict} ({r.wall_s:.1f}s) {r.reason[:160]}", err=True)
        except (BadInput, ToolError) as exc:
            if len(jobs) == 1:
                fail(str(exc), 2)
            bad.append(str(exc))  # a corpus run reports every bad problem and goes on
        except KeyboardInterrupt:
            fail("interrupted", 130)
    if as_json:
        payload = gate_payload(results[0]) if len(jobs) == 1 else [gate_payload(r) for r in results] + \
            [{"verdict": "bad_input", "reason": b} for b in bad]
        typer.echo(json.dumps(payload, indent=2))
    elif len(jobs) == 1:
        typer.echo(render_text(results[0]))
    else:
        typer.echo(render_summary(results))
    for message in bad:
        typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2 if bad else 0 if all(r.passed for r in results) else 1)


# --------------------------------------------------------------------------- mining and the skill store
def _split(values: Optional[str]) -> Optional[tuple[str, ...]]:
    return tuple(v.strip() for v in values.split(",") if v.strip()) if values else None


@app.command()
def mine(
    paths: list[Path] = typer.Argument(..., help="Problem folders, or folders of problem folders (a corpus)."),
    executor: str = typer.Option("auto", help="cuda, cpu, or auto (cuda when a GPU is usable)."),
    model: Optional[str] = typer.Option(None, "--model", envvar="SKILLS_MODEL",
                                        help="litellm model for the LLM-proposed operator (off when unset)."),
    jobs: int = typer.Option(2, "--jobs", "-j", min=1, help="Gate processes run in parallel."),
    max_steps: int = typer.Option(100, help="Budget: accepted steps per lineage."),
    max_rejections: int = typer.Option(200, help="Budget: rejected candidates per lineage."),
    strategy: Optional[str] = typer.Option(None, help="priority (CPU default) or smallest_effect (GPU default)."),
    operators: Optional[str] = typer.Option(None, help="Comma-separated operator names to use (default: all)."),
    seeds: str = typer.Option("0,1,2", help="Seeds per workload for every gate check."),
    probe: bool = typer.Option(True, "--probe/--no-probe", help="Probe adversarial workloads for preconditions."),
    slowdown_ceiling: float = typer.Option(2.0, min=0.0, help="GPU: reject a step that leaves the kernel slower than "
                                           "this many times the problem's naive.cu (0: no ceiling)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Re-walk even when the stored lineage is current."),
    index: bool = typer.Option(True, "--index/--no-index", help="Index new and changed skills for `skills query`."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root (default ./.skills)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    trust: bool = typer.Option(False, "--trust", help="Without a sandbox (bubblewrap) on this machine, run the gate "
                               "unisolated anyway (docs/security.md)."),
) -> None:
    """Walk expert kernels backward through gate-validated simplifications and store the skills."""
    import time as _time

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from corpora.problem import ProblemError, load_problem
    from mining.gate import BadInput
    from mining.checker import make_pool, stop_pool
    from mining.mine import MineConfig, mine_problem
    from skills.kernel_store import LineageNotSaved, MinedLineages
    from skills.store import StoreError

    try:
        seed_list = tuple(int(s) for s in seeds.split(","))
    except ValueError:
        fail(f"--seeds: expected comma-separated integers, got {seeds!r}")
    problems = []
    for d in _problem_dirs(paths):
        try:
            load_problem(d)
        except ProblemError as exc:
            fail(str(exc))
        problems.append(d)
    cfg = MineConfig(executor=executor, strategy=strategy, jobs=jobs, max_steps=max_steps,
                     max_rejections=max_rejections, model=model, seeds=seed_list, probe=probe,
                     operators=_split(operators), store=store, use_cache=not no_cache,
                     slowdown_ceiling=slowdown_ceiling, trust=trust)
    console = Console(stderr=True)
    rows, t0, failed, bad = [], _time.perf_counter(), 0, 0
    current = ""
    say = _stamped(lambda m: console.print(m, highlight=False, soft_wrap=True), t0)
    pool = make_pool(jobs)
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=console, transient=not console.is_terminal) as bar:
            overall = bar.add_task("problems", total=len(problems))
            for d in problems:
                cand = bar.add_task(f"  {d.name}: step 1", total=1)

                def on_event(e, cand=cand, name=d.name):
                    if e.kind == "step_start":
                        bar.update(cand, description=f"  {name}: step {e.step}", total=max(1, e.n_candidates),
                                   completed=0)
                    elif e.kind == "evaluated":
                        bar.advance(cand)
                    if console.is_terminal:
                        return
                    # no bar in a log: one line per accepted step and per phase
                    if e.kind == "accepted" and e.candidate is not None:
                        say(f"{name}: step {e.step} accepted: {e.candidate.operator} ({e.candidate.carrier})")
                    elif e.kind == "done":
                        say(f"{name}: walk done ({e.message}); probing preconditions, static stats, lifting skills")
                if not console.is_terminal:
                    say(f"mining {d.name} ({len(rows) + 1}/{len(problems)})")
                current = d.name
                try:
                    out = mine_problem(d, cfg, on_event=on_event, pool=pool, lineages=MinedLineages(cfg.store))
                except (BadInput, LineageNotSaved, StoreError) as exc:
                    if isinstance(exc, BadInput):
                        bad += 1
                    else:
                        failed += 1
                    console.print(f"error: {exc}")
                    rows.append({"problem": d.name, "error": str(exc)})
                    bar.remove_task(cand)
                    bar.advance(overall)
                    continue
                current = ""
                bar.remove_task(cand)
                bar.advance(overall)
                lin = out.lineage
                if not console.is_terminal:
                    say(f"{d.name}: {'stored lineage reused' if out.cached else 'stored'}: {len(lin.steps)} steps, "
                        f"{len(lin.rejections)} rejections, {out.new_skills} new skills ({out.wall_s:.1f}s)")
                rows.append({"problem": out.problem, "lineage": lin.lineage_id, "termination": lin.termination,
                             "steps": len(lin.steps), "rejections": len(lin.rejections), "new_skills": out.new_skills,
                             "merged_skills": out.merged_skills, "cached": out.cached, "wall_s": round(out.wall_s, 1),
                             "llm_tokens": lin.llm_tokens, "carriers_listed": out.listed_carriers,
                             "carriers_removed": out.removed_carriers, "carriers_remaining": out.remaining_carriers,
                             "carriers_not_detected": out.undetected_carriers})
    except BadInput as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        stop_pool(pool)
        pool = None
        saved = [r["problem"] for r in rows if "error" not in r]
        left = [d.name for d in problems if d.name not in {r["problem"] for r in rows}]
        fail(f"interrupted: saved {len(saved)} lineage(s) ({', '.join(saved) or 'none'}); not saved: "
             f"{', '.join(left) or 'none'}" + (f" ({current} was being mined)" if current else ""), 130)
    finally:
        if pool is not None:
            pool.shutdown()
    changed = [r for r in rows if not r.get("cached") and "error" not in r]
    if index and (changed or rows):
        # retrieval indexes what this run added (text + graph; the encoder retrains only when the store changed
        # enough); an index left behind by an interrupted run is rebuilt even when every lineage was cached
        try:
            from retrieval.skill_index import IndexError_, index_is_current, index_skills
            from corpora.store_root import resolve_root
            from skills.store import Store

            st = Store(resolve_root(store))
            if changed or not index_is_current(st):
                rep = index_skills(st, log=lambda m: say(f"index: {m}"))
                console.print(f"indexed {getattr(rep, 'n_skills', '?')} skills for `skills query`")
        except ImportError as exc:  # retrieval extras not installed: mining still stands on its own
            console.print(f"index: skipped ({exc})")
        except IndexError_ as exc:  # e.g. no skills in the store yet
            console.print(f"index: skipped ({exc})")
        except StoreError as exc:
            console.print(f"index: skipped ({exc}); run `skills index` later")
        except KeyboardInterrupt:
            fail("interrupted while indexing: every lineage is saved; the index is stale until the next "
                 "`skills mine` or `skills index`", 130)
    total = {"problems": len(rows), "steps": sum(r.get("steps", 0) for r in rows),
             "rejections": sum(r.get("rejections", 0) for r in rows),
             "new_skills": sum(r.get("new_skills", 0) for r in rows),
             "merged_skills": sum(r.get("merged_skills", 0) for r in rows), "failed": failed,
             "wall_s": round(_time.perf_counter() - t0, 1)}
    if as_json:
        typer.echo(json.dumps({"problems": rows, "total": total}, indent=2))
    else:
        from rich.table import Table

        table = Table(title="skills mine")
        for col in ("problem", "termination", "steps", "rejections", "skills new", "merged", "carriers removed", "time"):
            table.add_column(col)
        for r in rows:
            if "error" in r:
                table.add_row(r["problem"], "error", "", "", "", "", "", "")
                continue
            listed = len(r["carriers_listed"])
            table.add_row(r["problem"], r["termination"] + (" (cached)" if r["cached"] else ""), str(r["steps"]),
                          str(r["rejections"]), str(r["new_skills"]), str(r["merged_skills"]),
                          f"{len(r['carriers_removed'])}/{listed}" if listed else "-", f"{r['wall_s']:.1f} s")
        table.add_row("total", "", str(total["steps"]), str(total["rejections"]), str(total["new_skills"]),
                      str(total["merged_skills"]), "", f"{total['wall_s']:.1f} s")
        Console(width=None if sys.stdout.isatty() else 140).print(table)
    raise typer.Exit(2 if bad else 1 if failed else 0)


def _read(fn, *args, **kwargs) -> None:
    """Print what a read view (skills/read_views.py) returns; its ReadError is bad input (exit 2)."""
    from skills.read_views import ReadError

    try:
        typer.echo(fn(*args, **kwargs))
    except ReadError as exc:
        fail(str(exc))


@app.command("list")
def list_cmd(
    carrier: Optional[str] = typer.Option(None, help="Only skills of this carrier."),
    kind: Optional[str] = typer.Option(None, help="kernel or backend."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List the stored skills."""
    from skills.read_views import list_text

    _read(list_text, store, kind=kind, carrier=carrier, as_json=as_json)


@app.command()
def show(
    skill_id: str = typer.Argument(..., help="Skill id (or a prefix of 4+ characters), key, name, or SKILL.md folder name."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Show one skill's card: intent, anchor, preconditions, effects, risks, evidence."""
    from skills.read_views import show_text

    _read(show_text, store, skill_id, as_json=as_json)


@app.command()
def lineage(
    problem: str = typer.Argument(..., help="Problem name or lineage id."),
    diffs: bool = typer.Option(True, "--diffs/--no-diffs", help="Print each step's diff."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Show a lineage: each accepted step (diff, effect, skill), the rejections and why the walk stopped."""
    from skills.read_views import lineage_text

    _read(lineage_text, store, problem, diffs=diffs, as_json=as_json)


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
    name: str = typer.Argument(..., help="llvm, or a kernel collection: a name from corpora/sources.toml, "
                                          "a git URL, a local git dir/checkout, or pypi:PACKAGE==VERSION."),
    from_path: Optional[Path] = typer.Option(None, "--from", help="Kernel collection: fetch NAME from this local git "
                                             "dir/checkout (git) or sdist archive/folder (sdist) instead of its URL."),
    commit: Optional[str] = typer.Option(None, "--commit", help="Kernel collection: check out this commit "
                                         "(default: the pinned one, else HEAD)."),
    version: int = typer.Option(15, "--version", help="LLVM major version."),
    dest: Optional[Path] = typer.Option(None, "--dest", help="Where to put it (default <store>/corpora/llvm-<version>)."),
    source: str = typer.Option("debian", "--source", help="debian (apt source package) | an LLVM checkout folder | a git URL."),
    ref: Optional[str] = typer.Option(None, "--ref", help="Branch or tag for a git URL (e.g. llvmorg-15.0.6)."),
    force: bool = typer.Option(False, "--force", help="Fetch again even when DEST is complete."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root. Default ./.skills"),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Fetch LLVM's lib/Target (Debian source package, a checkout, or git), or a kernel collection into <store>/sources."""
    from corpora.backends.llvm import FetchError, fetch_llvm

    if name != "llvm":
        _fetch_kernel_source(name, from_path, commit, force, store, as_json)
        return
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


def _fetch_kernel_source(name: str, from_path: Optional[Path], commit: Optional[str], force: bool,
                         store: Optional[Path], as_json: bool) -> None:
    from corpora.kernel_sources import SourceError, fetch_source
    from skills.sources import record_source

    try:
        dest = fetch_source(name, store, commit=commit, from_path=from_path, force=force, record=record_source)
    except SourceError as exc:
        fail(str(exc))
    info = json.loads((dest / "SOURCE.json").read_text())
    if as_json:
        typer.echo(json.dumps({**info, "dir": str(dest)}, indent=2))
    else:
        pin = info.get("commit") or info.get("version")
        typer.echo(f"{info['name']} ({info['kind']}, {info['url']} @ {pin}): {dest}")


@backend_app.command("index")
def backend_index(
    path: Path = typer.Argument(..., help="<llvm>/lib/Target, a folder holding lib/Target, or one target folder."),
    targets: Optional[str] = typer.Option(None, "--targets", help="Comma-separated targets (default: all found)."),
    force: bool = typer.Option(False, "--force", help="Re-parse targets even when their files are unchanged."),
    holdout: Optional[str] = typer.Option(None, "--holdout", help="Targets to leave out of GNN training (comma-separated)."),
    jobs: int = typer.Option(2, "--jobs", "-j", min=1, help="Targets parsed in parallel."),
    retrain: bool = typer.Option(False, "--retrain", help="Retrain the function GNN even when under 20% of its "
                                 "training functions changed (below that it is kept and embeds the changed ones)."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root. Default ./.skills"),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Ingest LLVM-style targets (functions, TableGen records, fixups, relocations) and build the indexes."""
    from corpora.backends.tree import BackendInputError
    from retrieval.backend.index import index_backends

    stamped = _stamped(lambda m: typer.echo(m, err=True))

    def log(msg: str) -> None:
        if not as_json:
            stamped(msg)

    st = _store(store)
    try:
        report = index_backends(path, st, targets=[t for t in (targets or "").split(",") if t] or None, force=force,
                                exclude_from_training=[t for t in (holdout or "").split(",") if t], jobs=jobs, log=log,
                                retrain=retrain)
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
        typer.echo(f"model {m['name']}: {m['status']}" + (f" ({m['why']})" if m.get("why") else ""))
    if report.phases:
        typer.echo("time (wall / CPU seconds): " + ", ".join(f"{k} {v['wall_s']:.0f} / {v['cpu_s']:.0f}"
                                                           for k, v in report.phases.items()))
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
    from corpora.backends.tree import prepare_cpp
    from corpora.code.parse import cpp_parser, walk
    from retrieval.backend.search import MODES, BackendIndex, SearchError

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
    strategy: Optional[str] = typer.Option(None, "--strategy", help="fork-adapt (default without --model) | fork-flow | "
                                           "skills (skeleton + mined skills; with --model, the LLM gets them) | llm."),
    prompt_only: bool = typer.Option(False, "--prompt-only", help="Print the few-shot prompt, generate nothing."),
    repair: int = typer.Option(0, "--repair", min=0, help="With an LLM: feed compile errors back up to N times."),
    no_gate: bool = typer.Option(False, "--no-gate", help="Skip the compile gate (clang of the corpus's LLVM version)."),
    fuse_donors: int = typer.Option(6, "--fuse-donors", min=1, help="fork-adapt: add the statements at least two "
                                    "of the other top K donors (40%) agree on (1 = one donor)."),
    one_donor: bool = typer.Option(False, "--one-donor", help="fork-adapt from the best donor alone (no fusion)."),
    gate_repair: bool = typer.Option(True, "--gate-repair/--no-gate-repair", help="Without an LLM: when the gate fails "
                                     "only on undeclared identifiers, rename them to the target's closest names."),
    repair_rounds: int = typer.Option(3, "--repair-rounds", min=0, help="Gate re-checks the repair may spend."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root. Default ./.skills"),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Generate T's implementation of a role from the most similar targets' implementations."""
    from corpora.backends.tree import BackendInputError
    from mining.backend.gate import GateInputError, GateUnavailable
    from prompts.backend.generate import GenerateRequest, generate, render_text
    from retrieval.backend.search import SearchError

    strat = strategy or ("llm" if model else "fork-adapt")
    req = GenerateRequest(target=target, role=function, k=k, strategy=strat, model=model, prompt_only=prompt_only,
                          repair=repair, gate=not no_gate, fuse_donors=1 if one_donor else fuse_donors,
                          gate_repair=gate_repair, repair_rounds=repair_rounds)
    try:
        result = generate(_store(store), req)
    except (BackendInputError, SearchError, GateInputError) as exc:
        details = getattr(exc, "details", "")
        if details:  # a tool's full diagnostics (TableGen on a tree it cannot read) after the one-line error
            typer.echo(f"error: {exc}", err=True)
            typer.echo(details.rstrip(), err=True)
            raise typer.Exit(2)
        fail(str(exc))
    except GateUnavailable as exc:
        fail(str(exc), 2)
    except Exception as exc:  # an LLM endpoint failing is not bad input
        from mining.llm import LLMError

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


@backend_app.command("mine")
def backend_mine(
    targets: Optional[str] = typer.Option(None, "--targets", help="Targets whose functions to walk (comma-separated; default all)."),
    roles: Optional[str] = typer.Option(None, "--roles", help="Roles to walk, e.g. ELFObjectWriter::getRelocType (comma-separated)."),
    exclude: Optional[str] = typer.Option(None, "--exclude", help="Targets to leave out (held-out targets)."),
    function: Optional[list[str]] = typer.Option(None, "--function", help="A func_id to walk (repeatable)."),
    max_steps: int = typer.Option(150, "--max-steps", min=1),
    time_limit: float = typer.Option(300.0, "--time-limit", help="Seconds per function walk."),
    limit: int = typer.Option(0, "--limit", min=0, help="Walk at most N functions (0 = all selected)."),
    force: bool = typer.Option(False, "--force", help="Walk again even when a lineage with these settings is stored."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root. Default ./.skills"),
    as_json: bool = typer.Option(False, "--json", help="Print the outcomes as JSON."),
) -> None:
    """Walk backend functions backward under the compile gate into skeletons and skills (stored as lineages)."""
    from corpora.backends.tree import BackendInputError
    from mining.backend.gate import GateUnavailable
    from mining.backend.mine import BackendMineConfig, mine_backends, select_functions
    from skills.kernel_store import KernelStore

    split = lambda v: [x for x in (v or "").split(",") if x]  # noqa: E731
    st = _store(store)
    fids = select_functions(st, targets=split(targets) or None, roles=split(roles) or None,
                            exclude_targets=split(exclude), func_ids=function or None)
    if not fids:
        fail("no function matches (index the corpus with `skills backend index`, or check --targets/--roles)")
    if limit:
        fids = fids[:limit]
    cfg = BackendMineConfig(max_steps=max_steps, time_limit_s=time_limit, use_cache=not force)
    try:
        outs = mine_backends(st, fids, cfg, log=(lambda m: None) if as_json else (lambda m: typer.echo(m, err=True)),
                             lineages=KernelStore(st))
    except (BackendInputError, GateUnavailable) as exc:
        fail(str(exc))
    rows = [{"problem": o.problem, "func_id": o.func_id, "lineage": o.lineage.lineage_id if o.lineage else None,
             "steps": len(o.lineage.steps) if o.lineage else 0,
             "rejections": len(o.lineage.rejections) if o.lineage else 0,
             "termination": o.lineage.termination if o.lineage else None, "skills": [s.skill_id for s in o.skills],
             "cached": o.cached, "skipped": o.skipped, "clang_runs": o.clang_runs, "seconds": round(o.wall_s, 2)}
            for o in outs]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    mined = [r for r in rows if r["lineage"]]
    typer.echo(f"{len(mined)} lineages ({sum(r['cached'] for r in mined)} already stored), "
               f"{sum(r['steps'] for r in mined)} steps, {len({s for r in mined for s in r['skills']})} skills; "
               f"{len(rows) - len(mined)} functions without a walk (no site, or not compiling in their own file)")


# ---- SKILL.md export/import
@app.command("export")
def export_cmd(
    out_dir: Path = typer.Argument(..., help="Folder to write one <skill>/SKILL.md (+ skill.json) per skill into."),
    fmt: str = typer.Option("skillmd", "--format", help="skillmd: agent-skills folders (YAML front matter + body)."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root. Default ./.skills"),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Export the store's skills as SKILL.md folders a coding agent can load."""
    if fmt != "skillmd":
        fail(f"--format: unknown format {fmt!r} (supported: skillmd)")
    from skills.kernel_store import KernelStore
    from skills.skillmd import SkillMdError, export_skills
    from skills.store import Store

    st = Store(store, read_only=True)
    if not st.exists():
        fail(f"no store at {st.root} (build one with `skills mine`, or pass --store)")
    try:
        skills = KernelStore(st).skills() if "skills" in st.tables() else []
        paths = export_skills(skills, out_dir)
    except SkillMdError as exc:
        fail(str(exc))
    finally:
        st.close()
    if as_json:
        typer.echo(json.dumps({"format": fmt, "dir": str(out_dir), "skills": [
            {"skill_id": s.skill_id, "name": s.name, "path": str(p)} for s, p in zip(skills, paths)]}, indent=2))
    else:
        for s, p in zip(skills, paths):
            typer.echo(f"{s.skill_id}  {p}")
        typer.echo(f"{len(paths)} skill(s) exported to {out_dir}")


@app.command("import")
def import_cmd(
    in_dir: Path = typer.Argument(..., help="Folder of <skill>/SKILL.md folders (or one skill folder)."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root. Default ./.skills"),
    index: bool = typer.Option(True, "--index/--no-index", help="Re-index the store's skills for `skills query`."),
    as_json: bool = typer.Option(False, "--json", help="Print what was imported as JSON."),
) -> None:
    """Import SKILL.md folders into the store (all or nothing; a skill with the same id is replaced)."""
    from skills.skillmd import SkillMdError, import_skills, save_skills
    from skills.store import Store

    try:
        skills = import_skills(in_dir)
    except SkillMdError as exc:
        fail(str(exc))
    st = Store(store)
    try:
        save_skills(st, skills)
    finally:
        st.close()
    indexed = None
    if index and any(s.kind == "kernel" for s in skills):
        # the query index must not go stale: imported skills are found by `skills query` at once
        from retrieval.skill_index import IndexError_, index_skills

        try:
            indexed = index_skills(Store(store), log=None if as_json else _stamped(lambda m: typer.echo(m, err=True))).n_skills
        except IndexError_ as exc:
            fail(str(exc))
    if as_json:
        typer.echo(json.dumps({"store": str(st.root), "indexed": indexed, "imported": [
            {"skill_id": s.skill_id, "name": s.name, "carrier": s.carrier} for s in skills]}, indent=2))
    else:
        for s in skills:
            typer.echo(f"{s.skill_id}  {s.name}")
        typer.echo(f"{len(skills)} skill(s) imported into {st.root}"
                   + (f"; index updated: {indexed} skills searchable by `skills query`" if indexed is not None else ""))


# ---- report (issue 9)
@app.command("report")
def report_cmd(
    problems: Optional[list[str]] = typer.Argument(None, help="Problems to include (default: every problem in the store)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="The HTML file to write (default <store>/report.html)."),
    title: str = typer.Option("", "--title", help="Page title (default: Kernel skills report)."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root. Default ./.skills"),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write one self-contained HTML report: lineages, step diffs, effect charts, skill cards, a skills index."""
    from skills.report import HOW_TO_BUILD, ReportError, write_report
    from corpora.store_root import resolve_root
    from skills.store import StoreError

    root = resolve_root(store)
    out = out or root / "report.html"  # beside the data it shows, not an untracked file where the command ran
    try:
        res = write_report(root, out, problems or [], title=title)
    except StoreError as exc:
        fail(str(exc))
    except ReportError as exc:
        hint = f"; build one with `{HOW_TO_BUILD[0][1].format(store=root)}`" if str(exc).startswith("no store") else ""
        fail(f"{exc}{hint}")
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    if res["state"] == "empty":
        typer.echo(f"store {root} holds no lineages yet; wrote {out} explaining how to build one: "
                   f"`{HOW_TO_BUILD[0][1].format(store=root)}`", err=True)
        return
    typer.echo(f"wrote {out}: {res['problems']} problems, {res['lineages']} lineages, {res['steps']} steps, "
               f"{res['skills']} skills; {res['bytes'] / 1e3:.0f} kB in {res['seconds']:.2f}s")


# ---- retrieval (issue 5): index, query, serve. docs/query.md is the contract of `query --json`.
def _blas_one_thread() -> None:
    """Numpy's BLAS on one thread unless the user says otherwise: on a shared 2-core machine a
    second BLAS thread spins and makes the query encoder 2-3x slower. Must run before numpy loads."""
    import os

    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, os.environ.get("SKILLS_BLAS_THREADS", "1"))


def _parse_axes(axes: Optional[str], option: str = "--axes") -> Optional[dict]:
    from retrieval.query_client import parse_axes

    try:
        return parse_axes(axes, option)
    except ValueError as exc:
        fail(str(exc))


@app.command("index")
def index_cmd(
    retrain: bool = typer.Option(False, "--retrain", help="Retrain the graph encoder even if the data changed little."),
    seed: int = typer.Option(0, "--seed", help="Seed of the graph encoder's training."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root. Default ./.skills"),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Build or update the retrieval indexes of the store's kernel skills (text, graph, BM25)."""
    from retrieval.skill_index import IndexError_, index_skills

    st = _store(store)
    if not st.exists():
        fail(f"no store at {st.root}: build one with `skills mine corpora/kernels --executor cpu --store {st.root}`")

    stamped = _stamped(lambda m: typer.echo(m, err=True))

    def log(msg: str) -> None:
        if not as_json:
            stamped(msg)
    try:
        report = index_skills(st, retrain=retrain, seed=seed, log=log)
    except IndexError_ as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
        return
    t, g = report.text, report.graph
    typer.echo(f"{report.n_skills} skills, {report.n_docs} documents; text: {t['embedded']} embedded, "
               f"{t['deleted']} deleted; graph model {g['status']} ({g['reason']}); {report.seconds:.1f}s")
    typer.echo(f"snapshot: {report.snapshot['path']}")


@app.command("query")
def query_cmd(
    code: Optional[Path] = typer.Option(None, "--code", help="A CUDA source file to find applicable skills for."),
    text: Optional[str] = typer.Option(None, "--text", help="A description of what to optimize."),
    k: int = typer.Option(5, "--k", min=1, max=100, help="Skills to return."),
    axes: Optional[str] = typer.Option(None, "--axes", help="Workload sizes for precondition checks, e.g. M=4096,N=1000."),
    mode: str = typer.Option("fused", "--mode", help="fused | text | graph | bm25"),
    no_server: bool = typer.Option(False, "--no-server", help="Answer in this process even if `skills serve` runs."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root. Default ./.skills"),
    as_json: bool = typer.Option(False, "--json", help="Print the answer as JSON (docs/query.md)."),
    rank: str = typer.Option("value", "--rank", help="value (what each skill is expected to buy here) | similarity"),
    plan: bool = typer.Option(False, "--plan", help="Add a short plan: the applicable steps in an order that can be applied."),
    op_type: Optional[str] = typer.Option(None, "--op-type", help="The kernel's op type (gemm, norm, ...) for measured effects; "
                                                                  "guessed from the code when absent."),
) -> None:
    """Which skills apply to this kernel, where, and why (uses a running `skills serve` when there is one)."""
    _blas_one_thread()
    from corpora.store_root import resolve_root

    def bad(kind: str, message: str, extra: Optional[dict] = None) -> None:
        if as_json:
            typer.echo(json.dumps({"error": {"kind": kind, "message": message, **(extra or {})}}, indent=2))
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(2)

    if (code is None) == (text is None):
        bad("bad_input", "give exactly one of --code FILE or --text \"...\"")
    src = None
    if code is not None:
        try:
            src = code.read_text()
        except FileNotFoundError:
            bad("bad_input", f"{code}: no such file")
        except (OSError, UnicodeDecodeError) as exc:
            bad("bad_input", f"{code}: cannot read ({exc.__class__.__name__})")
    from retrieval.query_client import ask_server, build_request

    root = resolve_root(store)
    req = build_request(src, text, str(code) if code else "", k, _parse_axes(axes), mode, rank, plan, op_type)
    ans = None if no_server else ask_server(root, req)  # None: no live server, or it failed: answer here
    if ans is None:
        from retrieval.skill_search import QueryError, Searcher, SkillIndex, stale_warning

        try:
            idx = SkillIndex.open(root)
            ans = Searcher(idx).query(code=src, text=text, path=req["path"], k=k, axes=req.get("axes"), mode=mode,
                                      rank=rank, plan=plan, op_type=op_type)
            w = stale_warning(idx)
            ans["warnings"] = [w] if w else []
            ans["served_by"] = {"kind": "cli"}
        except QueryError as exc:
            ans = exc.to_dict()
    ans.pop("_status", None)
    if "error" in ans:
        err = ans["error"]
        bad(err.get("kind", "bad_input"), err.get("message", "query failed"),
            {key: v for key, v in err.items() if key not in ("kind", "message")})
    if as_json:
        typer.echo(json.dumps(ans, indent=2))
    else:
        from retrieval.skill_search import render_text

        typer.echo(render_text(ans))


@app.command("serve")
def serve_cmd(
    host: str = typer.Option("127.0.0.1", "--host", help="Loopback address to bind (127.0.0.1 only)."),
    port: int = typer.Option(0, "--port", min=0, max=65535, help="TCP port (0: any free port; see <store>/serve.json)."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root. Default ./.skills"),
    mcp: bool = typer.Option(False, "--mcp", help="Serve MCP tools on stdin/stdout for coding agents instead of HTTP."),
    tools: Optional[str] = typer.Option(None, "--tools", help="MCP: expose only these tools (comma-separated), "
                                        "e.g. gate_kernel,profile_kernel."),
) -> None:
    """Keep the skill index and encoders warm for fast queries (HTTP on loopback, or MCP over stdio; docs/query.md)."""
    _blas_one_thread()
    from corpora.store_root import resolve_root

    root = resolve_root(store)
    if mcp:
        from retrieval.mcp_server import build_server

        try:
            server = build_server(root, tools_only=list(_split(tools) or ()))
        except ValueError as exc:
            fail(str(exc))
        server.run("stdio")
        return
    from retrieval.server import find_server, serve

    running = find_server(root)
    if running is not None:
        fail(f"a server for {root} already runs: http://{running['host']}:{running['port']} (pid {running['pid']})")
    try:
        serve(root, host=host, port=port, ready=lambda i: typer.echo(
            f"serving {root} on http://{i['host']}:{i['port']} (pid {i['pid']}); stop with Ctrl-C or POST /shutdown",
            err=True))
    except (ValueError, OSError) as exc:
        fail(str(exc))


# ---- optimize (issue 7): retrieved skills materialized on a new kernel under the gate, within a budget
@app.command("optimize")
def optimize_cmd(
    problem_dir: Path = typer.Argument(..., help="Problem folder (definition.json, workloads.jsonl, solution.toml)."),
    kernel: Optional[Path] = typer.Option(None, "--kernel", "-k", help="Kernel to optimize (default: the problem's kernel.cu)."),
    budget: int = typer.Option(10, "--budget", min=1, help="Steps: retrieve -> materialize -> gate -> keep at most one."),
    model: Optional[str] = typer.Option(None, "--model", envvar="SKILLS_MODEL",
                                        help="litellm model for the LLM materializer (off when unset: deterministic only)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for the final kernel, lineage, attempts and summary."),
    mode: str = typer.Option("skills", "--mode", help="skills | no_skills | flat_memory (the last two: LLM baselines)."),
    executor: str = typer.Option("auto", "--executor", "-e", help="cuda, cpu, or auto (cuda when a GPU is usable)."),
    per_step: int = typer.Option(6, "--per-step", min=1, help="Candidates gated per step."),
    k: int = typer.Option(8, "--k", min=1, help="Skills retrieved per step."),
    max_attempts: Optional[int] = typer.Option(None, "--max-attempts", min=1, help="Budget: candidates gated in all."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="Budget: LLM tokens."),
    max_usd: Optional[float] = typer.Option(None, "--max-usd", min=0.0, help="Budget: LLM dollars."),
    exclude_problem: Optional[str] = typer.Option(None, "--exclude-problem",
                                                  help="Comma-separated problems whose skills are left out (leave-one-out)."),
    seeds: str = typer.Option("0,1,2", help="Seeds per workload for every gate check."),
    jobs: int = typer.Option(2, "--jobs", "-j", min=1, help="Gate processes run in parallel."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE",
                                         help="Skills store (or a JSON list of skill records / a SKILL.md folder)."),
    library_fallback: bool = typer.Option(
        True, "--library-fallback/--no-library-fallback",
        help="When no retrieved skill has a rewrite left that applies, try the rewrite library's untried rewrites "
             "(recorded as library steps, not skills)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Optimize a kernel with retrieved skills: every step is kept only if the gate accepts it."""
    from mining.gate import BadInput
    from prompts.optimize import OptimizeConfig, optimize

    try:
        seed_list = tuple(int(s) for s in seeds.split(","))
    except ValueError:
        fail(f"--seeds: expected comma-separated integers, got {seeds!r}")
    if kernel is not None and not (kernel.exists() or (problem_dir / kernel).exists()):
        fail(f"{kernel}: kernel file not found")
    cfg = OptimizeConfig(executor=executor, mode=mode, budget_steps=budget, max_attempts=max_attempts,
                         max_tokens=max_tokens, max_usd=max_usd, per_step=per_step, k=k, model=model,
                         seeds=seed_list, jobs=jobs, store=store, library_fallback=library_fallback,
                         exclude_problems=tuple(_split(exclude_problem) or ()))

    def on_event(kind: str, data: dict) -> None:
        if not as_json and kind == "step":
            kept = data.get("kept")
            typer.echo(f"step {data['step']}: {data['gated']} gated of {data['candidates']} candidate(s); "
                       + (f"kept: {kept}" if kept else "nothing kept"), err=True)
    try:
        res = optimize(problem_dir, kernel, cfg, on_event=on_event)
    except BadInput as exc:
        fail(str(exc))
    if out is not None:
        res.write(out)
    summary = res.summary()
    if as_json:
        typer.echo(json.dumps(summary | {"out": str(out) if out else None}, indent=2))
        return
    typer.echo(f"{summary['problem']}: {summary['kept']} step(s) kept in {summary['steps_used']} step(s), "
               f"{summary['attempts']} attempt(s), {summary['correctness_failures_caught']} rejected by the gate; "
               f"stopped: {summary['termination']}")
    for s in summary["lineage"][1:]:
        t = f"  {s['time_ms']:.4g} ms" if s.get("time_ms") else ""
        src = s.get("skill_name") or (f"library: {s.get('rewrite')}" if s.get("origin") == "library" else s.get("rewrite"))
        typer.echo(f"  + step {s['step']}: {s['what']} [{src}]{t}")
    if summary["speedup"]:
        typer.echo(f"speedup over the input: {summary['speedup']:.2f}x ({summary['input_time_ms']:.4g} -> "
                   f"{summary['final_time_ms']:.4g} ms)")
    else:
        typer.echo(f"timing: {summary['timing']}")
    typer.echo(f"retrieval: {summary['retrieval']['backend']}" + (f" ({summary['retrieval']['note']})"
                                                                  if summary['retrieval']['note'] else ""))
    if out is not None:
        typer.echo(f"wrote {out}/final.cu, lineage.json, attempts.jsonl, summary.json")


# ---- llm (issue 21): is the model endpoint usable? one call: answers, window, latency, answer format
llm_app = typer.Typer(help="LLM endpoints: check the model the --model paths would use.", no_args_is_help=True)
app.add_typer(llm_app, name="llm")


@llm_app.command("check")
def llm_check_cmd(
    model: Optional[str] = typer.Option(None, "--model", envvar="SKILLS_MODEL", help="litellm model string."),
    api_base: Optional[str] = typer.Option(None, "--api-base", envvar="SKILLS_LLM_API_BASE",
                                           help="OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1."),
    timeout: float = typer.Option(60.0, "--timeout", min=1.0, help="Seconds for the one call."),
    max_tokens: int = typer.Option(160, "--max-tokens", min=1, help="Completion cap for the call."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """One call: does the endpoint answer, its context window, latency, and does it follow the answer format."""
    from mining.llm_check import check, exit_code, render

    report = check(model, max_tokens=max_tokens, timeout=timeout, **({"api_base": api_base} if api_base else {}))
    code = exit_code(report)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    elif report.get("error"):
        typer.echo(render(report), err=True)
    else:
        typer.echo(render(report))
    raise typer.Exit(code)


# --------------------------------------------------------------------------- wrap (issue 17)
@app.command("wrap")
def wrap_cmd(
    kernel_file: Path = typer.Argument(..., help="A .cu file with __global__ kernels (and optionally a host entry)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Problem folder to write (default ./<name>)."),
    kernelbench: Optional[Path] = typer.Option(None, "--kernelbench", help="KernelBench-style problem.py (Model, "
                                               "get_inputs, get_init_inputs): the definition and reference."),
    kernel: Optional[str] = typer.Option(None, "--kernel", help="The __global__ to launch when there is no host entry."),
    name: Optional[str] = typer.Option(None, "--name", help="Problem name (default: the file's stem)."),
    executor: str = typer.Option("auto", "--executor", "-e", help="Gate executor: auto | cpu | cuda."),
    gate_after: bool = typer.Option(True, "--gate/--no-gate", help="Run the gate on the new folder."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out folder."),
    store: Optional[Path] = typer.Option(None, "--store", envvar="SKILLS_STORE", help="Store root (gate cache)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    trust: bool = typer.Option(False, "--trust", help="Without a sandbox (bubblewrap) on this machine, run the "
                               "KernelBench file anyway (it is untrusted Python)."),
) -> None:
    """Turn an existing kernel file (and a KernelBench problem) into a problem folder; say what is still missing."""
    from mining.wrap import WrapError, wrap

    try:
        rep = wrap(kernel_file, out, kernelbench=kernelbench, kernel_name=kernel, name=name, executor=executor,
                   run_gate_after=gate_after, force=force, store=store, trust=trust)
    except WrapError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(rep.to_dict(), indent=2))
    else:
        typer.echo(f"wrote {rep.out}: entry {rep.entry} ({rep.entry_kind}), kernels {', '.join(rep.kernels)}")
        for n in rep.notes:
            typer.echo(f"  note: {n}")
        if rep.gate:
            typer.echo(f"  gate ({rep.gate.get('executor', executor)}): {rep.gate.get('verdict')} "
                       f"{rep.gate.get('cases', '')} {rep.gate.get('reason', '')[:200]}".rstrip())
        for m in rep.missing:
            typer.echo(f"  missing: {m}")
        if rep.complete:
            typer.echo("  complete: the folder passes the gate")
    raise typer.Exit(0 if rep.complete or not gate_after else 1)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
