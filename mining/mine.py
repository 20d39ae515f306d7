"""`skills mine` as a library: walk each expert kernel backward, lift its steps, store them.

    from mining.mine import MineConfig, mine_problem
    from skills.kernel_store import MinedLineages
    outcome = mine_problem(Path("corpora/kernels/softmax"), MineConfig(executor="cpu"),
                           lineages=MinedLineages(Path(".skills")))

Per problem: candidates come from the deterministic operators (`mining/operators/`, in the
priority order below) and, when a model is configured, from the LLM operator; the kernel gate
checks them in worker processes; the walk (`mining/walk.py`) accepts one per step; every
lineage state is probed on adversarial workloads (`mining/probe.py`); accepted steps are lifted
into skills (`mining/lift.py`); the lineage, its steps and the merged skills go to the
`LineageStore` the caller hands in (`skills.kernel_store.MinedLineages`: one transaction per
lineage). Mining sits upstream of the store and never imports it.

A lineage is identified by (problem, sha256 of the expert, executor, strategy); re-mining an
unchanged expert with the same settings finds the stored lineage and does no gate work.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

from corpora.problem import Problem, ProblemError, load_problem
from corpora.code.source import Source
from mining.carriers import detect_carriers
from mining.checker import KernelGateChecker, gate_summary, run_many
from mining.gate import BadInput, GateConfig
from mining.gate.gate import kernel_inputs_hash, read_kernel
from mining.gate.sandbox import require_isolation
from mining.gate.cache import TOOL_VERSION
from mining.gate.cases import reduce_workload
from mining.gate.executors import make_executor, resolve_executor
from mining.lift import StepContext, lift_step
from mining.operators import all_operators
from mining.probe import (force_guard, site_guards, hypotheses, induce, induce_step_bound, outcomes_from_gate,
                          probe_problem_dir,
                          probe_workloads)
from mining.walk import Candidate, Verdict, WalkEvent, backward_walk
from mining.records import Lineage, Skill, Step, lineage_identity, sha256

@dataclass(frozen=True)
class MineConfig:
    executor: str = "auto"
    strategy: Optional[str] = None  # None: smallest_effect on cuda, priority on cpu
    jobs: int = 2
    max_steps: int = 100
    max_rejections: int = 200
    time_limit_s: Optional[float] = None
    model: Optional[str] = None  # LLM operator: off when None and SKILLS_MODEL is unset
    seeds: tuple[int, ...] = (0, 1, 2)
    archs: tuple[str, ...] = ("sm_90",)
    timeout_s: float = 120.0
    probe: bool = True
    max_probes: int = 10
    profile_top: int = 6
    profile_all_workloads: bool = False  # GPU effects: every workload, or only the primary large one (faster)
    profile_repeats: int = 20
    # GPU walks: a step may not leave the kernel slower than this many times naive.cu (0: no ceiling)
    slowdown_ceiling: float = 2.0
    operators: Optional[tuple[str, ...]] = None  # restrict to these operator names
    store: Optional[Path] = None
    use_cache: bool = True
    trust: bool = False  # without a sandbox on this machine, run the gate unisolated (docs/security.md)

    def fingerprint(self) -> str:
        d = asdict(self)
        for k in ("jobs", "store", "use_cache", "time_limit_s", "trust"):
            d.pop(k)
        d["operators_all"] = [op.name for op in all_operators()]
        d["walk_code"] = walk_code_hash()
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def walk_code_hash() -> str:
    """The source of what decides a lineage (the operators, carriers, probing, lifting, the walk): a stored
    lineage mined before any of it changed is mined again, not reused with the old operators' steps."""
    here = Path(__file__).resolve().parent
    files = sorted((here / "operators").glob("*.py")) + [here / n for n in
                                                         ("carriers.py", "carriers_meaning.py", "probe.py", "lift.py",
                                                          "walk.py", "mine.py", "checker.py",
                                                          "gate/coverage.py")]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


class LineageStore(Protocol):
    """Where mine_problem finds a lineage to reuse and hands a finished one over
    (skills.kernel_store.MinedLineages keeps them in the store)."""

    def reusable(self, lineage_id: str, fingerprint: str) -> Optional[tuple[Lineage, list[Skill], Optional[str]]]:
        """(the stored lineage, its skills, its final source) when one with this fingerprint is stored."""

    def save(self, lineage: Lineage, skills: list[Skill], problem_info: dict[str, Any],
             gate_runs: list[dict[str, Any]]) -> tuple[list[Skill], set[str]]:
        """Save a finished lineage; (the merged skills, the skill ids stored before)."""


