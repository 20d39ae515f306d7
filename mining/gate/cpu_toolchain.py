"""Build CUDA C++ for the CPU executor: g++ + ks_cpu.h + the fiber runtime (cpu_runtime/).

Modes:
  "check"  the kernel/harness TU is compiled with -fsanitize=thread but linked WITHOUT libtsan:
           the runtime object defines the __tsan_* callbacks and uses them to report races,
           out-of-bounds and misaligned accesses deterministically (KS_ERROR lines, exit 86).
  "asan"   -fsanitize=address build; the runtime annotates fiber switches for ASan.

The runtime object (and a precompiled ks_cpu.h per mode and flag set) is compiled once per
(g++ version, runtime sources, mode) into a cache folder and published with an atomic rename, so
concurrent builds never see a half-written file.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional, Sequence

from mining.gate.sandbox import reclaim

RUNTIME_DIR = Path(__file__).resolve().parent / "cpu_runtime"
HEADER = RUNTIME_DIR / "ks_cpu.h"
RUNTIME_SRC = RUNTIME_DIR / "ks_cpu_runtime.cpp"
INCLUDE_DIR = RUNTIME_DIR / "include"
MODES = ("check", "asan", "cover")

# cover: the check build with gcov line counters (which lines of the kernel ran: mining/gate/coverage.py)
_MODE_DEFINE = {"check": "-DKS_MODE_CHECK=1", "asan": "-DKS_MODE_ASAN=1", "cover": "-DKS_MODE_CHECK=1"}
_CHECK = ["-fsanitize=thread", "--param=tsan-distinguish-volatile=1", "--param=tsan-instrument-func-entry-exit=0",
          "-Wno-tsan"]
_MODE_COMPILE = {"check": _CHECK, "asan": ["-fsanitize=address", "-fno-omit-frame-pointer"],
                 "cover": [*_CHECK, "--coverage", "-fprofile-update=atomic"]}
_MODE_LINK = {"check": [], "asan": ["-fsanitize=address"], "cover": ["--coverage"]}
_RUNTIME_MODE = {"cover": "check"}  # the runtime object is the same as the check build's
_COMMON = ["-std=c++20", "-g", "-fno-pie", "-fdiagnostics-color=never", "-ftrivial-auto-var-init=pattern",
           "-Wno-unknown-pragmas", "-fmax-errors=20", "-fstack-clash-protection"]
_LIBS = ["-lboost_context", "-lpthread"]


@dataclass
class CompileResult:
    ok: bool
    command: str
    stderr: str
    wall_s: float


def gxx() -> str:
    return os.environ.get("KS_CXX") or shutil.which("g++") or "g++"


@lru_cache(maxsize=4)
def _gxx_version(exe: str) -> str:
    from mining.gate.cache import tool_output  # disk-cached: a cached gate answer spawns no g++

    try:
        out = tool_output([exe, "--version"])
        return out.splitlines()[0].strip() if out else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"


def _runtime_sources() -> list[Path]:
    files = [HEADER, RUNTIME_SRC]
    files += sorted(p for p in INCLUDE_DIR.glob("*.h"))
    return files


def _sources_hash(files: Iterable[Path]) -> str:
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


def toolchain_fingerprint() -> str:
    """g++ version + hash of the runtime sources, the rewrite and the build flags: changes whenever
    a CPU build could change."""
    here = Path(__file__).resolve().parent
    files = [*_runtime_sources(), here / "cpu_toolchain.py", here / "cpu_rewrite.py"]
    return f"{_gxx_version(gxx())}|ks-cpu-runtime {_sources_hash(files)}"


def _runtime_key(mode: str) -> str:
    """Cache key of the runtime object: compiler, runtime sources, mode and its flags."""
    text = "|".join([_gxx_version(gxx()), _sources_hash(_runtime_sources()), mode, *_COMMON, _MODE_DEFINE[mode]])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_cache_dir() -> Path:
    env = os.environ.get("KS_CPU_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kernel-skills" / "cpu-runtime"


def compiler_mem_mb() -> float:
    """Address-space limit of one g++ (cc1plus never needs sanitizer-sized reservations)."""
    return float(os.environ.get("KS_COMPILER_MEM_MB", "3072"))


def _run(cmd: Sequence[str], timeout_s: float, writable: Sequence[Path], readable: Sequence[Path] = ()
         ) -> tuple[int, str, bool]:
    """g++ in the sandbox: it may write only `writable` (its output folder) and read the runtime
    sources, the system and `readable`; never the shared cache it is not producing."""
    from mining.gate.sandbox import run_limited

    res = run_limited(cmd, cwd=Path(writable[0]), timeout_s=timeout_s, mem_mb=compiler_mem_mb() * 1.5,
                      as_mb=compiler_mem_mb(), writable=writable, readable=[RUNTIME_DIR, *readable])
    err = res.stderr
    if res.mem_exceeded or (res.returncode != 0 and "memory exhausted" in err):
        err += f"\ng++ exceeded the compiler memory limit ({compiler_mem_mb():.0f} MB)"
    return (res.returncode if res.returncode is not None else -1), err, res.timed_out


_STALE_S = 2 * 3600


def _touch(p: Path) -> None:
    """Mark a cache entry as in use (entries unused for _STALE_S may be pruned by other builds)."""
    try:
        if time.time() - p.stat().st_mtime > 60:
            os.utime(p)
    except OSError:
        pass


def _prune_stale(cache_dir: Path, prefix: str, keep: Path) -> None:
    """Remove cached objects / precompiled headers of other keys not touched for a while (they
    belong to older runtime sources; ~2 MB per object, ~50 MB per precompiled header)."""
    now = time.time()
    for p in Path(cache_dir).glob(prefix + "*"):
        if p == keep:
            continue
        try:
            if now - p.stat().st_mtime < _STALE_S:
                continue
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink()
        except OSError:
            pass


def build_runtime_object(cache_dir: Path, mode: str) -> Path:
    """The compiled runtime for `mode`, built once and cached by toolchain fingerprint."""
    if mode not in MODES:
        raise ValueError(f"unknown cpu build mode {mode!r} (expected one of {MODES})")
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    out = cache_dir / f"ks_cpu_runtime-{mode}-{_runtime_key(mode)}.o"
    if out.exists():
        _touch(out)
        return out
    tmp_dir = cache_dir / f".rt-{os.getpid()}.{uuid.uuid4().hex}"
    tmp_dir.mkdir()
    tmp = tmp_dir / out.name
    cmd = [gxx(), *_COMMON, "-O2", _MODE_DEFINE[mode], f"-I{INCLUDE_DIR}", "-c", str(RUNTIME_SRC), "-o", str(tmp)]
    try:
        rc, err, timed_out = _run(cmd, 600, writable=[tmp_dir])
        if rc != 0:
            raise RuntimeError(f"building the CPU runtime failed ({'timed out' if timed_out else f'exit {rc}'}): "
                               f"{' '.join(cmd)}\n{err[-4000:]}")
        reclaim(tmp)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    _prune_stale(cache_dir, f"ks_cpu_runtime-{mode}-", out)
    return out


def _tu_flags(mode: str) -> list[str]:
    """Flags of the kernel/harness translation unit (shared with its precompiled header)."""
    return [*_COMMON, "-O1", _MODE_DEFINE[mode], *_MODE_COMPILE[mode]]


def _pch_relevant(extra_flags: Sequence[str]) -> list[str]:
    """extra flags that must match between a precompiled header and its user (all but include dirs)."""
    out, skip = [], False
    for f in extra_flags:
        if skip:
            skip = False
            continue
        if f in ("-I", "-isystem", "-iquote", "-idirafter"):
            skip = True
            continue
        if f.startswith(("-I", "-isystem", "-iquote", "-idirafter")):
            continue
        out.append(f)
    return out


def precompiled_header(cache_dir: Path, mode: str, extra_flags: Sequence[str] = ()) -> Optional[Path]:
    """A folder holding ks_cpu.h and its .gch for these flags (built once, published by rename), or
    None when it cannot be built. g++ silently falls back to the plain header if it does not match."""
    relevant = _pch_relevant(extra_flags)
    key = hashlib.sha256("|".join([_runtime_key(mode), *_tu_flags(mode), *relevant]).encode()).hexdigest()[:16]
    final = Path(cache_dir) / f"pch-{mode}-{key}"
    if (final / "ks_cpu.h.gch").exists():
        _touch(final)
        return final
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    tmp = Path(cache_dir) / f".pch-{mode}-{key}.{os.getpid()}.{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        shutil.copyfile(HEADER, tmp / "ks_cpu.h")
        cmd = [gxx(), "-x", "c++-header", *_tu_flags(mode), *relevant, f"-I{INCLUDE_DIR}", str(tmp / "ks_cpu.h"),
               "-o", str(tmp / "ks_cpu.h.gch")]
        rc, _, _ = _run(cmd, 300, writable=[tmp])
        if rc != 0:
            return None
        reclaim(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            pass  # another process published it first
        _prune_stale(Path(cache_dir), f"pch-{mode}-", final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final if (final / "ks_cpu.h.gch").exists() else None


def compile_cpu_binary(source_path: Path, out_path: Path, mode: str = "check", extra_flags: Iterable[str] = (),
                       timeout_s: float = 120, readable: Sequence[Path] = ()) -> CompileResult:
    """Compile a harness (or any CUDA C++ translation unit with a main) for the CPU executor.

    g++ -x c++ -std=c++20 -include ks_cpu.h -I cpu_runtime/include <mode flags> then link with the
    runtime object, boost.context and pthreads (-no-pie, so code addresses map to lines directly).
    Both commands run sandboxed: they see `readable` (besides the runtime) and write out_path's folder."""
    start = time.perf_counter()
    if mode not in MODES:
        raise ValueError(f"unknown cpu build mode {mode!r} (expected one of {MODES})")
    source_path = Path(source_path)
    out_path = Path(out_path)
    extra_flags = list(extra_flags)
    try:
        runtime = build_runtime_object(default_cache_dir(), _RUNTIME_MODE.get(mode, mode))
    except RuntimeError as e:
        return CompileResult(False, "", str(e), time.perf_counter() - start)
    pch = None if os.environ.get("KS_CPU_NO_PCH") else precompiled_header(default_cache_dir(), mode, extra_flags)
    header = pch / "ks_cpu.h" if pch else HEADER
    obj = out_path.with_name(out_path.name + f".{uuid.uuid4().hex[:8]}.o")
    compile_cmd = [gxx(), "-x", "c++", *_tu_flags(mode), "-include", str(header), f"-I{INCLUDE_DIR}", *extra_flags,
                   "-c", str(source_path), "-o", str(obj)]
    link_cmd = [gxx(), "-no-pie", "-g", *_MODE_LINK[mode], str(obj), str(runtime), "-o", str(out_path), *_LIBS]
    command = " ".join(compile_cmd) + " && " + " ".join(link_cmd)
    try:
        # the kernel's folder is the only writable place; the precompiled header and the
        # runtime object are shown read-only (a build must not be able to poison them)
        seen = [source_path.parent, *readable, *([pch] if pch else [])]
        rc, err, timed_out = _run(compile_cmd, timeout_s, writable=[out_path.parent], readable=seen)
        if rc != 0:
            msg = err + (f"\ng++ timed out after {timeout_s:g}s" if timed_out else "")
            return CompileResult(False, command, msg, time.perf_counter() - start)
        left = max(5.0, timeout_s - (time.perf_counter() - start))
        rc2, err2, timed_out2 = _run(link_cmd, left, writable=[out_path.parent], readable=[runtime])
        if rc2 != 0:
            msg = err + err2 + (f"\nlink timed out after {left:g}s" if timed_out2 else "")
            return CompileResult(False, command, msg, time.perf_counter() - start)
        return CompileResult(True, command, err + err2, time.perf_counter() - start)
    finally:
        obj.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# Static detection of what the CPU executor cannot run
