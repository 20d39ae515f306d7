"""register_state_to_shared: a per-thread array of running state held in registers (`float kv[8]`,
indexed by the variable of a constant-extent loop) is kept in the thread's own slots of a shared
array instead (`kv_s[threadIdx.x + e * blockDim.x]`). Forward, `private_shared_to_registers`: the
reverse, the shared (or dynamic-shared) array that only its own thread ever indexes becomes a
register array.

    extern __shared__ float sm[];                      float kv[8];  // thread-private state
    float* kv = sm;                                    #pragma unroll
    for (int e = 0; e < 8 && e + e0 < E; e++)    <->   for (int e = 0; e < 8 && e + e0 < E; e++)
        kv[m + e * M] = 0;                                 kv[e] = 0;
    ... launched <<<grid, M, 8 * M * sizeof(float)>>>  ... launched <<<grid, M, 0>>>

Forward, why it is sound: every access of the array is `A[t + i * S]` (or `A[i][t]` of a
`__shared__ T A[D0][S]`) with one per-thread id `t` and `i` the variable of a loop `for (int i = 0;
i < C && ...; ++i)` with C a compile-time constant (or an integer literal); `t` is `threadIdx.x`,
or `threadIdx.x % X` with X the stride S, read directly or through a local never assigned. Every
launch of the kernel in the file proves the ids distinct and below the stride: a one-dimensional
block (y and z literally 1) whose x is at most S (both compile-time, or the launch passes the
block's x expression itself as the kernel argument S, or S is `blockDim.x`). Then `t` is in [0, S)
and distinct across the block, so `t + i * S` (i >= 0) names a slot no other thread of the block
ever touches: the array is a disjoint union of per-thread arrays of C slots indexed by i, no
barrier orders anything on it, and a register array `A[C]` indexed by i holds the same values at
every point of every thread (shared memory and registers both start undefined). Refused: any other
index (a neighbour's slot `A[t + 1]`, a runtime extent), an escaping address (`&A[...]`, the array
passed or assigned anywhere, an alias reassigned), a `volatile` array, a second dynamic-shared
declaration the alias could overlap, a kernel with no launch in the file, a launch that does not
prove the ids. Where the kernel used dynamic shared memory only for this array, its launches ask
for none (`0`): fewer bytes, more resident blocks. `#pragma unroll` goes on the indexing loops so
every index is a constant after unrolling and the array stays in registers (ptxas: 0 bytes stack
frame on the causal linear-attention kernel, `e < 8 && e + e0 < E` form included).

Backward, why it is sound: a register array `T A[C]` (C compile-time and at most MAX_STATE, a
handful of running values, so a naive kernel's register row of outputs is left alone; no initializer, no address
taken, every use `A[i]` with i a constant-extent loop variable or a literal) is private to its
thread; slot i of thread t moved to `A_s[t + i * BX]` of a shared array with BX the block's x
extent and a one-dimensional block (every launch in the file, y = z = 1) is a slot no other thread
touches. BX is the compile-time block size when every launch has the same literal one (static
`__shared__ T A_s[C * BX]`), else `blockDim.x` over dynamic shared memory sized by every launch
(`C * dim3(block).x * sizeof(T)`, refused where the kernel already uses dynamic shared memory or
where C * 1024 threads would not fit 48 KiB).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import contains, same
from corpora.code.parse import text, walk
from corpora.code.source import Source
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, candidate
from mining.operators.nodes import (FunctionIndex, Kernel, Launch, block_dim3_args, code, int_value, kernel_launches,
                                    kernels, norm, param_nodes, split_top, strip_parens, subscript_chain)
from mining.operators.rewrite_util import line_indent, pragma_before, splice_range, structural
from corpora.code.nodes import declarator_shape

CARRIER = "register_state"
MAX_EXTENT = 64  # register slots per thread: more would spill to local memory
# the backward half takes only a handful of running values: a longer register array (a naive kernel's
# row of outputs, `float o[HEAD_DIM]`) is the plain form, not an optimization to undo
MAX_STATE = 16
SHARED_STATIC_BYTES = 48 * 1024
SIZEOF = {"float": 4, "int": 4, "unsigned": 4, "unsigned int": 4, "double": 8, "long long": 8,
          "unsigned long long": 8, "short": 2, "char": 1}


def _reassigned(v) -> bool:
    """The variable itself is written (not only elements through it)."""
    for a in v.assigned:
        t = a.child_by_field_name("left") if a.type == "assignment_expression" else a.child_by_field_name("argument")
        while t is not None and t.type == "parenthesized_expression":
            t = t.named_children[0]
        if t is None or t.type == "identifier":
            return True
    return False


# --------------------------------------------------------------------------- launch geometry
def _block_xyz(src: Source, launch: Launch) -> Optional[tuple[str, str, str]]:
    """The block's x, y, z expressions (host text) of a launch: `dim3(x, y)`, a dim3 variable, a scalar."""
    b = code(src, launch.block)
    args = block_dim3_args(src, launch)
    if args is None and re.fullmatch(r"\w+", b) and launch.host is not None:
        host = src.func_code(launch.host).decode("utf-8", "replace")
        if re.search(r"\bdim3\b[\s&*]*(const\s+)?%s\b" % re.escape(b), host):
            return None  # a dim3 whose extents this file does not show
    if args is None:
        if re.search(r"\bdim3\b|[{},]", b):
            return None
        args = b
    vals = [norm(strip_parens(a.strip())) for a in split_top(args, ",")]
    if not 1 <= len(vals) <= 3:
        return None
    return tuple(vals + ["1"] * (3 - len(vals)))  # type: ignore[return-value]


