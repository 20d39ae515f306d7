"""Where a benchmark's figures came from, and where its JSON goes: one helper every benchmark uses.

`stamp(prog, argv)` is the provenance every result JSON starts with: the commit (``SKILLS_COMMIT``
when the caller sets it: a copy of the tree on the GPU machine sits in a checkout of its own, whose
HEAD is not the code that ran; else the checkout's HEAD, ``+dirty`` when tracked files differ from
it), the command as typed, the machine (CPU model, cores, GPU, 1-minute load) and the
UTC date. Take it before the run: it describes the code that ran, not the code at the end.

`write_result(result, out, default_name)` writes the JSON where ``--out`` names it, and only
there inside the repository; without ``--out`` it goes to an untracked temporary folder
(``$TMPDIR/kernel-skills-results/``) and the path is said on stderr, so a benchmark run never
rewrites a committed result by accident. A name ending in ``.gz`` is written gzip-compressed
(the per-function rows of large benchmarks). Writes are atomic (temporary file, then rename).
"""
from __future__ import annotations

import gzip
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "eval" / "results"
STAMP_KEYS = ("commit", "command", "machine", "date_utc")


def commit() -> str:
    """$SKILLS_COMMIT when set (the caller knows what ran), else HEAD of the checkout (+dirty when
    tracked files changed), else 'unknown'."""
    if os.environ.get("SKILLS_COMMIT"):
        return os.environ["SKILLS_COMMIT"]
    def git(*args: str) -> Optional[str]:
        try:
            r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if not head:
        return "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """The machine a figure was measured on: platform, CPU model, cores, GPU (or None), load."""
    gpu = None
    try:  # nvidia-smi directly: the stamp needs no part of the pipeline
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        rows = r.stdout.strip().splitlines() if r.returncode == 0 else []
        if rows:
            name, cap, driver = ([f.strip() for f in rows[0].split(",")] + ["?", "?"])[:3]
            gpu = f"{len(rows)}x {name} (sm {cap}, driver {driver})"
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        load: Optional[float] = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    return {"platform": f"{platform.machine()} {platform.system()}", "cpu": cpu_model(), "cores": os.cpu_count(),
            "gpu": gpu, "load_1min": load}


def stamp(prog: str, argv: Sequence[str]) -> dict[str, Any]:
    """{commit, command, machine, date_utc} for a run of ``python -m <prog> <argv>``."""
    return {"commit": commit(), "command": f"python -m {prog} {shlex.join(argv)}".rstrip(),
            "machine": machine(), "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def stamped(origin: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """The result with the stamp's keys first (a result's own keys of the same name win)."""
    return {**origin, **result}


def default_path(name: str) -> Path:
    return Path(tempfile.gettempdir()) / "kernel-skills-results" / name


def write_json(path: Path, data: Any, indent: Optional[int] = 1) -> Path:
    """Atomic write; gzip when the name ends in .gz (fixed mtime: same data, same bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=indent, default=str) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            if path.name.endswith(".gz"):
                with gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
                    gz.write(text.encode())
            else:
                fh.write(text.encode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_result(result: Any, out: Optional[Path], default_name: str, indent: Optional[int] = 1,
                 quiet: bool = False) -> Path:
    """Write to ``out``, or (no --out) to the untracked default path and say where on stderr."""
    path = Path(out) if out else default_path(default_name)
    write_json(path, result, indent)
    if not out and not quiet:
        print(f"JSON: {path} (--out FILE to keep it; eval/results/README.md says which files are tracked)",
              file=sys.stderr)
    return path


def read_json(path: Path) -> Any:
    """A result file, plain or gzip-compressed."""
    data = Path(path).read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
