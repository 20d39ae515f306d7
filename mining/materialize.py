"""Deterministic materializers: apply a retrieved skill to new code without an LLM.

A mined skill is a deoptimization step reversed. Where that reverse step is mechanical (the
inverse of a deterministic operator in mining/operators/), it can be applied to a kernel the
skill has never seen: `materialize(skill, source, ctx)` looks up the forward rewrites for the
skill's operator (else its carrier) and returns every candidate they produce. Each rewrite is a
pure function `source, ctx -> [Materialization]`: a whole new kernel, the site it touched, and
the preconditions it had to guard. The gate decides whether a candidate is correct (and, on a
GPU, faster); a rewrite only promises to keep everything outside its edits byte-identical.

Rewrites (name: what it introduces; skills that map to it):

| rewrite | introduces | from skills of |
| --- | --- | --- |
| add_restrict | `__restrict__` on a kernel's pointer parameters | restrict |
| add_ldg | `__ldg(&p[i])` for loads through const pointers | ldg |
| add_unroll | `#pragma unroll` on constant-trip loops (`#pragma unroll 4` on runtime inner loops) | unroll_pragma |
| add_launch_bounds | `__launch_bounds__(B)` from the literal block size of every launch | launch_bounds |
| to_fast_math | `__expf`/`__logf`/..., `rsqrtf`, a fast tanh, `__fdividef` for float divisions | fast_math |
| add_shared_padding | `[R][C]` -> `[R][C + 1]` on 2-D shared arrays | shared_padding |
| grid_stride | one element per thread -> grid-stride loop; the launch clamped to the resident grid | grid_stride |
| vectorize_elementwise | `p[i]` accesses of a 1-D grid-stride loop -> float4/int4 with a scalar tail | vector_load, vector_store |
| vectorize_loop | unit-stride `p[base + j]` accesses of a row loop -> 16-byte accesses with a tail | vector_load, vector_store |
| warp_per_row | a row (or chunk) per thread -> a row per warp: loops lane-strided, accumulators all-reduced with `__shfl_xor_sync` | warp_shuffle_reduce, block_reduce_shared, atomic_per_block |
| warp_scan | a serial running-sum loop of a single-thread-per-chunk kernel -> a warp scan with `__shfl_up_sync` | warp_scan, warp_shuffle_reduce |
| privatize_atomics | per-element global atomics -> a per-block shared copy merged once per bin | privatized_atomics, atomic_per_block |
| stage_transpose_tile | a transposing copy -> both sides coalesced through a padded shared tile | shared_tile, coalesced_transpose |
| stage_matmul_tiles | a dot-product loop over global memory -> shared-memory tiles of both operands | shared_tile, transposed_tile |

Preconditions: a rewrite whose optimized form is only valid under a condition it cannot prove
from the workloads (16-byte alignment of a row start, a size bound for a shared copy) emits a
runtime check with the original code as the fallback, and says so in `guards`.
"""
from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Optional, Sequence

from tree_sitter import Node

from corpora.code.nodes import call_name, declarator_name, enclosing
from corpora.code.source import Source
from mining.carriers import LOAD_INTRINSICS, grid_stride_loops
from corpora.code.parse import FunctionSig, parse_cuda, syntax_issues, text, walk

WARP = 32
PRIV_CAP = 4096  # shared-memory histogram copy: bins held per block (16 KB of int)
GRID_PER_SM = 8  # resident blocks per SM a clamped grid asks for


# --------------------------------------------------------------------------- results
@dataclass
class Context:
    """What a rewrite may know about the problem: every workload's axes (for preconditions)."""
    axes: list[dict[str, int]] = field(default_factory=list)
    entry: str = ""
    flags: tuple[str, ...] = ()
    problem: str = ""

    @classmethod
    def from_problem(cls, problem: Any) -> "Context":
        return cls(axes=[dict(w.axes) for w in problem.workloads], entry=problem.solution.entry,
                   flags=tuple(problem.solution.flags), problem=problem.name)


@dataclass
class Materialization:
    source: str  # the whole new kernel
    rewrite: str  # forward rewrite name
    carrier: str  # the carrier it introduces
    description: str
    site_line: int = 0  # 1-based line of the first changed byte in the old source
    site_excerpt: str = ""
    start: int = 0  # changed byte range of the old source
    end: int = 0
    guards: list[str] = field(default_factory=list)  # runtime precondition checks it generated
    skill_id: str = ""
    skill_name: str = ""

    def diff(self, old: str, name: str = "kernel.cu") -> str:
        return "".join(difflib.unified_diff(old.splitlines(True), self.source.splitlines(True), f"a/{name}", f"b/{name}"))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("source")
        return d


@dataclass(frozen=True)
class TextEdit:
    start: int  # byte offsets into the original source
    end: int
    text: str


class Skip(Exception):
    """A site that does not have the shape a rewrite needs (internal)."""


Rewrite = Callable[[str, Context], list[Materialization]]
REWRITES: dict[str, Rewrite] = {}
CARRIER_OF: dict[str, str] = {}


def rewrite(name: str, carrier: str):
    def deco(fn):
        REWRITES[name] = fn
        CARRIER_OF[name] = carrier
        return fn
    return deco


# The forward rewrites that invert each deterministic deoptimization operator (a skill's
# `operator`), then those that serve a carrier (skills mined by the LLM operator or by an
# operator without a mapping).
FOR_OPERATOR: dict[str, tuple[str, ...]] = {
    "drop_restrict": ("add_restrict",),
    "ldg_to_plain_load": ("add_ldg",),
    "drop_unroll_pragma": ("add_unroll",),
    "drop_launch_bounds": ("add_launch_bounds",),
    "fast_math_to_precise": ("to_fast_math",),
    "drop_shared_padding": ("add_shared_padding",),
    "vector_load_to_scalar": ("vectorize_elementwise", "vectorize_loop"),
    "vector_store_to_scalar": ("vectorize_elementwise", "vectorize_loop"),
    "grid_stride_to_single": ("grid_stride",),
    "drop_grid_clamp": ("grid_stride",),
    "shuffle_to_shared": ("warp_per_row", "warp_scan"),
    "scan_shuffle_to_shared": ("warp_scan",),
    "block_reduce_to_warp_atomics": ("warp_per_row",),
    "warp_atomic_to_thread_atomics": ("privatize_atomics", "warp_per_row"),
    "privatized_to_global_atomics": ("privatize_atomics",),
    "shared_tile_to_global": ("stage_transpose_tile", "stage_matmul_tiles"),
}
FOR_CARRIER: dict[str, tuple[str, ...]] = {
    "restrict": ("add_restrict",),
    "ldg": ("add_ldg",),
    "unroll_pragma": ("add_unroll",),
    "launch_bounds": ("add_launch_bounds",),
    "fast_math": ("to_fast_math",),
    "shared_padding": ("add_shared_padding",),
    "vector_load": ("vectorize_elementwise", "vectorize_loop"),
    "vector_store": ("vectorize_elementwise", "vectorize_loop"),
    "grid_stride": ("grid_stride",),
    "warp_shuffle_reduce": ("warp_per_row", "warp_scan"),
    "block_reduce_shared": ("warp_per_row",),
    "warp_scan": ("warp_scan",),
    "block_scan": ("warp_scan",),
    "atomic_per_block": ("privatize_atomics", "warp_per_row"),
    "privatized_atomics": ("privatize_atomics",),
    "shared_tile": ("stage_transpose_tile", "stage_matmul_tiles"),
    "coalesced_transpose": ("stage_transpose_tile",),
    "transposed_tile": ("stage_matmul_tiles",),
    "halo_tile": (),
}


def rewrites_for(skill: Any) -> list[str]:
    """Forward rewrite names for a skill (a Skill record or its dict): operator first, then carrier."""
    op = _get(skill, "operator")
    carrier = _get(skill, "carrier")
    names = list(FOR_OPERATOR.get(op, ())) + [n for n in FOR_CARRIER.get(carrier, ()) if n not in FOR_OPERATOR.get(op, ())]
    return names


def materialize(skill: Any, source: str, ctx: Optional[Context] = None) -> list[Materialization]:
    """Every candidate the skill's forward rewrites produce on `source` (possibly none)."""
    ctx = ctx or Context()
    out: list[Materialization] = []
    seen = {source}
    for name in rewrites_for(skill):
        for m in run_rewrite(name, source, ctx):
            if m.source in seen:
                continue
            seen.add(m.source)
            m.skill_id = _get(skill, "skill_id")
            m.skill_name = _get(skill, "name")
            out.append(m)
    return out


_MEMO: dict[tuple[str, str], list[Materialization]] = {}


def run_rewrite(name: str, source: str, ctx: Optional[Context] = None) -> list[Materialization]:
    """One rewrite, with its failures contained: a rewrite bug yields no candidate, never an exception.
    Memoized per (rewrite, source): several skills often map to the same rewrite."""
    key = (name, hashlib.sha1(source.encode()).hexdigest())
    if key not in _MEMO:
        if len(_MEMO) > 512:
            _MEMO.clear()
        _MEMO[key] = _run_rewrite(name, source, ctx)
    return [replace(m) for m in _MEMO[key]]


def _run_rewrite(name: str, source: str, ctx: Optional[Context] = None) -> list[Materialization]:
    fn = REWRITES[name]
    try:
        res = fn(source, ctx or Context())
    except (Skip, ValueError, KeyError, IndexError, AttributeError, TypeError, RecursionError):
        return []
    before = len(syntax_issues(parse_cuda(source), limit=50))
    good = []
    for m in res:
        if m.source == source or len(syntax_issues(parse_cuda(m.source), limit=50)) > before:
            continue
        _locate(source, m)
        good.append(m)
    return good


def _get(obj: Any, key: str, default: str = "") -> Any:
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _locate(old: str, m: Materialization) -> None:
    a, b = old.encode(), m.source.encode()
    p = 0
    lim = min(len(a), len(b))
    while p < lim and a[p] == b[p]:
        p += 1
    s = 0
    while s < lim - p and a[len(a) - 1 - s] == b[len(b) - 1 - s]:
        s += 1
    m.start, m.end = p, len(a) - s
    m.site_line = a.count(b"\n", 0, p) + 1
    if not m.site_excerpt:
        line = old.split("\n")[m.site_line - 1] if m.site_line - 1 < len(old.split("\n")) else ""
        m.site_excerpt = " ".join(line.split())[:160]


# --------------------------------------------------------------------------- text helpers
def apply_edits(raw: bytes, edits: Iterable[TextEdit]) -> str:
    """Apply non-overlapping byte-range edits (insertions allowed) to the original bytes."""
    edits = sorted(edits, key=lambda e: (e.start, e.end))
    for x, y in zip(edits, edits[1:]):
        if y.start < x.end:
            raise Skip("overlapping edits")
    out = bytearray()
    pos = 0
    for e in edits:
        out += raw[pos:e.start] + e.text.encode()
        pos = e.end
    out += raw[pos:]
    return out.decode("utf-8")


def rewrite_range(src: Source, start: int, end: int, edits: Iterable[TextEdit]) -> str:
    """The text of [start, end) of the original with the edits inside it applied."""
    inner = [TextEdit(e.start - start, e.end - start, e.text) for e in edits if start <= e.start and e.end <= end]
    return apply_edits(src.raw[start:end], inner)


def raw(src: Source, node: Node) -> str:
    return src.raw[node.start_byte:node.end_byte].decode("utf-8", "replace")


def code(src: Source, node: Node) -> str:
    """Comment-free text of a node, whitespace collapsed."""
    return " ".join(src.code[node.start_byte:node.end_byte].decode("utf-8", "replace").split())


def line_start(src: Source, byte: int) -> int:
    return src.raw.rfind(b"\n", 0, byte) + 1


def indent_at(src: Source, byte: int) -> str:
    a = line_start(src, byte)
    m = re.match(rb"[ \t]*", src.raw[a:])
    return m.group(0).decode() if m else ""


def at_line_start(src: Source, node: Node) -> bool:
    return not src.raw[line_start(src, node.start_byte):node.start_byte].strip()


def idents(s: str) -> set[str]:
    return set(re.findall(r"\b[A-Za-z_]\w*\b", s))


def mentions(s: str, name: str) -> bool:
    return re.search(r"\b%s\b" % re.escape(name), s) is not None


def split_top(s: str, sep: str) -> list[str]:
    """Split at `sep` outside parentheses/brackets."""
    parts, depth, cur, i = [], 0, "", 0
    while i < len(s):
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if depth == 0 and s.startswith(sep, i):
            parts.append(cur)
            cur = ""
            i += len(sep)
            continue
        cur += c
        i += 1
    parts.append(cur)
    return [p.strip() for p in parts]


def strip_parens(s: str) -> str:
    s = s.strip()
    while s.startswith("(") and s.endswith(")"):
        depth = 0
        for i, c in enumerate(s):
            depth += c == "("
            depth -= c == ")"
            if depth == 0 and i < len(s) - 1:
                return s
        s = s[1:-1].strip()
    return s