@dataclass
class MineOutcome:
    problem: str
    lineage: Optional[Lineage]
    skills: list[Skill]  # skills after merging into the store
    new_skills: int = 0
    merged_skills: int = 0
    cached: bool = False
    wall_s: float = 0.0
    error: str = ""
    remaining_carriers: list[str] = field(default_factory=list)
    removed_carriers: list[str] = field(default_factory=list)
    listed_carriers: list[str] = field(default_factory=list)
    undetected_carriers: list[str] = field(default_factory=list)  # listed, never detected in the expert


# --------------------------------------------------------------------------- gate
def primary_profile_dir(problem: Problem, cache_root: Path) -> Path:
    """The problem with only its primary large workload (the one effects are reported on)."""
    from mining.probe import workload_subset_dir

    large = [w for w in problem.workloads if "large" in w.tags] or [max(problem.workloads, key=lambda w: _vol(w.axes))]
    w = large[0]
    line = {"axes": w.axes, "tags": list(w.tags)}
    if w.scalars:
        line["scalars"] = dict(w.scalars)
    return workload_subset_dir(problem, [line], cache_root)


def _vol(axes: dict[str, int]) -> int:
    v = 1
    for x in axes.values():
        v *= max(1, int(x))
    return v


# --------------------------------------------------------------------------- candidates
def operator_order(names: Optional[Sequence[str]]) -> list:
    """The operators the walk proposes from, in the registry's priority order (mining/operators/registry.py)."""
    ops = all_operators()
    if names:
        unknown = set(names) - {op.name for op in ops}
        if unknown:
            raise BadInput(f"--operators: unknown operator {sorted(unknown)[0]!r}")
        ops = [op for op in ops if op.name in names]
    return ops


def deterministic_candidates(source: str, operators: list) -> list[Candidate]:
    """Every operator's sites, in priority order. Where an operator has several sites in one
    function, a candidate removing all of them comes first (one decision, e.g. "fast intrinsics
    in this kernel"); if the gate rejects it, the single sites follow."""
    src = Source(source)
    out = []
    for op in operators:
        try:
            sites = op.find_sites(source)
        except Exception as exc:  # an operator bug must not kill the walk: reported, no sites
            print(f"warning: operator {op.name} failed on this source: {exc}", flush=True)
            continue
        by_function: dict[int, list] = {}
        for site in sites:
            f = src.function_at(site.start_byte)
            by_function.setdefault(f.start_byte if f else -1, []).append((site, f))
        for fstart, group in by_function.items():
            f = group[0][1]
            fn_hash = hashlib.sha256(src.raw[f.start_byte:f.end_byte] if f else src.raw).hexdigest()[:16]
            if len(group) > 1:
                new = _apply_all(op, source, [s for s, _ in group])
                if new is not None:
                    first, last = group[0][0], group[-1][0]
                    out.append(Candidate(
                        operator=op.name, carrier=op.carrier, source=new, site_line=first.line,
                        site_excerpt=first.excerpt, site_start=first.start_byte, site_end=last.end_byte,
                        description=f"{op.description} (all {len(group)} sites in {f.name if f else 'file scope'})",
                        variant=getattr(op, "variant", ""), retry_key=f"{op.name}|{fn_hash}|all"))
            for site, _ in group:
                try:
                    new = op.apply(source, site)
                except Exception:
                    continue
                # unchanged enclosing function + same place = same candidate: not re-evaluated once rejected
                retry = f"{op.name}|{fn_hash}|{site.start_byte - (f.start_byte if f else 0)}"
                out.append(Candidate(operator=op.name, carrier=op.carrier, source=new, site_line=site.line,
                                     site_excerpt=site.excerpt, site_start=site.start_byte, site_end=site.end_byte,
                                     description=op.description, variant=getattr(op, "variant", ""), retry_key=retry))
    return out


def _apply_all(op, source: str, sites: list) -> Optional[str]:
    """Apply several sites of one operator: last first, so earlier byte offsets stay valid."""
    try:
        for site in sorted(sites, key=lambda s: -s.start_byte):
            source = op.apply(source, site)
        return source
    except Exception:
        return None


