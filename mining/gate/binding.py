"""Bind the entry function's parameters to a problem definition by name.

The signature is read with tree-sitter; each parameter must be an input (`const T*`), an
output (`T*`), an axis (an integer by value) or a scalar input (by value), with T matching
the dtype. Every input and output must be bound. Errors name the file, line and parameter.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from corpora.problem import Definition
from mining.gate.errors import BadInput
from corpora.code.parse import FunctionSig, Param, find_function, functions, parse_cuda, syntax_issues

C_TYPES: dict[str, tuple[str, ...]] = {
    "float32": ("float",),
    "float64": ("double",),
    "float16": ("__half", "half"),
    "bfloat16": ("__nv_bfloat16", "nv_bfloat16"),
    "int32": ("int", "int32_t", "signed int", "signed"),
    "int64": ("int64_t", "long long", "long", "long int", "long long int", "signed long long"),
    "uint32": ("unsigned", "unsigned int", "uint32_t"),
    "int8": ("int8_t", "signed char", "char"),
    "uint8": ("uint8_t", "unsigned char"),
}
INTEGER_TYPES = {"int", "int32_t", "int64_t", "long", "long int", "long long", "long long int",
                 "unsigned", "unsigned int", "uint32_t", "uint64_t", "unsigned long",
                 "unsigned long long", "size_t", "signed", "signed int", "ptrdiff_t", "short", "unsigned short"}
SCALAR_TYPES = INTEGER_TYPES | {"float", "double"}


@dataclass(frozen=True)
class Binding:
    param: Param
    role: str  # input | output | axis | scalar
    dtype: str  # the definition's dtype ("int64" for axes)


@dataclass(frozen=True)
class EntryBinding:
    entry: FunctionSig
    bindings: tuple[Binding, ...]

    def of_role(self, role: str) -> list[Binding]:
        return [b for b in self.bindings if b.role == role]


def bind_entry(source: str, path: Path, entry_name: str, definition: Definition) -> EntryBinding:
    # tree-sitter-cuda does not know every CUDA spelling (e.g. `__align__(n)` in a declaration);
    # nvcc is the judge of syntax, so parse errors only matter when they hide the entry.
    tree = parse_cuda(source)
    entry = find_function(tree, entry_name)
    if entry is None:
        issues = syntax_issues(tree, limit=1)
        if issues:
            i = issues[0]
            raise BadInput(f"{path}:{i.line}:{i.column}: entry {entry_name!r} not found; "
                           f"tree-sitter could not parse near {i.snippet!r}")
        hosts = [f.name for f in functions(tree) if not f.is_kernel]
        raise BadInput(f"{path}: entry function {entry_name!r} (solution.toml) not found"
                       + (f"; host functions here: {', '.join(hosts)}" if hosts else ""))
    broken = [i for i in syntax_issues(tree, limit=50) if entry.line <= i.line <= entry.body_line]
    if broken:
        i = broken[0]
        raise BadInput(f"{path}:{i.line}:{i.column}: tree-sitter could not parse the signature of "
                       f"{entry_name!r} near {i.snippet!r}")
    if entry.is_kernel:
        raise BadInput(f"{path}:{entry.line}: entry {entry_name!r} is a __global__ kernel; "
                       "the entry must be a host function that launches it")
    bindings: list[Binding] = []
    known = sorted(list(definition.inputs) + list(definition.outputs) + list(definition.axes))
    for p in entry.params:
        where = f"{path}:{p.line}: parameter {p.name!r} of {entry_name}"
        if p.name in definition.outputs:
            spec = definition.outputs[p.name]
            _check_pointer(p, spec.dtype, where, const_ok=False)
            bindings.append(Binding(p, "output", spec.dtype))
        elif p.name in definition.inputs:
            spec = definition.inputs[p.name]
            if spec.is_scalar:
                if p.is_pointer or p.base_type not in SCALAR_TYPES | set(C_TYPES.get(spec.dtype, ())):
                    raise BadInput(f"{where}: scalar input {spec.dtype} must be passed by value, got {p.base_type}{'*' * p.pointer_depth}")
                bindings.append(Binding(p, "scalar", spec.dtype))
            else:
                _check_pointer(p, spec.dtype, where, const_ok=True)
                if not p.const:
                    raise BadInput(f"{where}: input must be 'const {C_TYPES[spec.dtype][0]}*'")
                bindings.append(Binding(p, "input", spec.dtype))
        elif p.name in definition.axes:
            if p.is_pointer or p.base_type not in INTEGER_TYPES:
                raise BadInput(f"{where}: axis must be an integer passed by value, got {p.base_type}{'*' * p.pointer_depth}")
            bindings.append(Binding(p, "axis", "int64"))
        else:
            raise BadInput(f"{where} binds to no input, output, axis or scalar of the definition "
                           f"(have: {', '.join(known)})")
    bound = {b.param.name for b in bindings}
    missing = [n for n in list(definition.inputs) + list(definition.outputs) if n not in bound]
    if missing:
        raise BadInput(f"{path}:{entry.line}: entry {entry_name} has no parameter for {', '.join(missing)}")
    return EntryBinding(entry, tuple(bindings))


def _check_pointer(p: Param, dtype: str, where: str, const_ok: bool) -> None:
    if p.pointer_depth != 1:
        raise BadInput(f"{where}: expected a pointer to {C_TYPES[dtype][0]}")
    if p.base_type not in C_TYPES[dtype]:
        raise BadInput(f"{where}: element type {p.base_type} does not match dtype {dtype} "
                       f"(expected {' or '.join(C_TYPES[dtype])})")
    if p.const and not const_ok:
        raise BadInput(f"{where}: an output must not be const")