# ---------------------------------------------------------------------------------------------
_FEATURES: list[tuple[re.Pattern, str]] = [
    (re.compile(r"\basm\s*(volatile\s*|__volatile__\s*)?\(|\b__asm__\b|\b__asm\b"), "inline assembly (PTX asm)"),
    (re.compile(r"\bwmma::|\bnvcuda::|#\s*include\s*[<\"]mma\.h[>\"]|\b__hmma|\bmma_sync\b"),
     "tensor cores (wmma / mma.h)"),
    # the `__pipeline_*` primitives are emulated (cpu_runtime/include/cuda_pipeline_primitives.h); the
    # rest of the asynchronous-copy API is not
    (re.compile(r"\b__pipeline_arrive_on\b|\bcp\.async\b|\bmemcpy_async\b|"
                r"#\s*include\s*[<\"]cuda/pipeline|\bcuda::pipeline\b|\bmake_pipeline\b"),
     "asynchronous copies (cp.async / memcpy_async / cuda::pipeline)"),
    (re.compile(r"\bthis_grid\s*\(|\bgrid_group\b|\bgrid\.sync\s*\("), "grid-wide synchronization (this_grid().sync())"),
    (re.compile(r"\bcudaLaunchCooperativeKernel\w*"), "cooperative launch (cudaLaunchCooperativeKernel)"),
    (re.compile(r"\bCUtensorMap\b|\bcuTensorMapEncode\w*|\bcp\.async\.bulk|\b__cluster_dims__\b|\bthis_cluster\s*\(|"
                r"\bcluster_group\b|\bcudaLaunchKernelEx\b|\bcuda::barrier\b|#\s*include\s*[<\"]cuda/barrier|"
                r"\bcuda::ptx::|\btcgen05|\bwgmma|\bcuda::device::experimental"),
     "tensor memory accelerator / thread-block clusters / async barriers"),
    (re.compile(r"\btex[123]D\w*\s*[<(]|\btex1Dfetch\b|\bcudaTextureObject_t\b|\bsurf[123]D\w*|\bcudaSurfaceObject_t\b|"
                r"\btexture\s*<"), "textures / surfaces"),
    (re.compile(r"\b__managed__\b|\bcudaMallocManaged\b"), "managed (unified) memory"),
    (re.compile(r"\bcudaMallocHost\b|\bcudaHostAlloc\b|\bcudaHostGetDevicePointer\b|\bcudaHostRegister\b"),
     "page-locked / mapped host memory"),
    (re.compile(r"#\s*include\s*[<\"](cub/|thrust/|cublas|cudnn|cufft|curand|cusparse|cutlass/|cute/|cuda/std/|"
                r"cuda/atomic|cuda/annotated_ptr)|\bcub::|\bthrust::|\bcublas[A-Z]\w*\s*\(|\bcutlass::|\bcute::|"
                r"\bcuda::std::|\bcuda::atomic"), "CUDA libraries (cub, thrust, cuBLAS, CUTLASS, libcu++)"),
    # cooperative groups: thread_block, warp tiles (<= 32) and cg::reduce are in cpu_runtime/include;
    # the rest (grid / cluster groups, coalesced / labeled partitions, multi-warp tiles, async copies) is not
    (re.compile(r"#\s*include\s*[<\"]cooperative_groups/(?!reduce\.h)|\b(this_grid|this_multi_grid|grid_group|"
                r"multi_grid_group|this_cluster|cluster_group|coalesced_threads|coalesced_group|labeled_partition|"
                r"binary_partition|block_tile_memory|thread_block_tile\s*<\s*(64|128|256|512)|"
                r"tiled_partition\s*<\s*(64|128|256|512)|invoke_one|reduce_update_async|reduce_store_async)\b"),
     "cooperative groups beyond thread_block and warp tiles"),
    (re.compile(r"\b__nv_fp8\w*|cuda_fp8\.h|\b__nv_fp4\w*|cuda_fp4\.h|\b__nv_fp6\w*"), "fp8 / fp6 / fp4 types"),
    (re.compile(r"\bcudaGraph\w*"), "CUDA graphs"),
    (re.compile(r"\bcudaLaunchKernel\s*\(|\bcuLaunchKernel\s*\("), "cudaLaunchKernel (launch through the runtime API)"),
]


def _strip_comments_and_strings(src: str) -> str:
    """Blank out comments and string/char literals (newlines kept) so patterns match code only.
    Preprocessor include lines keep their <...> / "..." path so header checks still work."""
    out = []
    i, n = 0, len(src)
    line_start = True
    in_include = False
    while i < n:
        c = src[i]
        if c == "\n":
            out.append(c)
            i += 1
            line_start = True
            in_include = False
            continue
        if line_start and not c.isspace():
            line_start = False
            in_include = bool(re.match(r"#\s*include\b", src[i:i + 40]))
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in src[i:j]))
            i = j
        elif c in "\"'" and not in_include:
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def unsupported_features(source: str) -> list[tuple[int, str]]:
    """(line, feature) for every construct the CPU executor cannot run (1-based lines, sorted)."""
    code = _strip_comments_and_strings(source)
    found: set[tuple[int, str]] = set()
    for lineno, line in enumerate(code.splitlines(), start=1):
        for pattern, feature in _FEATURES:
            if pattern.search(line):
                found.add((lineno, feature))
    return sorted(found)
