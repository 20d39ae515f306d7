"""The order in which `skills optimize` spends its budget: the value plan of retrieval/plan.py.

Retrieval (prompts/optimize.py ``retrieve``) returns the skills that may apply, from the hybrid
search or from a scan of the store. ``order_retrieved`` re-ranks them the way `skills query --plan`
does, whichever backend produced them: every applicable skill is valued on the current kernel
(retrieval/value.py: measured GPU effect, else the static prior of its carrier in the kernel's
regime, times the share of the kernel's work its sites cover), structural carriers first in an order
that can be applied (retrieval/plan.py: a shared tile before the register tile loaded from it),
then the qualifiers, then the skills whose site no detector found (a forward rewrite may still find
one). ``candidate_key`` orders the materialized candidates by that plan, so the per-step slice of
candidates gated in parallel holds the structural steps first.

The library fallback: when no retrieved skill has a structural deterministic materialization left at
a step (every one tried, failed twice or not faster twice, or none applies; qualifier-level ones may
be left), the step's candidates include the rewrite library (``library_records``: one record per
carrier the forward rewrites serve, no mined evidence), in the order the no-skills baseline uses
(``baseline_order`` "library": each rewrite's prior). ``candidate_key`` puts the library's structural
rewrites after the skills' structural candidates (LLM ones included) and before the skills'
qualifiers, and the library's qualifiers last (issue 20: structural steps first).

``bottleneck_first`` decides what one step gates: the kernel's regime (retrieval/value.py
``kernel_shape``: latency-bound serial loops, reuse, atomics, bandwidth ...) names the carriers that
attack what bounds it (``addresses``); when some candidates introduce one, the step gates only those
and holds the others back for a later step. On the GPU the walk keeps the fastest candidate of a
step, so the plan's order alone did not decide: on the naive exclusive_scan (serial chunk loops,
H100, session 13) vectorizing the serial loops' loads (2.42 ms) beat the warp scan (2.44 ms on the
H200) by noise at step 1, and the vectorized loops no longer matched the warp rewrites that give the
expert's order of speedup; a step that gates fewer candidates is also shorter.

``fit_to_deadline`` trims a step's candidates to what the time left can gate, from the seconds a
gated candidate has taken so far in this run: a step that starts just before the time limit does
not overrun it by a full batch.
"""
from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any, Callable, Optional, Sequence

from mining.operators.registry import PAIRS, all_rewrites, get_rewrite, rewrites_for, rewrites_for_carrier
from mining.records import Skill
from retrieval.applicability import Checker
from retrieval.plan import order
from retrieval.value import QUALIFIERS, Valuer, addresses, kernel_shape


@lru_cache(maxsize=4)
def checker_for(source: str) -> Checker:
    """The applicability checker of ``source``, shared by the step's passes (the scan, the value plan,
    the regime reading): one parse per kernel state instead of one per pass."""
    return Checker(source)


def kernel_regimes(source: str) -> list[str]:
    """What bounds ``source`` (retrieval/value.py ``kernel_shape``), most specific first; [] when the
    parser cannot read it."""
    try:
        return list(kernel_shape(checker_for(source)).regimes)
    except Exception:  # noqa: BLE001 - a detector bug must not stop optimizing
        return []


def candidate_carriers(c: Any) -> set[str]:
    """The carriers a candidate introduces: its registered rewrite's (and what it serves); an LLM
    candidate's skill's."""
    try:
        r = get_rewrite(c.rewrite)
        return {r.carrier, *r.serves}
    except KeyError:
        skill = getattr(c, "skill", None)
        return {skill.carrier if skill is not None else c.carrier}


def attacks_bottleneck(c: Any, regimes: Sequence[str]) -> bool:
    return not is_qualifier(c) and any(addresses(x, regimes) for x in candidate_carriers(c))


