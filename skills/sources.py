"""The store's ``sources`` table (made by migration 4, skills/migrations.py): which kernel collections
were fetched, from where, at which commit.

The trees themselves live under ``<store>/sources/<name>/`` (corpora/kernel_sources.py).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from skills.store import Store


def record_source(store_root: Path, info: dict[str, Any], dest: Path) -> None:
    """Insert or replace the row of one fetched source (one transaction)."""
    with Store(store_root) as store:
        with store.transaction() as con:
            con.execute("INSERT INTO sources (name, url, kind, commit, version, dir, fetched_at, info) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET url = excluded.url, "
                        "kind = excluded.kind, commit = excluded.commit, version = excluded.version, "
                        "dir = excluded.dir, fetched_at = excluded.fetched_at, info = excluded.info",
                        [info["name"], info["url"], info["kind"], info.get("commit"), info.get("version"),
                         str(dest), info["fetched_at"].replace("T", " ").rstrip("Z"), json.dumps(info)])


def stored_sources(store_root: Optional[Path] = None) -> list[dict[str, Any]]:
    """Rows of the ``sources`` table (empty when there is no store or no fetch yet)."""
    store = Store(store_root, read_only=True)
    if not store.exists():
        return []
    with store:
        if "sources" not in store.tables():
            return []
        return store.query("SELECT name, url, kind, commit, version, dir, fetched_at FROM sources ORDER BY name")
