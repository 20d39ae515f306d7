"""Private copies of a count table in shared memory merged into global memory, and block tree sums
read by one thread (issue 19): privatized_to_global_atomics on per-warp copies behind an alias,
per-block rows stored to global memory, masks and helpers; block_tree_to_thread_sum on the merge
of such rows and on a one-block sum. Variants the operators were not written for, sites they must
refuse, CPU gate runs of the rewritten variants, and the forward half (tree_sum_per_block)."""
from __future__ import annotations

import pytest

from _operator_support import cpu_gate, edited, to_fixpoint
from mining.operators import get_operator
from mining.operators.forward import run_rewrite

PRIV = get_operator("privatized_to_global_atomics")
TREE = get_operator("block_tree_to_thread_sum")

# --------------------------------------------------------------------------- per-warp copies
# one copy per warp in dynamic shared memory, reached through `&copies[warp * bins]`; the merge sums
# the copies of a bin and adds the total with one atomic
PER_WARP = """
#include <cuda_runtime.h>
#define WARPS 4
__global__ void zero(int* c, int bins) {
    for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < bins; b += gridDim.x * blockDim.x) c[b] = 0;
}
__global__ void hist_global(const int* x, int* counts, int n, int bins) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        if (x[i] >= 0 && x[i] < bins) atomicAdd(counts + x[i], 1);
}
__global__ void hist_warps(const int* __restrict__ x, int* counts, int n, int bins) {
    extern __shared__ int copies[];
    int* mine = &copies[(threadIdx.x / 32) * bins];
    for (int k = threadIdx.x; k < WARPS * bins; k += blockDim.x) copies[k] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int v = x[i];
        if (v >= 0 && v < bins) atomicAdd(&mine[v], 1);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {
        int total = 0;
        for (int w = 0; w < WARPS; ++w) total += copies[w * bins + b]%s;
        if (total) atomicAdd(&counts[b], total);
    }
}
void histogram(const int* x, int* counts, int N, int BINS) {
    zero<<<(BINS + 255) / 256, 256>>>(counts, BINS);
    int blocks = (N + 127) / 128;
    if (blocks > 64) blocks = 64;
    if (BINS <= 2048)
        hist_warps<<<blocks, WARPS * 32, WARPS * BINS * sizeof(int)>>>(x, counts, N, BINS);
    else
        hist_global<<<blocks, 256>>>(x, counts, N, BINS);
}
"""


def test_per_warp_copies_behind_an_alias(tmp_path):
    src = PER_WARP % ""
    sites = PRIV.find_sites(src)
    assert len(sites) == 1 and sites[0].carrier == "privatized_atomics"
    new = PRIV.apply(src, sites[0])
    assert "int* mine = counts;" in new and "copies" not in new, edited(src, new, sites[0])
    assert "atomicAdd(&mine[v], 1);" in new and "total" not in new
    # the launch no longer asks for the shared copies' bytes
    assert "hist_warps<<<blocks, WARPS * 32>>>(x, counts, N, BINS);" in new
    assert PRIV.find_sites(new) == []
    assert cpu_gate("histogram", new, tmp_path).passed


def test_a_mask_that_keeps_every_bit_is_no_mask():
    assert len(PRIV.find_sites(PER_WARP % " & 0xFFFFFFFFu")) == 1
    # a mask that drops bits (a tag kept in the high bits) is not a plain sum of the copies
    assert PRIV.find_sites(PER_WARP % " & 0x07FFFFFFU") == []


def test_refuses_a_copy_read_for_anything_but_the_merge():
    capped = (PER_WARP % "").replace("atomicAdd(&mine[v], 1);", "if (mine[v] < 1000) atomicAdd(&mine[v], 1);")
    assert PRIV.find_sites(capped) == []


# --------------------------------------------------------------------------- 2-D per-warp copies
# one copy per warp as the rows of a static 2-D array, cleared by nested loops, updated through the
# row directly or through a helper
ROWS_2D = """
#include <cuda_runtime.h>
#define WARPS 8
#define MAXB 1024
__device__ void bump(int* row, int v) { atomicAdd(row + v, 1); }
__global__ void hist_global(const int* x, int* counts, int n, int bins) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        if (x[i] >= 0 && x[i] < bins) atomicAdd(counts + x[i], 1);
}
__global__ void hist_2d(const int* x, int* counts, int n, int bins) {
    __shared__ int sub[WARPS][MAXB];
    const int warp = threadIdx.x >> 5;
    for (int w = 0; w < WARPS; ++w)
        for (int b = threadIdx.x; b < bins; b += blockDim.x) sub[w][b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int v = x[i];
        if (v >= 0 && v < bins) UPDATE;
    }
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {
        int c = 0;
        for (int w = 0; w < WARPS; w++) c += sub[w][b];
        atomicAdd(counts + b, c);
    }
}
__global__ void zero(int* c, int bins) {
    for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < bins; b += gridDim.x * blockDim.x) c[b] = 0;
}
void histogram(const int* x, int* counts, int N, int BINS) {
    zero<<<(BINS + 255) / 256, 256>>>(counts, BINS);
    if (BINS <= MAXB)
        hist_2d<<<32, WARPS * 32>>>(x, counts, N, BINS);
    else
        hist_global<<<64, 256>>>(x, counts, N, BINS);
}
"""