def reindent(block: str, ind: str, first: bool = False) -> str:
    """Shift a block of lines so its least-indented continuation line sits at `ind` (the first
    line, which starts mid-line in a node's text, is prefixed with `ind` only when `first`)."""
    lines = block.split("\n")
    rest = [ln for ln in lines[1:] if ln.strip()]
    cut = min((len(ln) - len(ln.lstrip(" \t")) for ln in rest), default=0)
    head = lines[0].strip()
    if rest and first:
        # the first line is at the block's base indentation (a statement that starts a line)
        cut = min(cut, min(len(ln) - len(ln.lstrip(" \t")) for ln in rest))
    out = [(ind if first else "") + head]
    for ln in lines[1:]:
        out.append(ind + ln[cut:] if ln.strip() else "")
    return "\n".join(out)


def block_body(body_text: str, ind: str) -> str:
    """A loop body's statements (braces dropped) re-indented to `ind`, one per line."""
    t = body_text.strip()
    if t.startswith("{") and t.endswith("}"):
        t = t[1:-1].strip("\n").rstrip()
        lines = [ln for ln in t.split("\n")]
        cut = min((len(ln) - len(ln.lstrip(" \t")) for ln in lines if ln.strip()), default=0)
        return "\n".join(ind + ln[cut:] if ln.strip() else "" for ln in lines)
    return reindent(t, ind, first=True)


def int_value(src: Source, expr: str) -> Optional[int]:
    """A compile-time integer (literals and object-like macros), else None."""
    e = src.expand(expr.strip())
    e = re.sub(r"(?<=\d)[uUlL]+\b", "", e)
    if not re.fullmatch(r"[\d\s()+\-*/%<>]+", e):
        return None
    try:
        v = eval(e.replace("/", "//"), {"__builtins__": {}}, {})  # digits and operators only
    except Exception:
        return None
    return int(v) if isinstance(v, int) else None


# --------------------------------------------------------------------------- kernel structure
@dataclass
class Kernel:
    sig: FunctionSig
    node: Node
    body: Node

    @property
    def name(self) -> str:
        return self.sig.name


def kernels(src: Source) -> list[Kernel]:
    out = []
    for f in src.funcs:
        if not f.is_kernel:
            continue
        fn = src.func_node(f)
        body = fn.child_by_field_name("body") if fn is not None else None
        if body is not None:
            out.append(Kernel(f, fn, body))
    return out


def device_functions(src: Source) -> list[tuple[FunctionSig, Node]]:
    out = []
    for f in src.funcs:
        fn = src.func_node(f)
        if fn is None:
            continue
        body = fn.child_by_field_name("body")
        head = src.code[f.start_byte:(body.start_byte if body is not None else f.end_byte)]
        if f.is_kernel or b"__device__" in head:
            out.append((f, fn))
    return out


def param_nodes(fn: Node) -> list[Node]:
    decl = next((d for d in walk(fn) if d.type == "function_declarator"), None)
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    return [c for c in (plist.named_children if plist else []) if c.type == "parameter_declaration"]


@dataclass
class Launch:
    call: Node
    kernel: str
    grid: Node
    block: Node
    host: Optional[FunctionSig]


def launches(src: Source, kernel: Optional[str] = None) -> list[Launch]:
    out = []
    for call in src.nodes("call_expression"):
        ks = next((c for c in call.children if c.type == "kernel_call_syntax"), None)
        if ks is None:
            continue
        name = call_name(call)
        if kernel is not None and name != kernel:
            continue
        args = [c for c in ks.named_children]
        if len(args) < 2:
            continue
        out.append(Launch(call, name, args[0], args[1], src.function_at(call.start_byte)))
    return out


def block_dims(src: Source, launch: Launch) -> Optional[tuple[int, int, int]]:
    """Literal block dimensions of a launch: `256`, `THREADS`, or a `dim3 block(16, 16)` variable."""
    b = code(src, launch.block)
    v = int_value(src, b)
    if v is not None:
        return (v, 1, 1)
    m = re.fullmatch(r"dim3\s*\(([^()]*)\)", b)
    args = None
    if m:
        args = m.group(1)
    elif re.fullmatch(r"\w+", b) and launch.host is not None:
        host = src.func_code(launch.host).decode("utf-8", "replace")
        mm = re.search(r"\bdim3\s+%s\s*(?:\(([^;]*)\)|\{([^;]*)\})\s*;" % re.escape(b), host)
        if mm:
            args = mm.group(1) if mm.group(1) is not None else mm.group(2)
    if args is None:
        return None
    vals = [int_value(src, a) for a in split_top(args, ",")]
    if not vals or any(v is None for v in vals) or len(vals) > 3:
        return None
    vals = vals + [1] * (3 - len(vals))
    return (vals[0], vals[1], vals[2])


def grid_is_scalar(src: Source, launch: Launch) -> bool:
    """True when the grid argument is a scalar expression (not a dim3)."""
    g = code(src, launch.grid)
    if re.match(r"dim3\b", g):
        return False
    if re.fullmatch(r"\w+", g) and launch.host is not None:
        host = src.func_code(launch.host).decode("utf-8", "replace")
        if re.search(r"\bdim3\s+%s\b" % re.escape(g), host):
            return False
    return True


_CAST = r"\(\s*(?:long\s+long|unsigned\s+long\s+long|size_t|int64_t|uint64_t|int|unsigned(?:\s+int)?|long)\s*\)"


def global_index_axis(expr: str) -> Optional[str]:
    """'x' / 'y' / 'z' when `expr` is `blockIdx.A * blockDim.A + threadIdx.A` (casts allowed)."""
    e = re.sub(_CAST, "", expr)
    e = re.sub(r"\s+", "", e)
    e = strip_parens(e)
    for a in "xyz":
        forms = {f"blockIdx.{a}*blockDim.{a}+threadIdx.{a}", f"blockDim.{a}*blockIdx.{a}+threadIdx.{a}",
                 f"threadIdx.{a}+blockIdx.{a}*blockDim.{a}", f"threadIdx.{a}+blockDim.{a}*blockIdx.{a}"}
        if e in forms:
            return a
    return None


def _type_before(decl: str, name: str) -> str:
    m = re.search(r"\b%s\b" % re.escape(name), decl)
    return decl[:m.start()].strip() if m else ""


@dataclass
class IndexDecl:
    stmt: Node  # the declaration statement
    name: str
    type: str
    value: Node
    axis: str


def index_decls(src: Source, k: Kernel) -> list[IndexDecl]:
    """Top-level `T v = blockIdx.A * blockDim.A + threadIdx.A;` declarations of a kernel body."""
    out = []
    for st in k.body.named_children:
        if st.type != "declaration":
            continue
        inits = [c for c in st.named_children if c.type == "init_declarator"]
        if len(inits) != 1:
            continue
        d = inits[0]
        name_node, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
        if name_node is None or value is None or name_node.type != "identifier":
            continue
        axis = global_index_axis(code(src, value))
        if axis is None:
            continue
        ty = _type_before(code(src, st), text(name_node))
        out.append(IndexDecl(st, text(name_node), ty, value, axis))
    return out


def statements(body: Node) -> list[Node]:
    return [c for c in body.named_children if c.type != "comment"]


def has(src: Source, node: Node, pattern: str) -> bool:
    return re.search(pattern, code(src, node)) is not None


def pointer_params(sig: FunctionSig) -> dict[str, Any]:
    return {p.name: p for p in sig.params if p.is_pointer}


def local_pointers(src: Source, k: Kernel) -> dict[str, tuple[str, bool]]:
    """Local pointers initialised from pointer parameters: name -> (element type, const)."""
    params = pointer_params(k.sig)
    out: dict[str, tuple[str, bool]] = {n: (p.base_type, p.const) for n, p in params.items() if p.pointer_depth == 1}
    for decl in src.nodes("declaration", within=k.body):
        c = code(src, decl)
        if "__shared__" in c:
            continue
        for d in decl.named_children:
            if d.type != "init_declarator":
                continue
            inner, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
            if inner is None or value is None or inner.type != "pointer_declarator":
                continue
            name = declarator_name(inner)
            if not name or not (idents(text(value)) & set(out)):
                continue
            if "reinterpret_cast" in text(value):
                continue
            m = re.match(r"^(const\s+)?((?:unsigned\s+)?\w+)\s*(const\s*)?\*", c)
            if m:
                out[name] = (m.group(2), bool(m.group(1)))
    return out


def subscripts_of(src: Source, within: Node, names: Iterable[str]) -> list[Node]:
    names = set(names)
    out = []
    for sub in src.nodes("subscript_expression", within=within):
        arg = sub.child_by_field_name("argument")
        if arg is not None and arg.type == "identifier" and text(arg) in names:
            out.append(sub)
    return out


def sub_index(sub: Node) -> str:
    idx = sub.child_by_field_name("indices")
    return text(idx)[1:-1].strip() if idx is not None else ""


def sub_base(sub: Node) -> str:
    arg = sub.child_by_field_name("argument")
    return text(arg) if arg is not None else ""


def is_lhs(node: Node) -> bool:
    p = node.parent
    while p is not None and p.type == "parenthesized_expression":
        node, p = p, p.parent
    if p is None:
        return False
    if p.type == "assignment_expression":
        left = p.child_by_field_name("left")
        return left is not None and left.start_byte == node.start_byte and left.end_byte == node.end_byte
    return p.type == "update_expression"


def address_taken(node: Node) -> bool:
    p = node.parent
    return p is not None and p.type == "pointer_expression" and p.children and p.children[0].type == "&"


def in_ldg(node: Node) -> Optional[Node]:
    """The `__ldg(&p[i])` call around a subscript, if any."""
    p = node.parent
    if p is None or p.type != "pointer_expression" or not p.children or p.children[0].type != "&":
        return None
    a = p.parent
    if a is None or a.type != "argument_list":
        return None
    c = a.parent
    return c if c is not None and c.type == "call_expression" and call_name(c) in LOAD_INTRINSICS else None


def ensure_helper(src: Source, name: str, helper: str) -> list[TextEdit]:
    """Insert a file-scope helper after the last #include (once)."""
    if re.search(rb"\b" + name.encode() + rb"\s*\(", src.code) and (b"ks-optimize helper: " + name.encode()) in src.raw:
        return []
    pos = 0
    for m in re.finditer(rb"(?m)^[ \t]*#[ \t]*include[^\n]*\n", src.raw):
        pos = m.end()
    return [TextEdit(pos, pos, "\n" + helper.strip("\n") + "\n" if pos else helper.strip("\n") + "\n\n")]


CLAMP_HELPER = """// ks-optimize helper: ks_clamp_grid -- a grid-stride kernel needs only the resident grid
static inline unsigned ks_clamp_grid(long long blocks, int per_sm) {
    static int sms = 0;
    if (sms <= 0 && (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || sms <= 0))
        sms = 132;
    long long cap = (long long)sms * per_sm;
    return (unsigned)(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}"""


def _mat(src: Source, edits: list[TextEdit], name: str, description: str, guards: Sequence[str] = (),
         excerpt: str = "") -> Materialization:
    new = apply_edits(src.raw, edits)
    return Materialization(new, name, CARRIER_OF.get(name, ""), description, guards=list(guards), site_excerpt=excerpt)


def _per_kernel_and_all(src: Source, name: str, per: list[tuple[str, list[TextEdit], str]],
                        what: str, extra: list[TextEdit] = ()) -> list[Materialization]:
    """One candidate applying every site, then (when there are several) one per kernel."""
    per = [p for p in per if p[1]]
    if not per:
        return []
    out = []
    if len(per) > 1:
        out.append(_mat(src, [e for _, es, _ in per for e in es] + list(extra), name,
                        f"{what} in {', '.join(k for k, _, _ in per)}"))
    for kname, es, excerpt in per:
        out.append(_mat(src, es + list(extra), name, f"{what} in {kname}", excerpt=excerpt))
    return out


