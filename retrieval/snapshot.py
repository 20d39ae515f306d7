"""Where the query snapshot of kernel skills lives, read by the query path and written by
retrieval/skill_index.py: ``<store>/index/kernel_skills/<build>/`` with ``CURRENT`` naming the
live build, and the text length its vectors were embedded at (queries embed the same way)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

SNAPSHOT_DIR = ("index", "kernel_skills")
TEXT_MAX_TOKENS = 256


def snapshot_root(root: os.PathLike | str) -> Path:
    return Path(root).joinpath(*SNAPSHOT_DIR)


def current_snapshot(root: os.PathLike | str) -> Optional[Path]:
    base = snapshot_root(root)
    cur = base / "CURRENT"
    if not cur.is_file():
        return None
    d = base / cur.read_text().strip()
    return d if (d / "manifest.json").is_file() else None
