"""Where the store lives: ``--store`` / ``SKILLS_STORE`` / ``./.skills``. One rule for every room
(corpora is the first to write under it: fetched sources, LLVM trees); skills/store.py opens it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

DEFAULT_ROOT = Path(".skills")


def resolve_root(root: Optional[os.PathLike | str] = None) -> Path:
    if root:
        return Path(root)
    env = os.environ.get("SKILLS_STORE")
    return Path(env) if env else DEFAULT_ROOT
