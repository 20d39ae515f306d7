"""Operators: reversible pairs of a deoptimization (the walk's backward step) and its forward
rewrite (what `skills optimize` applies), one pair per module, one registry
(`mining/operators/registry.py`) in the walk's priority order. See docs/architecture.md, "Operators".

The registry's names are re-exported lazily, so `mining.operators.base` (the `Edit` type, the
interfaces) can be imported without loading every operator module.
"""
from __future__ import annotations

from mining.operators.base import Edit, Operator, Pair, Rewrite, splice

_REGISTRY_NAMES = ("PAIRS", "all_operators", "all_rewrites", "get_operator", "get_rewrite")

__all__ = ["Edit", "Operator", "Pair", "Rewrite", "splice", "PAIRS", "all_operators", "all_rewrites", "get_operator",
           "get_rewrite"]


def __getattr__(name: str):
    if name in _REGISTRY_NAMES:
        from mining.operators import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'mining.operators' has no attribute {name!r}")
