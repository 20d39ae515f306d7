"""Two generic simplifications found by meaning (issue 19), on variants they were not written for:
a thread-coarsening factor written as a literal (shrink_work_constant carries every use of it,
the launch included), and a grid-stride loop made single with the launch carried to a covering
grid (grid_stride_to_single). Each with sites it must refuse and CPU gate runs."""
from __future__ import annotations

import pytest

from _operator_support import cpu_gate
from corpora.code.source import Source
from mining.operators import get_operator
from mining.operators.literal_work_factor import literal_factors

SHRINK = get_operator("shrink_work_constant")
SINGLE = get_operator("grid_stride_to_single")


# --------------------------------------------------------------------------- literal coarsening factor
ADD4 = """
#include <cuda_runtime.h>
__global__ void add_quads(const float* a, const float* b, float* y, int n) {
    const int base = (threadIdx.x + blockIdx.x * blockDim.x) * 4;
    float ra[4], rb[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        ra[j] = base + j < n ? a[base + j] : 0.0f;
        rb[j] = base + j < n ? b[base + j] : 0.0f;
    }
    for (int j = 0; j < 4; j++)
        if (base + j < n) y[base + j] = ra[j] + rb[j];
}
void vector_add(const float* a, const float* b, float* y, int N) {
    dim3 blk(128);
    add_quads<<<(N + 128 * 4 - 1) / (128 * 4), blk>>>(a, b, y, N);
}
"""

# pairs walked with a step of 2 (float2 math): the arrays keep two elements, the bound shrinks
PAIRS2 = """
#include <cuda_runtime.h>
__global__ void add_pairs(const float* a, const float* b, float* y, int n) {
    int idx;
    idx = 6 * (blockIdx.x * blockDim.x + threadIdx.x);
    float pa[6], pb[6], pc[6];
    for (int k = 0; k < 6; ++k) { pa[k] = idx + k < n ? a[idx + k] : 0.0f; pb[k] = idx + k < n ? b[idx + k] : 0.0f; }
    for (int k = 0; k < 6; k += 2) {
        float2 u = make_float2(pa[k], pa[k + 1]), v = make_float2(pb[k], pb[k + 1]);
        pc[k] = u.x + v.x; pc[k + 1] = u.y + v.y;
    }
    if ((idx + 5) < n) { for (int k = 0; k < 6; ++k) y[idx + k] = pc[k]; }
    else { for (int k = 0; k < 6; ++k) if (idx + k < n) y[idx + k] = pc[k]; }
}
void vector_add(const float* a, const float* b, float* y, int N) {
    const int threads = 192 / 6;
    add_pairs<<<(N + 191) / 192, threads>>>(a, b, y, N);
}
"""


def test_literal_factor_shrinks_to_one_with_every_use(tmp_path):
    assert cpu_gate("vector_add", ADD4, tmp_path).passed
    sites = SHRINK.find_sites(ADD4)
    assert len(sites) == 1
    new = SHRINK.apply(ADD4, sites[0])
    assert "const int base = (threadIdx.x + blockIdx.x * blockDim.x);" in new
    assert "float ra[1], rb[1];" in new and new.count("j < 1;") == 2
    assert "(N + 128 * 1 - 1) / (128 * 1)" in new
    assert cpu_gate("vector_add", new, tmp_path).passed


def test_literal_factor_keeps_the_step_of_a_wide_loop_and_follows_the_host_variable(tmp_path):
    assert cpu_gate("vector_add", PAIRS2, tmp_path).passed
    [f] = literal_factors(Source(PAIRS2))
    assert (f.var, f.value, f.step, len(f.arrays), len(f.bounds), len(f.tails), len(f.launch)) == \
        ("idx", 6, 2, 3, 4, 1, 1)
    new = SHRINK.apply(PAIRS2, SHRINK.find_sites(PAIRS2)[0])
    assert "idx = (blockIdx.x * blockDim.x + threadIdx.x);" in new
    assert "float pa[2], pb[2], pc[2];" in new and "k < 1; k += 2" in new
    assert "(idx + 0) < n" in new and "const int threads = 192 / 1;" in new
    assert cpu_gate("vector_add", new, tmp_path).passed


def test_literal_factor_as_a_shift(tmp_path):
    """`gidx << 2` is a factor of 4; the launch's `>> 2` follows it as a shift of 0."""
    code = ADD4.replace("(threadIdx.x + blockIdx.x * blockDim.x) * 4", "(threadIdx.x + blockIdx.x * blockDim.x) << 2") \
        .replace("dim3 blk(128);", "dim3 blk(512 >> 2);").replace("(N + 128 * 4 - 1) / (128 * 4)", "(N + 511) / 512")
    assert cpu_gate("vector_add", code, tmp_path).passed
    new = SHRINK.apply(code, SHRINK.find_sites(code)[0])
    assert "const int base = (threadIdx.x + blockIdx.x * blockDim.x);" in new and "dim3 blk(512 >> 0);" in new
    assert "float ra[1], rb[1];" in new
    assert cpu_gate("vector_add", new, tmp_path).passed