def _launch_args(launch: Launch) -> list[str]:
    args = launch.call.child_by_field_name("arguments")
    return [norm(text(a)) for a in args.named_children if a.type != "comment"] if args is not None else []


def _one_dim(src: Source, xyz: tuple[str, str, str]) -> bool:
    return int_value(src, xyz[1]) == 1 and int_value(src, xyz[2]) == 1


def _block_at_most(src: Source, k: Kernel, idx: FunctionIndex, bound: str) -> bool:
    """Every launch of the kernel has a one-dimensional block whose x is at most `bound` (kernel-side text)."""
    las = kernel_launches(src, k.name)
    if not las:
        return False
    params = [declarator_shape(p.child_by_field_name("declarator"))[0] if p.child_by_field_name("declarator")
              is not None else None for p in param_nodes(k.node)]
    for la in las:
        xyz = _block_xyz(src, la)
        if xyz is None or not _one_dim(src, xyz):
            return False
        if bound == "blockDim.x":
            continue
        bv, xv = int_value(src, bound), int_value(src, xyz[0])
        if bv is not None:
            if xv is None or xv > bv:
                return False
            continue
        if bound not in params:
            return False
        v = idx.visible(bound, k.body.start_byte)
        args = _launch_args(la)
        pos = params.index(bound)
        if v is None or _reassigned(v) or pos >= len(args) or args[pos] != xyz[0]:
            return False
        if re.fullmatch(r"[A-Za-z_]\w*", xyz[0]) and la.host is not None and re.search(
                r"(\+\+|--)\s*%s\b|\b%s\s*(\+\+|--|[-+*/%%&|^]?=(?!=))" % (xyz[0], xyz[0]),
                src.func_code(la.host).decode("utf-8", "replace")):
            return False  # the host changes it: the block may have been built from another value
    return True


# --------------------------------------------------------------------------- index shapes
def _resolve(src: Source, idx: FunctionIndex, expr: str, at: int, depth: int = 0) -> str:
    """`expr` with a local never assigned replaced by its initializer (thread ids read through a local)."""
    e = norm(strip_parens(expr))
    if re.fullmatch(r"[A-Za-z_]\w*", e) and depth < 4:
        v = idx.visible(e, at)
        if v is not None and v.kind == "local" and v.shape == "scalar" and not v.assigned and v.value is not None:
            return _resolve(src, idx, text(v.value), v.value.start_byte, depth + 1)
    return e


def _thread_id(src: Source, idx: FunctionIndex, term: str, at: int) -> Optional[str]:
    """'tid' for `threadIdx.x`, the modulus text for `threadIdx.x % X`, else None."""
    e = _resolve(src, idx, term, at)
    e = re.sub(r"\(\s*(?:int|unsigned(?: int)?)\s*\)\s*", "", e)
    if e == "threadIdx.x":
        return "tid"
    m = re.fullmatch(r"threadIdx\.x % (.+)", e)
    if m and re.fullmatch(r"[A-Za-z_]\w*|\d+", strip_parens(m.group(1))):
        return norm(strip_parens(m.group(1)))
    return None


