"""grid_stride's sum forms (grid_stride_sum.py): an element handed to a sum becomes a register sum
over a grid-stride loop with the launch clamped; the sites it must refuse; the CPU gate on the
house reduce_sum problem; and the chain it opens (warp aggregation, then 16-byte loads)."""
from __future__ import annotations

import pytest

from mining.operators.base import Context
from mining.operators.grid_stride import grid_stride
from mining.operators.grid_stride_sum import is_zero, sum_sites
from mining.operators.vector_load import vectorize_elementwise
from mining.operators.warp_atomic_to_thread_atomics import warp_aggregate_atomics
from tests._operator_support import cpu_gate

# a block tree in shared memory after a guarded load, one atomic per block; the index through a copy
# of threadIdx.x, the block size a macro, the zero a cast
TREE = """#include <cuda_runtime.h>
#define TPB 256

__global__ void block_sum(const float* x, float* y, int n) {
    __shared__ float s[TPB];
    unsigned t = threadIdx.x;
    unsigned g = TPB * blockIdx.x + t;
    float v = (g < n) ? x[g] : (float)0;
    s[t] = v;
    __syncthreads();
    for (unsigned k = TPB / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) atomicAdd(y, s[0]);
}

void reduce_sum(const float* x, float* y, int N) {
    cudaMemset(y, 0, sizeof(float));
    block_sum<<<(N + TPB - 1) / TPB, TPB>>>(x, y, N);
}
"""

# a warp-sum helper, then one atomic per warp
WARP = """#include <cuda_runtime.h>
__device__ float wsum(float a) {
    for (int o = 16; o; o /= 2) a += __shfl_down_sync(0xffffffff, a, o);
    return a;
}
template <int B>
__global__ void warp_sum(const float* x, float* y, int n) {
    const int i = threadIdx.x + blockIdx.x * B;
    float v = i < n ? x[i] : 0.0f;
    v = wsum(v);
    if ((threadIdx.x & 31) == 0) atomicAdd(y, v);
}
void reduce_sum(const float* x, float* y, int N) {
    cudaMemset(y, 0, sizeof(float));
    warp_sum<128><<<(N + 127) / 128, 128>>>(x, y, N);
}
"""

# one atomic per element
ATOMIC = """#include <cuda_runtime.h>
__global__ void sum_atomic(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { atomicAdd(y, x[i]); }
}
void reduce_sum(const float* x, float* y, int N) {
    cudaMemset(y, 0, sizeof(float));
    sum_atomic<<<(N + 255) / 256, 256>>>(x, y, N);
}
"""


def _one(source: str) -> str:
    mats = sum_sites(source)
    assert len(mats) == 1, [m.description for m in mats]
    return mats[0].source


def test_shared_tree_summed_over_a_grid_stride_loop():
    new = _one(TREE)
    assert "float v = (float)0;\n    for (unsigned ks_j = g; ks_j < n; ks_j += gridDim.x * TPB) v += x[ks_j];" in new
    assert "block_sum<<<ks_clamp_grid((N + TPB - 1) / TPB, 8), TPB>>>" in new
    assert new.count("atomicAdd(y, s[0]);") == 1


def test_warp_helper_and_templated_launch():
    new = _one(WARP)
    assert "for (int ks_j = i; ks_j < n; ks_j += gridDim.x * B) v += x[ks_j];" in new
    assert "warp_sum<128><<<ks_clamp_grid((N + 127) / 128, 8), 128>>>" in new


def test_atomic_per_element_becomes_one_per_thread():
    new = _one(ATOMIC)
    assert "float ks_acc = (float)0;" in new
    assert "ks_acc += x[ks_j];" in new and "atomicAdd(y, ks_acc);" in new


