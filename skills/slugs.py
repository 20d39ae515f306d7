"""SKILL.md folder names (skills/skillmd.py): lowercase ASCII slugs of skill names, unique per
export. Kept apart from skillmd so that reads (`skills show <folder>`) need no pydantic."""
from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Any, Iterable

NAME_MAX = 64


def slugify(text: str, limit: int = NAME_MAX) -> str:
    """Lowercase ASCII letters and digits joined by single hyphens, at most `limit` characters."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    return slug[:limit].rstrip("-")


def skill_slugs(skills: Iterable[Any]) -> dict[str, str]:
    """skill_id -> folder name, unique: a name two skills share gets each one's id appended, so the
    result does not depend on the order of the skills."""
    skills = list(skills)
    ids = Counter(s.skill_id for s in skills)
    dup = [i for i, k in ids.items() if k > 1]
    if dup:
        raise ValueError(f"skill {dup[0]} appears more than once")
    base = {s.skill_id: slugify(s.name) or slugify(s.key) or slugify(s.skill_id) for s in skills}
    counts = Counter(base.values())
    out = {}
    for s in skills:
        b = base[s.skill_id]
        if counts[b] > 1:
            tag = slugify(s.skill_id.removeprefix("sk-"))[:12] or "x"
            b = (b[:NAME_MAX - len(tag) - 1].rstrip("-") + "-" + tag).strip("-")
        out[s.skill_id] = b
    if len(set(out.values())) != len(out):  # ids sharing a 12-character prefix: fall back to the full id
        out = {i: slugify(i) for i in out}
    return out
