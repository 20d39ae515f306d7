"""The real corpus: the project's wrappers around expert kernels of fetched sources (issue 17).

`corpora/real/<source>/<problem>/` holds only the project's own files: the definition, workloads,
solution, reference, one host-entry shim per version and `lineage.toml`, the human lineage as data
(ordered versions, first = naive, last = expert; what each version adds, in the carrier vocabulary,
and how an independent judge can see it). The kernels themselves stay in the fetched source
(`<store>/sources/<source>/`); `version_source` cuts the named `__global__` functions out of it,
with the closure of top-level macros, types, device functions, templates and constants they use,
drops torch / pybind parts, and appends the version's shim. `materialize` writes a complete
problem folder (docs/problem-format.md) from that, atomically.

For framework sources (vLLM's csrc/): kernels inside a named namespace come out inside it, the
source's own quoted headers join the closure, a version may name another registered source (an
older release) with `source = "..."`, and a `prelude = "shims/..."` of project declarations
(`namespace c10 { using Half = __half; }`) is placed before the extracted code.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional

from tree_sitter import Node

from corpora.code.parse import cuda_parser
from corpora.kernel_sources import SourceMissing

REAL_ROOT = Path(__file__).parent / "real"
SOURCES_TOML = Path(__file__).parent / "sources.toml"

OP_TYPES = ("gemm", "reduction", "softmax", "norm", "elementwise", "transpose", "scan", "histogram", "attention")
_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")
_CARRIER = re.compile(r"^[a-z][a-z0-9_]*$")
# The judge's vocabulary (CORPUS_SPEC.md, "The independent judge").
_COUNT = (r"sass:[A-Z][A-Z0-9_]*(\.[A-Z0-9_]+)*|bits:[A-Z]+:(8|16|32|64|128)|smem|registers|loops(:[A-Z][A-Z0-9_]*)?|"
          r"half2|launch_bounds")
# a count may be scoped to the kernels whose name holds KERNEL: `loops:LDG@histogram256Kernel`
OBSERVATION = re.compile(rf"^(({_COUNT}|fewer:({_COUNT}))(@[A-Za-z_]\w*)?|ffma_per_load|coalesced:[A-Za-z_]\w*|none:\S.*)$")
VOCABULARY = ("sass:OPCODE, bits:OP:N, smem, registers, loops, loops:OP, half2, launch_bounds, fewer:<one of those>, any count @KERNEL, ffma_per_load, "
              "coalesced:ARRAY, none:REASON")


class LineageError(ValueError):
    """A lineage.toml (or the wrapper around it) is malformed; the message names the file."""


class ExtractError(ValueError):
    """The named kernels cannot be cut out of the source file; the message names the file."""


@dataclass(frozen=True)
class HumanStep:
    carrier: str
    observe: list[str]
    note: str
    version: str  # the version that introduces the step


@dataclass(frozen=True)
class Version:
    name: str
    file: Optional[str]  # path inside the source (None when `project` is set)
    kernels: list[str]
    shim: str  # path inside the wrapper folder
    project: Optional[str] = None  # the project's own kernel file inside the wrapper folder
    steps: list[HumanStep] = field(default_factory=list)
    # another registered source for this version (an older release of the same package), and the
    # project's own declarations placed before the extracted code (e.g. `namespace c10 { using Half = __half; }`)
    source: Optional[str] = None
    prelude: Optional[str] = None


@dataclass(frozen=True)
class RealExpert:
    source: str
    problem: str
    dir: Path
    op_type: str
    history: bool
    gpu_only: bool
    gpu_only_reason: str
    versions: list[Version]

    @property
    def steps(self) -> list[HumanStep]:
        return [s for v in self.versions for s in v.steps]

    @property
    def expert(self) -> Version:
        return self.versions[-1]

    @property
    def naive(self) -> Version:
        return self.versions[0]


# --------------------------------------------------------------------------- loading


@lru_cache(maxsize=4)
def _sources_registry(path: Path = SOURCES_TOML) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise LineageError(f"{path}: missing (the registry of kernel sources)") from None
    except tomllib.TOMLDecodeError as exc:
        raise LineageError(f"{path}: invalid TOML: {exc}") from None


def sources_registry() -> dict:
    """corpora/sources.toml: source name -> {url, kind, commit | package/version/subdir}."""
    return _sources_registry(SOURCES_TOML)


def _req(table: dict, key: str, kind: type, where: str, path: Path):
    if key not in table:
        raise LineageError(f"{path}: {where}{key}: missing")
    value = table[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise LineageError(f"{path}: {where}{key}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _str_list(table: dict, key: str, where: str, path: Path, required: bool = True) -> list[str]:
    if key not in table and not required:
        return []
    value = _req(table, key, list, where, path)
    if not all(isinstance(x, str) and x for x in value):
        raise LineageError(f"{path}: {where}{key}: expected a list of non-empty strings")
    return list(value)


def load_expert(dir: Path) -> RealExpert:
    """Read and validate `<dir>/lineage.toml`; LineageError names the file and the field."""
    dir = Path(dir)
    path = dir / "lineage.toml"
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise LineageError(f"{path}: missing (a real-corpus wrapper needs lineage.toml)") from None
    except tomllib.TOMLDecodeError as exc:
        raise LineageError(f"{path}: invalid TOML: {exc}") from None
    known = {"source", "op_type", "history", "gpu_only", "gpu_only_reason", "versions"}
    extra = sorted(set(raw) - known)
    if extra:
        raise LineageError(f"{path}: unknown key {extra[0]!r} (known: {', '.join(sorted(known))})")
    source = _req(raw, "source", str, "", path)
    registry = sources_registry()
    if source not in registry:
        raise LineageError(f"{path}: source: {source!r} is not in {SOURCES_TOML.name} "
                           f"(have: {', '.join(sorted(registry))})")
    op_type = _req(raw, "op_type", str, "", path)
    if op_type not in OP_TYPES:
        raise LineageError(f"{path}: op_type: {op_type!r} is not one of {', '.join(OP_TYPES)}")
    history = _req(raw, "history", bool, "", path)
    gpu_only = bool(raw.get("gpu_only", False))
    reason = raw.get("gpu_only_reason", "")
    if not isinstance(reason, str):
        raise LineageError(f"{path}: gpu_only_reason: expected a string")
    if gpu_only and not reason.strip():
        raise LineageError(f"{path}: gpu_only_reason: say why the expert is GPU-only")
    entries = _req(raw, "versions", list, "", path)
    if len(entries) < (2 if history else 1):
        raise LineageError(f"{path}: versions: {'history = true needs at least 2' if history else 'need at least 1'}")
    versions: list[Version] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"versions[{i}]."
        if not isinstance(entry, dict):
            raise LineageError(f"{path}: versions[{i}]: expected a table")
        extra = sorted(set(entry) - {"name", "file", "project", "kernels", "shim", "steps", "source", "prelude"})
        if extra:
            raise LineageError(f"{path}: {where}{extra[0]}: unknown key")
        name = _req(entry, "name", str, where, path)
        if not _NAME.match(name) or name in seen:
            raise LineageError(f"{path}: {where}name: {name!r} is {'repeated' if name in seen else 'not a plain name'}")
        seen.add(name)
        file, project = entry.get("file"), entry.get("project")
        if (file is None) == (project is None):
            raise LineageError(f"{path}: {where}: set exactly one of 'file' (in the source) or 'project' (our own)")
        for key, value in (("file", file), ("project", project)):
            if value is not None and (not isinstance(value, str) or not value or value.startswith("/") or ".." in Path(value).parts):
                raise LineageError(f"{path}: {where}{key}: expected a relative path, got {value!r}")
        if project is not None and not (dir / project).is_file():
            raise LineageError(f"{path}: {where}project: {dir / project} not found")
        kernels = _str_list(entry, "kernels", where, path)
        shim = _req(entry, "shim", str, where, path)
        if not (dir / shim).is_file():
            raise LineageError(f"{path}: {where}shim: {dir / shim} not found")
        steps: list[HumanStep] = []
        raw_steps = entry.get("steps", [])
        if not isinstance(raw_steps, list):
            raise LineageError(f"{path}: {where}steps: expected an array of tables")
        if i == 0 and raw_steps:
            raise LineageError(f"{path}: {where}steps: the first version is the naive one and adds no step")
        if i > 0 and not raw_steps:
            raise LineageError(f"{path}: {where}steps: a later version must name what it adds")
        for j, step in enumerate(raw_steps):
            swhere = f"{where}steps[{j}]."
            if not isinstance(step, dict):
                raise LineageError(f"{path}: {swhere[:-1]}: expected a table")
            extra = sorted(set(step) - {"carrier", "observe", "note"})
            if extra:
                raise LineageError(f"{path}: {swhere}{extra[0]}: unknown key")
            carrier = _req(step, "carrier", str, swhere, path)
            if not _CARRIER.match(carrier):
                raise LineageError(f"{path}: {swhere}carrier: {carrier!r} is not a carrier name (lower_snake_case)")
            observe = _str_list(step, "observe", swhere, path)
            if not observe:
                raise LineageError(f"{path}: {swhere}observe: at least one observation (or 'none:REASON')")
            for o in observe:
                if not OBSERVATION.match(o):
                    raise LineageError(f"{path}: {swhere}observe: {o!r} is not in the judge's vocabulary ({VOCABULARY})")
            note = step.get("note", "")
            if not isinstance(note, str):
                raise LineageError(f"{path}: {swhere}note: expected a string")
            steps.append(HumanStep(carrier=carrier, observe=observe, note=note, version=name))
        vsource, prelude = entry.get("source"), entry.get("prelude")
        if vsource is not None and (not isinstance(vsource, str) or vsource not in registry):
            raise LineageError(f"{path}: {where}source: {vsource!r} is not in {SOURCES_TOML.name}")
        if prelude is not None and (not isinstance(prelude, str) or not (dir / prelude).is_file()):
            raise LineageError(f"{path}: {where}prelude: {dir / str(prelude)} not found")
        versions.append(Version(name=name, file=file, kernels=kernels, shim=shim, project=project, steps=steps,
                                source=vsource, prelude=prelude))
    return RealExpert(source=source, problem=dir.name, dir=dir, op_type=op_type, history=history,
                      gpu_only=gpu_only, gpu_only_reason=reason, versions=versions)


def list_experts(root: Path = REAL_ROOT) -> list[RealExpert]:
    """Every wrapper `<root>/<source>/<problem>/lineage.toml`, validated, sorted by (source, problem)."""
    root = Path(root)
    if not root.is_dir():
        return []
    experts = [load_expert(p.parent) for p in sorted(root.glob("*/*/lineage.toml"))]
    for e in experts:
        if e.dir.parent.name != e.source:
            raise LineageError(f"{e.dir / 'lineage.toml'}: source: {e.source!r} but the wrapper lives under "
                               f"{e.dir.parent.name!r}/")
    return experts


# --------------------------------------------------------------------------- extraction


_IDENT = re.compile(rb"[A-Za-z_]\w*")
_COMMENT_OR_STRING = re.compile(rb'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|//[^\n]*|/\*.*?\*/', re.S)
# Host-framework parts that never reach a standalone kernel file.
_DROP_INCLUDE = re.compile(r"#\s*include\s*[<\"](torch/|ATen/|c10/|THC/|pybind11/|Python\.h|cuda/std/|helper_)")
_FRAMEWORK = re.compile(r"\btorch::|\bat::|\bc10::|\bpybind11\b|\bPYBIND11_|\bTORCH_\w+\(|\bAT_DISPATCH")
# Optional CUDA headers: kept only when the extracted code uses what they declare (the CPU
# executor has no fp8 / tensor-core / pipeline headers, and an unused include must not bar it).
_OPTIONAL_HEADERS = {
    "cuda_fp8.h": re.compile(r"\b__nv_fp8|\bfp8_e[45]m"),
    "mma.h": re.compile(r"\bwmma\b|\bnvcuda\b"),
    "cuda_pipeline.h": re.compile(r"\b__pipeline_"),
    "cuda_pipeline_primitives.h": re.compile(r"\b__pipeline_"),
    "cuda_awbarrier.h": re.compile(r"\bawbarrier\b"),
    "cuda/barrier": re.compile(r"\bcuda::barrier\b"),
    "cuda/pipeline": re.compile(r"\bcuda::pipeline\b"),
    "cooperative_groups.h": re.compile(r"\bcooperative_groups\b|\bcg::"),
    "cooperative_groups/reduce.h": re.compile(r"\bcg::reduce\b|\bcooperative_groups::reduce\b"),
    "cooperative_groups/memcpy_async.h": re.compile(r"\bmemcpy_async\b"),
    "cuda_bf16.h": re.compile(r"bfloat16|__bf16|bf162"),
    "cuda_fp16.h": re.compile(r"\bhalf|__half|\b__h[a-z]|__float2half|half2"),
    "cuda_profiler_api.h": re.compile(r"\bcudaProfiler"),
    # host BLAS headers (kept only when the extracted code calls cuBLAS; the CPU executor has none)
    "cublas_v2.h": re.compile(r"\bcublas"),
    "cublas.h": re.compile(r"\bcublas"),
    # CUB (the CPU executor has none): kept only when the extracted code uses cub::
    "cub/cub.cuh": re.compile(r"\bcub::"),
    "cub/util_type.cuh": re.compile(r"\bcub::"),
    "hipcub/hipcub.hpp": re.compile(r"\bhipcub::"),
}


def _code_of(raw: bytes) -> bytes:
    """Comments and string/char literals blanked (same length): identifiers only from code."""
    return _COMMENT_OR_STRING.sub(lambda m: b" " * len(m.group(0)) if not m.group(0).startswith((b'"', b"'"))
                                  else m.group(0)[:1] + b" " * (len(m.group(0)) - 2) + m.group(0)[-1:], raw)


@dataclass
class _Item:
    """One top-level declaration of the source file."""
    start: int
    end: int
    kind: str  # include | macro | function | type | variable | using | other
    defines: set[str]
    uses: set[str]
    text: str
    ns: str = ""  # enclosing named namespace(s), `a::b`; the output re-opens it around the item


def _defined_names(node: Node, src: bytes) -> tuple[str, set[str]]:
    def t(n: Optional[Node]) -> str:
        return src[n.start_byte:n.end_byte].decode("utf-8", "replace") if n is not None else ""

    typ = node.type
    if typ in ("preproc_def", "preproc_function_def"):
        return "macro", {t(node.child_by_field_name("name"))}
    if typ == "preproc_include":
        return "include", set()
    if typ == "template_declaration":
        inner = next((c for c in node.named_children if c.type not in ("template_parameter_list",)), None)
        if inner is None:
            return "other", set()
        kind, names = _defined_names(inner, src)
        return kind, names
    if typ == "function_definition":
        decl = node.child_by_field_name("declarator")
        while decl is not None and decl.type != "function_declarator":
            decl = decl.child_by_field_name("declarator")
        if decl is None:
            return "other", set()
        name = decl.child_by_field_name("declarator")
        label = t(name)
        # `Foo<T>::bar` or `ns::f`: the last plain name
        return "function", {re.split(r"::", re.sub(r"<.*>", "", label))[-1].strip()} if label else set()
    if typ in ("struct_specifier", "class_specifier", "union_specifier", "enum_specifier"):
        names = {t(node.child_by_field_name("name")).split("<")[0].strip()}  # `S<double>`: a specialization of S
        if typ == "enum_specifier":
            body = node.child_by_field_name("body")
            for c in (body.named_children if body is not None else []):
                if c.type == "enumerator":
                    names.add(t(c.child_by_field_name("name")))
        return "type", {n for n in names if n}
    if typ in ("type_definition", "alias_declaration"):
        names = set()
        if typ == "alias_declaration":
            names.add(t(node.child_by_field_name("name")))
        else:
            for c in node.children_by_field_name("declarator"):
                names.update(x.decode() for x in _IDENT.findall(src[c.start_byte:c.end_byte]))
        return "type", names
    if typ == "declaration":
        names = set()
        for c in node.children_by_field_name("declarator"):
            d = c
            while d is not None and d.type not in ("identifier", "field_identifier"):
                nxt = d.child_by_field_name("declarator")
                if nxt is None:
                    nxt = next((x for x in d.named_children if x.type in ("identifier", "qualified_identifier")
                                or x.type.endswith("declarator")), None)
                d = nxt
            if d is not None:
                names.add(t(d))
        kind = "function" if any(c.type == "function_declarator" for c in node.children_by_field_name("declarator")) else "variable"
        type_node = node.child_by_field_name("type")
        if type_node is not None and type_node.type in ("struct_specifier", "class_specifier", "enum_specifier",
                                                        "union_specifier") and type_node.child_by_field_name("body"):
            names |= _defined_names(type_node, src)[1]
        return kind, names
    if typ in ("preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif"):
        # a conditional block is kept whole: it defines what its branches define
        names: set[str] = set()
        for c in node.named_children:
            names |= _defined_names(c, src)[1]
        return "conditional", names
    if typ in ("using_declaration", "namespace_alias_definition"):
        names = set()
        if typ == "namespace_alias_definition":
            names.add(t(node.child_by_field_name("name")))
        return "using", names
    return "other", set()


def _items(raw: bytes) -> list[_Item]:
    code = _code_of(raw)
    # tree-sitter-cuda does not know `__align__(n)`; blank it (same length) for parsing only
    parse_text = re.sub(rb"\b__align__\s*\([^()]*\)", lambda m: b" " * len(m.group(0)), code)
    tree = cuda_parser().parse(parse_text)
    items: list[_Item] = []

    flags: set[bytes] = set()  # value-less macros defined so far (`#define ENABLE_X`)

    def visit(nodes: Iterable[Node], ns: str = "") -> None:
        for node in nodes:
            if node.type in ("comment",):
                continue
            if node.type in ("preproc_ifdef", "preproc_if") and _is_include_guard(node, raw):
                # an include guard (`#ifndef X_H` / `#define X_H` / ... / `#endif`): look inside
                visit((c for c in node.named_children if c.type not in ("identifier", "preproc_def")
                       or c.type == "preproc_def" and c.child_by_field_name("value") is not None), ns)
                continue
            if node.type == "preproc_ifdef" and raw[node.start_byte:node.start_byte + 6] == b"#ifdef" and \
                    raw[node.child_by_field_name("name").start_byte:node.child_by_field_name("name").end_byte] in flags:
                # `#define FEATURE` ... `#ifdef FEATURE`: the file switched the block on; its items, not the #else
                alt = node.child_by_field_name("alternative")
                visit((c for c in node.named_children if c != node.child_by_field_name("name")
                       and (alt is None or c != alt)), ns)
                continue
            if node.type == "preproc_def" and node.child_by_field_name("value") is None:
                flags.add(raw[node.child_by_field_name("name").start_byte:node.child_by_field_name("name").end_byte])
            if node.type == "namespace_definition" and node.child_by_field_name("name") is not None:
                body = node.child_by_field_name("body")  # `namespace vllm { ... }`: its items, tagged
                name = raw[node.child_by_field_name("name").start_byte:node.child_by_field_name("name").end_byte]
                if body is not None:
                    visit(body.named_children, f"{ns}::{name.decode()}" if ns else name.decode())
                continue
            if node.type == "linkage_specification" or node.type == "namespace_definition" and \
                    node.child_by_field_name("name") is None:
                body = node.child_by_field_name("body")
                if body is not None:
                    visit(body.named_children if body.type == "declaration_list" else [body], ns)
                continue
            if node.type == ";":
                continue
            kind, defines = _defined_names(node, raw)
            end = node.end_byte
            nxt = node.next_sibling
            if nxt is not None and nxt.type == ";":  # `struct S { ... };` parses as the struct, then `;`
                end = nxt.end_byte
            uses = {m.decode() for m in _IDENT.findall(code[node.start_byte:end])} - defines
            items.append(_Item(node.start_byte, end, kind, defines, uses,
                               raw[node.start_byte:end].decode("utf-8", "replace"), ns))

    visit(tree.root_node.children)
    return items


def _is_include_guard(node: Node, raw: bytes) -> bool:
    """`#ifndef NAME` whose first child is `#define NAME` with no value."""
    if node.type != "preproc_ifdef" or not raw[node.start_byte:node.start_byte + 7].startswith(b"#ifndef"):
        return False
    name = node.child_by_field_name("name")
    first = next((c for c in node.named_children if c.type == "preproc_def"), None)
    return (name is not None and first is not None and first.child_by_field_name("value") is None
            and raw[name.start_byte:name.end_byte] == raw[first.child_by_field_name("name").start_byte:
                                                           first.child_by_field_name("name").end_byte])


def _local_header_items(items: list[_Item], include_dirs: list[Path], seen: set[Path]) -> list[_Item]:
    """Top-level items of the source's own `#include "x.h"` headers (found in include_dirs), headers
    first, recursively; each header once."""
    out: list[_Item] = []
    for it in items:
        m = re.match(r'#\s*include\s*"([^"]+)"', it.text.strip()) if it.kind == "include" else None
        found = next((d / m.group(1) for d in include_dirs if m and (d / m.group(1)).is_file()), None)
        if found is None or found.resolve() in seen:
            continue
        seen.add(found.resolve())
        sub = _items(found.read_bytes())
        out += _local_header_items(sub, [found.parent] + include_dirs, seen) + sub
    return out


def _framework(text: str, allow_ns: Iterable[str]) -> bool:
    for ns in allow_ns:  # namespaces the version's prelude defines (`c10::Half`) are not framework code
        text = re.sub(rf"\b{re.escape(ns)}::", "", text)
    return bool(_FRAMEWORK.search(text))


def extract_kernels(raw: str, kernels: list[str], path: str, extra_uses: Iterable[str] = (),
                    include_dirs: Iterable[Path] = (), allow_ns: Iterable[str] = ()) -> str:
    """The named `__global__` functions of `raw` plus the closure of the top-level declarations they
    (and `extra_uses`, the names a shim uses) need, in source order; standard includes kept,
    torch / pybind parts dropped. The source's own headers (`#include "x.h"` found in
    `include_dirs`) join the pool ahead of the file, their include lines dropped; items inside a
    named namespace come out inside it again. Raises ExtractError naming the file when a kernel is absent."""
    data = raw.encode()
    items = _items(data)
    dirs = [Path(d) for d in include_dirs]
    items = _local_header_items(items, dirs, set()) + items
    # a quoted include is the source project's own header: inlined above when the snapshot has it,
    # else (e.g. apex's type_shim.h outside the copied file) it cannot be included either
    items = [it for it in items if not (it.kind == "include" and dirs
                                        and re.match(r'#\s*include\s*"([^"]+)"', it.text.strip()))]
    allow_ns = list(allow_ns)
    by_name: dict[str, list[_Item]] = {}
    for it in items:
        if it.kind != "include" and _framework(it.text, allow_ns):
            continue  # torch bindings and their helper macros
        for n in it.defines:
            by_name.setdefault(n, []).append(it)
    missing = [k for k in kernels if not any(it.kind == "function" and "__global__" in it.text
                                             for it in by_name.get(k, []))]
    if missing:
        raise ExtractError(f"{path}: no __global__ function named {', '.join(missing)}")
    chosen: dict[int, _Item] = {}
    todo = [it for k in kernels for it in by_name[k]]
    todo += [it for n in extra_uses for it in by_name.get(n, []) if it.kind != "function"]
    while todo:
        it = todo.pop()
        if id(it) in chosen:
            continue
        chosen[id(it)] = it
        for name in it.uses:
            for dep in by_name.get(name, []):
                if id(dep) not in chosen:
                    todo.append(dep)
    body = [it for it in items if id(it) in chosen]
    body_text = "\n".join(it.text for it in body)
    head: list[str] = []
    for it in items:
        if it.kind == "include" and re.match(r'#\s*include\s*"', it.text.strip()):
            continue  # the source's own headers: what a kernel needs from them is not extracted (say so in the lineage)
        if it.kind == "include" and not _DROP_INCLUDE.match(it.text.strip()):
            header = re.search(r"[<\"]([^>\"]+)[>\"]", it.text)
            need = _OPTIONAL_HEADERS.get(header.group(1)) if header else None
            if need is None or need.search(body_text):
                head.append(it.text.strip())
        elif (it.kind == "using" and not it.defines or it.kind == "other" and it.text.lstrip().startswith(
                "using namespace")) and not _framework(it.text, allow_ns) and not it.ns:
            head.append(it.text.strip())  # `using namespace X;` (aliases come with the closure)
    if any(it.kind == "include" and _DROP_INCLUDE.match(it.text.strip()) for it in items):
        head.append("#include <cstdint>  // the dropped framework headers brought the fixed-width integer types")
    out = [f"// extracted from {path}: {', '.join(kernels)} and what they use"]
    out += list(dict.fromkeys(head))  # a header and the file may include the same system header
    for i, it in enumerate(body):
        if it.ns and (i == 0 or body[i - 1].ns != it.ns):
            out.append(f"\nnamespace {it.ns} {{")
        out.append("")
        out.append(it.text)
        if it.ns and (i + 1 == len(body) or body[i + 1].ns != it.ns):
            out.append(f"}}  // namespace {it.ns}")
    return "\n".join(out) + "\n"


def _shim_uses(shim_text: str) -> set[str]:
    return {m.decode() for m in _IDENT.findall(_code_of(shim_text.encode()))}


def source_root(expert: RealExpert, sources_root: Path, source: Optional[str] = None) -> Path:
    """`<sources_root>/<source>` (the sdist's `subdir` inside it when set); SourceMissing when absent.
    `source` (a version's own source) defaults to the expert's."""
    source = source or expert.source
    path = Path(sources_root) / source
    if not path.is_dir():
        raise SourceMissing(source, path)
    entry = sources_registry().get(source, {})
    sub = entry.get("subdir")
    if sub and (path / sub).is_dir():
        return path / sub
    return path


def check_pinned(expert: RealExpert, sources_root: Path, source: Optional[str] = None) -> None:
    """A fetched source that records a commit (SOURCE.json) must be the snapshot the wrapper names."""
    source = source or expert.source
    path = Path(sources_root) / source
    meta = path / "SOURCE.json"
    pinned = sources_registry().get(source, {})
    if not meta.is_file():
        return
    try:
        got = json.loads(meta.read_text())
    except (OSError, json.JSONDecodeError):
        return
    for key in ("commit", "version"):
        if pinned.get(key) and got.get(key) and got[key] != pinned[key]:
            raise LineageError(f"{meta}: {key} {got[key]} but {SOURCES_TOML.name} pins {pinned[key]} for "
                               f"{source!r}; run: skills corpora fetch {source} --commit {pinned[key]}")


def version_source(expert: RealExpert, version: Version, sources_root: Path) -> str:
    """One version as a compilable file: the extracted kernels (+ closure) followed by its shim."""
    shim = (expert.dir / version.shim).read_text()
    if version.project is not None:
        kernel_text = (expert.dir / version.project).read_text()
        origin = f"corpora/real/{expert.source}/{expert.problem}/{version.project}"
        body = kernel_text if all(k in kernel_text for k in version.kernels) else None
        if body is None:
            raise ExtractError(f"{expert.dir / version.project}: does not define {', '.join(version.kernels)}")
        head = f"// {origin} (the project's own kernel)\n"
        return head + body.rstrip() + "\n\n// ---- entry shim: " + version.shim + "\n" + shim
    source = version.source or expert.source
    root = source_root(expert, sources_root, source)
    check_pinned(expert, sources_root, source)
    path = root / version.file
    if not path.is_file():
        raise ExtractError(f"{path}: not found in the fetched source {source!r} "
                           f"(named by {expert.dir / 'lineage.toml'})")
    raw = path.read_text(errors="replace")
    prelude = (expert.dir / version.prelude).read_text() if version.prelude else ""
    extracted = extract_kernels(raw, version.kernels, f"{source}:{version.file}", _shim_uses(shim),
                                include_dirs=[path.parent, root],
                                allow_ns=re.findall(r"\bnamespace\s+(\w+)\s*\{", _code_of(prelude.encode()).decode()))
    if prelude:
        extracted = f"// ---- prelude: {version.prelude}\n{prelude.rstrip()}\n\n{extracted}"
    return extracted + "\n// ---- entry shim: " + version.shim + "\n" + shim


_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def _local_headers(path: Path, root: Path, depth: int = 3) -> list[Path]:
    """The source's own headers `path` includes with quotes (found beside it, inside the source
    tree), transitively, included-first order, each once."""
    out: list[Path] = []

    def visit(p: Path, d: int) -> None:
        for name in _QUOTED_INCLUDE.findall(p.read_text(errors="replace")):
            h = (p.parent / name).resolve()
            if h in out or not h.is_file() or root.resolve() not in h.parents:
                continue
            if d > 0:
                visit(h, d - 1)
            if h not in out:
                out.append(h)

    visit(path, depth)
    return out


def source_files(expert: RealExpert, sources_root: Path) -> list[Path]:
    """The files of the fetched sources the wrapper reads (its versions' files and their own
    headers), relative to `sources_root` (`<source>/<path>`): what a copy of the sources must keep."""
    files: list[Path] = []
    for v in expert.versions:
        if v.file is None:
            continue
        source = v.source or expert.source
        base = (Path(sources_root) / source).resolve()
        root = source_root(expert, sources_root, source)
        path = root / v.file
        for f in (_local_headers(path, root) + [path.resolve()]) if path.is_file() else []:
            rel = Path(source) / f.relative_to(base)
            if rel not in files:
                files.append(rel)
    return files


_PROBLEM_FILES = ("definition.json", "workloads.jsonl", "solution.toml")


def materialize(expert: RealExpert, sources_root: Path, out_dir: Path) -> Path:
    """Write a problem folder for `expert` at `out_dir`: definition / workloads / solution /
    reference, kernel.cu = the expert, naive.cu = the first version, versions/<i>_<name>.cu each,
    lineage.toml. Atomic: built in a temporary sibling and renamed into place."""
    out_dir = Path(out_dir)
    texts = [(f"versions/{i}_{v.name}.cu", version_source(expert, v, sources_root))
             for i, v in enumerate(expert.versions)]  # every failure happens before anything is written
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for name in _PROBLEM_FILES + ("lineage.toml",):
            shutil.copyfile(expert.dir / name, tmp / name)
        definition = json.loads((expert.dir / "definition.json").read_text())
        ref = str(definition.get("reference", "")).strip()
        if re.fullmatch(r"[\w\-./]+\.py", ref):
            shutil.copyfile(expert.dir / ref, tmp / ref)
        (tmp / "versions").mkdir()
        for rel, text in texts:
            (tmp / rel).write_text(text)
        (tmp / "kernel.cu").write_text(texts[-1][1])
        (tmp / "naive.cu").write_text(texts[0][1])
        (tmp / "SOURCE.json").write_text(json.dumps({
            "source": expert.source, "problem": expert.problem,
            **{k: v for k, v in sources_registry().get(expert.source, {}).items()},
            "versions": [{"index": i, "name": v.name, "file": v.file or v.project, "source": v.source or expert.source,
                          "kernels": v.kernels} for i, v in enumerate(expert.versions)],
        }, indent=1) + "\n")
        old = None
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.", dir=out_dir.parent))
            os.rename(out_dir, old / "x")
        os.rename(tmp, out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
