"""Inputs, reference outputs and the comparison: the numeric half of the correctness stage.

Pure functions with explicit seeds and tolerances. Inputs are fresh random values per
(workload, seed) and never all zeros; bfloat16 travels as uint16 bits and reaches the
reference as float32 values that bf16 can represent.
"""
from __future__ import annotations

import inspect
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from corpora.problem import Definition, TensorSpec, Workload
from mining.gate.errors import BadInput

STORAGE = {  # dtype -> numpy dtype of the bytes on the wire
    "float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": np.uint16,
    "int32": np.int32, "int64": np.int64, "uint32": np.uint32, "int8": np.int8, "uint8": np.uint8,
}
ITEMSIZE = {k: np.dtype(v).itemsize for k, v in STORAGE.items()}
# Exact dtypes, by the definition's dtype name: bfloat16 is stored as uint16 but is a float.
INTEGER_DTYPES = frozenset({"int32", "int64", "uint32", "int8", "uint8"})


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (uint16), round to nearest even."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def shape_of(spec: TensorSpec, axes: dict[str, int]) -> tuple[int, ...]:
    return tuple(axes[d] if isinstance(d, str) else int(d) for d in (spec.shape or []))


def _bound(value: Any, axes: dict[str, int]) -> float:
    return float(axes[value]) if isinstance(value, str) else float(value)


def make_inputs(definition: Definition, workload: Workload, seed: int) -> dict[str, Any]:
    """Random inputs for one (workload, seed): {name: wire-format array or scalar}."""
    out: dict[str, Any] = {}
    for name, spec in definition.inputs.items():
        if spec.is_scalar:
            out[name] = workload.scalars[name]
            continue
        # Stable per-input stream: the same (seed, workload, name) always gives the same data.
        rng = np.random.default_rng([seed, workload.index, zlib.crc32(name.encode())])
        shape = shape_of(spec, workload.axes)
        init = workload.init.get(name, spec.init)  # a workload may override any input's distribution
        if init is not None and init.dist == "constant":
            value = np.full(shape, init.value, dtype=np.float64)
            if spec.dtype == "bfloat16":
                out[name] = bf16_round(value.astype(np.float32))
            else:
                out[name] = value.astype(STORAGE[spec.dtype])
            continue
        if spec.dtype in ("float32", "float64", "float16", "bfloat16"):
            if init is not None and init.dist == "normal":
                values = rng.normal(init.mean, init.std, size=shape)
            else:
                low = _bound(init.low, workload.axes) if init and init.low is not None else -1.0
                high = _bound(init.high, workload.axes) if init and init.high is not None else 1.0
                values = rng.uniform(low, high, size=shape)
            if spec.dtype == "bfloat16":
                out[name] = bf16_round(values.astype(np.float32))
            else:
                out[name] = values.astype(STORAGE[spec.dtype])
        else:
            info = np.iinfo(STORAGE[spec.dtype])
            low = int(_bound(init.low, workload.axes)) if init and init.low is not None else max(info.min, 1)
            high = int(_bound(init.high, workload.axes)) if init and init.high is not None else min(info.max, 100)
            if high <= low:
                raise BadInput(f"inputs.{name}.init: empty range [{low}, {high}) for {workload.label}")
            out[name] = rng.integers(low, high, size=shape, dtype=np.int64).astype(STORAGE[spec.dtype])
    return out


def reference_view(definition: Definition, inputs: dict[str, Any]) -> dict[str, Any]:
    """Wire format -> what the reference sees (bf16 bits become float32 values)."""
    view = {}
    for name, value in inputs.items():
        spec = definition.inputs[name]
        view[name] = bf16_to_f32(value) if spec.dtype == "bfloat16" and not spec.is_scalar else value
    return view


def load_reference(source: str, origin: str) -> Callable[..., Any]:
    namespace: dict[str, Any] = {"__name__": "kernel_skills_reference"}
    try:
        exec(compile(source, origin, "exec"), namespace)  # noqa: S102 - the problem's own reference
    except Exception as exc:  # noqa: BLE001
        raise BadInput(f"{origin}: reference failed to load: {type(exc).__name__}: {exc}") from None
    run = namespace.get("run")
    if not callable(run):
        raise BadInput(f"{origin}: reference defines no callable run(...)")
    return run