def llm_candidates(source: str, problem: Problem, model: str, rejected: list[tuple[int, Candidate, Verdict]],
                   timeout_s: float, llm_kwargs: Optional[dict] = None, usage: Optional[dict] = None
                   ) -> tuple[list[Candidate], list[str]]:
    """One LLM-proposed simplification (mining/llm_operator.py); returns (candidates, failure reasons).
    A reply that does not parse or apply costs tokens but yields no candidate. `usage` (when
    given) accumulates the server's usage: calls, tokens, cost, seconds, outcomes, prompt cuts."""
    from mining import llm_operator

    tried = [{"operator": c.operator, "carrier": c.carrier, "line": c.site_line, "reason": v.reason[:200],
              "proposer": c.proposer, "description": c.description} for _, c, v in rejected[-12:]]
    res = llm_operator.propose(source, problem_summary=llm_operator.summarize_problem(problem),
                               carriers_present=detect_carriers(source, problem.solution.flags), rejected=tried,
                               model=model, n=1, timeout=timeout_s, **(llm_kwargs or {}))
    out = []
    for i, c in enumerate(res.candidates):
        out.append(Candidate(operator="llm", carrier=c.carrier, source=c.new_source, proposer="llm",
                             site_line=c.line, site_excerpt=c.excerpt, site_start=c.start_byte, site_end=c.end_byte,
                             description=c.description, retry_key=f"llm|{sha256(c.new_source)[:16]}",
                             tokens=res.tokens if i == 0 else 0))
    failures = [f.reason for f in res.failures]
    if usage is not None:
        for k in ("calls", "prompt_tokens", "completion_tokens", "cost_usd", "seconds"):
            usage[k] = usage.get(k, 0) + getattr(res, k)
        usage["candidates"] = usage.get("candidates", 0) + len(res.candidates)
        for f in res.failures:
            usage.setdefault("rejected", {})[f.kind] = usage.get("rejected", {}).get(f.kind, 0) + 1
        usage["prompt_cuts"] = usage.get("prompt_cuts", 0) + sum(1 for c in res.call_log if c.get("cut"))
    if not out and res.tokens:  # the tokens are spent even when nothing usable came back
        out.append(Candidate(operator="llm", carrier="", source=source, proposer="llm", tokens=res.tokens))
    return out, failures


# --------------------------------------------------------------------------- probes
def _probe(problem: Problem, kernel: Path, cfg: GateConfig, sources: list[str], jobs: int,
           pool: Optional[ProcessPoolExecutor]):
    probes = probe_workloads(problem, sources[0])
    pdir = probe_problem_dir(problem, probes, (cfg.store or Path(".skills")).resolve() / "cache")
    # probes vary sizes; the value-adversarial cases already ran in the walk's gate
    pcfg = GateConfig(**{**asdict(cfg), "stages": ("correctness",), "seeds": cfg.seeds[:1], "adversarial": False})
    dicts = run_many(pdir, kernel, pcfg, sources, pool)
    return probes, [outcomes_from_gate(d, probes) for d in dicts]


