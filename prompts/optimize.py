"""`skills optimize` as a library: retrieved skills materialized on a new kernel, step by step,
each step kept only when the gate accepts it.

    from prompts.optimize import OptimizeConfig, optimize
    res = optimize(Path("corpora/kernels/softmax"), Path("naive.cu"), OptimizeConfig(executor="cpu"))
    res.final_source, res.summary()

One step: retrieve the skills that apply to the current kernel (`retrieve`: the hybrid search of
retrieval/skill_search.py when its index and encoders are usable, else a scan of the store's
skill records ranked by applicability), materialize them (the forward halves of the operator
pairs, mining/operators/forward.py; with a model, an LLM materializer for skills no rewrite
covers), gate the candidates (correctness on every workload and seed, in worker processes; on a
GPU the profile stage times the passing ones), and keep one: on a GPU the fastest correct
candidate that beats the current kernel by `min_gain`, on the CPU executor (no timing, no speed
claim) the first correct one in priority order. The steps are the walk of mining/walk.py run
forward (strategy `fastest` or `priority`, `keep_going`), with the kernel gate checker of
mining/checker.py that mining uses too (one definition of a kernel's time). Every candidate is an
attempt in the log, kept or dropped with the reason. When no retrieved skill has a structural
deterministic materialization left (every one tried, or none applies), the step falls back to the rewrite library
(`library_fallback`, on by default): its rewrites not tried yet, in the no-skills baseline's order,
recorded as coming from the library, not from a skill. It stops when the step budget (or the token
/ dollar / attempt budget) is spent or when nothing applies any more. Skills are read as records
(`mining.records.Skill`) from a store, a JSON list or a SKILL.md export.

Modes (the benchmark's arms, all under the same gate and budget):
* ``skills``      retrieved skills; deterministic materializers, plus the LLM materializer when a
                  model is given (skill card, exemplar and matched site in prompts/optimize.md);
* ``no_skills``   the LLM with the task alone (needs a model);
* ``flat_memory`` the LLM with past successful diffs (no preconditions, no effects), retrieved by
                  token overlap: the memory-based style of AccelOpt / AdaExplore (needs a model).

Leave-one-problem-out: ``exclude_problems`` drops every skill mined only from those problems and
the evidence (exemplars, diffs) they contributed to the others.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from mining.checker import KernelGateChecker, gate_summary, make_pool
from mining.gate import BadInput, GateConfig
from mining.operators import get_rewrite
from mining.operators.base import Context
from mining.operators.forward import materialize
from mining.walk import Candidate as WalkCandidate
from mining.walk import Verdict, WalkEvent, WalkResult, backward_walk
from mining.records import Anchor, Skill
from retrieval.applicability import CODE_TOKEN
from prompts.optimize_plan import (bottleneck_first, candidate_key, checker_for, expand_hits, fit_to_deadline,
                                   is_qualifier, kernel_regimes, library_records, order_retrieved)

MODES = ("skills", "no_skills", "flat_memory")

# Expected effect of an LLM materialization when the skill carries no GPU measurement (a forward
# rewrite's is its `Rewrite.prior`): the order in which candidates are gated.
LLM_PRIOR = 1.5


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------- configuration / results
@dataclass(frozen=True)
class OptimizeConfig:
    executor: str = "auto"
    mode: str = "skills"
    budget_steps: int = 10  # steps (retrieve -> materialize -> gate -> keep at most one)
    max_attempts: Optional[int] = None  # candidates gated in all
    max_tokens: Optional[int] = None  # LLM tokens (prompt + completion)
    max_usd: Optional[float] = None  # LLM dollars (when litellm knows the price)
    time_limit_s: Optional[float] = None  # wall clock: no new step starts after it
    per_step: int = 6  # candidates gated per step
    k: int = 8  # skills retrieved per step
    llm_per_step: int = 2  # LLM calls per step (every mode, so the arms spend alike)
    model: Optional[str] = None
    deterministic: bool = True  # deterministic materializers (skills mode)
    # skills mode, deterministic: when no retrieved skill has a materialization left, gate the rewrite
    # library's untried rewrites (library order) rather than stop with budget left and a rewrite that applies
    library_fallback: bool = True
    seeds: tuple[int, ...] = (0, 1, 2)
    jobs: int = 2
    min_gain: float = 0.02  # a kept step must be this much faster (GPU)
    timeout_s: float = 120.0
    store: Optional[Path] = None  # the skills store (read only)
    cache: Optional[Path] = None  # gate cache root (default: the store, else ./.skills)
    exclude_problems: tuple[str, ...] = ()  # leave-one-problem-out
    retrieval: str = "auto"  # auto | search | scan
    archs: tuple[str, ...] = ("sm_90",)
    llm_kwargs: tuple = ()  # extra litellm arguments as (key, value) pairs (tests: mock_response)


@dataclass
class Attempt:
    step: int
    index: int  # order within the run
    materializer: str  # deterministic | llm
    rewrite: str
    skill_id: str = ""
    skill_name: str = ""
    carrier: str = ""
    description: str = ""
    guards: list[str] = field(default_factory=list)
    site_line: int = 0
    source_hash: str = ""
    diff: str = ""
    tokens: int = 0
    cost_usd: float = 0.0
    verdict: str = ""  # pass | fail | error | unsupported | not_gated
    reason: str = ""  # the gate's reason when it failed
    gate: dict = field(default_factory=dict)
    time_ms: Optional[float] = None
    speedup_vs_current: Optional[float] = None
    kept: bool = False
    why: str = ""  # why kept or dropped
    llm: dict = field(default_factory=dict)  # the LLM call behind it: usage, finish reason, prompt cut
    # skill (a retrieved skill's materialization) | library (the rewrite library: the no-skills baseline, or the
    # fallback once the skill plan is exhausted) | model (the LLM without a skill)
    origin: str = ""
    origin_why: str = ""  # why a library-fallback candidate was proposed

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Candidate(WalkCandidate):
    """A forward candidate: a walk candidate whose `operator` is the rewrite (or the LLM job) and
    whose `proposer` is the materializer (deterministic | llm), plus what the attempt log needs."""
    skill: Optional[Skill] = None
    guards: list[str] = field(default_factory=list)
    prior: float = 1.0
    rank: int = 0
    cost_usd: float = 0.0
    llm: dict = field(default_factory=dict)
    origin: str = "skill"  # skill | library | model (see Attempt.origin)
    fallback: bool = False  # proposed by the library fallback (after the skills' structural candidates)
    origin_why: str = ""

    @property
    def rewrite(self) -> str:
        return self.operator

    @property
    def materializer(self) -> str:
        return self.proposer


@dataclass
class OptimizeResult:
    problem: str
    kernel: str
    executor: str
    mode: str
    input_source: str
    final_source: str
    lineage: list[dict]  # step 0 = input, then every kept step
    attempts: list[Attempt]
    steps_used: int
    termination: str  # budget_steps | budget_attempts | budget_tokens | budget_usd | budget_time | nothing_applies
    input_time_ms: Optional[float]
    final_time_ms: Optional[float]
    retrieval: dict
    llm: dict
    wall_s: float
    config: dict
    step_log: list[dict] = field(default_factory=list)
    library_fallback: dict = field(default_factory=dict)  # enabled, the steps it proposed at, the steps it kept
    # the gate's profile stage of the input and of the final kernel (GPU; {} on the cpu executor): the
    # benchmark reads its workload times here instead of profiling the same kernels again
    input_profile: dict = field(default_factory=dict)
    final_profile: dict = field(default_factory=dict)
    timeline: dict = field(default_factory=dict)  # seconds: the input's gate and timing, proposing, gating

    @property
    def speedup(self) -> Optional[float]:
        if self.input_time_ms and self.final_time_ms:
            return self.input_time_ms / self.final_time_ms
        return None

    def summary(self) -> dict:
        fails = [a for a in self.attempts if a.verdict not in ("pass", "not_gated")]
        return {
            "problem": self.problem, "kernel": self.kernel, "executor": self.executor, "mode": self.mode,
            "steps_used": self.steps_used, "attempts": len([a for a in self.attempts if a.verdict != "not_gated"]),
            "kept": len(self.lineage) - 1, "correctness_failures_caught": len(fails),
            "termination": self.termination,
            "input_time_ms": self.input_time_ms, "final_time_ms": self.final_time_ms, "speedup": self.speedup,
            "timing": "gpu profile (geometric mean of the large workloads' medians)" if self.input_time_ms
            else "none: the cpu executor checks correctness only (no speed claim)",
            "final_hash": sha256(self.final_source), "final_correct": True,
            "lineage": [{k: v for k, v in s.items() if k not in ("diff",)} for s in self.lineage],
            "retrieval": self.retrieval, "llm": self.llm, "library_fallback": self.library_fallback,
            "timeline": self.timeline, "wall_s": round(self.wall_s, 1),
        }

    def write(self, out: Path) -> None:
        """The output folder: final kernel, forward lineage (with every kept state), attempts, summary."""
        out.mkdir(parents=True, exist_ok=True)
        (out / "final.cu").write_text(self.final_source)
        states = out / "states"
        states.mkdir(exist_ok=True)
        for s in self.lineage:
            (states / f"step{s['step']:02d}.cu").write_text(s["source"])
        lineage = {"problem": self.problem, "kernel": self.kernel, "executor": self.executor, "mode": self.mode,
                   "direction": "forward: from the input kernel to the final one, one kept step at a time",
                   "steps": [{k: v for k, v in s.items() if k != "source"} | {"file": f"states/step{s['step']:02d}.cu"}
                             for s in self.lineage]}
        (out / "lineage.json").write_text(json.dumps(lineage, indent=2))
        with open(out / "attempts.jsonl", "w") as fh:
            for a in self.attempts:
                fh.write(json.dumps(a.to_dict()) + "\n")
        (out / "summary.json").write_text(json.dumps(self.summary() | {"config": self.config,
                                                                       "steps": self.step_log}, indent=2))


# --------------------------------------------------------------------------- retrieval
@dataclass
class Retrieved:
    skill: Skill  # the skill record (leave-one-out sanitized)
    rank: int
    score: float = 0.0
    status: str = "applicable"  # applicable | no_site | already_applied | ...
    sites: list[dict] = field(default_factory=list)
    preconditions: list[dict] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)


class SkillSource:
    """The skills of one store, loaded once: records for the scan ranking and the flat memory,
    and (when usable) the hybrid searcher. Never writes to the store."""

    def __init__(self, store: Optional[Path], exclude_problems: Sequence[str] = (), backend: str = "auto"):
        self.root = Path(store) if store else None
        self.exclude = set(exclude_problems)
        self.backend = "none"
        self.note = ""
        self.searcher = None
        self.records: list[Skill] = []
        self._json: dict[str, dict] = {}
        if self.root is None:
            self.note = "no store given: no skills"
            return
        if not self.root.exists():
            raise BadInput(f"{self.root}: no skills store here (build one with `skills mine ... --store {self.root}`)")
        self.records = [r for r in (sanitize(r, self.exclude) for r in load_skill_records(self.root)) if r is not None]
        if not (self.root / "store.duckdb").is_file() and not (self.root / "index").is_dir():
            backend = "scan"  # a JSON file or SKILL.md folder: no index to search
            self.note = f"skills read from {self.root} (no store index): ranked by a scan"
        if backend in ("auto", "search"):
            try:
                from retrieval.skill_search import Searcher, SkillIndex

                idx = SkillIndex.open(self.root)
                s = Searcher(idx)
                s.embed_texts(["warm up"])  # the text encoder must load here (tokenizers, weights)
                self.searcher = s
                self.backend = "search"
            except Exception as exc:  # noqa: BLE001 - an index, encoder or package missing: scan instead
                if backend == "search":
                    raise BadInput(f"retrieval unavailable: {type(exc).__name__}: {exc}") from None
                self.note = (f"hybrid search unavailable ({type(exc).__name__}: {str(exc)[:160]}); "
                             "ranked by a scan of the store's skills (applicability, evidence)")
        if self.searcher is None:
            self.backend = "scan"

    def info(self) -> dict:
        return {"backend": self.backend, "note": self.note, "store": str(self.root) if self.root else "",
                "skills": len(self.records), "excluded_problems": sorted(self.exclude)}

    def by_id(self) -> dict[str, Skill]:
        return {r.skill_id: r for r in self.records}

    def as_json(self, skill: Skill) -> dict:
        """The record's JSON form, for the query-side applicability pass (which reads skills as JSON)."""
        if skill.skill_id not in self._json:
            self._json[skill.skill_id] = skill.model_dump(mode="json")
        return self._json[skill.skill_id]


