"""Merging: the same optimization mined from several kernels is one skill with several pieces
of evidence, not N copies.

`merge_skill(existing, incoming)` is pure: evidence is keyed by (lineage, step), so merging the
same lineage twice replaces its evidence instead of duplicating it (re-mining is idempotent).
The skill's summary fields (effect, preconditions, risks, scope, provenance) are recomputed from
the union of its evidence and per-lineage findings.
"""
from __future__ import annotations

import math
from typing import Iterable, Optional

from mining.records import Effect, Precondition, Risk, Skill


def _uniq(items: Iterable[str]) -> list[str]:
    return sorted({i for i in items if i})


def summarize_effects(effects: Iterable[Effect]) -> list[Effect]:
    """One summary effect per (device, method): geometric mean of the time ratios with the
    smallest and largest as spread; static deltas averaged (rounded)."""
    groups: dict[tuple[str, str], list[Effect]] = {}
    for e in effects:
        groups.setdefault((e.device, e.method), []).append(e)
    out = []
    for (device, method), group in sorted(groups.items()):
        ratios = [e.time_ratio for e in group if e.time_ratio]
        def avg(attr: str) -> Optional[int]:
            vals = [getattr(e, attr) for e in group if getattr(e, attr) is not None]
            return round(sum(vals) / len(vals)) if vals else None
        sass: dict[str, float] = {}
        for e in group:
            for op, d in e.sass_delta.items():
                sass[op] = sass.get(op, 0) + d / len(group)
        out.append(Effect(
            device=device, method=method,
            time_ratio=round(math.exp(sum(math.log(r) for r in ratios) / len(ratios)), 4) if ratios else None,
            time_ratio_q1=round(min(ratios), 4) if ratios else None,
            time_ratio_q3=round(max(ratios), 4) if ratios else None,
            workload=f"{len(group)} evidence step(s)" if len(group) > 1 else group[0].workload,
            registers_delta=avg("registers_delta"), smem_delta=avg("smem_delta"), spill_delta=avg("spill_delta"),
            sass_delta={k: round(v) for k, v in sorted(sass.items(), key=lambda kv: -abs(kv[1]))[:8] if round(v)}))
    return out


def _merge_preconditions(a: list[Precondition], b: list[Precondition]) -> list[Precondition]:
    out: dict[tuple, Precondition] = {}
    for p in a + b:
        key = (p.kind, p.axis, p.value, p.source)
        if key not in out:
            out[key] = p
        else:  # keep every probe that backed it
            merged = out[key].model_copy(deep=True)
            merged.probes = (merged.probes + [q for q in p.probes if q not in merged.probes])[:24]
            out[key] = merged
    found = [p for p in out.values() if p.kind != "none_found"]
    # "none found" only stands when no lineage's probes found anything (the optimization's own
    # structural conditions are not findings of probing)
    if not any(p.source != "optimization" for p in found):
        found = list(out.values())
    return sorted(found, key=lambda p: (p.kind, p.axis, p.value))


def merge_skill(existing: Optional[Skill], incoming: Skill) -> Skill:
    if existing is None:
        merged = incoming.model_copy(deep=True)
    else:
        if existing.skill_id != incoming.skill_id:
            raise ValueError(f"cannot merge {incoming.skill_id} into {existing.skill_id}")
        new_keys = {(e.lineage_id, e.step) for e in incoming.evidence}
        new_lineages = {e.lineage_id for e in incoming.evidence}
        kept = [e for e in existing.evidence if e.lineage_id not in new_lineages and (e.lineage_id, e.step) not in new_keys]
        merged = existing.model_copy(deep=True)
        merged.evidence = kept + [e.model_copy(deep=True) for e in incoming.evidence]
        # findings of a re-mined lineage replace its old ones
        old_prov = existing.provenance.get("per_lineage", {})
        merged.provenance = {**existing.provenance, "per_lineage": {
            **{k: v for k, v in old_prov.items() if k not in new_lineages},
            **incoming.provenance.get("per_lineage", {})}}
        # prefer the exemplar with the smallest diff: it shows the optimization most plainly
        if incoming.diff and (not existing.diff or len(incoming.diff) < len(existing.diff)):
            merged.before, merged.after, merged.diff, merged.anchor = (incoming.before, incoming.after,
                                                                       incoming.diff, incoming.anchor)
        # the real-code example: a complete one (both halves) wins, else the first one found
        if len(incoming.example) > len(existing.example):
            merged.example = dict(incoming.example)
    per = merged.provenance.get("per_lineage", {})
    merged.preconditions = []
    merged.risks = []
    merged.verification = []
    for lid in sorted(per):
        info = per[lid]
        merged.preconditions = _merge_preconditions(
            merged.preconditions, [Precondition.model_validate(p) for p in info.get("preconditions", [])])
        merged.risks += [Risk.model_validate(r) for r in info.get("risks", []) if r not in [x.model_dump() for x in merged.risks]]
        merged.verification += info.get("verification", [])
    merged.evidence.sort(key=lambda e: (e.problem, e.lineage_id, e.step))
    merged.effect = summarize_effects(eff for ev in merged.evidence for eff in ev.effect)
    merged.scope = {
        "op_types": _uniq(e.op_type for e in merged.evidence),
        "problems": _uniq(e.problem for e in merged.evidence),
        "dtypes": _uniq(d for lid in per for d in per[lid].get("dtypes", [])),
        "archs": _uniq(a for lid in per for a in per[lid].get("archs", [])),
    }
    merged.provenance["lineages"] = _uniq(e.lineage_id for e in merged.evidence)
    merged.provenance["kernel_hashes"] = _uniq(e.kernel_hash for e in merged.evidence)
    return merged
