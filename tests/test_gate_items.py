"""Issue 22 (gate and probe soundness), the parts below the suite in eval/soundness/: the CPU
runtime's same-warp global ordering and race messages, the guard regions of the shared harness,
the comparison of half-precision outputs, environment failures, and value-adversarial inputs."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mining.gate import cpu_rewrite, cpu_toolchain
from mining.gate.data import bf16_round, compare

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None or not Path(
    "/usr/include/boost/context/detail/fcontext.hpp").exists(), reason="needs g++ and libboost-context-dev")

RACE_KERNELS = r"""
#include <cuda_runtime.h>
#include <cstdio>
#include <cstring>

// two lanes of one warp += the same global word, no atomic
__global__ void same_warp_lost_update(const float* x, float* out) {
    if (threadIdx.x < 2) out[0] += x[threadIdx.x];
}

// the same two lanes, ordered by __syncwarp: correct
__global__ void same_warp_ordered(const float* x, float* out) {
    if (threadIdx.x == 0) out[0] += x[0];
    __syncwarp();
    if (threadIdx.x == 1) out[0] += x[1];
}

// every thread reads out[0], then thread 127 overwrites it: the readers are other threads
__global__ void many_readers_then_write(float* out, float* y) {
    float v = out[0];
    y[threadIdx.x] = v;
    if (threadIdx.x == 127) out[0] = v + 1.f;
}

// the same shape in shared memory
__global__ void shared_readers_then_write(float* y) {
    __shared__ float s;
    if (threadIdx.x == 0) s = 1.f;
    __syncthreads();
    float v = s;
    y[threadIdx.x] = v;
    if (threadIdx.x == 127) s = v + 1.f;
}

int main(int argc, char** argv) {
    const char* which = argv[1];
    float *x, *out, *y;
    cudaMalloc(&x, 64 * sizeof(float));
    cudaMalloc(&out, 4 * sizeof(float));
    cudaMalloc(&y, 128 * sizeof(float));
    cudaMemset(x, 0, 64 * sizeof(float));
    cudaMemset(out, 0, 4 * sizeof(float));
    if (!strcmp(which, "lost")) same_warp_lost_update<<<1, 32>>>(x, out);
    if (!strcmp(which, "ordered")) same_warp_ordered<<<1, 32>>>(x, out);
    if (!strcmp(which, "readers")) many_readers_then_write<<<1, 128>>>(out, y);
    if (!strcmp(which, "shared_readers")) shared_readers_then_write<<<1, 128>>>(y);
    cudaDeviceSynchronize();
    std::printf("OK %s\n", which);
    return 0;
}
"""


@pytest.fixture(scope="module")
def race_exe(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("items_race")
    (tmp / "kernel.cu").write_text(cpu_rewrite.rewrite(RACE_KERNELS))
    exe = tmp / "races"
    res = cpu_toolchain.compile_cpu_binary(tmp / "kernel.cu", exe, mode="check", timeout_s=600)
    assert res.ok, res.stderr[-3000:]
    return exe


def _run(exe: Path, which: str, order: str = "forward") -> subprocess.CompletedProcess:
    env = {**os.environ, "KS_ORDER": order, "KS_RACECHECK": "1"}
    return subprocess.run([str(exe), which], capture_output=True, text=True, timeout=60, env=env)


def _line(needle: str) -> int:
    return next(i for i, ln in enumerate(RACE_KERNELS.splitlines(), start=1) if needle in ln)


@needs_gxx
@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_same_warp_lost_update_on_global_word_is_a_race(race_exe, order):
    p = _run(race_exe, "lost", order)
    assert p.returncode == 86, p.stdout + p.stderr
    assert "KS_ERROR race" in p.stderr and "global memory race" in p.stderr
    assert "same warp" in p.stderr
    assert f"kernel.cu:{_line('out[0] += x[threadIdx.x]')}" in p.stderr


@needs_gxx
def test_same_warp_accesses_ordered_by_syncwarp_pass(race_exe):
    p = _run(race_exe, "ordered")
    assert p.returncode == 0 and "OK ordered" in p.stdout, p.stderr


@needs_gxx
@pytest.mark.parametrize("which,read,write", [
    ("readers", "float v = out[0];", "if (threadIdx.x == 127) out[0]"),
    ("shared_readers", "float v = s;", "if (threadIdx.x == 127) s ="),
])
def test_race_report_names_two_different_threads(race_exe, which, read, write):
    p = _run(race_exe, which)
    line = next(ln for ln in p.stderr.splitlines() if ln.startswith("KS_ERROR race"))
    # "thread (127,0,0) writes ...; thread (126,0,0) read it at kernel.cu:N": never the writer twice
    assert "thread (127,0,0) writes" in line, line
    assert "thread (127,0,0) read it" not in line, line
    assert f"read it at kernel.cu:{_line(read)}" in line, line
    assert f"kernel.cu:{_line(write)}" in line, line
