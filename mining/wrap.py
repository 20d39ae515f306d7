"""`skills wrap KERNEL.cu [--kernelbench PROBLEM.py]`: an existing kernel file -> a problem folder.

    from mining.wrap import wrap
    report = wrap(Path("my_kernel.cu"), Path("my_problem"), kernelbench=Path("1_Square_matmul.py"))

What is read (tree-sitter, `corpora/code/parse.py`): the `__global__` signatures, host functions and
their launch sites (`k<<<grid, block[, smem]>>>(args)`). The entry of the problem is, in order:

1. a host function taking ``torch::Tensor`` arguments (a KernelBench / load_inline solution):
   translated into a plain host shim (``X.data_ptr<T>()`` -> the pointer, ``X.size(i)`` -> the
   axis of that dimension, output allocation and ``return`` dropped, TORCH_CHECKs dropped);
2. a plain host function that launches a kernel: called from a shim in the definition's names;
3. otherwise the first (or ``--kernel``) ``__global__``: a shim launches it 1-D over its first
   integer parameter, for the user to check.

The definition comes from the KernelBench problem when given (``Model``, ``get_inputs``,
``get_init_inputs``: evaluated only in a child process under ``run_limited``, with a timeout;
the reference calls the same ``Model`` with the problem's state passed as inputs), else from
the entry's parameters with guessed 1-D shapes and a reference to write. The folder is written
to a temporary sibling and renamed into place (nothing half-written); then the gate runs and the
report lists what is still missing.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from tree_sitter import Node

from mining.gate.sandbox import isolation, isolation_problem, run_limited
from corpora.code.parse import FunctionSig, functions, parse_cuda, syntax_issues, text, walk

PROBE = Path(__file__).with_name("kernelbench_probe.py")
C_TYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "float64": "double",
           "int32": "int", "int64": "int64_t", "uint8": "uint8_t", "int8": "int8_t", "uint32": "unsigned"}
DTYPE_OF = {"float": "float32", "double": "float64", "__half": "float16", "half": "float16",
            "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16", "int": "int32", "int32_t": "int32",
            "unsigned": "uint32", "uint32_t": "uint32", "unsigned int": "uint32", "int64_t": "int64",
            "long long": "int64", "long": "int64", "int8_t": "int8", "uint8_t": "uint8", "char": "int8",
            "unsigned char": "uint8"}
INT_TYPES = {"int", "int32_t", "int64_t", "long", "long long", "unsigned", "unsigned int", "size_t", "uint32_t",
             "int64", "unsigned long", "unsigned long long"}
TORCH_INCLUDE = re.compile(r"(?m)^[ \t]*#[ \t]*include[ \t]*[<\"](torch|ATen|c10|pybind11)/[^>\"]*[>\"][^\n]*\n")
CPU_MAX_ELEMS = 1 << 16


class WrapError(Exception):
    """Bad input: the message names the file and what is missing."""


@dataclass
class WrapReport:
    out: str
    entry: str
    entry_kind: str  # torch_host | host | kernel
    kernels: list[str]
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    gate: dict[str, Any] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return not self.missing and self.gate.get("passed", False)

    def to_dict(self) -> dict[str, Any]:
        return {"out": self.out, "entry": self.entry, "entry_kind": self.entry_kind, "kernels": self.kernels,
                "missing": self.missing, "notes": self.notes, "gate": self.gate, "complete": self.complete}


# --------------------------------------------------------------------------- KernelBench
def read_kernelbench(path: Path, timeout_s: float = 120.0, trust: bool = False) -> dict[str, Any]:
    """The problem's inputs/outputs/state/constants, from a sandboxed child process (the file is
    untrusted Python: without a sandbox it is refused unless the user said --trust, as the gate does)."""
    if not path.is_file():
        raise WrapError(f"{path}: no such file")
    if not trust and isolation() is None:
        raise WrapError(f"{path}: no sandbox ({isolation_problem()}); refusing to run this KernelBench file "
                        "(install bubblewrap, or pass --trust to run it without isolation)")
    # the sandbox may run the child as another user: it reads a copy in a folder of its own
    with tempfile.TemporaryDirectory(prefix="ks-kernelbench-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        copy = work / path.name
        shutil.copyfile(path, copy)
        os.chmod(copy, 0o644)
        res = run_limited([sys.executable, "-I", str(PROBE), str(copy)], cwd=work, timeout_s=timeout_s,
                          mem_mb=8192, readable=[work, PROBE])
    if res.timed_out:
        raise WrapError(f"{path}: evaluating Model / get_inputs took longer than {timeout_s:.0f}s")
    if res.mem_exceeded:
        raise WrapError(f"{path}: evaluating Model / get_inputs exceeded the memory limit")
    line = next((ln for ln in reversed(res.stdout.strip().splitlines()) if ln.startswith("{")), "")
    try:
        info = json.loads(line) if line else {}
    except json.JSONDecodeError:
        info = {}
    if "error" in info:
        raise WrapError(f"{path}: {info['error']}")
    if not info or res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise WrapError(f"{path}: could not be evaluated ({last[:200]})")
    if not info["outputs"]:
        raise WrapError(f"{path}: forward returns nothing")
    return info


def _cpu_sizes(values: dict[str, int], shapes: list[list] = ()) -> dict[str, int]:
    """A CPU-sized value per axis: a sixteenth of the GPU size within [16, 128] (kept distinct where
    the GPU sizes differ, multiples of 16 where they are), then halved until every tensor is small."""
    out = {}
    for name, v in values.items():
        if v <= 64:
            out[name] = v
            continue
        c = min(128, max(16, v // 16))
        out[name] = c - c % 16 if v % 16 == 0 else c
    for _ in range(16):
        big = [sh for sh in shapes if _prod(out.get(d, d) if isinstance(d, str) else d for d in sh) > CPU_MAX_ELEMS]
        if not big:
            break
        axis = max((d for d in big[0] if isinstance(d, str) and d in out), key=lambda d: out[d], default=None)
        if axis is None or out[axis] <= 8:
            break
        half = out[axis] // 2
        out[axis] = half - half % 8 if half >= 16 and values[axis] % 8 == 0 else half
    return out


def definition_from_kernelbench(info: dict[str, Any], name: str, problem_file: str) -> tuple[dict, list[dict], list[str]]:
    """(definition, workloads, notes) from a probed KernelBench problem."""
    notes: list[str] = []
    consts = {k: v for k, v in info.get("constants", {}).items() if v > 1}
    axis_of: dict[int, str] = {}
    axes: dict[str, dict] = {}
    fixed: set[str] = set()

    def axis(value: int, const: bool) -> Any:
        if value == 1:
            return 1
        if value not in axis_of:
            cand = [k for k, v in consts.items() if v == value and re.fullmatch(r"[A-Za-z_]\w*", k)]
            nm = cand[0] if cand else f"D{value}"
            while nm in axes:
                nm += "_"
            axis_of[value] = nm
            axes[nm] = {"type": "var"}
        nm = axis_of[value]
        if const:
            fixed.add(nm)
        return nm

    inputs: dict[str, dict] = {}
    scalars: dict[str, Any] = {}
    for pname, spec in zip(info["forward_params"], info["inputs"]):
        if spec["kind"] == "tensor":
            inputs[pname] = {"shape": [axis(s, False) for s in spec["shape"]], "dtype": spec["dtype"]}
        else:
            inputs[pname] = {"shape": None, "dtype": spec["dtype"]}
            scalars[pname] = spec["value"]
    state_names = {}
    for st in info.get("state", []):
        nm = "state_" + re.sub(r"\W", "_", st["name"])
        state_names[nm] = st["name"]
        # the model's parameters are made from get_init_inputs: their sizes cannot be scaled
        inputs[nm] = {"shape": [axis(s, True) for s in st["shape"]], "dtype": st["dtype"]}
    input_axes = {a for spec in inputs.values() for a in (spec["shape"] or []) if isinstance(a, str)}
    outputs = {}
    for i, spec in enumerate(info["outputs"]):
        outputs["out" if len(info["outputs"]) == 1 else f"out{i}"] = {
            "shape": [axis(s, False) for s in spec["shape"]], "dtype": spec["dtype"]}
    derived = {a for spec in outputs.values() for a in spec["shape"] if isinstance(a, str)} - input_axes
    if derived:
        fixed |= derived | input_axes
        notes.append(f"output sizes {sorted(derived)} do not appear among the input sizes: every axis is kept at "
                     "the problem's size (no CPU-sized workload can be derived)")
    if fixed:
        notes.append(f"axes fixed at the problem's size (model state or derived outputs): {sorted(fixed)}")
    gpu_sizes = {nm: v for v, nm in axis_of.items()}
    shapes = [spec["shape"] for spec in list(inputs.values()) + list(outputs.values()) if spec["shape"]]
    cpu = _cpu_sizes({k: v for k, v in gpu_sizes.items() if k not in fixed}, shapes)
    cpu.update({k: gpu_sizes[k] for k in fixed})
    definition = {
        "name": name, "op_type": "kernelbench",
        "description": f"KernelBench problem {problem_file} (Model.forward); reference = the problem's Model on CPU",
        "tags": ["kernelbench"], "axes": axes, "inputs": inputs, "outputs": outputs,
        "tolerance": {"rtol": 1e-3, "atol": 1e-3}, "reference": "reference.py",
        "kernelbench": {"file": problem_file, "init_inputs": info.get("init_inputs", []),
                        "forward_params": info["forward_params"], "state": state_names},
    }
    workloads = []
    if cpu != gpu_sizes:
        workloads.append({"axes": cpu, "tags": ["cpu"], **({"scalars": scalars} if scalars else {})})
    workloads.append({"axes": gpu_sizes, "tags": ["large"] if cpu != gpu_sizes else [],
                      **({"scalars": scalars} if scalars else {})})
    elems = max((_prod([cpu.get(a, a) if isinstance(a, str) else a for a in s["shape"] or []])
                 for s in list(inputs.values()) + list(outputs.values())), default=0)
    if elems > CPU_MAX_ELEMS * 16:
        notes.append(f"the smallest workload has tensors of {elems} elements: slow on the CPU executor")
    return definition, workloads, notes


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= int(x)
    return p


KB_REFERENCE = '''"""Reference: the KernelBench problem's Model on the CPU (written by `skills wrap` from {file};
the problem's source is embedded below so the reference does not depend on where it runs)."""
import types