def run_reference(run: Callable[..., Any], definition: Definition, workload: Workload,
                  inputs: dict[str, Any], origin: str) -> dict[str, np.ndarray]:
    kwargs = {**reference_view(definition, inputs), **workload.axes}
    params = inspect.signature(run).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    try:
        result = run(**kwargs)
    except Exception as exc:  # noqa: BLE001
        raise BadInput(f"{origin}: reference raised {type(exc).__name__}: {exc} on {workload.label}") from None
    names = list(definition.outputs)
    if isinstance(result, dict):
        values = [result.get(n) for n in names]
    elif isinstance(result, (tuple, list)) and len(names) > 1:
        values = list(result)
    else:
        values = [result]
    if len(values) != len(names) or any(v is None for v in values):
        raise BadInput(f"{origin}: reference returned {len(values)} outputs, definition has {len(names)}")
    out = {}
    for name, value in zip(names, values):
        arr = np.asarray(value)
        expected = shape_of(definition.outputs[name], workload.axes)
        if arr.size != int(np.prod(expected, dtype=np.int64)):
            raise BadInput(f"{origin}: reference output {name!r} has {arr.size} elements, expected shape {expected}")
        out[name] = arr.reshape(expected)
    return out


def decode_output(raw: bytes, dtype: str, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Wire bytes -> (values as float64/int64, raw storage array for poison checks)."""
    stored = np.frombuffer(raw, dtype=STORAGE[dtype]).reshape(shape)
    values = bf16_to_f32(stored) if dtype == "bfloat16" else stored
    return values, stored


@dataclass
class Comparison:
    ok: bool
    elements: int
    wrong: int
    unwritten: int
    nan: int
    max_abs_err: float
    max_rel_err: float
    first_bad: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def compare(raw: bytes, ref: np.ndarray, dtype: str, rtol: float, atol: float) -> Comparison:
    """Compare a kernel output with the reference. NaN never passes; poison bits mean unwritten."""
    shape = ref.shape
    expected_bytes = int(np.prod(shape, dtype=np.int64)) * ITEMSIZE[dtype]
    if len(raw) != expected_bytes:
        return Comparison(False, int(np.prod(shape)), int(np.prod(shape)), 0, 0, float("inf"), float("inf"),
                          {"reason": f"output has {len(raw)} bytes, expected {expected_bytes}"})
    values, stored = decode_output(raw, dtype, shape)
    poison = np.all(stored.view(np.uint8).reshape(stored.shape + (-1,)) == 0xFF, axis=-1) if stored.size else np.zeros(shape, bool)
    got = values.astype(np.float64)
    want = ref.astype(np.float64)
    if dtype in INTEGER_DTYPES:
        # Integers are exact; -1 written on purpose is legitimate, so only count poison where ref differs.
        bad = got != want
        unwritten = poison & bad
        nan = np.zeros(shape, bool)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            bad = ~(np.abs(got - want) <= atol + rtol * np.abs(want))  # NaN compares False -> bad
        nan = np.isnan(got)
        unwritten = poison
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        finite = ~nan & np.isfinite(want) & np.isfinite(got)
        abs_err = np.abs(got - want)[finite]
        rel_err = (np.abs(got - want) / np.maximum(np.abs(want), 1e-30))[finite]
    wrong_mask = bad & ~unwritten
    first = None
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        first = {"index": list(idx), "got": _py(got[idx]), "expected": _py(want[idx]),
                 "unwritten": bool(unwritten[idx])}
    return Comparison(ok=not bad.any(), elements=int(got.size), wrong=int(wrong_mask.sum()),
                      unwritten=int(unwritten.sum()), nan=int(nan.sum()),
                      max_abs_err=float(abs_err.max()) if abs_err.size else 0.0,
                      max_rel_err=float(rel_err.max()) if rel_err.size else 0.0, first_bad=first)


def _py(x: Any) -> Any:
    f = float(x)
    return f if np.isfinite(f) else str(f)
