"""drop_specialized_dispatch: host code that picks a specialized instance of a kernel at run time
(`if (aligned && n % 8 == 0) launch<8>(...); else launch<1>(...);`) always takes the general
branch.

Detection by meaning: an `if` with an `else` in a host function (neither `__global__` nor
`__device__`) whose two branches are each one call of the *same* template (function template or
kernel) that differ only in their template arguments, or two kernel launches. The condition is
what the specialized instance needs (pointer alignment, a divisible size, a size bound); the
`else` branch is the instance that works without it. The rewrite replaces the whole `if` by the
`else` branch's statement. Whether the general instance is correct for every workload is the
gate's call; whichever instance the condition chose, the other one computed the same values, so
the step removes only the specialization (vector width, pack size, unrolled variant).

`forward` is the inverse: a host launch of a kernel template whose integer template argument is
1 gets a second, specialized instance with a wider argument behind the alignment and
divisibility check that makes the wider access legal.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.operators.base import Edit, Operator, Pair, Rewrite
from corpora.code.parse import text


def _single_call(stmt: Optional[Node]) -> Optional[Node]:
    """The call of a branch that is one call statement (braces allowed)."""
    while stmt is not None and stmt.type == "compound_statement":
        inner = [c for c in stmt.named_children if c.type != "comment"]
        if len(inner) != 1:
            return None
        stmt = inner[0]
    if stmt is None or stmt.type != "expression_statement" or not stmt.named_children:
        return None
    call = stmt.named_children[0]
    return call if call.type == "call_expression" else None


def _callee(call: Node) -> tuple[str, bool]:
    """(callee name without template arguments, is a kernel launch)."""
    fn = call.child_by_field_name("function")
    launch = any(c.type == "kernel_call_syntax" for c in call.children)
    if fn is None:
        return "", launch
    if fn.type == "template_function":
        name = fn.child_by_field_name("name")
        return (text(name) if name is not None else ""), launch
    return text(fn), launch


def _template_args(call: Node) -> str:
    fn = call.child_by_field_name("function")
    if fn is not None and fn.type == "template_function":
        args = fn.child_by_field_name("arguments")
        return " ".join(text(args).split()) if args is not None else ""
    return ""


def _is_host(src: Source, byte: int) -> bool:
    f = src.function_at(byte)
    if f is None:
        return False
    fn = src.func_node(f)
    head = src.code[f.start_byte:(fn.child_by_field_name("body").start_byte if fn is not None and
                                   fn.child_by_field_name("body") is not None else f.end_byte)]
    return not re.search(rb"\b(__global__|__device__)\b", head)


def dispatch_sites(src: Source) -> list[tuple[Node, Node]]:
    """(if statement, the else branch's statement) for every specialized dispatch."""
    out = []
    for node in src.nodes("if_statement"):
        alt = node.child_by_field_name("alternative")
        cons = node.child_by_field_name("consequence")
        if alt is None or cons is None or not _is_host(src, node.start_byte):
            continue
        if node.parent is not None and node.parent.type == "else_clause":
            continue  # the tail of an else-if chain
        else_stmt = next((c for c in alt.named_children if c.type != "comment"), None) \
            if alt.type == "else_clause" else alt
        if else_stmt is None or else_stmt.type == "if_statement":
            continue  # an else-if chain: several specializations, not one fallback
        a, b = _single_call(cons), _single_call(else_stmt)
        if a is None or b is None:
            continue
        (na, la), (nb, lb) = _callee(a), _callee(b)
        same_template = na == nb and na and _template_args(a) != _template_args(b) and _template_args(b)
        two_launches = la and lb and na != nb
        if same_template or two_launches:
            out.append((node, else_stmt))
    return out


class DropSpecializedDispatch(Operator):
    name = "drop_specialized_dispatch"
    carrier = "specialized_dispatch"
    description = "always launch the general instance a run-time dispatch falls back to"

    def edits(self, src: Source):
        for node, else_stmt in dispatch_sites(src):
            body = src.raw[else_stmt.start_byte:else_stmt.end_byte].decode("utf-8", "replace")
            yield Edit(node.start_byte, node.end_byte, body)


# --------------------------------------------------------------------------- forward
_ALIGNABLE = re.compile(r"\b(const\s+)?(float|half|__half|int|unsigned|unsigned int|__nv_bfloat16|double)\s*\*\s*"
                        r"(?:__restrict__\s*)?(\w+)")


def forward(source: str, ctx=None) -> list:
    """A host call `f<..., 1, ...>(args)` of a template whose last integer argument is 1 (the
    general instance) -> `if (<pointers 16-byte aligned> && n % W == 0) f<..., W, ...>(args); else
    <the original>` with W = 16 bytes of the host function's first pointer parameter's type."""
    from mining.operators.base import Materialization

    src = Source(source)
    out = []
    for call in src.nodes("call_expression"):
        if not _is_host(src, call.start_byte):
            continue
        fn = call.child_by_field_name("function")
        if fn is None or fn.type != "template_function":
            continue
        targs = fn.child_by_field_name("arguments")
        ones = [c for c in (targs.named_children if targs is not None else [])
                if c.type == "number_literal" and text(c) == "1"]
        stmt = call.parent
        if not ones or stmt is None or stmt.type != "expression_statement":
            continue
        if stmt.parent is not None and stmt.parent.type in ("if_statement", "else_clause"):
            continue
        f = src.function_at(call.start_byte)
        sig = src.code[f.start_byte:f.end_byte].decode("utf-8", "replace").split("{", 1)[0]
        ptrs = [(m.group(2), m.group(3)) for m in _ALIGNABLE.finditer(sig)]
        ints = [p.name for p in f.params if not p.is_pointer and p.base_type in ("int", "long", "long long",
                                                                                 "int64_t", "size_t")]
        if not ptrs or not ints:
            continue
        elem_bytes = {"float": 4, "int": 4, "unsigned": 4, "unsigned int": 4, "half": 2, "__half": 2,
                      "__nv_bfloat16": 2, "double": 8}[ptrs[0][0]]
        width = 16 // elem_bytes
        one = ones[-1]
        special = (src.raw[stmt.start_byte:one.start_byte] + str(width).encode() +
                   src.raw[one.end_byte:stmt.end_byte]).decode()
        general = src.raw[stmt.start_byte:stmt.end_byte].decode()
        aligned = " | ".join(f"reinterpret_cast<unsigned long long>({p})" for _, p in ptrs)
        guard = f"(({aligned}) % 16 == 0 && {ints[-1]} % {width} == 0)"
        new = f"if {guard} {special} else {general}"
        text_ = (src.raw[:stmt.start_byte] + new.encode() + src.raw[stmt.end_byte:]).decode()
        out.append(Materialization(source=text_, rewrite="specialized_dispatch", carrier="specialized_dispatch",
                                   description=f"launch the {width}-wide instance when every pointer is 16-byte "
                                               f"aligned and {ints[-1]} % {width} == 0",
                                   guards=[guard]))
    return out


PAIR = Pair(DropSpecializedDispatch, (Rewrite("specialized_dispatch", "specialized_dispatch", forward, prior=1.2),))