def library_source() -> SkillSource:
    """The rewrite library as a skill source (prompts/optimize_plan.py ``library_records``), ranked the
    way the no-skills baseline ranks it (policy "library": each rewrite's prior, no value plan)."""
    src = SkillSource(None)
    src.records, src.policy, src.backend = library_records(), "library", "baseline:library"
    src.note = "no mined skills: the rewrite library in its fixed order"
    return src


def load_skill_records(root: Path) -> list[Skill]:
    """Kernel skill records from a store (its duckdb table, read only; else the index snapshot's
    skills.jsonl), a JSON file holding a list of records, or a SKILL.md export folder."""
    if root.is_file():
        try:
            data = json.loads(root.read_text())
        except (OSError, ValueError) as exc:
            raise BadInput(f"{root}: not a JSON list of skill records ({exc})") from None
        recs = data.get("skills", data) if isinstance(data, dict) else data
        if not isinstance(recs, list) or not all(isinstance(r, dict) and "skill_id" in r for r in recs):
            raise BadInput(f"{root}: not a JSON list of skill records")
        return _validated(recs, root)
    if not (root / "store.duckdb").is_file() and not (root / "index").is_dir() and \
            any(root.glob("*/skill.json")):
        return [_validated([json.loads(p.read_text())], p)[0] for p in sorted(root.glob("*/skill.json"))]
    snap = None
    try:
        from retrieval.snapshot import current_snapshot

        snap = current_snapshot(root)
    except Exception:  # noqa: BLE001 - retrieval package unusable here
        cur = root / "index" / "kernel_skills" / "CURRENT"
        if cur.is_file():
            p = root / "index" / "kernel_skills" / cur.read_text().strip()
            snap = p if p.is_dir() else None
    db = root / "store.duckdb"
    if db.is_file():
        try:
            from skills.store import Store

            # through Store: its open waits out a writer's close (skills/store.py, store.duckdb.lock)
            store = Store(root, read_only=True)
            try:
                rows = store.con.execute("SELECT record FROM skills WHERE kind = 'kernel' ORDER BY skill_id").fetchall()
            finally:
                store.close()
            return _validated([json.loads(r[0]) for r in rows], db)
        except BadInput:
            raise
        except Exception as exc:  # noqa: BLE001 - locked by a writer, no skills table, or no duckdb here
            if snap is None:
                raise BadInput(f"{root}: cannot read skills from store.duckdb ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0][:160]})") from None
    if snap is not None and (Path(snap) / "skills.jsonl").is_file():
        path = Path(snap) / "skills.jsonl"
        return _validated([json.loads(line) for line in open(path) if line.strip()], path)
    raise BadInput(f"{root}: holds no skills (no store.duckdb and no index snapshot)")