@pytest.mark.parametrize("update,expected", [
    ("atomicAdd(&sub[warp][v], 1)", "atomicAdd(&counts[v], 1)"),
    ("bump(sub[warp], v)", "bump(counts, v)"),
])
def test_per_warp_rows_of_a_2d_array(update, expected, tmp_path):
    src = ROWS_2D.replace("UPDATE", update)
    sites = PRIV.find_sites(src)
    assert len(sites) == 1
    new = PRIV.apply(src, sites[0])
    assert expected in new and "sub" not in new, edited(src, new, sites[0])
    if update.startswith("bump"):
        assert cpu_gate("histogram", new, tmp_path).passed


def test_2d_rows_refuse_a_row_read_outside_the_merge():
    src = ROWS_2D.replace("UPDATE", "atomicAdd(&sub[warp][v], 1)").replace(
        "        atomicAdd(counts + b, c);\n", "        atomicAdd(counts + b, c + sub[0][0] * 0);\n")
    assert PRIV.find_sites(src) == []


# --------------------------------------------------------------------------- per-block rows
# one copy per block in static shared memory, updated through a device function, stored to the
# block's row of a global table; a second kernel merges the rows with a shared-memory tree per bin
ROWS = """
#include <cuda_runtime.h>
#define MAXB 1024
#define MT 128
__device__ __forceinline__ void bump(int* table, int v) { atomicAdd(table + v, 1); }
__device__ void take(int* table, int v, int bins) { if ((unsigned)v < (unsigned)bins) bump(table, v); }
__global__ void block_rows(const int* x, int* rows, int n, int bins) {
    __shared__ int local[MAXB];
    for (int b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) take(local, x[i], bins);
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x) rows[ROW + b] = local[b];
}
__global__ void merge_rows(const int* rows, int* counts, int nrows, int bins) {
    const unsigned t = threadIdx.x;
    int acc = 0;
    for (int r = t; r < nrows; r = r + MT) acc += rows[r * bins + blockIdx.x];
    __shared__ int part[MT];
    part[t] = acc;
    for (int h = MT / 2; h > 0; h >>= 1) {
        __syncthreads();
        if (t < h) part[t] += part[t + h];
    }
    if (t == 0) counts[blockIdx.x] = part[0];
}
__global__ void hist_global(const int* x, int* counts, int n, int bins) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        if ((unsigned)x[i] < (unsigned)bins) atomicAdd(counts + x[i], 1);
}
__global__ void zero(int* c, int bins) {
    for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < bins; b += gridDim.x * blockDim.x) c[b] = 0;
}
void histogram(const int* x, int* counts, int N, int BINS) {
    if (BINS <= MAXB) {
        const int blocks = 48;
        int* rows = nullptr;
        cudaMalloc(&rows, blocks * BINS * sizeof(int));
        block_rows<<<blocks, 256>>>(x, rows, N, BINS);
        merge_rows<<<BINS, MERGE_THREADS>>>(rows, counts, blocks, BINS);
        cudaFree(rows);
    } else {
        zero<<<(BINS + 255) / 256, 256>>>(counts, BINS);
        hist_global<<<256, 256>>>(x, counts, N, BINS);
    }
}
"""


def rows_variant(row: str = "blockIdx.x * bins", merge_threads: str = "MT") -> str:
    return ROWS.replace("ROW", row).replace("MERGE_THREADS", merge_threads)


def test_per_block_rows_stored_to_global_memory(tmp_path):
    src = rows_variant()
    sites = PRIV.find_sites(src)
    assert len(sites) == 1
    new = PRIV.apply(src, sites[0])
    # the row is cleared where the private copy was, the updates go to it, the store goes
    assert "for (int b = threadIdx.x; b < bins; b += blockDim.x) rows[blockIdx.x * bins + b] = 0;" in new
    assert "take((rows + (blockIdx.x * bins)), x[i], bins);" in new
    assert "local" not in new and "= local[b]" not in new
    # then the merge kernel's tree: thread 0 sums the bin over every row itself
    sites = TREE.find_sites(new)
    assert len(sites) == 1 and sites[0].carrier == "block_reduce_shared"
    end = TREE.apply(new, sites[0])
    assert "for (int r = 0; r < nrows; r += 1) acc += rows[r * bins + blockIdx.x];" in end
    assert "if (t == 0) counts[blockIdx.x] = acc;" in end and "part" not in end and "__shared__" not in end
    assert cpu_gate("histogram", end, tmp_path).passed


def test_refuses_rows_that_every_block_overwrites():
    # no block index in the row: the blocks store over each other, the store is not a sum
    assert PRIV.find_sites(rows_variant(row="0")) == []


