"""warp_aggregate_atomics (warp_atomic_to_thread_atomics.py): per-thread atomicAdd into one address ->
a warp sum and one atomic per warp; its refusals, the round trip through the backward half, and the
CPU gate on the house reduce_sum problem."""
from __future__ import annotations

from pathlib import Path

import pytest

from mining.operators.base import Context
from mining.operators.registry import PAIRS
from mining.operators.warp_atomic_to_thread_atomics import WarpAtomicToThreadAtomics, warp_aggregate_atomics
from tests._operator_support import cpu_gate

REAL = Path(__file__).resolve().parents[2] / "corpora" / "real" / "leetcuda" / "block_all_reduce_f32"
BLOCK_ALL_REDUCE = (REAL / "naive.cu").read_text() + "\n" + (REAL / "shims" / "naive.cu").read_text()

# the house reduce_sum problem's entry, its naive written as one atomic per element
HOUSE_SUM = """#include <cuda_runtime.h>

__global__ void sum_atomic(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (n == 0) return;  // uniform: the whole warp leaves
    if (i < n) atomicAdd(y, x[i]);
}

void reduce_sum(const float* x, float* y, int N) {
    cudaMemset(y, 0, sizeof(float));
    sum_atomic<<<(N + 255) / 256, 256>>>(x, y, N);
}
"""

COUNTER = """#define THREADS 128
__global__ void count_positive(const float* x, int* count, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] > 0.0f) {
        atomicAdd(&count[0], 1);
    }
}
void run(const float* x, int* count, int n) {
    count_positive<<<(n + THREADS - 1) / THREADS, THREADS>>>(x, count, n);
}
"""

# column sums: the target moves with a loop whose trip count is the same in every lane
COLUMNS = """__global__ void col_sums(const double* x, double* colsum, int n, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int c = 0; c < C; ++c)
        if (i < n) atomicAdd(colsum + c, x[(long long)i * C + c]);
}
void run(const double* x, double* colsum, int n, int C) {
    dim3 block(64);
    col_sums<<<(n + 63) / 64, block>>>(x, colsum, n, C);
}
"""

DOT_GRID_STRIDE = """__global__ void dot(const float* a, const float* b, float* out, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(out, a[i] * b[i]);
}
void run(const float* a, const float* b, float* out, int n) {
    dot<<<120, 256>>>(a, b, out, n);
}
"""


def forward(source: str):
    return warp_aggregate_atomics(source, Context())  # direct: a bug raises here instead of being contained


def test_block_all_reduce_naive_and_round_trip():
    mats = forward(BLOCK_ALL_REDUCE)
    assert len(mats) == 1
    new = mats[0].source
    assert "float ks_v = (i < N) ? (float)(a[i]) : (float)0;" in new
    assert "for (int ks_o = 16; ks_o > 0; ks_o >>= 1) ks_v += __shfl_xor_sync(0xffffffffu, ks_v, ks_o);" in new
    assert "if ((threadIdx.x & 31) == 0) atomicAdd(y, ks_v);" in new
    assert "if (i < N) atomicAdd(y, a[i]);" not in new
    assert forward(new) == []  # its own lane-0 atomic is one lane per warp: nothing left to aggregate
    # the backward half takes the warp sum out again: the per-thread form, byte for byte
    op = WarpAtomicToThreadAtomics()
    sites = op.find_sites(new)
    assert len(sites) == 1
    assert op.apply(new, sites[0]) == BLOCK_ALL_REDUCE


def test_counter_in_a_braced_guard_and_round_trip():
    mats = forward(COUNTER)
    assert len(mats) == 1
    new = mats[0].source
    assert "int ks_v = (i < n && x[i] > 0.0f) ? (int)(1) : (int)0;" in new
    assert "atomicAdd(&count[0], ks_v);" in new and "__shfl_xor_sync(0xffffffffu, ks_v, ks_o)" in new
    op = WarpAtomicToThreadAtomics()
    back = op.apply(new, op.find_sites(new)[0])
    assert "if (i < n && x[i] > 0.0f) atomicAdd(&count[0], 1);" in back and "ks_v" not in back


def test_target_indexed_by_a_uniform_loop():
    mats = forward(COLUMNS)
    assert len(mats) == 1
    new = mats[0].source
    assert "double ks_v = (i < n) ? (double)(x[(long long)i * C + c]) : (double)0;" in new
    assert "atomicAdd(colsum + c, ks_v);" in new


