"""shuffle_to_shared: a warp shuffle becomes an exchange through shared memory.

The statement that contains the shuffle, e.g. `v += __shfl_xor_sync(m, v, o);`, becomes

    ks_xchg_float[ks_tid] = v;          // every lane publishes its value in its own slot
    __syncwarp(m);                      // the lanes of the exchange see each other's slots
    v += ks_xchg_float[ks_tid ^ o];     // ... and read the source lane's slot
    __syncwarp(m);                      // nobody overwrites a slot before its readers have read it

(wrapped in braces when the statement is the body of a loop or an `if`), and the enclosing
function (or lambda) gets, once, `__shared__ T ks_xchg_T[1024];` and
`const int ks_tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);`.

Why it is sound: warps are consecutive linear thread indices, so lane = ks_tid & 31 and the source
lane's slot is ks_tid - lane + src. Each thread writes only its own slot; readers are lanes of the
same warp, ordered after the write by the first __syncwarp and before the slot's next write by the
second one, so one buffer per (function, type) serves every exchange of the function (1024 slots:
the largest block). The source lane follows the PTX rules, `width` included: xor reads lane ^ o
unless that is past the end of the caller's segment; down reads lane + o unless past the
segment's end; up reads lane - o unless before the segment's start (those lanes keep their own
value: they read their own slot); idx reads segment start + (src mod width). A lane outside the
mask or past the end of a partial warp is as undefined as it was for the shuffle (an unwritten
slot). The value's type is read from its declaration (a local, a parameter, an array element, a
member of a vector type or of a struct of this file); shuffles whose value type cannot be found,
or whose statement has other side effects, are not sites. The `__shfl_up_sync` calls of warp
scans are left to scan_shuffle_to_shared (same rewrite, carrier warp_scan).

Forward, `warp_per_row` (inverse of shuffle_to_shared, block_reduce_to_warp_atomics and, after
privatize_atomics, warp_atomic_to_thread_atomics): a kernel with one row (or chunk) per thread
becomes one row per warp: the row loops are lane-strided (`j = start + lane; j += 32`), each
accumulator (`+=`, or `= fmaxf(acc, e)` / min / max) is all-reduced across the warp with
`__shfl_xor_sync`, the launch multiplies the grid by 32 and the row index is divided by 32. Sound
because the accumulators are only combined with associative, commutative operators and read
nowhere else in the loop, every other write in the loop is indexed by the loop variable (each
element written by exactly one lane), and after the all-reduce every lane holds the row's value,
so the code after the loop sees what the single thread saw (up to float reassociation, which the
gate's tolerance judges); what it writes to memory (a row's result, an atomic) lane 0 writes, then
`__syncwarp()`, so the row's result is written once, as the single thread wrote it, and every lane
reads it after. Loops with barriers, atomics, returns or bare jumps are not sites.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name, declarator_name
from corpora.code.source import Source
from mining.carriers import warp_scan_sites
from mining.operators.base import (Context, Edit, Materialization, Operator, Pair, Rewrite, candidate, rewrite_range)
from mining.operators.nodes import (WARP, Kernel, bare_jumps, base_name, block_dims, code, declared_within,
                                    grid_is_scalar, has, has_loop, indent_at, index_decls, int_value, kernels, launches,
                                    local_pointers, loop_init_value, loop_var, mentions, raw, returns_or_syncs,
                                    split_top, statements, strip_parens, sub_index, unit_update)
from mining.operators.running_update import read_update
from mining.operators.rewrite_util import (after_open_brace, body_indent, ctext, expression_type, has_side_effects,
                                           line_indent, paren, scope_body, scope_of, splice_range, structural)
from corpora.code.parse import text, walk
from mining.operators.shuffle_forms import normalized_edits  # noqa: E402  (after rewrite_shuffle's helpers)


SHUFFLES = {"__shfl_sync": "idx", "__shfl_xor_sync": "xor", "__shfl_down_sync": "down", "__shfl_up_sync": "up",
            "__shfl": "idx", "__shfl_xor": "xor", "__shfl_down": "down", "__shfl_up": "up"}
FULL_MASK = "0xffffffffu"
TID = "ks_tid"
TID_DECL = "const int ks_tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);"
_BODY_FIELDS = {("for_statement", "body"), ("while_statement", "body"), ("do_statement", "body"),
                ("if_statement", "consequence"), ("else_clause", None), ("for_range_loop", "body")}


def buffer_name(type_: str) -> str:
    return "ks_xchg_" + re.sub(r"\W+", "_", type_.strip()).strip("_")


def _field_of(node: Node) -> Optional[str]:
    p = node.parent
    if p is None:
        return None
    for i, c in enumerate(p.children):
        if c.start_byte == node.start_byte and c.end_byte == node.end_byte and c.type == node.type:
            return p.field_name_for_child(i)
    return None


def _int(s: str) -> Optional[int]:
    m = re.fullmatch(r"\s*(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\s*", s)
    return int(m.group(1), 0) if m else None


def _small_offset(src: Source, call: Node, off: Node) -> bool:
    """The offset is known to be in [0, 32): a literal, or a loop variable with such a range."""
    v = _int(text(off))
    if v is not None:
        return v < 32
    if off.type != "identifier":
        return False
    name = re.escape(text(off))
    loop = call.parent
    while loop is not None:
        if loop.type == "for_statement":
            init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
            m = re.search(r"\b%s\s*=\s*(\w+)" % name, ctext(src, init)) if init is not None else None
            if m and upd is not None:
                start, u = _int(m.group(1)), ctext(src, upd)
                c = ctext(src, cond) if cond is not None else ""
                if start is None or start < 0:
                    return False
                if re.fullmatch(r"%s\s*(>>=\s*1|/=\s*2)|%s\s*=\s*%s\s*(>>\s*1|/\s*2)" % (name, name, name), u):
                    return start < 32
                if re.fullmatch(r"%s\s*(<<=\s*1|\*=\s*2)|\+\+\s*%s|%s\s*\+\+" % (name, name, name), u):
                    mc = re.fullmatch(r"%s\s*(<|<=)\s*(\w+)" % name, c)
                    lim = _int(mc.group(2)) if mc else None
                    return lim is not None and (lim <= 32 if mc.group(1) == "<" else lim < 32)
                return False
        loop = loop.parent
    return False


def source_index(kind: str, off: str, width: Optional[str], small: bool) -> str:
    """The slot a lane reads: PTX shfl semantics expressed on the linear thread index."""
    o = paren(off) if small else f"({paren(off)} & 31)"
    w = _int(width) if width is not None else 32
    if width is not None and re.fullmatch(r"\s*warpSize\s*", width):
        w = 32
    if w == 32:
        if kind == "xor":
            return f"{TID} ^ {o}"
        if kind == "down":
            return f"({TID} & 31) + {o} < 32 ? {TID} + {o} : {TID}"
        if kind == "up":
            return f"({TID} & 31) >= {o} ? {TID} - {o} : {TID}"
        lit = _int(off)
        if lit is not None:
            return f"{TID} & ~31" if lit % 32 == 0 else f"({TID} & ~31) + {lit % 32}"
        return f"({TID} & ~31) + ({paren(off)} & 31)"
    if w is not None:
        wm1, wt = str(w - 1), str(w)
    else:
        wm1, wt = f"({paren(width)} - 1)", paren(width)
    if kind == "xor":
        return f"(({TID} & 31) ^ {o}) < (({TID} & 31) & ~{wm1}) + {wt} ? {TID} ^ {o} : {TID}"
    if kind == "down":
        return f"({TID} & {wm1}) + {o} < {wt} ? {TID} + {o} : {TID}"
    if kind == "up":
        return f"({TID} & {wm1}) >= {o} ? {TID} - {o} : {TID}"
    return f"({TID} & ~{wm1}) + ({paren(off)} & {wm1})"


class ShuffleToShared(Operator):
    name = "shuffle_to_shared"
    carrier = "warp_shuffle_reduce"
    description = "exchange a warp shuffle's value through a shared-memory slot per thread with __syncwarp"

    def edits(self, src: Source):
        scan = {(s.start_byte, s.end_byte) for s in warp_scan_sites(src)}
        st = structural(src)
        own = list(first_hoist_per_scope(st, [n for n in walk(st.tree.root_node) if n.type == "call_expression" and
                                               call_name(n) in SHUFFLES and (n.start_byte, n.end_byte) not in scan]))
        yield from own
        # shuffles written through macros, cooperative-groups tiles or returned from wrappers (issue 19)
        hoisted = {e.start for e in own if not src.raw[e.start:e.end].strip().startswith(b"__shfl")}
        for e in normalized_edits(st, rewrite_shuffle, tuple(n for n in SHUFFLES if "up" not in n)):
            inserts = b"ks_xchg_" in e.replacement.encode() and "__shared__" in e.replacement
            if inserts and e.start in hoisted:
                continue
            if any(o.start < e.end and e.start < o.end for o in own):
                continue
            if inserts:
                hoisted.add(e.start)
            yield e


def first_hoist_per_scope(src: Source, calls: list[Node]):
    """The rewrites of `calls`, except that in a function still lacking the exchange declarations
    only the first call (in text order) is a site: it inserts them; the others become sites (with
    edits of their own statement only) once they are there."""
    hoisted: set[int] = set()
    for call in sorted(calls, key=lambda n: n.start_byte):
        e = rewrite_shuffle(src, call)
        if e is None:
            continue
        if e.start < call.start_byte:  # this edit inserts the declarations at the top of its scope
            if e.start in hoisted:
                continue
            hoisted.add(e.start)
        yield e


_SIZES = {"char": 1, "signed char": 1, "unsigned char": 1, "bool": 1, "short": 2, "unsigned short": 2, "__half": 2,
          "half": 2, "__nv_bfloat16": 2, "int": 4, "unsigned": 4, "unsigned int": 4, "float": 4, "__half2": 4,
          "half2": 4, "long long": 8, "unsigned long long": 8, "double": 8, "size_t": 8, "int2": 8, "float2": 8,
          "int4": 16, "uint4": 16, "float4": 16, "double2": 16}
STATIC_SHARED_LIMIT = 48 * 1024


def _static_shared(src: Source, fn: Node) -> Optional[int]:
    """Bytes of the static `__shared__` arrays declared in a function, or None if a size is unknown."""
    total = 0
    for decl, name, dims in src.shared_decls:
        if not (fn.start_byte <= decl.start_byte < fn.end_byte) or b"extern" in src.code[decl.start_byte:decl.end_byte]:
            continue
        t = decl.child_by_field_name("type")
        size = _SIZES.get(" ".join(text(t).split())) if t is not None else None
        n = 1
        for d in dims:
            v = int_value(src, text(d))
            if v is None:
                return None
            n *= v
        if size is None:
            return None
        total += size * n
    return total


def _fits(src: Source, scope: Node, vtype: str) -> bool:
    """A new 1024-slot buffer keeps the static shared memory of every kernel that runs this code
    within 48 KiB (nvcc's limit for static allocations); unknown sizes are not held against it."""
    extra = 1024 * _SIZES.get(vtype, 4)
    fn = scope
    while fn is not None and fn.type != "function_definition":
        fn = fn.parent
    if fn is None:
        return True
    own = _static_shared(src, fn)
    if own is None:
        return True
    f = src.function_at(fn.start_byte)
    callers = [0]
    if f is not None and not f.is_kernel:
        for g in src.funcs:
            node = src.func_node(g)
            if g.is_kernel and node is not None and re.search(rb"\b%s\s*[<(]" % re.escape(f.name.encode()),
                                                             src.code[node.start_byte:node.end_byte]):
                callers.append(_static_shared(src, node) or 0)
    return own + max(callers) + extra <= STATIC_SHARED_LIMIT


def _literal_cast(call: Node) -> bool:
    """`uint32_t(-1)`, `unsigned(0xffffffff)`: a functional cast of a literal (a constant mask)."""
    fn = call.child_by_field_name("function")
    args = call.child_by_field_name("arguments")
    return fn is not None and args is not None and re.fullmatch(r"(u?int\d+_t|unsigned|int|unsigned int)", text(fn)) \
        is not None and re.fullmatch(r"\(\s*-?\s*(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\s*\)", text(args)) is not None


def rewrite_shuffle(src: Source, call: Node) -> Optional[Edit]:
    name = call_name(call)
    kind = SHUFFLES[name]
    args = call.child_by_field_name("arguments")
    if args is None:
        return None
    a = [c for c in args.named_children if c.type != "comment"]
    if name.endswith("_sync"):
        if len(a) not in (3, 4):
            return None
        mask, val, off, width = a[0], a[1], a[2], (a[3] if len(a) == 4 else None)
    else:
        if len(a) not in (2, 3):
            return None
        mask, val, off, width = None, a[0], a[1], (a[2] if len(a) == 3 else None)
    for n in (mask, val, off, width):
        if n is not None and has_side_effects(n):
            return None
    if mask is not None and any(x.type == "call_expression" and not _literal_cast(x) for x in walk(mask)):
        return None
    vtype = expression_type(src, val)
    if vtype is None:
        return None

    # the statement that evaluates the shuffle
    stmt = call.parent
    while stmt is not None and stmt.type not in ("expression_statement", "declaration"):
        if stmt.type in ("for_statement", "while_statement", "do_statement", "if_statement", "lambda_expression",
                         "compound_statement", "return_statement", "switch_statement",
                         "conditional_expression") or \
                (stmt.type == "binary_expression" and text(stmt.child_by_field_name("operator")) in ("&&", "||")):
            return None
        stmt = stmt.parent
    if stmt is None or stmt.parent is None:
        return None
    parent = stmt.parent
    field = _field_of(stmt)
    if parent.type == "compound_statement":
        braces = False
    elif stmt.type == "expression_statement" and ((parent.type, field) in _BODY_FIELDS or
                                                  parent.type == "else_clause" or
                                                  (parent.type == "if_statement" and field == "alternative")):
        braces = True
    else:
        return None
    # nothing else in the statement may change state: the value is now read before it
    root = stmt.named_children[0] if stmt.type == "expression_statement" and stmt.named_children else None
    for n in walk(stmt):
        if n.start_byte >= call.start_byte and n.end_byte <= call.end_byte:
            continue
        if n.type == "update_expression" or (n.type == "assignment_expression" and
                                            (root is None or not (n.start_byte == root.start_byte and
                                                                  n.end_byte == root.end_byte))):
            return None
        if n.type == "call_expression" and n is not call and call_name(n) in SHUFFLES:
            return None  # one exchange per statement keeps the ordering simple

    scope = scope_of(call)
    body = scope_body(scope) if scope is not None else None
    if body is None or body.type != "compound_statement":
        return None
    buf = buffer_name(vtype)
    m = ctext(src, mask) if mask is not None else FULL_MASK
    src_slot = source_index(kind, ctext(src, off), ctext(src, width) if width is not None else None,
                            _small_offset(src, call, off))
    new_stmt = splice_range(src, stmt.start_byte, stmt.end_byte, [Edit(call.start_byte, call.end_byte,
                                                                    f"{buf}[{src_slot}]")])
    value = src.raw[val.start_byte:val.end_byte].decode("utf-8", "replace")
    parts = [f"{buf}[{TID}] = {value};", f"__syncwarp({m});", new_stmt, f"__syncwarp({m});"]
    if braces:
        rep = "{ " + " ".join(parts) + " }"
    else:
        ind = line_indent(src, stmt.start_byte)
        rep = ("\n" + ind).join(parts)

    body_code = src.code[body.start_byte:body.end_byte].decode("utf-8", "replace")
    need = []
    if not re.search(r"__shared__\s+%s\s+%s\s*\[" % (re.escape(vtype).replace(r"\ ", r"\s+"), re.escape(buf)),
                     body_code):
        need.append(f"__shared__ {vtype} {buf}[1024];")
    if not re.search(r"\bconst\s+int\s+%s\s*=" % TID, body_code):
        need.append(TID_DECL)
    if not need:
        return Edit(stmt.start_byte, stmt.end_byte, rep)
    if need[0].startswith("__shared__") and not _fits(src, scope, vtype):
        return None
    ind = body_indent(src, body)
    head = "".join("\n" + ind + d for d in need)
    start = after_open_brace(src, body)
    return Edit(start, stmt.end_byte, head + splice_range(src, start, stmt.end_byte, [Edit(stmt.start_byte, stmt.end_byte,
                                                                                        rep)]))


# --------------------------------------------------------------------------- forward half
@dataclass
class Acc:
    name: str
    op: str  # "+" | fmaxf | fminf | max | min
    array: bool
    size: str = ""


def _classify_loop(src: Source, loop: Node, globals_: set[str]) -> Optional[tuple[list[Acc], bool]]:
    """(accumulators, writes global memory) when the loop can be split across the lanes of a
    warp: every write is to memory indexed by the loop variable, to a variable declared inside
    the loop, or to an accumulator updated only by a running sum, max or min, however spelled
    (`+=`, `= fmaxf(acc, e)`, `= acc + e`, `= e > acc ? e : acc`, `if (e > acc) acc = e;`: see
    running_update.py) and not read otherwise in the loop. None otherwise."""
    lv = loop_var(src, loop)
    cond = loop.child_by_field_name("condition")
    if lv is None or cond is None or not unit_update(src, loop, lv[1]):
        return None
    var = lv[1]
    for part in split_top(code(src, cond), "&&"):
        if not re.match(r"^%s\s*<" % re.escape(var), strip_parens(part)):
            return None
    body = loop.child_by_field_name("body")
    if body is None or returns_or_syncs(src, body) or bare_jumps(src, body) or has(src, body, r"\batomic\w*\s*\("):
        return None
    local = declared_within(src, loop)
    accs: dict[str, Acc] = {}
    acc_nodes: list[tuple[str, Node]] = []
    writes_global = False
    taken: list[Node] = []  # compare-and-assign updates (`if (e > m) m = e;`): their assignment is read with them
    for n in walk(body):
        if any(t.start_byte <= n.start_byte and n.end_byte <= t.end_byte for t in taken):
            continue
        if n.type == "update_expression":
            b = base_name(n.child_by_field_name("argument"))
            if b and b not in local:
                return None
        if n.type == "if_statement":
            u = read_update(src, n)
            if u is not None and u.base not in local and u.base not in globals_:
                if not _add_acc(accs, Acc(u.base, u.fn, False)) or "[" in u.target:
                    return None
                acc_nodes.append((u.base, n))
                taken.append(n)
            continue
        if n.type != "assignment_expression":
            continue
        left = n.child_by_field_name("left")
        b = base_name(left)
        if not b:
            return None
        if b in local:
            continue
        if b in globals_:
            if left.type != "subscript_expression" or not mentions(sub_index(left), var):
                return None
            writes_global = True
            continue
        # a running sum, max or min however spelled (mining/operators/running_update.py)
        u = read_update(src, n)
        if u is None:
            return None
        is_arr = left.type == "subscript_expression"
        if is_arr and (u.op != "+" or left.child_by_field_name("argument").type != "identifier"):
            return None
        if not _add_acc(accs, Acc(b, "+" if u.op == "+" else u.fn, is_arr)):
            return None
        acc_nodes.append((b, n))
    # accumulators are read only in their own updates (whose operand never reads them: read_update)
    body_code = code(src, body)
    for name, acc in accs.items():
        total = len(re.findall(r"\b%s\b" % re.escape(name), body_code))
        own = sum(len(re.findall(r"\b%s\b" % re.escape(name), code(src, n))) for b, n in acc_nodes if b == name)
        if total != own:
            return None
    return list(accs.values()), writes_global


def _add_acc(accs: dict[str, Acc], acc: Acc) -> bool:
    """Record an accumulator; False when it is also updated another way in the same loop."""
    prev = accs.get(acc.name)
    if prev is not None and (prev.op != acc.op or prev.array != acc.array):
        return False
    accs[acc.name] = acc
    return True


def _allreduce(acc: Acc, ind: str) -> str:
    sh = "__shfl_xor_sync(0xffffffffu, {v}, ks_o)"
    if acc.array:
        v = f"{acc.name}[ks_e]"
        upd = f"{v} += {sh.format(v=v)};" if acc.op == "+" else f"{v} = {acc.op}({v}, {sh.format(v=v)});"
        return f"{ind}for (int ks_e = 0; ks_e < ({acc.size}); ++ks_e)\n{ind}    for (int ks_o = 16; ks_o > 0; ks_o >>= 1) {upd}"
    v = acc.name
    upd = f"{v} += {sh.format(v=v)};" if acc.op == "+" else f"{v} = {acc.op}({v}, {sh.format(v=v)});"
    return f"{ind}for (int ks_o = 16; ks_o > 0; ks_o >>= 1) {upd}"


def _block_allreduce(acc: Acc, ty: str, ind: str) -> str:
    """Every thread of the block gets the block's value of a scalar accumulator: a butterfly inside
    each warp, then each warp's value through shared memory, folded in the same order by every
    thread (so all hold the same bits). blockDim.x is a multiple of 32 (the launch is checked)."""
    def comb(a: str, b: str) -> str:
        return f"{a} += {b};" if acc.op == "+" else f"{a} = {acc.op}({a}, {b});"
    v, part = acc.name, f"ks_part_{acc.name}"
    i2 = ind + "    "
    return "\n".join([
        f"{ind}for (int ks_o = 16; ks_o > 0; ks_o >>= 1) {comb(v, f'__shfl_xor_sync(0xffffffffu, {v}, ks_o)')}",
        f"{ind}{{  // ks-optimize: the warps' values of {v} combined through shared memory",
        f"{i2}__shared__ {ty} {part}[32];",
        f"{i2}if ((threadIdx.x & 31) == 0) {part}[threadIdx.x >> 5] = {v};",
        f"{i2}__syncthreads();",
        f"{i2}{v} = {part}[0];",
        f"{i2}for (int ks_w = 1; ks_w < (int)(blockDim.x >> 5); ++ks_w) {comb(v, f'{part}[ks_w]')}",
        f"{i2}__syncthreads();",
        f"{ind}}}"])


def _scalar_type(src: Source, k: Kernel, name: str, before: int) -> Optional[str]:
    """The declared type of a scalar local declared at the kernel's top level before `before`."""
    for decl in src.nodes("declaration", within=k.body):
        if decl.start_byte >= before:
            break
        for d in decl.named_children:
            node = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            if node is not None and node.type == "identifier" and text(node) == name:
                t = decl.child_by_field_name("type")
                ty = " ".join(w for w in code(src, t).split() if w != "const") if t is not None else ""
                return ty if re.fullmatch(r"(unsigned |signed )?(float|double|int|long|long long|unsigned)", ty) \
                    else None
    return None


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


def _one_lane_writes(src: Source, k: Kernel, globals_: set[str], start: int, edits: list[Edit],
                     first: str = "ks_lane == 0", sync: str = "__syncwarp();") -> list[Edit]:
    """The row's results written once: every statement after `start` and outside the loops the
    rewrite changed that writes memory (an assignment through a pointer, an atomic) runs on lane 0,
    then `__syncwarp()` so the other lanes read what it wrote. Every lane holds the same values
    there, so all 32 writing the same address was a race (and `+=` or an atomic counted 32 times)."""
    changed = [(e.start, e.end) for e in edits]

    def inside_changed_loop(node: Node) -> bool:
        p = node.parent
        while p is not None and p.start_byte >= k.body.start_byte:
            if p.type == "for_statement" and any(p.start_byte <= a < p.end_byte for a, _ in changed):
                return True
            p = p.parent
        return False

    out = []
    for st in src.nodes("expression_statement", within=k.body):
        if st.start_byte < start or not st.named_children or inside_changed_loop(st):
            continue
        e = st.named_children[0]
        writes = e.type == "assignment_expression" and base_name(e.child_by_field_name("left")) in globals_ and \
            e.child_by_field_name("left").type != "identifier"
        if not (writes or (e.type == "call_expression" and (call_name(e) or "").startswith("atomic"))):
            continue
        # braced as one statement: it may be an `if`'s body, with an `else` after it
        out.append(Edit(st.start_byte, st.start_byte, f"{{ if ({first}) {{ "))
        out.append(Edit(st.end_byte, st.end_byte, f" }} {sync} }}"))
    return out


def warp_per_row(source: str, ctx: Context) -> list[Materialization]:
    return all_kernels_too(source, ctx, False)


def block_per_row_rows(source: str, ctx: Context) -> list[Materialization]:
    """The same one-row-per-thread kernels, one row per block (block_per_row's forward, issue 20):
    the row loops block-stride (`j = start + threadIdx.x; j += blockDim.x`), each scalar accumulator
    all-reduced across the block (shuffles, then the warps' values through shared memory), writes
    after the loops made by thread 0 then `__syncthreads()`; the grid gets blockDim.x times the
    blocks and the row index is the block's. Sound as the warp form, with the block for the warp:
    every value outside the strided loops is the same in all threads of a block (the row index is
    the block's, accumulators are all-reduced), so every branch, `return` and barrier is uniform."""
    return _warp_per_row(source, ctx, False, group="block")


def all_kernels_too(source: str, ctx: Context, scans: bool) -> list[Materialization]:
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
    lv = loop_var(src, loop)
    cond = loop.child_by_field_name("condition")
    body = loop.child_by_field_name("body")
    if lv is None or cond is None or body is None or body.type != "compound_statement" or \
            not unit_update(src, loop, lv[1]):
        return None
    ty, var, init = lv
    for part in split_top(code(src, cond), "&&"):
        if not re.match(r"^%s\s*<" % re.escape(var), strip_parens(part)):
            return None
    if has_loop(body) or returns_or_syncs(src, body) or bare_jumps(src, body) or has(src, body, r"\batomic\w*\s*\("):
        return None
    sts = statements(body)
    local = declared_within(src, loop)
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
        b = base_name(n.child_by_field_name("left"))
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
        edits = [Edit(n.start_byte, n.end_byte, f"({acc} + {value})") for n in walk(st)
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


def _warp_per_row(source: str, ctx: Context, scans: bool = False, group: str = "warp") -> list[Materialization]:
    """A kernel that gives each thread a whole row (or chunk) and walks it with serial loops ->
    one warp per row: those loops are split across the 32 lanes (`j = start + lane; j += 32`)
    and each accumulator they carry (`s += e`, `m = fmaxf(m, e)`, `o[d] += e`) is all-reduced
    with `__shfl_xor_sync` right after its loop, so every lane holds the row's value; the
    code after the loop is unchanged but for its memory writes, which lane 0 makes. The launch gets 32x the threads (a single-thread
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
        single = group == "warp" and not decls and not re.search(r"\b(threadIdx|blockIdx|blockDim|gridDim)\b", c) and \
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
            if group == "block" and (any(x[0] > 1024 for x in dims) or "ks_part_" in c):
                continue
        globals_ = set(local_pointers(src, k)) | {p.name for p in k.sig.params if p.is_pointer}
        edits: list[Edit] = []
        strided = n_scans = 0
        for loop in _top_loops(src, k.body):
            if not single and loop.start_byte < decls[0].stmt.end_byte:
                continue
            cl = _classify_loop(src, loop, globals_)
            if cl is None:
                rep = _scan_loop(src, k, loop, globals_) if scans else None
                if rep is not None:
                    edits.append(Edit(loop.start_byte, loop.end_byte, rep))
                    strided += 1
                    n_scans += 1
                continue
            accs, writes_global = cl
            ok = True
            types = {}
            for a in accs:
                if group == "block":
                    # a block all-reduce needs the scalar's type for its shared slots
                    types[a.name] = None if a.array else _scalar_type(src, k, a.name, loop.start_byte)
                    if types[a.name] is None:
                        ok = False
                if a.array:
                    a.size = _array_size(src, k, a.name) or ""
                    if not a.size:
                        ok = False
                elif a.op == "+" and not _zero_init_before(src, k, a.name, loop.start_byte):
                    ok = False
            if not ok:
                continue
            init = loop_init_value(loop)
            upd = loop.child_by_field_name("update")
            lane, width = ("ks_lane", str(WARP)) if group == "warp" else ("threadIdx.x", "blockDim.x")
            edits.append(Edit(init.start_byte, init.end_byte, f"({raw(src, init)}) + {lane}"))
            edits.append(Edit(upd.start_byte, upd.end_byte, f"{loop_var(src, loop)[1]} += {width}"))
            ind = indent_at(src, loop.start_byte)
            after = [_allreduce(a, ind) if group == "warp" else _block_allreduce(a, types[a.name], ind) for a in accs]
            if writes_global:
                after.append(f"{ind}{'__syncwarp();' if group == 'warp' else '__syncthreads();'}")
            if after:
                edits.append(Edit(loop.end_byte, loop.end_byte, "\n" + "\n".join(after)))
            strided += 1
        if not strided or (scans and not n_scans):
            continue
        start = k.body.start_byte if single else decls[0].stmt.end_byte
        if group == "block":
            edits += _one_lane_writes(src, k, globals_, start, edits, "threadIdx.x == 0", "__syncthreads();")
            d = decls[0]
            edits.append(Edit(d.value.start_byte, d.value.end_byte, f"({raw(src, d.value)}) / blockDim.x"))
            eol = src.raw.find(b"\n", d.stmt.end_byte)
            eol = len(src.raw) if eol < 0 else eol
            edits.append(Edit(eol, eol, f"  // ks-optimize: one {d.name} per block"))
            for l, x in zip(ls, dims):
                edits.append(Edit(l.grid.start_byte, l.grid.end_byte, f"({raw(src, l.grid)}) * {x[0]}"))
            how = f"{strided} loop(s) block-strided, accumulators all-reduced across the block"
            out.append(candidate(src, edits, "block_per_row", f"{k.name}: one {d.name} per thread -> one {d.name} "
                                 f"per block; {how}", excerpt=code(src, d.stmt)))
            continue
        edits += _one_lane_writes(src, k, globals_, start, edits)
        if single:
            pos = k.body.start_byte + 1
            edits.append(Edit(pos, pos, f"\n{indent_at(src, statements(k.body)[0].start_byte) if statements(k.body) else '    '}"
                                             "const int ks_lane = threadIdx.x & 31;  // ks-optimize: one warp does this work"))
            for l in ls:
                edits.append(Edit(l.block.start_byte, l.block.end_byte, str(WARP)))
            what = "one thread -> one warp"
        else:
            d = decls[0]
            edits.append(Edit(d.value.start_byte, d.value.end_byte, f"({raw(src, d.value)}) / {WARP}"))
            eol = src.raw.find(b"\n", d.stmt.end_byte)
            eol = len(src.raw) if eol < 0 else eol
            edits.append(Edit(eol, eol, f"\n{indent_at(src, d.stmt.start_byte)}const int ks_lane = threadIdx.x & 31;"
                                            f"  // ks-optimize: one warp per {d.name}"))
            for l in ls:
                edits.append(Edit(l.grid.start_byte, l.grid.end_byte, f"({raw(src, l.grid)}) * {WARP}"))
            what = f"one {d.name} per thread -> one {d.name} per warp"
        how = f"{strided - n_scans} loop(s) lane-strided, accumulators all-reduced with __shfl_xor_sync"
        if n_scans:
            how += f"; {n_scans} running-sum loop(s) as warp scans (__shfl_up_sync)"
        out.append(candidate(src, edits, "warp_scan" if scans else "warp_per_row", f"{k.name}: {what}; {how}",
                        excerpt=code(src, decls[0].stmt) if decls else k.name))
    return out


PAIR = Pair(ShuffleToShared, (Rewrite("warp_per_row", "warp_shuffle_reduce", warp_per_row, prior=8.0),),
            inverted_by=("warp_per_row", "warp_scan"))