# --------------------------------------------------------------------------- one problem
def mine_problem(problem_dir: Path, config: MineConfig = MineConfig(), kernel: Optional[Path] = None,
                 on_event: Callable[[WalkEvent], None] = lambda e: None,
                 pool: Optional[ProcessPoolExecutor] = None, llm_kwargs: Optional[dict] = None,
                 lineages: Optional[LineageStore] = None) -> MineOutcome:
    """Walk one problem's kernel backward and lift its steps. With ``lineages`` a stored lineage of
    the same settings is reused and the finished one is saved there; without, nothing is read or
    saved (the outcome's skills are the lifted ones, unmerged)."""
    t0 = time.perf_counter()
    try:
        problem = load_problem(Path(problem_dir))
    except ProblemError as exc:
        raise BadInput(str(exc)) from None
    kernel_path = problem.kernel_path(kernel)
    expert = read_kernel(kernel_path)
    executor = resolve_executor(config.executor)
    strategy = config.strategy or ("smallest_effect" if executor == "cuda" else "priority")
    if strategy == "smallest_effect" and executor != "cuda":
        raise BadInput("--strategy smallest_effect needs GPU timings: use --executor cuda (or --strategy priority)")
    model = config.model or os.environ.get("SKILLS_MODEL") or None
    store_root = Path(config.store or os.environ.get("SKILLS_STORE") or ".skills")
    if store_root.exists() and not store_root.is_dir():
        raise BadInput(f"{store_root}: a store is a folder, this is a file (--store / SKILLS_STORE)")
    solution = problem.solution.for_file(kernel_path.name)
    listed = list(solution.carriers)
    kernel_hash = sha256(expert)
    lineage_id = lineage_identity(problem.name, kernel_hash, executor, strategy + (f"+llm:{model}" if model else ""))
    fp = lineage_fingerprint(config, problem, solution, executor)

    reused = lineages.reusable(lineage_id, fp) if lineages is not None and config.use_cache else None
    if reused is not None:
        existing, skills, final = reused
        return _outcome(problem, existing, skills, 0, 0, True, time.perf_counter() - t0, listed, expert,
                        final or expert)

    # the walk checks correctness only; static stats (nvcc + SASS) are computed for accepted states afterwards
    require_isolation(config.trust)
    gate_cfg = GateConfig(executor=executor, stages=("correctness",), seeds=config.seeds, archs=config.archs,
                          timeout_s=config.timeout_s, use_cache=config.use_cache, store=store_root, trust=config.trust)
    profile_dir = None
    if executor == "cuda" and not config.profile_all_workloads:
        profile_dir = primary_profile_dir(problem, store_root.resolve() / "cache")
    checker = KernelGateChecker(problem.root, kernel_path, gate_cfg, pool, profile_dir, config.profile_repeats)
    operators = operator_order(config.operators)
    naive_ms, max_cost = _cost_ceiling(problem, checker, config.slowdown_ceiling)
    rejected_so_far: list = []
    llm_failures: list[tuple[int, str]] = []
    llm_usage: dict = {}

    def propose(source: str, step: int) -> list[Candidate]:
        cands = deterministic_candidates(source, operators)
        if model:
            llm, failures = llm_candidates(source, problem, model, rejected_so_far, config.timeout_s, llm_kwargs,
                                           llm_usage)
            llm_failures.extend((step, f) for f in failures)
            cands += llm
        return cands

    def event(e: WalkEvent) -> None:
        if e.kind == "evaluated" and e.verdict is not None and not e.verdict.passed and e.candidate is not None:
            rejected_so_far.append((e.step, e.candidate, e.verdict))
        on_event(e)

    walk = backward_walk(expert, propose, checker, strategy=strategy, jobs=config.jobs, max_steps=config.max_steps,
                         max_rejections=config.max_rejections, time_limit_s=config.time_limit_s,
                         profile_top=config.profile_top, max_cost=max_cost, on_event=event)
    if walk.termination == "start_failed":
        v = walk.start_verdict
        raise BadInput(f"{kernel_path}: the expert itself does not pass the gate ({v.reason if v else 'unknown'})")

    # probe every lineage state once (optimized side of step k = state k-1)
    probes, state_outcomes, guard_info = None, [], {}
    if config.probe:
        probes, state_outcomes = _probe(problem, kernel_path, gate_cfg, walk.states, config.jobs, pool)
        forced_sources, forced_keys = [], []
        for k, (cand, _) in enumerate(walk.accepted, start=1):
            guards = site_guards(walk.states[k - 1], cand.site_start, cand.site_end, cand.carrier)
            if guards:
                gs, ge, text = guards[0]
                forced_sources.append(force_guard(walk.states[k - 1], gs, ge))
                # macros expanded so `M % BM == 0` reads as a number the precondition can hold
                forced_keys.append((k, " ".join(Source(walk.states[k - 1]).expand(text).split())))
        if forced_sources:
            _, forced_out = _probe(problem, kernel_path, gate_cfg, [walk.states[0]] + forced_sources, config.jobs, pool)
            for (k, text), outs in zip(forced_keys, forced_out[1:]):
                guard_info[k] = {"text": text, "outcomes": outs}

    static_cfg = GateConfig(**{**asdict(gate_cfg), "stages": ("static",)})
    static_dicts = run_many(problem.root, kernel_path, static_cfg, walk.states, pool)
    statics = {sha256(s): d.get("stages", {}).get("static", {}) for s, d in zip(walk.states, static_dicts)}

    # GPU timings of every state (the walk timed some already; the checker caches them)
    profiles = [checker.profile(s) for s in walk.states] if checker.can_time else [None] * len(walk.states)

    row_axes = _row_axes(problem)
    var_axes = [a for a, spec in problem.definition.axes.items() if getattr(spec, "type", "var") == "var"]
    space = hypotheses(var_axes, probes.tiles if probes else [], row_axes, probes.bounds if probes else [])
    workloads = [w.label for w in problem.workloads if not (executor == "cpu" and "large" in w.tags)]
    if executor == "cpu":  # large workloads ran in their reduced form
        workloads += [r.label for w in problem.workloads if "large" in w.tags
                      if (r := reduce_workload(problem.definition, w)) is not None]
    tolerances = {n: list(problem.definition.tolerance_for(n)) for n in problem.definition.outputs}
    dtypes = sorted({s.dtype for s in list(problem.definition.inputs.values()) + list(problem.definition.outputs.values())})
    static_of = lambda s: statics.get(sha256(s), {})  # noqa: E731

    steps: list[Step] = []
    skills: list[Skill] = []
    for k, (cand, verdict) in enumerate(walk.accepted, start=1):
        before, after = walk.states[k - 1], walk.states[k]
        ctx = StepContext(index=k, operator=cand.operator, carrier=cand.carrier, proposer=cand.proposer,
                          description=cand.description, variant=cand.variant, optimized=before, simpler=after,
                          site_start=cand.site_start, site_end=cand.site_end,
                          static_optimized=static_of(before), static_simpler=static_of(after),
                          profile_optimized=profiles[k - 1], profile_simpler=profiles[k],
                          function=(Source(before).function_at(cand.site_start).name
                                    if Source(before).function_at(cand.site_start) else ""),
                          axes=list(problem.definition.axes), expert=expert, problem_dir=str(problem.root))
        if state_outcomes:
            ctx.probes_optimized, ctx.probes_simpler = state_outcomes[k - 1], state_outcomes[k]
            ctx.induced = induce(ctx.probes_optimized, ctx.probes_simpler, space)
            ctx.step_bound = induce_step_bound(ctx.probes_optimized, ctx.probes_simpler, space)
        if k in guard_info and state_outcomes:
            g = guard_info[k]
            g["induced"] = induce(g["outcomes"], state_outcomes[k - 1], space)
            ctx.guard = g
        c = verdict.raw.get("stages", {}).get("correctness", {})
        gate_log = [f"{executor} gate: {c.get('cases_passed', 0)}/{c.get('cases_total', 0)} cases pass "
                    f"({len(c.get('workloads', []))} workloads x seeds {list(config.seeds)}; "
                    f"{len(c.get('runs', []))} schedule order(s))"]
        skill = lift_step(ctx, problem=problem.name, op_type=problem.definition.op_type, lineage_id=lineage_id,
                          kernel_hash=kernel_hash, executor=executor, workloads=workloads, seeds=list(config.seeds),
                          tolerances=tolerances, dtypes=dtypes, gate_log=gate_log)
        skills.append(skill)
        steps.append(_step(lineage_id, k, cand, verdict, before, after, True, skill_id=skill.skill_id,
                           static=static_of(after), effect=skill.effect))
    rejections = [_step(lineage_id, k, cand, v, walk.states[min(k - 1, len(walk.states) - 1)], cand.source, False)
                  for k, cand, v in walk.rejected]
    lineage = Lineage(
        lineage_id=lineage_id, problem=problem.name, problem_dir=str(problem.root), op_type=problem.definition.op_type,
        kernel=kernel_path.name, kernel_hash=kernel_hash, executor=executor, strategy=strategy,
        termination=walk.termination, steps=steps, rejections=rejections,
        sources={sha256(s): s for s in walk.states}, start_static=static_of(expert), final_hash=sha256(walk.states[-1]),
        wall_s=round(time.perf_counter() - t0, 3), llm_tokens=walk.tokens,
        config={"fingerprint": fp, "max_steps": config.max_steps, "max_rejections": config.max_rejections,
                "seeds": list(config.seeds), "archs": list(config.archs), "model": model or "",
                "probes": probes.workloads if probes else [], "operators": [op.name for op in operators],
                "end_point_probes": _end_point_probes(state_outcomes),
                "listed_carriers": listed, "naive_ms": naive_ms, "cost_ceiling_ms": max_cost,
                "llm_failures": [{"step": k, "reason": r} for k, r in llm_failures],
                "llm_usage": {k: round(v, 6) if isinstance(v, float) else v for k, v in llm_usage.items()}})
    gate_runs = [{"source_hash": h, "verdict": d.get("verdict", ""), "reason": d.get("reason", ""), "summary": gate_summary(d)}
                 for h, d in checker.results.items()]
    problem_info = {"definition": problem.definition.model_dump(mode="json")}
    merged, existing_ids = lineages.save(lineage, skills, problem_info, gate_runs) if lineages is not None \
        else (skills, set())
    new = len({s.skill_id for s in skills} - existing_ids)
    return _outcome(problem, lineage, merged, new, len({s.skill_id for s in skills}) - new, False,
                    time.perf_counter() - t0, listed, expert, walk.states[-1])


