"""Workload constraints of a definition (`"N % 4 == 0"`, `"K <= 4096 and M > 0"`) as data.

An expression is parsed with `ast` and accepted only if every node is on an allow-list:
integer and float literals, axis and scalar names, arithmetic (+ - * / // % and ** with a small
exponent), comparisons, membership in a literal tuple of numbers (`K in (256, 512)`), and/or/not,
and min/max/abs calls. Nothing is ever evaluated as Python:
`evaluate` walks the checked tree itself, so attribute access, subscripts, lambdas, imports and
every other construct are rejected when the problem loads.
"""
from __future__ import annotations

import ast
import operator
from typing import Any, Callable, Mapping, Union

MAX_LENGTH = 500
MAX_NODES = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = 1 << 128

Number = Union[int, float, bool]

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_FUNCS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "abs": abs}


class ConstraintError(ValueError):
    """The expression is not an allowed constraint, or cannot be evaluated on these values."""


def parse(expr: str) -> ast.Expression:
    """Parse and check one constraint; ConstraintError says which construct is not allowed."""
    if not isinstance(expr, str) or not expr.strip():
        raise ConstraintError("a constraint must be a non-empty string")
    if len(expr) > MAX_LENGTH:
        raise ConstraintError(f"constraint longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise ConstraintError(f"not an expression: {exc.msg}") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise ConstraintError(f"constraint has more than {MAX_NODES} parts")
    for node in nodes:
        _check(node)
    _check_membership(tree)
    return tree


def _check_membership(tree: ast.Expression) -> None:
    """A tuple may stand only right of `in` / `not in`, and `in` only before a tuple."""
    allowed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for op, comp in zip(node.ops, node.comparators):
                if isinstance(op, (ast.In, ast.NotIn)):
                    if not isinstance(comp, ast.Tuple):
                        raise ConstraintError("`in` needs a literal tuple of numbers: K in (256, 512)")
                    allowed.add(id(comp))
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple) and id(node) not in allowed:
            raise ConstraintError("a tuple may only follow `in` in a constraint")


def _check(node: ast.AST) -> None:
    if isinstance(node, (ast.Expression, ast.Load, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd)):
        return
    if isinstance(node, (ast.BoolOp, ast.UnaryOp, ast.Compare, ast.Name)):
        if isinstance(node, ast.Name) and (node.id.startswith("_") or not node.id.isidentifier()):
            raise ConstraintError(f"name {node.id!r} is not allowed")
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise ConstraintError(f"operator {type(node.op).__name__} is not allowed")
        return
    if type(node) in _BINOPS or type(node) in _CMPOPS:
        return
    if isinstance(node, (ast.In, ast.NotIn)):
        return
    if isinstance(node, ast.Tuple):
        # only as the right side of `in` / `not in`, and only of number literals (checked in _check_membership)
        if not all(isinstance(e, ast.Constant) and isinstance(e.value, (int, float)) and not isinstance(e.value, bool)
                   for e in node.elts):
            raise ConstraintError("a tuple in a constraint may hold number literals only")
        return
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (bool, int, float)):
            return
        raise ConstraintError(f"literal {node.value!r} is not allowed (numbers only)")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords:
            raise ConstraintError("only min(...), max(...) and abs(...) may be called")
        return
    raise ConstraintError(f"{type(node).__name__} is not allowed in a constraint")


def names(tree: ast.Expression) -> set[str]:
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called}


def evaluate(tree: ast.Expression, env: Mapping[str, Number]) -> Any:
    """The value of a checked tree with the workload's axes and scalars bound."""
    return _eval(tree.body, env)


def _number(value: Any) -> Any:
    if isinstance(value, (int, float)) and abs(value) > MAX_MAGNITUDE:
        raise ConstraintError("intermediate value too large")
    return value


def _eval(node: ast.AST, env: Mapping[str, Number]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ConstraintError(f"unknown name {node.id!r} (axes and scalar inputs only)")
        return env[node.id]
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(v, env) for v in node.values)
        return any(_eval(v, env) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env)
        return (not v) if isinstance(node.op, ast.Not) else (-v if isinstance(node.op, ast.USub) else +v)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env), _eval(node.right, env)
        if isinstance(node.op, ast.Pow) and (not isinstance(right, (int, float)) or abs(right) > MAX_EXPONENT
                                             or abs(left) > MAX_MAGNITUDE):
            raise ConstraintError(f"exponent above {MAX_EXPONENT}")
        try:
            return _number(_BINOPS[type(node.op)](left, right))
        except (ZeroDivisionError, OverflowError, TypeError) as exc:
            raise ConstraintError(str(exc)) from None
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Tuple):
        return tuple(_eval(e, env) for e in node.elts)
    if isinstance(node, ast.Call):
        args = [_eval(a, env) for a in node.args]
        try:
            return _FUNCS[node.func.id](*args)  # type: ignore[attr-defined]
        except (TypeError, ValueError) as exc:
            raise ConstraintError(str(exc)) from None
    raise ConstraintError(f"{type(node).__name__} is not allowed in a constraint")  # unreachable after parse()
