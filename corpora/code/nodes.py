"""Helpers over tree-sitter nodes of C-family code (CUDA and C++ alike)."""
from __future__ import annotations

from typing import Optional

from tree_sitter import Node

from corpora.code.parse import text


def declarator_name(node: Node) -> Optional[str]:
    while node is not None:
        if node.type in ("identifier", "field_identifier"):
            return text(node)
        inner = node.child_by_field_name("declarator")
        if inner is None:
            inner = next((c for c in node.named_children if c.type.endswith("declarator") or c.type == "identifier"),
                         None)
        node = inner
    return None


def call_name(call: Node) -> str:
    fn = call.child_by_field_name("function")
    return text(fn) if fn is not None else ""


def enclosing(node: Node, *types: str) -> Optional[Node]:
    p = node.parent
    while p is not None:
        if p.type in types:
            return p
        p = p.parent
    return None


def same(a: Optional[Node], b: Optional[Node]) -> bool:
    return a is not None and b is not None and a.start_byte == b.start_byte and a.end_byte == b.end_byte \
        and a.type == b.type


def contains(outer: Node, inner: Node) -> bool:
    return outer.start_byte <= inner.start_byte and inner.end_byte <= outer.end_byte


def declarator_shape(d: Node) -> tuple[Optional[str], str]:
    """(declared name, "scalar" | "pointer" | "array") of a declarator or init declarator."""
    if d.type == "init_declarator":
        d = d.child_by_field_name("declarator")
    shape = "scalar"
    while d is not None and d.type not in ("identifier", "field_identifier"):
        if d.type == "array_declarator":
            shape = "array"
        elif d.type == "pointer_declarator" and shape == "scalar":
            shape = "pointer"
        inner = d.child_by_field_name("declarator")
        if inner is None:
            inner = next((c for c in d.named_children if c.type.endswith("declarator") or c.type == "identifier"),
                         None)
        d = inner
    return (text(d) if d is not None else None), shape


def is_assignment_target(node: Node) -> bool:
    """`node` (parentheses aside) is the left side of an assignment."""
    p = node.parent
    while p is not None and p.type == "parenthesized_expression":
        node, p = p, p.parent
    return p is not None and p.type == "assignment_expression" and same(p.child_by_field_name("left"), node)


def is_written(node: Node) -> bool:
    """`node` (parentheses aside) is assigned to or incremented / decremented."""
    p = node.parent
    while p is not None and p.type == "parenthesized_expression":
        node, p = p, p.parent
    if p is None:
        return False
    if p.type == "assignment_expression":
        return same(p.child_by_field_name("left"), node)
    return p.type == "update_expression"


def writer_of(node: Node) -> Optional[Node]:
    """The assignment / update / address-of that writes (or may write) through `node`, if any; a
    member of the element (`v[k].x = ...`) counts."""
    p = node.parent
    while p is not None and (p.type == "parenthesized_expression" or
                             (p.type == "field_expression" and same(p.child_by_field_name("argument"), node) and
                              text(p.child_by_field_name("operator")) == ".")):
        node, p = p, p.parent
    if p is None:
        return None
    if p.type == "assignment_expression" and same(p.child_by_field_name("left"), node):
        return p
    if p.type == "update_expression":
        return p
    if p.type == "pointer_expression" and p.children and p.children[0].type == "&":
        return p
    return None


def function_declarator(decl: Node) -> tuple[Optional[Node], Optional[Node]]:
    """(function_declarator, its name node) under a definition's declarator chain."""
    node = decl
    while node is not None and node.type in ("pointer_declarator", "reference_declarator", "attributed_declarator",
                                             "parenthesized_declarator"):
        node = node.child_by_field_name("declarator") or (node.named_children[-1] if node.named_children else None)
    if node is None or node.type != "function_declarator":
        return None, None
    return node, node.child_by_field_name("declarator")
