"""Bootstrap confidence intervals for the backend benchmark (eval/bench_backend.py).

The unit of resampling is the evaluated function: a target's figures are means over its
functions, so their spread is what another sample of functions would give. Per target: a
percentile bootstrap over its functions. Overall: stratified by target (each replicate
resamples every target's functions within that target), and the overall figure of a replicate
is the mean over targets of its per-target figures, so every target weighs the same whatever
its size. Ratios are ratios of means within a replicate (never means of per-function ratios).

Per-function inputs are arrays aligned with the target's evaluated functions; a value that does
not exist for a function (no compile verdict: its file was not checked, or the host file does
not compile unmodified) is NaN and leaves that function out of that figure's denominator.
"""
from __future__ import annotations

from typing import Optional, Sequence

RESAMPLES = 2000
SEED = 0

def define_figures(modes: Sequence[str]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """figure -> (kind, inputs): "mean" = mean of one per-function array (NaNs left out);
    "ratio" = mean of the first over mean of the second."""
    figs: dict[str, tuple[str, tuple[str, ...]]] = {}
    for m in modes:
        figs[f"recall@1/{m}"] = ("mean", (f"r1/{m}",))
        figs[f"recall@5/{m}"] = ("mean", (f"r5/{m}",))
    figs["fork_adapt_aligned"] = ("mean", ("fa",))
    figs["fork_flow_aligned"] = ("mean", ("ff",))
    figs["aligned_ratio"] = ("ratio", ("fa", "ff"))
    figs["fork_adapt_compile_pass_rate"] = ("mean", ("gate_fa",))
    figs["fork_flow_compile_pass_rate"] = ("mean", ("gate_ff",))
    figs["compile_pass_ratio"] = ("ratio", ("gate_fa", "gate_ff"))
    return figs


def _figure(kind: str, arrays: list, idx):
    """The figure on resampled rows ``idx`` (shape (B, n)) -> shape (B,)."""
    import numpy as np

    def mean(a):
        x = a[idx]
        ok = ~np.isnan(x)
        cnt = ok.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(cnt > 0, np.where(ok, x, 0.0).sum(axis=1) / np.maximum(cnt, 1), np.nan)

    if kind == "mean":
        return mean(arrays[0])
    num, den = mean(arrays[0]), mean(arrays[1])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _point(kind: str, arrays: list) -> Optional[float]:
    import numpy as np

    vals = _figure(kind, arrays, np.arange(len(arrays[0]))[None, :])
    v = float(vals[0])
    return None if np.isnan(v) else v


def _interval(samples) -> Optional[list[float]]:
    import numpy as np

    s = samples[~np.isnan(samples)]
    if len(s) < 0.9 * len(samples) or not len(s):  # undefined in too many replicates to say
        return None
    return [round(float(np.percentile(s, 2.5)), 4), round(float(np.percentile(s, 97.5)), 4)]


def bootstrap(per_target: dict[str, dict[str, Sequence[float]]], figures: dict[str, tuple[str, tuple[str, ...]]],
              resamples: int = RESAMPLES, seed: int = SEED) -> dict:
    """{"targets": {T: {figure: {"value", "ci95"}}}, "overall": {figure: {"value", "ci95",
    "targets"}}, "method": ...}. ``per_target[T][name]`` is one value per evaluated function."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out: dict = {"method": f"percentile bootstrap over functions, {resamples} resamples, seed {seed}; overall = "
                           "mean over targets of each target's figure, resampled within each target",
                 "targets": {}, "overall": {}}
    reps: dict[str, dict[str, "np.ndarray"]] = {}
    for T, data in per_target.items():
        arrays = {k: np.asarray(v, dtype=float) for k, v in data.items()}
        n = len(next(iter(arrays.values()))) if arrays else 0
        if n == 0:
            continue
        idx = rng.integers(0, n, size=(resamples, n))
        out["targets"][T] = {}
        reps[T] = {}
        for name, (kind, inputs) in figures.items():
            if any(i not in arrays for i in inputs):
                continue
            arrs = [arrays[i] for i in inputs]
            samples = _figure(kind, arrs, idx)
            reps[T][name] = samples
            v = _point(kind, arrs)
            out["targets"][T][name] = {"value": None if v is None else round(v, 4), "ci95": _interval(samples)}
    for name in figures:
        have = [T for T in reps if name in reps[T] and out["targets"][T][name]["value"] is not None]
        if not have:
            continue
        point = float(np.mean([out["targets"][T][name]["value"] for T in have]))
        samples = np.mean(np.stack([reps[T][name] for T in have]), axis=0)
        out["overall"][name] = {"value": round(point, 4), "ci95": _interval(samples), "targets": have}
    return out