@pytest.mark.parametrize("source,old,new", [
    (TREE, "s[t] += s[t + k];", "s[t] = fmaxf(s[t], s[t + k]);"),  # a max, not a sum
    (TREE, "s[t] += s[t + k];", "s[t] += s[t + k] + 1.0f;"),  # a constant per thread would be counted per thread
    (TREE, "if (t == 0) atomicAdd(y, s[0]);", "if (t == 0) y[blockIdx.x] = s[0];"),  # one partial per block
    (TREE, "if (t == 0) atomicAdd(y, s[0]);", "if (t == 0) y[0] = s[0];"),  # a plain store of a partial
    (TREE, "s[t] = v;", "s[t] = v > 0.5f ? v : 0.0f;"),  # the value steers a select
    (TREE, "s[t] = v;", "s[t] = v * v;"),  # squared after the element: not a sum of elements
    (TREE, "if (t == 0) atomicAdd(y, s[0]);", "if (t == 0) atomicMax((int*)y, (int)s[0]);"),
    (TREE, "float v = (g < n) ? x[g] : (float)0;", "float v = (g < n) ? x[g] : 1.0f;"),  # not a zero
    (TREE, "float v = (g < n) ? x[g] : (float)0;", "float v = (g < n) ? x[g] : 0.0f;\n    y[g] = 0.0f;"),
    (TREE, "unsigned g = TPB * blockIdx.x + t;", "unsigned g = TPB * blockIdx.x + t + blockIdx.y;"),
    (WARP, "a += __shfl_down_sync(0xffffffff, a, o);", "a = fmaxf(a, __shfl_down_sync(0xffffffff, a, o));"),
    (WARP, "if ((threadIdx.x & 31) == 0) atomicAdd(y, v);", "if (v > 0.0f) atomicAdd(y, v);"),  # v in a condition
    (ATOMIC, "atomicAdd(y, x[i]);", "atomicAdd(y + i % 4, x[i]);"),  # the target moves with the element
    (ATOMIC, "atomicAdd(y, x[i]);", "atomicAdd(y, x[i] * threadIdx.x);"),  # the element weighs its thread
    (TREE, "float v = (g < n) ? x[g] : (float)0;", "float v = (g < n) ? x[g] * t : (float)0;"),  # a local of the thread
    (ATOMIC, "atomicAdd(y, x[i]);", "atomicAdd(y, x[i]); y[1] = 0.0f;"),
])
def test_refusals(source, old, new):
    assert old in source
    assert sum_sites(source.replace(old, new)) == []


def test_is_zero():
    assert all(is_zero(s) for s in ("0", "0.0f", "(float)0", "float(0)", "__float2half(0.f)", "half()", "0u"))
    assert not any(is_zero(s) for s in ("1", "x", "1e0", "0.5f"))


def test_house_reduce_sum_gated_and_the_chain(tmp_path):
    ctx = Context()
    for name, source in (("tree", TREE), ("warp", WARP), ("atomic", ATOMIC)):
        new = _one(source)
        assert new in [m.source for m in grid_stride(source, ctx)]  # what the registry's rewrite yields
        assert cpu_gate("reduce_sum", new, tmp_path / name).passed, name
    # the atomic form's next steps: one atomic per warp, then 16-byte loads of the grid-stride loop
    staged = _one(ATOMIC)
    warp = warp_aggregate_atomics(staged, ctx)
    assert warp, "warp aggregation should follow the register sum"
    vec = vectorize_elementwise(warp[0].source, ctx)
    assert vec and "float4" in vec[0].source
    assert cpu_gate("reduce_sum", vec[0].source, tmp_path / "chain").passed


def test_sum_loop_with_its_own_block_constant_is_vectorized(tmp_path):
    # the index is threadIdx.x + blockIdx.x * B (B a template parameter): the 16-byte loop keeps that
    # start and the stride gridDim.x * B
    ctx = Context()
    vec = vectorize_elementwise(_one(WARP), ctx)
    assert len(vec) == 1
    new = vec[0].source
    assert "ks_v = (long long)blockIdx.x * B + threadIdx.x; ks_v < ks_nv; ks_v += (long long)gridDim.x * B)" in new
    assert cpu_gate("reduce_sum", new, tmp_path / "vec").passed
    # a stride that is not gridDim.x times the index's B is no grid-stride loop of that index
    odd = _one(WARP).replace("ks_j += gridDim.x * B", "ks_j += gridDim.x * 64")
    assert vectorize_elementwise(odd, ctx) == []


def test_warp_sum_first_then_the_loop_then_16_byte_loads(tmp_path):
    # warp_aggregate_atomics names its value ks_v; the 16-byte loop then takes another index name
    ctx = Context()
    warp = warp_aggregate_atomics(ATOMIC, ctx)[0].source
    summed = _one(warp)
    assert "ks_v += (float)(x[ks_j]);" in summed
    vec = vectorize_elementwise(summed, ctx)
    assert len(vec) == 1 and "for (long long ks_vi = " in vec[0].source
    assert cpu_gate("reduce_sum", vec[0].source, tmp_path / "vec").passed
