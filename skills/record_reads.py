"""The store's skills and lineages read as plain JSON, without pydantic: what `skills list`,
`show` and `lineage` need, fast (importing pydantic and building the models costs more than the
whole read; the records were validated when they were written).

    rec = find_skill(store, "vectorize-global-loads")   # RecordView or None
    rec.name, rec.effect[0].device, rec.scope["problems"]
    json.dumps(rec)                                      # the stored record, as written
"""
from __future__ import annotations

import json
from typing import Any, Optional


class RecordView(dict):
    """A stored record: keys readable as attributes, nested objects as views (dicts, so json.dumps
    and .get still work)."""

    __slots__ = ()

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def parse(text: str) -> RecordView:
    return json.loads(text, object_hook=RecordView)


def skill_rows(store, kind: Optional[str] = None, carrier: Optional[str] = None) -> list[str]:
    """The skills' JSON records, ordered by name and id."""
    sql, params, where = "SELECT record FROM skills", [], []
    if kind:
        where.append("kind = ?"), params.append(kind)
    if carrier:
        where.append("carrier = ?"), params.append(carrier)
    if where:
        sql += " WHERE " + " AND ".join(where)
    return [r["record"] for r in store.query(sql + " ORDER BY name, skill_id", params)]


def find_skill(store, ident: str) -> Optional[str]:
    """One skill's JSON record by id, id prefix (4+ characters), key, name, or SKILL.md folder
    name (the slug `skills export` gives it, or the folder a hand-written skill was imported from).
    None for an empty identifier: it names no skill, not the first one."""
    ident = (ident or "").strip()
    if not ident:
        return None
    rows = store.query("SELECT record FROM skills WHERE skill_id = ? OR key = ? OR name = ? "
                       "OR (length(?) >= 4 AND starts_with(skill_id, ?)) ORDER BY skill_id",
                       [ident, ident, ident, ident, ident])
    if rows:
        return rows[0]["record"]
    from types import SimpleNamespace

    from skills.slugs import skill_slugs

    heads = store.query("SELECT skill_id, key, name, json_extract_string(record, '$.provenance.folder') AS folder "
                        "FROM skills ORDER BY skill_id")
    slugs = skill_slugs(SimpleNamespace(skill_id=r["skill_id"], key=r["key"], name=r["name"]) for r in heads)
    hit = next((r["skill_id"] for r in heads if ident in (r["folder"], slugs[r["skill_id"]])), None)
    if hit is None:
        return None
    return store.query("SELECT record FROM skills WHERE skill_id = ?", [hit])[0]["record"]


def find_lineage(store, ident: str) -> Optional[str]:
    """The newest lineage's JSON record by lineage id or problem name."""
    rows = store.query("SELECT record FROM lineages WHERE lineage_id = ? OR problem = ? ORDER BY created_at DESC",
                       [ident, ident])
    return rows[0]["record"] if rows else None