def _validated(recs: list[dict], where: Path) -> list[Skill]:
    from pydantic import ValidationError

    out = []
    for i, r in enumerate(recs):
        try:
            out.append(Skill.model_validate(r))
        except ValidationError as exc:
            err = exc.errors()[0]
            field_ = ".".join(str(x) for x in err.get("loc", ()))
            raise BadInput(f"{where}: skill {r.get('skill_id', i)!s}: {field_}: {err.get('msg', 'invalid')}") from None
    return out


def sanitize(rec: Skill, exclude: set[str]) -> Optional[Skill]:
    """A skill record without what the excluded problems contributed (None if nothing is left)."""
    if rec.kind != "kernel":
        return None
    if not exclude:
        return rec
    ev = rec.evidence
    keep = [e for e in ev if e.problem not in exclude]
    if ev and not keep:
        return None
    probs = set(rec.scope.get("problems") or [])
    if probs and probs <= exclude:
        return None
    if len(keep) == len(ev):
        return rec
    dropped = [e for e in ev if e.problem in exclude]
    update: dict[str, Any] = {"evidence": keep,
                              "scope": {**rec.scope, "problems": sorted({e.problem for e in keep})}}
    if any(rec.diff and rec.diff == e.diff for e in dropped) or any(rec.before and rec.before == e.before for e in dropped):
        update |= {"before": keep[0].before, "after": keep[0].after, "diff": keep[0].diff,
                   "anchor": Anchor(excerpt=(keep[0].after.strip().splitlines() or [""])[0][:160])}
    update["effect"] = [x for e in keep for x in e.effect]
    update["risks"] = [r for r in rec.risks if not any(d.problem in r.model_dump_json() for d in dropped)]
    return rec.model_copy(update=update)


def retrieve(skills: SkillSource, source: str, axes: Optional[Sequence[dict]] = None, k: int = 8) -> list[Retrieved]:
    """The skills that apply to `source`, best first: the hybrid search (its applicable hits, then
    the ones it filtered for having no detected site, which a forward rewrite may still find),
    else the store scan. Preconditions are checked against every workload's axes."""
    if not skills.records:
        return []
    out: list[Retrieved] = []
    by_id = skills.by_id()
    if skills.searcher is not None:
        try:
            ans = skills.searcher.query(code=source, k=k, axes=None, include_filtered=True,
                                        exclude_problems=skills.exclude or None)
            for h in expand_hits(ans):  # an "also" entry stands for its qualifier skills
                rec = by_id.get(h["skill_id"])
                if rec is not None:
                    out.append(Retrieved(rec, len(out) + 1, h.get("score", 0.0), "applicable", h.get("applies_at", []),
                                         flags=h.get("flags", [])))
            for f in ans.get("filtered", []):
                rec = by_id.get(f["skill_id"])
                if rec is not None and f.get("reason") in ("no_site", "already_applied") and \
                        all(r.skill.skill_id != rec.skill_id for r in out):
                    out.append(Retrieved(rec, len(out) + 1, 0.0, f["reason"]))
        except Exception as exc:  # noqa: BLE001 - a query failure falls back to the scan
            skills.note = f"search failed ({type(exc).__name__}: {str(exc)[:120]}); scan used for this query"
            out = []
    if not out:
        out = _scan(skills, source, k)
    # every other skill after these (a forward rewrite decides whether it applies)
    seen = {r.skill.skill_id for r in out}
    rest = [r for r in _scan(skills, source, len(skills.records)) if r.skill.skill_id not in seen]
    for r in rest:
        r.rank = len(out) + 1
        out.append(r)
    # the value plan (prompts/optimize_plan.py); the benchmark's deterministic baselines set another policy
    out = order_retrieved(out, source, exclude_problems=sorted(skills.exclude), policy=getattr(skills, "policy", "value"),
                          as_json=skills.as_json)
    for r in out:
        r.preconditions = check_preconditions(r.skill, axes or [])
    return out


def _scan(skills: SkillSource, source: str, k: int) -> list[Retrieved]:
    try:
        checker = checker_for(source)
    except Exception:  # noqa: BLE001 - no applicability module: evidence order only
        checker = None
    scored = []
    for rec in skills.records:
        status, sites = "applicable", []
        if checker is not None:
            try:
                app = checker.check(skills.as_json(rec))
                status, sites = app.status, [s.to_dict() for s in app.sites]
            except Exception:  # noqa: BLE001
                pass
        ratios = _time_ratios(rec)
        key = ({"applicable": 0, "no_site": 1, "already_applied": 2}.get(status, 3), -len(sites) if sites else 0,
               -(max(ratios) if ratios else 1.0), -len(rec.evidence), rec.name)
        scored.append((key, Retrieved(rec, 0, 0.0, status, sites)))
    scored.sort(key=lambda t: t[0])
    out = [r for _, r in scored if r.status in ("applicable", "no_site", "already_applied")][:k]
    for i, r in enumerate(out, start=1):
        r.rank = i
    return out


