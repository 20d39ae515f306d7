"""Content-addressed cache for stage results and built binaries.

A key is the SHA-256 of everything that can change a result (source, problem, flags,
executor, toolchain versions, seeds, tolerances, tool version). Entries are written with an
atomic rename, so parallel gate processes never see half a file.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

TOOL_VERSION = "gate-2"  # gate-2: bf16 compared with tolerance, guard regions, derived cases


def content_key(*parts: Any) -> str:
    digest = hashlib.sha256(TOOL_VERSION.encode())
    for part in parts:
        data = part if isinstance(part, bytes) else json.dumps(part, sort_keys=True, default=str).encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


class GateCache:
    def __init__(self, root: Path):
        self.root = Path(root)

    def _path(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / key

    def get_json(self, key: str) -> Optional[dict[str, Any]]:
        path = self._path("results", key)
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def put_json(self, key: str, value: dict[str, Any]) -> None:
        path = self._path("results", key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as fh:
            json.dump(value, fh)
        os.replace(tmp, path)

    def get_file(self, key: str) -> Optional[Path]:
        path = self._path("bin", key)
        return path if path.exists() else None

    def put_file(self, key: str, src: Path) -> Path:
        path = self._path("bin", key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        os.close(fd)
        shutil.copy2(src, tmp)
        os.replace(tmp, path)
        return path


def tool_output(cmd: list[str]) -> str:
    """stdout of a version query such as `nvcc --version`, cached on disk by the executable's
    path, size and mtime: a cached gate answer must not pay ~20 ms per toolchain subprocess."""
    import shutil
    import subprocess

    exe = shutil.which(cmd[0])
    if exe is None:
        return ""
    st = os.stat(exe)
    key = f"{os.path.realpath(exe)}|{st.st_size}|{st.st_mtime_ns}|{' '.join(cmd[1:])}"
    path = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernel-skills" / "tool-versions.json"
    try:
        table = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        table = {}
    if key in table:
        return table[key]
    out = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True).stdout
    table[key] = out
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as fh:
            json.dump(table, fh)
        os.replace(tmp, path)
    except OSError:
        pass
    return out