def _const_loop(src: Source, idx: FunctionIndex, name: str, at: int) -> Optional[tuple[Node, int, str]]:
    """The loop whose variable `name` is at byte `at`, its compile-time extent C (`i = 0; i < C [&& ...]; ++i`)
    and C as written."""
    v = idx.visible(name, at)
    loop = idx.loop_of(v) if v is not None else None
    if loop is None or v.value is None or norm(text(v.value)) != "0":
        return None
    cond, upd = loop.child_by_field_name("condition"), loop.child_by_field_name("update")
    if cond is None or upd is None or re.sub(r"\s+", "", code(src, upd)) not in (f"++{name}", f"{name}++", f"{name}+=1"):
        return None
    for part in split_top(strip_parens(code(src, cond)), "&&"):
        m = re.fullmatch(r"\s*%s\s*<\s*(.+?)\s*" % re.escape(name), part) or \
            re.fullmatch(r"\s*(.+?)\s*>\s*%s\s*" % re.escape(name), part)
        c = int_value(src, m.group(1)) if m else None
        if c is not None and 1 <= c <= MAX_EXTENT:
            return loop, c, norm(m.group(1))
    return None


def _slot(src: Source, idx: FunctionIndex, expr: str, at: int) -> Optional[tuple[str, Optional[Node], int, str]]:
    """(index text, its loop or None for a literal, extent it needs, that extent as written) of a loop
    index or a literal."""
    e = norm(strip_parens(expr))
    lit = int_value(src, e)
    if lit is not None:
        return (str(lit), None, lit + 1, str(lit + 1)) if 0 <= lit < MAX_EXTENT else None
    if not re.fullmatch(r"[A-Za-z_]\w*", e):
        return None
    cl = _const_loop(src, idx, e, at)
    return (e, cl[0], cl[1], cl[2]) if cl is not None else None


def _split_linear(src: Source, idx: FunctionIndex, index: str, at: int):
    """`t + i * S` in any order: (thread id key, slot, stride text) else None."""
    terms = [t.strip() for t in split_top(strip_parens(index), "+")]
    if not 1 <= len(terms) <= 2:
        return None
    tid = [(t, k) for t in terms if (k := _thread_id(src, idx, t, at)) is not None]
    if len(tid) != 1:
        return None
    rest = [t for t in terms if t != tid[0][0]]
    if not rest:
        return tid[0][1], ("0", None, 1, "1"), None
    factors = [norm(strip_parens(f)) for f in split_top(strip_parens(rest[0]), "*")]
    if len(factors) != 2:
        return None
    for a, b in (factors, factors[::-1]):
        s = _slot(src, idx, a, at)
        if s is not None and re.fullmatch(r"[A-Za-z_]\w*|\d+|blockDim\.x", b) and b != a:
            return tid[0][1], s, b
    return None


# --------------------------------------------------------------------------- forward
class _Array:
    def __init__(self, name: str, typ: str, decl: Node, dims: list[str], extern: Optional[Node] = None):
        self.name, self.type, self.decl, self.dims, self.extern = name, typ, decl, dims, extern


def _decl_parts(decl: Node) -> Optional[tuple[str, str, list[str]]]:
    """(type, name, dims) of a one-declarator array declaration `T name[D0][D1]`."""
    ds = [d for d in decl.named_children if d.type in ("array_declarator", "init_declarator", "identifier",
                                                        "pointer_declarator")]
    t = decl.child_by_field_name("type")
    if len(ds) != 1 or ds[0].type != "array_declarator" or t is None:
        return None
    dims, d = [], ds[0]
    while d is not None and d.type == "array_declarator":
        size = d.child_by_field_name("size")
        dims.insert(0, norm(text(size)) if size is not None else "")
        d = d.child_by_field_name("declarator")
    if d is None or d.type != "identifier":
        return None
    return " ".join(text(t).split()), text(d), dims