def _time_ratios(rec: Skill) -> list[float]:
    return [e.time_ratio for e in rec.effect if e.time_ratio]


def check_preconditions(skill: Skill, workloads: Sequence[dict]) -> list[dict]:
    """Each precondition of the skill against every workload: satisfied on all, or the workloads
    that violate it (the materialization must then guard it at run time)."""
    out = []
    for p in skill.preconditions:
        if p.kind == "none_found" or p.status == "not_needed":
            continue
        verdicts = [p.check(axes)[0] for axes in workloads]
        violated = [i for i, v in enumerate(verdicts) if v == "violated"]
        out.append({"text": p.text, "status": p.status,
                    "check": "violated" if violated else ("satisfied" if verdicts and all(v == "satisfied" for v in verdicts)
                                                          else "unknown"),
                    "violated_by_workloads": violated, "needs_guard": bool(violated) or not verdicts or
                    any(v == "unknown" for v in verdicts)})
    return out


# --------------------------------------------------------------------------- flat memory (baseline)


def flat_memory(records: list[Skill]) -> list[dict]:
    """Past successful changes as bare diffs (simpler -> optimized), one per piece of evidence:
    no intent, preconditions, effects or risks."""
    out, seen = [], set()
    for r in records:
        for e in r.evidence:
            if e.diff and e.diff not in seen:
                seen.add(e.diff)
                out.append({"problem": e.problem, "diff": e.diff})
    return out


def rank_memory(memory: list[dict], source: str, k: int = 3) -> list[dict]:
    q = set(CODE_TOKEN.findall(source))
    scored = []
    for i, m in enumerate(memory):
        old = " ".join(ln[1:] for ln in m["diff"].splitlines() if ln.startswith(("-", " ")) and not ln.startswith("---"))
        toks = set(CODE_TOKEN.findall(old))
        scored.append((-(len(toks & q) / (len(toks | q) or 1)), i))
    scored.sort()
    return [memory[i] for _, i in scored[:k]]


# --------------------------------------------------------------------------- LLM materializer
PROMPT_FILE = Path(__file__).resolve().parent / "optimize.md"
# prompt sections cut (in this order) when the prompt does not fit the model's context window
CUTTABLE = ("Earlier steps on this kernel", "Past successful changes", "Guidance", "The skill to apply", "The problem")


def _render(template: str, **values: str) -> str:
    return re.sub(r"\{\{(\w+)\}\}", lambda m: str(values[m.group(1)]), template)


def skill_card(rec: Skill, site: Optional[dict] = None, preconditions: Sequence[dict] = ()) -> str:
    lines = [f"### Skill `{rec.name}` ({rec.skill_id}, carrier `{rec.carrier}`)", f"- intent: {rec.intent}"]
    pre = [p for p in rec.preconditions if p.kind != "none_found"]
    if pre:
        for p in pre:
            chk = next((c for c in preconditions if c.get("text") == p.text), None)
            extra = ""
            if chk and chk.get("violated_by_workloads"):
                extra = " -- VIOLATED by some of this problem's workloads: guard it with a runtime check and keep the original code as the fallback"
            elif chk and chk.get("needs_guard"):
                extra = " -- not provable from the workloads: guard it at run time"
            lines.append(f"- precondition: {p.text} ({p.status}){extra}")
    else:
        lines.append("- preconditions: none found by probing (still keep every size the problem allows correct)")
    for r in rec.risks[:3]:
        lines.append(f"- risk: {r.text}")
    eff = [e for e in rec.effect if e.time_ratio]
    if eff:
        lines.append(f"- measured effect: x{eff[0].time_ratio} ({eff[0].device})")
    if rec.diff:
        lines.append("- exemplar (simpler -> optimized, from another kernel):\n```diff\n" + rec.diff.strip()[:2500] + "\n```")
    if site:
        lines.append(f"- where it applies in this kernel: line {site.get('line')}"
                     + (f"-{site.get('end_line')}" if site.get("end_line") and site.get("end_line") != site.get("line") else "")
                     + f": `{str(site.get('code', ''))[:120]}` ({site.get('reason', '')})")
    return "\n".join(lines)


def build_prompt(source: str, *, problem_summary: str, guidance: str, history: Sequence[Attempt] = (),
                 kernel_name: str = "kernel.cu") -> str:
    from mining.llm_operator import number_lines, vocabulary

    hist = []
    for a in list(history)[-8:]:
        what = a.description or a.rewrite
        hist.append(f"- step {a.step}: {what[:160]} -> {'kept' if a.kept else 'dropped'}: {a.why[:200]}")
    return _render(PROMPT_FILE.read_text(), problem_summary=problem_summary, kernel_name=kernel_name,
                   numbered_source=number_lines(source), guidance=guidance,
                   history="\n".join(hist) or "(nothing yet)",
                   vocabulary=", ".join(f"`{v}`" for v in vocabulary()))


def parse_optimization(source: str, reply: str) -> tuple[str, str, str]:
    """(new kernel, carrier, description) from a reply: SEARCH/REPLACE blocks (parsed and applied by
    mining/llm_operator.py's matcher), or one fenced block holding the whole kernel. Raises
    ReplyError with a one-line reason otherwise."""
    from mining.llm_operator import ReplyError, apply_blocks, parse_reply
    from corpora.code.parse import parse_cuda, syntax_issues

    try:
        parsed = parse_reply(reply)
        new = apply_blocks(source, parsed.blocks)
        carrier, desc = parsed.carrier, parsed.description
    except ReplyError as exc:
        fences = re.findall(r"```[ \t]*(?:cuda|c\+\+|cpp|cu|c)?[ \t]*\n(.*?)```", reply, re.S | re.I)
        whole = [f for f in fences if "__global__" in f]
        if exc.kind not in ("malformed",) or not whole:
            raise
        new = whole[-1].rstrip() + "\n"
        m = re.search(r"CARRIER\s*:\s*`?([\w-]+)", reply)
        carrier = m.group(1).lower() if m else ""
        m = re.search(r"DESCRIPTION\s*:\s*(.+)", reply)
        desc = m.group(1).strip()[:300] if m else "full kernel from the model"
    if new == source:
        raise ReplyError("no_change", "the reply changes nothing")
    if re.search(r"\b(asm|__asm__)\b", new) and not re.search(r"\b(asm|__asm__)\b", source):
        raise ReplyError("forbidden", "the reply adds inline assembly")
    before = len(syntax_issues(parse_cuda(source), limit=50))
    after = syntax_issues(parse_cuda(new), limit=50)
    if len(after) > before:
        i = after[-1]
        raise ReplyError("syntax", f"the result does not parse: line {i.line}:{i.column}: {i.kind} near {i.snippet!r}")
    return new, carrier, desc


