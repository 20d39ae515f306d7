"""Executors: how a harness is built and run. `cuda` uses nvcc and the real GPU; `cpu` uses g++
and the project's fiber runtime (mining/gate/cpu_runtime), which checks correctness only.

Both build the same generated harness source. Builds and runs are sandboxed (mining/gate/sandbox.py):
each sees its own work folder read-write, the binary and the toolchain read-only, nothing else.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional

from mining.gate.errors import BadInput
from mining.gate.harness import HARNESS_HEADER
from mining.gate.sandbox import RunResult, run_limited
from mining.gate.static import environment_failure, first_error_line, nvcc_path, nvcc_version


@dataclass
class BuildResult:
    ok: bool
    binary: Optional[Path]
    reason: str = ""
    log: str = ""
    wall_s: float = 0.0
    cached: bool = False
    transient: bool = False  # the machine failed (missing header, compiler killed): never cached


@dataclass
class RunSpec:
    """One run of a built harness: environment, a label (e.g. the CPU fiber order), which build
    it runs (`default`, or `asan` on the CPU) and, on the GPU, the compute-sanitizer tool."""
    label: str
    env: dict[str, str] = field(default_factory=dict)
    build: str = "default"
    tool: str = ""


# Poisoned guard bytes the harness puts before and after every device buffer and checks after
# each run (a multiple of 256, so buffers keep cudaMalloc's alignment). Off where a checker sees
# the true bounds (the CPU's checked forward run, compute-sanitizer): there the guard would sit
# inside the allocation and hide an out-of-bounds access from it.
GUARD_BYTES = 16384
SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
SANITIZER_PADDING = 1 << 20  # bytes of padding memcheck puts after every device allocation


@lru_cache(maxsize=1)
def gpu_info() -> Optional[dict[str, str]]:
    """Name, compute capability and driver of GPU 0, or None when no GPU is usable."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=name,compute_cap,driver_version,clocks.max.sm,clocks.max.mem",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    fields = [f.strip() for f in out.stdout.strip().splitlines()[0].split(",")]
    keys = ["name", "compute_cap", "driver", "max_sm_clock", "max_mem_clock"]
    return dict(zip(keys, fields))


def resolve_executor(name: str) -> str:
    if name not in ("auto", "cpu", "cuda"):
        raise BadInput(f"--executor: unknown executor {name!r} (auto, cpu, cuda)")
    if name == "auto":
        return "cuda" if gpu_info() and nvcc_path() else "cpu"
    if name == "cuda" and not gpu_info():
        raise BadInput("--executor cuda: no usable NVIDIA GPU (nvidia-smi failed); use --executor cpu")
    if name == "cuda" and not nvcc_path():
        raise BadInput("--executor cuda: nvcc not found on PATH")
    return name


class CudaExecutor:
    name = "cuda"

    def fingerprint(self) -> str:
        info = gpu_info() or {}
        return f"cuda|{nvcc_version()}|{info.get('name')}|{info.get('compute_cap')}|{info.get('driver')}"

    def arch(self) -> str:
        cap = (gpu_info() or {}).get("compute_cap", "9.0")
        return "sm_" + cap.replace(".", "")

    def build(self, harness: Path, kernel: Path, flags: list[str], out: Path, sanitize: bool,
              timeout_s: float) -> BuildResult:
        cmd = [nvcc_path() or "nvcc", "-std=c++17", f"-arch={self.arch()}", "-lineinfo",
               f"-I{HARNESS_HEADER.parent}", f"-I{kernel.parent}", *flags, "-o", str(out), str(harness)]
        res = run_limited(cmd, cwd=harness.parent, timeout_s=timeout_s, mem_mb=8192, writable=[harness.parent],
                          readable=[HARNESS_HEADER.parent])
        if not res.ok:
            reason = "nvcc timed out" if res.timed_out else first_error_line(res.stderr, kernel)
            return BuildResult(False, None, reason, res.stderr[-4000:], res.wall_s,
                               transient=environment_failure(res.stderr, res.timed_out, res.mem_exceeded,
                                                             res.returncode))
        return BuildResult(True, out, log=res.stderr[-2000:], wall_s=res.wall_s)

    def run_specs(self, sanitize: bool) -> list[RunSpec]:
        """The plain run with guard regions always; --sanitize adds one compute-sanitizer run per
        tool (memcheck: out-of-bounds and misaligned accesses; racecheck: shared-memory hazards;
        initcheck: reads of uninitialized device memory; synccheck: invalid barrier and warp-sync
        masks), each without guards so the tool sees the buffers' true bounds."""
        specs = [RunSpec("gpu", {"KS_GUARD_BYTES": str(GUARD_BYTES)})]
        if sanitize:
            specs += [RunSpec(tool, {"KS_GUARD_BYTES": "0"}, tool=tool) for tool in SANITIZER_TOOLS]
        return specs

    def command(self, binary: Path, manifest: Path, spec: RunSpec) -> list[str]:
        if spec.tool:
            exe = shutil.which("compute-sanitizer")
            if not exe:
                raise BadInput("--sanitize on cuda needs compute-sanitizer on PATH")
            # memcheck only flags an access outside every live allocation: a read past the end of
            # one buffer that lands in the next one (cudaMalloc packs them) looks valid. Padding
            # after each allocation turns such reads into reported errors.
            padding = ["--padding", str(SANITIZER_PADDING)] if spec.tool == "memcheck" else []
            return [exe, "--tool", spec.tool, *padding, "--error-exitcode", "89", str(binary), str(manifest)]
        return [str(binary), str(manifest)]

    def run(self, binary: Path, manifest: Path, spec: RunSpec, timeout_s: float, mem_mb: float,
            sanitize: bool) -> RunResult:
        return run_limited(self.command(binary, manifest, spec), cwd=manifest.parent, timeout_s=timeout_s,
                           mem_mb=mem_mb, env=spec.env, readable=[binary], writable=[manifest.parent], gpu=True)