def bottleneck_first(todo: list, regimes: Sequence[str]) -> tuple[list, list]:
    """(the candidates this step gates, the ones held back for a later step): the candidates that
    attack the kernel's bottleneck (``attacks_bottleneck``), in the given order, when there are any;
    else all of them. An LLM candidate is never held: its tokens are spent, and a later step would
    ask the model again."""
    if not any(attacks_bottleneck(c, regimes) for c in todo):
        return todo, []
    first = [c for c in todo if attacks_bottleneck(c, regimes) or getattr(c, "proposer", "") == "llm"]
    ids = {id(c) for c in first}
    return first, [c for c in todo if id(c) not in ids]


def expand_hits(ans: dict) -> list[dict]:
    """The answer's skill hits in order, an "also" entry replaced by its skills."""
    out = []
    for h in ans.get("hits", []):
        if h.get("kind") == "also":
            out.extend(h.get("skills", []))
        else:
            out.append(h)
    return out


def _as_json(skill: Any) -> dict:
    return skill if isinstance(skill, dict) else skill.model_dump(mode="json")


def order_retrieved(retrieved: list, source: str, op_type: Optional[str] = None,
                    exclude_problems: Sequence[str] = (), policy: str = "value",
                    as_json: Callable[[Any], dict] = _as_json) -> list:
    """``retrieved`` (prompts.optimize.Retrieved, whose ``skill`` is a record) in plan order; each
    applicable one gets ``value``. The query-side passes read skills as JSON: ``as_json`` gives that
    form (the optimizer's cached one). ``policy`` "library" / "memory": the benchmark's deterministic
    baselines (``baseline_order``)."""
    if policy != "value":
        return baseline_order(retrieved, source, policy, as_json)
    try:
        checker = checker_for(source)
        valuer = Valuer(checker, None, op_type, exclude_problems)
    except Exception:  # noqa: BLE001 - a source the parser cannot read: keep retrieval's order
        return retrieved
    scored, rest = [], []
    for r in retrieved:
        try:
            app = checker.check(as_json(r.skill))
        except Exception:  # noqa: BLE001 - a detector bug must not stop optimizing
            rest.append(r)
            continue
        if app.status != "applicable":
            rest.append(r)
            continue
        val = valuer.value(as_json(r.skill), app)
        r.value = val
        scored.append((r, val))
    best: dict[str, tuple] = {}
    for r, val in scored:  # one entry per carrier decides the carrier's place; its other skills follow it
        c = r.skill.carrier
        if c not in best or val["score"] > best[c][1]["score"]:
            best[c] = (r, val)
    carriers = sorted(best, key=lambda c: -best[c][1]["score"])
    structural = [c for c in carriers if c not in QUALIFIERS]
    quals = [c for c in carriers if c in QUALIFIERS]
    planned = order(structural, lambda c: c, lambda c: best[c][1]["score"],
                    lambda c: list(best[c][0].skill.requires or [])) + quals
    place = {c: n for n, c in enumerate(planned)}
    scored.sort(key=lambda t: (place[t[0].skill.carrier], -t[1]["score"]))
    out = [r for r, _ in scored] + rest
    for n, r in enumerate(out, start=1):
        r.rank = n
    return out


# candidate_key's tiers (issue 20: the budget goes to structural steps first): a skill's structural
# deterministic materializations (by plan rank), then LLM materializations of structural skills (the
# skills no rewrite covers), then the library fallback's structural rewrites, then qualifier-level
# candidates (restrict, unroll, ldg, launch bounds, fast math, cache hints) of the skills, deterministic
# then LLM, then the library's qualifiers. A qualifier skill kept first used to hold the library's
# structural rewrites back until every qualifier was spent (cuda_samples_matrixMul on the H100).
LLM_TIER, LIB_STRUCT_TIER, QUAL_TIER, LLM_QUAL_TIER, FALLBACK_TIER = (3 * 10 ** 5, 4 * 10 ** 5, 5 * 10 ** 5,
                                                                      6 * 10 ** 5, 2 * 10 ** 6)