def _end_point_probes(state_outcomes: list) -> dict[str, Any]:
    """The walk's last kernel on every probe size (geometry bounds included): which fail."""
    if not state_outcomes:
        return {}
    last = state_outcomes[-1]
    return {"probes": len(last), "passed": sum(o.passed for o in last),
            "failed": [{"axes": o.axes, "reason": o.reason[:200]} for o in last if not o.passed]}


def lineage_fingerprint(config: MineConfig, problem: Problem, solution, executor: str) -> str:
    """What a stored lineage must match to be reused: the mining settings, the problem's content
    (definition.json, workloads.jsonl, reference), the kernel's solution.toml settings and local
    headers, the toolchain (compiler, CPU runtime or GPU) and the gate's version."""
    parts = [config.fingerprint(), problem.content_hash, kernel_inputs_hash(problem, solution),
             make_executor(executor).fingerprint(), TOOL_VERSION]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _cost_ceiling(problem: Problem, checker: KernelGateChecker, ratio: float) -> tuple[Optional[float], Optional[float]]:
    """(naive.cu's time, the walk's cost ceiling) on a GPU when the problem ships a naive kernel."""
    naive = problem.root / "naive.cu"
    if not checker.can_time or ratio <= 0 or not naive.exists():
        return None, None
    t = checker.time(naive.read_text())
    return (t, t * ratio) if t else (None, None)