def _shared_arrays(src: Source, k: Kernel, idx: FunctionIndex) -> list[_Array]:
    out = []
    externs = [n for n in walk(src.tree.root_node) if n.type == "declaration"
               and re.search(rb"\bextern\b[^;]*\b__shared__\b", src.code[n.start_byte:n.end_byte])]
    for decl in walk(k.body):
        if decl.type != "declaration":
            continue
        c = src.code[decl.start_byte:decl.end_byte]
        if not re.search(rb"\b__shared__\b", c) or re.search(rb"\bvolatile\b", c):
            continue
        parts = _decl_parts(decl)
        if parts is None:
            continue
        typ, name, dims = parts
        if re.search(rb"\bextern\b", c):
            if len(externs) != 1 or dims != [""]:
                continue  # two dynamic-shared declarations alias the same bytes
            uses = [n for n in walk(k.body) if n.type == "identifier" and text(n) == name and not contains(decl, n)]
            alias = _alias_of(idx, uses, name, typ)
            if alias is not None:
                out.append(alias)
                alias.extern = decl
            elif all(n.parent is not None and n.parent.type == "subscript_expression" for n in uses):
                out.append(_Array(name, typ, decl, [""], extern=decl))
        elif 1 <= len(dims) <= 2 and all(int_value(src, d) is not None for d in dims):
            out.append(_Array(name, typ, decl, dims))
    return out


def _alias_of(idx: FunctionIndex, uses: list[Node], base: str, typ: str) -> Optional[_Array]:
    """`T* p = base;` (or a cast to T*), the base's only use: the alias is the array."""
    if len(uses) != 1:
        return None
    d = uses[0].parent
    while d is not None and d.type in ("cast_expression", "parenthesized_expression", "argument_list", "template_function",
                                       "call_expression"):
        d = d.parent
    if d is None or d.type != "init_declarator" or d.parent is None or d.parent.type != "declaration":
        return None
    value = d.child_by_field_name("value")
    if value is None or not re.fullmatch(r"(\(\s*%s\s*\*\s*\)|reinterpret_cast\s*<\s*%s\s*\*\s*>)?\s*\(?\s*%s\s*\)?"
                                         % (re.escape(typ), re.escape(typ), re.escape(base)), " ".join(text(value).split())):
        return None
    decl = d.parent
    t = decl.child_by_field_name("type")
    pd = d.child_by_field_name("declarator")
    if t is None or pd is None or pd.type != "pointer_declarator" or " ".join(text(t).split()) != typ or \
            len([c for c in decl.named_children if c.type == "init_declarator"]) != 1 or \
            re.search(r"\bvolatile\b", text(decl)):
        return None
    inner = pd.child_by_field_name("declarator")
    if inner is None or inner.type != "identifier":
        return None
    v = next((v for v in idx.vars if same(v.declarator, d)), None)
    if v is None or _reassigned(v):
        return None
    return _Array(text(inner), typ, decl, [""])


