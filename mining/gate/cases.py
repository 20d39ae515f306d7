"""Cases the gate derives from a problem's workloads (issue 22): value-adversarial cases, added by
default per op type, and reduced forms of `large` workloads for the CPU executor.

## Value-adversarial cases

Random U(-1, 1) inputs never reach the values where a numerically careless kernel breaks: a
softmax whose running max starts at 0 is right on them and wrong on rows whose values are all
below about -87 (every exp underflows); one that skips the max subtraction overflows on rows
above about 88. The gate therefore derives a few cases from the problem's first ordinary
workload, replacing the distribution of the inputs that decide the numerical range:

| op type | inputs changed | cases |
| --- | --- | --- |
| softmax | every floating input with 2+ dims | large_negative U(-1000, -900), large_positive U(900, 1000), all_equal (constant 3.0, exact in every float format, so a row mean is exact and the variance 0), near_limit U(-0.4, 0.4) x the dtype's max, denormal (the dtype's subnormal range) |
| norm | the first floating input shaped like an output (x) | large_negative, large_positive, all_equal (zero variance), denormal |
| attention | the first two floating inputs with 2+ dims (Q, K) | large_negative_scores (Q in U(3, 4), K in U(-4, -3): every score of a 64-wide head below -90), large_positive_scores (both in U(3, 4)), all_equal_scores (K constant) |
| any other | - | none: elementwise maps, GEMM, reductions, scans, histograms, transposes and stencils have no range-dependent control flow the defaults miss |

Values near a dtype's limits are used only where a correct kernel can represent every
intermediate (softmax subtracts the row max; a norm squares its inputs and an attention score
sums 64 products, so those would overflow in any fp32 kernel). A problem's own workloads can set
any input's distribution too (`"init": {"x": {...}}` in workloads.jsonl).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

import numpy as np

from corpora.problem import FLOAT_DTYPES, Definition, Init, ProblemError, Workload, workload_from_dict

ADVERSARIAL_VERSION = "adv-2"  # part of the gate's cache key: changing the cases recomputes results

_MAX = {"float32": float(np.finfo(np.float32).max), "float64": float(np.finfo(np.float64).max),
        "float16": float(np.finfo(np.float16).max), "bfloat16": float(np.finfo(np.float32).max) * 0.99}
_TINY = {"float32": float(np.finfo(np.float32).tiny), "float64": float(np.finfo(np.float32).tiny),
         "float16": float(np.finfo(np.float16).tiny), "bfloat16": float(np.finfo(np.float32).tiny)}


def _uniform(low: float, high: float) -> Init:
    return Init(dist="uniform", low=low, high=high)


def _range_cases(dtype: str, near_limit: bool) -> list[tuple[str, Init]]:
    cases = [("large_negative", _uniform(-1000.0, -900.0)), ("large_positive", _uniform(900.0, 1000.0)),
             ("all_equal", Init(dist="constant", value=3.0))]
    if near_limit:
        m = 0.4 * _MAX[dtype]
        cases.append(("near_limit", _uniform(-m, m)))
    t = _TINY[dtype]
    cases.append(("denormal", _uniform(-t, t)))  # every value subnormal (or zero)
    return cases


def _float_inputs(definition: Definition, min_dims: int = 2) -> list[str]:
    return [n for n, s in definition.inputs.items()
            if not s.is_scalar and s.dtype in FLOAT_DTYPES and len(s.shape or []) >= min_dims]


def value_cases(definition: Definition) -> list[tuple[str, dict[str, Init]]]:
    """[(case name, {input: distribution})] for this definition's op type; [] where none apply."""
    op = definition.op_type.lower()
    if op == "softmax":
        names = _float_inputs(definition)
        if not names:
            return []
        dtype = definition.inputs[names[0]].dtype
        return [(case, {n: init for n in names}) for case, init in _range_cases(dtype, near_limit=True)]
    if op in ("norm", "layernorm", "rmsnorm", "normalization"):
        out_shapes = [s.shape for s in definition.outputs.values()]
        names = [n for n in _float_inputs(definition) if definition.inputs[n].shape in out_shapes][:1]
        if not names:
            return []
        dtype = definition.inputs[names[0]].dtype
        return [(case, {names[0]: init}) for case, init in _range_cases(dtype, near_limit=False)]
    if op == "attention":
        names = _float_inputs(definition)[:2]
        if len(names) < 2:
            return []
        q, k = names
        return [("large_negative_scores", {q: _uniform(3.0, 4.0), k: _uniform(-4.0, -3.0)}),
                ("large_positive_scores", {q: _uniform(3.0, 4.0), k: _uniform(3.0, 4.0)}),
                ("all_equal_scores", {k: Init(dist="constant", value=0.7)})]
    return []


