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
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name
from corpora.code.source import Source
from mining.carriers import warp_scan_sites
from mining.operators.base import Edit, Operator
from mining.operators.rewrite_util import (after_open_brace, body_indent, ctext, expression_type, has_side_effects, line_indent,
                                           paren, scope_body, scope_of, splice_range,
                                           structural)
from corpora.code.parse import text, walk

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
        yield from first_hoist_per_scope(st, [n for n in walk(st.tree.root_node) if n.type == "call_expression" and
                                              call_name(n) in SHUFFLES and (n.start_byte, n.end_byte) not in scan])


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
    from mining.operators.shrink_register_tile import int_value
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
    if mask is not None and any(x.type == "call_expression" for x in walk(mask)):
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
    new_stmt = splice_range(src, stmt.start_byte, stmt.end_byte, [(call.start_byte, call.end_byte,
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
    return Edit(start, stmt.end_byte, head + splice_range(src, start, stmt.end_byte, [(stmt.start_byte, stmt.end_byte,
                                                                                        rep)]))