def llm_materialize(source: str, *, guidance: str, problem_summary: str, model: str, history: Sequence[Attempt],
                    entry: str, timeout_s: float, llm_kwargs: dict, kernel_name: str = "kernel.cu",
                    usage: Optional[dict] = None, token_budget: Optional[int] = None
                    ) -> tuple[Optional[str], str, str, int, float, str]:
    """One LLM call: (new source or None, carrier, description or failure reason, tokens, cost, raw reply).
    `usage` (when given) receives the call's usage (mining/llm.py Completion.usage()) and, for a
    reply that gave no kernel, `rejected` = why in one word. `token_budget`: tokens left; the
    call is not sent when its prompt alone would spend them, and its completion is capped to the rest."""
    from mining.llm_operator import ReplyError
    from mining.llm import LLMError, billed_prompt_tokens, complete

    usage = usage if usage is not None else {}
    prompt = build_prompt(source, problem_summary=problem_summary, guidance=guidance, history=history,
                          kernel_name=kernel_name)
    max_tokens = int(llm_kwargs.pop("max_tokens", 4096))
    try:
        if token_budget is not None:
            need = 0 if "mock_response" in llm_kwargs else billed_prompt_tokens(prompt, model, **llm_kwargs)
            if need >= token_budget:
                usage["rejected"] = "budget"
                return None, "", f"not sent: the token budget has {max(0, token_budget)} tokens left and the prompt " \
                                 f"alone needs about {need}", 0, 0.0, ""
            max_tokens = max(1, min(max_tokens, token_budget - need))
        c = complete(prompt, model, max_tokens=max_tokens, timeout=timeout_s, cuttable=CUTTABLE, **llm_kwargs)
    except LLMError as exc:
        usage.update({"rejected": exc.kind, "attempts": exc.attempts})
        return None, "", f"LLM call failed: {exc}", 0, 0.0, ""
    except Exception as exc:  # noqa: BLE001 - a provider plugin misbehaving is not our crash
        usage.update({"rejected": "call_error", "attempts": 1})
        return None, "", f"LLM call failed: {type(exc).__name__}: {exc}"[:300], 0, 0.0, ""
    usage.update(c.usage())
    tokens, cost = c.prompt_tokens + c.completion_tokens, c.cost_usd or 0.0
    if not c.text.strip():
        usage["rejected"] = "empty"
        return None, "", "reply unusable (empty): the model answered nothing", tokens, cost, c.text
    try:
        new, carrier, desc = parse_optimization(source, c.text)
    except ReplyError as exc:
        kind, reason = exc.kind, exc.reason
        if c.truncated and kind == "malformed":
            kind, reason = "truncated", f"{reason}; the answer was cut at max_tokens={c.max_tokens}"
        usage["rejected"] = kind
        return None, "", f"reply unusable ({kind}): {reason}", tokens, cost, c.text
    if entry and not re.search(r"\b%s\s*\(" % re.escape(entry), new):
        usage["rejected"] = "entry_gone"
        return None, "", f"reply unusable: the entry function {entry} is gone", tokens, cost, c.text
    return new, carrier, desc, tokens, cost, c.text


# --------------------------------------------------------------------------- the loop
def optimize(problem_dir: Path, kernel: Optional[Path] = None, config: OptimizeConfig = OptimizeConfig(),
             pool: Optional[ProcessPoolExecutor] = None, skills: Optional[SkillSource] = None,
             on_event: Callable[[str, dict], None] = lambda kind, data: None) -> OptimizeResult:
    from corpora.problem import ProblemError, load_problem
    from mining.gate.executors import resolve_executor

    t0 = time.perf_counter()
    if config.mode not in MODES:
        raise BadInput(f"--mode: unknown mode {config.mode!r} (one of {', '.join(MODES)})")
    if config.budget_steps < 1:
        raise BadInput("--budget: at least one step")
    model = (config.model or os.environ.get("SKILLS_MODEL") or "").strip() or None
    if config.mode != "skills" and not model:
        raise BadInput(f"--mode {config.mode} is an LLM baseline: give --model (any litellm model string)")
    try:
        problem = load_problem(Path(problem_dir))
    except ProblemError as exc:
        raise BadInput(str(exc)) from None
    kernel_path = problem.kernel_path(kernel)
    try:
        source0 = kernel_path.read_text()
    except FileNotFoundError:
        raise BadInput(f"{kernel_path}: kernel file not found") from None
    except UnicodeDecodeError:
        raise BadInput(f"{kernel_path}: not a UTF-8 text file") from None
    executor = resolve_executor(config.executor)
    store_dir = config.store if config.store is not None and Path(config.store).is_dir() else None
    cache_root = Path(config.cache or store_dir or os.environ.get("SKILLS_STORE") or ".skills")
    gate_cfg = GateConfig(executor=executor, stages=("correctness",), seeds=config.seeds, archs=config.archs,
                          timeout_s=config.timeout_s, store=cache_root)
    own_pool = pool is None and config.jobs > 1
    if own_pool:
        pool = make_pool(config.jobs)
    try:
        checker = KernelGateChecker(problem.root, kernel_path, gate_cfg, pool)
        t_in = time.perf_counter()
        start = checker.check_many([source0])[0]
        input_gate_s = time.perf_counter() - t_in
        if not start.passed:
            raise BadInput(f"{kernel_path}: the input kernel does not pass the gate ({start.reason[:300]}); "
                           "optimize starts from a correct kernel")
        if skills is None:
            store = config.store or (Path(os.environ["SKILLS_STORE"]) if os.environ.get("SKILLS_STORE") else None)
            if config.mode != "no_skills" and store is None and Path(".skills").exists():
                store = Path(".skills")
            skills = SkillSource(store if config.mode != "no_skills" else None, config.exclude_problems,
                                 config.retrieval)
        if config.mode == "skills" and not skills.records and not model:
            raise BadInput("no skills to materialize: give --store DIR with mined skills (`skills mine ... --store DIR`)")
        run = _Run(problem, kernel_path, config, model, checker, skills, on_event, t0)
        run.timeline["input_gate_s"] = round(input_gate_s, 3)
        # what gating this kernel costs here (the stage's own wall time, also when the cache answered):
        # the first step's deadline estimate (fit_to_deadline) before any step has been measured
        run.gate_cost_s = float((start.raw.get("stages", {}).get("correctness") or {}).get("wall_s") or 0.0)
        run._start(source0)  # time the input here (the walk's own timing of it is then a lookup): the timeline sees it
        walk = backward_walk(source0, run.propose, checker, strategy="fastest" if checker.can_time else "priority",
                             jobs=config.jobs, max_steps=config.budget_steps, max_rejections=None, check_start=False,
                             min_gain=config.min_gain, keep_going=True, stop=run.stop, on_event=run.on_walk_event)
        return run.result(walk, source0, executor)
    finally:
        if own_pool and pool is not None:
            pool.shutdown()


# the walk's termination -> the optimize loop's
_TERMINATION = {"step_limit": "budget_steps", "complete": "nothing_applies", "time_limit": "budget_time"}


