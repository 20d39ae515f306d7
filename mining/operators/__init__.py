"""Operators: reversible pairs of a deoptimization (the walk's backward step) and its forward
rewrite (what `skills optimize` applies), one pair per module, one registry
(`mining/operators/registry.py`) in the walk's priority order. See docs/architecture.md, "Operators"."""
from __future__ import annotations

from mining.operators.base import Edit, Operator, Pair, Rewrite, splice
from mining.operators.registry import PAIRS, all_operators, all_rewrites, get_operator, get_rewrite

__all__ = ["Edit", "Operator", "Pair", "Rewrite", "splice", "PAIRS", "all_operators", "all_rewrites", "get_operator",
           "get_rewrite"]