import numpy as np
import torch

PROBLEM_SOURCE = {source}
INIT_INPUTS = {init}
FORWARD_PARAMS = {params}
STATE = {state}  # definition input name -> the model's state_dict key
_MODEL = []


def _model():
    if not _MODEL:
        mod = types.ModuleType("kernelbench_problem")
        exec(compile(PROBLEM_SOURCE, "{file}", "exec"), mod.__dict__)
        _MODEL.append(mod.Model(*INIT_INPUTS).eval())
    return _MODEL[0]


def run(**kw):
    model = _model()
    if STATE:
        model.load_state_dict({{orig: torch.from_numpy(np.ascontiguousarray(kw[name])) for name, orig in STATE.items()}})
    args = [torch.from_numpy(np.ascontiguousarray(kw[n])) if isinstance(kw[n], np.ndarray) else kw[n]
            for n in FORWARD_PARAMS]
    with torch.no_grad():
        out = model(*args)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    res = tuple(o.detach().float().numpy() if o.dtype == torch.bfloat16 else o.detach().numpy() for o in outs)
    return res if len(res) > 1 else res[0]
'''

TODO_REFERENCE = '''"""Reference for {name}: write `run` (numpy, or torch on the CPU) -- `skills wrap` cannot know
what the kernel computes. `run` receives every input (numpy arrays, scalars) and axis by name and
returns the output(s): {outputs}."""
import numpy as np