class _Run:
    """One optimization as the walk's proposer and listener (mining/walk.py, forward): each step
    retrieves skills for the current kernel and proposes their materializations (deterministic
    rewrites, LLM jobs), best expected effect first, at most `per_step` of them and none tried
    before; the walk gates them and keeps one (CPU: the first correct in order; GPU: the fastest
    correct that beats the current kernel by `min_gain`); this object keeps the attempt log."""

    def __init__(self, problem, kernel_path: Path, config: OptimizeConfig, model: Optional[str],
                 checker: KernelGateChecker, skills: SkillSource, on_event: Callable[[str, dict], None], t0: float):
        from mining.llm_operator import summarize_problem

        self.problem, self.kernel_path, self.config, self.model = problem, kernel_path, config, model
        self.checker, self.skills, self.notify, self.t0 = checker, skills, on_event, t0
        self.ctx = Context.from_problem(problem)
        self.llm_kwargs = dict(config.llm_kwargs)
        self.summary_text = summarize_problem(problem)
        self.axes = [dict(w.axes) for w in problem.workloads]
        self.memory = flat_memory(skills.records) if config.mode == "flat_memory" else []
        self.cur = ""
        self.cur_time: Optional[float] = None
        self.lineage: list[dict] = []
        self.attempts: list[Attempt] = []
        self.tried: set[str] = set()
        self.tokens, self.cost, self.llm_calls = 0, 0.0, 0
        self.llm_usage = {"prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0, "parsed": 0, "rejected": {}}
        self.step_log: list[dict] = []
        self.steps_used = 0
        self.record: dict[str, list[str]] = {}  # (rewrite, site) -> outcomes at earlier steps
        self.entry: dict = {}  # this step's log entry
        self.step_attempts: list[tuple[Candidate, Attempt]] = []
        self.gate_seconds: list[float] = []  # wall seconds per batch of `jobs` gated candidates (fit_to_deadline)
        self.t_gate = 0.0
        self.library: Optional[SkillSource] = None  # the rewrite library's records (the fallback), loaded when needed
        self.timeline: dict = {"input_gate_s": 0.0, "input_time_s": 0.0, "propose_s": 0.0}
        self.gate_cost_s = 0.0  # the input's correctness stage, seconds (set by optimize)
        self.fallback_steps: list[int] = []  # steps whose candidates included the library fallback

    # ----------------------------------------------------------------- budgets
    def stop(self, step: int) -> Optional[str]:
        c = self.config
        if c.max_attempts is not None and _gated(self.attempts) >= c.max_attempts:
            return "budget_attempts"
        if c.max_tokens is not None and self.tokens >= c.max_tokens:
            return "budget_tokens"
        if c.max_usd is not None and self.cost >= c.max_usd:
            return "budget_usd"
        # the time limit stops new steps, never the first: a start (gating and timing the input) that
        # ate the limit still gets one batch of candidates (fit_to_deadline), not zero attempts
        if c.time_limit_s is not None and step > 1 and time.perf_counter() - self.t0 >= c.time_limit_s:
            return "budget_time"
        return None

    # ----------------------------------------------------------------- proposing
    def propose(self, cur: str, step: int) -> list[Candidate]:
        if not self.lineage:  # the walk's start state
            self._start(cur)
        t = time.perf_counter()
        try:
            return self._propose(cur, step)
        finally:
            self.timeline["propose_s"] = round(self.timeline["propose_s"] + time.perf_counter() - t, 3)

    def _first_estimate(self) -> Optional[float]:
        """Seconds a batch of `jobs` candidates is expected to take before any step was measured: one
        gate of this problem plus timing each of the batch, as long as the input's took (the stage's
        own wall time, or the wall time seen here when longer: waiting for a GPU shared by other
        processes counts)."""
        prof = float(self.checker.profile_stage(self.cur).get("wall_s") or 0.0) if self.checker.can_time else 0.0
        gate = max(self.gate_cost_s, self.timeline["input_gate_s"])
        est = gate + max(prof, self.timeline["input_time_s"]) * max(1, self.config.jobs)
        return est if est > 0 else None

    def _propose(self, cur: str, step: int) -> list[Candidate]:
        config = self.config
        self.steps_used = step
        cands: list[Candidate] = []
        retrieved: list[Retrieved] = []
        unmaterialized = []
        # the benchmark's no-skills baseline retrieves the library's records: its candidates come from the library
        origin = "library" if getattr(self.skills, "policy", "value") == "library" else "skill"
        if config.mode == "skills" and self.skills.records:
            retrieved = retrieve(self.skills, cur, self.axes, config.k)
            if config.deterministic:
                cands, unmaterialized = self._materialize(retrieved, cur, origin)
            else:
                unmaterialized = list(retrieved)
        cands += self._llm_candidates(cur, step, cands, unmaterialized)
        uniq = self._fresh(cands)
        fallback = None
        if self._fallback_on() and not any(c.materializer == "deterministic" and not is_qualifier(c)
                                           for c in uniq.values()):
            # the skill plan has no structural step left: the library's untried rewrites, its structural
            # ones before the skills' qualifiers, its qualifiers after every skill candidate
            n_det = sum(1 for c in cands if c.materializer == "deterministic")
            n_qual = sum(1 for c in uniq.values() if c.materializer == "deterministic")
            why = (f"library fallback: none of the {len(retrieved)} retrieved skills has a structural "
                   f"materialization left on this kernel ({n_qual} qualifier-level left)" if n_qual else
                   f"library fallback: none of the {len(retrieved)} retrieved skills has a materialization left on "
                   f"this kernel ({n_det} materialized, all tried, failing or not faster)" if n_det else
                   f"library fallback: none of the {len(retrieved)} retrieved skills materializes on this kernel")
            lib, _ = self._materialize(retrieve(self._library(), cur, self.axes, config.k), cur, "library")
            for c in lib:
                c.fallback, c.origin_why = True, why
            uniq = self._fresh(cands + lib)
            n_lib = sum(1 for c in uniq.values() if c.fallback)
            fallback = {"why": why, "candidates": n_lib}
            if n_lib:
                self.fallback_steps.append(step)
        # the candidates that attack what bounds the kernel first; the rest wait for a later step
        regimes = kernel_regimes(cur)
        todo, held = bottleneck_first(list(uniq.values()), regimes)
        if config.max_attempts is not None:
            todo = todo[:max(0, config.max_attempts - _gated(self.attempts))]
        todo = fit_to_deadline(todo[:config.per_step], self.t0, config.time_limit_s, self.gate_seconds, config.jobs,
                               time.perf_counter(), estimate=self._first_estimate() if not self.gate_seconds else None)
        self.t_gate = time.perf_counter()
        self.entry = {"step": step, "retrieved": [{"skill_id": r.skill.skill_id, "name": r.skill.name,
                                                   "status": r.status, "rank": r.rank} for r in retrieved[:config.k]],
                      "candidates": len(uniq), "gated": len(todo), "regimes": regimes}
        if held:
            self.entry["held_back"] = {"candidates": len(held), "why": "they do not attack the kernel's bottleneck "
                                       f"({', '.join(regimes)}); gated at a later step"}
        if fallback is not None:
            self.entry["library_fallback"] = fallback | {"gated": sum(1 for c in todo if c.fallback)}
        self.step_attempts = []
        return todo

    def _materialize(self, retrieved: list[Retrieved], cur: str, origin: str
                     ) -> tuple[list[Candidate], list[Retrieved]]:
        """The deterministic candidates of the retrieved records, and the records none materialized."""
        cands, unmaterialized = [], []
        for r in retrieved:
            ms = materialize(r.skill, cur, self.ctx)
            if not ms:
                unmaterialized.append(r)
            for m in ms:
                ratios = _time_ratios(r.skill)
                prior = max(get_rewrite(m.rewrite).prior, max(ratios) if ratios else 0.0)
                cands.append(Candidate(m.rewrite, r.skill.carrier, m.source, "deterministic",
                                       site_line=m.site_line, description=m.description,
                                       skill=r.skill if origin == "skill" else None, guards=m.guards, prior=prior,
                                       rank=r.rank, origin=origin))
        return cands, unmaterialized

    def _fresh(self, cands: list[Candidate]) -> dict[str, Candidate]:
        """Deduped by source, without what was tried or kept failing / not paying off, in plan order."""
        uniq: dict[str, Candidate] = {}
        for c in sorted(cands, key=candidate_key):  # structural steps first, in plan order
            h = sha256(c.source)
            outcomes = self.record.get(_key(c), [])
            if outcomes.count("fail") >= 2 or outcomes.count("slower") >= 2:
                continue
            if h not in self.tried and h not in uniq:
                uniq[h] = c
        return uniq

    def _fallback_on(self) -> bool:
        c = self.config
        return c.library_fallback and c.mode == "skills" and c.deterministic and \
            getattr(self.skills, "policy", "value") != "library"

    def _library(self) -> "SkillSource":
        if self.library is None:
            self.library = library_source()
        return self.library

    def _llm_candidates(self, cur: str, step: int, cands: list[Candidate], unmaterialized: list[Retrieved]
                        ) -> list[Candidate]:
        config = self.config
        n_llm = config.llm_per_step if self.model else 0
        history = self.attempts[-8:]
        llm_jobs: list[tuple[str, Optional[Skill], str]] = []
        if n_llm:
            if config.mode == "skills":
                for r in [r for r in unmaterialized if r.status == "applicable"][:n_llm] or unmaterialized[:n_llm]:
                    site = r.sites[0] if r.sites else None
                    g = ("## The skill to apply\nApply this optimization skill, mined from expert kernels, to the kernel "
                         "above (only this one):\n\n" + skill_card(r.skill, site, r.preconditions))
                    llm_jobs.append(("llm_skill", r.skill, g))
            elif config.mode == "no_skills":
                g = "## Guidance\n(none: choose the single most valuable optimization yourself)"
                llm_jobs += [("llm_task", None, g)] * n_llm
            else:
                mem = rank_memory(self.memory, cur, 3)
                g = ("## Past successful changes\nDiffs (simpler -> faster) that worked on other kernels:\n\n" +
                     "\n\n".join(f"```diff\n{m['diff'].strip()[:2000]}\n```" for m in mem)) if mem else \
                    "## Past successful changes\n(none yet)"
                llm_jobs += [("llm_memory", None, g)] * n_llm
        out: list[Candidate] = []
        for kind, rec, guidance in llm_jobs:
            if config.max_tokens is not None and self.tokens >= config.max_tokens:
                break
            if config.max_usd is not None and self.cost >= config.max_usd:
                break
            # what this step's earlier calls proposed, so the next answer differs
            this_step = [Attempt(step, -1, "llm", c.rewrite, description=c.description,
                                 why="proposed earlier in this step; propose a different optimization")
                         for c in cands + out if c.materializer == "llm"]
            usage: dict = {}
            new, carrier, desc, tk, usd, raw_reply = llm_materialize(
                cur, guidance=guidance, problem_summary=self.summary_text, model=self.model,
                history=history + this_step, entry=self.problem.solution.entry, timeout_s=config.timeout_s,
                llm_kwargs=dict(self.llm_kwargs), kernel_name=self.kernel_path.name, usage=usage,
                token_budget=None if config.max_tokens is None else config.max_tokens - self.tokens)
            self.llm_calls += 1 if usage.get("attempts") else 0
            self.llm_usage["prompt_tokens"] += usage.get("prompt_tokens", 0)
            self.llm_usage["completion_tokens"] += usage.get("completion_tokens", 0)
            self.llm_usage["seconds"] += usage.get("seconds", 0.0)
            self.tokens += tk
            self.cost += usd
            sid, sname, scarrier = (rec.skill_id, rec.name, rec.carrier) if rec is not None else ("", "", "")
            if new is None:
                reason_kind = usage.get("rejected", "call_error")
                self.llm_usage["rejected"][reason_kind] = self.llm_usage["rejected"].get(reason_kind, 0) + 1
                self.attempts.append(Attempt(step, len(self.attempts), "llm", kind, sid, sname, scarrier, desc,
                                             tokens=tk, cost_usd=usd, verdict="not_gated", why=desc, llm=usage,
                                             origin="skill" if rec is not None else "model"))
                continue
            self.llm_usage["parsed"] += 1
            out.append(Candidate(kind, scarrier, new, "llm", description=desc, tokens=tk, skill=rec, prior=LLM_PRIOR,
                                 cost_usd=usd, llm=usage, origin="skill" if rec is not None else "model"))
        return out

    def _start(self, source0: str) -> None:
        self.cur = source0
        t = time.perf_counter()
        self.cur_time = self.checker.time(source0)
        self.timeline["input_time_s"] = round(time.perf_counter() - t, 3)
        self.lineage = [{"step": 0, "source": source0, "source_hash": sha256(source0), "what": "input",
                         "time_ms": self.cur_time, "speedup_vs_input": 1.0 if self.cur_time else None}]
        self.tried = {sha256(source0)}

    # ----------------------------------------------------------------- the walk's events
    def on_walk_event(self, e: WalkEvent) -> None:
        if e.kind == "evaluated" and e.candidate is not None and e.verdict is not None:
            self._attempt(e.step, e.candidate, e.verdict)
        elif e.kind == "step_end":
            self._step_end(e.candidate)
        elif e.kind == "accepted" and e.candidate is not None:
            self._keep(e.step, e.candidate)

    def _attempt(self, step: int, c: Candidate, v: Verdict) -> None:
        d = v.raw
        diff = "".join(difflib.unified_diff(self.cur.splitlines(True), c.source.splitlines(True),
                                            f"a/{self.kernel_path.name}", f"b/{self.kernel_path.name}", n=2))
        sk = c.skill
        a = Attempt(step, len(self.attempts), c.materializer, c.rewrite, sk.skill_id if sk else "",
                    sk.name if sk else "", sk.carrier if sk else c.carrier, c.description, c.guards, c.site_line,
                    sha256(c.source), diff[:20000], c.tokens, c.cost_usd, d.get("verdict", "error"),
                    "" if d.get("passed") else (d.get("reason") or d.get("verdict", ""))[:1000],
                    gate_summary(d, detail=True), llm=c.llm, origin=c.origin, origin_why=c.origin_why)
        self.attempts.append(a)
        self.step_attempts.append((c, a))
        self.tried.add(a.source_hash)

    def _step_end(self, kept: Optional[Candidate]) -> None:
        """Say why each attempt of this step was kept or dropped; remember what failed or did not pay off."""
        gate_s = time.perf_counter() - self.t_gate
        if self.step_attempts:  # the gating time of this step, per batch of `jobs` (fit_to_deadline)
            self.gate_seconds.append(gate_s / len(self.step_attempts) * max(1, self.config.jobs))
        timed = self.checker.can_time
        for c, a in self.step_attempts:
            if a.verdict != "pass":
                a.why = "dropped: the gate rejected it (" + a.reason[:200] + ")"
                continue
            if timed:
                a.time_ms = self.checker.time(c.source)
                if a.time_ms is None:
                    a.why = "dropped: correct, but the profile failed (" + \
                        str(self.checker.profile_stage(c.source).get("reason", ""))[:200] + ")"
                    continue
                a.speedup_vs_current = (self.cur_time / a.time_ms) if self.cur_time else None
            if c is kept:
                a.kept = True
        if timed:
            passing = [a for _, a in self.step_attempts if a.verdict == "pass" and a.time_ms is not None]
            best = min(passing, key=lambda a: a.time_ms, default=None)
            for a in passing:
                if a.kept:
                    a.why = f"kept: correct and the fastest of this step ({a.time_ms:.4g} ms vs {self.cur_time:.4g} ms now)" \
                        if self.cur_time else "kept: correct"
                elif a is best:
                    a.why = f"dropped: correct but not faster ({a.time_ms:.4g} ms vs {self.cur_time:.4g} ms now; " \
                            f"needs {self.config.min_gain:.0%} gain)"
                else:
                    a.why = f"dropped: correct but slower than another candidate ({a.time_ms:.4g} ms vs {best.time_ms:.4g} ms)"
        else:
            for _, a in self.step_attempts:
                if a.verdict == "pass":
                    a.why = "kept: correct on every workload and seed (cpu executor: correctness only, no timing)" \
                        if a.kept else "dropped: a higher-priority candidate of this step was kept"
        for c, a in self.step_attempts:
            if a.verdict != "pass":
                self.record.setdefault(_key(c), []).append("fail")
            elif not a.kept and a.time_ms is not None:
                self.record.setdefault(_key(c), []).append("slower")
        entry = dict(self.entry)
        entry["gate_s"] = round(gate_s, 3)
        if self.step_attempts:
            entry["gated"] = len(self.step_attempts)
        kept_attempt = next((a for _, a in self.step_attempts if a.kept), None)
        entry["kept"] = kept_attempt.description if kept_attempt else None
        self.step_log.append(entry)
        self.notify("step", entry)

    def _keep(self, step: int, c: Candidate) -> None:
        kept = next(a for x, a in self.step_attempts if x is c)
        self.cur = c.source
        self.cur_time = kept.time_ms if kept.time_ms is not None else self.cur_time
        self.lineage.append({"step": step, "source": self.cur, "source_hash": kept.source_hash, "what": kept.description,
                             "skill_id": kept.skill_id, "skill_name": kept.skill_name, "carrier": kept.carrier,
                             "rewrite": kept.rewrite, "materializer": kept.materializer, "guards": kept.guards,
                             "origin": kept.origin, "origin_why": kept.origin_why,
                             "time_ms": kept.time_ms, "diff": kept.diff,
                             "speedup_vs_input": (self.lineage[0]["time_ms"] / kept.time_ms)
                             if kept.time_ms and self.lineage[0]["time_ms"] else None})
        if self.config.mode == "flat_memory":  # the memory grows with this run's successes
            self.memory.append({"problem": self.problem.name, "diff": kept.diff})

    # ----------------------------------------------------------------- the result
    def result(self, walk: WalkResult, source0: str, executor: str) -> OptimizeResult:
        if not self.lineage:  # the walk stopped before its first step
            self._start(source0)
        config = self.config
        llm = {"model": self.model or "", "calls": self.llm_calls, "tokens": self.tokens, "cost_usd": round(self.cost, 6)}
        return OptimizeResult(
            problem=self.problem.name, kernel=str(self.kernel_path), executor=executor, mode=config.mode,
            input_source=source0, final_source=self.cur, lineage=self.lineage, attempts=self.attempts,
            steps_used=self.steps_used, termination=_TERMINATION.get(walk.termination, walk.termination),
            input_time_ms=self.lineage[0]["time_ms"], final_time_ms=self.cur_time, retrieval=self.skills.info(),
            llm=llm | self.llm_usage | {"seconds": round(self.llm_usage["seconds"], 3)},
            wall_s=time.perf_counter() - self.t0,
            config={k: (list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Path) else v)
                    for k, v in asdict(config).items() if k != "llm_kwargs"},
            step_log=self.step_log, input_profile=self.checker.profile_stage(source0),
            final_profile=self.checker.profile_stage(self.cur) if self.cur_time is not None else {},
            timeline=self.timeline | {"gate_s": round(sum(e.get("gate_s", 0.0) for e in self.step_log), 3)},
            library_fallback={"enabled": self._fallback_on(), "proposed_at_steps": self.fallback_steps,
                              "kept_steps": [s["step"] for s in self.lineage[1:] if s.get("origin") == "library"
                                             and s.get("origin_why")],
                              "why": "when no retrieved skill has a structural deterministic materialization left, "
                                     "the rewrite library's untried rewrites are gated (no-skills order): its "
                                     "structural ones after the skills' structural candidates and before their "
                                     "qualifiers, its qualifiers last; a kept one is recorded with origin 'library', "
                                     "not a skill"})


def _gated(attempts: list[Attempt]) -> int:
    return sum(1 for a in attempts if a.verdict != "not_gated")


def _key(c: Candidate) -> str:
    return c.rewrite + "|" + re.sub(r"\d+", "#", c.description)[:100] if c.materializer == "deterministic" else \
        "llm|" + sha256(c.source)