class CpuExecutor:
    """g++ + fiber runtime. Every check runs twice: fibers and blocks scheduled forward (with
    the race/out-of-bounds checker on) and in reverse, because some races show in one order only."""

    name = "cpu"

    def fingerprint(self) -> str:
        from mining.gate import cpu_toolchain

        return f"cpu|{cpu_toolchain.toolchain_fingerprint()}"

    def prepare_source(self, kernel_source: str) -> str:
        from mining.gate import cpu_rewrite

        return cpu_rewrite.rewrite(kernel_source)

    def unsupported(self, kernel_source: str) -> list[tuple[int, str]]:
        from mining.gate import cpu_toolchain

        return cpu_toolchain.unsupported_features(kernel_source)

    def build(self, harness: Path, kernel: Path, flags: list[str], out: Path, sanitize: bool,
              timeout_s: float, coverage: bool = False) -> BuildResult:
        from mining.gate import cpu_toolchain

        # nvcc-only flags mean nothing to g++; keep preprocessor definitions and include paths.
        keep = [f for f in flags if re.match(r"^-(D|U|I)\S+", f)]
        extra = [f"-I{HARNESS_HEADER.parent}", f"-I{kernel.parent}", "-DKS_CPU_EXECUTOR=1", *keep]
        mode = "cover" if coverage else "asan" if sanitize else "check"
        res = cpu_toolchain.compile_cpu_binary(harness, out, mode=mode,
                                               extra_flags=tuple(extra), timeout_s=timeout_s,
                                               readable=[HARNESS_HEADER.parent])
        if not res.ok:
            reason = first_error_line(res.stderr, kernel)
            env = environment_failure(res.stderr) or "timed out after" in res.stderr or not res.command
            return BuildResult(False, None, reason, res.stderr[-4000:], res.wall_s, transient=env)
        return BuildResult(True, out, log=res.stderr[-2000:], wall_s=res.wall_s)

    def run_specs(self, sanitize: bool) -> list[RunSpec]:
        """Forward with the race and bounds checker, reverse (checker off, so the harness's guard
        regions catch stray writes there); --sanitize adds an AddressSanitizer build's run."""
        specs = [RunSpec("forward", {"KS_ORDER": "forward", "KS_RACECHECK": "1", "KS_GUARD_BYTES": "0"}),
                 RunSpec("reverse", {"KS_ORDER": "reverse", "KS_RACECHECK": "0",
                                     "KS_GUARD_BYTES": str(GUARD_BYTES)})]
        if sanitize:
            specs.append(RunSpec("asan", {"KS_ORDER": "forward", "KS_RACECHECK": "0", "KS_GUARD_BYTES": "0",
                                          "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=90"},
                                 build="asan"))
        return specs

    def run(self, binary: Path, manifest: Path, spec: RunSpec, timeout_s: float, mem_mb: float,
            sanitize: bool) -> RunResult:
        return run_limited([str(binary), str(manifest)], cwd=manifest.parent, timeout_s=timeout_s,
                           mem_mb=mem_mb, env=spec.env, readable=[binary], writable=[manifest.parent])


def make_executor(name: str):
    return CudaExecutor() if name == "cuda" else CpuExecutor()


_KS_ERROR = re.compile(r"KS_ERROR (\S+) (.*)")


def explain_failure(res: RunResult, timeout_s: float, kernel: Path) -> str:
    """A one-line reason for a harness run that did not finish cleanly."""
    if res.timed_out:
        return f"timed out after {timeout_s:g}s (the kernel never returned: hang or deadlock)"
    if res.mem_exceeded:
        return f"exceeded the memory limit ({res.peak_rss_mb:.0f} MB resident)"
    for line in res.stderr.splitlines():
        m = _KS_ERROR.search(line)
        if m:
            kind, message = m.group(1), m.group(2).strip()
            message = message.replace(f"{kernel.name}:", f"{kernel}:") if kernel.name in message else message
            return f"{kind}: {message}"
    if "AddressSanitizer" in res.stderr:
        m = re.search(r"ERROR: AddressSanitizer: (\S+)", res.stderr)
        loc = re.search(rf"({re.escape(kernel.name)}:\d+)", res.stderr)
        return f"asan: {m.group(1) if m else 'error'}" + (f" at {kernel.parent / loc.group(1)}" if loc else "")
    if "========= " in res.stderr:  # compute-sanitizer
        first = next((ln for ln in res.stderr.splitlines() if "=========" in ln and "ERROR SUMMARY" not in ln
                      and ln.strip("= ").strip()), "")
        return f"compute-sanitizer: {first.strip('= ').strip()}"
    if res.signal_name:
        return f"crashed with {res.signal_name}"
    tail = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    return f"exited with code {res.returncode}" + (f": {tail[-1][:200]}" if tail else "")