@pytest.mark.parametrize("code", [
    # an interleaved layout: the factor sizes nothing per thread
    "__global__ void k(const float* x, float* y, int n) { int i = 2 * (blockIdx.x * blockDim.x + threadIdx.x);\n"
    "  if (i + 1 < n) { y[i] = x[i + 1]; y[i + 1] = x[i]; } }",
    # hard-coded lane offsets: a body unrolled for this width
    "__global__ void k(const float* x, float* y, int n) { int i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);\n"
    "  float r[4]; r[0] = x[i]; r[1] = x[i + 1]; r[2] = x[i + 2]; r[3] = x[i + 3];\n"
    "  for (int j = 0; j < 4; ++j) y[i + j] = r[j]; }",
    # a shared extent is block-level, not per-thread work
    "__global__ void k(const float* x, float* y, int n) { int i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);\n"
    "  __shared__ float t[4]; t[threadIdx.x % 4] = x[i]; __syncthreads(); y[i] = t[0]; }",
    # the multiplier of something other than the global thread index
    "__global__ void k(const float* x, float* y) { int i = 4 * threadIdx.x; float r[4];\n"
    "  for (int j = 0; j < 4; ++j) r[j] = x[i + j]; for (int j = 0; j < 4; ++j) y[i + j] = r[j]; }",
])
def test_literal_factor_refusals(code):
    assert SHRINK.find_sites(code) == [], code


# --------------------------------------------------------------------------- single pass, launch carried
ATOMIC_SUM = """
#include <cuda_runtime.h>
__global__ void zero_output(float* y) { y[0] = 0.0f; }
__global__ void partial_sums(const float* __restrict__ x, float* y, int n) {
    __shared__ float s[256];
    float acc = 0.0f;
    for (int k = threadIdx.x + blockIdx.x * blockDim.x; k < n; k += blockDim.x * gridDim.x) acc += x[k];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(y, s[0]);
}
void reduce_sum(const float* x, float* y, int N) {
    zero_output<<<1, 1>>>(y);
    partial_sums<<<(N + 1023) / 1024, 256>>>(x, y, N);
}
"""

PASSES = """
#include <cuda_runtime.h>
template <unsigned B>
__global__ void pass(const float* in, float* out, unsigned n) {
    __shared__ float s[B];
    unsigned t = threadIdx.x;
    unsigned i = blockIdx.x * B + threadIdx.x;
    const unsigned stride = B * gridDim.x;
    float acc = 0;
    while (i < n) {
        acc += in[i];
        i += stride;
    }
    s[t] = acc;
    __syncthreads();
    for (unsigned w = B / 2; w > 0; w /= 2) {
        if (t < w) s[t] += s[t + w];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
void reduce_sum(const float* x, float* y, int N) {
    const unsigned threads = 256;
    float* tmp[2];
    cudaMalloc(&tmp[0], sizeof(float) * (N / threads + 2));
    cudaMalloc(&tmp[1], sizeof(float) * (N / threads + 2));
    const float* src = x;
    unsigned n = N;
    int k = 0;
    for (;;) {
        unsigned grid = (n + 4 * threads - 1) / (4 * threads);
        float* dst = grid == 1 ? y : tmp[k];
        pass<256><<<grid, threads>>>(src, dst, n);
        if (grid == 1) break;
        src = dst;
        n = grid;
        k ^= 1;
    }
    cudaFree(tmp[0]);
    cudaFree(tmp[1]);
}
"""


@pytest.mark.parametrize("code,grid", [
    (ATOMIC_SUM, "partial_sums<<<(N + 256 - 1) / 256, 256>>>"),
    (PASSES, "unsigned grid = (n + threads - 1) / threads;"),
])
def test_single_pass_carries_the_launch(code, grid, tmp_path):
    assert cpu_gate("reduce_sum", code, tmp_path).passed
    sites = SINGLE.find_sites(code)
    assert len(sites) == 2  # the loop alone, then the loop with its launch
    plain, carried = (SINGLE.apply(code, s) for s in sites)
    assert grid not in plain and grid in carried
    assert not cpu_gate("reduce_sum", plain, tmp_path).passed  # half the grid misses elements
    assert cpu_gate("reduce_sum", carried, tmp_path).passed


@pytest.mark.parametrize("old,new", [
    # the grid is still clamped: its variable is written twice
    ("float* dst = grid == 1", "if (grid > 64) grid = 64;\n        float* dst = grid == 1"),
    # a dim3 grid
    ("unsigned grid = (n + 4 * threads - 1) / (4 * threads);", "dim3 grid((n + 4 * threads - 1) / (4 * threads));"),
    # two elements per thread per pass: the launch's cover is not one element per thread
    ("i = blockIdx.x * B + threadIdx.x;", "i = blockIdx.x * B * 2 + threadIdx.x;"),
    # the bound's argument changes between the grid's definition and the launch
    ("float* dst = grid == 1 ? y : tmp[k];", "float* dst = grid == 1 ? y : tmp[k]; n += 0;"),
])
def test_single_pass_refuses_an_uncarriable_launch(old, new):
    code = PASSES.replace(old, new)
    assert code != PASSES
    assert len(SINGLE.find_sites(code)) == 1, new
