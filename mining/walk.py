"""The walk, independent of what is being changed: backward (mining) and forward (optimize).

From a start text (an expert kernel, a backend function), repeat: ask `propose` for candidate
simplifications of the current text, evaluate them with a `Checker` (the kernel gate, or the
backend compile gate), accept one, continue from it; stop when no candidate passes
(`complete`) or a budget is hit (`step_limit`, `rejection_limit`, `time_limit`). Every
evaluated candidate is kept: accepted ones as steps, failed ones as rejections with the
checker's reason (a rejection is evidence too: "removing this barrier breaks correctness").

Strategies:
* `priority` (the CPU default, and the only one without timings): candidates in the fixed
  order `propose` returns them (operator priority, then position in the file); they are
  evaluated in batches of `jobs`, and the first that passes in that order is accepted.
* `smallest_effect` (needs a checker that can time, i.e. a GPU): every candidate is checked,
  the passing ones (at most `profile_top`, in priority order) are timed one at a time, and the
  one whose removal costs the least time is accepted, so the lineage peels optimizations from
  the least to the most important.
* `fastest` (needs timings; the forward walk of `skills optimize`): every candidate is checked,
  every passing one is timed, and the fastest is accepted when it beats the current state's cost
  by `min_gain`.

A candidate rejected once is not re-evaluated while the code it touches (its enclosing
function) is unchanged: `Candidate.retry_key` says what "unchanged" means.

The forward loop (`skills optimize`) runs with `keep_going`: a step that accepts nothing does not
end the walk; the next step proposes again from the same state (the proposer leaves out what was
tried) and the walk ends `complete` when the proposer has nothing left. `stop(step)` is a budget
check at the start of every step that can end the walk with its own termination reason.

`max_cost` (timed walks only) is a ceiling on the cost of an accepted state, e.g. twice the
time of the problem's naive kernel: a simplification that passes the gate but lands far below
naive (a single-address atomic from every one of 67M threads) is rejected as `too_slow`. The
walk is meant to end near a naive implementation, not at a pathological one.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Protocol, Sequence


@dataclass
class Candidate:
    operator: str
    carrier: str
    source: str  # the whole simplified text
    proposer: str = "deterministic"  # or "llm"
    site_line: int = 0
    site_excerpt: str = ""
    site_start: int = 0
    site_end: int = 0
    description: str = ""
    variant: str = ""
    retry_key: str = ""  # same key + already rejected -> not evaluated again
    tokens: int = 0


@dataclass
class Verdict:
    passed: bool
    verdict: str  # pass | fail | unsupported | error
    reason: str = ""
    summary: dict[str, Any] = field(default_factory=dict)  # compact, stored with the step
    static: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)  # the checker's full result
    wall_s: float = 0.0


class Checker(Protocol):
    can_time: bool

    def check_many(self, sources: Sequence[str]) -> list[Verdict]:
        """Check texts (in parallel where the checker can); results in the same order."""

    def time(self, source: str) -> Optional[float]:
        """A scalar cost (e.g. geometric-mean kernel time in ms), serialized; None if unavailable."""


@dataclass
class WalkEvent:
    kind: str  # step_start | evaluated | accepted | step_end | done
    step: int
    candidate: Optional[Candidate] = None
    verdict: Optional[Verdict] = None
    n_candidates: int = 0
    message: str = ""


@dataclass
class WalkResult:
    states: list[str]  # states[0] = start, states[k] = after accepted step k
    accepted: list[tuple[Candidate, Verdict]]
    rejected: list[tuple[int, Candidate, Verdict]]  # (step tried at, candidate, verdict)
    termination: str
    wall_s: float
    start_verdict: Optional[Verdict] = None
    times: dict[int, Optional[float]] = field(default_factory=dict)  # state index -> cost (timed walks)
    tokens: int = 0


STRATEGIES = ("priority", "smallest_effect", "fastest")


def unexercised(checker: Checker, before: str, c: Candidate) -> str:
    """A passing candidate whose site never ran on the checker's cases proves nothing: the reason,
    or '' (checkers without line counts say nothing)."""
    ask = getattr(checker, "unexercised", None)
    return ask(before, c.site_start, c.site_end) if ask is not None and c.site_end > c.site_start else ""


def backward_walk(start: str, propose: Callable[[str, int], list[Candidate]], checker: Checker, *,
                  strategy: str = "priority", jobs: int = 2, max_steps: int = 100, max_rejections: Optional[int] = 200,
                  time_limit_s: Optional[float] = None, profile_top: int = 6, check_start: bool = True,
                  max_cost: Optional[float] = None, min_gain: float = 0.0, keep_going: bool = False,
                  stop: Callable[[int], Optional[str]] = lambda step: None,
                  on_event: Callable[[WalkEvent], None] = lambda e: None) -> WalkResult:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} ({', '.join(STRATEGIES)})")
    if strategy != "priority" and not checker.can_time:
        raise ValueError(f"strategy {strategy} needs timings (a GPU executor)")
    t0 = time.perf_counter()
    states = [start]
    accepted: list[tuple[Candidate, Verdict]] = []
    rejected: list[tuple[int, Candidate, Verdict]] = []
    rejected_keys: set[str] = set()
    too_slow: set[str] = set()  # texts over the cost ceiling, never proposed again
    times: dict[int, Optional[float]] = {}
    tokens = 0
    start_verdict = None
    if check_start:
        start_verdict = checker.check_many([start])[0]
        if not start_verdict.passed:
            return WalkResult(states, accepted, rejected, "start_failed", time.perf_counter() - t0, start_verdict)
    if max_cost is not None and not checker.can_time:
        max_cost = None  # a ceiling needs timings; without them the walk is unbounded as before
    if strategy != "priority" or max_cost is not None:
        times[0] = checker.time(start)

    def over_ceiling(step: int, c: Candidate, v: Verdict, t: Optional[float]) -> bool:
        """Reject a passing candidate whose cost is above the ceiling (and remember it)."""
        if max_cost is None or t is None or t <= max_cost:
            return False
        v.passed, v.verdict = False, "too_slow"
        v.reason = f"passes the gate but costs {t:.4g} ms, above the ceiling of {max_cost:.4g} ms"
        v.summary["time"] = t
        too_slow.add(c.source)
        rejected.append((step, c, v))
        if c.retry_key:
            rejected_keys.add(c.retry_key)
        on_event(WalkEvent("evaluated", step, c, v))
        return True
    termination = "complete"
    step = 1
    while True:
        if step > max_steps:
            termination = "step_limit"
            break
        if time_limit_s is not None and time.perf_counter() - t0 > time_limit_s:
            termination = "time_limit"
            break
        budget = stop(step)
        if budget:
            termination = budget
            break
        current = states[-1]
        cands = propose(current, step)
        tokens += sum(c.tokens for c in cands)
        seen_text = {current}
        pool = []
        for c in cands:
            if c.source in seen_text or c.source in too_slow or (c.retry_key and c.retry_key in rejected_keys):
                continue
            seen_text.add(c.source)
            pool.append(c)
        on_event(WalkEvent("step_start", step, n_candidates=len(pool)))
        chosen: Optional[tuple[Candidate, Verdict]] = None
        passing: list[tuple[Candidate, Verdict]] = []
        limit_hit = False
        batch_size = len(pool) if strategy == "fastest" else max(1, jobs)  # fastest: every candidate at once
        for i in range(0, len(pool), max(1, batch_size)):
            batch = pool[i:i + max(1, batch_size)]
            verdicts = checker.check_many([c.source for c in batch])
            for c, v in zip(batch, verdicts):
                if v.passed and (why := unexercised(checker, current, c)):
                    v = replace(v, passed=False, verdict="unexercised", reason=why)
                on_event(WalkEvent("evaluated", step, c, v))
                if v.passed:
                    passing.append((c, v))
                else:
                    rejected.append((step, c, v))
                    if c.retry_key:
                        rejected_keys.add(c.retry_key)
            if max_rejections is not None and len(rejected) >= max_rejections:
                limit_hit = True
                break
            if strategy == "priority" and passing:
                break
            if strategy == "smallest_effect" and len(passing) >= profile_top:
                break
        if passing and strategy == "priority":
            for c, v in passing:  # passing is in priority order; untimed unless there is a ceiling
                t = checker.time(c.source) if max_cost is not None else None
                if not over_ceiling(step, c, v, t):
                    chosen = (c, v)
                    if t is not None:
                        v.summary["time"] = times[len(states)] = t
                    break
            if chosen is None and not limit_hit:
                continue  # every passing candidate was too slow: they are rejected now, propose again
        elif passing and strategy == "fastest":
            base = times.get(len(states) - 1)
            timed = []
            for c, v in passing:
                t = checker.time(c.source)
                if t is None:
                    continue
                v.summary["time"] = t
                timed.append((t, len(timed), c, v))
            if timed:
                t, _, c, v = min(timed)
                if base is None or t < base * (1.0 - min_gain):
                    chosen = (c, v)
                    times[len(states)] = t
        elif passing:
            base = times.get(len(states) - 1)
            timed = []
            for c, v in passing[:profile_top]:
                t = checker.time(c.source)
                if over_ceiling(step, c, v, t):
                    continue
                v.summary["time"] = t
                timed.append((abs((t or 0) / base - 1.0) if (t and base) else float("inf"), len(timed), c, v, t))
            if timed:
                _, _, c, v, t = min(timed)
                chosen = (c, v)
                times[len(states)] = t
            elif not limit_hit:
                continue
        on_event(WalkEvent("step_end", step, chosen[0] if chosen else None, chosen[1] if chosen else None,
                           n_candidates=len(pool)))
        if chosen is None:
            if keep_going and pool and not limit_hit:
                step += 1  # nothing kept this time: propose again from the same state
                continue
            termination = "rejection_limit" if limit_hit else "complete"
            break
        accepted.append(chosen)
        states.append(chosen[0].source)
        on_event(WalkEvent("accepted", step, chosen[0], chosen[1]))
        if limit_hit:
            termination = "rejection_limit"
            break
        step += 1
    wall = time.perf_counter() - t0
    on_event(WalkEvent("done", step, message=termination))
    return WalkResult(states, accepted, rejected, termination, wall, start_verdict, times, tokens)