def _site(src: Source, k: Kernel, idx: FunctionIndex, arr: _Array) -> Optional[Materialization]:
    var = next((v for v in idx.vars if same(v.decl, arr.decl) and v.name == arr.name), None)
    uses = [n for n in walk(k.body) if n.type == "identifier" and text(n) == arr.name
            and not contains(arr.decl, n) and (var is None or idx.visible(arr.name, n.start_byte) is var)]
    if not uses:
        return None
    tid_key, stride = None, None
    accesses: list[tuple[Node, str]] = []
    loops: dict[int, Node] = {}
    extent, spelled = 0, {}  # the extent, and each value as the loop bounds write it (a macro kept)
    for u in uses:
        outer, indices = subscript_chain(u)
        if len(indices) != len(arr.dims) or any(i is None for i in indices):
            return None  # the array itself escapes (passed, assigned, decays to a pointer)
        if outer.parent is not None and outer.parent.type == "pointer_expression" and \
                text(outer.parent).lstrip().startswith("&"):
            return None  # its address escapes
        if len(arr.dims) == 2:
            s = _slot(src, idx, text(indices[0]), u.start_byte)
            if s is not None:
                spelled.setdefault(s[2], s[3])
            key = _thread_id(src, idx, text(indices[1]), u.start_byte)
            if s is None or key is None:
                return None
            st = arr.dims[1]
            extent = max(extent, s[2])
            if extent > int_value(src, arr.dims[0]):
                return None
        else:
            lin = _split_linear(src, idx, text(indices[0]), u.start_byte)
            if lin is None:
                return None
            key, s, st = lin
            spelled.setdefault(s[2], s[3])
            extent = max(extent, s[2])
        if s[1] is not None and not contains(s[1], u):
            return None
        if (tid_key, stride) == (None, None):
            tid_key, stride = key, st
        elif key != tid_key or (st is not None and stride is not None and st != stride) or (st is None) != (stride is None):
            return None
        accesses.append((outer, s[0]))
        if s[1] is not None:
            loops[s[1].start_byte] = s[1]
    if stride is None:  # only `A[t]`: one slot; the modulus (or the block) bounds it
        stride = tid_key if tid_key != "tid" else None
        if stride is None:
            decl_n = int_value(src, arr.dims[0]) if arr.dims[0] else None
            stride = str(decl_n) if decl_n is not None else None
        if stride is None:
            return None
    for name in {stride, tid_key} - {"tid", "blockDim.x"}:
        if int_value(src, name) is None:
            v = idx.visible(name, k.body.start_byte)
            if v is None or _reassigned(v):
                return None
    # the ids are distinct and below the stride
    if tid_key == "tid":
        if not _block_at_most(src, k, idx, stride):
            return None
    else:
        sv, tv = int_value(src, stride), int_value(src, tid_key)
        if tid_key != stride and (sv is None or tv is None or tv > sv):
            return None
        if not _block_at_most(src, k, idx, tid_key):
            return None
    if extent > MAX_EXTENT:
        return None
    return _edits(src, k, arr, accesses, list(loops.values()), spelled.get(extent, str(extent)))


def _edits(src: Source, k: Kernel, arr: _Array, accesses, loops: list[Node], extent: str) -> Materialization:
    typ = re.sub(r"\b(__shared__|extern|static)\b\s*", "", arr.type).strip()
    edits = []
    decl_line = f"{typ} {arr.name}[{extent}];  // thread-private state: registers, not shared memory"
    a, b = src.line_span(arr.decl.start_byte, arr.decl.end_byte)
    ind = line_indent(src, arr.decl.start_byte)
    dynamic_gone = False
    if arr.extern is not None and not same(arr.extern, arr.decl):
        ea, eb = src.line_span(arr.extern.start_byte, arr.extern.end_byte)
        edits.append(Edit(ea, eb, ""))
        dynamic_gone = contains(k.body, arr.extern)
    elif arr.extern is not None:
        dynamic_gone = contains(k.body, arr.extern)
    edits.append(Edit(a, b, f"{ind}{decl_line}\n"))
    for outer, slot in accesses:
        edits.append(Edit(outer.start_byte, outer.end_byte, f"{arr.name}[{slot}]"))
    for loop in loops:
        if pragma_before(src, loop.start_byte) is None:
            la = src.raw.rfind(b"\n", 0, loop.start_byte) + 1
            if src.code[la:loop.start_byte].strip():
                raise ValueError("loop does not start its line")
            edits.append(Edit(la, la, f"{line_indent(src, loop.start_byte)}#pragma unroll\n"))
    if dynamic_gone and not re.search(rb"\bextern\s+__shared__\b", src.code[:k.node.start_byte] +
                                      src.code[k.node.end_byte:]):
        for la in kernel_launches(src, k.name):
            ks = next(c for c in la.call.children if c.type == "kernel_call_syntax")
            cfg = [c for c in ks.named_children]
            if len(cfg) >= 3:
                edits.append(Edit(cfg[2].start_byte, cfg[2].end_byte, "0"))
    return candidate(src, edits, "private_shared_to_registers",
                     f"{arr.name}: thread-private shared slots -> register array {typ} {arr.name}[{extent}] in {k.name}",
                     excerpt=" ".join(text(arr.decl).split())[:160])


def private_shared_to_registers(source: str, ctx: Context) -> list[Materialization]:
    """A shared array only its own thread indexes -> a register array (see the module docstring)."""
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        idx = FunctionIndex(src, k.node)
        for arr in _shared_arrays(src, k, idx):
            m = _site(src, k, idx, arr)
            if m is not None:
                out.append(m)
    return out


