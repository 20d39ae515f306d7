"""Carrier detection: which optimization-carrying constructs a CUDA kernel contains.

`detect_carriers(source)` maps each carrier name of the corpus vocabulary
(`corpora/kernels/README.md`) to the sites where it occurs. Detection reads code only: every
comment is blanked out (replaced by spaces, newlines kept, so byte offsets stay those of the
original text) before any pattern is matched, and the tree is parsed from the blanked text.
The corpus marks its sites with `// carrier: NAME` comments; those comments are the ground truth
that recall is measured against and must never feed the detectors.

All offsets are UTF-8 byte offsets into the original source.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Sequence

from tree_sitter import Node

from corpora.code.nodes import call_name, declarator_name, enclosing, is_assignment_target, same
from corpora.code.parse import FunctionSig, text
from corpora.code.source import Site, Source, expand_macro
from mining.carriers_meaning import LOAD_INTRINSICS, STORE_INTRINSICS, extend_detectors


# --------------------------------------------------------------------------- vocabulary

VEC_TYPE = r"(?:u?int|float|double|u?short|u?char|u?long|longlong|ulonglong)[234]|__half2|half2|__nv_bfloat162"
_VEC_CAST = re.compile(rb"^reinterpret_cast\s*<\s*(const\s+)?(?:volatile\s+)?(" + VEC_TYPE.encode() +
                       rb")\s*(?:const\s*)?\*\s*(?:__restrict__\s*)?>$")


# --------------------------------------------------------------------------- vector accesses

@dataclass(frozen=True)
class VectorAccess:
    kind: str  # "load" | "store"
    node: Node  # the dereference (subscript / pointer expression) or the __ldg call
    cast: Node  # the reinterpret_cast call expression
    vec_type: str  # "float4", "int4", ...
    base: str  # the text of the reinterpreted (scalar) pointer expression
    index: Optional[str]  # element index in vector units ("0" when dereferenced directly)
    pointer: Optional[str]  # the vector pointer variable, if the cast was bound to one
    via: str  # "subscript" | "deref" | "ldg"


def _access(src: Source, start: Node) -> Optional[tuple[str, Node, Optional[str], str]]:
    """Follow a vector pointer expression up to its dereference: (kind, node, index, via)."""
    n = start
    offset: Optional[str] = None
    while True:
        p = n.parent
        if p is None:
            return None
        if p.type == "parenthesized_expression":
            n = p
            continue
        if p.type == "binary_expression" and text(p.child_by_field_name("operator") or p.children[1]) == "+" \
                and same(p.child_by_field_name("left"), n):
            right = " ".join(text(p.child_by_field_name("right")).split())
            offset = right if offset is None else f"{offset} + {right}"
            n = p
            continue
        if p.type == "subscript_expression" and same(p.child_by_field_name("argument"), n):
            idx = p.child_by_field_name("indices")
            inner = text(idx)[1:-1].strip() if idx is not None else "0"
            index = inner if offset is None else f"({offset}) + ({inner})"
            kind = "store" if is_assignment_target(p) else "load"
            return kind, p, index, "subscript"
        if p.type == "pointer_expression" and p.children and p.children[0].type == "*":
            kind = "store" if is_assignment_target(p) else "load"
            return kind, p, offset if offset is not None else "0", "deref"
        if p.type == "argument_list" and p.parent is not None and p.parent.type == "call_expression":
            name = call_name(p.parent)
            if name in LOAD_INTRINSICS and len(p.named_children) == 1:
                return "load", p.parent, offset if offset is not None else "0", "ldg"
            if name in STORE_INTRINSICS:
                return "store", p.parent, None, "call"
        return None


def vector_accesses(src: Source) -> list[VectorAccess]:
    """Every global-memory access through a `reinterpret_cast<VEC*>` (bound to a pointer or not),
    found once per source (the load and store detectors and the query's value model all ask)."""
    return list(src.memo("vector_accesses", lambda: _vector_accesses(src)))


def _vector_accesses(src: Source) -> list[VectorAccess]:
    out: list[VectorAccess] = []
    shared = set(src.shared_names)
    for call in src.nodes("call_expression"):
        fn = call.child_by_field_name("function")
        if fn is None or fn.type != "template_function":
            continue
        m = _VEC_CAST.match(re.sub(rb"\s+", b" ", src.code[fn.start_byte:fn.end_byte]).replace(b"< ", b"<"))
        if not m:
            continue
        args = call.child_by_field_name("arguments")
        if args is None or len(args.named_children) != 1:
            continue
        base = " ".join(text(args.named_children[0]).split())
        first = re.match(r"\s*&?\s*\(?\s*(\w+)", base)
        if base.lstrip().startswith("&") or (first and first.group(1) in shared):
            continue  # shared-memory reinterpretation, not a global access
        vec = m.group(2).decode()
        parent = call.parent
        while parent is not None and parent.type == "parenthesized_expression":
            parent = parent.parent
        if parent is not None and parent.type == "init_declarator":
            name = declarator_name(parent.child_by_field_name("declarator"))
            f = src.function_at(call.start_byte)
            fn_node = src.func_node(f) if f else None
            if not name or fn_node is None:
                continue
            for ident in src.nodes("identifier", within=fn_node):
                if ident.start_byte <= parent.end_byte or text(ident) != name:
                    continue
                acc = _access(src, ident)
                if acc:
                    out.append(VectorAccess(acc[0], acc[1], call, vec, base, acc[2], name, acc[3]))
        else:
            acc = _access(src, call)
            if acc:
                out.append(VectorAccess(acc[0], acc[1], call, vec, base, acc[2], None, acc[3]))
    out.sort(key=lambda a: a.node.start_byte)
    return out


# --------------------------------------------------------------------------- detectors

Detector = Callable[[Source], list[Site]]
DETECTORS: dict[str, Detector] = {}


def detector(name: str):
    def deco(fn: Detector) -> Detector:
        DETECTORS[name] = fn
        return fn
    return deco


def _regex_sites(src: Source, carrier: str, pattern: bytes, flags: int = 0, group: int = 0) -> list[Site]:
    return [src.site(carrier, m.start(group), m.end(group)) for m in src.regex(pattern, flags=flags)]


def _calls(src: Source, names: Iterable[str]) -> Iterator[Node]:
    names = set(names)
    for call in src.nodes("call_expression"):
        if call_name(call) in names:
            yield call


@detector("ldg")
def _ldg(src: Source) -> list[Site]:
    return [src.site("ldg", c.start_byte, c.end_byte) for c in _calls(src, LOAD_INTRINSICS)]


@detector("restrict")
def _restrict(src: Source) -> list[Site]:
    return _regex_sites(src, "restrict", rb"\b__restrict(?:__)?\b")


@detector("launch_bounds")
def _launch_bounds(src: Source) -> list[Site]:
    return [src.site("launch_bounds", n.start_byte, n.end_byte) for n in src.nodes("launch_bounds")] or \
        _regex_sites(src, "launch_bounds", rb"\b__launch_bounds__\s*\([^)]*\)")


@detector("unroll_pragma")
def _unroll(src: Source) -> list[Site]:
    return _regex_sites(src, "unroll_pragma", rb"^[ \t]*(#[ \t]*pragma[ \t]+unroll\b[^\n]*)", re.M, 1)


FAST_MATH = {"__expf", "__exp10f", "__logf", "__log2f", "__log10f", "__sinf", "__cosf", "__tanf", "__sincosf",
             "__powf", "__fdividef", "rsqrtf", "__frsqrt_rn", "__saturatef"} | {
    f"__{op}_{r}" for op in ("frcp", "fsqrt", "fdiv") for r in ("rn", "rz", "ru", "rd")}


@detector("fast_math")
def _fast_math(src: Source) -> list[Site]:
    return [src.site("fast_math", c.start_byte, c.end_byte) for c in _calls(src, FAST_MATH)]


@detector("vector_load")
def _vector_load(src: Source) -> list[Site]:
    return [src.site("vector_load", a.node.start_byte, a.node.end_byte) for a in vector_accesses(src)
            if a.kind == "load"]


@detector("vector_store")
def _vector_store(src: Source) -> list[Site]:
    return [src.site("vector_store", a.node.start_byte, a.node.end_byte) for a in vector_accesses(src)
            if a.kind == "store"]


_STRIDE_WORDS = re.compile(r"\b(gridDim|blockDim)\s*\.\s*[xyz]\b")


def _is_stride(expr: str, strides: set[str]) -> bool:
    """Does `expr` use a grid or block size, directly or through one of the variables `strides`?"""
    return bool(_STRIDE_WORDS.search(expr)) or any(re.search(r"\b%s\b" % re.escape(v), expr) for v in strides)


def stride_variables(src: Source, f: FunctionSig) -> set[str]:
    """Local variables holding a grid/block size (`int stride = gridDim.x * blockDim.x`), also
    through other such variables (`groups = gridDim.x * blockDim.y; step = groups * rows;`)."""
    assigns = [(m.group(1).decode(), m.group(2).decode())
               for m in re.finditer(rb"\b(\w+)\s*=\s*([^;=]+);", src.func_code(f))]
    out: set[str] = set()
    while True:
        more = {name for name, value in assigns if name not in out and _is_stride(value, out)}
        if not more:
            return out
        out |= more


def grid_stride_loops(src: Source) -> list[Node]:
    loops = []
    for f in src.funcs:
        fn = src.func_node(f)
        if fn is None:
            continue
        strides = stride_variables(src, f)
        for loop in src.nodes("for_statement", within=fn):
            upd = loop.child_by_field_name("update")
            if upd is None:
                continue
            u = " ".join(text(upd).split())
            m = re.match(r"^(\w+)\s*\+=\s*(.+)$", u)
            if not m:
                continue
            if _is_stride(m.group(2), strides):
                loops.append(loop)
    return loops


def grid_stride_whiles(src: Source) -> list[Node]:
    """`while (i < n) { ...; i += stride; }` (the sample-style spelling), `stride` a grid or block
    size and the update the body's last statement and only write of `i`."""
    out = []
    for f in src.funcs:
        fn = src.func_node(f)
        if fn is None:
            continue
        strides = stride_variables(src, f)
        for loop in src.nodes("while_statement", within=fn):
            cond, body = loop.child_by_field_name("condition"), loop.child_by_field_name("body")
            if cond is None or body is None or body.type != "compound_statement":
                continue
            m = re.fullmatch(r"\(\s*(\w+)\s*<\s*[^<>]+\)", " ".join(text(cond).split()))
            stmts = [c for c in body.named_children if c.type != "comment"]
            if not m or not stmts:
                continue
            upd = re.fullmatch(r"(\w+)\s*\+=\s*(.+);", " ".join(text(stmts[-1]).split()))
            if not upd or upd.group(1) != m.group(1):
                continue
            writes = re.findall(r"\b%s\s*(?:\+\+|--|[-+*/%%&|^]?=(?!=))" % re.escape(m.group(1)), text(body))
            if len(writes) == 1 and _is_stride(upd.group(2), strides):
                out.append(loop)
    return out


@dataclass
class MacroLoop:
    """A loop spelled by a function-like macro and the block after its invocation."""
    node: Node  # `NAME(args) { body }` (tree-sitter reads it as a nested function definition)
    loop: str  # its expansion: `for (...) { body }`


def loop_macros(src: Source) -> dict[str, tuple[list[str], str]]:
    """NAME -> (parameters, header) for function-like macros whose whole body is a `for (...)` header."""
    return {name: (params, body) for name, (params, body) in src.function_macros.items()
            if re.fullmatch(r"for\s*\(.*\)", body) and body.count("(") == body.count(")")}


def macro_grid_stride_loops(src: Source) -> list[MacroLoop]:
    macros = loop_macros(src)
    if not macros:
        return []
    out = []
    for node in src.nodes("function_definition"):
        decl = node.child_by_field_name("declarator")
        name = decl.child_by_field_name("declarator") if decl is not None else None
        params = decl.child_by_field_name("parameters") if decl is not None else None
        body = node.child_by_field_name("body")
        if name is None or params is None or body is None or text(name) not in macros or \
                enclosing(node, "compound_statement") is None:
            continue
        names, header = macros[text(name)]
        args = [text(c) for c in params.named_children]
        if len(args) != len(names):
            continue
        loop = expand_macro(header, names, args) + " " + src.raw[body.start_byte:body.end_byte].decode("utf-8", "replace")
        probe = Source("__global__ void ks_probe() {\n" + loop + "\n}\n")
        if grid_stride_loops(probe):
            out.append(MacroLoop(node, loop))
    return out


@detector("grid_stride")
def _grid_stride(src: Source) -> list[Site]:
    return [src.site("grid_stride", n.start_byte, n.end_byte) for n in grid_stride_loops(src)] + \
        [src.site("grid_stride", m.node.start_byte, m.node.end_byte) for m in macro_grid_stride_loops(src)] + \
        [src.site("grid_stride", n.start_byte, n.end_byte) for n in grid_stride_whiles(src)]


def _loop_update(loop: Optional[Node]) -> str:
    upd = loop.child_by_field_name("update") if loop is not None else None
    return " ".join(text(upd).split()) if upd is not None else ""


_HALVING = re.compile(r"(>>=\s*1\b|/=\s*2\b|=\s*\w+\s*(>>\s*1|/\s*2)\b)")
_DOUBLING = re.compile(r"(<<=\s*1\b|\*=\s*2\b|=\s*\w+\s*(<<\s*1|\*\s*2)\b)")


@detector("warp_shuffle_reduce")
def _shuffle_reduce(src: Source) -> list[Site]:
    out = []
    for call in _calls(src, {"__shfl_xor_sync", "__shfl_down_sync", "__shfl_xor", "__shfl_down"}):
        loop = enclosing(call, "for_statement")
        halving = loop is not None and _HALVING.search(_loop_update(loop))
        p = call.parent
        combined = False
        if p is not None and p.type == "assignment_expression" and text(p.children[1]) in ("+=", "*=", "|=", "&=",
                                                                                            "^="):
            combined = True
        if p is not None and p.type == "binary_expression":
            combined = True
        if p is not None and p.type == "argument_list" and p.parent is not None and \
                re.search(r"(max|min|merge|add|sum)", call_name(p.parent), re.I):
            combined = True
        if halving or combined:
            out.append(src.site("warp_shuffle_reduce", call.start_byte, call.end_byte))
    return out


@detector("warp_scan")
def warp_scan_sites(src: Source) -> list[Site]:
    out = []
    for call in _calls(src, {"__shfl_up_sync", "__shfl_up"}):
        loop = enclosing(call, "for_statement")
        if loop is not None and _DOUBLING.search(_loop_update(loop)):
            out.append(src.site("warp_scan", call.start_byte, call.end_byte))
    return out


_LANE0 = rb"\(\s*\(?\s*(?:\w*lane\w*|threadIdx\.x\s*(?:&\s*31|%\s*32)|tid\s*(?:&\s*31|%\s*32))\s*\)?\s*==\s*0\s*\)"


def _shared_arrays(src: Source) -> set[str]:
    return {name for _, name, dims in src.shared_decls if dims} | {
        name for decl, name, _ in src.shared_decls if b"extern" in src.code[decl.start_byte:decl.end_byte]}


@detector("block_reduce_shared")
def block_reduce_shared_sites(src: Source) -> list[Site]:
    out = []
    for name in sorted(_shared_arrays(src)):
        n = re.escape(name.encode())
        for m in src.regex(rb"\bif\s*" + _LANE0 + rb"\s*\{?[^;{}]*?\b" + n + rb"\s*\[\s*\w+\s*\]\s*=[^=]"):
            if re.search(rb"\b" + n + rb"\s*\[\s*\w*lane\w*\s*\]", src.code):
                out.append(src.site("block_reduce_shared", m.start(), m.end()))
    return out


@detector("block_scan")
def block_scan_sites(src: Source) -> list[Site]:
    out = []
    for name in sorted(_shared_arrays(src)):
        n = re.escape(name.encode())
        for m in src.regex(rb"\bif\s*\(\s*\w*lane\w*\s*==\s*(?:31|WARP_SIZE\s*-\s*1|warpSize\s*-\s*1)\s*\)\s*\{?[^;{}]*?\b"
                           + n + rb"\s*\[\s*\w+\s*\]\s*=[^=]"):
            f = src.function_at(m.start())
            if f and re.search(rb"\bfor\s*\([^;]*;[^;]*;[^)]*\)\s*\{?[^}]*\b" + n + rb"\s*\[", src.func_code(f)):
                out.append(src.site("block_scan", m.start(), m.end()))
    return out


# --------------------------------------------------------------------------- the reduction ladder
# (Harris, "Optimizing Parallel Reduction in CUDA"; the forms are read by mining/operators/reduction_tree.py)

@detector("compile_time_unroll")
def compile_time_unroll_sites(src: Source) -> list[Site]:
    """A shared-memory tree written out per stride (at least two guarded levels, each with its barrier)."""
    from mining.operators.reduction_tree import rung_sequences

    return [src.site("compile_time_unroll", run[0].first.start_byte, run[-1].last.end_byte)
            for _, run in rung_sequences(src)]


@detector("unrolled_last_warp")
def unrolled_last_warp_sites(src: Source) -> list[Site]:
    """The last warp's tree levels run without block barriers after a sequential loop."""
    from mining.operators.reduction_tree import after, rung_sequences, shared_arrays, tree_loops, warp_tail

    arrays = shared_arrays(src)
    levels = [(t.fn, t.loop) for t in tree_loops(src) if t.kind == "sequential" and t.low > 0]
    levels += [(fn, run[-1].last) for fn, run in rung_sequences(src)]
    out = []
    for fn, last in levels:
        nxt = after(last)
        tail = warp_tail(src, nxt[0], fn, arrays) if nxt else None
        if tail is not None:
            out.append(src.site("unrolled_last_warp", tail.stmt.start_byte, tail.stmt.end_byte))
    return out


@detector("sequential_addressing")
def sequential_addressing_sites(src: Source) -> list[Site]:
    """Tree levels where thread T combines slot T + s into slot T, the stride halving (loop or rungs)."""
    from mining.operators.reduction_tree import rung_sequences, tree_loops

    out = [src.site("sequential_addressing", t.loop.start_byte, t.loop.end_byte)
           for t in tree_loops(src) if t.kind == "sequential"]
    out += [src.site("sequential_addressing", run[0].first.start_byte, run[-1].last.end_byte)
            for _, run in rung_sequences(src)]
    return out


@detector("divergence_free_indexing")
def divergence_free_indexing_sites(src: Source) -> list[Site]:
    """Tree levels whose active threads are contiguous: a strided index (2 * s * T) or sequential addressing,
    rather than every (2s)-th thread by a modulo test."""
    from mining.operators.reduction_tree import tree_loops

    out = [src.site("divergence_free_indexing", t.loop.start_byte, t.loop.end_byte)
           for t in tree_loops(src) if t.kind == "strided"]
    return out + [src.site("divergence_free_indexing", s.start_byte, s.end_byte) for s in sequential_addressing_sites(src)]


def _first_identifier(node: Node) -> str:
    m = re.match(r"\s*&?\s*\(?\s*(\w+)", text(node))
    return m.group(1) if m else ""


def _atomic_calls(src: Source) -> Iterator[Node]:
    return _calls(src, {"atomicAdd", "atomicSub", "atomicMax", "atomicMin", "atomicOr", "atomicAnd", "atomicInc",
                        "atomicAdd_block"})


@detector("atomic_per_block")
def atomic_per_block_sites(src: Source) -> list[Site]:
    out = []
    shared = set(src.shared_names)
    for call in _atomic_calls(src):
        args = call.child_by_field_name("arguments")
        if args is None or not args.named_children or call.parent is None or \
                call.parent.type != "expression_statement":
            continue  # a ticket (its value used) is not a publication
        target = _first_identifier(args.named_children[0])
        f = src.function_at(call.start_byte)
        if f is None or target in shared or target not in src.global_names(f):
            continue
        guard = enclosing(call, "if_statement")
        cond = text(guard.child_by_field_name("condition")) if guard is not None else ""
        single = re.search(r"(lane\w*|tid|threadIdx\.x|warp\w*)\s*==\s*0\b", cond)
        loop = enclosing(call, "for_statement")
        merge = loop is not None and any(re.search(r"\b%s\s*\[" % re.escape(s), text(loop)) for s in shared)
        if single or merge:
            out.append(src.site("atomic_per_block", call.start_byte, call.end_byte))
    return out


@detector("dynamic_tile_id")
def _dynamic_tile_id(src: Source) -> list[Site]:
    out = []
    for call in _calls(src, {"atomicAdd", "atomicInc"}):
        p = call.parent
        if p is not None and p.type == "assignment_expression" and \
                _first_identifier(p.child_by_field_name("left")) in src.shared_names:
            out.append(src.site("dynamic_tile_id", p.start_byte, p.end_byte))
    return out


@detector("decoupled_lookback")
def decoupled_lookback_sites(src: Source) -> list[Site]:
    out = []
    for f in src.funcs:
        code = src.func_code(f)
        vol = re.search(rb"\bvolatile\b", code)
        if vol and re.search(rb"\bwhile\s*\(", code) and (re.search(rb"\b(__ballot_sync|__any_sync)\b", code) or
                                                          re.search(rb"\bpred\w*\b", code)):
            out.append(src.site("decoupled_lookback", f.start_byte + vol.start(), f.start_byte + vol.end()))
    return out


@detector("privatized_atomics")
def _privatized_atomics(src: Source) -> list[Site]:
    out = []
    shared = set(src.shared_names)
    # device functions whose pointer parameter is the target of an atomic
    atomic_params: dict[str, set[int]] = {}
    for call in _atomic_calls(src):
        args = call.child_by_field_name("arguments")
        if args is None or not args.named_children:
            continue
        target = _first_identifier(args.named_children[0])
        if target in shared:
            out.append(src.site("privatized_atomics", call.start_byte, call.end_byte))
            continue
        f = src.function_at(call.start_byte)
        if f is not None:
            for i, p in enumerate(f.params):
                if p.name == target and p.is_pointer:
                    atomic_params.setdefault(f.name, set()).add(i)
    for call in src.nodes("call_expression"):
        positions = atomic_params.get(call_name(call))
        args = call.child_by_field_name("arguments")
        if not positions or args is None:
            continue
        for i, a in enumerate(args.named_children):
            if i in positions and _first_identifier(a) in shared:
                out.append(src.site("privatized_atomics", call.start_byte, call.end_byte))
                break
    return out


def _shared_written(src: Source, name: str) -> bool:
    n = re.escape(name.encode())
    return bool(re.search(rb"\b" + n + rb"\s*(\[[^;]*?\])+\s*=[^=]", src.code) or
                re.search(rb"&\s*" + n + rb"\s*\[", src.code) or
                re.search(rb"memcpy_async\s*\([^;]*\b" + n + rb"\b", src.code) or
                re.search(rb"reinterpret_cast\s*<[^>]*>\s*\(\s*" + n + rb"\s*\)", src.code) or
                written_through(src, name))


def written_through(src: Source, name: str) -> bool:
    """An assignment's left side reaches an element of `name` through a wrapper: a view macro, a
    cast, parentheses, `&` / `*` or a member (`FLOAT4(tile[y][x]) = v`, `HALF2(s[i]) = v`,
    `*(float4 *)&s[i] = v`, `s[i].x = v`), never through another array's index (`y[s[i]] = v`
    writes y)."""
    for a in src.nodes("assignment_expression"):
        stack = [a.child_by_field_name("left")]
        while stack:
            node = stack.pop()
            if node is None:
                continue
            if node.type == "identifier":
                if text(node) == name:
                    return True
            elif node.type == "subscript_expression":
                stack.append(node.child_by_field_name("argument"))  # the base; its index is read
            else:
                stack.extend(node.named_children)
    return False


def _warp_exchange(src: Source, name: str) -> bool:
    """Every store to the array is followed at once by `__syncwarp(`: a slot-per-lane exchange
    inside warps (what replaces a shuffle), not a tile shared by the block."""
    n = re.escape(name.encode())
    stores = list(re.finditer(rb"\b" + n + rb"\s*(\[[^;]*?\])+\s*=[^=][^;]*;", src.code))
    return bool(stores) and all(re.match(rb"\s*__syncwarp\s*\(", src.code[m.end():]) for m in stores)


@detector("shared_tile")
def _shared_tile(src: Source) -> list[Site]:
    out = []
    atomic_targets = set()
    priv = {s.start_byte for s in _privatized_atomics(src)}
    for call in _atomic_calls(src):
        args = call.child_by_field_name("arguments")
        if args is not None and args.named_children:
            atomic_targets.add(_first_identifier(args.named_children[0]))
    for decl, name, dims in src.shared_decls:
        f = src.function_at(decl.start_byte)
        if f is None or not re.search(rb"__syncthreads\s*\(", src.func_code(f)):
            continue
        extern = b"extern" in src.code[decl.start_byte:decl.end_byte]
        if name in atomic_targets or (extern and priv and not re.search(rb"memcpy_async", src.func_code(f))):
            continue
        if not extern:
            if not dims:
                continue
            expanded = [src.expand(text(d)) for d in dims]
            if len(dims) == 1 and re.search(r"/\s*\(?\s*32\b|/\s*\(?\s*WARP", expanded[0] + text(dims[0])):
                continue  # one slot per warp: reduction scratch, not a tile
        if _shared_written(src, name) and not _warp_exchange(src, name):
            out.append(src.site("shared_tile", decl.start_byte, decl.end_byte))
    return out


PAD_MACRO = re.compile(r"(^|_)(LD|PAD\w*|PITCH|STRIDE)$|PAD", re.I)


def extent_only_names(src: Source, byte: int) -> set[str]:
    """Names that the function around ``byte`` uses only inside its shared arrays' dimensions
    (`__shared__ half s[BK][BM + OFFSET]` and OFFSET nowhere else): an extent that no index ever
    reads is padding, whatever it is called (a template parameter, a constant)."""
    f = src.function_at(byte)
    fn = src.func_node(f) if f is not None else None
    body = fn.child_by_field_name("body") if fn is not None else None
    if body is None:
        return set()
    in_dims: dict[str, int] = {}
    for decl, _, dims in src.shared_decls:
        if body.start_byte <= decl.start_byte < body.end_byte:
            for d in dims:
                for ident in re.findall(r"\b[A-Za-z_]\w*\b", text(d)):
                    in_dims[ident] = in_dims.get(ident, 0) + 1
    everywhere = re.findall(r"\b[A-Za-z_]\w*\b", src.code[body.start_byte:body.end_byte].decode("utf-8", "replace"))
    return {n for n, k in in_dims.items() if everywhere.count(n) == k}


def padding_term(src: Source, dim: Node) -> bool:
    """Is ``dim`` (a shared array dimension) `X + c` with c padding: a literal, a *PAD* name, `w / k`,
    or a name only shared dimensions use."""
    t = " ".join(text(dim).split())
    if re.search(r"\+\s*(\d+|\w*PAD\w*)\s*$", t) or re.search(r"\+\s*\w+\s*/\s*\d+\s*$", t):
        return True
    m = re.search(r"^(\w+)\s*\+\s*([A-Za-z_]\w*)$", t)
    if not m or m.group(2) not in extent_only_names(src, dim.start_byte):
        return False
    return _pad_value(src, dim, m.group(2)) != 0  # `+ OFFSET` with OFFSET = 0 pads nothing


def template_value(src: Source, f: Optional[FunctionSig], name: str) -> Optional[int]:
    """The integer a function's template parameter `name` stands for: its argument where the file
    launches or calls the function with explicit template arguments (`k<128, 4><<<g, b>>>`), else
    its default (`const int OFFSET = 0`); None when neither is a constant."""
    fn = src.func_node(f) if f is not None else None
    tmpl = fn.parent if fn is not None else None
    plist = tmpl.child_by_field_name("parameters") if tmpl is not None and tmpl.type == "template_declaration" else None
    if plist is None:
        return None
    pos, default = None, None
    for i, p in enumerate(plist.named_children):
        m = re.match(r"^[\w:\s]*?\b(\w+)\s*(?:=\s*(.+))?$", " ".join(text(p).split()))
        if m and m.group(1) == name:
            pos, default = i, m.group(2)
            break
    if pos is None:
        return None
    given = []
    for m in re.finditer(rb"\b" + re.escape(f.name.encode()) + rb"\s*<([^<>;]*)>\s*(?:<<<|\()", src.code):
        args = [a.strip() for a in m.group(1).decode("utf-8", "replace").split(",")]
        if pos < len(args):
            given.append(args[pos])
    for v in given + ([default] if default else []):
        e = re.sub(r"[()\s]", "", src.expand(v))
        if re.fullmatch(r"\d+", e):
            return int(e)
    return None


def _pad_value(src: Source, decl: Node, name: str) -> Optional[int]:
    e = re.sub(r"[()\s]", "", src.expand(name))
    if re.fullmatch(r"\d+", e):
        return int(e)
    return template_value(src, src.function_at(decl.start_byte), name)


@detector("shared_padding")
def _shared_padding(src: Source) -> list[Site]:
    out = []
    used_macros = set()
    for decl, name, dims in src.shared_decls:
        for d in dims:
            t = " ".join(text(d).split())
            # a dimension plus a few elements (at most one row of banks), spelled as a number, a
            # constant or a template parameter the launch sets (`BM + OFFSET`); not a stencil's halo
            knob = re.search(r"\+\s*([A-Za-z_]\w*)\s*$", t)
            small = knob is not None and not re.search(r"HALO|RADIUS|APRON", knob.group(1), re.I) and \
                0 < (_pad_value(src, decl, knob.group(1)) or 0) <= 32
            if padding_term(src, d) or small:
                out.append(src.site("shared_padding", d.start_byte, d.end_byte))
            for ident in re.findall(r"\b[A-Za-z_]\w*\b", t):
                used_macros.add(ident)
    # padded pitches defined as macros (`#define LD (HEAD_DIM + 4)`), used by shared arrays or offsets
    for m in src.regex(rb"(?m)^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+\(?\s*\w+\s*\+\s*(\d+|\w+\s*/\s*\d+)\s*\)?[ \t]*$"):
        macro = m.group(1).decode()
        if PAD_MACRO.search(macro) and re.search(rb"\b" + m.group(1) + rb"\b", src.code[m.end():]):
            out.append(src.site("shared_padding", m.start(1), m.end()))
    # index remaps that skip a bank every so often: q + (q >> 3)
    for m in src.regex(rb"\b(\w+)\s*\+\s*\(\s*\1\s*>>\s*\d+\s*\)"):
        out.append(src.site("shared_padding", m.start(), m.end()))
    return out


@detector("halo_tile")
def _halo_tile(src: Source) -> list[Site]:
    out = []
    for decl, name, dims in src.shared_decls:
        if any(re.search(r"\+\s*(2|2\s*\*\s*\w+|\w*HALO\w*|2\s*\*\s*\w*R\w*)\s*\)*\s*$", src.expand(text(d)))
               for d in dims):
            f = src.function_at(decl.start_byte)
            if f and re.search(rb"-\s*(1|R|RADIUS|HALO)\b", src.func_code(f)) and \
                    re.search(rb">=\s*0\b", src.func_code(f)):
                out.append(src.site("halo_tile", decl.start_byte, decl.end_byte))
    return out


def local_arrays(src: Source, f: FunctionSig, min_dims: int = 1) -> list[tuple[Node, str, int]]:
    fn = src.func_node(f)
    out = []
    if fn is None:
        return out
    for decl in src.nodes("declaration", within=fn):
        if re.search(rb"\b(__shared__|extern)\b", src.code[decl.start_byte:decl.end_byte]):
            continue
        for d in decl.named_children:
            node = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            dims = 0
            while node is not None and node.type == "array_declarator":
                dims += 1
                node = node.child_by_field_name("declarator")
            if dims >= min_dims and node is not None:
                out.append((decl, text(node), dims))
    return out


def _accumulated_across_loop(src: Source, at: int, name: str, indices: bytes) -> bool:
    """Whether the statement at byte `at` sits in a loop whose variable the element's indices do not
    use (the same element updated again on every trip: a running accumulation), unless that loop's
    body sets the tile afresh before it (`s[r][c] = dot;` then `s[r][c] = exp(s[r][c] - m)`: a map)."""
    node = src.tree.root_node.descendant_for_byte_range(at, at)
    names = set(re.findall(rb"[A-Za-z_]\w*", indices))
    n = re.escape(name.encode())
    while node is not None and node.type not in ("function_definition", "lambda_expression"):
        loop = node.type in ("while_statement", "do_statement")
        if node.type == "for_statement":
            init = node.child_by_field_name("initializer")
            vs = set(re.findall(rb"([A-Za-z_]\w*)\s*=", src.code[init.start_byte:init.end_byte])) if init else set()
            loop = not vs or not vs & names
        if loop:
            body = node.child_by_field_name("body") or node
            before = src.code[body.start_byte:at]
            return not any(not re.search(rb"\b" + n + rb"\s*\[", m.group(1))
                           for m in re.finditer(rb"\b" + n + rb"\s*\[[^]]+\]\s*\[[^]]+\]\s*=(?!=)([^;]*);", before))
        node = node.parent
    return False


@detector("register_tile")
def register_tile_sites(src: Source) -> list[Site]:
    out = []
    for f in src.funcs:
        code = src.func_code(f)
        for decl, name, dims in local_arrays(src, f, 2):
            n = re.escape(name.encode())
            # an element accumulated in place, whatever the spelling: `+=`, `fmaf(...)`, or any
            # expression that reads the element it assigns (`t[i][j] = __fmaf_rn(a, b, t[i][j])`)
            # inside a loop that does not pick the element (a reduction, not an element-wise map)
            if re.search(rb"\b" + n + rb"\s*\[[^]]+\]\s*\[[^]]+\]\s*(\+=|-=|\*=|=\s*fmaf?\s*\()", code) or \
                    any(_accumulated_across_loop(src, f.start_byte + m.start(), name, m.group(1) + b" " + m.group(2))
                        for m in re.finditer(rb"\b" + n + rb"\s*\[([^]]+)\]\s*\[([^]]+)\]\s*=(?!=)[^;]*\b" + n +
                                             rb"\s*\[\s*\1\s*\]\s*\[\s*\2\s*\]", code)) or \
                    re.search(rb"mma_sync\s*\(\s*" + n + rb"\b", code):
                out.append(src.site("register_tile", decl.start_byte, decl.end_byte))
        # a sliding register window: a[q] = b[q]; b[q] = c[q];
        for m in re.finditer(rb"\b(\w+)\s*\[\s*(\w+)\s*\]\s*=\s*(\w+)\s*\[\s*\2\s*\]\s*;\s*\3\s*\[\s*\2\s*\]\s*=\s*"
                             rb"(\w+)\s*\[\s*\2\s*\]\s*;", code):
            out.append(src.site("register_tile", f.start_byte + m.start(), f.start_byte + m.end()))
    return out


def global_load_expr(src: Source, f: FunctionSig, expr: str) -> bool:
    if re.search(r"\b(__ldg|__ldcg|__ldcs)\s*\(", expr):
        return True
    # g[i], and the spellings a load keeps once __ldg is gone: *(g + i), *g, (g + i)[k]
    return any(re.search(r"\b%s\s*\[|\*\s*\(?\s*%s\b|\(\s*%s\b[^;]*?\)\s*\[" % ((re.escape(g),) * 3), expr)
               for g in src.global_names(f))


@detector("register_cache")
def register_cache_sites(src: Source) -> list[Site]:
    out = []
    for f in src.funcs:
        fn = src.func_node(f)
        if fn is None or not f.is_kernel:
            continue
        loops = list(src.nodes("for_statement", within=fn))
        # arrays filled from global memory in one loop and read in another
        for decl, name, dims in local_arrays(src, f, 1):
            if dims != 1:
                continue
            n = re.escape(name)
            filled = [lp for lp in loops if re.search(r"\b%s\s*\[[^]]+\]\s*=\s*([^;=][^;]*);" % n, text(lp)) and
                      any(global_load_expr(src, f, m.group(1)) for m in
                          re.finditer(r"\b%s\s*\[[^]]+\]\s*=\s*([^;=][^;]*);" % n, text(lp)))]
            if not filled:
                continue
            # the innermost fill loop (an outer loop around both the fill and its readers is not the fill)
            filled.sort(key=lambda lp: lp.end_byte - lp.start_byte)
            readers = [lp for lp in loops if lp.start_byte >= filled[0].end_byte and
                       re.search(r"\b%s\s*\[" % n, text(lp))]
            if readers:
                out.append(src.site("register_cache", decl.start_byte, decl.end_byte))
        # a value loaded once before a loop and reused in every iteration
        for decl in src.nodes("declaration", within=fn):
            if enclosing(decl, "for_statement", "while_statement") is not None:
                continue
            for d in decl.named_children:
                if d.type != "init_declarator" or d.child_by_field_name("value") is None:
                    continue
                if d.child_by_field_name("declarator").type != "identifier":
                    continue
                name = text(d.child_by_field_name("declarator"))
                if not global_load_expr(src, f, text(d.child_by_field_name("value"))):
                    continue
                after = [lp for lp in loops if lp.start_byte > decl.end_byte and
                         re.search(r"\b%s\b" % re.escape(name), text(lp.child_by_field_name("body") or lp))]
                if after and not any(re.search(r"\b%s\s*([-+*/|&^]|<<|>>)?=[^=]" % re.escape(name), text(lp))
                                        for lp in after):
                    out.append(src.site("register_cache", decl.start_byte, decl.end_byte))
    return out


@detector("double_buffer")
def double_buffer_sites(src: Source) -> list[Site]:
    out = []
    for decl, name, dims in src.shared_decls:
        if dims and src.expand(text(dims[0])).strip("() ") == "2":
            f = src.function_at(decl.start_byte)
            if f and re.search(rb"(&\s*1\b|\^\s*1\b|%\s*2\b)", src.func_code(f)):
                out.append(src.site("double_buffer", decl.start_byte, decl.end_byte))
    return out


@detector("multi_stage_pipeline")
def _multi_stage(src: Source) -> list[Site]:
    return _regex_sites(src, "multi_stage_pipeline",
                        rb"\b(__pipeline_wait_prior\s*\(|cuda::pipeline\b|cuda::make_pipeline\b|cp\.async\.wait_group)")


@detector("async_copy")
def _async_copy(src: Source) -> list[Site]:
    return _regex_sites(src, "async_copy", rb"(\b__pipeline_memcpy_async\b|\bcuda::memcpy_async\b|"
                                           rb"\bmemcpy_async\b|cp\.async\b)")


@detector("tensor_core_wmma")
def _wmma(src: Source) -> list[Site]:
    return _regex_sites(src, "tensor_core_wmma", rb"\b(?:nvcuda::)?wmma::(mma_sync|load_matrix_sync|fragment)\b")


_EXP = r"(?:__expf|expf|exp|__exp2f|exp2f|exp2)\s*\("


@detector("online_softmax")
def _online_softmax(src: Source) -> list[Site]:
    out = []
    for f in src.funcs:
        code = src.func_code(f).decode("utf-8", "replace")
        exp_vars = {m.group(1) for m in re.finditer(r"\b(\w+)\s*=\s*" + _EXP + r"[^;]*-", code)}
        for m in re.finditer(r"\b(\w+(?:\s*\[\s*\w+\s*\])?)\s*=\s*\1\s*\*\s*(" + _EXP + r"|\w+)", code):
            factor = m.group(2)
            if re.match(_EXP, factor) or factor in exp_vars:
                # the running max is replaced after the rescale
                if re.search(r"\b\w+(\s*\[\s*\w+\s*\])?\s*=\s*\w*(new|mx|max)\w*\s*;", code[m.end():]):
                    out.append(src.site("online_softmax", f.start_byte + len(code[:m.start()].encode()),
                                        f.start_byte + len(code[:m.end()].encode())))
    return out


@detector("single_pass_stats")
def _single_pass_stats(src: Source) -> list[Site]:
    out = []
    for f in src.funcs:
        code = src.func_code(f)
        m2 = re.search(rb"(\.\s*|\b)(m2|M2)\s*=[^=]", code)
        if m2 and re.search(rb"(\.\s*|\b)mean\s*=[^=]", code):
            out.append(src.site("single_pass_stats", f.start_byte + m2.start(), f.start_byte + m2.end()))
            continue
        # sum and sum of squares accumulated together
        m = re.search(rb"\b(\w+)\s*\+=\s*(\w+)\s*;\s*(\w+)\s*\+=\s*\2\s*\*\s*\2\s*;", code)
        if m:
            out.append(src.site("single_pass_stats", f.start_byte + m.start(), f.start_byte + m.end()))
    return out


def _global_stores(src: Source, f: FunctionSig) -> list[tuple[str, Node, str]]:
    """(output pointer, assignment, rhs text) for stores through global pointers of `f`."""
    fn = src.func_node(f)
    out = []
    if fn is None:
        return out
    gl = src.global_names(f)
    vec = {a.node.start_byte: a for a in vector_accesses(src) if a.kind == "store"}
    for asg in src.nodes("assignment_expression", within=fn):
        left = asg.child_by_field_name("left")
        right = asg.child_by_field_name("right")
        if left is None or right is None:
            continue
        target = None
        if left.start_byte in vec:
            target = _first_identifier_of_text(vec[left.start_byte].base)
        elif left.type == "subscript_expression":
            target = _first_identifier(left)
        if target in gl:
            out.append((target, asg, text(right)))
    return out


def _first_identifier_of_text(s: str) -> str:
    m = re.match(r"\s*&?\s*\(?\s*(\w+)", s)
    return m.group(1) if m else ""


@detector("fused_residual")
def _fused_residual(src: Source) -> list[Site]:
    out = []
    for f in src.funcs:
        if not f.is_kernel:
            continue
        stores = _global_stores(src, f)
        outputs = {t for t, _, _ in stores}
        if len(outputs) < 2:
            continue
        for t, asg, rhs in stores:
            m = re.match(r"^\s*(\w+)(\s*\[[^]]+\])?\s*$", rhs)
            if not m:
                continue
            name = m.group(1)
            if any(t2 != t and re.search(r"\b%s\b" % re.escape(name), rhs2) for t2, _, rhs2 in stores):
                out.append(src.site("fused_residual", asg.start_byte, asg.end_byte))
    return out


def pointer_roots(src: Source, f: FunctionSig) -> dict[str, set[str]]:
    """Global pointer name -> the pointer parameters it is derived from."""
    params = {p.name for p in f.params if p.is_pointer}
    roots = {p: {p} for p in params}
    fn = src.func_node(f)
    if fn is None:
        return roots
    for _ in range(3):
        for decl in src.nodes("declaration", within=fn):
            for d in decl.named_children:
                if d.type == "init_declarator" and d.child_by_field_name("value") is not None:
                    inner = d.child_by_field_name("declarator")
                    if inner is None or inner.type != "pointer_declarator":
                        continue
                    name = declarator_name(inner)
                    value = text(d.child_by_field_name("value"))
                    # (a member named like a pointer, `blockIdx.x` or `p->x`, is not that pointer)
                    got = set().union(*[roots[g] for g in list(roots)
                                        if re.search(r"(?<![\w.])(?<!->)%s\b" % re.escape(g), value)] or [set()])
                    if name and got:
                        roots[name] = roots.get(name, set()) | got
    return roots


def value_sources(src: Source, f: FunctionSig) -> tuple[dict[str, set[str]], Callable[[str], set[str]]]:
    """Local variable -> the pointer parameters its value was loaded from (through simple dataflow)."""
    roots = pointer_roots(src, f)
    code = src.func_code(f).decode("utf-8", "replace")
    var: dict[str, set[str]] = {}

    def sources(expr: str) -> set[str]:
        out: set[str] = set()
        for ident in set(re.findall(r"\b[A-Za-z_]\w*\b", expr)):
            out |= roots.get(ident, set()) | var.get(ident, set())
        return out

    for _ in range(3):
        for m in re.finditer(r"\b(\w+)\s*(?:\[[^]=;]*\]\s*)?(?:\.\s*[xyzw]\s*)?=\s*([^;=][^;]*);", code):
            name = m.group(1)
            if name in roots:
                continue
            got = sources(m.group(2))
            if got - var.get(name, set()):
                var[name] = var.get(name, set()) | got
    return var, sources


@detector("fused_epilogue")
def _fused_epilogue(src: Source) -> list[Site]:
    out = []
    device_fns = {f.name for f in src.funcs if not f.is_kernel and f.name}
    for f in src.funcs:
        if not f.is_kernel:
            continue
        code = src.func_code(f).decode("utf-8", "replace")
        _, sources = value_sources(src, f)
        for t, asg, rhs in _global_stores(src, f):
            exprs = [rhs]
            m = re.match(r"^\s*(\w+)\s*$", rhs)
            if m:  # stored through a local (o.x = ...; store o)
                exprs += [mm.group(1) for mm in re.finditer(r"\b%s\s*\.\s*[xyzw]\s*=\s*([^;]+);" % m.group(1), code)]
            joined = " ".join(exprs)
            activation = any(re.search(r"\b%s\s*\(" % re.escape(d), joined) for d in device_fns
                             if not re.search(r"(sum|reduce|merge|count|load|store|publish|pad)", d, re.I))
            inputs = sources(joined) - sources(t) - {t}
            if activation or (len(inputs) >= 2 and "*" in joined):
                out.append(src.site("fused_epilogue", asg.start_byte, asg.end_byte))
    return out


def _index_parts(node: Node) -> list[str]:
    parts = []
    while node is not None and node.type == "subscript_expression":
        idx = node.child_by_field_name("indices")
        parts.insert(0, text(idx)[1:-1] if idx is not None else "")
        node = node.child_by_field_name("argument")
    return parts


def _shared_subscripts(src: Source, lhs: bool) -> Iterator[tuple[str, Node, list[str]]]:
    shared = set(src.shared_names)
    for sub in src.nodes("subscript_expression"):
        if sub.parent is not None and sub.parent.type == "subscript_expression" and \
                same(sub.parent.child_by_field_name("argument"), sub):
            continue  # not the outermost
        parts = _index_parts(sub)
        base = sub
        while base.type == "subscript_expression":
            base = base.child_by_field_name("argument")
        name = text(base)
        if name in shared and len(parts) >= 2 and is_assignment_target(sub) == lhs:
            yield name, sub, parts


def _axis(expr: str) -> str:
    x = bool(re.search(r"\b(threadIdx\.x|tx)\b", expr))
    y = bool(re.search(r"\b(threadIdx\.y|ty)\b", expr))
    return "x" if x and not y else "y" if y and not x else ""


@detector("coalesced_transpose")
def _coalesced_transpose(src: Source) -> list[Site]:
    out = []
    writes = [(n, s, [_axis(p) for p in parts[-2:]]) for n, s, parts in _shared_subscripts(src, True)]
    reads = [(n, s, [_axis(p) for p in parts[-2:]]) for n, s, parts in _shared_subscripts(src, False)]
    for wn, ws, wa in writes:
        if wa not in (["y", "x"], ["x", "y"]):
            continue
        for rn, rs, ra in reads:
            if rn == wn and ra == wa[::-1]:
                out.append(src.site("coalesced_transpose", rs.start_byte, rs.end_byte))
    return out


_SINGLE = re.compile(r"\b([A-Za-z_]\w*)\s*=(?!=)\s*([^;{}]+);")


def _top_split(expr: str, op: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in expr:
        depth += ch in "(["
        depth -= ch in ")]"
        if ch == op and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [t for t in out + [cur.strip()] if t]


def _subscript_rows(src: Source, f: FunctionSig, code: str, gl: set) -> set[str]:
    """Identifiers a global subscript's row is built from, through the function's single-assignment
    locals: `a[addr]` with `addr = m * K + k` and `m = by * BM + tid / 2` gives m, by, BM, tid
    (the row factor of the term multiplied by a leading dimension)."""
    found: dict[str, list[str]] = {}
    for m in _SINGLE.finditer(code):
        found.setdefault(m.group(1), []).append(" ".join(m.group(2).split()))
    defs = {k: v[0] for k, v in found.items() if len(v) == 1}
    rows: set[str] = set()
    for m in re.finditer(r"\b(\w+)\s*\[([^\[\]]+)\]", code):
        if m.group(1) not in gl:
            continue
        idx = m.group(2).strip()
        for _ in range(3):  # a bare local: its definition
            if re.fullmatch(r"\w+", idx) and idx in defs:
                idx = defs[idx]
        for term in _top_split(idx, "+"):
            fs = _top_split(term, "*")
            if len(fs) == 2 and re.fullmatch(r"[A-Za-z_]\w*", fs[1]):
                todo = re.findall(r"\b[A-Za-z_]\w*\b", fs[0])
                while todo:
                    v = todo.pop()
                    if v not in rows:
                        rows.add(v)
                        todo.extend(re.findall(r"\b[A-Za-z_]\w*\b", defs.get(v, "")))
    return rows


@detector("transposed_tile")
def transposed_tile_sites(src: Source) -> list[Site]:
    out = []
    written = list(_shared_subscripts(src, True))
    for f in src.funcs:
        code = src.func_code(f).decode("utf-8", "replace")
        gl = src.global_names(f)
        # identifiers used as the row of a global pointer: G + (... r ...) * LD
        rows = set()
        for m in re.finditer(r"\b(\w+)\s*\+\s*\((?:size_t|long long|int64_t)?\)?\s*\(([^()]*)\)\s*\*\s*\w+", code):
            if m.group(1) in gl:
                rows.update(re.findall(r"\b[a-z_]\w*\b", m.group(2)))
        subs = [(name, sub, parts) for name, sub, parts in written if f.start_byte <= sub.start_byte < f.end_byte]
        if not subs:
            continue
        rows |= _subscript_rows(src, f, code, gl)
        if not rows:
            continue
        for name, sub, parts in subs:
            last = parts[-1].strip()
            earlier = " ".join(parts[:-1])
            if last in rows and not any(r in re.findall(r"\b\w+\b", earlier) for r in rows):
                out.append(src.site("transposed_tile", sub.start_byte, sub.end_byte))
    return out


# --------------------------------------------------------------------------- entry point

def detect_carriers(source: str | bytes, flags: Sequence[str] = ()) -> dict[str, list[Site]]:
    """Carrier name -> sites, for every carrier found at least once (code only, comments ignored).

    `flags` are the solution's compiler flags; `-use_fast_math` counts as a file-level fast_math site.
    """
    src = Source(source)
    out: dict[str, list[Site]] = {}
    for name, fn in DETECTORS.items():
        sites = sorted(set(fn(src)), key=lambda s: (s.start_byte, s.end_byte))
        if name == "fast_math" and any(f in ("-use_fast_math", "--use_fast_math") for f in flags):
            sites.insert(0, Site("fast_math", 0, 0, 0, "", "-use_fast_math"))
        if sites:
            out[name] = sites
    return out


def carrier_names(source: str | bytes, flags: Sequence[str] = ()) -> set[str]:
    return set(detect_carriers(source, flags))


# detection by meaning (issue 19): what mining/carriers_meaning.py finds extends the detectors above
extend_detectors(DETECTORS)
