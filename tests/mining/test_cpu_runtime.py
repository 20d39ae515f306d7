"""The CPU executor's runtime: real CUDA C++ compiled with g++ against ks_cpu.h and run on fibers.

Builds are shared per module (one binary of correct kernels, one of buggy kernels, selected by
argv) to keep g++ time low on small machines. Every bug kernel must be reported with the right
KS_ERROR kind; every correct kernel must produce the right values in forward and reverse order.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mining.gate import cpu_rewrite, cpu_toolchain

CUDA = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"  # test kernels too long to read inline

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or not Path(
    "/usr/include/boost/context/detail/fcontext.hpp").exists(), reason="needs g++ and libboost-context-dev")

# ---------------------------------------------------------------------------------------------
# Correct kernels
# ---------------------------------------------------------------------------------------------
CORRECT_KERNELS = (CUDA / "cpu_runtime_correct_kernels.cu").read_text()

CORRECT_MAIN = (CUDA / "cpu_runtime_correct_main.cu").read_text()

# ---------------------------------------------------------------------------------------------
# Buggy kernels: each must be reported with the right KS_ERROR kind
# ---------------------------------------------------------------------------------------------
BUG_KERNELS = (CUDA / "cpu_runtime_bug_kernels.cu").read_text()

BUG_MAIN = (CUDA / "cpu_runtime_bug_main.cu").read_text()


def _line_of(src: str, needle: str) -> int:
    for i, line in enumerate(src.splitlines(), start=1):
        if needle in line:
            return i
    raise AssertionError(needle)


def _build(tmp: Path, kernel: str, main: str, mode: str = "check") -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "kernel.orig.cu").write_text(kernel)
    (tmp / "kernel.cu").write_text(cpu_rewrite.rewrite(kernel))
    (tmp / "main.cu").write_text(cpu_rewrite.rewrite(main))  # the test mains launch kernels too
    exe = tmp / f"main_{mode}"
    res = cpu_toolchain.compile_cpu_binary(tmp / "main.cu", exe, mode=mode, timeout_s=600)
    assert res.ok, res.stderr[-3000:]
    return exe


def _run(exe: Path, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env)
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=full)


def _ks_error(p: subprocess.CompletedProcess) -> tuple[str, str]:
    for line in p.stderr.splitlines():
        if line.startswith("KS_ERROR "):
            parts = line.split(" ", 2)
            return parts[1], parts[2] if len(parts) > 2 else ""
    return "", ""


@pytest.fixture(scope="module")
def correct_exe(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("cpu_ok"), CORRECT_KERNELS, CORRECT_MAIN)


@pytest.fixture(scope="module")
def bug_exe(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("cpu_bugs"), BUG_KERNELS, BUG_MAIN)


# ---------------------------------------------------------------------------------------------
# Correct kernels pass in both orders, with and without the checker
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("which", ["vadd", "reduce", "matmul", "hist", "dynsmem", "half", "warp", "nsdyn", "subword",
                                   "warpmisc"])
def test_correct_kernels(correct_exe, which, order):
    p = _run(correct_exe, which, KS_ORDER=order, KS_RACECHECK="1" if order == "forward" else "0")
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"OK {which}" in p.stdout
    assert "KS_ERROR" not in p.stderr


def test_correct_kernels_single_worker_with_checks_in_reverse(correct_exe):
    for which in ("reduce", "hist", "matmul"):
        p = _run(correct_exe, which, KS_ORDER="reverse", KS_RACECHECK="1", KS_THREADS="1")
        assert p.returncode == 0 and f"OK {which}" in p.stdout, p.stdout + p.stderr


def test_grid_stride_reduce_with_few_blocks(correct_exe):
    p = _run(correct_exe, "reduce", str(1 << 20), "64")
    assert p.returncode == 0, p.stdout + p.stderr


# ---------------------------------------------------------------------------------------------
# Every bug is caught with the right kind and location
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("which,kind,needle", [
    ("missing_sync", "race", "float right = tile["),
    ("early_return", "barrier_divergence", "__syncthreads();\n    y[i] = s[threadIdx.x] * 2.f;"),
    ("shfl_exited", "barrier_divergence", "v += __shfl_down_sync(0xffffffffu, v, 8);"),
    ("shfl_wrong_mask", "deadlock", None),
    ("read_past_end", "oob", "if (i <= n) y[i < n ? i : 0] = x[i];"),
    ("shared_past_end", "oob", "s[threadIdx.x] = (float)threadIdx.x;"),
    ("hist_race", "race", "s_hist[d[i]]++;"),
    ("global_accum", "race", "out[0] += t;"),
    ("misaligned", "oob", "const float4* p = reinterpret_cast<const float4*>(x + 1);"),
    ("host_pointer", "oob", "y[threadIdx.x] = x[threadIdx.x];\n}\n\n__global__ void big_local_array"),
    ("after_free", "oob", "__global__ void after_free"),
    ("warp_race", "race", "int v = s[threadIdx.x ^ 1];"),
    ("divergent_barriers", "barrier_divergence", None),
    ("atomic_then_read", "race", "y[threadIdx.x] = count;   // missing __syncthreads"),
    ("dyn_too_small", "oob", "buf[threadIdx.x] = 1.f;"),
    ("stack", "stack_overflow", "__global__ void big_local_array(float* y) {"),
    ("launch_2048", "launch_config", 'use_host_pointer<<<1, 2048>>>'),
])
@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_bugs_are_caught(bug_exe, which, kind, needle, order):
    p = _run(bug_exe, which, KS_ORDER=order, timeout=60)
    got_kind, msg = _ks_error(p)
    assert p.returncode == 86, (p.returncode, p.stdout, p.stderr)
    assert got_kind == kind, p.stderr
    if needle is not None:
        src = BUG_MAIN if "<<<" in needle else BUG_KERNELS
        first = needle.split("\n")[0]
        if "\n" in needle:
            start = src.index(needle)
            line = src[:start].count("\n") + 1
        else:
            line = _line_of(src, first)
        fname = "main.cu" if src is BUG_MAIN else "kernel.cu"
        assert f"{fname}:{line}" in msg, (line, msg)


def test_race_message_names_both_threads_and_the_variable(bug_exe):
    p = _run(bug_exe, "missing_sync")
    kind, msg = _ks_error(p)
    assert kind == "race"
    assert "tile" in msg and "thread (" in msg and "block (" in msg and "__syncthreads" in msg
    write_line = _line_of(BUG_KERNELS, "tile[threadIdx.x] = i < n ? x[i] : 0.f;")
    assert f"kernel.cu:{write_line}" in msg  # the other access is located too


def test_oob_message_says_how_far(bug_exe):
    kind, msg = _ks_error(_run(bug_exe, "read_past_end"))
    assert kind == "oob" and "bytes [4000, 4004) of device buffer" in msg and "has 4000 bytes" in msg, msg
    kind, msg = _ks_error(_run(bug_exe, "shared_past_end"))
    assert kind == "oob" and "bytes [256, 260) of __shared__ s" in msg, msg
    kind, msg = _ks_error(_run(bug_exe, "dyn_too_small"))
    assert kind == "oob" and "bytes [128, 132) of the dynamic shared memory" in msg and "has 128 bytes" in msg, msg
    kind, msg = _ks_error(_run(bug_exe, "after_free"))
    assert kind == "oob" and "use after free" in msg, msg


def test_uninitialized_local_gives_wrong_value(bug_exe):
    p = _run(bug_exe, "uninit")
    assert p.returncode == 1 and "WRONG uninit" in p.stdout, p.stdout + p.stderr


def test_infinite_loop_is_stopped_by_timeout(bug_exe):
    with pytest.raises(subprocess.TimeoutExpired):
        _run(bug_exe, "spin", timeout=3)


def test_racecheck_off_skips_race_checks(bug_exe):
    p = _run(bug_exe, "missing_sync", KS_RACECHECK="0")
    assert p.returncode == 0 and "finished missing_sync" in p.stdout, p.stderr
    # barrier checks do not depend on the race checker
    p = _run(bug_exe, "early_return", KS_RACECHECK="0")
    assert _ks_error(p)[0] == "barrier_divergence"


# ---------------------------------------------------------------------------------------------
# Rewrite, diagnostics, unsupported features, toolchain
# ---------------------------------------------------------------------------------------------
def test_rewrite_keeps_every_line():
    src = CORRECT_KERNELS + BUG_KERNELS
    out = cpu_rewrite.rewrite(src)
    assert out.count("\n") == src.count("\n")
    a, b = src.splitlines(), out.splitlines()
    for i, (x, y) in enumerate(zip(a, b)):
        if "<<<" not in x and "__shared__" not in x and "float4*" not in x:
            assert x == y, (i + 1, x, y)
    assert "<<<" not in out
    assert "::ks::launch(\"block_reduce<256>\"" in out
    assert 'auto& As = ::ks::shared_var<float [TILE][TILE + 1], __COUNTER__>' in out
    assert 'auto& Bs = ::ks::shared_var<float [TILE][TILE + 1], __COUNTER__>' in out
    assert "auto buf = ::ks::dynamic_shared<float>();" in out
    assert "static __thread ::std::add_pointer_t<int> ns_dyn;" in out
    assert "float4 va = ::ks::vcast<const float4*>(__FILE__, __LINE__, a)[i];" in out


def test_rewrite_multiline_launch_and_alignment():
    src = ("__global__ void k(float* a, int n) {\n"
           "    __shared__ __align__(16) volatile float s[2][64];\n"
           "    extern __shared__ __align__(16) unsigned char smem[];\n"
           "}\n"
           "void f(float* a, int n, cudaStream_t st) {\n"
           "    k<<<dim3(n / 256,\n"
           "           1), 256, 0, st>>>(a,\n"
           "                            n);\n"
           "}\n")
    out = cpu_rewrite.rewrite(src)
    lines = out.splitlines()
    assert len(lines) == len(src.splitlines())
    assert lines[1].strip() == 'auto& s = ::ks::shared_var<volatile float [2][64], __COUNTER__>(__FILE__, __LINE__, "s");'
    assert lines[2].strip() == "auto smem = ::ks::dynamic_shared<unsigned char>();"
    assert lines[5].startswith('    ::ks::launch("k", __FILE__, __LINE__, dim3(n / 256,')
    assert lines[6].strip() == "1), 256, 0, st, [&](auto... ks_a) { k(ks_a...); }, a,"
    assert lines[7].strip() == "n);"


def test_compile_error_reported_at_original_line(tmp_path):
    kernel = ("#include <cuda_runtime.h>\n"
              "__global__ void k(float* y) {\n"
              "    __shared__ float s[32];\n"
              "    s[threadIdx.x] = 1.f;\n"
              "    __syncthreads();\n"
              "    y[threadIdx.x] = s[threadIdx.x] + undefined_name;\n"
              "}\n"
              "void run(float* y) { k<<<1, 32>>>(y); }\n")
    (tmp_path / "kernel.cu").write_text(cpu_rewrite.rewrite(kernel))
    (tmp_path / "main.cu").write_text('#include "kernel.cu"\nint main() { return 0; }\n')
    res = cpu_toolchain.compile_cpu_binary(tmp_path / "main.cu", tmp_path / "main", timeout_s=300)
    assert not res.ok
    assert "kernel.cu:6:" in res.stderr and "undefined_name" in res.stderr, res.stderr
    assert "-fsanitize=thread" in res.command and "-include" in res.command
    if not os.environ.get("KS_CPU_NO_PCH"):
        assert "/pch-check-" in res.command  # the precompiled ks_cpu.h is used


def test_unsupported_features():
    src = ("#include <mma.h>\n"
           "// asm(\"comment mention is fine\")\n"
           "__global__ void k(float* a) {\n"
           "    asm volatile(\"membar.gl;\");\n"
           "    nvcuda::wmma::fragment<int> f;\n"
           "    cuda::memcpy_async(a, a, 16, pipe);\n"
           "    cooperative_groups::this_grid().sync();\n"
           "    __nanosleep(100);\n"
           "    const char* s = \"wmma:: in a string\";\n"
           "}\n"
           "void run() { cudaLaunchCooperativeKernel((void*)k, 1, 1, nullptr); }\n")
    found = cpu_toolchain.unsupported_features(src)
    lines = {line for line, _ in found}
    feats = " ".join(f for _, f in found)
    assert 1 in lines and 4 in lines and 5 in lines and 6 in lines and 7 in lines and 11 in lines
    assert 2 not in lines and 8 not in lines and 9 not in lines
    assert "inline assembly" in feats and "tensor cores" in feats and "grid-wide" in feats
    assert cpu_toolchain.unsupported_features(CORRECT_KERNELS) == []


def test_runtime_object_is_cached_per_mode(tmp_path):
    a = cpu_toolchain.build_runtime_object(cpu_toolchain.default_cache_dir(), "check")
    b = cpu_toolchain.build_runtime_object(cpu_toolchain.default_cache_dir(), "check")
    assert a == b and a.exists()
    fp = cpu_toolchain.toolchain_fingerprint()
    assert "g++" in fp.lower() and "ks-cpu-runtime" in fp
    with pytest.raises(ValueError):
        cpu_toolchain.build_runtime_object(tmp_path, "bogus")


ASAN_KERNEL = r"""
#include <cuda_runtime.h>
__global__ void scale(const float* x, float* y, int n, int extra) {
    __shared__ float s[64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n + extra ? x[i] : 0.f;
    __syncthreads();
    if (i < n) y[i] = 2.f * s[threadIdx.x];
}
"""
ASAN_MAIN = (CUDA / "cpu_runtime_asan_main.cu").read_text()


def test_asan_mode(tmp_path):
    exe = _build(tmp_path, ASAN_KERNEL, ASAN_MAIN, mode="asan")
    env = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=90"}
    ok = _run(exe, "0", **env)
    assert ok.returncode == 0 and "OK" in ok.stdout, ok.stdout + ok.stderr
    bad = _run(exe, "8", **env)
    assert bad.returncode == 90 and "heap-buffer-overflow" in bad.stderr, bad.stderr[-2000:]
    line = _line_of(ASAN_KERNEL, "s[threadIdx.x] = i < n + extra")
    assert f"kernel.cu:{line}" in bad.stderr