# --------------------------------------------------------------------------- backward
class RegisterStateToShared(Operator):
    name = "register_state_to_shared"
    carrier = CARRIER
    description = "keep a thread's register array of running state in its own slots of a shared array"

    def edits(self, src: Source):
        st = structural(src)
        for k in kernels(st):
            idx = FunctionIndex(st, k.node)
            for decl in walk(k.body):
                if decl.type != "declaration" or re.search(
                        rb"\b(__shared__|extern|static|const|volatile|__constant__)\b",
                        st.code[decl.start_byte:decl.end_byte]):
                    continue
                e = self._rewrite(st, k, idx, decl)
                if e is not None:
                    yield e

    def _rewrite(self, src: Source, k: Kernel, idx: FunctionIndex, decl: Node) -> Optional[Edit]:
        parts = _decl_parts(decl)
        if parts is None or len(parts[2]) != 1:
            return None
        typ, name, dims = parts
        c = int_value(src, dims[0])
        if c is None or not 1 <= c <= MAX_STATE or typ not in SIZEOF:
            return None
        var = next((v for v in idx.vars if same(v.decl, decl) and v.name == name), None)
        if var is None:
            return None
        uses = [n for n in walk(k.body) if n.type == "identifier" and text(n) == name and not contains(decl, n)
                and idx.visible(name, n.start_byte) is var]
        if not uses:
            return None
        accesses = []
        for u in uses:
            outer, indices = subscript_chain(u)
            if len(indices) != 1 or indices[0] is None:
                return None
            if outer.parent is not None and outer.parent.type == "pointer_expression" and \
                    text(outer.parent).lstrip().startswith("&"):
                return None
            s = _slot(src, idx, text(indices[0]), u.start_byte)
            if s is None or s[2] > c or (s[1] is not None and not contains(s[1], u)):
                return None
            accesses.append((outer, s[0]))
        las = kernel_launches(src, k.name)
        xyz = [_block_xyz(src, la) for la in las]
        if not las or any(b is None or not _one_dim(src, b) for b in xyz):
            return None
        bxs = {int_value(src, b[0]) for b in xyz}
        slot = _fresh(src, f"{name}_s")
        subs = []
        a, b = src.line_span(decl.start_byte, decl.end_byte)
        ind = line_indent(src, decl.start_byte)
        if len(bxs) == 1 and None not in bxs:
            bx = bxs.pop()
            if c * bx * SIZEOF[typ] > SHARED_STATIC_BYTES:
                return None
            subs.append(Edit(a, b, f"{ind}__shared__ {typ} {slot}[{c} * {bx}];  // slot i of thread t at t + i * {bx}\n"))
            stride = str(bx)
        else:
            if c * 1024 * SIZEOF[typ] > SHARED_STATIC_BYTES or re.search(rb"\bextern\s+__shared__\b", src.code):
                return None
            subs.append(Edit(a, b, f"{ind}extern __shared__ {typ} {slot}[];  // slot i of thread t at t + i * blockDim.x\n"))
            stride = "blockDim.x"
            for la in las:
                ks = next(ch for ch in la.call.children if ch.type == "kernel_call_syntax")
                cfg = list(ks.named_children)
                size = f"{c} * dim3({text(la.block)}).x * sizeof({typ})"
                if len(cfg) == 2:
                    subs.append(Edit(cfg[1].end_byte, cfg[1].end_byte, f", {size}"))
                elif int_value(src, text(cfg[2])) == 0:
                    subs.append(Edit(cfg[2].start_byte, cfg[2].end_byte, size))
                else:
                    return None
        for outer, s in accesses:
            subs.append(Edit(outer.start_byte, outer.end_byte, f"{slot}[threadIdx.x + {s} * {stride}]"))
        subs.sort(key=lambda e: (e.start, e.end))
        lo, hi = subs[0].start, max(e.end for e in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))


def _fresh(src: Source, want: str) -> str:
    name, n = want, 1
    while re.search(rb"\b%s\b" % re.escape(name).encode(), src.code):
        n += 1
        name = f"{want}{n}"
    return name


PAIR = Pair(RegisterStateToShared, (Rewrite("private_shared_to_registers", CARRIER, private_shared_to_registers,
                                            prior=2.0),))