def test_refuses_a_store_merge_with_no_barrier_after_the_clear():
    src = rows_variant().replace("local[b] = 0;\n    __syncthreads();", "local[b] = 0;")
    assert PRIV.find_sites(src) == []


def test_tree_refuses_a_launch_whose_block_is_not_the_stride():
    assert len(TREE.find_sites(rows_variant())) == 1
    # a block of 64 threads striding by 128 skips rows: the tree's sum is not the whole range's
    assert TREE.find_sites(rows_variant(merge_threads="64")) == []


def test_tree_refuses_a_total_every_thread_reads():
    src = rows_variant().replace("if (t == 0) counts[blockIdx.x] = part[0];",
                          "const int total = part[0];\n    if (t == 0) counts[blockIdx.x] = total;")
    assert TREE.find_sites(src) == []


def test_tree_refuses_a_maximum():
    src = rows_variant().replace("if (t < h) part[t] += part[t + h];", "if (t < h) part[t] = max(part[t], part[t + h]);")
    assert TREE.find_sites(src) == []


# --------------------------------------------------------------------------- a one-block sum
ONE_BLOCK = """
#include <cuda_runtime.h>
#define THREADS 256
__global__ void one_block_sum(const float* x, float* y, int n) {
    const unsigned tid = threadIdx.x;
    double s = 0.0;
    for (int k = tid; k < n; k += blockDim.x) s += x[k];
    __shared__ double buf[THREADS];
    buf[tid] = s;
    __syncthreads();
    for (unsigned h = THREADS >> 1; h > 0; h = h >> 1) {
        if (tid < h) buf[tid] = buf[tid] + buf[tid + h];
        __syncthreads();
    }
    if (tid == 0) y[0] = (float)buf[0];
}
void reduce_sum(const float* x, float* y, int N) { one_block_sum<<<1, THREADS>>>(x, y, N); }
"""


def test_one_block_sum_with_the_barrier_last(tmp_path):
    new, n = to_fixpoint(TREE, ONE_BLOCK)
    assert n == 1
    assert "for (int k = 0; k < n; k += 1) s += x[k];" in new
    assert "if (tid == 0) y[0] = (float)s;" in new and "buf" not in new
    assert cpu_gate("reduce_sum", new, tmp_path).passed


@pytest.mark.parametrize("launch", ["one_block_sum<<<1, 128>>>", "one_block_sum<<<1, n_threads>>>"])
def test_tree_refuses_a_block_that_is_not_the_tree(launch):
    # the tree starts at THREADS / 2: a block of 128 would read slots nobody wrote; a run-time
    # block size cannot be checked at all
    src = ONE_BLOCK.replace("one_block_sum<<<1, THREADS>>>", launch).replace(
        "int N) {", "int N) { int n_threads = N > 4096 ? 256 : 128;")
    assert TREE.find_sites(src) == []


# --------------------------------------------------------------------------- forward: tree_sum_per_block
def test_forward_splits_a_serial_sum_over_the_block(tmp_path):
    back, n = to_fixpoint(TREE, ONE_BLOCK)
    assert n == 1
    mats = run_rewrite("tree_sum_per_block", back)
    assert len(mats) == 1 and mats[0].carrier == "block_reduce_shared"
    new = mats[0].source
    assert "for (int k = threadIdx.x; k < n; k += blockDim.x) s += x[k];" in new
    assert "__shared__ double ks_tree[256];" in new and "if (tid == 0) y[0] = (float)ks_tree[0];" in new
    assert len(TREE.find_sites(new)) == 1  # the backward half reads it again
    assert cpu_gate("reduce_sum", new, tmp_path).passed


def test_forward_on_the_merge_kernel_of_per_block_rows(tmp_path):
    back, _ = to_fixpoint(PRIV, rows_variant())
    back, _ = to_fixpoint(TREE, back)
    mats = run_rewrite("tree_sum_per_block", back)
    assert [m.description.split(":")[0] for m in mats] == ["merge_rows"]
    assert "__shared__ int ks_tree[128];" in mats[0].source
    assert cpu_gate("histogram", mats[0].source, tmp_path).passed


@pytest.mark.parametrize("change", [
    # a run-time block size: the shared array and the tree cannot be sized
    ("one_block_sum<<<1, THREADS>>>", "one_block_sum<<<1, N > 4096 ? 256 : 128>>>"),
    # a thread leaves early: the others would wait at the tree's barriers for it
    ("double s = 0.0;", "if (tid >= (unsigned)n) return;\n    double s = 0.0;"),
    # every thread reads the sum: slot 0 is thread 0's alone
    ("if (tid == 0) y[0] = (float)s;", "y[0] = (float)s;"),
])
def test_forward_refuses(change):
    back, _ = to_fixpoint(TREE, ONE_BLOCK)
    assert change[0] in back
    assert run_rewrite("tree_sum_per_block", back.replace(*change)) == []
