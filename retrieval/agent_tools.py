"""The tools a coding agent drives a whole optimization with, shared by the MCP server
(retrieval/mcp_server.py) and the HTTP server (retrieval/server.py); docs/agents.md.

    gate_kernel     correctness oracle: static, correctness (workloads x seeds, extra workloads), a digest
    profile_kernel  GPU timing (cuda executor only; a structured ``no_gpu`` error elsewhere)
    wrap_kernel     an outside .cu file -> a problem folder (`skills wrap`)
    query_skills    the skills that apply to a kernel (docs/query.md)
    get_skill       one skill record
    lineage         a mined lineage (`skills lineage --json`)

Each returns the JSON of the matching CLI command's ``--json``; bad input raises ``ToolError``,
whose ``to_dict()`` is the ``{"error": {"kind", "message"}}`` object the CLI prints. Every kernel
and reference is built and run by the gate, inside its sandbox (mining/gate/sandbox.py): tools
never pass ``trust``, so without bubblewrap they refuse to run code at all.

``progress(message)`` callbacks receive a one-line phase description; the servers turn them into
MCP progress notifications (with elapsed seconds) or drop them.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

Progress = Optional[Callable[[str], None]]
MAX_EXTRA_WORKLOADS = 16
TOOL_NAMES = ("gate_kernel", "profile_kernel", "wrap_kernel", "query_skills", "get_skill", "lineage")


class ToolError(Exception):
    """A tool call that cannot be answered: ``kind`` is bad_input | no_gpu | not_found | no_store | ..."""

    def __init__(self, kind: str, message: str, **extra: Any):
        super().__init__(message)
        self.kind, self.message, self.extra = kind, message, extra

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"kind": self.kind, "message": self.message, **self.extra}}


def _say(progress: Progress, message: str) -> None:
    if progress is not None:
        progress(message)


# --------------------------------------------------------------------------- gate
def gate_digest(result: dict[str, Any]) -> dict[str, Any]:
    """What an agent reads first in a gate result: the verdict, the first failing case with its first
    wrong element, race / out-of-bounds / sanitizer findings, and per-arch static figures."""
    stages = result.get("stages", {})
    corr = stages.get("correctness", {})
    failing = None
    for run in corr.get("runs", []):
        for case in run.get("cases", []):
            if case.get("status") != "fail":
                continue
            name, cmp = next(((n, c) for n, c in case.get("outputs", {}).items() if not c.get("ok")), (None, {}))
            failing = {"run": run.get("run"), "workload": case.get("workload"), "seed": case.get("seed"),
                       "output": name, "wrong": cmp.get("wrong"), "unwritten": cmp.get("unwritten"),
                       "elements": cmp.get("elements"), "max_abs_err": cmp.get("max_abs_err"),
                       "first_bad": cmp.get("first_bad")}
            break
        if failing:
            break
    memory = []
    for run in corr.get("runs", []):
        err = run.get("error")
        if err:
            kind = err.split(":", 1)[0].strip()
            memory.append({"run": run.get("run"), "kind": kind if kind in ("race", "oob", "asan", "compute-sanitizer",
                                                                             "uninit", "barrier") else "crash",
                           "message": err})
            if failing is None:  # the run died: the first case it did not report is where
                at = next((c for c in run.get("cases", []) if c.get("status") == "not_run"), {})
                failing = {"run": run.get("run"), "workload": at.get("workload"), "seed": at.get("seed"),
                           "reason": corr.get("reason", err)}
    static = {}
    for arch, rec in (stages.get("static", {}).get("archs") or {}).items():
        if not rec.get("ok"):
            static[arch] = {"ok": False, "reason": rec.get("reason", "")}
            continue
        static[arch] = {k: {f: v[f] for f in ("registers", "spill_stores", "spill_loads", "stack_frame",
                                                               "smem_static", "sass_total")
                            if f in v} for k, v in (rec.get("kernels") or {}).items()}
    prof = stages.get("profile", {})
    timing = {w: round(v["median_ms"], 5) for w, v in (prof.get("workloads") or {}).items()} \
        if prof.get("status") == "pass" else None
    return {"verdict": result.get("verdict"), "reason": result.get("reason", ""),
            "cases": f"{corr.get('cases_passed', 0)}/{corr.get('cases_total', 0)}" if corr else None,
            "failing_case": failing, "first_bad_index": ((failing or {}).get("first_bad") or {}).get("index"),
            "race_oob": memory, "static": static, "median_ms": timing,
            "skipped_workloads": corr.get("skipped_workloads", [])}


def gate_payload(result) -> dict[str, Any]:
    """`skills gate --json` for one kernel: GateResult.to_dict() plus its digest."""
    d = result.to_dict()
    d["digest"] = gate_digest(d)
    return d


def workload_lines(workloads: list[Any]) -> list[str]:
    """Extra workloads as workloads.jsonl lines tagged `extra`; ToolError on a malformed one."""
    if not isinstance(workloads, list) or len(workloads) > MAX_EXTRA_WORKLOADS:
        raise ToolError("bad_input", f"workloads: a list of at most {MAX_EXTRA_WORKLOADS} objects "
                        "like {\"axes\": {\"N\": 1001}}")
    lines = []
    for i, w in enumerate(workloads):
        if isinstance(w, dict) and "axes" not in w and all(isinstance(v, int) for v in w.values()):
            w = {"axes": w}  # {"N": 1001} is accepted as the axes themselves
        if not (isinstance(w, dict) and isinstance(w.get("axes"), dict)
                and all(isinstance(v, int) and not isinstance(v, bool) for v in w["axes"].values())):
            raise ToolError("bad_input", f"workloads[{i}]: expected {{\"axes\": {{\"N\": 1001, ...}}}} with integer sizes")
        w = {k: v for k, v in w.items() if k in ("axes", "scalars", "tags", "inputs", "init")}
        w["tags"] = sorted(set(w.get("tags") or []) | {"extra"})
        lines.append(json.dumps(w))
    return lines


@contextmanager
def problem_with_workloads(problem_dir: Path, workloads: Optional[list[Any]]) -> Iterator[Path]:
    """The problem folder itself, or a temporary copy whose workloads.jsonl has ``workloads`` appended
    (tagged ``extra``). Bad sizes come back from the problem loader as bad input naming the workload."""
    if not workloads:
        yield problem_dir
        return
    lines = workload_lines(workloads)
    with tempfile.TemporaryDirectory(prefix="ks-extra-") as tmp:
        copy = Path(tmp) / problem_dir.name
        shutil.copytree(problem_dir, copy, symlinks=True,
                        ignore=shutil.ignore_patterns(".git", "__pycache__", "*.o", "*.bin"))
        wl = copy / "workloads.jsonl"
        base = wl.read_text() if wl.exists() else ""
        base = base + ("" if not base or base.endswith("\n") else "\n")
        wl.write_text(base + "\n".join(lines) + "\n")
        _check_extra(copy, base.count("\n"))
        yield copy


def _check_extra(copy: Path, base_lines: int) -> None:
    """Load the copy now so a bad extra workload is named as such (not as a line of a temporary file)."""
    import re

    from corpora.problem import ProblemError, load_problem

    try:
        load_problem(copy)
    except ProblemError as exc:
        m = re.search(r"workloads\.jsonl:(\d+): (.*)", str(exc))
        if m and int(m.group(1)) > base_lines:
            raise ToolError("bad_input", f"extra workload {int(m.group(1)) - base_lines}: {m.group(2)}") from None
        raise ToolError("bad_input", str(exc).replace(str(copy), "(problem copy)")) from None


def _problem(problem: str | Path) -> Path:
    p = Path(problem).expanduser()
    if not (p / "definition.json").is_file():
        raise ToolError("bad_input", f"{p}: not a problem folder (no definition.json)")
    return p.resolve()


def _kernel_args(problem_dir: Path, source: Optional[str], kernel: Optional[str]) -> tuple[Optional[Path], Optional[str]]:
    """(kernel path for run_gate, source text or None). A kernel path is resolved here (the problem may
    be gated from a temporary copy); with ``source``, ``kernel`` only names the file (default kernel.cu)."""
    if source is not None:
        if not isinstance(source, str) or not source.strip():
            raise ToolError("bad_input", "source: empty kernel source")
        name = Path(kernel).name if kernel else None
        return (Path(name) if name else None), source
    if not kernel:
        return None, None
    k = Path(kernel).expanduser()
    k = k if k.is_absolute() else (problem_dir / k if (problem_dir / k).exists() else Path.cwd() / k)
    if not k.is_file():
        raise ToolError("bad_input", f"{kernel}: kernel file not found")
    return k.resolve(), None


def gate_kernel(problem: str | Path, source: Optional[str] = None, kernel: Optional[str] = None,
                executor: str = "auto", workloads: Optional[list[Any]] = None, seeds: int = 3,
                stages: Optional[list[str]] = None, sanitize: bool = False, timeout_s: float = 120.0,
                store: Optional[Path] = None, progress: Progress = None) -> dict[str, Any]:
    """Gate one kernel of a problem (the source text, a file, or the problem's own kernel)."""
    from mining.gate import BadInput, GateConfig, run_gate

    problem_dir = _problem(problem)
    kpath, src = _kernel_args(problem_dir, source, kernel)
    if not isinstance(seeds, int) or not 1 <= seeds <= 8:
        raise ToolError("bad_input", "seeds: an integer from 1 to 8")
    stage_list = tuple(stages) if stages else ("static", "correctness", "profile")
    cfg = GateConfig(executor=executor, stages=stage_list, seeds=tuple(range(seeds)), sanitize=bool(sanitize),
                     timeout_s=float(min(max(timeout_s, 5.0), 600.0)), store=Path(store) if store else None,
                     trust=False)
    with problem_with_workloads(problem_dir, workloads) as pdir:
        _say(progress, f"gating {problem_dir.name}/{(kpath or Path('kernel.cu')).name} "
                       f"({executor} executor, stages {','.join(stage_list)}, {seeds} seed(s)"
                       + (f", {len(workloads)} extra workload(s))" if workloads else ")"))
        try:
            res = run_gate(pdir, kernel=kpath, config=cfg, source=src)
        except BadInput as exc:
            raise ToolError("bad_input", str(exc).replace(str(pdir), str(problem_dir))) from None
    out = gate_payload(res)
    if pdir != problem_dir:  # name the real folder, not the temporary copy
        out = json.loads(json.dumps(out).replace(str(pdir), str(problem_dir)))
    _say(progress, f"verdict: {out['verdict']}" + (f" ({out['reason'][:120]})" if out["reason"] else ""))
    return out


def profile_kernel(problem: str | Path, source: Optional[str] = None, kernel: Optional[str] = None,
                   workloads: Optional[list[Any]] = None, store: Optional[Path] = None,
                   progress: Progress = None) -> dict[str, Any]:
    """Time a kernel on the GPU (correctness first: a wrong kernel is not timed). GPU only."""
    from mining.gate.executors import gpu_info
    from mining.gate.static import nvcc_path

    if gpu_info() is None:
        raise ToolError("no_gpu", "profile_kernel needs an NVIDIA GPU (nvidia-smi found none on this machine); "
                        "gate_kernel checks correctness and static figures here, timing needs a GPU host")
    if nvcc_path() is None:
        raise ToolError("no_gpu", "profile_kernel needs nvcc on PATH (the CUDA toolkit) next to the GPU")
    return gate_kernel(problem, source=source, kernel=kernel, executor="cuda", workloads=workloads, seeds=1,
                       stages=["static", "correctness", "profile"], store=store, progress=progress)


# --------------------------------------------------------------------------- wrap
def wrap_kernel(source: Optional[str] = None, kernel_file: Optional[str] = None, out: Optional[str] = None,
                name: Optional[str] = None, kernel: Optional[str] = None, kernelbench: Optional[str] = None,
                executor: str = "auto", gate: bool = True, force: bool = False, store: Optional[Path] = None,
                progress: Progress = None) -> dict[str, Any]:
    """`skills wrap`: a .cu file (or its source) -> a problem folder the gate accepts, and what is missing."""
    from mining.gate import BadInput
    from mining.gate.sandbox import require_isolation
    from mining.wrap import WrapError, wrap

    if (source is None) == (kernel_file is None):
        raise ToolError("bad_input", "give exactly one of source (the .cu text) or kernel_file (a path)")
    try:  # wrap evaluates a KernelBench problem.py in run_limited, which runs unisolated without bubblewrap
        require_isolation(False)
    except BadInput as exc:
        raise ToolError("bad_input", str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="ks-wrap-") as tmp:
        if source is not None:
            stem = name or "kernel"
            if not stem.replace("_", "").replace("-", "").isalnum():
                raise ToolError("bad_input", f"name: {stem!r} is not a plain identifier")
            kf = Path(tmp) / f"{stem}.cu"
            kf.write_text(source)
            if out is None:
                from corpora.store_root import resolve_root

                out = str(resolve_root(store) / "wrapped" / stem)
        else:
            kf = Path(kernel_file).expanduser()
        _say(progress, f"wrapping {kf.name}" + (" and gating the folder" if gate else ""))
        try:
            rep = wrap(kf, Path(out) if out else None, kernelbench=Path(kernelbench) if kernelbench else None,
                       kernel_name=kernel, name=name, executor=executor, run_gate_after=gate, force=force,
                       store=Path(store) if store else None)
        except WrapError as exc:
            raise ToolError("bad_input", str(exc)) from None
    return rep.to_dict()


# --------------------------------------------------------------------------- store and retrieval
def _kernel_store(store: Optional[Path]):
    from skills.kernel_store import KernelStore
    from corpora.store_root import resolve_root
    from skills.store import Store, StoreError

    root = resolve_root(store)
    if not (root / "store.duckdb").exists():
        raise ToolError("no_store", f"{root}: no store here; build one with `skills mine corpora/kernels`")
    try:
        st = Store(root, read_only=True)
        st.con
        if "skills" not in st.tables():
            raise ToolError("no_store", f"{root}: the store has no kernel tables yet (`skills mine`)")
    except StoreError as exc:
        raise ToolError("no_store", str(exc)) from None
    return KernelStore(st)


def lineage(problem: str, store: Optional[Path] = None) -> dict[str, Any]:
    """`skills lineage --json`: the accepted steps (diff, effect, skill), rejections, termination."""
    ks = _kernel_store(store)
    try:
        lin = ks.lineage(problem)
    finally:
        ks.store.close()
    if lin is None:
        raise ToolError("not_found", f"no lineage for {problem!r} in the store (mine it with `skills mine`)")
    return json.loads(lin.model_dump_json(exclude={"sources"}))


def query_skills(searcher, code: Optional[str] = None, text: Optional[str] = None, path: str = "", k: int = 5,
                 axes: Optional[dict[str, int]] = None, mode: str = "fused",
                 include_filtered: bool = True, rank: str = "value", plan: bool = False,
                 op_type: Optional[str] = None) -> dict[str, Any]:
    """The answer of docs/query.md from a resident searcher (the caller adds warnings / served_by)."""
    from retrieval.skill_search import QueryError

    if axes is not None and not (isinstance(axes, dict) and all(isinstance(v, int) for v in axes.values())):
        raise ToolError("bad_input", "axes must be an object of integers, e.g. {\"N\": 1000}")
    try:
        return searcher.query(code=code, text=text, path=path, k=int(k), axes=axes or None, mode=mode,
                              include_filtered=include_filtered, rank=rank, plan=bool(plan), op_type=op_type or None)
    except QueryError as exc:
        err = exc.to_dict()["error"]
        raise ToolError(err.pop("kind"), err.pop("message"), **err) from None


def get_skill(searcher, skill_id: str) -> dict[str, Any]:
    """One skill's full record from the index (an id, id prefix or key)."""
    i = searcher.index.find(skill_id)
    if i is None:
        raise ToolError("not_found", f"no skill {skill_id!r}")
    return searcher.index.record(i)
