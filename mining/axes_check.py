"""A precondition against one workload's axes: the one rule, shared by `records.Precondition.check`
and the query path (`retrieval/applicability.py`, which reads skills as JSON and imports no pydantic)."""
from __future__ import annotations

from typing import Optional


def precondition_verdict(kind: str, axis: str, value: int, status: str,
                         axes: Optional[dict[str, int]]) -> tuple[str, str]:
    """(satisfied | violated | unknown | not_needed, why) for a precondition of `kind` on `axis`."""
    if kind == "none_found" or status == "not_needed":
        return "not_needed", ""
    if status == "required":  # a property of the code, not of sizes: decided from the sites
        return "unknown", "a property of the code at the site"
    if not axes or not axis or axis not in axes:
        why = "alignment of a pointer is not an axis" if kind == "alignment" and not axis else \
            (f"axis {axis} not given" if axes else "no --axes given")
        return "unknown", why
    v = int(axes[axis])
    if kind in ("divisible", "alignment"):
        ok = value > 0 and v % value == 0
    elif kind == "minimum":
        ok = v >= value
    elif kind == "maximum":
        ok = v <= value
    elif kind == "power_of_two":
        ok = v > 0 and v & (v - 1) == 0
    elif kind == "guarded":
        ok = True
    else:
        return "unknown", f"unknown kind {kind}"
    return ("satisfied" if ok else "violated"), f"{axis}={v}"
