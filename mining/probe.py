"""Precondition discovery by probing (DESIGN.md "Mining", lifting).

A step's optimized form (expert side) and simpler form are run on *adversarial* workloads
derived from the definition's axes: tiny sizes, odd sizes, sizes one past a multiple of 4 / 32
/ the kernel's tile. Where the optimized form fails and the simpler one passes, a precondition
is induced from a small hypothesis space (divisibility, minimum size, row alignment, power of
two): the most general hypothesis that is false on every failing probe and true on every
passing one. The failure becomes a risk.

Experts usually guard their fast paths (`if (N % 4 == 0) vector path else scalar path`), so the
optimized form passes every probe. For a site under such a guard the guard is also *forced*
(its condition replaced by `1`) and probed: that shows what the guard protects against, which
is the precondition of the bare optimization.

Probes run through the same gate (correctness only; binaries are cached by content, so a probe
of an already-gated source costs only its runs).
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from corpora.problem import Problem, ProblemError, _workload_from_line
from mining.carriers import Source
from mining.gate.cache import content_key

DIVISORS = (2, 4, 8, 16, 32, 64, 128)
MINIMUMS = (2, 4, 8, 16, 32, 64, 128, 256)
ELEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int32": 4, "int64": 8, "uint8": 1,
              "int8": 1, "uint32": 4, "bool": 1}


@dataclass
class ProbeOutcome:
    axes: dict[str, int]
    passed: bool
    reason: str = ""


@dataclass
class Hypothesis:
    kind: str  # divisible | minimum | alignment | power_of_two
    axis: str
    value: int
    text: str

    def holds(self, axes: dict[str, int]) -> bool:
        v = axes.get(self.axis)
        if v is None:
            return True
        if self.kind in ("divisible", "alignment"):
            return v % self.value == 0
        if self.kind == "minimum":
            return v >= self.value
        if self.kind == "power_of_two":
            return v > 0 and v & (v - 1) == 0
        return True


@dataclass
class ProbeSet:
    workloads: list[dict[str, Any]]  # lines for workloads.jsonl
    base: dict[str, int]
    tiles: list[int] = field(default_factory=list)


def tile_constants(source: str) -> list[int]:
    """Compile-time sizes the kernel is written around (#define / constexpr / template args)."""
    vals = set()
    for m in re.finditer(r"(?:#define\s+\w+|constexpr\s+(?:int|unsigned|size_t|long)\s+\w+\s*=)\s*\(?\s*(\d+)\b", source):
        v = int(m.group(1))
        if 4 <= v <= 512:
            vals.add(v)
    return sorted(vals)


def probe_workloads(problem: Problem, source: str, max_probes: int = 10) -> ProbeSet:
    """Adversarial workloads: vary one var axis at a time around the smallest CPU-sized workload."""
    small = [w for w in problem.workloads if "large" not in w.tags] or problem.workloads
    base_w = min(small, key=lambda w: _volume(w.axes))
    base = dict(base_w.axes)
    var_axes = [a for a, spec in problem.definition.axes.items() if getattr(spec, "type", "var") == "var"]
    tiles = tile_constants(source)
    candidates: list[dict[str, int]] = []
    for axis in var_axes:
        b = max(1, base[axis])
        values = [1, 3, 5, 17, 33, b + 1, 4 * max(1, b // 4) + 2]
        values += [t + 1 for t in tiles if t + 1 <= max(4 * b, 64)]
        values += [32, 64, 4 * max(1, b // 4)]  # passing references for the hypotheses
        for v in values:
            axes = dict(base)
            axes[axis] = v
            candidates.append(axes)
    seen, lines = set(), []
    for axes in candidates:
        key = tuple(sorted(axes.items()))
        if key in seen or axes == base and base in [l["axes"] for l in lines]:
            continue
        seen.add(key)
        line = {"axes": axes, "tags": ["probe"]}
        scalars = base_w.scalars
        if scalars:
            line["scalars"] = dict(scalars)
        try:
            _workload_from_line(line, problem.definition, "probe", len(lines))
        except ProblemError:
            continue  # outside the definition's constraints: not a legal input
        lines.append(line)
    # keep the set small: the miner probes every lineage state with it
    return ProbeSet(workloads=_spread(lines, max_probes), base=base, tiles=tiles)


def _spread(lines: list[dict], n: int) -> list[dict]:
    if len(lines) <= n:
        return lines
    step = len(lines) / n
    return [lines[int(i * step)] for i in range(n)]


def _volume(axes: dict[str, int]) -> int:
    v = 1
    for x in axes.values():
        v *= max(1, int(x))
    return v


def probe_problem_dir(problem: Problem, probes: ProbeSet, cache_root: Path) -> Path:
    """A copy of the problem folder whose workloads are the probes (content-addressed, reused)."""
    return workload_subset_dir(problem, probes.workloads, cache_root)


def workload_subset_dir(problem: Problem, lines: list[dict[str, Any]], cache_root: Path) -> Path:
    """A copy of the problem folder with other workloads (content-addressed, reused)."""
    key = content_key("probe-problem", problem.content_hash, lines)
    folder = cache_root / "probes" / key[:16]
    if (folder / "workloads.jsonl").exists():
        return folder
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for item in problem.root.iterdir():
        if item.is_file() and item.suffix not in (".cu", ".cuh") and item.name != "workloads.jsonl":
            shutil.copy2(item, tmp / item.name)
    (tmp / "workloads.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
    try:
        tmp.rename(folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def outcomes_from_gate(gate_dict: dict[str, Any], probes: ProbeSet) -> list[ProbeOutcome]:
    """Per-probe verdicts from a correctness stage (a probe fails if any run/seed of it fails)."""
    stage = gate_dict.get("stages", {}).get("correctness", {})
    by_label: dict[str, list[bool]] = {}
    for run in stage.get("runs", []):
        for case in run.get("cases", []):
            by_label.setdefault(case["workload"], []).append(case.get("status") == "pass")
    out = []
    for i, line in enumerate(probes.workloads):
        label = "w%d[%s]" % (i, ",".join(f"{k}={v}" for k, v in line["axes"].items()))
        verdicts = by_label.get(label)
        if verdicts is None:  # not run: the binary died before it (crash, hang)
            passed = False if stage.get("status") == "fail" else True
        else:
            passed = all(verdicts)
        out.append(ProbeOutcome(axes=line["axes"], passed=passed,
                                reason="" if passed else stage.get("reason", "failed")))
    return out


def hypotheses(axes: list[str], tiles: list[int], row_axes: dict[str, int]) -> list[Hypothesis]:
    """The hypothesis space, most general first within each kind."""
    out = []
    for axis in axes:
        for d in sorted(set(DIVISORS) | {t for t in tiles if t > 1}):
            if axis in row_axes and d * row_axes[axis] == 16:
                out.append(Hypothesis("alignment", axis, d, f"rows of {axis} elements are 16-byte aligned "
                                                               f"({axis} % {d} == 0)"))
            out.append(Hypothesis("divisible", axis, d, f"{axis} % {d} == 0"))
        for m in MINIMUMS:
            out.append(Hypothesis("minimum", axis, m, f"{axis} >= {m}"))
        out.append(Hypothesis("power_of_two", axis, 0, f"{axis} is a power of two"))
    return out


def induce(optimized: list[ProbeOutcome], simpler: list[ProbeOutcome], space: list[Hypothesis]) -> Optional[Hypothesis]:
    """The hypothesis separating 'optimized fails but simpler passes' from 'optimized passes'.

    Probes where the simpler form fails too say nothing about this optimization and are ignored.
    Among consistent hypotheses the weakest wins (smallest divisor / minimum), so the
    precondition is no stronger than the evidence demands.
    """
    bad = [o.axes for o, s in zip(optimized, simpler) if not o.passed and s.passed]
    good = [o.axes for o, s in zip(optimized, simpler) if o.passed]
    if not bad:
        return None
    consistent = [h for h in space if all(not h.holds(a) for a in bad) and all(h.holds(a) for a in good)]
    if not consistent:
        return None
    order = {"alignment": 0, "divisible": 1, "minimum": 2, "power_of_two": 3}
    return min(consistent, key=lambda h: (order[h.kind], h.value))


def guard_conditions(source: str, start: int, end: int) -> list[tuple[int, int, str]]:
    """`if` conditions enclosing a site that test divisibility or alignment: (start, end, text)
    byte ranges of the parenthesized condition, innermost first."""
    src = Source(source)
    node = src.tree.root_node.descendant_for_byte_range(start, max(start, end - 1))
    out = []
    while node is not None:
        if node.type == "if_statement":
            cond = node.child_by_field_name("condition")
            if cond is not None:
                text = src.raw[cond.start_byte:cond.end_byte].decode("utf-8", "replace")
                if re.search(r"%|&\s*\(?\s*\d|&\s*\w+\s*\)\s*==|uintptr_t|size_t\)", text):
                    out.append((cond.start_byte, cond.end_byte, text))
        node = node.parent
    return out


def force_guard(source: str, cond_start: int, cond_end: int) -> str:
    raw = source.encode()
    return (raw[:cond_start] + b"(1)" + raw[cond_end:]).decode("utf-8")


def code_guard_text(cond: str) -> list[tuple[str, str, int]]:
    """Divisibility tests written in a guard: [(kind, axis, value)] from `N % 4 == 0`,
    `(N & 3) == 0`."""
    found = []
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*%\s*(\d+)\s*==\s*0", cond):
        found.append(("divisible", m.group(1), int(m.group(2))))
    for m in re.finditer(r"\(\s*([A-Za-z_]\w*)\s*&\s*(\d+)\s*\)\s*==\s*0", cond):
        found.append(("divisible", m.group(1), int(m.group(2)) + 1))
    return found


RunProbes = Callable[[str], dict[str, Any]]  # source -> gate dict on the probe problem
