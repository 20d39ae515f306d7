"""docs/architecture.md stays true: its one table of modules names every module of the five rooms
and of eval/ once (a folder row covers the files under it), and every path it names exists."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("corpora", "mining", "skills", "retrieval", "prompts", "eval")


def _module_table() -> list[str]:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    paths = []
    for cell in first_cells:
        for p in re.findall(r"`([^`]+)`", cell):
            if "/" not in p and not (ROOT / p).exists():  # a file named relative to the row's first path
                base = paths[-1].rsplit("/", 1)[0] if paths else ""
                p = f"{base}/{p}"
            paths.append(p)
    return paths


def test_every_module_is_in_the_table_once_and_every_row_exists():
    listed = _module_table()
    assert len(listed) == len(set(listed)), sorted({p for p in listed if listed.count(p) > 1})
    missing_paths = [p for p in listed if not (ROOT / p.rstrip("/")).exists()]
    assert not missing_paths, missing_paths
    folders = [p.rstrip("/") + "/" for p in listed if (ROOT / p.rstrip("/")).is_dir()]
    modules = sorted(str(f.relative_to(ROOT)) for room in ROOMS for f in (ROOT / room).rglob("*.py")
                     if f.name != "__init__.py" and "/real/" not in str(f) and "/soundness/" not in str(f)
                     and "/kernels/" not in str(f))
    unlisted = [m for m in modules if m not in listed and not any(m.startswith(d) for d in folders)]
    assert not unlisted, unlisted