def test_grid_stride_dot_product_is_refused():
    # the lanes' trip counts differ (start from threadIdx): a lane may leave the loop before the others
    assert forward(DOT_GRID_STRIDE) == []


def test_a_name_in_use_is_not_shadowed():
    src = BLOCK_ALL_REDUCE.replace("atomicAdd(y, a[i]);", "atomicAdd(y, a[i] * ks_v);").replace(
        "float* y, int N) {", "float* y, int N, float ks_v) {")
    new = forward(src)[0].source
    assert "float ks_v1 = (i < N) ? (float)(a[i] * ks_v) : (float)0;" in new


@pytest.mark.parametrize("old,new", [
    ("<<<(N + 255) / 256, 256>>>", "<<<(N + 99) / 100, 100>>>"),  # partial warps
    ("<<<(N + 255) / 256, 256>>>", "<<<(N + 255) / 256, dim3(16, 16)>>>"),  # 2-D block: lane is not tid & 31
    ("<<<(N + 255) / 256, 256>>>", "<<<(N + 255) / 256, N>>>"),  # block size unknown
    ("atomicAdd(y, a[i]);", "atomicAdd(&y[threadIdx.x % 4], a[i]);"),  # the target depends on the lane
    ("atomicAdd(y, a[i]);", "atomicAdd(&y[(int)a[0]], a[i]);"),  # the target read from memory
    ("atomicAdd(y, a[i]);", "atomicMax((int*)y, (int)a[i]);"),  # not an add
    ("if (i < N) atomicAdd(y, a[i]);", "float old = atomicAdd(y, a[i]);"),  # the old value is used
    ("if (i < N) atomicAdd(y, a[i]);", "if (i < N) atomicAdd(y, a[i]); else atomicAdd(y, 1.0f);"),
    ("if (i < N) atomicAdd(y, a[i]);", "if (i >= N) return;\n    atomicAdd(y, a[i]);"),  # lanes leave first
    ("if (i < N) atomicAdd(y, a[i]);", "if (i < N) { if (a[i] > 0.0f) atomicAdd(y, a[i]); }"),  # outer guard
    ("if (i < N) atomicAdd(y, a[i]);", "while (i < N) { atomicAdd(y, a[i]); i += 1 << 20; }"),
    ("if (i < N) atomicAdd(y, a[i]);", "for (int k = 0; k < N; ++k) { if (a[k] < 0.0f) break; atomicAdd(y, a[i]); }"),
    ("if (i < N) atomicAdd(y, a[i]);", "for (int k = 0; k < a[0]; ++k) atomicAdd(y, a[i]);"),  # trip from memory
    ("if (i < N) atomicAdd(y, a[i]);", "if (threadIdx.x == 0) atomicAdd(y, a[i]);"),  # one lane: nothing to sum
    ("if (i < N) atomicAdd(y, a[i]);", "int lane = threadIdx.x & 31;\n    if (lane == 0) atomicAdd(y, a[i]);"),
    ("if (i < N) atomicAdd(y, a[i]);", "label: if (i < N) atomicAdd(y, a[i]);\n    if (N < 0) goto label;"),
    ("float* y, int N) {", "long long* y, int N) {"),  # not a shuffled type here
    ("float* y, int N) {", "float* y, int N) {\n    y += threadIdx.x;"),  # the pointer moved per lane
])
def test_refusals(old, new):
    assert old in BLOCK_ALL_REDUCE
    assert forward(BLOCK_ALL_REDUCE.replace(old, new)) == []


def test_pair_lists_the_forward_first():
    pair = next(p for p in PAIRS if p.name == "warp_atomic_to_thread_atomics")
    assert [r.name for r in pair.rewrites] == ["warp_aggregate_atomics"]
    assert pair.inverses[0] == "warp_aggregate_atomics"
    assert pair.rewrites[0].carrier == "atomic_per_block"


def test_house_reduce_sum_gated(tmp_path):
    mats = forward(HOUSE_SUM)
    assert len(mats) == 1
    new = mats[0].source
    assert "atomicAdd(y, ks_v);" in new
    assert cpu_gate("reduce_sum", HOUSE_SUM, tmp_path / "naive").passed  # the source itself is right
    assert cpu_gate("reduce_sum", new, tmp_path / "aggregated").passed