# --------------------------------------------------------------------------- local rewrites
@rewrite("add_restrict", "restrict")
def add_restrict(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    per = []
    for k in kernels(src):
        edits, names = [], []
        for p in param_nodes(k.node):
            ptr = next((c for c in p.named_children if c.type == "pointer_declarator"), None)
            if ptr is None or "__restrict" in code(src, p):
                continue
            inner = ptr.child_by_field_name("declarator")
            if inner is None or inner.type != "identifier":
                continue  # pointer to pointer, function pointer
            edits.append(TextEdit(inner.start_byte, inner.start_byte, "__restrict__ "))
            names.append(text(inner))
        per.append((k.name, edits, f"{k.name}({', '.join(names)})"))
    return _per_kernel_and_all(src, "add_restrict", per, "`__restrict__` on the pointer parameters")


LDG_TYPES = {"float", "double", "int", "unsigned", "unsigned int", "long long", "unsigned long long", "char",
             "unsigned char", "short", "unsigned short", "float2", "float4", "int2", "int4", "uint2", "uint4",
             "double2", "int32_t", "uint32_t", "int64_t", "uint64_t"}


@rewrite("add_ldg", "ldg")
def add_ldg(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    per = []
    for k in kernels(src):
        ptrs = {n: t for n, (t, const) in local_pointers(src, k).items() if const and " ".join(t.split()) in LDG_TYPES}
        subs = [s for s in subscripts_of(src, k.body, ptrs) if not is_lhs(s) and not address_taken(s)
                and in_ldg(s) is None]
        # outermost only: an inner load inside an outer one goes along with the outer's text
        subs = [s for s in subs if not any(o is not s and o.start_byte <= s.start_byte and s.end_byte <= o.end_byte
                                           for o in subs)]
        edits = [TextEdit(s.start_byte, s.end_byte, f"__ldg(&{raw(src, s)})") for s in subs]
        per.append((k.name, edits, code(src, subs[0]) if subs else ""))
    return _per_kernel_and_all(src, "add_ldg", per, "read-only loads through `__ldg`")


def _loop_var(src: Source, loop: Node) -> Optional[tuple[str, str, str]]:
    """(type, name, init value) of `for (T v = init; ...)`."""
    init = loop.child_by_field_name("initializer")
    if init is None or init.type != "declaration":
        return None
    ds = [c for c in init.named_children if c.type == "init_declarator"]
    if len(ds) != 1:
        return None
    n, v = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
    if n is None or v is None or n.type != "identifier":
        return None
    return _type_before(code(src, init), text(n)), text(n), raw(src, v)


def _unit_update(src: Source, loop: Node, var: str) -> bool:
    upd = loop.child_by_field_name("update")
    u = re.sub(r"\s+", "", code(src, upd)) if upd is not None else ""
    return u in (f"++{var}", f"{var}++", f"{var}+=1", f"{var}={var}+1")


def _const_trip(src: Source, loop: Node) -> bool:
    """A loop with a compile-time trip count (literal start and bound, fixed step)."""
    lv = _loop_var(src, loop)
    cond, upd = loop.child_by_field_name("condition"), loop.child_by_field_name("update")
    if lv is None or cond is None or upd is None or int_value(src, lv[2]) is None:
        return False
    m = re.fullmatch(r"%s\s*(<|<=|>|>=)\s*(.+)" % re.escape(lv[1]), code(src, cond))
    u = re.sub(r"\s+", "", code(src, upd))
    return bool(m) and int_value(src, m.group(2)) is not None and \
        re.fullmatch(r"(\+\+|--)%s|%s(\+\+|--)|%s(\+=|-=|>>=|<<=|\*=)\d+" % ((re.escape(lv[1]),) * 3), u) is not None


def _const_stride(src: Source, loop: Node, var: str) -> bool:
    upd = loop.child_by_field_name("update")
    u = re.sub(r"\s+", "", code(src, upd)) if upd is not None else ""
    m = re.fullmatch(r"%s\+=(\w+)" % re.escape(var), u)
    return bool(m) and int_value(src, m.group(1)) is not None


def _pragma_before(src: Source, node: Node) -> bool:
    before = src.code[:line_start(src, node.start_byte)].decode("utf-8", "replace").rstrip().split("\n")[-1]
    return re.match(r"\s*#\s*pragma\s+unroll", before) is not None


@rewrite("add_unroll", "unroll_pragma")
def add_unroll(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    const_edits, runtime_edits = [], []
    for f, fn in device_functions(src):
        for loop in src.nodes("for_statement", within=fn):
            if loop.parent is None or loop.parent.type != "compound_statement" or not at_line_start(src, loop):
                continue
            if _pragma_before(src, loop):
                continue
            lv = _loop_var(src, loop)
            cond = loop.child_by_field_name("condition")
            if lv is None or cond is None:
                continue
            m = re.fullmatch(r"%s\s*<=?\s*(.+)" % re.escape(lv[1]), code(src, cond))
            pos = line_start(src, loop.start_byte)
            ind = indent_at(src, loop.start_byte)
            trip = int_value(src, m.group(1)) if m else None
            start = int_value(src, lv[2])
            if trip is not None and start is not None and _unit_update(src, loop, lv[1]) and 0 < trip - start <= 256:
                const_edits.append(TextEdit(pos, pos, f"{ind}#pragma unroll\n"))
            elif m and not any(n.type in ("while_statement", "do_statement") or
                               (n.type == "for_statement" and not _const_trip(src, n))
                               for n in walk(loop.child_by_field_name("body") or loop) if n is not loop) \
                    and (_unit_update(src, loop, lv[1]) or _const_stride(src, loop, lv[1])):
                runtime_edits.append(TextEdit(pos, pos, f"{ind}#pragma unroll 4\n"))
    out = []
    if const_edits:
        out.append(_mat(src, const_edits, "add_unroll", f"`#pragma unroll` on {len(const_edits)} constant-trip loop(s)"))
    if runtime_edits:
        out.append(_mat(src, runtime_edits, "add_unroll",
                        f"`#pragma unroll 4` on {len(runtime_edits)} innermost runtime loop(s)"))
    return out


@rewrite("add_launch_bounds", "launch_bounds")
def add_launch_bounds(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    edits, names = [], []
    for k in kernels(src):
        head = src.code[k.sig.start_byte:k.body.start_byte]
        if b"__launch_bounds__" in head:
            continue
        ls = launches(src, k.name)
        dims = {block_dims(src, l) for l in ls}
        if not ls or None in dims or len(dims) != 1:
            continue
        bx, by, bz = dims.pop()
        threads = bx * by * bz
        if not 0 < threads <= 1024:
            continue
        decl = next((d for d in walk(k.node) if d.type == "function_declarator"), None)
        ident = decl.child_by_field_name("declarator") if decl is not None else None
        if ident is None:
            continue
        edits.append(TextEdit(ident.start_byte, ident.start_byte, f"__launch_bounds__({threads}) "))
        names.append(f"{k.name}({threads})")
    if not edits:
        return []
    return [_mat(src, edits, "add_launch_bounds", "`__launch_bounds__` from the launch block size: " + ", ".join(names))]


FAST = {"expf": "__expf", "logf": "__logf", "sinf": "__sinf", "cosf": "__cosf", "tanf": "__tanf", "powf": "__powf",
        "exp10f": "__exp10f", "log2f": "__log2f", "log10f": "__log10f"}


def _float_names(src: Source, f: FunctionSig, fn: Node) -> set[str]:
    names = {p.name for p in f.params if p.base_type in ("float", "double", "__half", "half")}
    for decl in src.nodes("declaration", within=fn):
        c = code(src, decl)
        if re.match(r"^(const\s+)?(float|double)\b", c):
            for d in decl.named_children:
                n = declarator_name(d)
                if n:
                    names.add(n)
    return names


def _is_float_expr(src: Source, node: Node, floats: set[str]) -> bool:
    c = code(src, node)
    if re.search(r"\d\.\d*(?:[eE][-+]?\d+)?f?\b|\d+\.?f\b|\d[eE][-+]?\d+", c):
        return True
    if re.search(r"\b(__)?(expf|logf|sqrtf|rsqrtf|fmaxf|fminf|tanhf|powf|sinf|cosf|fabsf)\s*\(", c):
        return True
    if re.search(r"\(\s*float\s*\)", c):
        return True
    names = idents(c)
    return bool(names & floats)


@rewrite("to_fast_math", "fast_math")
def to_fast_math(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    intrinsics, divisions = [], []
    for f, fn in device_functions(src):
        floats = _float_names(src, f, fn)
        taken: list[tuple[int, int]] = []
        for b in src.nodes("binary_expression", within=fn):
            op = b.child_by_field_name("operator")
            left, right = b.child_by_field_name("left"), b.child_by_field_name("right")
            if op is None or text(op) != "/" or left is None or right is None:
                continue
            if re.fullmatch(r"1(\.0*)?f?", code(src, left)) and right.type == "call_expression" and \
                    call_name(right) == "sqrtf":
                args = right.child_by_field_name("arguments")
                if args is not None and len(args.named_children) == 1:
                    intrinsics.append(TextEdit(b.start_byte, b.end_byte, f"rsqrtf({raw(src, args.named_children[0])})"))
                    taken.append((b.start_byte, b.end_byte))
        for call in src.nodes("call_expression", within=fn):
            name = call_name(call)
            if any(a <= call.start_byte < z for a, z in taken):
                continue
            fnode = call.child_by_field_name("function")
            args = call.child_by_field_name("arguments")
            if name in FAST and fnode is not None:
                intrinsics.append(TextEdit(fnode.start_byte, fnode.end_byte, FAST[name]))
            elif name == "tanhf" and args is not None and len(args.named_children) == 1:
                u = raw(src, args.named_children[0])
                intrinsics.append(TextEdit(call.start_byte, call.end_byte,
                                           f"(1.0f - 2.0f / (__expf(2.0f * ({u})) + 1.0f))"))
                taken.append((call.start_byte, call.end_byte))
        for b in src.nodes("binary_expression", within=fn):
            op = b.child_by_field_name("operator")
            left, right = b.child_by_field_name("left"), b.child_by_field_name("right")
            if op is None or text(op) != "/" or left is None or right is None:
                continue
            if any(a <= b.start_byte < z for a, z in taken):
                continue
            if any(b.start_byte <= a < b.end_byte for a, _ in taken):
                continue
            if not (_is_float_expr(src, left, floats) or _is_float_expr(src, right, floats)):
                continue
            if re.search(r"\b(sizeof|blockDim|gridDim)\b", code(src, b)):
                continue
            divisions.append(TextEdit(b.start_byte, b.end_byte, f"__fdividef({raw(src, left)}, {raw(src, right)})"))
    out = []
    if intrinsics:
        out.append(_mat(src, intrinsics, "to_fast_math", f"hardware intrinsics for {len(intrinsics)} precise math call(s)"))
    if divisions:
        # outermost divisions only (a nested one is inside the outer's raw text)
        divisions = [d for d in divisions if not any(o is not d and o.start <= d.start and d.end <= o.end
                                                     for o in divisions)]
        merged = [e for e in intrinsics if not any(d.start <= e.start < d.end for d in divisions)]
        if len(merged) == len(intrinsics):
            out.append(_mat(src, merged + divisions, "to_fast_math",
                            f"hardware intrinsics and `__fdividef` for {len(divisions)} float division(s)"))
    return out


@rewrite("add_shared_padding", "shared_padding")
def add_shared_padding(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    edits = []
    for decl, name, dims in src.shared_decls:
        if len(dims) < 2:
            continue
        last = code(src, dims[-1])
        if re.search(r"\+\s*(\d+|\w*PAD\w*)\s*$", last, re.I):
            continue
        v = int_value(src, last)
        if v is None or v % 32 != 0 and v % 16 != 0:
            continue
        edits.append(TextEdit(dims[-1].start_byte, dims[-1].end_byte, f"{raw(src, dims[-1])} + 1"))
    if not edits:
        return []
    return [_mat(src, edits, "add_shared_padding", f"one padding column on {len(edits)} 2-D shared array(s)")]


# --------------------------------------------------------------------------- grid-stride loops
def _returns_or_syncs(src: Source, node: Node) -> bool:
    c = code(src, node)
    return bool(re.search(r"\breturn\b|__syncthreads|__syncwarp|\bgoto\b", c))


def _has_loop(node: Node) -> bool:
    return any(n.type in ("for_statement", "while_statement", "do_statement") for n in walk(node))


def _bare_jumps(src: Source, node: Node) -> bool:
    """A break/continue that is not inside a loop or switch within `node`."""
    for n in walk(node):
        if n.type in ("break_statement", "continue_statement"):
            p = n.parent
            inner = False
            while p is not None and p is not node and not (p.start_byte == node.start_byte and p.end_byte == node.end_byte):
                if p.type in ("for_statement", "while_statement", "do_statement") or \
                        (p.type == "switch_statement" and n.type == "break_statement"):
                    inner = True
                    break
                p = p.parent
            if not inner:
                return True
    return False


@dataclass
class OneElement:
    """`T i = gidx; if (i >= n) return; REST` or `T i = gidx; ... if (i < n ...) STMT` in a kernel."""
    kernel: Kernel
    decl: IndexDecl
    bound: str  # n
    rest_start: int  # byte range of the statements that become the loop body
    rest_end: int
    drop_guard: Optional[Node]  # the early-return guard to delete
    unwrap: Optional[Node] = None  # `if (i < n) S` whose only condition is the bound: the loop body is S


def one_element(src: Source, k: Kernel) -> Optional[OneElement]:
    c = code(src, k.body)
    if re.search(r"\b(threadIdx|blockIdx)\s*\.\s*[yz]\b|__syncthreads|__shared__|__shfl", c):
        return None
    decls = [d for d in index_decls(src, k) if d.axis == "x"]
    if len(decls) != 1:
        return None
    d = decls[0]
    sts = statements(k.body)
    pos = next(i for i, s in enumerate(sts) if s.start_byte == d.stmt.start_byte)
    rest = sts[pos + 1:]
    if not rest:
        return None
    # threadIdx/blockIdx only in the index declaration
    others = [s for s in sts if s.start_byte != d.stmt.start_byte]
    if any(re.search(r"\b(threadIdx|blockIdx|blockDim|gridDim)\b", code(src, s)) for s in others):
        return None
    first = rest[0]
    i = re.escape(d.name)
    if first.type == "if_statement" and first.child_by_field_name("alternative") is None:
        cond = strip_parens(code(src, first.child_by_field_name("condition")))
        cons = first.child_by_field_name("consequence")
        if cons is not None and re.fullmatch(r"\{?\s*return\s*;\s*\}?", code(src, cons)):
            m = re.fullmatch(r"%s\s*>=\s*(.+)" % i, cond) or re.fullmatch(r"(.+?)\s*<=\s*%s" % i, cond)
            if not m:
                return None
            body = rest[1:]
            if not body or any(_returns_or_syncs(src, s) or _bare_jumps(src, s) or _has_loop(s) for s in body):
                return None
            return OneElement(k, d, m.group(1), body[0].start_byte, body[-1].end_byte, first)
    # guard form: the last statement is `if (i < n && ...) ...` and everything is inside the loop
    last = rest[-1]
    if last.type != "if_statement" or last.child_by_field_name("alternative") is not None:
        return None
    cond = strip_parens(code(src, last.child_by_field_name("condition")))
    bound = None
    for part in split_top(cond, "&&"):
        m = re.fullmatch(r"%s\s*<\s*(.+)" % i, strip_parens(part))
        if m:
            bound = m.group(1)
            break
    if bound is None or any(_returns_or_syncs(src, s) or _bare_jumps(src, s) or _has_loop(s) for s in rest):
        return None
    unwrap = last if len(split_top(cond, "&&")) == 1 else None
    return OneElement(k, d, bound, rest[0].start_byte, rest[-1].end_byte, None, unwrap)


def _stride_expr(ty: str) -> str:
    t = " ".join(ty.replace("const", "").split())
    if t in ("int", "unsigned", "unsigned int", ""):
        return "gridDim.x * blockDim.x"
    return f"({t})gridDim.x * blockDim.x"


def grid_stride_edits(src: Source, oe: OneElement) -> list[TextEdit]:
    d = oe.decl
    ty = " ".join(d.type.replace("const", "").split())
    ind = indent_at(src, d.stmt.start_byte)
    if oe.unwrap is not None:
        cons = oe.unwrap.child_by_field_name("consequence")
        inner = statements(cons) if cons.type == "compound_statement" else [cons]
        edits = [TextEdit(oe.unwrap.start_byte, oe.unwrap.end_byte,
                          "\n".join(reindent(raw(src, x), ind + "    ").strip() for x in inner) if inner else ";")]
        body = rewrite_range(src, oe.rest_start, oe.rest_end, edits)
    else:
        body = rewrite_range(src, oe.rest_start, oe.rest_end, [])
    loop = (f"for ({ty} {d.name} = {raw(src, d.value)}; {d.name} < {oe.bound}; {d.name} += {_stride_expr(ty)}) {{\n"
            f"{reindent(body, ind + '    ', first=True)}\n{ind}}}")
    return [TextEdit(d.stmt.start_byte, oe.rest_end, loop)]


def clamp_edits(src: Source, kernel: str) -> Optional[list[TextEdit]]:
    ls = launches(src, kernel)
    if not ls or not all(grid_is_scalar(src, l) for l in ls):
        return None
    edits = []
    for l in ls:
        g = raw(src, l.grid)
        if "ks_clamp_grid" in g:
            continue
        edits.append(TextEdit(l.grid.start_byte, l.grid.end_byte, f"ks_clamp_grid({g}, {GRID_PER_SM})"))
    return edits + ensure_helper(src, "ks_clamp_grid", CLAMP_HELPER)


@rewrite("grid_stride", "grid_stride")
def grid_stride(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    out = []
    for k in kernels(src):
        oe = one_element(src, k)
        if oe is None:
            continue
        edits = grid_stride_edits(src, oe)
        clamp = clamp_edits(src, k.name)
        if clamp is None:
            continue
        out.append(_mat(src, edits + clamp, "grid_stride",
                        f"{k.name}: one element per thread -> grid-stride loop over `{oe.decl.name} < {oe.bound}`, "
                        f"launch clamped to {GRID_PER_SM} blocks per SM", excerpt=code(src, oe.decl.stmt)))
    return out


def _gs_loops(src: Source, k: Kernel) -> list[tuple[Node, str, str, str, str]]:
    """Grid-stride loops over x: (loop, type, var, bound, stride text) with an index-start init."""
    out = []
    for loop in grid_stride_loops(src):
        if not (k.body.start_byte <= loop.start_byte < k.body.end_byte):
            continue
        lv = _loop_var(src, loop)
        cond = loop.child_by_field_name("condition")
        upd = loop.child_by_field_name("update")
        if lv is None or cond is None or upd is None or global_index_axis(lv[2]) != "x":
            continue
        m = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(lv[1]), code(src, cond))
        mu = re.fullmatch(r"%s\s*\+=\s*(.+)" % re.escape(lv[1]), code(src, upd))
        if not m or not mu:
            continue
        out.append((loop, lv[0], lv[1], m.group(1), mu.group(1)))
    return out


# --------------------------------------------------------------------------- vector accesses
VEC_OF = {"float": "float4", "int": "int4", "unsigned int": "uint4", "unsigned": "uint4", "int32_t": "int4",
          "uint32_t": "uint4"}
FIELDS = "xyzw"


@dataclass
class VecPlan:
    loads: dict[str, list[Node]]  # pointer -> subscripts (or __ldg calls) read
    stores: dict[str, list[Node]]  # pointer -> assignment expressions `p[i] = e`
    types: dict[str, tuple[str, bool]]


def _vector_plan(src: Source, k: Kernel, body: Node, var: str, index_ok: Callable[[str], Optional[str]],
                 top_level: Callable[[Node], bool]) -> Optional[tuple[VecPlan, dict[str, str]]]:
    """Which pointers of `body` can move 4 elements at a time: every access of the pointer has an
    index accepted by `index_ok` (returns its base text), loads and stores do not mix on one
    pointer, and stores are unconditional statements. Returns the plan and pointer -> base."""
    ptrs = {n: t for n, t in local_pointers(src, k).items() if " ".join(t[0].split()) in VEC_OF}
    subs = subscripts_of(src, body, ptrs)
    bases: dict[str, str] = {}
    bad: set[str] = set()
    loads: dict[str, list[Node]] = {}
    stores: dict[str, list[Node]] = {}
    for s in subs:
        p = sub_base(s)
        b = index_ok(sub_index(s))
        if b is None or (p in bases and bases[p] != b):
            bad.add(p)
            continue
        bases[p] = b
        if is_lhs(s):
            asg = s.parent
            while asg is not None and asg.type == "parenthesized_expression":
                asg = asg.parent
            if asg is None or asg.type != "assignment_expression" or asg.children[1].type != "=" or \
                    asg.parent is None or asg.parent.type != "expression_statement" or not top_level(asg.parent):
                bad.add(p)
                continue
            stores.setdefault(p, []).append(asg)
        elif address_taken(s):
            call = in_ldg(s)
            if call is None:
                bad.add(p)
                continue
            loads.setdefault(p, []).append(call)
        else:
            loads.setdefault(p, []).append(s)
    for p in set(loads) & set(stores):
        bad.add(p)
    for p in bad:
        loads.pop(p, None)
        stores.pop(p, None)
    if not loads and not stores:
        return None
    # a store pointer written by a later statement's read? (stores are not read back: checked above)
    return VecPlan(loads, stores, {p: ptrs[p] for p in set(loads) | set(stores)}), bases


def _vector_body(src: Source, body: Node, plan: VecPlan, kvar: str) -> str:
    edits = []
    for p, nodes in plan.loads.items():
        for n in nodes:
            edits.append(TextEdit(n.start_byte, n.end_byte, f"ks_{p}[{kvar}]"))
    for p, asgs in plan.stores.items():
        for a in asgs:
            left = a.child_by_field_name("left")
            edits.append(TextEdit(left.start_byte, left.end_byte, f"ks_{p}[{kvar}]"))
    return rewrite_range(src, body.start_byte, body.end_byte, edits)


def _vec_io(plan: VecPlan, ptr_expr: Callable[[str], str], vindex: str, ind: str) -> tuple[str, str]:
    """(loads + store arrays before the element loop, vector stores after it)."""
    pre, post = [], []
    for p in sorted(plan.loads):
        t, const = plan.types[p]
        vt = VEC_OF[" ".join(t.split())]
        cast = f"reinterpret_cast<const {vt}*>({ptr_expr(p)})"
        load = f"__ldg({cast} + {vindex})" if const else f"{cast}[{vindex}]"
        pre.append(f"{ind}const {vt} ks_{p}4 = {load};")
        pre.append(f"{ind}const {t} ks_{p}[4] = {{ks_{p}4.x, ks_{p}4.y, ks_{p}4.z, ks_{p}4.w}};")
    for p in sorted(plan.stores):
        t, _ = plan.types[p]
        vt = VEC_OF[" ".join(t.split())]
        pre.append(f"{ind}{t} ks_{p}[4];")
        post.append(f"{ind}reinterpret_cast<{vt}*>({ptr_expr(p)})[{vindex}] = make_{vt}(ks_{p}[0], ks_{p}[1], ks_{p}[2], ks_{p}[3]);")
    return "\n".join(pre), "\n".join(post)


def _align_check(ptrs: list[str]) -> str:
    return "((" + " | ".join(f"(size_t)({p})" for p in ptrs) + ") & 15) == 0"


@rewrite("vectorize_elementwise", "vector_load")
def vectorize_elementwise(source: str, ctx: Context) -> list[Materialization]:
    """A 1-D grid-stride loop whose body reads/writes `p[i]` -> 16-byte accesses of four elements
    per iteration plus a scalar tail. A one-element-per-thread kernel is turned into the
    grid-stride form first (same step). Precondition: the pointers are 16-byte aligned -- checked
    at run time (the scalar loop runs everything otherwise)."""
    src = Source(source)
    out = []
    for k in kernels(src):
        loops = _gs_loops(src, k)
        if not loops:
            oe = one_element(src, k)
            clamp = clamp_edits(src, k.name) if oe is not None else None
            if oe is None or clamp is None:
                continue
            staged = apply_edits(src.raw, grid_stride_edits(src, oe) + clamp)
            for m in vectorize_elementwise(staged, ctx):
                if m.description.startswith(k.name + ":"):
                    m.source, m.description = m.source, m.description + " (after turning it into a grid-stride loop)"
                    out.append(m)
            continue
        for loop, ty, var, bound, stride in loops:
            body = loop.child_by_field_name("body")
            if body is None or _returns_or_syncs(src, body) or _bare_jumps(src, body) or _has_loop(body):
                continue
            if "ks_v" in code(src, loop):
                continue
            top = (lambda st, body=body: st.parent is not None and
                   (st.parent.start_byte == body.start_byte if body.type == "compound_statement" else st.start_byte == body.start_byte))
            res = _vector_plan(src, k, body, var, lambda idx, var=var: "" if idx == var else None, top)
            if res is None:
                continue
            plan, _ = res
            ind = indent_at(src, loop.start_byte)
            i2, i3 = ind + "    ", ind + "        "
            pre, post = _vec_io(plan, lambda p: p, "ks_v", i3)
            inner = _vector_body(src, body, plan, "ks_k")
            t = " ".join(ty.replace("const", "").split()) or "int"
            ptrs = sorted(set(plan.loads) | set(plan.stores))
            text_ = (f"{{\n{i2}// ks-optimize: 16-byte accesses when {', '.join(ptrs)} are 16-byte aligned (checked here), "
                     f"scalar tail\n"
                     f"{i2}const long long ks_n = (long long)({bound});\n"
                     f"{i2}const long long ks_nv = ({_align_check(ptrs)}) ? ks_n / 4 : 0;\n"
                     f"{i2}for (long long ks_v = (long long)blockIdx.x * blockDim.x + threadIdx.x; ks_v < ks_nv; "
                     f"ks_v += (long long)gridDim.x * blockDim.x) {{\n"
                     f"{pre}\n"
                     f"{i3}#pragma unroll\n"
                     f"{i3}for (int ks_k = 0; ks_k < 4; ++ks_k) {{\n"
                     f"{i3}    const {t} {var} = ({t})(ks_v * 4 + ks_k);\n"
                     f"{block_body(inner, i3 + '    ')}\n"
                     f"{i3}}}\n"
                     + (f"{post}\n" if post else "") +
                     f"{i2}}}\n"
                     f"{i2}for ({t} {var} = ({t})(ks_nv * 4) + {raw(src, _loop_init_value(loop))}; {var} < {bound}; "
                     f"{var} += {stride}) {{\n{block_body(raw(src, body), i3)}\n{i2}}}\n"
                     f"{ind}}}")
            out.append(_mat(src, [TextEdit(loop.start_byte, loop.end_byte, text_)], "vectorize_elementwise",
                            f"{k.name}: float4/int4 accesses of {', '.join(ptrs)} in the grid-stride loop, scalar tail",
                            guards=[f"16-byte alignment of {', '.join(ptrs)} (runtime check; scalar loop otherwise)"],
                            excerpt=code(src, loop)[:160]))
    return out


def _loop_init_value(loop: Node) -> Node:
    init = loop.child_by_field_name("initializer")
    d = next(c for c in init.named_children if c.type == "init_declarator")
    return d.child_by_field_name("value")


_LANE_INIT = re.compile(r"^\((.*)\)\s*\+\s*ks_lane$", re.S)


@rewrite("vectorize_loop", "vector_load")
def vectorize_loop(source: str, ctx: Context) -> list[Materialization]:
    """A unit-stride loop over a row (`for (j = s; j < e; ++j)`, or the lane-strided form
    warp_per_row writes) whose accesses are `p[j]` / `p[base + j]` -> four elements per 16-byte
    access. Precondition: each `p + base + s` is 16-byte aligned (e.g. the row length N % 4 == 0):
    generated as a runtime check; rows that fail it take the original loop."""
    src = Source(source)
    out = []
    all_edits, all_ptrs, all_guards = [], [], []
    for k in kernels(src):
        for loop in src.nodes("for_statement", within=k.body):
            outer = enclosing(loop, "for_statement", "while_statement", "do_statement")
            body = loop.child_by_field_name("body")
            if outer is not None and body is not None and _has_loop(body):
                continue  # outermost or innermost loops
            if outer is not None and re.search(r"\bks_(v|k|nv)\b", code(src, outer.child_by_field_name("initializer")
                                                                       or outer)):
                continue  # the element loop of an earlier vectorization
            lv = _loop_var(src, loop)
            cond = loop.child_by_field_name("condition")
            if lv is None or cond is None or body is None or re.search(r"\bks_(?!lane\b)\w+", code(src, cond) + " " + lv[2]):
                continue
            ty, var, init = lv
            ends = []
            for part in split_top(strip_parens(code(src, cond)), "&&"):
                m = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(var), strip_parens(part))
                if not m:
                    break
                ends.append(m.group(1))
            else:
                m = True
            if not ends or m is not True:
                continue
            end = ends[0]
            for e in ends[1:]:  # j < a && j < b: the loop ends at min(a, b)
                end = f"(({end}) < ({e}) ? ({end}) : ({e}))"
            upd = re.sub(r"\s+", "", code(src, loop.child_by_field_name("update")))
            lane = _LANE_INIT.match(init.strip())
            if lane and upd == f"{var}+={WARP}":
                s0, step, lane_txt = lane.group(1), WARP, "ks_lane"
            elif _unit_update(src, loop, var):
                s0, step, lane_txt = init, 1, "0"
            else:
                continue
            if mentions(end, var) or _returns_or_syncs(src, body) or _bare_jumps(src, body):
                continue
            written = _written_names(src, body)
            if idents(end) & written:
                continue

            def index_ok(idx: str, var=var, written=written) -> Optional[str]:
                idx = strip_parens(idx)
                if idx == var:
                    return "0"
                parts = split_top(idx, "+")
                if len(parts) >= 2 and strip_parens(parts[-1]) == var:
                    base = " + ".join(parts[:-1])
                elif len(parts) >= 2 and strip_parens(parts[0]) == var:
                    base = " + ".join(parts[1:])
                else:
                    return None
                if mentions(base, var) or idents(base) & written or "-" in base or "[" in base:
                    return None
                return base

            top = (lambda st, body=body: st.parent is not None and
                   (st.parent.start_byte == body.start_byte if body.type == "compound_statement" else st.start_byte == body.start_byte))
            res = _vector_plan(src, k, body, var, index_ok, top)
            if res is None:
                continue
            plan, bases = res
            ptrs = sorted(set(plan.loads) | set(plan.stores))
            tail0 = f"({s0}) + ks_nv * 4"
            if re.fullmatch(r"\s*[123]\s*", s0) and not plan.stores and _idempotent_only(src, body):
                # max/min over [s0, e): start the 16-byte part at 0 (seeing elements before s0 again is harmless)
                tail0 = f"(ks_nv * 4 > ({s0}) ? ks_nv * 4 : ({s0}))"
                s0 = "0"
            exprs = {p: f"{p} + ({bases[p]}) + ({s0})" if bases[p] != "0" else f"{p} + ({s0})" for p in ptrs}
            ind = indent_at(src, loop.start_byte)
            i2, i3 = ind + "    ", ind + "        "
            pre, post = _vec_io(plan, lambda p: exprs[p], "ks_v", i3)
            inner = _vector_body(src, body, plan, "ks_k")
            t = " ".join(ty.replace("const", "").split()) or "int"
            vstep = "" if step == 1 else f" * {step}"
            text_ = (f"{{\n{i2}// ks-optimize: 16-byte accesses when every row start is 16-byte aligned (checked here), "
                     f"the original loop for the rest\n"
                     f"{i2}const long long ks_span = (long long)({end}) - (long long)({s0});\n"
                     f"{i2}const long long ks_nv = ({_align_check([exprs[p] for p in ptrs])} && ks_span > 0) ? ks_span / 4 : 0;\n"
                     f"{i2}for (long long ks_v = {lane_txt}; ks_v < ks_nv; ks_v += {step}) {{\n"
                     f"{pre}\n"
                     f"{i3}#pragma unroll\n"
                     f"{i3}for (int ks_k = 0; ks_k < 4; ++ks_k) {{\n"
                     f"{i3}    const {t} {var} = ({t})(({s0}) + ks_v * 4 + ks_k);\n"
                     f"{block_body(inner, i3 + '    ')}\n"
                     f"{i3}}}\n"
                     + (f"{post}\n" if post else "") +
                     f"{i2}}}\n"
                     f"{i2}for ({t} {var} = ({t})({tail0}){' + ks_lane' if step != 1 else ''}; "
                     f"{raw(src, cond)}; {raw(src, loop.child_by_field_name('update'))}) {{\n"
                     f"{block_body(raw(src, body), i3)}\n{i2}}}\n"
                     f"{ind}}}")
            del vstep
            e = TextEdit(loop.start_byte, loop.end_byte, text_)
            guard = f"16-byte alignment of {', '.join(exprs[p] for p in ptrs)} (runtime check; original loop otherwise)"
            all_edits.append(e)
            all_ptrs += ptrs
            all_guards.append(guard)
            out.append(_mat(src, [e], "vectorize_loop",
                            f"{k.name}: float4 accesses of {', '.join(ptrs)} in loop `{code(src, loop)[:60]}`",
                            guards=[guard], excerpt=code(src, loop)[:160]))
    if len(all_edits) > 1:
        out.insert(0, _mat(src, all_edits, "vectorize_loop",
                           f"float4 accesses in {len(all_edits)} row loops ({', '.join(sorted(set(all_ptrs)))})",
                           guards=all_guards))
    return out


def _idempotent_only(src: Source, body: Node) -> bool:
    """Every write in the body is `x = fmaxf(x, e)` (or fminf / max / min) or a local declaration."""
    for n in walk(body):
        if n.type == "update_expression":
            return False
        if n.type == "assignment_expression":
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            if n.children[1].type != "=" or right is None or right.type != "call_expression" or \
                    call_name(right) not in ("fmaxf", "fminf", "max", "min", "fmax", "fmin"):
                return False
            args = right.child_by_field_name("arguments")
            if args is None or code(src, left) not in [code(src, a) for a in args.named_children]:
                return False
    return True


def _written_names(src: Source, node: Node) -> set[str]:
    out = set()
    for n in walk(node):
        if n.type == "assignment_expression":
            left = n.child_by_field_name("left")
            if left is not None:
                out.add(_base_name(left))
        elif n.type == "update_expression":
            arg = n.child_by_field_name("argument")
            if arg is not None:
                out.add(_base_name(arg))
        elif n.type == "init_declarator":
            d = n.child_by_field_name("declarator")
            if d is not None:
                nm = declarator_name(d)
                if nm:
                    out.add(nm)
    out.discard("")
    return out


def _base_name(node: Node) -> str:
    while node is not None:
        if node.type == "identifier":
            return text(node)
        if node.type == "subscript_expression":
            node = node.child_by_field_name("argument")
        elif node.type == "field_expression":
            node = node.child_by_field_name("argument")
        elif node.type in ("parenthesized_expression", "pointer_expression"):
            node = node.named_children[-1] if node.named_children else None
        else:
            return ""
    return ""


# --------------------------------------------------------------------------- warp per row
@dataclass
class Acc:
    name: str
    op: str  # "+" | fmaxf | fminf | max | min
    array: bool
    size: str = ""


def _declared_within(src: Source, node: Node) -> set[str]:
    out = set()
    for n in walk(node):
        if n.type in ("init_declarator", "declaration", "parameter_declaration"):
            if n.type == "declaration":
                for d in n.named_children:
                    nm = declarator_name(d) if d.type not in ("primitive_type", "type_identifier", "type_qualifier",
                                                              "sized_type_specifier") else None
                    if nm:
                        out.add(nm)
            elif n.type == "init_declarator":
                d = n.child_by_field_name("declarator")
                nm = declarator_name(d) if d is not None else None
                if nm:
                    out.add(nm)
    return out


def _classify_loop(src: Source, loop: Node, globals_: set[str]) -> Optional[tuple[list[Acc], bool]]:
    """(accumulators, writes global memory) when the loop can be split across the lanes of a
    warp: every write is to memory indexed by the loop variable, to a variable declared inside
    the loop, or to an accumulator updated only by `+=` / `= fmaxf(acc, e)` (and not read
    otherwise in the loop). None otherwise."""
    lv = _loop_var(src, loop)
    cond = loop.child_by_field_name("condition")
    if lv is None or cond is None or not _unit_update(src, loop, lv[1]):
        return None
    var = lv[1]
    for part in split_top(code(src, cond), "&&"):
        if not re.match(r"^%s\s*<" % re.escape(var), strip_parens(part)):
            return None
    body = loop.child_by_field_name("body")
    if body is None or _returns_or_syncs(src, body) or _bare_jumps(src, body) or has(src, body, r"\batomic\w*\s*\("):
        return None
    local = _declared_within(src, loop)
    accs: dict[str, Acc] = {}
    acc_nodes: list[Node] = []
    writes_global = False
    for n in walk(body):
        if n.type == "update_expression":
            b = _base_name(n.child_by_field_name("argument"))
            if b and b not in local:
                return None
        if n.type != "assignment_expression":
            continue
        left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
        opn = n.children[1].type if len(n.children) > 1 else ""
        b = _base_name(left)
        if not b:
            return None
        if b in local:
            continue
        if b in globals_:
            if left.type != "subscript_expression" or not mentions(sub_index(left), var):
                return None
            writes_global = True
            continue
        lt = code(src, left)
        if opn == "+=":
            is_arr = left.type == "subscript_expression"
            if is_arr and (left.child_by_field_name("argument").type != "identifier"):
                return None
            acc = Acc(b, "+", is_arr)
        elif opn == "=" and right is not None and right.type == "call_expression" and \
                call_name(right) in ("fmaxf", "fminf", "max", "min", "fmax", "fmin") and left.type == "identifier":
            args = right.child_by_field_name("arguments")
            a = [code(src, x) for x in args.named_children] if args is not None else []
            if len(a) != 2 or lt not in a or (a[0] == lt and a[1] == lt):
                return None
            acc = Acc(b, call_name(right), False)
        else:
            return None
        prev = accs.get(b)
        if prev is not None and (prev.op != acc.op or prev.array != acc.array):
            return None
        accs[b] = acc
        acc_nodes.append(n)
    # accumulators are read only in their own updates
    body_code = code(src, body)
    for name, acc in accs.items():
        total = len(re.findall(r"\b%s\b" % re.escape(name), body_code))
        own = sum(len(re.findall(r"\b%s\b" % re.escape(name), code(src, n))) for n in acc_nodes if _base_name(n.child_by_field_name("left")) == name)
        if total != own:
            return None
        if acc.op == "+" and not acc.array:
            # the update's right-hand side must not use the accumulator
            for n in acc_nodes:
                if _base_name(n.child_by_field_name("left")) == name and mentions(code(src, n.child_by_field_name("right")), name):
                    return None
    return list(accs.values()), writes_global


def _allreduce(acc: Acc, ind: str) -> str:
    sh = "__shfl_xor_sync(0xffffffffu, {v}, ks_o)"
    if acc.array:
        v = f"{acc.name}[ks_e]"
        upd = f"{v} += {sh.format(v=v)};" if acc.op == "+" else f"{v} = {acc.op}({v}, {sh.format(v=v)});"
        return f"{ind}for (int ks_e = 0; ks_e < ({acc.size}); ++ks_e)\n{ind}    for (int ks_o = 16; ks_o > 0; ks_o >>= 1) {upd}"
    v = acc.name
    upd = f"{v} += {sh.format(v=v)};" if acc.op == "+" else f"{v} = {acc.op}({v}, {sh.format(v=v)});"
    return f"{ind}for (int ks_o = 16; ks_o > 0; ks_o >>= 1) {upd}"


def _array_size(src: Source, k: Kernel, name: str) -> Optional[str]:
    for decl in src.nodes("declaration", within=k.body):
        for d in decl.named_children:
            node = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            if node is not None and node.type == "array_declarator" and declarator_name(node) == name:
                inner = node.child_by_field_name("declarator")
                if inner is not None and inner.type == "array_declarator":
                    return None  # 2-D
                size = node.child_by_field_name("size")
                return raw(src, size) if size is not None else None
    return None


def _zero_init_before(src: Source, k: Kernel, name: str, before: int) -> bool:
    """A scalar declared `= 0` at top level and not written between its declaration and `before`."""
    for decl in src.nodes("declaration", within=k.body):
        if decl.start_byte >= before:
            break
        for d in decl.named_children:
            if d.type == "init_declarator" and declarator_name(d.child_by_field_name("declarator")) == name:
                v = d.child_by_field_name("value")
                if v is None or not re.fullmatch(r"0(\.0*)?[fF]?|0\.[fF]?|\(\s*\w+\s*\)\s*0(\.0*)?[fF]?", code(src, v)):
                    return False
                between = src.code[decl.end_byte:before].decode("utf-8", "replace")
                return re.search(r"\b%s\s*([-+*/|&^]|<<|>>)?=[^=]" % re.escape(name), between) is None
    return False


def _top_loops(src: Source, body: Node) -> list[Node]:
    """for-loops that are statements of the body, or of a top-level `if` block without else."""
    out = []
    for st in statements(body):
        if st.type == "for_statement":
            out.append(st)
        elif st.type == "if_statement" and st.child_by_field_name("alternative") is None:
            cons = st.child_by_field_name("consequence")
            if cons is not None and cons.type == "compound_statement":
                out += [s for s in statements(cons) if s.type == "for_statement"]
    return out


@rewrite("warp_per_row", "warp_shuffle_reduce")
def warp_per_row(source: str, ctx: Context) -> list[Materialization]:
    return _all_kernels_too(source, ctx, False)


@rewrite("warp_scan", "warp_scan")
def warp_scan(source: str, ctx: Context) -> list[Materialization]:
    """warp_per_row that also splits running-sum (scan) loops across the warp: each pass takes 32
    consecutive elements, an inclusive `__shfl_up_sync` scan gives every lane its prefix, reads
    of the running value before its update see the exclusive prefix and later ones the
    inclusive one, and lane 31's total carries to the next pass."""
    return [m for m in _all_kernels_too(source, ctx, True) if "scan" in m.description]


def _all_kernels_too(source: str, ctx: Context, scans: bool) -> list[Materialization]:
    out = _warp_per_row(source, ctx, scans)
    if len(out) > 1:
        # every kernel at once: a reduction split across kernels gains most when all are parallel
        merged = source
        for name in [m.description.split(":")[0] for m in out]:
            step = [m for m in _warp_per_row(merged, ctx, scans) if m.description.startswith(name + ":")]
            if not step:
                break
            merged = step[0].source
        else:
            out.insert(0, Materialization(merged, out[0].rewrite, out[0].carrier,
                                          "every kernel: " + "; ".join(m.description for m in out)))
    return out


def _scan_loop(src: Source, k: Kernel, loop: Node, globals_: set[str]) -> Optional[str]:
    """Replacement text for a serial running-sum loop split across a warp, or None."""
    lv = _loop_var(src, loop)
    cond = loop.child_by_field_name("condition")
    body = loop.child_by_field_name("body")
    if lv is None or cond is None or body is None or body.type != "compound_statement" or \
            not _unit_update(src, loop, lv[1]):
        return None
    ty, var, init = lv
    for part in split_top(code(src, cond), "&&"):
        if not re.match(r"^%s\s*<" % re.escape(var), strip_parens(part)):
            return None
    if _has_loop(body) or _returns_or_syncs(src, body) or _bare_jumps(src, body) or has(src, body, r"\batomic\w*\s*\("):
        return None
    sts = statements(body)
    local = _declared_within(src, loop)
    upd_i, acc = None, None
    for i, st in enumerate(sts):
        if st.type != "expression_statement" or not st.named_children:
            continue
        e = st.named_children[0]
        if e.type == "assignment_expression" and e.children[1].type == "+=" and \
                e.child_by_field_name("left").type == "identifier" and text(e.child_by_field_name("left")) not in local:
            if acc is not None:
                return None
            upd_i, acc = i, text(e.child_by_field_name("left"))
    if acc is None:
        return None
    upd = sts[upd_i].named_children[0]
    rhs = raw(src, upd.child_by_field_name("right"))
    if mentions(rhs, acc):
        return None
    # every other write: memory indexed by the loop variable, or a variable of this body
    for n in walk(body):
        if n.type == "update_expression":
            return None
        if n.type != "assignment_expression" or n.start_byte == upd.start_byte:
            continue
        b = _base_name(n.child_by_field_name("left"))
        left = n.child_by_field_name("left")
        if b in globals_ and left.type == "subscript_expression" and mentions(sub_index(left), var):
            continue
        if b in local and b != acc:
            continue
        return None
    acc_t = None
    for decl in src.nodes("declaration", within=k.body):
        if decl.start_byte < loop.start_byte and any(declarator_name(d) == acc for d in decl.named_children
                                                     if d.type in ("init_declarator", "identifier")):
            c = code(src, decl)
            acc_t = c[:re.search(r"\b%s\b" % re.escape(acc), c).start()].strip()
    if not acc_t or acc_t.split()[-1] not in ("int", "float", "double", "unsigned", "long"):
        return None
    acc_t = " ".join(acc_t.replace("const", "").split())
    hoist, guarded, post = [], [], []
    for st in sts[:upd_i]:
        if st.type == "declaration" and not mentions(code(src, st), acc):
            ds = [d for d in st.named_children if d.type == "init_declarator"]
            if len(ds) != 1:
                return None
            c = code(src, st)
            dname = declarator_name(ds[0].child_by_field_name("declarator"))
            dty = " ".join(c[:re.search(r"\b%s\b" % re.escape(dname), c).start()].replace("const", "").split())
            hoist.append(f"{dty} {dname} = ks_in ? ({raw(src, ds[0].child_by_field_name('value'))}) : {dty}();")
        elif st.type == "declaration":
            return None
        else:
            guarded.append(st)
    for st in sts[upd_i + 1:]:
        post.append(st)

    def with_acc(st: Node, value: str) -> str:
        edits = [TextEdit(n.start_byte, n.end_byte, f"({acc} + {value})") for n in walk(st)
                 if n.type == "identifier" and text(n) == acc]
        return rewrite_range(src, st.start_byte, st.end_byte, edits)

    ind = indent_at(src, loop.start_byte)
    i2, i3 = ind + "    ", ind + "        "
    conds = split_top(code(src, cond), "&&")
    first = " && ".join(re.sub(r"^%s\b" % re.escape(var), "ks_b", strip_parens(c)) for c in conds)
    lines = [f"for ({ty} ks_b = {init}; {first}; ks_b += {WARP}) {{",
             f"{i2}// ks-optimize: 32 consecutive elements per pass, prefix from a warp scan",
             f"{i2}const {ty} {var} = ks_b + ks_lane;",
             f"{i2}const bool ks_in = {raw(src, cond)};"]
    lines += [f"{i2}{h}" for h in hoist]
    lines += [f"{i2}const {acc_t} ks_e = ks_in ? ({acc_t})({rhs}) : ({acc_t})0;",
              f"{i2}{acc_t} ks_inc = ks_e;",
              f"{i2}for (int ks_o = 1; ks_o < {WARP}; ks_o <<= 1) {{",
              f"{i3}const {acc_t} ks_up = __shfl_up_sync(0xffffffffu, ks_inc, ks_o);",
              f"{i3}if (ks_lane >= ks_o) ks_inc += ks_up;",
              f"{i2}}}",
              f"{i2}if (ks_in) {{"]
    lines += [f"{i3}{with_acc(st, '(ks_inc - ks_e)')}" for st in guarded]
    lines += [f"{i3}{with_acc(st, 'ks_inc')}" for st in post]
    lines += [f"{i2}}}",
              f"{i2}{acc} += __shfl_sync(0xffffffffu, ks_inc, {WARP - 1});",
              f"{ind}}}"]
    return "\n".join(lines)


def _warp_per_row(source: str, ctx: Context, scans: bool = False) -> list[Materialization]:
    """A kernel that gives each thread a whole row (or chunk) and walks it with serial loops ->
    one warp per row: those loops are split across the 32 lanes (`j = start + lane; j += 32`)
    and each accumulator they carry (`s += e`, `m = fmaxf(m, e)`, `o[d] += e`) is all-reduced
    with `__shfl_xor_sync` right after its loop, so every lane holds the row's value and the
    code after the loop is unchanged. The launch gets 32x the threads (a single-thread
    `<<<1, 1>>>` kernel becomes one warp). Sum accumulators must start at zero."""
    src = Source(source)
    out = []
    for k in kernels(src):
        c = code(src, k.body)
        if re.search(r"__syncthreads|__shared__|__shfl|\bks_lane\b|\b(threadIdx|blockIdx)\s*\.\s*[yz]\b", c):
            continue
        ls = launches(src, k.name)
        if not ls:
            continue
        decls = [d for d in index_decls(src, k) if d.axis == "x"]
        single = not decls and not re.search(r"\b(threadIdx|blockIdx|blockDim|gridDim)\b", c) and \
            all(code(src, l.grid) == "1" and code(src, l.block) == "1" for l in ls)
        if not single:
            if len(decls) != 1:
                continue
            d = decls[0]
            if len(re.findall(r"\b(threadIdx|blockIdx|blockDim|gridDim)\b", c)) != \
                    len(re.findall(r"\b(threadIdx|blockIdx|blockDim|gridDim)\b", code(src, d.value))):
                continue
            dims = [block_dims(src, l) for l in ls]
            if any(x is None or x[1:] != (1, 1) or x[0] % WARP for x in dims) or \
                    not all(grid_is_scalar(src, l) for l in ls):
                continue
        globals_ = set(local_pointers(src, k)) | {p.name for p in k.sig.params if p.is_pointer}
        edits: list[TextEdit] = []
        strided = n_scans = 0
        for loop in _top_loops(src, k.body):
            if not single and loop.start_byte < decls[0].stmt.end_byte:
                continue
            cl = _classify_loop(src, loop, globals_)
            if cl is None:
                rep = _scan_loop(src, k, loop, globals_) if scans else None
                if rep is not None:
                    edits.append(TextEdit(loop.start_byte, loop.end_byte, rep))
                    strided += 1
                    n_scans += 1
                continue
            accs, writes_global = cl
            ok = True
            for a in accs:
                if a.array:
                    a.size = _array_size(src, k, a.name) or ""
                    if not a.size:
                        ok = False
                elif a.op == "+" and not _zero_init_before(src, k, a.name, loop.start_byte):
                    ok = False
            if not ok:
                continue
            init = _loop_init_value(loop)
            upd = loop.child_by_field_name("update")
            edits.append(TextEdit(init.start_byte, init.end_byte, f"({raw(src, init)}) + ks_lane"))
            edits.append(TextEdit(upd.start_byte, upd.end_byte, f"{_loop_var(src, loop)[1]} += {WARP}"))
            ind = indent_at(src, loop.start_byte)
            after = [_allreduce(a, ind) for a in accs]
            if writes_global:
                after.append(f"{ind}__syncwarp();")
            if after:
                edits.append(TextEdit(loop.end_byte, loop.end_byte, "\n" + "\n".join(after)))
            strided += 1
        if not strided or (scans and not n_scans):
            continue
        if single:
            pos = k.body.start_byte + 1
            edits.append(TextEdit(pos, pos, f"\n{indent_at(src, statements(k.body)[0].start_byte) if statements(k.body) else '    '}"
                                             "const int ks_lane = threadIdx.x & 31;  // ks-optimize: one warp does this work"))
            for l in ls:
                edits.append(TextEdit(l.block.start_byte, l.block.end_byte, str(WARP)))
            what = "one thread -> one warp"
        else:
            d = decls[0]
            edits.append(TextEdit(d.value.start_byte, d.value.end_byte, f"({raw(src, d.value)}) / {WARP}"))
            eol = src.raw.find(b"\n", d.stmt.end_byte)
            eol = len(src.raw) if eol < 0 else eol
            edits.append(TextEdit(eol, eol, f"\n{indent_at(src, d.stmt.start_byte)}const int ks_lane = threadIdx.x & 31;"
                                            f"  // ks-optimize: one warp per {d.name}"))
            for l in ls:
                edits.append(TextEdit(l.grid.start_byte, l.grid.end_byte, f"({raw(src, l.grid)}) * {WARP}"))
            what = f"one {d.name} per thread -> one {d.name} per warp"
        how = f"{strided - n_scans} loop(s) lane-strided, accumulators all-reduced with __shfl_xor_sync"
        if n_scans:
            how += f"; {n_scans} running-sum loop(s) as warp scans (__shfl_up_sync)"
        out.append(_mat(src, edits, "warp_scan" if scans else "warp_per_row", f"{k.name}: {what}; {how}",
                        excerpt=code(src, decls[0].stmt) if decls else k.name))
    return out


# --------------------------------------------------------------------------- privatized atomics
def _conjuncts_around(src: Source, node: Node) -> list[str]:
    out = []
    p = node.parent
    while p is not None and p.type != "function_definition":
        if p.type == "if_statement":
            out += [strip_parens(c) for c in split_top(strip_parens(code(src, p.child_by_field_name("condition"))), "&&")]
        elif p.type == "conditional_expression":
            out += [strip_parens(c) for c in split_top(strip_parens(code(src, p.child_by_field_name("condition"))), "&&")]
        p = p.parent
    return out


@rewrite("privatize_atomics", "privatized_atomics")
def privatize_atomics(source: str, ctx: Context) -> list[Materialization]:
    """Global atomics into a bounded table (`if (b < bins) atomicAdd(&counts[b], v)`) -> a
    per-block copy of the table in shared memory, cleared at block start and merged with one
    global atomic per non-zero entry at block end. Precondition: the table fits the shared copy
    (bins <= PRIV_CAP): checked at run time, larger tables keep the global atomics. A kernel with
    one element per thread is first turned into a grid-stride loop over a clamped grid (same
    step: privatizing a 256-element block gains nothing)."""
    src = Source(source)
    out = []
    for k in kernels(src):
        if has(src, k.body, r"__shared__|__syncthreads|\bks_priv\b"):
            continue
        if not _gs_loops(src, k) and not any(re.search(r"\b%s\b" % re.escape(lp.name), "") for lp in []):
            oe = one_element(src, k)
            clamp = clamp_edits(src, k.name) if oe is not None else None
            if oe is None or clamp is None:
                continue
            if not has(src, k.body, r"\batomicAdd\s*\("):
                continue
            staged = apply_edits(src.raw, grid_stride_edits(src, oe) + clamp)
            for m in privatize_atomics(staged, ctx):
                if m.description.startswith(k.name + ":"):
                    m.description += " (after turning it into a grid-stride loop over a clamped grid)"
                    out.append(m)
            continue
        if re.search(r"\breturn\b", code(src, k.body)):
            continue
        params = {p.name: p for p in k.sig.params}
        calls = []
        table, bound, elem = None, None, None
        for call in src.nodes("call_expression", within=k.body):
            if call_name(call) != "atomicAdd":
                continue
            args = call.child_by_field_name("arguments")
            a = args.named_children if args is not None else []
            if len(a) != 2 or a[0].type != "pointer_expression" or a[0].named_children[0].type != "subscript_expression":
                continue
            sub = a[0].named_children[0]
            base, idx = sub_base(sub), " ".join(sub_index(sub).split())
            p = params.get(base)
            if p is None or p.pointer_depth != 1 or p.const or p.base_type not in ("int", "unsigned int", "unsigned",
                                                                                 "float", "unsigned long long"):
                continue
            b = None
            for c in _conjuncts_around(src, call):
                m = re.fullmatch(r"(.+?)\s*<\s*(.+)", c)
                if m and " ".join(m.group(1).split()) == idx:
                    b = m.group(2).strip()
            if b is None or not idents(b) <= (set(params) | set(src.defines)):
                continue
            if table not in (None, base) or bound not in (None, b):
                continue
            table, bound, elem = base, b, p.base_type
            calls.append((call, sub, a[1]))
        if not calls:
            continue
        ind = indent_at(src, statements(k.body)[0].start_byte) if statements(k.body) else "    "
        head = (f"\n{ind}// ks-optimize: a per-block copy of {table} in shared memory when it fits "
                f"({bound} <= {PRIV_CAP}), merged with one atomic per non-zero entry\n"
                f"{ind}__shared__ {elem} ks_priv[{PRIV_CAP}];\n"
                f"{ind}const bool ks_priv_on = ({bound}) <= {PRIV_CAP};\n"
                f"{ind}if (ks_priv_on)\n"
                f"{ind}    for (int ks_b = threadIdx.x; ks_b < ({bound}); ks_b += blockDim.x) ks_priv[ks_b] = 0;\n"
                f"{ind}__syncthreads();")
        tail = (f"{ind}__syncthreads();\n"
                f"{ind}if (ks_priv_on)\n"
                f"{ind}    for (int ks_b = threadIdx.x; ks_b < ({bound}); ks_b += blockDim.x) {{\n"
                f"{ind}        const {elem} ks_c = ks_priv[ks_b];\n"
                f"{ind}        if (ks_c) atomicAdd(&{table}[ks_b], ks_c);\n"
                f"{ind}    }}\n")
        edits = [TextEdit(k.body.start_byte + 1, k.body.start_byte + 1, head)]
        for call, sub, val in calls:
            idx = sub_index(sub)
            v = raw(src, val)
            edits.append(TextEdit(call.start_byte, call.end_byte,
                                  f"(ks_priv_on ? atomicAdd(&ks_priv[{idx}], {v}) : atomicAdd(&{table}[{idx}], {v}))"))
        close = k.body.end_byte - 1
        edits.append(TextEdit(line_start(src, close), line_start(src, close), tail))
        out.append(_mat(src, edits, "privatize_atomics",
                        f"{k.name}: atomics into {table} privatized per block in shared memory",
                        guards=[f"{bound} <= {PRIV_CAP} (runtime check; global atomics otherwise)"],
                        excerpt=code(src, calls[0][0])))
    return out


# --------------------------------------------------------------------------- shared tiles
def _additive_terms(expr: str) -> list[str]:
    return [strip_parens(t) for t in split_top(strip_parens(expr), "+")]


def _two_d(src: Source, k: Kernel) -> Optional[tuple[IndexDecl, IndexDecl, tuple[int, int, int]]]:
    decls = {d.axis: d for d in index_decls(src, k)}
    if set(decls) != {"x", "y"} or len(index_decls(src, k)) != 2:
        return None
    ls = launches(src, k.name)
    dims = {block_dims(src, l) for l in ls}
    if not ls or None in dims or len(dims) != 1:
        return None
    bd = dims.pop()
    if bd[2] != 1 or bd[0] * bd[1] > 1024:
        return None
    return decls["x"], decls["y"], bd


@rewrite("stage_transpose_tile", "coalesced_transpose")
def stage_transpose_tile(source: str, ctx: Context) -> list[Materialization]:
    """`out[f(c) + r] = in[g(r) + c]` (a transposing copy: the load coalesced along x, the store
    along y) -> the block's BY x BX patch goes through a shared tile: loaded with x = column,
    stored with consecutive threads on consecutive output addresses. Padded so the transposed
    reads fall in distinct banks. No launch change."""
    src = Source(source)
    out = []
    for k in kernels(src):
        two = _two_d(src, k)
        if two is None or has(src, k.body, r"__shared__|__syncthreads|\breturn\b"):
            continue
        dx, dy, (bx, by, _) = two
        sts = statements(k.body)
        last = sts[-1]
        if last.type != "if_statement" or last.child_by_field_name("alternative") is not None:
            continue
        if any(s.type != "declaration" for s in sts[:-1]):
            continue
        cons = last.child_by_field_name("consequence")
        if cons.type == "compound_statement":
            inner = statements(cons)
            if len(inner) != 1:
                continue
            cons = inner[0]
        if cons.type != "expression_statement" or not cons.named_children or \
                cons.named_children[0].type != "assignment_expression":
            continue
        asg = cons.named_children[0]
        left, right = asg.child_by_field_name("left"), asg.child_by_field_name("right")
        if asg.children[1].type != "=" or left.type != "subscript_expression" or right.type != "subscript_expression":
            continue
        c, r = dx.name, dy.name
        ptrs = pointer_params(k.sig)
        lp, sp = ptrs.get(sub_base(right)), ptrs.get(sub_base(left))
        if lp is None or sp is None:
            continue
        load_terms, store_terms = _additive_terms(sub_index(right)), _additive_terms(sub_index(left))
        if c not in load_terms or r not in store_terms:
            continue
        if sum(mentions(t, c) for t in load_terms) != 1 or sum(mentions(t, r) for t in store_terms) != 1:
            continue
        elem = lp.base_type
        pitch = bx + (WARP // by if by < WARP and WARP % by == 0 else 1)
        ind = indent_at(src, last.start_byte)
        cond = raw(src, last.child_by_field_name("condition"))
        ct = " ".join(dx.type.replace("const", "").split()) or "int"
        rt = " ".join(dy.type.replace("const", "").split()) or "int"
        rep = (f"// ks-optimize: the {by} x {bx} patch goes through a shared tile so the stores are coalesced too\n"
               f"{ind}__shared__ {elem} ks_tile[{by}][{pitch}];\n"
               f"{ind}if {cond} ks_tile[threadIdx.y][threadIdx.x] = {raw(src, right)};\n"
               f"{ind}__syncthreads();\n"
               f"{ind}{{\n"
               f"{ind}    const int ks_l = threadIdx.y * {bx} + threadIdx.x;\n"
               f"{ind}    const {ct} {c} = blockIdx.x * {bx} + ks_l / {by};\n"
               f"{ind}    const {rt} {r} = blockIdx.y * {by} + ks_l % {by};\n"
               f"{ind}    if {cond} {raw(src, left)} = ks_tile[ks_l % {by}][ks_l / {by}];\n"
               f"{ind}}}")
        out.append(_mat(src, [TextEdit(last.start_byte, last.end_byte, rep)], "stage_transpose_tile",
                        f"{k.name}: transposing copy staged through a shared {by} x {pitch} tile (reads and writes coalesced)",
                        excerpt=code(src, last)))
    return out


@rewrite("stage_matmul_tiles", "shared_tile")
def stage_matmul_tiles(source: str, ctx: Context) -> list[Materialization]:
    """A dot-product loop `for (k = 0; k < K; ++k) acc += A[..row..k..] * B[..k..col..]` in a
    one-output-per-thread kernel with a square T x T block -> T x T tiles of both operands staged
    in shared memory per k-step (zero-filled outside the matrices), the loop reading them. The
    kernel's early return moves after the loop: every thread loads and meets the barriers."""
    src = Source(source)
    out = []
    for k in kernels(src):
        two = _two_d(src, k)
        if two is None or has(src, k.body, r"__shared__|__syncthreads"):
            continue
        dx, dy, (bx, by, _) = two
        if bx != by or bx not in (8, 16, 32):
            continue
        T = bx
        col, row = dx.name, dy.name
        sts = statements(k.body)
        ret_i = next((i for i, s in enumerate(sts) if s.type == "if_statement" and
                      re.fullmatch(r"\{?\s*return\s*;\s*\}?", code(src, s.child_by_field_name("consequence")))), None)
        if ret_i is None:
            continue
        ret = sts[ret_i]
        cond = strip_parens(code(src, ret.child_by_field_name("condition")))
        parts = split_top(cond, "||")
        rowbad = [p for p in parts if mentions(p, row) and not mentions(p, col)]
        colbad = [p for p in parts if mentions(p, col) and not mentions(p, row)]
        if len(rowbad) + len(colbad) != len(parts):
            continue
        loop = next((s for s in sts[ret_i + 1:] if s.type == "for_statement"), None)
        if loop is None or any(_returns_or_syncs(src, s) for s in sts[ret_i + 1:]):
            continue
        lv = _loop_var(src, loop)
        lcond = loop.child_by_field_name("condition")
        if lv is None or lcond is None or not _unit_update(src, loop, lv[1]) or lv[2].strip() != "0":
            continue
        kv = lv[1]
        m = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(kv), code(src, lcond))
        if not m:
            continue
        kb = m.group(1)
        body = loop.child_by_field_name("body")
        ptrs = pointer_params(k.sig)
        subs = [s for s in subscripts_of(src, body, ptrs)]
        if len(subs) != 2 or any(is_lhs(s) for s in subs) or _has_loop(body):
            continue
        a = next((s for s in subs if mentions(sub_index(s), row) and mentions(sub_index(s), kv) and
                  not mentions(sub_index(s), col)), None)
        b = next((s for s in subs if mentions(sub_index(s), col) and mentions(sub_index(s), kv) and
                  not mentions(sub_index(s), row)), None)
        if a is None or b is None or a is b:
            continue
        ta, tb = ptrs[sub_base(a)].base_type, ptrs[sub_base(b)].base_type
        inner = rewrite_range(src, body.start_byte, body.end_byte,
                              [TextEdit(a.start_byte, a.end_byte, "ks_As[threadIdx.y][ks_kk]"),
                               TextEdit(b.start_byte, b.end_byte, f"ks_Bs[ks_kk][threadIdx.x]")])
        kdecl = f"const int {kv} = ks_k0 + ks_kk; " if mentions(inner, kv) else ""
        ind = indent_at(src, ret.start_byte)
        i2 = ind + "    "
        rb = " || ".join(rowbad) or "false"
        cb = " || ".join(colbad) or "false"
        between = rewrite_range(src, ret.end_byte, loop.start_byte, [])
        tiles = (f"const bool ks_live = !({cond});  // ks-optimize: every thread loads tiles and meets the barriers"
                 f"{between}"
                 f"__shared__ {ta} ks_As[{T}][{T + 1}];\n"
                 f"{ind}__shared__ {tb} ks_Bs[{T}][{T + 1}];\n"
                 f"{ind}for (int ks_k0 = 0; ks_k0 < {kb}; ks_k0 += {T}) {{\n"
                 f"{i2}{{ const int {kv} = ks_k0 + threadIdx.x; ks_As[threadIdx.y][threadIdx.x] = "
                 f"(!({rb}) && {kv} < {kb}) ? {raw(src, a)} : {ta}(); }}\n"
                 f"{i2}{{ const int {kv} = ks_k0 + threadIdx.y; ks_Bs[threadIdx.y][threadIdx.x] = "
                 f"(!({cb}) && {kv} < {kb}) ? {raw(src, b)} : {tb}(); }}\n"
                 f"{i2}__syncthreads();\n"
                 f"{i2}#pragma unroll\n"
                 f"{i2}for (int ks_kk = 0; ks_kk < {T}; ++ks_kk) {{ {kdecl}{inner} }}\n"
                 f"{i2}__syncthreads();\n"
                 f"{ind}}}\n"
                 f"{ind}if (!ks_live) return;")
        out.append(_mat(src, [TextEdit(ret.start_byte, loop.end_byte, tiles)], "stage_matmul_tiles",
                        f"{k.name}: {T} x {T} shared tiles of {sub_base(a)} and {sub_base(b)} per k-step",
                        excerpt=code(src, loop)[:160]))
    return out


def _grid_dim3_edits(src: Source, launch: Launch, factor: int) -> Optional[list[TextEdit]]:
    """Edits dividing a launch's dim3 grid (x and y) by `factor` (rounded up), or None."""
    g = code(src, launch.grid)
    args_text, base = None, None
    m = re.fullmatch(r"dim3\s*\((.*)\)", g)
    if m:
        node = launch.grid
        args = next((c for c in walk(node) if c.type == "argument_list"), None)
    elif re.fullmatch(r"\w+", g) and launch.host is not None:
        args = None
        for decl in src.nodes("declaration"):
            if not (launch.host.start_byte <= decl.start_byte < launch.call.start_byte):
                continue
            c = code(src, decl)
            if re.match(r"dim3\s+%s\s*[({]" % re.escape(g), c):
                args = next((n for n in walk(decl) if n.type in ("argument_list", "initializer_list")), None)
    else:
        return None
    if args is None or len(args.named_children) < 2:
        return None
    edits = []
    for a in args.named_children[:2]:
        edits.append(TextEdit(a.start_byte, a.end_byte, f"(({raw(src, a)}) + {factor - 1}) / {factor}"))
    return edits


def _matmul_register_tiles(src: Source, k: Kernel, T: int, R: int) -> Optional[Materialization]:
    two = _two_d(src, k)
    if two is None:
        return None
    dx, dy, _ = two
    col, row = dx.name, dy.name
    sts = statements(k.body)
    ret_i = next((i for i, s in enumerate(sts) if s.type == "if_statement" and
                  re.fullmatch(r"\{?\s*return\s*;\s*\}?", code(src, s.child_by_field_name("consequence")))), None)
    if ret_i is None:
        return None
    ret = sts[ret_i]
    cond = strip_parens(code(src, ret.child_by_field_name("condition")))
    parts = split_top(cond, "||")
    rowbad = [p for p in parts if mentions(p, row) and not mentions(p, col)]
    colbad = [p for p in parts if mentions(p, col) and not mentions(p, row)]
    if len(rowbad) + len(colbad) != len(parts):
        return None
    li = next((i for i in range(ret_i + 1, len(sts)) if sts[i].type == "for_statement"), None)
    if li is None:
        return None
    loop, between, epilogue = sts[li], sts[ret_i + 1:li], sts[li + 1:]
    if not epilogue or any(_returns_or_syncs(src, s) or _has_loop(s) for s in epilogue + between):
        return None
    lv = _loop_var(src, loop)
    lcond = loop.child_by_field_name("condition")
    if lv is None or lcond is None or not _unit_update(src, loop, lv[1]) or lv[2].strip() != "0":
        return None
    kv = lv[1]
    m = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(kv), code(src, lcond))
    body = loop.child_by_field_name("body")
    if not m or body is None or _has_loop(body):
        return None
    kb = m.group(1)
    ptrs = pointer_params(k.sig)
    subs = subscripts_of(src, body, ptrs)
    if len(subs) != 2 or any(is_lhs(s) for s in subs):
        return None
    a = next((s for s in subs if mentions(sub_index(s), row) and mentions(sub_index(s), kv) and
              not mentions(sub_index(s), col)), None)
    b = next((s for s in subs if mentions(sub_index(s), col) and mentions(sub_index(s), kv) and
              not mentions(sub_index(s), row)), None)
    if a is None or b is None:
        return None
    # the accumulator: `acc += ...` in the body, declared `T acc = 0` between the return and the loop
    asg = [n for n in walk(body) if n.type == "assignment_expression"]
    if len(asg) != 1 or asg[0].children[1].type != "+=" or asg[0].child_by_field_name("left").type != "identifier":
        return None
    acc = text(asg[0].child_by_field_name("left"))
    acc_t = None
    for st in between:
        c = code(src, st)
        mm = re.fullmatch(r"((?:unsigned\s+)?\w+)\s+%s\s*=\s*0(\.0*)?[fF]?\s*;" % re.escape(acc), c)
        if mm:
            acc_t = mm.group(1)
    if acc_t is None or any(mentions(code(src, s), acc) and not re.match(r"^\w+\s+%s\s*=" % re.escape(acc), code(src, s))
                            for s in between):
        return None
    ls = launches(src, k.name)
    grid_edits = []
    for l in ls:
        e = _grid_dim3_edits(src, l, R)
        if e is None:
            return None
        grid_edits += e
    ta, tb = ptrs[sub_base(a)].base_type, ptrs[sub_base(b)].base_type
    inner = rewrite_range(src, body.start_byte, body.end_byte,
                          [TextEdit(a.start_byte, a.end_byte, f"ks_As[threadIdx.y + {T} * ks_a][ks_kk]"),
                           TextEdit(b.start_byte, b.end_byte, f"ks_Bs[ks_kk][threadIdx.x + {T} * ks_b]")] +
                          [TextEdit(n.start_byte, n.end_byte, "ks_acc[ks_a][ks_b]") for n in walk(body)
                           if n.type == "identifier" and text(n) == acc])
    if mentions(inner, kv):
        inner = f"{{ const int {kv} = ks_k0 + ks_kk; {inner} }}"
    ind = indent_at(src, ret.start_byte)
    i2, i3 = ind + "    ", ind + "        "
    rt = " ".join(dy.type.replace("const", "").split()) or "int"
    ct = " ".join(dx.type.replace("const", "").split()) or "int"
    rb = " || ".join(rowbad) or "false"
    cb = " || ".join(colbad) or "false"
    TR = T * R
    epi = "\n".join(reindent(raw(src, s), i3, first=True) for s in epilogue)
    text_ = (f"// ks-optimize: a {TR} x {TR} block tile, {R} x {R} outputs per thread in registers, "
             f"operand tiles in shared memory\n"
             f"{ind}const {rt} ks_row0 = blockIdx.y * {TR};\n"
             f"{ind}const {ct} ks_col0 = blockIdx.x * {TR};\n"
             f"{ind}{acc_t} ks_acc[{R}][{R}] = {{}};\n"
             f"{ind}__shared__ {ta} ks_As[{TR}][{T + 1}];\n"
             f"{ind}__shared__ {tb} ks_Bs[{T}][{TR}];\n"
             f"{ind}for (int ks_k0 = 0; ks_k0 < {kb}; ks_k0 += {T}) {{\n"
             f"{i2}#pragma unroll\n"
             f"{i2}for (int ks_a = 0; ks_a < {R}; ++ks_a) {{\n"
             f"{i3}const {rt} {row} = ks_row0 + threadIdx.y + {T} * ks_a;\n"
             f"{i3}const int {kv} = ks_k0 + threadIdx.x;\n"
             f"{i3}ks_As[threadIdx.y + {T} * ks_a][threadIdx.x] = (!({rb}) && {kv} < {kb}) ? {raw(src, a)} : {ta}();\n"
             f"{i2}}}\n"
             f"{i2}#pragma unroll\n"
             f"{i2}for (int ks_b = 0; ks_b < {R}; ++ks_b) {{\n"
             f"{i3}const {ct} {col} = ks_col0 + threadIdx.x + {T} * ks_b;\n"
             f"{i3}const int {kv} = ks_k0 + threadIdx.y;\n"
             f"{i3}ks_Bs[threadIdx.y][threadIdx.x + {T} * ks_b] = (!({cb}) && {kv} < {kb}) ? {raw(src, b)} : {tb}();\n"
             f"{i2}}}\n"
             f"{i2}__syncthreads();\n"
             f"{i2}#pragma unroll\n"
             f"{i2}for (int ks_kk = 0; ks_kk < {T}; ++ks_kk) {{\n"
             f"{i3}#pragma unroll\n"
             f"{i3}for (int ks_a = 0; ks_a < {R}; ++ks_a) {{\n"
             f"{i3}    #pragma unroll\n"
             f"{i3}    for (int ks_b = 0; ks_b < {R}; ++ks_b) {inner}\n"
             f"{i3}}}\n"
             f"{i2}}}\n"
             f"{i2}__syncthreads();\n"
             f"{ind}}}\n"
             f"{ind}#pragma unroll\n"
             f"{ind}for (int ks_a = 0; ks_a < {R}; ++ks_a) {{\n"
             f"{i2}#pragma unroll\n"
             f"{i2}for (int ks_b = 0; ks_b < {R}; ++ks_b) {{\n"
             f"{i3}const {rt} {row} = ks_row0 + threadIdx.y + {T} * ks_a;\n"
             f"{i3}const {ct} {col} = ks_col0 + threadIdx.x + {T} * ks_b;\n"
             f"{i3}const {acc_t} {acc} = ks_acc[ks_a][ks_b];\n"
             f"{i3}if ({cond}) continue;\n"
             f"{epi}\n"
             f"{i2}}}\n"
             f"{ind}}}")
    # the statements between the return and the loop (the accumulator's declaration) are dropped
    edits = [TextEdit(ret.start_byte, sts[-1].end_byte, text_)] + grid_edits
    return _mat(src, edits, "stage_matmul_tiles",
                f"{k.name}: {TR} x {TR} block tile with {R} x {R} register outputs per thread, "
                f"{sub_base(a)}/{sub_base(b)} tiles in shared memory (grid divided by {R})",
                excerpt=code(src, loop)[:160])


_stage_matmul_r1 = stage_matmul_tiles


@rewrite("stage_matmul_tiles", "shared_tile")
def stage_matmul_tiles(source: str, ctx: Context) -> list[Materialization]:  # noqa: F811 - extends the T x T form
    """Shared-memory tiles for a one-output-per-thread dot-product kernel: the T x T form (one
    output per thread), and T*R x T*R block tiles with R x R outputs per thread in registers
    (R = 2, 4; the dim3 grid divided by R)."""
    out = _stage_matmul_r1(source, ctx)
    src = Source(source)
    for k in kernels(src):
        if has(src, k.body, r"__shared__|__syncthreads"):
            continue
        two = _two_d(src, k)
        if two is None or two[2][0] != two[2][1] or two[2][0] not in (8, 16, 32):
            continue
        for R in (4, 2):
            if two[2][0] * R > 64:
                continue
            m = _matmul_register_tiles(src, k, two[2][0], R)
            if m is not None:
                out.append(m)
    return out
