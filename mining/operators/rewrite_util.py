"""Shared helpers of the structural operators (shuffles, tiles, buffers): a parse that keeps loops
whole across `#pragma` lines, splicing several sub-edits into one byte range of the original text,
scope lookup, indentation, and the declared type of a simple value expression.

Every helper reads the tree of the comment-blanked text (`Source.tree`) and copies spans of the
*raw* text, so comments inside a rewritten range are kept.
"""
from __future__ import annotations

import re
from typing import Iterable, Optional

from tree_sitter import Node

from corpora.code.edit import Edit
from corpora.code.source import Source
from corpora.code.parse import functions, parse_cuda, text, walk

SCOPE_TYPES = ("function_definition", "lambda_expression")
# CUDA vector types: the member type of .x/.y/.z/.w
VECTOR_MEMBER = {**{f"{b}{n}": b for b in ("float", "int", "double", "short", "char", "long") for n in (1, 2, 3, 4)},
                 **{f"u{b}{n}": f"unsigned {b}" for b in ("int", "short", "char", "long") for n in (1, 2, 3, 4)},
                 "longlong2": "long long", "ulonglong2": "unsigned long long"}


def structural(src: Source) -> Source:
    """The same source, parsed with every `#pragma` line blanked (same length, same offsets).

    tree-sitter ends a `for (...)` header at a following preprocessor line, so a loop written
    `for (...)\n#pragma unroll\nfor (...) body` parses as an empty loop and a sibling loop; the
    structural operators need the real nesting. `raw` and `code` are the original's."""
    blanked = re.sub(rb"(?m)^[ \t]*#[ \t]*pragma\b[^\n]*", lambda m: b" " * len(m.group(0)), src.code)
    out = Source.__new__(Source)
    out.raw, out.code = src.raw, src.code
    out.tree = parse_cuda(blanked)
    out.funcs = functions(out.tree)
    out._line_starts = src._line_starts
    return out


def pragma_before(src: Source, start: int) -> Optional[int]:
    """Start of a `#pragma unroll` line directly above the line of `start`, if any."""
    a = src.raw.rfind(b"\n", 0, start) + 1
    if src.code[a:start].strip() or a == 0:
        return None
    b = src.code.rfind(b"\n", 0, a - 1) + 1
    if re.match(rb"[ \t]*#[ \t]*pragma[ \t]+unroll\b", src.code[b:a]):
        return b
    return None


def splice_range(src: Source, start: int, end: int, subs: Iterable[Edit]) -> str:
    """The raw text of [start, end) with non-overlapping sub-edits (start, end, text) applied."""
    out, pos = [], start
    subs = list(subs)
    if not all(isinstance(x, Edit) for x in subs):  # one edit type (issue 16): no bare tuples
        raise TypeError("splice_range takes Edits")
    for s, e, t in sorted(subs, key=lambda x: (x.start, x.end)):
        if s < pos or e > end:
            raise ValueError("overlapping or out-of-range sub-edit")
        out.append(src.raw[pos:s].decode("utf-8", "replace"))
        out.append(t)
        pos = e
    out.append(src.raw[pos:end].decode("utf-8", "replace"))
    return "".join(out)


def ctext(src: Source, node: Node) -> str:
    """Comment-free text of a node, whitespace runs collapsed."""
    return " ".join(src.code[node.start_byte:node.end_byte].decode("utf-8", "replace").split())


def node_at(src: Source, start: int, end: int, type_: Optional[str] = None) -> Optional[Node]:
    for n in walk(src.tree.root_node):
        if n.start_byte == start and n.end_byte == end and (type_ is None or n.type == type_):
            return n
    return None


def scope_of(node: Node) -> Optional[Node]:
    """The innermost function definition or lambda containing `node`."""
    n = node.parent
    while n is not None and n.type not in SCOPE_TYPES:
        n = n.parent
    return n


def scope_body(scope: Node) -> Optional[Node]:
    return scope.child_by_field_name("body")


def line_indent(src: Source, byte: int) -> str:
    a = src.raw.rfind(b"\n", 0, byte) + 1
    m = re.match(rb"[ \t]*", src.raw[a:byte])
    return m.group(0).decode() if m else ""


def body_indent(src: Source, body: Node) -> str:
    """Indentation of the first statement of a compound statement (4 spaces deeper than its brace if none)."""
    for c in body.named_children:
        if c.type != "comment" and not c.type.startswith("preproc"):
            return line_indent(src, c.start_byte)
    return line_indent(src, body.start_byte) + "    "


def after_open_brace(src: Source, body: Node) -> int:
    """Where to insert declarations at the top of a compound statement: after its `{` and, when
    the rest of that line is only a comment (`{  // ...`), after that comment."""
    pos = body.start_byte + 1
    nl = src.code.find(b"\n", pos)
    if nl >= 0 and not src.code[pos:nl].strip():
        return nl
    return pos


