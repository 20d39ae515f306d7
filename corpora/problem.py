"""Load and validate a kernel problem folder (docs/problem-format.md).

A problem is data: axes, inputs, outputs, a Python reference and concrete workloads. Every
validation error names the file and the field, so a user can fix it without reading code.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from corpora import constraints as constraint_expr

DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "uint32", "int8", "uint8")
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
ITEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int32": 4, "int64": 8, "uint32": 4,
              "int8": 1, "uint8": 1}
# checked before anything is allocated: one workload's tensors together (inputs + outputs)
MAX_WORKLOAD_BYTES = int(os.environ.get("KS_MAX_WORKLOAD_BYTES", 16 << 30))

# rtol, atol by dtype; integers are exact.
DEFAULT_TOLERANCE = {
    "float32": (1e-4, 1e-5),
    "float64": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}


class ProblemError(ValueError):
    """A problem folder is malformed. The message names the file and the field."""


class Axis(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["var", "const"]
    value: Optional[int] = None
    description: Optional[str] = None

    @model_validator(mode="after")
    def _const_has_value(self) -> "Axis":
        if self.type == "const" and self.value is None:
            raise ValueError("a const axis needs an integer 'value'")
        if self.value is not None and self.value < 0:
            raise ValueError(f"axis value must be non-negative, got {self.value}")
        return self


class Init(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dist: Literal["uniform", "normal", "randint", "constant"] = "uniform"
    low: Union[float, int, str, None] = None
    high: Union[float, int, str, None] = None
    mean: float = 0.0
    std: float = 1.0
    value: Optional[float] = None  # dist "constant": every element (all-equal rows)

    @model_validator(mode="after")
    def _constant_has_value(self) -> "Init":
        if self.dist == "constant" and self.value is None:
            raise ValueError("dist 'constant' needs a numeric 'value'")
        return self


class Tolerance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rtol: float
    atol: float


class TensorSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    shape: Optional[list[Union[str, int]]] = None
    dtype: str
    description: Optional[str] = None
    init: Optional[Init] = None
    tolerance: Optional[Tolerance] = None

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, v: str) -> str:
        if v not in DTYPES:
            raise ValueError(f"unknown dtype {v!r} (known: {', '.join(DTYPES)})")
        return v

    @field_validator("shape")
    @classmethod
    def _non_negative_dims(cls, v: Optional[list[Union[str, int]]]) -> Optional[list[Union[str, int]]]:
        for d in v or []:
            if isinstance(d, int) and d < 0:
                raise ValueError(f"negative dimension {d}")
        return v

    @property
    def is_scalar(self) -> bool:
        return self.shape is None


class Definition(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(pattern=r"^[A-Za-z0-9_\-]+$")
    op_type: str
    description: str = ""
    tags: list[str] = []
    axes: dict[str, Axis]
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    constraints: list[str] = []
    tolerance: Optional[Tolerance] = None
    reference: str

    @field_validator("constraints")
    @classmethod
    def _constraints_are_expressions(cls, v: list[str]) -> list[str]:
        for i, expr in enumerate(v):
            try:
                constraint_expr.parse(expr)
            except constraint_expr.ConstraintError as exc:
                raise ValueError(f"constraint {i} {expr[:80]!r}: {exc}") from None
        return v

    @model_validator(mode="after")
    def _shapes_use_known_axes(self) -> "Definition":
        for kind, specs in (("inputs", self.inputs), ("outputs", self.outputs)):
            for name, spec in specs.items():
                if kind == "outputs" and spec.is_scalar:
                    raise ValueError(f"{kind}.{name}: outputs must have a shape")
                for dim in spec.shape or []:
                    if isinstance(dim, str) and dim not in self.axes:
                        raise ValueError(f"{kind}.{name}.shape: axis {dim!r} is not in 'axes'")
        clash = set(self.inputs) & set(self.outputs)
        if clash:
            raise ValueError(f"names used as both input and output: {sorted(clash)}")
        return self

    def tolerance_for(self, output: str) -> tuple[float, float]:
        spec = self.outputs[output]
        if spec.tolerance is not None:
            return spec.tolerance.rtol, spec.tolerance.atol
        if self.tolerance is not None:
            return self.tolerance.rtol, self.tolerance.atol
        return DEFAULT_TOLERANCE.get(spec.dtype, (0.0, 0.0))


@dataclass(frozen=True)
class Workload:
    index: int
    axes: dict[str, int]
    scalars: dict[str, float]
    tags: tuple[str, ...] = ()
    # per-input value distributions that override the definition's `init` (value-adversarial cases)
    init: dict[str, Init] = field(default_factory=dict, hash=False)
    variant: str = ""  # a case the gate derived from this workload ("large_negative", "reduced", ...)

    @property
    def label(self) -> str:
        sizes = ",".join(f"{k}={v}" for k, v in self.axes.items())
        return f"w{self.index}[{sizes}]" + (f"+{self.variant}" if self.variant else "")

    def identity(self) -> list:
        """Everything that decides this case's inputs (for cache keys)."""
        return [self.index, self.axes, self.scalars, {k: v.model_dump() for k, v in sorted(self.init.items())},
                self.variant]


class KernelSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entry: Optional[str] = None
    flags: Optional[list[str]] = None
    archs: Optional[list[str]] = None
    gpu_only: Optional[bool] = None
    carriers: Optional[list[str]] = None


class Solution(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entry: str
    kernel: str = "kernel.cu"
    flags: list[str] = ["-O3"]
    archs: list[str] = []
    gpu_only: bool = False
    carriers: list[str] = []
    kernels: dict[str, KernelSettings] = {}

    def for_file(self, filename: str) -> "Solution":
        """Settings for one kernel file, with its [kernels."file"] overrides applied."""
        over = self.kernels.get(filename)
        data = self.model_dump(exclude={"kernels"})
        data["kernel"] = filename
        if over is not None:
            data.update({k: v for k, v in over.model_dump().items() if v is not None})
        return Solution(**data)


@dataclass
class Problem:
    root: Path
    definition: Definition
    workloads: list[Workload]
    solution: Solution
    reference_source: str
    content_hash: str = field(default="")

    @property
    def name(self) -> str:
        return self.definition.name

    def kernel_path(self, kernel: Optional[Path] = None) -> Path:
        if kernel is None:
            return self.root / self.solution.kernel
        return kernel if kernel.is_absolute() or kernel.exists() else self.root / kernel


def _pydantic_message(path: Path, exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(top level)"
    return f"{path}: {where}: {err['msg']}"


def load_definition(path: Path) -> Definition:
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ProblemError(f"{path}: missing (a problem folder needs definition.json)") from None
    except json.JSONDecodeError as exc:
        raise ProblemError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise ProblemError(f"{path}: expected a JSON object")
    try:
        return Definition(**raw)
    except ValidationError as exc:
        raise ProblemError(_pydantic_message(path, exc)) from None


def _workload_from_line(obj: dict[str, Any], definition: Definition, where: str, index: int) -> Workload:
    if "workload" in obj and isinstance(obj["workload"], dict):  # FlashInfer-Trace nesting
        inner = obj["workload"]
        axes = inner.get("axes", {})
        scalars = {k: v["value"] for k, v in inner.get("inputs", {}).items()
                   if isinstance(v, dict) and v.get("type") == "scalar"}
        tags = obj.get("tags", inner.get("tags", []))
    else:
        axes, scalars, tags = obj.get("axes", {}), obj.get("scalars", {}), obj.get("tags", [])
    if not isinstance(axes, dict) or not isinstance(scalars, dict):
        raise ProblemError(f"{where}: 'axes' and 'scalars' must be objects")
    resolved: dict[str, int] = {}
    for name, axis in definition.axes.items():
        if axis.type == "const":
            if name in axes and axes[name] != axis.value:
                raise ProblemError(f"{where}: axes.{name}: const axis is {axis.value}, workload says {axes[name]}")
            resolved[name] = int(axis.value)
        else:
            if name not in axes:
                raise ProblemError(f"{where}: axes.{name}: missing value for var axis")
            value = axes[name]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ProblemError(f"{where}: axes.{name}: expected a non-negative integer, got {value!r}")
            resolved[name] = value
    unknown = set(axes) - set(definition.axes)
    if unknown:
        raise ProblemError(f"{where}: axes: unknown axis {sorted(unknown)[0]!r}")
    scalar_inputs = {n for n, s in definition.inputs.items() if s.is_scalar}
    for name in scalar_inputs:
        if name not in scalars:
            raise ProblemError(f"{where}: scalars.{name}: missing value for scalar input")
    unknown = set(scalars) - scalar_inputs
    if unknown:
        raise ProblemError(f"{where}: scalars: {sorted(unknown)[0]!r} is not a scalar input")
    for name, value in scalars.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ProblemError(f"{where}: scalars.{name}: expected a number, got {value!r}")
    init = _workload_init(obj.get("init", {}), definition, where)
    env = {**resolved, **scalars}
    for expr in definition.constraints:
        try:
            ok = constraint_expr.evaluate(constraint_expr.parse(expr), env)
        except constraint_expr.ConstraintError as exc:
            raise ProblemError(f"{where}: constraint {expr!r} cannot be evaluated: {exc}") from None
        if not ok:
            raise ProblemError(f"{where}: violates constraint {expr!r} ({env})")
    _check_sizes(definition, resolved, where)
    return Workload(index=index, axes=resolved, scalars={k: scalars[k] for k in sorted(scalars)},
                    tags=tuple(tags), init=init)


def workload_from_dict(obj: dict[str, Any], definition: Definition, where: str, index: int) -> Workload:
    """One workload line, validated against the definition (axes, scalars, init, constraints);
    ProblemError naming `where` when it is not a legal input."""
    return _workload_from_line(obj, definition, where, index)


def _workload_init(raw: Any, definition: Definition, where: str) -> dict[str, Init]:
    """A workload's `init`: {input name: distribution}, overriding the definition's per input."""
    if not isinstance(raw, dict):
        raise ProblemError(f"{where}: 'init' must be an object mapping input names to distributions")
    out: dict[str, Init] = {}
    for name, dist in raw.items():
        spec = definition.inputs.get(name)
        if spec is None or spec.is_scalar:
            raise ProblemError(f"{where}: init.{name}: not a tensor input of the definition")
        if not isinstance(dist, dict):
            raise ProblemError(f"{where}: init.{name}: expected an object like {{\"dist\": \"uniform\", ...}}")
        try:
            out[name] = Init(**dist)
        except ValidationError as exc:
            err = exc.errors()[0]
            field_ = ".".join(str(p) for p in err["loc"])
            raise ProblemError(f"{where}: init.{name}{'.' + field_ if field_ else ''}: {err['msg']}") from None
    return out


def _check_sizes(definition: Definition, axes: dict[str, int], where: str) -> None:
    """Refuse a workload whose tensors would not fit, before anything allocates them."""
    total = 0
    for kind, specs in (("inputs", definition.inputs), ("outputs", definition.outputs)):
        for name, spec in specs.items():
            n = ITEM_BYTES.get(spec.dtype, 8)
            for d in spec.shape or []:
                n *= axes[d] if isinstance(d, str) else int(d)
            total += n
            if total > MAX_WORKLOAD_BYTES:
                sizes = ", ".join(f"{k}={v}" for k, v in axes.items())
                raise ProblemError(f"{where}: {kind}.{name} brings the workload to {total / 2**30:.3g} GiB "
                                   f"({sizes}), over the {MAX_WORKLOAD_BYTES / 2**30:g} GiB limit "
                                   "(KS_MAX_WORKLOAD_BYTES)")


def load_workloads(path: Path, definition: Definition) -> list[Workload]:
    if not path.exists():
        raise ProblemError(f"{path}: missing (a problem folder needs workloads.jsonl)")
    workloads: list[Workload] = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ProblemError(f"{where}: invalid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise ProblemError(f"{where}: expected a JSON object per line")
        workloads.append(_workload_from_line(obj, definition, where, len(workloads)))
    if not workloads:
        raise ProblemError(f"{path}: no workloads")
    return workloads


def load_solution(path: Path) -> Solution:
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ProblemError(f"{path}: missing (a problem folder needs solution.toml naming the entry)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProblemError(f"{path}: invalid TOML: {exc}") from None
    try:
        return Solution(**raw)
    except ValidationError as exc:
        raise ProblemError(_pydantic_message(path, exc)) from None


def _reference_source(root: Path, definition: Definition) -> str:
    ref = definition.reference.strip()
    if re.fullmatch(r"[\w\-./]+\.py", ref):
        path = root / ref
        if not path.exists():
            raise ProblemError(f"{root / 'definition.json'}: reference: file {ref!r} not found")
        ref = path.read_text()
    if "def run" not in ref:
        raise ProblemError(f"{root / 'definition.json'}: reference: must define run(...)")
    try:
        compile(ref, str(root / "reference"), "exec")
    except SyntaxError as exc:
        raise ProblemError(f"{root / 'definition.json'}: reference: line {exc.lineno}: {exc.msg}") from None
    return ref


def load_problem(root: Path) -> Problem:
    """Load a problem folder; raise ProblemError naming the file and field on any defect."""
    root = Path(root)
    if not root.is_dir():
        raise ProblemError(f"{root}: not a problem folder (no such directory)")
    definition = load_definition(root / "definition.json")
    workloads = load_workloads(root / "workloads.jsonl", definition)
    solution = load_solution(root / "solution.toml")
    reference = _reference_source(root, definition)
    digest = hashlib.sha256()
    for name in ("definition.json", "workloads.jsonl"):
        digest.update((root / name).read_bytes())
    digest.update(reference.encode())
    return Problem(root=root, definition=definition, workloads=workloads, solution=solution,
                   reference_source=reference, content_hash=digest.hexdigest())
