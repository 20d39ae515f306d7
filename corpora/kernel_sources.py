"""Fetched third-party kernel collections under `<store>/sources/<name>/`.

Minimal core owned by corpus-tools (issue 17): this module only answers where a
fetched source lives and says how to fetch it when it is absent. Fetching itself lands with
`skills corpora fetch`.
"""
from __future__ import annotations

from pathlib import Path


class SourceMissing(FileNotFoundError):
    """A kernel source has not been fetched into the store."""

    def __init__(self, name: str, where: Path):
        super().__init__(f"source {name!r} is not fetched ({where} missing); run: skills corpora fetch {name}")
        self.name = name
        self.where = where


def source_dir(name: str, store_root: Path) -> Path:
    """`<store>/sources/<name>`; raises SourceMissing when it is not there."""
    path = Path(store_root) / "sources" / name
    if not path.is_dir():
        raise SourceMissing(name, path)
    return path