def has_side_effects(node: Node, allow_calls: bool = True) -> bool:
    for n in walk(node):
        if n.type in ("assignment_expression", "update_expression"):
            return True
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            name = text(fn) if fn is not None else ""
            if not allow_calls or re.match(r"(atomic|__syncthreads|__syncwarp|__shfl|__ballot|__any|__all|"
                                           r"__pipeline|__activemask)", name):
                return True
    return False


def params_of(scope: Node) -> list[Node]:
    decl = scope.child_by_field_name("declarator")
    while decl is not None and decl.type not in ("function_declarator", "lambda_declarator"):
        decl = decl.child_by_field_name("declarator")
    if decl is None:
        return []
    plist = decl.child_by_field_name("parameters")
    return [p for p in plist.named_children if p.type == "parameter_declaration"] if plist is not None else []


def _declarator_shape(d: Node) -> tuple[Optional[str], str, int]:
    """(name, kind, array dims): kind in scalar | array | pointer; references count as scalar."""
    if d.type == "init_declarator":
        d = d.child_by_field_name("declarator")
    dims = 0
    kind = "scalar"
    while d is not None and d.type not in ("identifier", "field_identifier"):
        if d.type == "array_declarator":
            dims += 1
            kind = "array"
        elif d.type == "pointer_declarator":
            kind = "pointer"
        inner = d.child_by_field_name("declarator")
        if inner is None:
            inner = next((c for c in d.named_children if c.type.endswith("declarator") or c.type == "identifier"),
                         None)
        d = inner
    return (text(d) if d is not None else None), kind, dims


def type_text(src: Source, decl: Node) -> Optional[str]:
    t = decl.child_by_field_name("type")
    if t is None:
        return None
    s = ctext(src, t)
    return None if s in ("auto", "decltype(auto)") or s.startswith("decltype") else s


def declaration_of(src: Source, name: str, at: Node) -> Optional[tuple[str, str, int]]:
    """(type, kind, dims) of the local or parameter `name` visible at `at` (innermost scope first)."""
    scope = scope_of(at)
    while scope is not None:
        best = None
        for d in walk(scope):
            if d.type != "declaration" or d.start_byte >= at.start_byte:
                continue
            if scope_of(d) is not scope and not _within(d, scope):
                continue
            container = d.parent
            if container is None or not (container.start_byte <= at.start_byte < container.end_byte):
                continue
            for dec in d.named_children:
                if dec.type in ("identifier", "init_declarator", "array_declarator", "pointer_declarator",
                                "reference_declarator"):
                    n, kind, dims = _declarator_shape(dec)
                    if n == name:
                        best = (d, kind, dims)
        if best is not None:
            t = type_text(src, best[0])
            return (t, best[1], best[2]) if t else None
        for p in params_of(scope):
            dec = p.child_by_field_name("declarator")
            if dec is None:
                continue
            n, kind, dims = _declarator_shape(dec)
            if n == name:
                t = type_text(src, p)
                return (t, kind, dims) if t else None
        scope = scope_of(scope)
    return None


def _within(node: Node, outer: Node) -> bool:
    return outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte


def struct_field_type(src: Source, struct: str, field: str) -> Optional[str]:
    for n in walk(src.tree.root_node):
        if n.type not in ("struct_specifier", "class_specifier"):
            continue
        nm = n.child_by_field_name("name")
        body = n.child_by_field_name("body")
        if nm is None or body is None or text(nm) != struct:
            continue
        for fd in body.named_children:
            if fd.type != "field_declaration":
                continue
            for dec in fd.named_children:
                if dec.type in ("field_identifier", "identifier"):
                    if text(dec) == field:
                        return type_text(src, fd)
    return None


def expression_type(src: Source, expr: Node) -> Optional[str]:
    """The (unqualified, non-reference) type of a simple value expression, or None if unknown."""
    while expr.type == "parenthesized_expression" and expr.named_children:
        expr = expr.named_children[0]
    if expr.type == "identifier":
        d = declaration_of(src, text(expr), expr)
        return d[0] if d and d[1] == "scalar" else None
    if expr.type == "subscript_expression":
        depth, base = 0, expr
        while base.type == "subscript_expression":
            depth += 1
            base = base.child_by_field_name("argument")
        if base.type != "identifier":
            return None
        d = declaration_of(src, text(base), expr)
        return d[0] if d and d[1] == "array" and d[2] == depth else None
    if expr.type == "field_expression":
        op = expr.child_by_field_name("operator")
        if op is None or text(op) != ".":
            return None
        base_t = expression_type(src, expr.child_by_field_name("argument"))
        field = text(expr.child_by_field_name("field"))
        if base_t is None:
            return None
        if base_t in VECTOR_MEMBER and field in "xyzw":
            return VECTOR_MEMBER[base_t]
        return struct_field_type(src, base_t, field)
    return None


def paren(expr: str) -> str:
    e = expr.strip()
    if re.fullmatch(r"[A-Za-z_]\w*(\s*\.\s*[A-Za-z_]\w*)?|\d[\w.]*", e):
        return e
    return "(" + e + ")"