def _row_axes(problem: Problem) -> dict[str, int]:
    """Axes that are the innermost (row) dimension of some tensor -> element size in bytes."""
    from mining.probe import ELEM_BYTES

    out = {}
    for spec in list(problem.definition.inputs.values()) + list(problem.definition.outputs.values()):
        if spec.shape and isinstance(spec.shape[-1], str):
            out.setdefault(spec.shape[-1], ELEM_BYTES.get(spec.dtype, 4))
    return out


def _step(lineage_id: str, index: int, cand: Candidate, verdict: Verdict, before: str, after: str, accepted: bool,
          skill_id: str = "", static: Optional[dict] = None, effect: Optional[list] = None) -> Step:
    import difflib

    diff = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), "before.cu", "after.cu", n=2))
    return Step(lineage_id=lineage_id, index=index, accepted=accepted, operator=cand.operator, carrier=cand.carrier,
                proposer=cand.proposer if cand.proposer in ("deterministic", "llm") else "deterministic",
                site_line=cand.site_line, site_excerpt=cand.site_excerpt, site_start=cand.site_start,
                site_end=cand.site_end, before_hash=sha256(before), after_hash=sha256(after), diff=diff[:20000],
                reason="" if accepted else (verdict.reason or verdict.verdict)[:1000], verdict=verdict.verdict,
                gate=verdict.summary, static=_compact_static(static or {}), effect=effect or [],
                skill_id=skill_id, wall_s=float(verdict.wall_s or 0.0))


def _compact_static(static: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for arch, r in static.get("archs", {}).items():
        out[arch] = {k: {f: v.get(f) for f in ("registers", "smem_static", "spill_stores", "spill_loads", "sass_total")}
                     for k, v in r.get("kernels", {}).items()}
    return out


def _outcome(problem: Problem, lineage: Lineage, skills: list[Skill], new: int, merged: int, cached: bool, wall: float,
             listed: list[str], expert: str, final: str) -> MineOutcome:
    removed, remaining, undetected = carrier_accounting(listed, expert, final, problem.solution.flags)
    return MineOutcome(problem=problem.name, lineage=lineage, skills=skills, new_skills=new, merged_skills=merged,
                       cached=cached, wall_s=wall, remaining_carriers=remaining, removed_carriers=removed,
                       listed_carriers=listed, undetected_carriers=undetected)


def carrier_accounting(listed: Sequence[str], expert: str, final: str,
                       flags: Sequence[str] = ()) -> tuple[list[str], list[str], list[str]]:
    """(removed, remaining, not detected) of the listed carriers. Removed = the detectors see it
    in the expert and not at the end point; a listed carrier they never saw in the expert was not
    removed by anything: it is "not detected", never "removed"."""
    final_carriers = {n for n, sites in detect_carriers(final, list(flags)).items() if sites}
    expert_carriers = {n for n, sites in detect_carriers(expert, list(flags)).items() if sites}
    return ([c for c in listed if c in expert_carriers and c not in final_carriers],
            [c for c in listed if c in final_carriers],
            [c for c in listed if c not in expert_carriers])


