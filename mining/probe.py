"""Precondition discovery by probing (docs/architecture.md, "Mining", step 3).

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
import math
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from tree_sitter import Node

from corpora.problem import Problem, ProblemError, workload_from_dict
from corpora.code.nodes import enclosing
from corpora.code.source import Source
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
    kind: str  # divisible | minimum | maximum | alignment | power_of_two
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
        if self.kind == "maximum":
            return v <= self.value
        if self.kind == "power_of_two":
            return v > 0 and v & (v - 1) == 0
        return True


@dataclass
class ProbeSet:
    workloads: list[dict[str, Any]]  # lines for workloads.jsonl
    base: dict[str, int]
    tiles: list[int] = field(default_factory=list)
    bounds: list[int] = field(default_factory=list)  # products of the kernel's geometry, probed at P and P+1


GEOMETRY_CAP = 16384      # largest geometry size probed on an inner axis
GEOMETRY_PRODUCTS = 6     # boundaries probed per inner axis (each at P and P + 1)
PROBE_VOLUME = 1 << 20    # product of a probe's axes: what the CPU executor runs in seconds
_VECTOR_WIDTH = {"float4": 4, "int4": 4, "uint4": 4, "float2": 2, "int2": 2, "uint2": 2, "double2": 2,
                 "half2": 2, "__half2": 2, "__nv_bfloat162": 2, "nv_bfloat162": 2, "char4": 4, "uchar4": 4}


def geometry_factors(source: str) -> list[int]:
    """The sizes a kernel's work distribution is built from: block sizes (launch configurations,
    `dim3` blocks, `__launch_bounds__`), compile-time constants and template arguments, vector
    widths (float4 ...), unroll factors and the warp size."""
    names: dict[str, int] = {}
    for m in re.finditer(r"#define\s+(\w+)\s+\(?\s*(\d+)\s*\)?\s*(?:$|//|/\*)", source, re.M):
        names[m.group(1)] = int(m.group(2))
    for m in re.finditer(r"(?:constexpr|const)\s+(?:static\s+)?(?:int|unsigned|size_t|long|int64_t)\s+(\w+)\s*=\s*(\d+)\s*;",
                         source):
        names[m.group(1)] = int(m.group(2))

    def value(tok: str) -> Optional[int]:
        tok = tok.strip().strip("()")
        return int(tok) if tok.isdigit() else names.get(tok)

    out = set(names.values())
    for m in re.finditer(r"<<<[^,>]+,\s*([^,>]+?)\s*(?:,|>>>)", source):
        v = value(m.group(1))
        if v:
            out.add(v)
        else:  # a dim3 variable: dim3 block(32, 8)
            d = re.search(rf"dim3\s+{re.escape(m.group(1).strip())}\s*\(([^)]*)\)", source)
            if d:
                dims = [value(t) for t in d.group(1).split(",")]
                dims = [x for x in dims if x]
                out.update(dims)
                if dims:
                    out.add(int(math.prod(dims)))
    for m in re.finditer(r"__launch_bounds__\s*\(\s*(\w+)", source):
        v = value(m.group(1))
        if v:
            out.add(v)
    for m in re.finditer(r"\w+\s*<([^<>;]*)>\s*<<<", source):  # template arguments of a launch
        out.update(v for t in m.group(1).split(",") if (v := value(t)))
    for m in re.finditer(r"#pragma\s+unroll\s+\(?(\w+)", source):
        v = value(m.group(1))
        if v:
            out.add(v)
    for name, width in _VECTOR_WIDTH.items():
        if re.search(rf"\b{name}\b", source):
            out.add(width)
    if re.search(r"__shfl|warpSize|\bwarp\b", source):
        out.add(32)
    return sorted(v for v in out if 2 <= v <= 1024)


def geometry_bounds(source: str, cap: int = GEOMETRY_CAP, limit: int = GEOMETRY_PRODUCTS) -> list[int]:
    """Sizes at which a kernel's work distribution runs out: each factor and each product of two
    or three of them (block x vector width, block x unroll x vector, warps x lanes x vector ...),
    up to `cap`; at most `limit`, spread over the range and always including the largest."""
    factors = geometry_factors(source)
    products = set()
    for i, a in enumerate(factors):
        products.add(a)
        for j in range(i + 1, len(factors)):
            b = factors[j]
            products.add(a * b)
            for c in factors[j + 1:]:
                products.add(a * b * c)
    ranked = sorted(p for p in products if 16 <= p <= cap)
    if len(ranked) <= limit:
        return ranked
    step = (len(ranked) - 1) / (limit - 1)
    return sorted({ranked[round(i * step)] for i in range(limit)})


def tile_constants(source: str) -> list[int]:
    """Compile-time sizes the kernel is written around (#define / constexpr / template args)."""
    vals = set()
    for m in re.finditer(r"(?:#define\s+\w+|constexpr\s+(?:int|unsigned|size_t|long)\s+\w+\s*=)\s*\(?\s*(\d+)\b", source):
        v = int(m.group(1))
        if 4 <= v <= 512:
            vals.add(v)
    return sorted(vals)


def probe_workloads(problem: Problem, source: str, max_probes: int = 10) -> ProbeSet:
    """Adversarial workloads: vary one var axis at a time around the smallest CPU-sized workload
    (small sizes, odd sizes, one past the kernel's tiles); and, on every inner axis (the last
    dimension of a tensor), the kernel's geometry bounds and one past each, with the other axes
    kept at the small base, so the CPU executor runs them in seconds."""
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
            workload_from_dict(line, problem.definition, "probe", len(lines))
        except ProblemError:
            continue  # outside the definition's constraints: not a legal input
        lines.append(line)
    # keep the set small: the miner probes every lineage state with it
    chosen = _spread(lines, max_probes)
    bounds = geometry_bounds(source)
    inner = {spec.shape[-1] for spec in list(problem.definition.inputs.values()) +
             list(problem.definition.outputs.values()) if spec.shape and isinstance(spec.shape[-1], str)}
    seen = {tuple(sorted(line["axes"].items())) for line in chosen}
    for axis in [a for a in var_axes if a in inner]:
        for p in bounds:
            for v in (p, p + 1):
                axes = dict(base)
                axes[axis] = v
                key = tuple(sorted(axes.items()))
                if key in seen or _volume(axes) > PROBE_VOLUME:
                    continue
                line = {"axes": axes, "tags": ["probe", "geometry"]}
                if base_w.scalars:
                    line["scalars"] = dict(base_w.scalars)
                try:
                    workload_from_dict(line, problem.definition, "probe", len(chosen))
                except ProblemError:
                    continue
                seen.add(key)
                chosen.append(line)
    return ProbeSet(workloads=chosen, base=base, tiles=tiles, bounds=bounds)


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


def hypotheses(axes: list[str], tiles: list[int], row_axes: dict[str, int],
               bounds: Optional[list[int]] = None) -> list[Hypothesis]:
    """The hypothesis space, most general first within each kind. `bounds` (the kernel's geometry
    products) add `maximum` hypotheses: AXIS <= P."""
    out = []
    for axis in axes:
        for b in sorted(set(bounds or []), reverse=True):
            out.append(Hypothesis("maximum", axis, b, f"{axis} <= {b}"))
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
    consistent = _on_varied_axes([h for h in space if all(not h.holds(a) for a in bad) and all(h.holds(a) for a in good)],
                                 bad, [o.axes for o in optimized])
    if not consistent:
        return None
    order = {"alignment": 0, "divisible": 1, "minimum": 2, "maximum": 3, "power_of_two": 4}
    # weakest: the smallest divisor or minimum, the largest maximum
    return min(consistent, key=lambda h: (order[h.kind], -h.value if h.kind == "maximum" else h.value))


def _on_varied_axes(consistent: list[Hypothesis], bad: list[dict[str, int]],
                    probes: list[dict[str, int]]) -> list[Hypothesis]:
    """Probes vary one axis at a time around a base, so an axis a failing probe did not vary (its
    value is the base's, the most common one) cannot explain the failure: `M % 64 == 0` must not
    stand for failures that all came from varying N. Keeps the hypotheses on varied axes, if any."""
    from collections import Counter

    base = {a: Counter(p.get(a) for p in probes).most_common(1)[0][0] for a in (probes[0] if probes else {})}
    varied = {a for p in bad for a, v in p.items() if base.get(a) != v}
    kept = [h for h in consistent if h.axis in varied]
    return kept if varied else consistent


def induce_step_bound(optimized: list[ProbeOutcome], simpler: list[ProbeOutcome],
                      space: list[Hypothesis]) -> Optional[Hypothesis]:
    """Where the *simpler* form fails and the optimized one passes, the step (the simplification)
    holds only on part of the sizes: the weakest hypothesis true on every probe the simpler form
    passes and false on every probe where it alone fails (e.g. `C <= 1024` for a block-stride row
    loop collapsed into one iteration of 256 threads x float4). None when the simpler form never
    fails alone, or no hypothesis separates the probes."""
    bad = [s.axes for o, s in zip(optimized, simpler) if o.passed and not s.passed]
    good = [s.axes for s in simpler if s.passed]
    if not bad:
        return None
    consistent = _on_varied_axes([h for h in space if all(not h.holds(a) for a in bad) and all(h.holds(a) for a in good)],
                                 bad, [s.axes for s in simpler])
    if not consistent:
        return None
    order = {"maximum": 0, "alignment": 1, "divisible": 2, "minimum": 3, "power_of_two": 4}
    return min(consistent, key=lambda h: (order[h.kind], -h.value if h.kind == "maximum" else h.value))


_DIVISIBILITY = re.compile(r"%|&\s*\(?\s*\d|&\s*\w+\s*\)\s*==|uintptr_t|size_t\)")


def guard_conditions(source: str, start: int, end: int) -> list[tuple[int, int, str]]:
    """Divisibility / alignment `if` guards whose true branch holds the site, in its own
    function, innermost first: (start, end, text) byte ranges to force."""
    src = Source(source)
    node = src.tree.root_node.descendant_for_byte_range(start, max(start, end - 1))
    child, out = node, []
    while node is not None:
        # only a guard whose true branch holds the site protects it (not one it sits in the else of)
        if node.type == "if_statement" and _is_in(child, node.child_by_field_name("consequence")):
            cond = node.child_by_field_name("condition")
            if cond is not None:
                text = src.raw[cond.start_byte:cond.end_byte].decode("utf-8", "replace")
                if _DIVISIBILITY.search(text):
                    out.append((cond.start_byte, cond.end_byte, text))
        child, node = node, node.parent
    return out


# Carriers whose correctness depends on the sizes a launch guard tests (access width, tile
# coverage). Launch guards select a whole kernel or template instantiation: for these the guard
# is what makes the site valid; for the rest (unroll, restrict, ...) it merely happens to hold.
SIZE_SENSITIVE = frozenset({"vector_load", "vector_store", "async_copy", "shared_tile", "register_tile",
                            "tensor_core_wmma", "multi_stage_pipeline", "double_buffer", "halo_tile"})


def site_guards(source: str, start: int, end: int, carrier: str) -> list[tuple[int, int, str]]:
    """The guards to force when probing a step: the site's own enclosing `if` guards; else, for a
    size-sensitive carrier, the launch guards that select its kernel."""
    inner = guard_conditions(source, start, end)
    if inner or carrier not in SIZE_SENSITIVE:
        return inner
    return launch_guards(source, start, end)


def launch_guards(source: str, start: int, end: int) -> list[tuple[int, int, str]]:
    """Guards outside the site's function that select it. Two shapes (both in the corpus):

    * the whole kernel is the fast path: every launch of it sits under `if (cond)` (or under
      `if (vec ...)` with `const bool vec = cond;`), e.g. `if (vec) k_vec4<<<..>>>(..)`;
    * the site is under `if (P)` / `if constexpr (P)` for a template flag P of its function,
      and the launch that passes P = true is guarded: `if ((W & 3) == 0) k<true><<<..>>>(..)`.

    Only conditions that test divisibility or alignment count. A bool variable is resolved to
    its initializer, which is what gets forced, so every use of the flag (grid sizes too)
    stays consistent with the forced path."""
    src = Source(source)
    root = src.tree.root_node
    site = root.descendant_for_byte_range(start, max(start, end - 1))
    func = enclosing(site, "function_definition")
    if func is None:
        return []
    fname = _function_name(src, func)
    if not fname:
        return []
    tparams = _template_params(src, func)
    # template flags the site depends on, with the value that makes its branch run
    flags: dict[str, str] = {}
    node = site
    while node is not None and node != func:
        parent = node.parent
        if parent is not None and parent.type in ("if_statement", "conditional_expression"):
            cond = parent.child_by_field_name("condition")
            in_else = _is_in(node, parent.child_by_field_name("alternative"))
            if cond is not None and not _is_in(node, cond):
                ctext = _text(src, cond).strip("() ")
                m = re.fullmatch(r"(!?)\s*([A-Za-z_]\w*)", ctext)
                if m and m.group(2) in tparams:
                    positive = (m.group(1) == "") != in_else
                    flags.setdefault(m.group(2), "true" if positive else "false")
        node = parent
    launches = [c for c in src.nodes("call_expression") if _callee_name(src, c) == fname and not _is_in(c, func)]
    if not launches:
        return []
    out: list[tuple[int, int, str]] = []

    def add(guard: Optional[tuple[int, int, str]]) -> None:
        if guard is not None and guard not in out:
            out.append(guard)

    if flags:
        for call in launches:
            args = _template_args(src, call)
            if all(i < len(args) and args[i] == want for name, want in flags.items()
                   for i in [tparams.index(name)]):
                add(_guard_of_call(src, call))
    else:
        guards = [_guard_of_call(src, c) for c in launches]
        if all(guards):  # launched only under guards: the kernel as a whole is the fast path
            for g in guards:
                add(g)
    return out


def _is_in(node: Node, container: Optional[Node]) -> bool:
    return container is not None and container.start_byte <= node.start_byte and node.end_byte <= container.end_byte


def _text(src: Source, node: Node) -> str:
    return src.code[node.start_byte:node.end_byte].decode("utf-8", "replace")


def _function_name(src: Source, func: Node) -> str:
    decl = func.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    name = decl.child_by_field_name("declarator") if decl is not None else None
    return _text(src, name) if name is not None else ""


def _template_params(src: Source, func: Node) -> list[str]:
    tmpl = func.parent if func.parent is not None and func.parent.type == "template_declaration" else None
    if tmpl is None:
        return []
    plist = tmpl.child_by_field_name("parameters")
    names = []
    for p in plist.named_children if plist is not None else []:
        ident = [c for c in p.named_children if c.type in ("identifier", "type_identifier")]
        names.append(_text(src, ident[-1]) if ident else "")
    return names


def _callee_name(src: Source, call: Node) -> str:
    fn = call.child_by_field_name("function")
    if fn is None:
        return ""
    if fn.type == "template_function":
        fn = fn.child_by_field_name("name")
    return _text(src, fn) if fn is not None and fn.type == "identifier" else ""


def _template_args(src: Source, call: Node) -> list[str]:
    fn = call.child_by_field_name("function")
    if fn is None or fn.type != "template_function":
        return []
    args = fn.child_by_field_name("arguments")
    return [" ".join(_text(src, a).split()) for a in args.named_children] if args is not None else []


def _guard_of_call(src: Source, call: Node) -> Optional[tuple[int, int, str]]:
    """The innermost divisibility guard whose true branch holds this call, within its function."""
    node = call
    while node is not None and node.type != "function_definition":
        parent = node.parent
        if parent is not None and parent.type == "if_statement" and _is_in(node, parent.child_by_field_name("consequence")):
            cond = parent.child_by_field_name("condition")
            text = _text(src, cond)
            if _DIVISIBILITY.search(text):
                return cond.start_byte, cond.end_byte, src.raw[cond.start_byte:cond.end_byte].decode("utf-8", "replace")
            for ident in re.findall(r"[A-Za-z_]\w*", text):
                init = _bool_initializer(src, ident, parent)
                if init is not None:
                    return init
        node = parent
    return None


def _bool_initializer(src: Source, name: str, before: Node) -> Optional[tuple[int, int, str]]:
    """`[const] bool NAME = <divisibility test>;` declared in the same function before `before`."""
    func = enclosing(before, "function_definition")
    for decl in src.nodes("init_declarator", within=func):
        if decl.start_byte >= before.start_byte:
            break
        target, value = decl.child_by_field_name("declarator"), decl.child_by_field_name("value")
        if target is None or value is None or _text(src, target) != name:
            continue
        if not re.search(r"\bbool\b", _text(src, decl.parent)) or not _DIVISIBILITY.search(_text(src, value)):
            return None
        return value.start_byte, value.end_byte, src.raw[value.start_byte:value.end_byte].decode("utf-8", "replace")
    return None


def force_guard(source: str, cond_start: int, cond_end: int) -> str:
    raw = source.encode()
    return (raw[:cond_start] + b"(1)" + raw[cond_end:]).decode("utf-8")


def code_guard_text(cond: str) -> list[tuple[str, str, int]]:
    """Divisibility tests written in a guard: [(kind, axis, value)] from `N % 4 == 0`,
    `(N & 3) == 0`."""
    found = []
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*%\s*\(?\s*(\d+)\s*\)?\s*==\s*0", cond):
        found.append(("divisible", m.group(1), int(m.group(2))))
    for m in re.finditer(r"\(\s*([A-Za-z_]\w*)\s*&\s*(\d+)\s*\)\s*==\s*0", cond):
        found.append(("divisible", m.group(1), int(m.group(2)) + 1))
    return found


RunProbes = Callable[[str], dict[str, Any]]  # source -> gate dict on the probe problem
