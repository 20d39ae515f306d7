"""Does a skill apply *here*? Sites in query code, carriers already present, preconditions, conflicts.

A retrieved skill is only useful with a place to apply it. For the carriers the deterministic
operators remove (and a few more), ``opportunities`` finds the sites where the skill's
optimized form could be introduced: the shape its *simpler* side has (a pointer parameter
without ``__restrict__``, a scalar load through a const pointer, ``expf``, a loop without
``#pragma unroll``, one element per thread...). For any other carrier the site is the query
window most like the skill's simpler-side excerpts (``similar_site``), which never rules a
skill out.

``Checker`` (one per query) answers per skill:
* ``sites``         where it applies, with 1-based line numbers and a one-line reason;
* ``present``       where the query already has the carrier (mining/carriers.py detectors);
* ``status``        "applicable" | "already_applied" (carrier present, no site left) |
                    "no_site" (a detector found nowhere to apply it) | "conflict" | "precondition_violated";
* ``preconditions`` each checked against the given axes: satisfied | violated | unknown | not_needed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Sequence

from corpora.code.nodes import call_name, declarator_name, enclosing, is_written
from corpora.code.source import Source
from mining.carriers import DETECTORS, grid_stride_loops
from corpora.code.parse import text, walk
from mining.axes_check import precondition_verdict
from mining.carriers_meaning import all_view_macros, is_store_target, type_bytes
from mining.operators.nodes import device_functions, param_nodes, strip_parens

PRECISE_MATH = {"expf": "__expf", "exp": "__expf", "exp2f": "exp2f (ex2.approx)", "logf": "__logf", "log": "__logf",
                "log2f": "__log2f", "log10f": "__log10f", "sinf": "__sinf", "cosf": "__cosf", "tanf": "__tanf",
                "powf": "__powf", "sqrtf": "rsqrtf / __fsqrt_rn", "tanhf": "a fast tanh", "sincosf": "__sincosf",
                "exp10f": "__exp10f"}
_SCALAR_ELEM = re.compile(r"^(const\s+)?(volatile\s+)?(float|int|unsigned( int)?|uint32_t|int32_t|__half|half|"
                          r"__nv_bfloat16|double|short|char|unsigned char|uint8_t|int8_t|long|int64_t|uint64_t)$")
# carriers that exist only on one kind of data: packed half2 arithmetic computes two 16-bit floats per
# instruction, so code that names no 16-bit float type anywhere (comments blanked) has nothing to pack,
# however much its windows look like where the skill was applied
HALF_TYPES = re.compile(r"\b(half2?|__half2?|__nv_bfloat162?|nv_bfloat162?|__half_raw|(?:c10|at)::(?:Half|BFloat16))\b")
NEEDS_DATA = {"packed_half2_math": (HALF_TYPES, "16-bit float (half / bfloat16) data")}


@dataclass
class SiteMatch:
    line: int
    end_line: int
    function: str
    code: str
    reason: str
    how: str = "detector"  # detector | similar_code | requires

    def to_dict(self) -> dict:
        return {"line": self.line, "end_line": self.end_line, "function": self.function, "code": self.code,
                "reason": self.reason, "how": self.how}


@dataclass
class PreconditionCheck:
    text: str
    kind: str
    axis: str
    value: int
    status: str  # the mined status: discovered | guarded_in_code | not_needed
    check: str  # satisfied | violated | unknown | not_needed
    detail: str = ""

    def to_dict(self) -> dict:
        return {"text": self.text, "kind": self.kind, "axis": self.axis, "value": self.value, "status": self.status,
                "check": self.check, "detail": self.detail}


@dataclass
class Applicability:
    status: str
    sites: list[SiteMatch] = field(default_factory=list)
    present: list[dict] = field(default_factory=list)
    preconditions: list[PreconditionCheck] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    detail: str = ""


# --------------------------------------------------------------------------- query-side helpers
_QUALIFIER_WORDS = {"__device__", "__host__", "__global__", "__forceinline__", "__noinline__", "inline", "static",
                    "constexpr", "extern"}


def blank_qualifier_macros(code: str) -> str:
    """The code with every use of an object-like macro that expands to function qualifiers only
    (``#define HOST_DEVICE_INLINE __device__ __host__ inline``) replaced by spaces: the parser does
    not expand macros, and such a use before a declaration breaks it. Offsets and lines are kept."""
    names = [m.group(1) for m in re.finditer(r"(?m)^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+([^\n]+)$", code)
             if set(m.group(2).split()) and set(m.group(2).split()) <= _QUALIFIER_WORDS]
    if not names:
        return code
    pat = re.compile(r"(?m)^(?![ \t]*#)(.*?)\b(%s)\b" % "|".join(map(re.escape, names)))
    while True:
        new = pat.sub(lambda m: m.group(1) + " " * len(m.group(2)), code)
        if new == code:
            return code
        code = new
def _line_text(src: Source, line: int) -> str:
    lines = src.raw.decode("utf-8", "replace").splitlines()
    return " ".join(lines[line - 1].split())[:160] if 0 < line <= len(lines) else ""


def _node_site(src: Source, node, reason: str, fn: str = "") -> SiteMatch:
    a = src.line_of(node.start_byte)
    b = src.line_of(max(node.start_byte, node.end_byte - 1))
    f = src.function_at(node.start_byte)
    return SiteMatch(a, b, fn or (f.name if f else ""), src.excerpt(node.start_byte, node.end_byte), reason)


def device_funcs(src: Source):
    """Kernels and __device__ functions (where device-code optimizations apply) with each one's
    head (the text before its body), found once per source (every finder asks)."""
    return iter(src.memo("device_funcs", lambda: [(f, fn, _head(src, f, fn)) for f, fn in device_functions(src)]))


def _head(src: Source, f, fn) -> bytes:
    body = fn.child_by_field_name("body")
    return src.code[f.start_byte:(body.start_byte if body is not None else f.end_byte)]


def _pointer_names(src: Source, f, fn) -> tuple[dict[str, bool], dict[str, str]]:
    """Global pointers of a device function: name -> is-const, name -> element type."""
    const: dict[str, bool] = {}
    elem: dict[str, str] = {}
    shared = set(src.shared_names)
    on_shared = set() if f.is_kernel else _shared_params(src, f.name, shared)
    for i, p in enumerate(f.params):
        if p.is_pointer and i not in on_shared:
            const[p.name] = p.const
            elem[p.name] = p.base_type
    for decl in src.nodes("declaration", within=fn):
        code = " ".join(text(decl).split())
        if "__shared__" in code:
            continue
        for d in decl.named_children:
            if d.type != "init_declarator":
                continue
            inner, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
            if inner is None or value is None or inner.type != "pointer_declarator":
                continue
            name = declarator_name(inner)
            vt = text(value)
            roots = set(re.findall(r"\b[A-Za-z_]\w*\b", vt))
            if name and roots & set(const) and not roots & shared:
                const[name] = code.startswith("const ") or " const " in code.split("=")[0]
                m = re.match(r"^(?:const\s+)?([\w:]+(?:\s+[\w:]+)?)\s*\*", code)
                elem[name] = m.group(1) if m else ""
    return const, elem


def _shared_params(src: Source, fname: str, shared: set[str]) -> set[int]:
    """Positions of a device helper's pointer parameters that every call of it passes a shared array
    (`warpReduce(sdata, tid)`): the helper reads and writes shared memory through them, not global.
    One pass over the calls, kept on the source."""
    memo = src.memo("shared_params", lambda: _shared_args_by_callee(src, shared))
    return {i for i, ok in memo.get(fname, {}).items() if ok}


def _shared_args_by_callee(src: Source, shared: set[str]) -> dict[str, dict[int, bool]]:
    """callee -> {argument position: every call passes a shared array there}."""
    out: dict[str, dict[int, bool]] = {}
    for call in src.nodes("call_expression"):
        name = re.sub(r"\s*<.*$", "", call_name(call), flags=re.S)  # `warpReduce<256>(...)` too
        args = call.child_by_field_name("arguments")
        seen = out.setdefault(name, {})
        for i, a in enumerate(args.named_children if args is not None else []):
            m = re.match(r"[\s(&]*([A-Za-z_]\w*)", text(a))
            seen[i] = seen.get(i, True) and bool(m and m.group(1) in shared)
    return out


def _in_call(node, names: set[str]) -> bool:
    p = node.parent
    while p is not None and p.type not in ("expression_statement", "compound_statement"):
        if p.type == "call_expression" and call_name(p) in names:
            return True
        p = p.parent
    return False


def global_accesses(src: Source):
    """(function, subscript node, pointer name, is_const, element type, is_write) of scalar global
    accesses, found once per source (most finders walk them)."""
    return iter(src.memo("global_accesses", lambda: list(_find_global_accesses(src))))


def _find_global_accesses(src: Source):
    for f, fn, _ in device_funcs(src):
        const, elem = _pointer_names(src, f, fn)
        for node in src.nodes("subscript_expression", within=fn):
            arg = node.child_by_field_name("argument")
            if arg is None or arg.type != "identifier":
                continue
            name = text(arg)
            if name not in const:
                continue
            if node.parent is not None and node.parent.type == "pointer_expression" and text(node.parent)[:1] == "&":
                continue
            yield f, node, name, const[name], elem.get(name, ""), is_written(node)


# --------------------------------------------------------------------------- detectors
Finder = Callable[[Source], list[SiteMatch]]
FINDERS: dict[str, Finder] = {}


def finder(*names: str):
    def deco(fn: Finder) -> Finder:
        for n in names:
            FINDERS[n] = fn
        return fn
    return deco


@finder("restrict")
def _restrict_sites(src: Source) -> list[SiteMatch]:
    out = []
    for f, fn, _ in device_funcs(src):
        plain = [p for p in param_nodes(fn) if "*" in text(p) and "__restrict" not in text(p)]
        if plain:
            names = [declarator_name(p) or text(p) for p in plain]
            s = _node_site(src, plain[0], "", f.name)
            s.end_line = src.line_of(plain[-1].end_byte - 1)
            s.code = ", ".join(" ".join(text(p).split()) for p in plain)[:160]
            s.reason = f"pointer parameter(s) {', '.join(names)} of {f.name} carry no __restrict__ (no-alias promise)"
            out.append(s)
    return out


@finder("launch_bounds")
def _launch_bounds_sites(src: Source) -> list[SiteMatch]:
    out = []
    raw = src.code.decode("utf-8", "replace")
    for f, fn, head in device_funcs(src):
        if not f.is_kernel or b"__launch_bounds__" in head:
            continue
        m = re.search(r"\b%s\s*<<<\s*([^,>]+),\s*([^,>]+)" % re.escape(f.name), raw)
        block = " ".join(m.group(2).split()) if m else ""
        out.append(SiteMatch(f.line, f.body_line, f.name, _line_text(src, f.line),
                             f"kernel {f.name} has no __launch_bounds__" +
                             (f" (launched with {block} threads per block)" if block else "")))
    return out


@finder("unroll_pragma")
def _unroll_sites(src: Source) -> list[SiteMatch]:
    out = []
    lines = src.code.decode("utf-8", "replace").splitlines()
    for f, fn, _ in device_funcs(src):
        for loop in src.nodes("for_statement", within=fn):
            line = src.line_of(loop.start_byte)
            prev = next((lines[i].strip() for i in range(line - 2, -1, -1) if lines[i].strip()), "")
            if re.match(r"#\s*pragma\s+unroll", prev):
                continue
            header = " ".join(src.raw[loop.start_byte:loop.end_byte].decode("utf-8", "replace").split("\n")[0].split())
            cond = loop.child_by_field_name("condition")
            mt = re.search(r"<=?\s*(\w+)\s*$", " ".join(text(cond).split())) if cond is not None else None
            const_trip = mt is not None and (mt.group(1).isdigit() or mt.group(1) in src.defines)
            s = _node_site(src, loop, f"loop `{header[:80]}` is not unrolled" +
                           (" (compile-time trip count)" if const_trip else ""), f.name)
            s.end_line = s.line
            s.code = header[:160]
            out.append(s)
    return out


_CAST = re.compile(r"\(\s*(?:const\s+)?(?:unsigned\s+)?(?:size_t|int|long|long long|int64_t|uint32_t|int32_t|unsigned)\s*\)")


def loop_var(loop) -> str:
    """The variable a for loop declares or assigns in its initializer ('' for while loops)."""
    init = loop.child_by_field_name("initializer") if loop.type == "for_statement" else None
    if init is None:
        return ""
    m = re.search(r"([A-Za-z_]\w*)\s*=(?!=)", text(init))
    return m.group(1) if m else ""


def _top_terms(expr: str) -> list[str]:
    """The top-level additive terms of an index expression (parentheses kept together)."""
    terms, depth, cur = [], 0, ""
    for ch in expr:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch in "+-" and depth == 0 and cur.strip():
            terms.append(cur)
            cur = ""
            continue
        cur += ch
    if cur.strip():
        terms.append(cur)
    return [t.strip() for t in terms]


def access_stride(node) -> tuple[str, str]:
    """How a subscript's index moves with the innermost enclosing loop's variable, per thread:
    ("unit", var) when the variable is a term of its own (``A[row * K + k]``: consecutive elements,
    what a 16-byte vector load needs), ("strided", var) when it is scaled (``B[k * N + col]``: a
    thread jumps N elements per iteration, and a float4 would read three it never uses),
    ("invariant", var) when it does not appear, ("none", "") outside loops (one element per thread,
    consecutive across threads)."""
    loop = enclosing(node, "for_statement", "while_statement")
    var = loop_var(loop) if loop is not None else ""
    if not var:
        return "none", ""
    idx = node.child_by_field_name("index")
    if idx is None:  # tree-sitter-cuda nests the index in a subscript_argument_list
        args = [c for c in node.named_children if c.type == "subscript_argument_list"]
        idx = args[0].named_children[0] if args and args[0].named_children else None
    expr = _CAST.sub("", " ".join(text(idx).split())) if idx is not None else ""
    hit = [t for t in _top_terms(expr) if re.search(rf"\b{re.escape(var)}\b", t)]
    if not hit:
        return "invariant", var
    if all(re.fullmatch(rf"\(?\s*{re.escape(var)}\s*\)?", t) for t in hit):
        return "unit", var
    return "strided", var


_OFFSET = re.compile(r"^(.*?\S)\s*\+\s*(\d+)$")


def adjacent_runs(src: Source) -> dict[int, str]:
    """Global loads of one pointer at constant offsets from one index (`a[i]`, `a[i + 1]`, ...; or
    `HALF2(a[i + 0])`, `HALF2(a[i + 2])`, each view as wide as its type) in one loop body, whose
    elements together make one contiguous run per thread starting at offset 0: node start byte ->
    the run (what one wider load could move). An index that neighbouring lanes move by one element
    is left out: their runs overlap (a stencil's neighbours, not a pack)."""
    return src.memo("adjacent_runs", lambda: _find_adjacent_runs(src))


def _find_adjacent_runs(src: Source) -> dict[int, str]:
    macros = all_view_macros(src)
    groups: dict[tuple, list] = {}
    for f, node, name, is_const, elem, write in global_accesses(src):
        if write:
            continue
        eb = type_bytes(elem) if elem else None
        if not eb:
            continue
        width = 1
        p = node.parent
        if p is not None and p.type == "argument_list" and p.parent is not None and call_name(p.parent) in macros:
            if is_store_target(p.parent):
                continue
            wb = type_bytes(macros[call_name(p.parent)].wide_type)
            if not wb or wb % eb:
                continue
            width = wb // eb
        idx = " ".join(_CAST.sub("", _subscript_index(node)).split())
        m = _OFFSET.match(idx)
        base, off = (m.group(1), int(m.group(2))) if m else (idx, 0)
        loop = enclosing(node, "for_statement", "while_statement", "do_statement")
        key = (f.name, name, base, loop.start_byte if loop is not None else -1)
        groups.setdefault(key, []).append((off, width, node, f, eb))
    out: dict[int, str] = {}
    defs: dict[str, dict] = {}
    for (fname, name, base, _), accs in groups.items():
        spans = sorted({(o, o + w) for o, w, *_ in accs})
        if len(spans) < 2 or spans[0][0] != 0:
            continue
        end = 0
        for a, b in spans:
            if a > end:
                break
            end = max(end, b)
        else:
            f = accs[0][3]
            if fname not in defs:
                defs[fname] = local_definitions(src, f)
            if x_stride(expand_index(base, defs[fname], src)) == "unit":
                continue
            desc = f"{len(spans)} loads of `{name}[{base} + 0 .. {end - 1}]` read {end} consecutive elements " \
                   f"({end * accs[0][4]} bytes) per thread"
            for *_, node, _f, _eb in accs:
                out[node.start_byte] = desc
    return out


def _load_sites(src: Source, carrier: str) -> list[SiteMatch]:
    out, seen = [], set()
    defs: dict[str, Optional[dict]] = {}
    for f, node, name, is_const, elem, write in global_accesses(src):
        if write or _in_call(node, {"__ldg", "__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv"}):
            continue
        if carrier == "ldg" and not is_const:
            continue
        if carrier == "vector_load" and elem and not _SCALAR_ELEM.match(elem) and elem not in _template_types(src):
            continue
        lanes = False
        run = adjacent_runs(src).get(node.start_byte) if carrier == "vector_load" else None
        if run is None and carrier == "vector_load" and access_stride(node)[0] in ("strided", "invariant"):
            # a float4 needs four consecutive elements per thread (unit stride in the loop), or a loop
            # whose lanes read neighbouring elements (each lane can take four, the loop stride x4)
            if defs.get(f.name) is None:
                defs[f.name] = local_definitions(src, f)
            idx = _subscript_index(node)
            if not idx or x_stride(expand_index(idx, defs[f.name], src)) != "unit":
                continue
            lanes = True
        line = src.line_of(node.start_byte)
        if (line, name) in seen:
            continue
        seen.add((line, name))
        loop = enclosing(node, "for_statement", "while_statement")
        where = f" in loop `{' '.join(src.raw[loop.start_byte:loop.end_byte].decode('utf-8', 'replace').splitlines()[0].split())[:60]}`" if loop else ""
        if carrier == "ldg":
            reason = f"`{text(node)}` reads through const pointer `{name}` on the coherent path{where}"
        elif run is not None:
            reason = (f"{run}{where}: one wider load (8 or 16 bytes) could move them, if the index keeps that "
                      "alignment")
        elif lanes:
            reason = (f"scalar load `{text(node)}`{where}: neighbouring lanes read neighbouring elements, so each lane "
                      "could take four in one 16-byte load (the loop's stride x4), if the base is 16-byte aligned")
        else:
            reason = (f"scalar load `{text(node)}`{where}: consecutive elements per thread (unit stride) could move "
                      f"in one 16-byte load, if the base is 16-byte aligned and the count a multiple of 4 "
                      f"(else a scalar tail)")
        s = _node_site(src, node, reason, f.name)
        s.code = _line_text(src, line)
        out.append(s)
    return out


def _template_types(src: Source) -> set[str]:
    """Type parameters of the file's templates (``template <typename scalar_t>``): an element type the
    instantiation decides (float, half ...)."""
    got = getattr(src, "_template_type_names", None)
    if got is None:
        got = set(re.findall(r"\b(?:typename|class)\s+([A-Za-z_]\w*)", src.code.decode("utf-8", "replace")))
        src._template_type_names = got
    return got


@finder("ldg")
def _ldg_sites(src: Source) -> list[SiteMatch]:
    return _load_sites(src, "ldg")


@finder("vector_load")
def _vload_sites(src: Source) -> list[SiteMatch]:
    return _load_sites(src, "vector_load")


@finder("vector_store")
def _vstore_sites(src: Source) -> list[SiteMatch]:
    out, seen = [], set()
    for f, node, name, is_const, elem, write in global_accesses(src):
        if not write or is_const or (elem and not _SCALAR_ELEM.match(elem) and elem not in _template_types(src)):
            continue
        stride = access_stride(node)[0]
        if stride in ("strided", "invariant"):
            continue  # as for loads: four consecutive elements per thread
        if stride == "none" and single_thread_guarded(node):
            continue  # one thread of the block stores one value: no neighbouring element of its own to pack
        line = src.line_of(node.start_byte)
        if (line, name) in seen:
            continue
        seen.add((line, name))
        s = _node_site(src, node, f"scalar store to `{text(node)}`: neighbouring elements could be one 16-byte store",
                       f.name)
        s.code = _line_text(src, line)
        out.append(s)
    return out


@finder("fast_math")
def _fast_math_sites(src: Source) -> list[SiteMatch]:
    out = []
    for f, fn, _ in device_funcs(src):
        for call in src.nodes("call_expression", within=fn):
            name = call_name(call)
            if name in PRECISE_MATH:
                s = _node_site(src, call, f"precise `{name}` could be the hardware intrinsic {PRECISE_MATH[name]}", f.name)
                s.code = _line_text(src, s.line)
                out.append(s)
        for b in src.nodes("binary_expression", within=fn):
            op = b.child_by_field_name("operator")
            if op is not None and text(op) == "/" and re.search(r"\d\.\d*f|\bf\b|float|expf|sum|\bs\b|inv|norm",
                                                               text(b)) and not re.search(r"^\s*\d+\s*/", text(b)):
                s = _node_site(src, b, f"float division `{' '.join(text(b).split())[:60]}` could be __fdividef / a "
                               "reciprocal multiply", f.name)
                s.code = _line_text(src, s.line)
                out.append(s)
    out.sort(key=lambda s: s.line)
    dedup, seen = [], set()
    for s in out:
        if s.line not in seen:
            seen.add(s.line)
            dedup.append(s)
    return dedup


_TID = re.compile(r"blockIdx\s*\.\s*x\s*\*\s*(?:blockDim\s*\.\s*x|\w+|\([^()]*\))\s*\+\s*threadIdx\s*\.\s*x|"
                  r"threadIdx\s*\.\s*x\s*\+\s*blockIdx\s*\.\s*x\s*\*\s*blockDim\s*\.\s*x|"
                  r"blockDim\s*\.\s*x\s*\*\s*blockIdx\s*\.\s*x\s*\+\s*threadIdx\s*\.\s*x")


THREAD_INDEX = _TID  # the global thread index: the line that maps threads to elements
_TWO_D = re.compile(r"\b(blockIdx|threadIdx)\s*\.\s*[yz]\b")


@finder("grid_stride")
def _grid_stride_sites(src: Source) -> list[SiteMatch]:
    out = []
    have = {(l.start_byte) for l in grid_stride_loops(src)}
    for f, fn, _ in device_funcs(src):
        if not f.is_kernel:
            continue
        if any(f.start_byte <= b < f.end_byte for b in have):
            continue
        code = src.func_code(f).decode("utf-8", "replace")
        m = _TID.search(code)
        if not m or _TWO_D.search(code):
            continue  # a 2-D (tile) mapping: grid-stride loops are a 1-D pattern
        byte = f.start_byte + len(code[:m.start()].encode())
        line = src.line_of(byte)
        out.append(SiteMatch(line, line, f.name, _line_text(src, line),
                             f"{f.name} maps one element to each thread (grid sized to the problem); a grid-stride "
                             "loop over a fixed grid amortizes per-thread setup"))
    return out


@finder("drop_grid_clamp")
def _grid_clamp_sites(src: Source) -> list[SiteMatch]:
    """Host launches whose grid grows with the problem (no cap): the clamp skill's site."""
    out = []
    raw = src.code.decode("utf-8", "replace")
    dims = {m.group(1) for m in re.finditer(r"\bdim3\s+(\w+)", raw)}
    for m in re.finditer(r"(\w+)\s*<<<\s*([^,>]+),", raw):
        grid = " ".join(m.group(2).split())
        if grid in dims or grid.startswith("dim3"):
            continue  # a 2-D/3-D grid: the clamp + grid-stride pair is a 1-D pattern
        names = set(re.findall(r"\b[A-Za-z_]\w*\b", grid)) - set(src.defines) - {"unsigned", "int", "long", "size_t"}
        if not names:
            continue  # a constant grid (literals and macros only): nothing grows with the problem
        if re.search(r"\+.*\)\s*/|/|cdiv|ceil", grid) or re.fullmatch(r"\w+", grid):
            byte = len(raw[:m.start()].encode())
            line = src.line_of(byte)
            f = src.function_at(byte)
            if re.fullmatch(r"\w+", grid) and f is not None and re.search(
                    r"\bif\s*\(\s*%s\s*>" % re.escape(grid), src.func_code(f).decode("utf-8", "replace")):
                continue  # already clamped
            out.append(SiteMatch(line, line, f.name if f else "", _line_text(src, line),
                                 f"launch of {m.group(1)} sizes the grid from the problem (`{grid[:50]}`); clamp it to "
                                 "the resident capacity and let a grid-stride loop cover the rest"))
    return out


@finder("shared_padding")
def _padding_sites(src: Source) -> list[SiteMatch]:
    out = []
    for decl, name, dims in src.shared_decls:
        if len(dims) < 2:
            continue
        last = " ".join(text(dims[-1]).split())
        if re.search(r"\+\s*(\d+|\w*PAD\w*)\s*$", last):
            continue
        s = _node_site(src, decl, f"shared array `{name}` [..][{last}] has no padding column: column accesses hit "
                       "one bank")
        s.code = " ".join(text(decl).split())[:160]
        out.append(s)
    return out


def thread_coords(src: Source, f) -> tuple[set[str], dict[str, set[str]]]:
    """(coordinates, dependence): locals set from threadIdx/blockIdx, and for every local the
    coordinates its value depends on (through other locals, to a fixpoint)."""
    code = src.func_code(f).decode("utf-8", "replace")
    decls = [(m.group(1), m.group(2)) for m in re.finditer(r"\b(\w+)\s*=\s*([^;=][^;]*);", code)]
    coords = {n for n, e in decls if re.search(r"\b(threadIdx|blockIdx)\b", e)}
    dep: dict[str, set[str]] = {c: {c} for c in coords}
    changed = True
    while changed:
        changed = False
        for name, expr in decls:
            got = set(dep.get(name, set()))
            for v in re.findall(r"\b[A-Za-z_]\w*\b", expr):
                got |= dep.get(v, set())
            if got != dep.get(name, set()):
                dep[name] = got
                changed = True
    return coords, dep


@finder("shared_tile")
def _shared_tile_sites(src: Source) -> list[SiteMatch]:
    """Global loads inside a loop whose index moves with the loop while other threads read the same
    data (the index leaves out some of the thread's coordinates, as A[row * K + k] in a matmul, or
    all of them, as a weight vector read by every row): a tile staged in shared memory is reused."""
    out, seen = [], set()
    tvars: dict[str, tuple] = {}
    for f, node, name, is_const, elem, write in global_accesses(src):
        if write:
            continue
        loop = enclosing(node, "for_statement")
        if loop is None:
            continue
        init = loop.child_by_field_name("initializer")
        var = ""
        if init is not None:
            m = re.search(r"\b(\w+)\s*=", text(init))
            var = m.group(1) if m else ""
        idx = text(node.child_by_field_name("indices") or node)
        if not var or not re.search(r"\b%s\b" % re.escape(var), idx) or "threadIdx" in idx:
            continue
        if f.name not in tvars:
            tvars[f.name] = thread_coords(src, f)
        coords, dep = tvars[f.name]
        used: set[str] = set()
        for v in re.findall(r"\b[A-Za-z_]\w*\b", idx + " " + name):
            used |= dep.get(v, set())
        if not coords or used >= coords:
            continue  # each thread reads data no other thread reads: nothing to share
        if f.name in seen:
            continue
        seen.add(f.name)
        s = _node_site(src, node, f"`{text(node)}` is re-read from global memory in loop over {var} by every thread "
                       "that shares it: stage a tile in shared memory", f.name)
        s.code = _line_text(src, s.line)
        out.append(s)
    return out + _transposed_copy_sites(src)


def _transposed_copy_sites(src: Source) -> list[SiteMatch]:
    """A global store whose index swaps the roles of a global load's index (y[c * R + r] = x[r * C + c]):
    one of the two is strided; staging a tile in shared memory makes both coalesced."""
    out = []
    for f, fn, _ in device_funcs(src):
        for a in src.nodes("assignment_expression", within=fn):
            left, right = a.child_by_field_name("left"), a.child_by_field_name("right")
            if left is None or right is None or left.type != "subscript_expression":
                continue
            li = " ".join(text(left.child_by_field_name("indices") or left).split())
            lm = re.search(r"\b(\w+)\s*\*\s*\w+\s*\+\s*(\w+)\b", li)
            if not lm:
                continue
            for sub in walk(right):
                if sub.type != "subscript_expression":
                    continue
                ri = " ".join(text(sub.child_by_field_name("indices") or sub).split())
                rm = re.search(r"\b(\w+)\s*\*\s*\w+\s*\+\s*(\w+)\b", ri)
                if rm and rm.group(1) == lm.group(2) and rm.group(2) == lm.group(1):
                    s = _node_site(src, a, f"`{' '.join(text(a).split())[:70]}` reads rows and writes columns: one side "
                                   "is strided; a shared tile makes both coalesced", f.name)
                    s.code = _line_text(src, s.line)
                    out.append(s)
                    break
    done = {s.function for s in out}
    out += [s for s in _strided_transposes(src) if s.function not in done]
    for f, loop, staged in mma_loops(src):  # tensor-core fragments loaded straight from global memory
        if not staged and f.name not in {s.function for s in out}:
            s = _node_site(src, loop, "fragments are loaded from global memory in every iteration: stage the tiles "
                           "in shared memory for the warps that share them", f.name)
            s.end_line = s.line
            s.code = _line_text(src, s.line)
            out.append(s)
    return out


def local_definitions(src: Source, f) -> dict[str, str]:
    """Scalar locals assigned once in a function: name -> the expression (what index expressions are
    built from: ``int xIndex = blockIdx.x * TILE + threadIdx.x``)."""
    code = src.func_code(f).decode("utf-8", "replace")
    seen: dict[str, list[str]] = {}
    for m in re.finditer(r"(?:\b(?:const\s+)?(?:unsigned\s+)?(?:int|long|size_t|int64_t|uint32_t|int32_t|auto)\s+)?"
                         r"\b([A-Za-z_]\w*)\s*=(?!=)\s*([^;{}]+);", code):
        seen.setdefault(m.group(1), []).append(m.group(2))
    return {k: v[0] for k, v in seen.items() if len(v) == 1}


def expand_index(expr: str, defs: dict[str, str], src: Source, depth: int = 4) -> str:
    """An index expression with single-assignment locals and macros substituted (parenthesized)."""
    expr = _CAST.sub("", expr)
    for _ in range(depth):
        new = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: "(" + _CAST.sub("", defs[m.group(0)]) + ")"
                     if m.group(0) in defs else m.group(0), expr)
        if new == expr:
            break
        expr = new
    return src.expand(expr)


def _top_factors(term: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in term:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "*" and depth == 0:
            out.append(cur)
            cur = ""
            continue
        cur += ch
    out.append(cur)
    return [t.strip() for t in out if t.strip()]


def x_stride(expr: str) -> str:
    """How threadIdx.x moves an (expanded) index: "unit" (a term of its own, possibly inside a sum:
    neighbouring lanes touch neighbouring elements), "strided" (only inside a product with something
    else: neighbouring lanes are a stride apart), "none"."""
    unit = strided = False
    stack = [expr]  # an explicit stack: a recursive closure would leave a reference cycle per call
    while stack:
        e = stack.pop()
        for t in _top_terms(strip_parens(e)):
            if "threadIdx.x" not in t.replace(" ", ""):
                continue
            fs = _top_factors(t)
            if len(fs) == 1:
                inner = strip_parens(fs[0])
                if inner.replace(" ", "") == "threadIdx.x":
                    unit = True
                elif inner != fs[0] or len(_top_terms(inner)) > 1:
                    stack.append(inner)
                else:
                    unit = True
            elif all(re.fullmatch(r"\d+", strip_parens(x)) or "threadIdx.x" in x.replace(" ", "") for x in fs) and \
                    sum("threadIdx.x" in x.replace(" ", "") for x in fs) == 1 and \
                    all(strip_parens(x) == "1" for x in fs if "threadIdx.x" not in x.replace(" ", "")):
                unit = True
            else:
                strided = True
    return "unit" if unit else ("strided" if strided else "none")


def _subscript_index(node) -> str:
    idx = node.child_by_field_name("indices") or node.child_by_field_name("index")
    if idx is None:
        args = [c for c in node.named_children if c.type == "subscript_argument_list"]
        idx = args[0] if args else None
    return text(idx).strip("[] ") if idx is not None else ""


def _strided_transposes(src: Source) -> list[SiteMatch]:
    """A copy ``out[i] = in[j]`` between global arrays whose load moves one element per lane and whose
    store moves a stride per lane (or the reverse): a transposing copy written through index
    variables (``odata[index_out] = idata[index_in]``)."""
    out = []
    for f, fn, _ in device_funcs(src):
        if not f.is_kernel:
            continue
        const, _ = _pointer_names(src, f, fn)
        defs = None
        for a in src.nodes("assignment_expression", within=fn):
            left, right = a.child_by_field_name("left"), a.child_by_field_name("right")
            if left is None or right is None or left.type != "subscript_expression":
                continue
            la = left.child_by_field_name("argument")
            if la is None or text(la) not in const:
                continue
            loads = [n for n in walk(right) if n.type == "subscript_expression" and n.child_by_field_name("argument")
                     is not None and text(n.child_by_field_name("argument")) in const]
            if not loads:
                continue
            if defs is None:
                defs = local_definitions(src, f)
            st = x_stride(expand_index(_subscript_index(left), defs, src))
            lds = {x_stride(expand_index(_subscript_index(n), defs, src)) for n in loads}
            if (st == "strided" and "unit" in lds) or (st == "unit" and lds == {"strided"}):
                s = _node_site(src, a, f"`{' '.join(text(a).split())[:70]}`: the load moves "
                               f"{'one element' if st == 'strided' else 'a stride'} per lane, the store "
                               f"{'a stride' if st == 'strided' else 'one element'}: a shared tile makes both coalesced",
                               f.name)
                s.code = _line_text(src, s.line)
                out.append(s)
                break
    return out


@finder("coalesced_transpose")
def _transpose_sites(src: Source) -> list[SiteMatch]:
    return _transposed_copy_sites(src)


def _dot_product(loop) -> bool:
    """A loop accumulating products of two different arrays indexed by its variable (``acc += A[..k]
    * B[k..]``): one thread computes one output completely (a GEMM's serial k loop). Nothing is left
    to combine across threads, so a warp reduction does not apply; operand reuse (register or shared
    tiles) does."""
    var = loop_var(loop)
    if not var:
        return False
    for node in walk(loop):
        if node.type == "binary_expression" and text(node.child_by_field_name("operator") or node)[:1] == "*":
            sides = [node.child_by_field_name("left"), node.child_by_field_name("right")]
            arrays = set()
            for side in sides:
                for sub in (walk(side) if side is not None else []):
                    if sub.type == "subscript_expression" and re.search(rf"\b{re.escape(var)}\b", text(sub)):
                        arrays.add(text(sub.child_by_field_name("argument") or sub).strip())
            if len(arrays) >= 2:
                return True
    return False


# --------------------------------------------------------------------------- loops and constants
def constants(src) -> dict[str, str]:
    """Compile-time integer names: macros, ``constexpr`` / ``const`` integers with a literal value and
    template parameters' defaults (``template <const int TM = 8>``), memoized on the source."""
    got = getattr(src, "_value_constants", None)
    if got is None:
        code = src.code.decode("utf-8", "replace")
        got = dict(src.defines)
        for m in re.finditer(r"\b(?:static\s+)?(?:constexpr|const)\s+(?:unsigned\s+)?(?:int|size_t|long)\s+(\w+)\s*=\s*"
                             r"([\w\s()+\-*/<>]+?)\s*[;,>]", code):
            got.setdefault(m.group(1), m.group(2))
        for t in re.finditer(r"\btemplate\s*<([^<>]*)>", code):
            for m in re.finditer(r"(?:const\s+)?(?:unsigned\s+)?(?:int|size_t)\s+(\w+)\s*=\s*([^,]+)", t.group(1)):
                got.setdefault(m.group(1), m.group(2).strip())
        src._value_constants = got
    return got


def int_const(src, expr: str) -> Optional[int]:
    consts = constants(src)
    e = expr.strip()
    for _ in range(4):
        new = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: "(" + consts[m.group(0)] + ")" if m.group(0) in consts
                     else m.group(0), e)
        if new == e:
            break
        e = new
    # digits and operators only, small: the query is untrusted code (no powers, no huge shifts or literals)
    if re.fullmatch(r"[\d\s()+\-*/<>]+", e or "") and len(e) <= 200 and "**" not in e and \
            all(int(n) < 1 << 32 for n in re.findall(r"\d+", e)) and \
            all(int(n) <= 63 for n in re.findall(r"<<\s*\(*\s*(\d+)", e)) and "<<(" not in e.replace(" ", ""):
        try:
            v = eval(compile(e.replace("/", "//"), "<const>", "eval"), {"__builtins__": {}})  # digits and operators only
            return int(v)
        except Exception:  # noqa: BLE001 - not a constant expression after all
            return None
    return None


def runtime_bound(src, loop) -> bool:
    """A for loop whose bound is not a compile-time constant (a problem axis, a parameter)."""
    cond = loop.child_by_field_name("condition")
    if cond is None:
        return False
    m = re.search(r"(<=?|>=?|!=)\s*(.+)$", " ".join(text(cond).split()))
    return bool(m) and int_const(src, m.group(2)) is None


def serial_loops(src, reuse_frac: float = 0.0, functions: Optional[set] = None) -> list[tuple[int, str]]:
    """(line, why) of the loops where one thread does what many could: an accumulation over a runtime
    bound with a unit step whose data is not spread over the lanes (its loads move a stride per lane
    or none: a row per thread), and shared-memory tree reductions with a barrier per level. Kept on
    the source per ``reuse_frac`` (several finders ask)."""
    loops = src.memo(("serial_loops", reuse_frac >= 0.99), lambda: _serial_loops(src, reuse_frac))
    return [(ln, why) for fname, ln, why in loops if functions is None or fname in functions]


def _serial_loops(src, reuse_frac: float) -> list[tuple[str, int, str]]:
    out = []
    for f, fn, _ in device_funcs(src):
        defs = None
        for loop in src.nodes("for_statement", within=fn):
            upd = " ".join(text(loop.child_by_field_name("update") or loop).split())
            body = " ".join(text(loop.child_by_field_name("body") or loop).split())
            var = loop_var(loop)
            if var and re.search(r">>=\s*1|/=\s*2|=\s*\w+\s*>>\s*1|\*=\s*2|<<=\s*1", upd) and \
                    re.search(r"__syncthreads|\bsync\s*\(|\.sync\s*\(", body) and \
                    re.search(r"\w+\s*\[[^\]]+\]\s*(\+=|=[^;]*\+)[^;]*\[[^\]]*\b%s\b" % re.escape(var), body):
                out.append((f.name, src.line_of(loop.start_byte), "a shared-memory tree reduction with a barrier per level"))
                continue
            if not runtime_bound(src, loop):
                continue
            if re.search(r"blockDim|gridDim|stride|\+=\s*[A-Za-z_]", upd) and not re.search(r"\+=\s*1\b", upd):
                continue
            if not re.search(r"\b\w+\s*(\+=|=\s*fmaxf?\s*\(|=\s*max\s*\(|=\s*\w+\s*\+)", body):
                continue
            if "atomic" in body or "__syncthreads" in body or "__shfl" in body:
                continue
            if _dot_product(loop) and reuse_frac >= 0.99:
                continue  # a GEMM's k loop: reuse, not a serial row
            if defs is None:
                defs = local_definitions(src, f)
            strides = set()
            for n in walk(loop):
                if n.type == "subscript_expression" and enclosing(n, "for_statement") == loop:
                    idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
                    if idx is None:
                        args = [c for c in n.named_children if c.type == "subscript_argument_list"]
                        idx = args[0] if args else None
                    arg = n.child_by_field_name("argument")
                    if idx is not None:
                        full = text(idx).strip("[] ")
                        if arg is not None and arg.type == "identifier" and arg.text.decode() in defs:
                            full = f"({defs[arg.text.decode()]}) + {full}"  # a row pointer: its row
                        strides.add(x_stride(expand_index(full, defs, src)))
            if "unit" in strides:
                continue  # lanes take neighbouring elements: the loop is already spread over threads
            head = " ".join(text(loop).split("{")[0].split())[:80]
            out.append((f.name, src.line_of(loop.start_byte), f"`{head}` accumulates a whole row in one thread"))
    return out


def _scan_lines(src: Source) -> set[int]:
    """Lines of the loops `_scan_sites` reads as a prefix scan done one element at a time. A
    reduction does not fit them: each element needs its own running sum, not one total of a row."""
    return src.memo("scan_lines", lambda: {s.line for s in _scan_sites(src)})


@finder("warp_shuffle_reduce", "block_reduce_shared")
def _reduce_sites(src: Source) -> list[SiteMatch]:
    out = []
    scans = _scan_lines(src)
    for f, fn, _ in device_funcs(src):
        for line, why in serial_loops(src, functions={f.name}):
            if line in scans:
                continue
            tree = "tree" in why
            out.append(SiteMatch(line, line, f.name, _line_text(src, line),
                                 "shared-memory tree reduction with a barrier per level" if tree else
                                 "serial accumulation loop: partial results could be combined across a warp in registers"))
        for call in src.nodes("call_expression", within=fn):
            if call_name(call) == "atomicAdd" and not single_thread_guarded(call):
                line = src.line_of(call.start_byte)
                out.append(SiteMatch(line, line, f.name, _line_text(src, line),
                                     "per-element atomic: reduce within the warp/block first"))
    return out


# cooperative groups spell the thread's index in its group `g.thread_rank()`
_ONE_THREAD = re.compile(r"\b(tid|lane\w*|threadIdx\s*\.\s*x|laneId|lane_id|warp_?id|t)\s*==\s*0\b|"
                         r"\bthread_rank\s*\(\s*\)\s*==\s*0\b|"
                         r"\b0\s*==\s*(tid|lane\w*|threadIdx\s*\.\s*x|\w+\s*\.\s*thread_rank\s*\(\s*\))")


def single_thread_guarded(node) -> bool:
    """Whether a statement runs in one thread of its block or warp only (``if (lane == 0) ...``):
    an atomic there publishes an already reduced value."""
    p = enclosing(node, "if_statement", "conditional_expression")
    while p is not None:
        cond = p.child_by_field_name("condition")
        if cond is not None and _ONE_THREAD.search(" ".join(text(cond).split())):
            return True
        p = enclosing(p, "if_statement", "conditional_expression")
    return False


def mma_loops(src: Source) -> list[tuple]:
    """(function, loop, staged) for loops that multiply tensor-core fragments (``wmma::mma_sync``):
    ``staged`` when every fragment the loop loads comes from a shared array."""
    return src.memo("mma_loops", lambda: _find_mma_loops(src))


def _find_mma_loops(src: Source) -> list[tuple]:
    out = []
    shared = set(src.shared_names)
    for f, fn, _ in device_funcs(src):
        for loop in src.nodes("for_statement", within=fn):
            calls = [c for c in src.nodes("call_expression", within=loop)]
            if not any(call_name(c).endswith("mma_sync") for c in calls):
                continue
            loads = [c for c in calls if call_name(c).endswith("load_matrix_sync")]
            staged = bool(loads) and all(
                any(re.search(r"\b%s\b" % re.escape(n), text(a)) for a in (c.child_by_field_name("arguments").named_children[1:2]
                                                                           if c.child_by_field_name("arguments") is not None
                                                                           else []) for n in shared) for c in loads)
            out.append((f, loop, staged))
            break
    return out


def _staged_dot_loops(src: Source, need_half: bool = False) -> list[SiteMatch]:
    """Loops accumulating products of two operands staged in shared memory (a tiled GEMM's inner
    loop): where the steps that build on a shared tile apply (kept on the source: six finders ask)."""
    return list(src.memo(("staged_dot_loops", need_half), lambda: _find_staged_dot_loops(src, need_half)))


def _find_staged_dot_loops(src: Source, need_half: bool) -> list[SiteMatch]:
    out = []
    for f, loop, staged in mma_loops(src):  # tensor-core fragments loaded from shared tiles
        if staged:
            s = _node_site(src, loop, f"`{' '.join(text(loop).split('{')[0].split())[:60]}` multiplies fragments "
                           "loaded from shared tiles", f.name)
            s.end_line = s.line
            s.code = _line_text(src, s.line)
            out.append(s)
    if out:
        return out
    shared = set(src.shared_names)
    for f, fn, _ in device_funcs(src):
        for loop in src.nodes("for_statement", within=fn):
            var = loop_var(loop)
            body = " ".join(text(loop.child_by_field_name("body") or loop).split())
            if not var or not re.search(r"\+=|fmaf?\s*\(|__hfma|__fmaf", body):
                continue
            arrays = set()
            for node in walk(loop):
                if node.type == "subscript_expression" and re.search(r"\b%s\b" % re.escape(var), text(node)):
                    base = node
                    while base.type == "subscript_expression" and base.child_by_field_name("argument") is not None:
                        base = base.child_by_field_name("argument")
                    arrays.add(text(base))
            if len(arrays & shared) < 2:
                continue
            if need_half and not re.search(r"\b(half|__half|half2|__half2|__nv_bfloat16)\b",
                                           src.func_code(f).decode("utf-8", "replace")):
                continue
            s = _node_site(src, loop, f"`{' '.join(text(loop).split('{')[0].split())[:60]}` multiplies operands staged "
                           "in shared memory", f.name)
            s.end_line = s.line
            s.code = _line_text(src, s.line)
            out.append(s)
            break
    return out


def _tile_step_finder(carrier: str) -> Finder:
    """Steps that build on a shared tile (a second stage, a k-major operand tile, 16-byte shared
    loads, asynchronous copies) apply where a loop multiplies operands staged in shared memory, in a
    function that does not have the carrier yet; a kernel without such a loop has no site (the plan
    puts the shared tile first: `after:shared_tile`)."""
    def find(src: Source) -> list[SiteMatch]:
        det = DETECTORS.get(carrier)
        have = set()
        if det is not None:
            try:
                have = {s.function for s in det(src)}
            except Exception:  # a detector bug must not fail a query
                have = set()
        return [s for s in _staged_dot_loops(src) if s.function not in have]
    return find


for _c in ("double_buffer", "transposed_tile", "vector_shared_load", "shared_vector_load", "async_copy",
           "multi_stage_pipeline"):
    FINDERS[_c] = _tile_step_finder(_c)


@finder("tensor_core_wmma")
def _tensor_core_sites(src: Source) -> list[SiteMatch]:
    """Half-precision operands multiplied and accumulated in a loop (global or staged): what a
    tensor-core fragment can take over. Float kernels have none (wmma takes half / bf16 inputs)."""
    out = _staged_dot_loops(src, need_half=True)
    if out:
        return out
    for f, fn, _ in device_funcs(src):
        if not re.search(r"\b(half|__half|half2|__half2|__nv_bfloat16)\b", src.func_code(f).decode("utf-8", "replace")):
            continue
        for loop in src.nodes("for_statement", within=fn):
            if _dot_product(loop):
                s = _node_site(src, loop, "a half-precision dot-product loop: tensor-core fragments (wmma) can "
                               "multiply-accumulate whole tiles", f.name)
                s.end_line = s.line
                s.code = _line_text(src, s.line)
                out.append(s)
                break
    return out


@finder("register_tile")
def _register_tile_sites(src: Source) -> list[SiteMatch]:
    """A thread accumulating products of two global operands over a loop (one output per thread):
    computing a small block of outputs per thread reuses every loaded operand from registers."""
    out = []
    for f, loop, staged in mma_loops(src):
        code = src.func_code(f).decode("utf-8", "replace")
        if staged and not re.search(r"fragment\s*<\s*(?:nvcuda::)?(?:wmma::)?accumulator[^;]*\w+\s*\[", code):
            s = _node_site(src, loop, "one accumulator fragment per warp: a warp tile of several fragments reuses "
                           "each loaded fragment for several products", f.name)
            s.end_line = s.line
            s.code = _line_text(src, s.line)
            out.append(s)
    for f, fn, _ in device_funcs(src):
        if any(n.type == "array_declarator" for d in src.nodes("declaration", within=fn) for n in walk(d)) and \
                re.search(rb"\b\w+\s*\[[^]]+\]\s*\[[^]]+\]\s*\+=", src.func_code(f)):
            continue  # already a 2-D register accumulator
        const, _ = _pointer_names(src, f, fn)
        operands = set(const) | set(src.shared_names)  # global operands, or tiles staged in shared memory
        for loop in src.nodes("for_statement", within=fn):
            body = loop.child_by_field_name("body")
            if body is None:
                continue
            for a in walk(body):
                if a.type != "assignment_expression" or text(a.child_by_field_name("operator") or a.children[1]) != "+=":
                    continue
                right = a.child_by_field_name("right")
                reads = []
                for n in walk(right):
                    if n.type != "subscript_expression":
                        continue
                    base = n
                    while base.type == "subscript_expression" and base.child_by_field_name("argument") is not None:
                        base = base.child_by_field_name("argument")
                    if base is not n and text(base) in operands and n.parent is not None and \
                            n.parent.type != "subscript_expression":
                        reads.append(n)
                if len(reads) >= 2 or (len(reads) == 1 and "*" in text(right)):
                    s = _node_site(src, a, f"one output per thread: `{' '.join(text(a).split())[:60]}` loads its operands "
                                   "for a single accumulation; a register tile reuses each load for several outputs", f.name)
                    s.code = _line_text(src, s.line)
                    out.append(s)
                    break
            if out and out[-1].function == f.name:
                break
    return out


@finder("warp_scan", "block_scan")
def _scan_sites(src: Source) -> list[SiteMatch]:
    """A serial running sum written back element by element (a prefix scan done one at a time);
    found once per source (the reduction finders ask which loops they are)."""
    return list(src.memo("scan_sites", lambda: _find_scan_sites(src)))


def _find_scan_sites(src: Source) -> list[SiteMatch]:
    out = []
    for f, fn, _ in device_funcs(src):
        for loop in src.nodes("for_statement", within=fn):
            body = " ".join(text(loop.child_by_field_name("body") or loop).split())
            m = re.search(r"\b(\w+)\s*\+=", body)
            if m and re.search(r"\w+\s*\[[^]]+\]\s*=\s*%s\b" % re.escape(m.group(1)), body):
                s = _node_site(src, loop, f"serial running sum `{m.group(1)}` written per element: a prefix scan "
                               "done one element at a time; scan across a warp with shuffles", f.name)
                s.end_line = s.line
                s.code = _line_text(src, s.line)
                out.append(s)
                continue
            # each thread sums every element before its own and stores the sum: a prefix recomputed
            # per element (O(n^2) work)
            cond = " ".join(text(loop.child_by_field_name("condition") or loop).split())
            var = loop_var(loop)
            bound = re.search(r"<=?\s*(\w+)\s*$", cond)
            if m and var and bound and bound.group(1) != var:
                coords, dep = thread_coords(src, f)
                after = src.code[loop.end_byte:fn.end_byte].decode("utf-8", "replace")
                if coords and dep.get(bound.group(1), set()) & coords and \
                        re.search(r"\w+\s*\[[^]]+\]\s*=\s*%s\s*;" % re.escape(m.group(1)), after[:400]):
                    s = _node_site(src, loop, f"each thread re-sums every element before its own (`{m.group(1)}`): a "
                                   "prefix recomputed per element; a warp scan with shuffles computes all of them "
                                   "at once", f.name)
                    s.end_line = s.line
                    s.code = _line_text(src, s.line)
                    out.append(s)
    return out


@finder("decoupled_lookback", "dynamic_tile_id")
def _cross_block_scan_sites(src: Source) -> list[SiteMatch]:
    """A scan that crosses blocks (per-element running sums, or a warp / block scan already there):
    where tiles can publish aggregates and look back instead of a second pass. Other kernels (a
    reduction, an element-wise map) have no site."""
    out = list(_scan_sites(src))
    if out:
        return out
    for carrier in ("warp_scan", "block_scan"):
        det = DETECTORS.get(carrier)
        try:
            sites = det(src) if det is not None else []
        except Exception:  # a detector bug must not fail a query
            sites = []
        for site in sites[:1]:
            out.append(SiteMatch(site.line, site.line, site.function, _line_text(src, site.line),
                                 f"a {carrier.replace('_', ' ')} whose blocks combine across the grid"))
    return out[:1]


@finder("atomic_per_block", "privatized_atomics")
def _atomic_sites(src: Source) -> list[SiteMatch]:
    out = []
    for f, fn, _ in device_funcs(src):
        for call in src.nodes("call_expression", within=fn):
            if call_name(call).startswith("atomic"):
                args = call.child_by_field_name("arguments")
                first = text(args.named_children[0]) if args is not None and args.named_children else ""
                if any(re.search(r"\b%s\b" % re.escape(n), first) for n in src.shared_names):
                    continue
                if single_thread_guarded(call):
                    continue  # one atomic per block or warp: already aggregated
                s = _node_site(src, call, f"global `{call_name(call)}` per element/thread: aggregate per block first",
                               f.name)
                s.code = _line_text(src, s.line)
                out.append(s)
    return out


# --------------------------------------------------------------------------- two-pass row statistics
_ASSIGN = re.compile(r"\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*([-+*/]?=)(?!=)\s*([^;]+);")


def _reductions(src: Source, f, fn) -> list[tuple[int, str, str, str]]:
    """(line, result variable, kind "max" | "sum", input text) of the reductions of a device function
    in source order: a loop that accumulates into a scalar (``s += ...``, ``m = fmaxf(m, ...)``), or
    a call of a reducing helper (a device function of this file that shuffles across a warp, or whose
    name says reduce) assigned to a variable."""
    out = []
    reducers = {g.name for g, gfn, _ in device_funcs(src)
                if b"__shfl" in src.func_code(g) or re.search(r"reduce", g.name, re.I)}
    reducers |= {"__reduce_add_sync", "__reduce_max_sync"}
    for loop in src.nodes("for_statement", within=fn):
        if loop.parent is not None and enclosing(loop.parent, "for_statement") is not None:
            continue  # outermost loops only: an inner loop is part of its loop's pass
        var = loop_var(loop)
        body = " ".join(text(loop.child_by_field_name("body") or loop).split())
        if not var or not re.search(r"\[[^\]]*\b%s\b" % re.escape(var), body):
            continue
        m = re.search(r"\b(\w+)\s*=\s*(?:fmaxf|max|fmax)\s*\(\s*\1\s*,\s*([^;]+)\)\s*;", body)
        if m:
            out.append((src.line_of(loop.start_byte), m.group(1), "max", m.group(2)))
            continue
        for m in re.finditer(r"\b(\w+)\s*\+=\s*([^;]+);", body):
            # an accumulator lives across iterations: declared before the loop, not in its body
            if not re.search(r"\b(?:float|double|int|half|__half|auto|float2|float4)\s+%s\b" % re.escape(m.group(1)), body):
                out.append((src.line_of(loop.start_byte), m.group(1), "sum", m.group(2)))
                break
    for call in src.nodes("call_expression", within=fn):
        name = call_name(call).split("<")[0]
        if name not in reducers:
            continue
        p = call.parent
        while p is not None and p.type not in ("assignment_expression", "init_declarator", "expression_statement",
                                               "compound_statement"):
            p = p.parent
        if p is None or p.type not in ("assignment_expression", "init_declarator"):
            continue
        left = p.child_by_field_name("left") or p.child_by_field_name("declarator")
        args = call.child_by_field_name("arguments")
        kind = "max" if re.search(r"max", name, re.I) else "sum"
        out.append((src.line_of(call.start_byte), declarator_name(left) or text(left).strip(), kind,
                    text(args) if args is not None else ""))
    out.sort(key=lambda r: r[0])
    return out


def _depends(code: str) -> dict[str, set[str]]:
    """Variable -> the variables its assigned values mention, transitively."""
    dep: dict[str, set[str]] = {}
    for m in _ASSIGN.finditer(code):
        dep.setdefault(m.group(1), set()).update(re.findall(r"\b[A-Za-z_]\w*\b", m.group(3)))
    changed = True
    while changed:
        changed = False
        for v, ds in dep.items():
            more = set().union(*(dep.get(d, set()) for d in ds)) - ds
            if more:
                ds |= more
                changed = True
    return dep


def _second_passes(src: Source, first_kind: str, second_kind: str, exp: bool) -> list[tuple]:
    """(function, reduction, earlier reduction) where a reduction of ``second_kind`` reads the result
    of an earlier one of ``first_kind`` (a statistic that needs the previous pass's result)."""
    out = []
    for f, fn, _ in device_funcs(src):
        reds = _reductions(src, f, fn)
        if len(reds) < 2:
            continue
        dep = _depends(src.func_code(f).decode("utf-8", "replace"))
        for j, (line, var, kind, inp) in enumerate(reds):
            if kind != second_kind or (exp and not re.search(r"\b(__)?expf?\s*\(|exp2f?\s*\(", inp + " " + var)):
                continue
            names = set(re.findall(r"\b[A-Za-z_]\w*\b", inp))
            for n in list(names):
                names |= dep.get(n, set())
            earlier = [r for r in reds[:j] if r[2] == first_kind and r[1] != var and r[1] in names]
            if earlier:
                out.append((f, reds[j], earlier[-1]))
                break
    return out


def _pass_site(src: Source, f, red, reason: str) -> SiteMatch:
    line = red[0]
    return SiteMatch(line, line, f.name, _line_text(src, line), reason)


@finder("single_pass_stats")
def _single_pass_sites(src: Source) -> list[SiteMatch]:
    """A second sum over the data that needs the first sum's result (a variance after a mean): both
    statistics can come from one sweep (Welford / Chan, or sum and sum of squares together)."""
    return [_pass_site(src, f, red, f"`{red[1]}` sums again over the data with `{prev[1]}` (line {prev[0]}) from an "
                       "earlier pass: mean and variance can come from one sweep")
            for f, red, prev in _second_passes(src, "sum", "sum", exp=False)]


@finder("online_softmax")
def _online_softmax_sites(src: Source) -> list[SiteMatch]:
    """A sum of exponentials that needs a maximum from an earlier pass: a running maximum with the
    sum rescaled when it grows gives both in one sweep."""
    return [_pass_site(src, f, red, f"`{red[1]}` sums exponentials after a separate max pass (`{prev[1]}`, line "
                       f"{prev[0]}): an online (running-max) softmax needs one sweep")
            for f, red, prev in _second_passes(src, "max", "sum", exp=True)]


def y_stride(expr: str) -> str:
    """x_stride for threadIdx.y (the axis a 2-D mapping may have put on the contiguous dimension)."""
    return x_stride(expr.replace("threadIdx.x", "threadIdx.w").replace("threadIdx.y", "threadIdx.x"))


@finder("coalesced_access")
def _uncoalesced_sites(src: Source) -> list[SiteMatch]:
    """Global accesses of a 2-D mapping where threadIdx.x moves a stride per lane and threadIdx.y one
    element: swapping the roles of the thread axes puts a warp on consecutive addresses."""
    out = []
    for f, fn, _ in device_funcs(src):
        if not f.is_kernel:
            continue
        defs = local_definitions(src, f)
        swapped, coalesced = [], False
        for g, node, name, is_const, elem, write in global_accesses(src):
            if g.name != f.name:
                continue
            idx = expand_index(_subscript_index(node), defs, src)
            xs = x_stride(idx)
            coalesced |= xs == "unit"
            if xs == "strided" and y_stride(idx) == "unit":
                swapped.append(node)
        try:
            from mining.carriers import vector_accesses

            coalesced |= any(src.function_at(v.node.start_byte) is not None and
                             src.function_at(v.node.start_byte).name == f.name for v in vector_accesses(src))
        except Exception:  # a detector bug must not fail a query
            pass
        if swapped and not coalesced:  # a side already coalesced (a transpose) would lose by the swap
            node = swapped[0]
            s = _node_site(src, node, f"`{text(node)}`: threadIdx.x moves a stride per lane and threadIdx.y one "
                           "element: swap the thread axes so a warp reads consecutive addresses", f.name)
            s.code = _line_text(src, s.line)
            out.append(s)
    return out


def _row_per_thread_lines(src: Source) -> list[tuple[int, str]]:
    """(line, function) of the accumulating loops in which one thread walks a whole row."""
    scans = _scan_lines(src)
    out = []
    for line, why in serial_loops(src):
        if "tree" in why or line in scans:
            continue
        f = src.function_at(src._line_starts[line - 1])
        out.append((line, f.name if f else ""))
    return out


@finder("block_per_row")
def _row_per_thread_sites(src: Source) -> list[SiteMatch]:
    """One thread walking a whole row in an accumulating loop: a block per row sweeps it together."""
    return [SiteMatch(line, line, fn, _line_text(src, line),
                      "one thread accumulates a whole row: a block per row sweeps it in block-stride steps "
                      "and reduces the partials") for line, fn in _row_per_thread_lines(src)]


@finder("warp_per_row")
def _row_per_warp_sites(src: Source) -> list[SiteMatch]:
    """The same loops: for rows of up to a few thousand elements a warp per row sweeps them with no
    barrier (lanes stride the row, a shuffle reduction combines them)."""
    return [SiteMatch(line, line, fn, _line_text(src, line),
                      "one thread accumulates a whole row: a warp per row strides it by 32 lanes and combines "
                      "the lanes' partials with shuffles, no barrier") for line, fn in _row_per_thread_lines(src)]


@finder("thread_coarsening")
def _coarsening_sites(src: Source) -> list[SiteMatch]:
    """Kernels mapping one element to each thread: several elements per thread (a pack, rows) give
    more independent work per thread and wider accesses."""
    out = []
    for s in _grid_stride_sites(src):
        out.append(SiteMatch(s.line, s.end_line, s.function, s.code, f"{s.function} maps one element to each thread: "
                             "give each thread several (a compile-time pack)"))
    return out


# the shared-memory tree reduction ladder (mining/operators/reduction_tree.py): where each carrier's
# forward rewrite would apply (a modulo test -> a strided index; a strided index -> sequential
# addressing; a sequential loop down to 0 -> the last warp unrolled; a sequential loop -> the tree
# written out per stride), found once per source for the four carriers
_LADDER_NEXT = {"modulo": "divergence_free_indexing", "strided": "sequential_addressing"}


def _ladder(src: Source) -> dict[str, list[SiteMatch]]:
    return src.memo("ladder", lambda: _find_ladder(src))


def _find_ladder(src: Source) -> dict[str, list[SiteMatch]]:
    from mining.operators.reduction_tree import tree_loops

    got: dict[str, list[SiteMatch]] = {}
    for t in tree_loops(src):
        if t.kind in _LADDER_NEXT:
            got.setdefault(_LADDER_NEXT[t.kind], []).append(
                _node_site(src, t.loop, "a shared-memory tree level selected by " +
                           ("a modulo test: a strided index keeps the active threads contiguous" if t.kind == "modulo"
                            else "a strided index: sequential addressing avoids bank conflicts")))
        else:
            if t.low == 0 and t.step.op == "+":
                got.setdefault("unrolled_last_warp", []).append(
                    _node_site(src, t.loop, "a barrier per tree level down to one thread: the last warp's "
                                            "six levels can run without block barriers"))
            got.setdefault("compile_time_unroll", []).append(
                _node_site(src, t.loop, "a tree loop over a runtime block size: a template block size "
                                        "writes it out per stride"))
    return got


def _ladder_finder(carrier: str) -> Finder:
    return lambda src: _ladder(src).get(carrier, [])


for _c in ("divergence_free_indexing", "sequential_addressing", "unrolled_last_warp", "compile_time_unroll"):
    FINDERS[_c] = _ladder_finder(_c)


@finder("register_cache")
def _register_cache_sites(src: Source) -> list[SiteMatch]:
    """The same global data read again by a later loop of the same thread (a row swept once per
    pass): loaded once into registers, the later passes read it from there."""
    out = []
    for f, fn, _ in device_funcs(src):
        const, _ = _pointer_names(src, f, fn)
        seen: dict[str, int] = {}
        for loop in src.nodes("for_statement", within=fn):
            if loop.parent is not None and enclosing(loop.parent, "for_statement") is not None:
                continue
            var = loop_var(loop)
            if not var:
                continue
            reads = set()
            for n in walk(loop):
                if n.type == "subscript_expression" and not is_written(n):
                    arg = n.child_by_field_name("argument")
                    if arg is not None and text(arg) in const and re.search(r"\b%s\b" % re.escape(var), text(n)):
                        reads.add(text(arg))
            again = sorted(r for r in reads if r in seen)
            if again:
                s = _node_site(src, loop, f"`{again[0]}` is read again in this loop after the pass at line "
                               f"{seen[again[0]]}: keep it in registers from the first pass", f.name)
                s.end_line = s.line
                s.code = _line_text(src, s.line)
                out.append(s)
            for r in reads:
                seen.setdefault(r, src.line_of(loop.start_byte))
    return out


# --------------------------------------------------------------------------- generic fallback
CODE_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+|[^\s\w]")


class TokenWindows:
    """Token sets of every ``window``-line window of the code, as a (windows x vocabulary) 0/1 matrix:
    Jaccard overlaps of all windows with an excerpt are then one matrix-vector product (a query
    checks up to hundreds of skills against ~100 windows each)."""

    def __init__(self, src: Source, window: int = 4):
        import numpy as np

        self.window = window
        self.lines = src.code.decode("utf-8", "replace").splitlines()
        starts, sets = [], []
        for s in range(0, max(1, len(self.lines) - window + 1)):
            toks = frozenset(CODE_TOKEN.findall(" ".join(self.lines[s:s + window])))
            if toks:
                starts.append(s)
                sets.append(toks)
        self.starts = starts
        self.vocab = {t: j for j, t in enumerate(sorted(set().union(*sets)))} if sets else {}
        self.m = np.zeros((len(sets), len(self.vocab)), np.float64)
        for i, toks in enumerate(sets):
            self.m[i, [self.vocab[t] for t in toks]] = 1.0
        self.sizes = self.m.sum(1)

    def best(self, refs: Sequence[frozenset]) -> tuple[float, int]:
        """(best Jaccard overlap, its window's 0-based first line); the first window wins ties."""
        import numpy as np

        if not refs or not self.starts:
            return 0.0, 0
        score = np.zeros(len(self.starts))
        for r in refs:
            cols = [self.vocab[t] for t in r if t in self.vocab]
            inter = self.m[:, cols].sum(1) if cols else np.zeros(len(self.starts))
            union = self.sizes + len(r) - inter
            score = np.maximum(score, inter / np.maximum(union, 1))
        i = int(score.argmax())
        return float(score[i]), self.starts[i]


def similar_excerpts(skill: dict) -> list[str]:
    """The simpler-side code a skill was applied to: its exemplar's and up to 8 evidence kernels'."""
    return [skill.get("before", "")] + [e.get("before", "") for e in skill.get("evidence") or []][:8]


def excerpt_tokens(excerpts: Iterable[str]) -> list[frozenset]:
    """Token sets of a skill's simpler-side excerpts (comments dropped), what similar_site compares."""
    out = []
    for e in excerpts:
        toks = frozenset(CODE_TOKEN.findall(re.sub(r"//[^\n]*", "", e or "")))
        if toks:
            out.append(toks)
    return out


def similar_site(src: Source, excerpts: Iterable[str], window: int = 4, windows: Optional[TokenWindows] = None,
                 refs: Optional[list[frozenset]] = None) -> Optional[SiteMatch]:
    """The query window most like the skill's simpler-side excerpts (token-set overlap).
    ``refs``: the excerpts' token sets when already computed (excerpt_tokens)."""
    win = windows if windows is not None else TokenWindows(src, window)
    refs = excerpt_tokens(excerpts) if refs is None else refs
    if not refs or not win.lines:
        return None
    score, s = win.best(refs)
    if score <= 0:
        return None
    end = min(len(win.lines), s + win.window)
    f = src.function_at(src._line_starts[s] if s < len(src._line_starts) else 0)
    code = " ".join(" ".join(win.lines[s:end]).split())[:160]
    return SiteMatch(s + 1, end, f.name if f else "", code,
                     f"code most like where this skill was applied (token overlap {score:.2f})", how="similar_code")


# --------------------------------------------------------------------------- preconditions
def check_precondition(p: dict, axes: Optional[dict[str, int]]) -> PreconditionCheck:
    """A precondition in its JSON form against one workload's axes (the rule: mining/axes_check.py)."""
    kind, axis, value = p.get("kind", ""), p.get("axis", ""), int(p.get("value") or 0)
    status = p.get("status", "discovered")
    check, detail = precondition_verdict(kind, axis, value, status, axes)
    return PreconditionCheck(p.get("text", ""), kind, axis, value, status, check, detail)


# --------------------------------------------------------------------------- per query
class Checker:
    """Applicability of skills to one query source (sites and carriers memoized per carrier)."""

    def __init__(self, source: str, axes: Optional[dict[str, int]] = None):
        self.src = Source(source)
        self.axes = axes or {}
        self._sites: dict[str, list[SiteMatch]] = {}
        self._present: dict[str, list[dict]] = {}
        self._windows: Optional[TokenWindows] = None
        self._has_data: dict[str, bool] = {}  # carrier -> the code has the data NEEDS_DATA names

    def present(self, carrier: str) -> list[dict]:
        if carrier not in self._present:
            fn = DETECTORS.get(carrier)
            sites = []
            if fn is not None:
                try:
                    sites = sorted(set(fn(self.src)), key=lambda s: (s.start_byte, s.end_byte))
                except Exception:  # a detector bug must not fail a query
                    sites = []
            self._present[carrier] = [{"line": s.line, "function": s.function, "code": s.excerpt} for s in sites]
        return self._present[carrier]

    def opportunities(self, key: str) -> Optional[list[SiteMatch]]:
        """Sites from a detector (None: no detector for this carrier/operator)."""
        if key not in FINDERS:
            return None
        if key not in self._sites:
            try:
                self._sites[key] = FINDERS[key](self.src)
            except Exception:
                self._sites[key] = []
        return self._sites[key]

    def has_detector(self, skill: dict) -> bool:
        """Whether the skill's sites come from a detector (then they depend on carrier/operator only)."""
        return skill.get("operator", "") in FINDERS or skill.get("carrier", "") in FINDERS

    def check(self, skill: dict, taken: Iterable[str] = (), axes: Optional[dict[str, int]] = None,
              refs: Optional[list[frozenset]] = None) -> Applicability:
        """``refs``: the skill's excerpt_tokens when the caller keeps them (the searcher caches them
        per skill); computed here otherwise."""
        carrier = skill.get("carrier", "")
        present = self.present(carrier)
        need = NEEDS_DATA.get(carrier)
        if need is not None and carrier not in self._has_data:
            self._has_data[carrier] = bool(need[0].search(self.src.code.decode("utf-8", "replace")))
        if need is not None and not present and not self._has_data[carrier]:
            return Applicability("no_site", [], present, [], [], f"this code has no {need[1]}: nothing for "
                                 f"{carrier} to work on")
        pres_lines = {p["line"] for p in present}
        have = set(taken)
        conflicts = [c for c in skill.get("conflicts") or [] if c in have or self.present(c)]
        if conflicts:  # whatever its sites, it cannot go with what the code (or a better hit) has
            return Applicability("conflict", [], present, [], [], "conflicts with " + ", ".join(sorted(set(conflicts)))
                                 + " (already in the code or a higher-ranked hit)")
        sites = self.opportunities(skill.get("operator", ""))
        if sites is None:
            sites = self.opportunities(carrier)
        detector = sites is not None
        if sites is None:
            if self._windows is None:
                self._windows = TokenWindows(self.src)
            m = similar_site(self.src, similar_excerpts(skill), windows=self._windows, refs=refs)
            sites = [m] if m is not None else []
            if present and sites and any(sites[0].line <= ln <= sites[0].end_line for ln in pres_lines):
                sites = []
        sites = [s for s in sites if not (s.line in pres_lines and s.how == "detector" and carrier != "restrict")]
        pre = [check_precondition(p, self.axes if axes is None else axes) for p in skill.get("preconditions") or []]
        flags: list[str] = []
        status, detail = "applicable", ""
        if not sites:
            if present:
                status = "already_applied"
                detail = f"the code already has {carrier} at line(s) " + ", ".join(str(p["line"]) for p in present[:6])
            elif detector:
                status = "no_site"
                detail = f"no place in this code where {carrier} could be introduced"
        elif present:
            flags.append("partly_applied")
        if status == "no_site" and skill.get("requires"):
            # builds on something the code lacks but could get here (padding needs a shared tile):
            # it applies where the required carrier would be introduced
            req_sites = [self.opportunities(r) for r in skill["requires"]]
            if all(rs for rs in req_sites):
                status, detail = "applicable", ""
                flags.append("after:" + ",".join(skill["requires"]))
                sites = [SiteMatch(r.line, r.end_line, r.function, r.code,
                                   f"after {', '.join(skill['requires'])} is introduced here ({r.reason})", how="requires")
                         for r in req_sites[0][:3]]
        if detector:  # the site finders test the code-shape conditions (unit stride, cross-thread values...)
            for c in pre:
                if c.status == "required" and c.kind in ("contiguous", "structure"):
                    c.check = "satisfied" if sites else "violated"
                    c.detail = (f"the {len(sites)} site(s) listed have it" if sites
                                else "no place in this code has it")
        violated = [c for c in pre if c.check == "violated"]
        if status == "applicable" and violated:
            hard = [c for c in violated if c.status == "discovered"]
            if hard:
                status = "precondition_violated"
                detail = "; ".join(f"{c.text} fails for {c.detail}" for c in hard)
            else:
                flags.append("needs_guard")
        missing = [r for r in skill.get("requires") or [] if r not in have and not self.present(r)]
        if missing and not any(f.startswith("after:") for f in flags):
            flags.append("requires:" + ",".join(missing))
        return Applicability(status, sites, present, pre, flags, detail)
