"""Type-directed devectorization: a wide (8/16-byte or struct-typed) global access, however it is
spelled, becomes a loop of accesses of the memory's own scalar type (issue 19 item 2).

`mining.carriers_meaning.wide_accesses` finds the access by meaning (a cast, a view macro such as
`FLOAT4(a[i])` / `LDST128BITS(x[i])`, a pointer bound to a cast, a parameter declared `uint4 *`,
a struct type such as `Packed<float, 4>`), with the scalar type `S` of the memory under it read
from that memory's declaration. The statement that moves the wide value is rewritten to move the
same bytes `S` by `S`:

    LDST128BITS(pack_a[0]) = LDST128BITS(a[idx]);
->  for (int ks_k = 0; ks_k < 8; ++ks_k) pack_a[ks_k] = a[idx + ks_k];

    float4 reg_a = FLOAT4(a[idx]);
->  float4 reg_a; for (int ks_k = 0; ks_k < 4; ++ks_k) reinterpret_cast<float *>(&reg_a)[ks_k] = a[idx + ks_k];

    pack.storage = *(reinterpret_cast<const PackType<SRC, N>*>(src) + offset);
->  for (int ks_k = 0; ks_k < (int)(sizeof(PackType<SRC, N>) / sizeof(SRC)); ++ks_k)
        reinterpret_cast<SRC *>(&(pack.storage))[ks_k] = reinterpret_cast<const SRC *>(... + offset)[ks_k];

Why it is sound: the same bytes move between the same places in the same statement; an access of
`S` needs only `S`'s alignment, which the wide access's stronger alignment implies. A wide value
used inside a larger expression (`temp += residual_v[id]`) is read by an immediately invoked lambda
that returns the assembled value. Refused: compound assignments to a wide lvalue, accesses whose
scalar type cannot be read from a declaration, declarations of several variables, and
register-only reinterpretations (both sides local: no memory access to narrow). Wide reads of
shared memory are planned (kind `shared_load`) but no operator takes them: nvcc merges the scalar
reads of a shared array back into `LDS.128` wherever it can prove the address aligned (measured on
how-to-optim/causal_linear_attention: 104 LDS.128 before and after), so narrowing them changes
nothing the hardware executes.

`forward` is the inverse the optimizer applies: an element-wise copy loop of 8 or 16 bytes between
global memory and registers becomes one wide access, behind a runtime alignment check that keeps
the loop as the fallback.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.carriers_meaning import (WideAccess, element_type, is_wide_type, norm_type, strip_parens, type_bytes,
                                     view_macros, wide_accesses)
from mining.operators.base import Edit, Pair, Rewrite
from mining.operators.rewrite_util import structural
from corpora.code.parse import text

LOOP_VAR = "ks_k"
_LVALUE = ("identifier", "field_expression", "subscript_expression", "pointer_expression")


def _ct(src: Source, node: Node) -> str:
    return " ".join(src.code[node.start_byte:node.end_byte].decode("utf-8", "replace").split())


def _simple_index(idx: str) -> bool:
    """`idx + k` keeps its meaning without parentheses (only +, -, *, /, % and atoms)."""
    return bool(re.fullmatch(r"[\w.\s+\-*/%()\[\]]*", idx)) and "?" not in idx


@dataclass
class Side:
    """One end of a copy: a wide access, or a plain lvalue of the wide type."""
    acc: Optional[WideAccess] = None
    lvalue: Optional[Node] = None

    @property
    def space(self) -> str:
        return self.acc.space if self.acc is not None else "local"


def _spell(src: Source, side: Side, scalar: str, const: bool, k: str) -> str:
    """Element k of a side as an lvalue of the scalar type."""
    cv = "const " if const else ""
    acc = side.acc
    arg = acc.view_arg if acc is not None else side.lvalue
    if arg is not None and norm_type(element_type(src, arg) or "") == norm_type(scalar):
        a = strip_parens(arg)
        if a.type == "subscript_expression":
            base = strip_parens(a.child_by_field_name("argument"))
            idx = _ct(src, a.child_by_field_name("indices"))[1:-1].strip()
            if idx == "0":
                return f"{_ct(src, base)}[{k}]"
            if base.type == "identifier" and _simple_index(idx):
                return f"{_ct(src, base)}[{idx} + {k}]"
        return f"(&{_paren(_ct(src, a))})[{k}]"
    if acc is not None:
        return f"reinterpret_cast<{cv}{scalar} *>({acc.addr})[{k}]"
    return f"reinterpret_cast<{cv}{scalar} *>(&{_paren(_ct(src, side.lvalue))})[{k}]"


def _paren(s: str) -> str:
    return s if re.fullmatch(r"[\w.]+(\[[^][]*\])*", s) else f"({s})"


def _count(wide: str, scalar: str) -> str:
    bw, bs = type_bytes(wide), type_bytes(scalar)
    if bw and bs and bw % bs == 0:
        return str(bw // bs)
    return f"(int)(sizeof({wide}) / sizeof({scalar}))"


def _is_lvalue(node: Node) -> bool:
    node = strip_parens(node)
    if node.type == "pointer_expression":
        return node.children[0].type == "*"
    return node.type in _LVALUE


def _parent(node: Node) -> tuple[Node, Optional[Node]]:
    """(the node as its parent sees it, the parent), parentheses skipped."""
    p = node.parent
    while p is not None and p.type == "parenthesized_expression":
        node, p = p, p.parent
    return node, p


def _loop_var(src: Source, node: Node) -> str:
    name = LOOP_VAR
    body = src.code[node.start_byte:node.end_byte]
    while re.search(rb"\b" + name.encode() + rb"\b", body):
        name += "_"
    return name


@dataclass(frozen=True)
class Plan:
    start: int
    end: int
    text: str
    kind: str  # load | store (global) | shared_load
    line: int


def plans(source: Source) -> list[Plan]:
    """Every rewrite this module can make, one per statement (or per expression for a lambda)."""
    src = structural(source)
    accs = wide_accesses(src)
    by_range = {(a.node.start_byte, a.node.end_byte): a for a in accs}
    out: dict[tuple[int, int], Plan] = {}
    for acc in accs:
        plan = _plan(src, acc, by_range)
        if plan is not None and (plan.start, plan.end) not in out:
            out[(plan.start, plan.end)] = plan
    return sorted(out.values(), key=lambda p: p.start)


def _plan(src: Source, acc: WideAccess, by_range: dict) -> Optional[Plan]:
    me, p = _parent(acc.node)
    if p is None:
        return None
    op = text(p.child_by_field_name("operator") or p.children[1]) if p.type == "assignment_expression" else ""
    if p.type == "assignment_expression" and (op == "=" or me.start_byte == p.child_by_field_name("left").start_byte):
        if op != "=":
            return None  # a compound assignment to a wide lvalue
        stmt = p.parent
        if stmt is None or stmt.type != "expression_statement":
            return None
        left, right = strip_parens(p.child_by_field_name("left")), strip_parens(p.child_by_field_name("right"))
        la = by_range.get((left.start_byte, left.end_byte))
        ra = by_range.get((right.start_byte, right.end_byte))
        dst = Side(acc=la) if la is not None else (Side(lvalue=left) if _is_lvalue(left) else None)
        if dst is None:
            return None
        srcside = Side(acc=ra) if ra is not None else (Side(lvalue=right) if _is_lvalue(right) else None)
        wide_side = next((s.acc for s in (srcside, dst) if s is not None and s.acc is not None and
                          s.acc.space in ("global", "unknown")), None)
        shared_read = srcside is not None and srcside.acc is not None and srcside.acc.space == "shared"
        if wide_side is None and shared_read:
            wide_side = srcside.acc  # a wide read of shared memory into registers
        if wide_side is None:
            return None  # register reinterpretations, or wide stores into shared memory only
        scalar, wide = wide_side.scalar_type, wide_side.wide_type
        if scalar is None or wide is None:
            return None
        k = _loop_var(src, stmt)
        n = _count(wide, scalar)
        head = f"for (int {k} = 0; {k} < {n}; ++{k}) "
        d = _spell(src, dst, scalar, False, k)
        if srcside is not None:
            body = f"{head}{d} = {_spell(src, srcside, scalar, True, k)};"
        else:
            tmp = _fresh(src, stmt, "ks_v")
            body = (f"{{ const {wide} {tmp} = {_ct(src, right)}; "
                    f"{head}{d} = reinterpret_cast<const {scalar} *>(&{tmp})[{k}]; }}")
        kind = "load" if srcside is not None and srcside.acc is not None and \
            srcside.acc.space in ("global", "unknown") else ("shared_load" if wide_side.space == "shared" else "store")
        return Plan(stmt.start_byte, stmt.end_byte, body, kind, src.line_of(stmt.start_byte))
    if acc.space not in ("global", "unknown", "shared") or acc.scalar_type is None or acc.wide_type is None:
        return None
    scalar, wide = acc.scalar_type, acc.wide_type
    read_kind = "shared_load" if acc.space == "shared" else "load"
    if p.type == "init_declarator" and p.child_by_field_name("value") is not None and \
            p.child_by_field_name("value").start_byte == me.start_byte:
        decl = p.parent
        if decl is None or decl.type != "declaration" or len([c for c in decl.named_children
                                                              if c.type == "init_declarator"]) != 1:
            return None
        if decl.parent is None or decl.parent.type != "compound_statement":
            return None
        name_node = p.child_by_field_name("declarator")
        if name_node is None or name_node.type != "identifier":
            return None
        t = decl.child_by_field_name("type")
        declared = norm_type(_ct(src, t)) if t is not None else "auto"
        vtype = wide if declared in ("auto", "decltype(auto)") else declared
        if not is_wide_type(vtype):
            return None
        name = text(name_node)
        k = _loop_var(src, decl)
        body = (f"{vtype} {name}; for (int {k} = 0; {k} < {_count(wide, scalar)}; ++{k}) "
                f"reinterpret_cast<{scalar} *>(&{name})[{k}] = {_spell(src, Side(acc=acc), scalar, True, k)};")
        return Plan(decl.start_byte, decl.end_byte, body, read_kind, src.line_of(decl.start_byte))
    # a wide value inside a larger expression: read it through a lambda that assembles it
    if p.type in ("update_expression",) or (p.type == "pointer_expression" and p.children[0].type == "&"):
        return None
    if not re.fullmatch(r"[A-Za-z_][\w:]*(<[^;{}]*>)?", wide):
        return None
    k, tmp = LOOP_VAR, "ks_v"
    lam = (f"([&]() {{ {wide} {tmp}; for (int {k} = 0; {k} < {_count(wide, scalar)}; ++{k}) "
           f"reinterpret_cast<{scalar} *>(&{tmp})[{k}] = {_spell(src, Side(acc=acc), scalar, True, k)}; "
           f"return {tmp}; }}())")
    return Plan(acc.node.start_byte, acc.node.end_byte, lam, read_kind, src.line_of(acc.node.start_byte))


def _fresh(src: Source, node: Node, name: str) -> str:
    body = src.code[node.start_byte:node.end_byte]
    while re.search(rb"\b" + name.encode() + rb"\b", body):
        name += "_"
    return name


def devectorize_edits(src: Source, kind: str, skip: list[tuple[int, int]] = ()) -> list[Edit]:
    """The edits of `plans` of one kind (load / store) that overlap none of `skip`."""
    out = []
    for p in plans(src):
        if p.kind != kind:
            continue
        if any(p.start < b and a < p.end for a, b in skip):
            continue
        out.append(Edit(p.start, p.end, p.text))
    return out


# --------------------------------------------------------------------------- forward: vectorize a copy loop
_COPY = re.compile(r"for\s*\(\s*int\s+(\w+)\s*=\s*0\s*;\s*\1\s*<\s*(\w+)\s*;\s*(?:\+\+\s*\1|\1\s*\+\+|\1\s*\+=\s*1)\s*\)"
                   r"\s*\{?\s*([^;{}]+?)\s*=\s*([^;{}]+?)\s*;\s*\}?$", re.S)


def _unit_access(expr: str, k: str) -> Optional[tuple[str, str]]:
    """(base, start index) of `base[start + k]` / `base[k]` / `(&X)[k]`."""
    e = expr.strip()
    m = re.fullmatch(r"(\w+)\s*\[\s*(?:(.+?)\s*\+\s*)?%s\s*\]" % re.escape(k), e)
    if m and (m.group(2) is None or not re.search(r"\b%s\b" % re.escape(k), m.group(2))):
        return m.group(1), (m.group(2) or "0")
    m = re.fullmatch(r"\(\s*&\s*(.+?)\s*\)\s*\[\s*%s\s*\]" % re.escape(k), e)
    if m and not re.search(r"\b%s\b" % re.escape(k), m.group(1)):
        return "&", m.group(1)
    return None


def forward(source: str, ctx=None) -> list:
    """Vectorize element-wise copy loops of 8 or 16 bytes that read or write global memory: one
    `uint2` / `uint4` access each, taken only when both addresses are aligned (runtime check; the
    loop stays as the fallback). Returns `mining.operators.base.Materialization`s."""
    from mining.operators.base import Materialization

    src = structural(Source(source))
    out = []
    for loop in src.nodes("for_statement"):
        m = _COPY.fullmatch(_ct(src, loop))
        if not m:
            continue
        k, bound, lhs, rhs = m.group(1), m.group(2), m.group(3), m.group(4)
        try:
            trips = int(src.expand(bound).strip("() "), 0)
        except ValueError:
            continue
        d, s = _unit_access(lhs, k), _unit_access(rhs, k)
        if d is None or s is None:
            continue
        f = src.function_at(loop.start_byte)
        if f is None:
            continue
        names = {p.name: p for p in f.params}
        dst_addr = f"&{d[1]}" if d[0] == "&" else f"&{d[0]}[{d[1]}]"
        src_addr = f"&{s[1]}" if s[0] == "&" else f"&{s[0]}[{s[1]}]"
        elem = None
        for base in (d[0], s[0]):
            if base in names and names[base].is_pointer:
                elem = names[base].base_type
        if elem is None or type_bytes(elem) is None:
            continue
        nbytes = trips * type_bytes(elem)
        vec = {16: "uint4", 8: "uint2"}.get(nbytes)
        if vec is None:
            continue
        orig = src.raw[loop.start_byte:loop.end_byte].decode()
        guard = (f"((reinterpret_cast<unsigned long long>({dst_addr}) | "
                 f"reinterpret_cast<unsigned long long>({src_addr})) % {nbytes} == 0)")
        new = (f"if {guard} {{ *reinterpret_cast<{vec} *>({dst_addr}) = "
               f"*reinterpret_cast<const {vec} *>({src_addr}); }} else {orig}")
        text_ = source[:0] + (src.raw[:loop.start_byte] + new.encode() + src.raw[loop.end_byte:]).decode()
        out.append(Materialization(source=text_, rewrite="vectorize_copy_loop", carrier="vector_load",
                                   description=f"one {nbytes}-byte access for an element-wise copy of {trips} "
                                               f"{elem}s (alignment checked at run time)",
                                   guards=[guard]))
    return out


__all__ = ["Plan", "devectorize_edits", "forward", "plans", "view_macros"]


# The forward half of the type-directed narrowing that vector_load_to_scalar and
# vector_store_to_scalar apply through `devectorize_edits`: a pair with no backward half of its own
# (its operators are those two, whose `inverted_by` name this rewrite).
PAIR = Pair(None, (Rewrite("vectorize_copy_loop", "vector_load", forward, prior=1.5, serves=("vector_store",)),))