def adversarial_workloads(definition: Definition, workloads: list[Workload]) -> list[Workload]:
    """The value-adversarial cases, derived from the first workload that is not tagged large
    (or, failing that, the smallest)."""
    cases = value_cases(definition)
    base = _base(workloads)
    if not cases or base is None:
        return []
    return [replace(base, init={**base.init, **inits}, variant=name, tags=tuple(base.tags) + ("adversarial",))
            for name, inits in cases]


def _base(workloads: list[Workload]) -> Optional[Workload]:
    plain = [w for w in workloads if "large" not in w.tags and not w.init and not w.variant]
    if plain:
        return plain[0]
    return min(workloads, key=lambda w: int(np.prod([max(1, v) for v in w.axes.values()]))) if workloads else None


# ---------------------------------------------------------------------------------------------
# Reduced `large` workloads (CPU executor)
# ---------------------------------------------------------------------------------------------
REDUCE_BUDGET = 1 << 20  # product of the reduced workload's var axes (~1M fibers of work)
RESIDUE = 256            # a scaled inner axis keeps its value mod this (divisibility, partial tiles)


def reduce_workload(definition: Definition, w: Workload, budget: int = REDUCE_BUDGET) -> Optional[Workload]:
    """A CPU-sized form of a `large` workload that keeps its inner sizes: outer axes (never the
    last dimension of a tensor) are cut to 2, outermost first, until the product of the var
    axes fits the budget; if cutting every outer axis is not enough, the largest inner axes are
    scaled down keeping their value mod 256. For attention the query/key length counts twice
    (the work is quadratic in it). None when no reduced form satisfies the constraints."""
    var = [a for a, spec in definition.axes.items() if spec.type == "var"]
    tensors = [s.shape or [] for s in list(definition.inputs.values()) + list(definition.outputs.values())]
    inner = {shape[-1] for shape in tensors if shape and isinstance(shape[-1], str)}
    depth = {a: min((shape.index(a) for shape in tensors if a in shape), default=0) for a in var}
    quadratic = set()
    if definition.op_type.lower() == "attention":
        outs = [s.shape for s in definition.outputs.values() if s.shape and len(s.shape) >= 2]
        if outs and isinstance(outs[0][-2], str):
            quadratic.add(outs[0][-2])
    axes = dict(w.axes)

    def cost() -> int:
        c = 1
        for a in definition.axes:  # const axes are part of the work too (attention's head size)
            c *= max(1, axes[a]) ** (2 if a in quadratic else 1)
        return c

    for a in sorted((a for a in var if a not in inner and a not in quadratic), key=lambda a: depth[a]):
        if cost() <= budget:
            break
        axes[a] = min(axes[a], 2)
    out_last = {s.shape[-1] for s in definition.outputs.values() if s.shape}
    # scale the rest: a quadratic axis first, then axes that are no output's last dimension
    # (a GEMM's K), the largest first; an output's own inner size last
    for a in sorted((a for a in var if a in inner or a in quadratic),
                    key=lambda a: (a not in quadratic, a in out_last, -axes[a])):
        if cost() <= budget:
            break
        axes[a] = _scaled(a, axes, cost, budget)
    if axes == w.axes:
        return w
    line = {"axes": axes, "scalars": dict(w.scalars), "tags": [*w.tags, "reduced"],
            "init": {k: v.model_dump(exclude_none=True) for k, v in w.init.items()}}
    try:
        reduced = workload_from_dict(line, definition, f"reduced form of {w.label}", w.index)
    except ProblemError:
        return None
    return replace(reduced, variant="reduced")


def _scaled(axis: str, axes: dict[str, int], cost, budget: int) -> int:
    """The largest value <= the axis's own, with the same residue mod RESIDUE or a power of two,
    that brings the cost within the budget (1 if none does)."""
    v = axes[axis]
    r = v % RESIDUE
    same_residue = sorted({r + k * RESIDUE for k in range((v - r) // RESIDUE + 1)} - {0}, reverse=True)
    powers = [1 << e for e in range(v.bit_length() - 1, -1, -1)]
    best = 1
    for c in same_residue + powers:
        if c < 1:
            continue
        axes[axis] = c
        if cost() <= budget:
            best = c
            break
    axes[axis] = v
    return best
