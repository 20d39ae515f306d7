"""A running sum, maximum or minimum update of an accumulator, read by meaning whatever its spelling
(issue 20: the row-wise rewrites met kernels from outside the project that spell the same update
otherwise):

    s += e;      s = s + e;      s = e + s;                          -> (s, "+", e)
    m = fmaxf(m, e);   m = max(e, m);   m = e > m ? e : m;   m = m < e ? e : m;
    if (e > m) m = e;  if (m < e) { m = e; }                         -> (m, "max", e)
    ... and the same with < / > swapped                              -> (m, "min", e)

`fn` is the call that spells the operation for the accumulator's declared type (`fmaxf` for float,
`fmax` for double, `max` for integers), so a rewrite that writes the reduction after its loop
(a shuffle all-reduce, a block reduction, an online sweep) writes it in the kernel's own type.
Only side-effect-free operands are read (the compare-and-assign forms evaluate `e` twice, and a
rewrite may evaluate it once); `>=` / `<=` count as the same max / min (they differ only in which
of two equal values is kept). Types the maximum has no plain call for (half, structs) are not read.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tree_sitter import Node

from corpora.code.parse import text
from corpora.code.source import Source
from mining.operators.nodes import base_name, code, mentions, norm
from mining.operators.rewrite_util import declaration_of, has_side_effects

_CALLS = {"fmaxf": "max", "fmax": "max", "max": "max", "fminf": "min", "fmin": "min", "min": "min"}
_INTS = {"int", "unsigned", "unsigned int", "long", "long long", "unsigned long", "unsigned long long", "short",
         "size_t", "int32_t", "uint32_t", "int64_t", "uint64_t"}


@dataclass(frozen=True)
class Update:
    node: Node  # the whole update: the assignment, or the `if` of a compare-and-assign
    target: str  # the accumulator as written (whitespace collapsed): `s`, `acc[d]`
    base: str  # its identifier
    op: str  # "+" | "max" | "min"
    operand: str  # the term combined into it, as written
    fn: str  # the call spelling op for the target's type; "" for "+"


def call_for(type_: Optional[str], op: str) -> str:
    """`fmaxf` / `fmax` / `max` (and the min forms) for a declared type; "" when there is none."""
    if type_ is None:
        return ""
    t = " ".join(w for w in type_.split() if w not in ("const", "volatile", "register", "static"))
    if t == "float":
        return "f" + op + "f"
    if t == "double":
        return "f" + op
    return op if t in _INTS else ""


def _strip(node: Node) -> Node:
    while node is not None and node.type == "parenthesized_expression" and node.named_children:
        node = node.named_children[0]
    return node


def _compare(src: Source, cond: Node) -> Optional[tuple[str, str, str]]:
    """(x, relation, y) of `x > y` / `x >= y` / `x < y` / `x <= y`, relation "gt" or "lt"."""
    if cond is not None and cond.type == "condition_clause":  # an `if`'s parenthesized condition
        kids = [c for c in cond.named_children if c.type != "comment"]
        cond = kids[0] if len(kids) == 1 else None
    cond = _strip(cond)
    if cond is None or cond.type != "binary_expression":
        return None
    op = cond.child_by_field_name("operator")
    rel = {">": "gt", ">=": "gt", "<": "lt", "<=": "lt"}.get(text(op) if op is not None else "")
    if rel is None:
        return None
    return norm(code(src, cond.child_by_field_name("left"))), rel, norm(code(src, cond.child_by_field_name("right")))


def _chosen(x: str, rel: str, y: str, picked: str, target: str) -> Optional[tuple[str, str]]:
    """`x REL y` keeping `picked`: (op, the other operand) when {x, y} = {target, e}."""
    if x == y or target not in (x, y) or picked not in (x, y):
        return None
    larger = x if rel == "gt" else y  # the operand that is the larger when the compare holds
    return ("max" if picked == larger else "min"), (y if x == target else x)


def _typed(src: Source, node: Node, target: Node, op: str, operand: str, whole: Node,
           spelled: str = "") -> Optional[Update]:
    """The update, with the call for its type (else the call it was written with, `spelled`)."""
    b = base_name(target)
    if not b or mentions(operand, b):
        return None
    fn = ""
    if op != "+":
        d = declaration_of(src, b, whole)
        fn = call_for(d[0] if d else None, op) or spelled
        if not fn:
            return None
    return Update(whole, " ".join(code(src, target).split()), b, op, operand, fn)


def read_update(src: Source, node: Node) -> Optional[Update]:
    """The running update `node` spells (an expression statement, its assignment, or an `if`), or None."""
    if node.type == "expression_statement" and node.named_children:
        node = node.named_children[0]
    if node.type == "if_statement":
        return _if_update(src, node)
    if node.type != "assignment_expression":
        return None
    left, right = node.child_by_field_name("left"), _strip(node.child_by_field_name("right"))
    op = node.children[1].type if len(node.children) > 1 else ""
    if left is None or right is None or left.type not in ("identifier", "subscript_expression") or \
            has_side_effects(left, allow_calls=False) or has_side_effects(right):
        return None
    tgt = norm(code(src, left))
    if op == "+=":
        return _typed(src, node, left, "+", code(src, right), node)
    if op != "=":
        return None
    if right.type == "binary_expression" and text(right.child_by_field_name("operator")) == "+":
        terms = _plus_terms(right)
        own = [i for i, t in enumerate(terms) if norm(code(src, t)) == tgt]
        if len(own) != 1:
            return None
        rest = [code(src, t) for i, t in enumerate(terms) if i != own[0]]
        return _typed(src, node, left, "+", " + ".join(rest) if len(rest) == 1 else "(" + " + ".join(rest) + ")", node)
    if right.type == "call_expression":
        fn = right.child_by_field_name("function")
        args = right.child_by_field_name("arguments")
        op_ = _CALLS.get(text(fn) if fn is not None else "")
        xs = [a for a in (args.named_children if args is not None else []) if a.type != "comment"]
        if op_ is None or len(xs) != 2:
            return None
        own = [i for i, a in enumerate(xs) if norm(code(src, a)) == tgt]
        if len(own) != 1:
            return None
        return _typed(src, node, left, op_, code(src, xs[1 - own[0]]), node, text(fn))
    if right.type == "conditional_expression":
        cmp = _compare(src, right.child_by_field_name("condition"))
        yes, no = right.child_by_field_name("consequence"), right.child_by_field_name("alternative")
        if cmp is None or yes is None or no is None:
            return None
        picked, other = norm(code(src, _strip(yes))), norm(code(src, _strip(no)))
        if {picked, other} != {cmp[0], cmp[2]}:
            return None
        got = _chosen(cmp[0], cmp[1], cmp[2], picked, tgt)
        if got is None:
            return None
        e = _strip(yes) if picked != tgt else _strip(no)
        return _typed(src, node, left, got[0], code(src, e), node)
    return None


def _plus_terms(node: Node) -> list[Node]:
    """The operands of a left-associated chain of `+` (`a - b + c` -> [a - b, c])."""
    node = _strip(node)
    if node.type == "binary_expression" and text(node.child_by_field_name("operator")) == "+":
        return _plus_terms(node.child_by_field_name("left")) + [_strip(node.child_by_field_name("right"))]
    return [node]


def _if_update(src: Source, node: Node) -> Optional[Update]:
    """`if (e > m) m = e;` (braced or not, no else) -> a max update; `<` -> min."""
    if node.child_by_field_name("alternative") is not None:
        return None
    cons = node.child_by_field_name("consequence")
    if cons is not None and cons.type == "compound_statement":
        kids = [c for c in cons.named_children if c.type != "comment"]
        cons = kids[0] if len(kids) == 1 else None
    if cons is None or cons.type != "expression_statement" or not cons.named_children:
        return None
    a = cons.named_children[0]
    cond = node.child_by_field_name("condition")
    if a.type != "assignment_expression" or a.children[1].type != "=" or cond is None:
        return None
    left, right = a.child_by_field_name("left"), a.child_by_field_name("right")
    if left is None or right is None or left.type not in ("identifier", "subscript_expression") or \
            has_side_effects(left, allow_calls=False) or has_side_effects(right) or has_side_effects(cond):
        return None
    cmp = _compare(src, cond)
    if cmp is None:
        return None
    got = _chosen(cmp[0], cmp[1], cmp[2], norm(code(src, _strip(right))), norm(code(src, left)))
    if got is None:
        return None
    return _typed(src, node, left, got[0], code(src, _strip(right)), node)
