"""Run an untrusted command in its own process group with a wall-clock and a memory limit.

Memory is policed by sampling the resident set of the whole process group, not by
RLIMIT_AS: AddressSanitizer and the CUDA driver reserve terabytes of address space, so an
address-space limit would break them while a resident-set limit does not.
"""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence


@dataclass
class RunResult:
    returncode: Optional[int]
    stdout: str
    stderr: str
    wall_s: float
    timed_out: bool = False
    mem_exceeded: bool = False
    peak_rss_mb: float = 0.0

    @property
    def signal_name(self) -> Optional[str]:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.mem_exceeded


def _group_rss_mb(pgid: int) -> float:
    total_kb = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.getpgid(int(pid)) != pgid:
                continue
            with open(f"/proc/{pid}/statm") as fh:
                total_kb += int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        except (OSError, ValueError, IndexError):
            continue
    return total_kb / 1024.0


def _limits() -> None:  # runs in the child before exec
    os.setsid()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_limited(cmd: Sequence[str], *, cwd: Optional[Path] = None, timeout_s: float = 60.0,
                mem_mb: float = 4096.0, env: Optional[dict[str, str]] = None,
                poll_s: float = 0.02) -> RunResult:
    """Run cmd; kill its whole process group on timeout or when its RSS exceeds mem_mb."""
    start = time.perf_counter()
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.Popen(list(cmd), cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            preexec_fn=_limits, text=True, errors="replace")
    timed_out = mem_exceeded = False
    peak = 0.0
    # communicate() in a loop with a short timeout lets us poll memory while draining pipes.
    out_chunks: list[str] = []
    err_chunks: list[str] = []
    deadline = start + timeout_s
    next_mem_check = start
    while True:
        try:
            out, err = proc.communicate(timeout=poll_s)
            out_chunks.append(out or "")
            err_chunks.append(err or "")
            break
        except subprocess.TimeoutExpired:
            now = time.perf_counter()
            if now >= next_mem_check:
                rss = _group_rss_mb(proc.pid)
                peak = max(peak, rss)
                next_mem_check = now + 0.1
                if rss > mem_mb:
                    mem_exceeded = True
            if now >= deadline:
                timed_out = True
            if timed_out or mem_exceeded:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                out, err = proc.communicate()
                out_chunks.append(out or "")
                err_chunks.append(err or "")
                break
    # A child that left grandchildren behind must not outlive us either.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return RunResult(returncode=proc.returncode, stdout="".join(out_chunks), stderr="".join(err_chunks),
                     wall_s=time.perf_counter() - start, timed_out=timed_out,
                     mem_exceeded=mem_exceeded, peak_rss_mb=peak)
