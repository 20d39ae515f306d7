"""One GPU timing at a time: a file lock shared by every process that times kernels on the GPU.

Two kernels timed at once would each measure the other. The gate's profile stage takes the lock
around the timed run only (mining/gate/gate.py ``_profile``): building the harness and generating
the workloads' inputs are CPU work and happen outside it, and a cached timing takes no lock at
all, so processes that share one GPU do not queue behind each other's compiles and input files.
Processes timing into different stores on one GPU share a lock by naming the same file in
SKILLS_GPU_LOCK. The lock is reentrant within a thread: a caller that already holds it (a
benchmark timing a kernel and its reference together) can run the gate's profile inside.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from pathlib import Path

_held = threading.local()  # lock path -> depth, per thread


def lock_path(store_root: Path) -> Path:
    shared = os.environ.get("SKILLS_GPU_LOCK")
    return Path(shared) if shared else Path(store_root).resolve() / "cache" / "gpu-timing.lock"


@contextlib.contextmanager
def gpu_timing_lock(store_root: Path):
    path = lock_path(store_root)
    depth = getattr(_held, "depth", None)
    if depth is None:
        depth = _held.depth = {}
    key = str(path)
    if depth.get(key):
        depth[key] += 1
        try:
            yield
        finally:
            depth[key] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        depth[key] = 1
        try:
            yield
        finally:
            depth[key] = 0
            fcntl.flock(fh, fcntl.LOCK_UN)