def run({params}):
    raise NotImplementedError("reference.py: write the reference computation of {name}")
'''


# --------------------------------------------------------------------------- reading the .cu
@dataclass
class Launch:
    kernel: str
    config: list[str]
    args: list[Node]
    node: Node


def launches(root: Node) -> list[Launch]:
    out = []
    for n in walk(root):
        if n.type == "call_expression" and any(c.type == "kernel_call_syntax" for c in n.children):
            syntax = next(c for c in n.children if c.type == "kernel_call_syntax")
            fn = n.child_by_field_name("function")
            args = n.child_by_field_name("arguments")
            out.append(Launch(text(fn) if fn is not None else "", [text(c) for c in syntax.named_children],
                              [c for c in (args.named_children if args is not None else []) if c.type != "comment"], n))
    return out


def _torch_param(fn_node: Node) -> list[tuple[str, bool]]:
    """(name, is_tensor) for each parameter of a host function."""
    decl = next((d for d in walk(fn_node) if d.type == "function_declarator"), None)
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    out = []
    for p in (plist.named_children if plist is not None else []):
        if p.type != "parameter_declaration":
            continue
        d = p.child_by_field_name("declarator")
        while d is not None and d.type != "identifier":
            d = d.child_by_field_name("declarator") or next((c for c in d.named_children if c.type == "identifier"), None)
        ty = text(p.child_by_field_name("type") or p)
        out.append((text(d) if d is not None else "", bool(re.search(r"\b(torch|at)::Tensor\b|\bTensor\b", ty))))
    return out


def _func_node(tree, f: FunctionSig) -> Optional[Node]:
    return next((n for n in walk(tree.root_node) if n.type == "function_definition" and n.start_byte == f.start_byte), None)


# --------------------------------------------------------------------------- shims
def _c_param(name: str, spec: dict, output: bool) -> str:
    ty = C_TYPES[spec["dtype"]]
    if spec.get("shape") is None:
        return f"{ty} {name}"
    return f"{ty}* {name}" if output else f"const {ty}* {name}"


def _signature(entry: str, definition: dict) -> str:
    params = [_c_param(n, s, False) for n, s in definition["inputs"].items()]
    params += [_c_param(n, s, True) for n, s in definition["outputs"].items()]
    params += [f"int {a}" for a in definition["axes"]]
    return f"void {entry}({', '.join(params)})"


def torch_shim(src: str, fn: Node, definition: dict, entry: str) -> tuple[str, list[str]]:
    """Translate a torch host function into a plain host entry; (shim, what could not be translated)."""
    missing: list[str] = []
    params = _torch_param(fn)
    tensors = [n for n, is_t in params if is_t]
    in_names = [n for n, s in definition["inputs"].items() if not n.startswith("state_")]
    scalar_params = [n for n, is_t in params if not is_t]
    mapping: dict[str, str] = {}
    for i, t in enumerate(tensors):
        if i < len(in_names):
            mapping[t] = in_names[i]
    body = fn.child_by_field_name("body")
    ret = [text(c.named_children[0]) for c in walk(body) if c.type == "return_statement" and c.named_children]
    outs = list(definition["outputs"])
    for i, r in enumerate(ret[:1]):
        m = re.fullmatch(r"\s*(\w+)\s*", r)
        if m:
            mapping[m.group(1)] = outs[0]
        elif r.strip().startswith("{"):
            for j, part in enumerate(x.strip() for x in r.strip("{} ").split(",")):
                if j < len(outs) and re.fullmatch(r"\w+", part):
                    mapping[part] = outs[j]
    shapes = {**{n: s["shape"] for n, s in definition["inputs"].items()},
              **{n: s["shape"] for n, s in definition["outputs"].items()}}

    def dim(defname: str, idx: int) -> str:
        shape = shapes.get(defname) or []
        if -len(shape) <= idx < len(shape):
            return str(shape[idx])
        return ""

    lines_out = []
    axes = set(definition["axes"])
    for stmt in body.named_children:
        s = text(stmt)
        if stmt.type == "comment":
            lines_out.append(s)
            continue
        if stmt.type == "return_statement" or re.match(r"\s*(TORCH_CHECK|AT_ASSERT|CHECK_\w+)\b", s):
            continue
        if stmt.type == "declaration" and re.search(r"\b(torch|at)::(empty|zeros|ones|full|empty_like|zeros_like|"
                                                    r"ones_like)\b|\.new_empty|\.new_zeros", s):
            declared = [text(d) for d in walk(stmt) if d.type == "identifier" and d.parent is not None
                        and d.parent.type == "init_declarator" and d.parent.child_by_field_name("declarator") == d]
            if any(d in mapping for d in declared):
                continue  # the output is allocated by the harness
        for tname, dname in mapping.items():
            s = re.sub(rf"\(\s*[\w:\s]+\*\s*\)\s*{tname}\s*\.\s*data_ptr\s*(<[^>]*>)?\s*\(\s*\)", dname, s)
            s = re.sub(rf"\b{tname}\s*\.\s*(data_ptr|data|mutable_data_ptr|const_data_ptr)\s*(<[^>]*>)?\s*\(\s*\)", dname, s)
            s = re.sub(rf"\b{tname}\s*\.\s*size\s*\(\s*(-?\d+)\s*\)", lambda m: dim(dname, int(m.group(1))) or m.group(0), s)
            s = re.sub(rf"\b{tname}\s*\.\s*sizes\s*\(\s*\)\s*\[\s*(-?\d+)\s*\]",
                       lambda m: dim(dname, int(m.group(1))) or m.group(0), s)
            s = re.sub(rf"\b{tname}\s*\.\s*numel\s*\(\s*\)",
                       "(" + "*".join(f"(long long){d}" for d in (shapes.get(dname) or [1])) + ")", s)
        # a local that restates an axis (`int M = M;`) would shadow the parameter: drop it
        m = re.fullmatch(r"\s*(?:const\s+)?(?:int|int64_t|long|auto|size_t|long long|unsigned)\s+(\w+)\s*=\s*"
                         r"\(?\s*(?:\(\w+\)\s*)?(\w+)\s*\)?\s*;\s*", s)
        if m and m.group(1) == m.group(2) and m.group(1) in axes:
            continue
        lines_out.append(s)
    shim_body = "\n    ".join(lines_out)
    for ln in lines_out:
        if re.search(r"\b(torch|at|c10)::|\.options\(\)|\bTensor\b|\.\s*(size|data_ptr|stride|numel)\s*\(", ln):
            missing.append(f"shim: `{ln.strip()[:100]}` still uses torch: complete it by hand")
    if scalar_params:
        names = set(definition["inputs"]) | axes
        unbound = [p for p in scalar_params if p not in names]
        if unbound:
            missing.append(f"shim: the host function's non-tensor parameters {unbound} bind to nothing in the "
                           "definition: replace them in the shim")
    fname = next((text(d.child_by_field_name("declarator")) for d in walk(fn) if d.type == "function_declarator"), "")
    shim = (f"// ---- entry shim written by `skills wrap` from the host function {fname}\n"
            f"{_signature(entry, definition)} {{\n    {shim_body}\n}}\n")
    return shim, missing


def call_shim(host: FunctionSig, definition: dict, entry: str) -> tuple[str, list[str]]:
    """A shim in the definition's names that calls the user's plain host function."""
    missing = []
    ins = [n for n in definition["inputs"] if definition["inputs"][n].get("shape") is not None]
    outs = list(definition["outputs"])
    args = []
    for p in host.params:
        if p.is_pointer and p.const and ins:
            args.append(ins.pop(0))
        elif p.is_pointer and outs:
            args.append(outs.pop(0))
        elif p.name in definition["axes"] or p.name in definition["inputs"]:
            args.append(p.name)
        else:
            match = next((a for a in definition["axes"] if a.lower() == p.name.lower()), None)
            args.append(match or p.name)
            if match is None:
                missing.append(f"shim: argument {p.name!r} of {host.name} binds to nothing in the definition")
    shim = (f"// ---- entry shim written by `skills wrap`: the definition's names -> {host.name}\n"
            f"{_signature(entry, definition)} {{\n    {host.name}({', '.join(args)});\n}}\n")
    return shim, missing


def kernel_shim(kernel: FunctionSig, entry: str) -> tuple[str, list[str]]:
    ints = [p for p in kernel.params if not p.is_pointer and p.base_type in INT_TYPES]
    n = ints[0].name if ints else "n"
    params = ", ".join(("const " if p.const and p.is_pointer else "") + p.base_type + ("*" * p.pointer_depth) + " "
                       + p.name for p in kernel.params)
    if not ints:
        params += (", " if params else "") + "int n"
    args = ", ".join(p.name for p in kernel.params)
    shim = (f"// ---- entry shim written by `skills wrap`: CHECK the launch configuration (1-D over {n})\n"
            f"void {entry}({params}) {{\n    {kernel.name}<<<({n} + 255) / 256, 256>>>({args});\n}}\n")
    return shim, [f"shim: the launch configuration of {kernel.name} was guessed (1-D, 256 threads over {n}): check it"]


def definition_from_params(params, name: str) -> tuple[dict, list[dict], list[str]]:
    """A definition from a plain entry's parameters, with guessed 1-D shapes."""
    ints = [p for p in params if not p.is_pointer and p.base_type in INT_TYPES]
    axis = ints[0].name if ints else "n"
    missing = [f"definition.json: shapes guessed as [{axis}] for every array: check them"]
    inputs, outputs, axes = {}, {}, {a.name: {"type": "var"} for a in ints} or {axis: {"type": "var"}}
    for p in params:
        dt = DTYPE_OF.get(p.base_type)
        if p.is_pointer:
            if dt is None:
                raise WrapError(f"parameter {p.name}: element type {p.base_type} has no dtype in the problem format")
            (inputs if p.const else outputs)[p.name] = {"shape": [axis], "dtype": dt}
        elif p.base_type not in INT_TYPES:
            if dt is None:
                raise WrapError(f"parameter {p.name}: type {p.base_type} has no dtype in the problem format")
            inputs[p.name] = {"shape": None, "dtype": dt}
    if not outputs:
        raise WrapError("no output: the entry has no non-const pointer parameter")
    definition = {"name": name, "op_type": "elementwise", "description": f"wrapped from {name}.cu: describe it",
                  "tags": ["wrapped"], "axes": axes, "inputs": inputs, "outputs": outputs,
                  "reference": "reference.py"}
    missing.append("definition.json: op_type guessed as elementwise: set the real family")
    cpu = {a: 1000 if len(axes) == 1 else 64 for a in axes}
    large = {a: 1 << 20 if len(axes) == 1 else 1024 for a in axes}
    scalars = {n: 1.0 for n, s in inputs.items() if s["shape"] is None}
    workloads = [{"axes": cpu, "tags": ["cpu"], **({"scalars": scalars} if scalars else {})},
                 {"axes": large, "tags": ["large"], **({"scalars": scalars} if scalars else {})}]
    missing.append("workloads.jsonl: sizes guessed: check them")
    return definition, workloads, missing


# --------------------------------------------------------------------------- wrap
def wrap(kernel_file: Path, out: Optional[Path] = None, kernelbench: Optional[Path] = None,
         kernel_name: Optional[str] = None, name: Optional[str] = None, executor: str = "auto",
         run_gate_after: bool = True, force: bool = False, store: Optional[Path] = None,
         timeout_s: float = 120.0, trust: bool = False) -> WrapReport:
    kernel_file = Path(kernel_file)
    if not kernel_file.is_file():
        raise WrapError(f"{kernel_file}: no such file")
    try:
        raw = kernel_file.read_text()
    except UnicodeDecodeError:
        raise WrapError(f"{kernel_file}: not a text file") from None
    name = name or re.sub(r"[^A-Za-z0-9_\-]", "_", (kernelbench or kernel_file).stem)
    out = Path(out) if out is not None else Path(name)
    if out.exists() and not force:
        raise WrapError(f"{out}: already exists (pass --force to replace it)")
    tree = parse_cuda(raw)
    issues = syntax_issues(tree, limit=1)
    funcs = functions(tree)
    kernels = [f for f in funcs if f.is_kernel]
    if not kernels:
        why = f" (syntax error at line {issues[0].line})" if issues else ""
        raise WrapError(f"{kernel_file}: no __global__ function found{why}")
    if kernel_name and kernel_name not in {k.name for k in kernels}:
        raise WrapError(f"{kernel_file}: no __global__ function named {kernel_name!r} "
                        f"(found: {', '.join(k.name for k in kernels)})")
    notes: list[str] = []
    missing: list[str] = []
    hosts = [f for f in funcs if not f.is_kernel and "__device__" not in _head(raw, f)]
    host_nodes = {f.name: _func_node(tree, f) for f in hosts}
    torch_hosts = [f for f in hosts if any(t for _, t in _torch_param(host_nodes[f.name]))
                   and launches(host_nodes[f.name])]
    plain_hosts = [f for f in hosts if f not in torch_hosts and launches(host_nodes[f.name])
                   and not any(t for _, t in _torch_param(host_nodes[f.name]))]
    entry = "ks_entry"
    if kernelbench is not None:
        info = read_kernelbench(Path(kernelbench), timeout_s, trust=trust)
        definition, workloads, kb_notes = definition_from_kernelbench(info, name, Path(kernelbench).name)
        notes += kb_notes
        notes.append("definition.json: op_type is 'kernelbench': set the family (gemm, softmax, ...) for skill scoping")
    elif plain_hosts:
        entry_fn = plain_hosts[0]
        definition, workloads, m = definition_from_params(entry_fn.params, name)
        missing += m
        entry = entry_fn.name
    else:
        k = next(k for k in kernels if k.name == kernel_name) if kernel_name else kernels[0]
        definition, workloads, m = definition_from_params(k.params, name)
        missing += m

    # the kernel file: the user's code without torch includes / torch host functions / pybind module
    cut = sorted([(host_nodes[f.name].start_byte, host_nodes[f.name].end_byte) for f in hosts
                  if any(t for _, t in _torch_param(host_nodes[f.name]))], reverse=True)
    body = raw.encode()
    for s, e in cut:
        body = body[:s] + b"// (torch host function moved into the entry shim below)\n" + body[e:]
    code = TORCH_INCLUDE.sub("", body.decode())
    code = _drop_pybind(code)
    if "#include <cuda_runtime.h>" not in code:
        code = "#include <cuda_runtime.h>\n" + code
    dtypes = {s["dtype"] for s in list(definition["inputs"].values()) + list(definition["outputs"].values())}
    if "float16" in dtypes and "cuda_fp16.h" not in code:
        code = "#include <cuda_fp16.h>\n" + code
    if "bfloat16" in dtypes and "cuda_bf16.h" not in code:
        code = "#include <cuda_bf16.h>\n" + code

    if kernelbench is not None:
        if torch_hosts:
            f = torch_hosts[0]
            shim, m = torch_shim(raw, host_nodes[f.name], definition, entry)
            notes.append(f"entry shim translated from the torch host function {f.name}")
        elif plain_hosts:
            shim, m = call_shim(plain_hosts[0], definition, entry)
            notes.append(f"entry shim calls the host function {plain_hosts[0].name}")
        else:
            k = next(k for k in kernels if k.name == kernel_name) if kernel_name else kernels[0]
            shim, m = _kb_kernel_shim(k, definition, entry)
        missing += m
        kb = definition["kernelbench"]
        reference = KB_REFERENCE.format(file=Path(kernelbench).name, source=repr(Path(kernelbench).read_text()),
                                        init=repr(kb["init_inputs"]), params=repr(kb["forward_params"]),
                                        state=repr(kb["state"]))
    elif plain_hosts:
        shim = ""
        notes.append(f"entry: the host function {entry} (its parameter names are the definition's)")
        reference = TODO_REFERENCE.format(name=name, outputs=", ".join(definition["outputs"]),
                                          params=", ".join(list(definition["inputs"]) + list(definition["axes"])))
        missing.append("reference.py: write run()")
    else:
        k = next(k for k in kernels if k.name == kernel_name) if kernel_name else kernels[0]
        shim, m = kernel_shim(k, entry)
        missing += m
        reference = TODO_REFERENCE.format(name=name, outputs=", ".join(definition["outputs"]),
                                          params=", ".join(list(definition["inputs"]) + list(definition["axes"])))
        missing.append("reference.py: write run()")
    kernel_text = code.rstrip() + "\n\n" + shim if shim else code
    solution = f'entry = "{entry}"\nflags = ["-O3"]\n'
    _write_atomically(out, {
        "definition.json": json.dumps(definition, indent=2) + "\n",
        "workloads.jsonl": "".join(json.dumps(w) + "\n" for w in workloads),
        "solution.toml": solution,
        "reference.py": reference,
        "kernel.cu": kernel_text,
    }, force)
    report = WrapReport(out=str(out), entry=entry, entry_kind="torch_host" if torch_hosts and kernelbench
                        else "host" if plain_hosts else "kernel", kernels=[k.name for k in kernels],
                        missing=missing, notes=notes)
    if run_gate_after:
        report.gate = _gate(out, executor, store)
        if not report.gate.get("passed"):
            report.missing.append(f"gate: {report.gate.get('verdict', 'fail')}: {report.gate.get('reason', '')[:300]}")
    return report


def _kb_kernel_shim(k: FunctionSig, definition: dict, entry: str) -> tuple[str, list[str]]:
    """KernelBench problem + a .cu with only kernels: launch the kernel with the definition's names."""
    ins = [n for n, s in definition["inputs"].items() if s.get("shape") is not None]
    outs = list(definition["outputs"])
    axes = list(definition["axes"])
    args, missing = [], []
    for p in k.params:
        if p.is_pointer and p.const and ins:
            args.append(ins.pop(0))
        elif p.is_pointer and outs:
            args.append(outs.pop(0))
        elif p.is_pointer and ins:
            args.append(ins.pop(0))
        elif p.name in definition["axes"] or p.name in definition["inputs"]:
            args.append(p.name)
        else:
            args.append(axes[0] if axes else "1")
            missing.append(f"shim: argument {p.name!r} of {k.name} guessed as {args[-1]}: check it")
    first = next(iter(definition["outputs"].values()))
    n = "*".join(f"(long long){d}" for d in first["shape"]) or "1"
    shim = (f"// ---- entry shim written by `skills wrap`: CHECK the launch configuration (1-D over the output)\n"
            f"{_signature(entry, definition)} {{\n    long long n = {n};\n"
            f"    {k.name}<<<(unsigned)((n + 255) / 256), 256>>>({', '.join(args)});\n}}\n")
    return shim, missing + [f"shim: the launch configuration of {k.name} was guessed (1-D over the output): check it"]


def _drop_pybind(code: str) -> str:
    """Remove `PYBIND11_MODULE(...) { ... }` blocks (braces matched)."""
    while (i := code.find("PYBIND11_MODULE")) >= 0:
        j = code.find("{", i)
        if j < 0:
            return code[:i]
        depth, k = 0, j
        while k < len(code):
            depth += {"{": 1, "}": -1}.get(code[k], 0)
            if depth == 0:
                break
            k += 1
        code = code[:i] + code[k + 1:]
    return code


def _head(raw: str, f: FunctionSig) -> str:
    return raw.encode()[f.start_byte:f.end_byte].decode("utf-8", "replace").split("{", 1)[0]


def _write_atomically(out: Path, files: dict[str, str], force: bool) -> None:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for rel, content in files.items():
            (tmp / rel).write_text(content)
        if out.exists():
            if not force:
                raise WrapError(f"{out}: already exists (pass --force to replace it)")
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.rename(out, old / "x")
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _gate(out: Path, executor: str, store: Optional[Path]) -> dict[str, Any]:
    from corpora.problem import ProblemError, load_problem
    from mining.gate import BadInput, GateConfig, run_gate

    try:
        load_problem(out)
    except ProblemError as exc:
        return {"passed": False, "verdict": "invalid", "reason": str(exc)}
    try:
        res = run_gate(out, None, GateConfig(executor=executor, stages=("correctness",), seeds=(0,), store=store))
    except BadInput as exc:
        return {"passed": False, "verdict": "error", "reason": str(exc)}
    d = res.to_dict()
    c = d.get("stages", {}).get("correctness", {})
    return {"passed": res.passed, "verdict": d.get("verdict"), "reason": d.get("reason", ""),
            "executor": d.get("executor"), "cases": f"{c.get('cases_passed', 0)}/{c.get('cases_total', 0)}"}