def is_qualifier(c: Any) -> bool:
    """A candidate that introduces a qualifier-level carrier (retrieval/value.py QUALIFIERS): by its
    rewrite's carrier; an LLM candidate (no registered rewrite) by its skill's carrier."""
    try:
        return get_rewrite(c.rewrite).carrier in QUALIFIERS
    except KeyError:
        skill = getattr(c, "skill", None)
        return (skill.carrier if skill is not None else c.carrier) in QUALIFIERS


def candidate_key(c: Any) -> tuple:
    """Sort key of a materialized candidate: its tier (above), then the rank of its skill in the
    plan (structural steps come first there), then the rewrite's prior (expected effect)."""
    qual = is_qualifier(c)
    if getattr(c, "fallback", False):
        return ((FALLBACK_TIER if qual else LIB_STRUCT_TIER) + c.rank, -c.prior)
    if not c.rank:
        return (LLM_QUAL_TIER if qual else LLM_TIER, -c.prior)
    return ((QUAL_TIER if qual else 0) + c.rank, -c.prior)


def library_records() -> list[Skill]:
    """One record per carrier the forward rewrites serve, with no mined evidence: what the
    optimizer can do with its rewrite library alone (the no-skills baseline, and the fallback when
    the skill plan is exhausted)."""
    carriers = {p.operator.carrier for p in PAIRS if p.operator is not None}
    carriers |= {c for r in all_rewrites().values() for c in (r.carrier, *r.serves)}
    return [Skill(skill_id=f"lib-{c}", key=f"{c}:library", name=f"rewrite library: {c}", intent=f"rewrite library: {c}",
                  carrier=c, operator="", provides=[c]) for c in sorted(carriers) if rewrites_for_carrier(c)]


def baseline_order(retrieved: list, source: str, policy: str, as_json: Callable[[Any], dict] = _as_json) -> list:
    """The deterministic baselines of eval/bench_optimize.py, same rewrites and gate, no value plan:
    ``library``: the rewrite library in its fixed order of expected effect (each forward rewrite's
    ``prior`` in the operator registry), no mined skills; ``memory``: past skills by token overlap of their simpler-side
    code with the kernel (the flat-memory style: no preconditions, effects or plan)."""
    if policy == "library":
        def key(r):
            names = rewrites_for(r.skill.operator, r.skill.carrier)
            return -max([get_rewrite(w).prior for w in names] or [0.0])
    elif policy == "memory":
        tok = re.compile(r"[A-Za-z_]\w*|\d+|[^\s\w]")
        q = set(tok.findall(source))

        def key(r):
            best = 0.0
            d = as_json(r.skill)
            for e in (d.get("evidence") or [])[:8] + [d]:
                t = set(tok.findall(e.get("before", "") or ""))
                if t:
                    best = max(best, len(t & q) / len(t | q))
            return -best
    else:
        raise ValueError(f"unknown ordering policy {policy!r}")
    out = sorted(retrieved, key=key)
    for n, r in enumerate(out, start=1):
        r.rank = n
    return out


def fit_to_deadline(todo: list, t0: float, time_limit_s: Optional[float], gated_seconds: Sequence[float],
                    jobs: int, now: float, estimate: Optional[float] = None) -> list:
    """The candidates that the time left can gate (at least one), from the mean seconds a batch of
    ``jobs`` gated candidates took so far; before any step was measured, from ``estimate`` (the
    seconds this problem's own input took to gate and time); all of them without a limit or either."""
    hist = list(gated_seconds) or ([estimate] if estimate else [])
    if time_limit_s is None or not hist or not todo:
        return todo
    left = time_limit_s - (now - t0)
    per = sum(hist) / len(hist)
    batches = max(1, int(left // max(per, 1e-3)))
    return todo[:max(1, min(len(todo), batches * max(1, jobs)))]


def geomean(xs: Sequence[float]) -> Optional[float]:
    v = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else None
