"""Structural forward rewrites on outside kernels' spellings (issue 20): a byte histogram whose bins
come from a mask, a histogram indexed by the data alone, a per-element loop behind an early
return, the guard form of a one-output-per-thread GEMM and a `dim3 threads(..), grid(..)`
declaration. Each found by meaning, gated on the CPU, and refused where it would be wrong."""
from __future__ import annotations

import pytest

from corpora.code.source import Source
from mining.operators.forward import run_rewrite
from mining.operators.nodes import block_dims, kernels, launches
from tests._operator_support import cpu_gate, read_kernel

# ---------------------------------------------------------------------------- privatize_atomics
# the data is the bin (no `b < bins` guard in the kernel): bins below the copy's capacity are
# counted in shared memory, the rest (the 20000-bin workload) in the global table
DATA_INDEXED = """#include <cuda_runtime.h>

__global__ void zero_counts(int* counts, int bins) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < bins) counts[b] = 0;
}

__global__ void hist_by_data(const int* x, int* counts, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    atomicAdd(&(counts[x[i]]), 1);
}

void histogram(const int* x, int* counts, int N, int BINS) {
    zero_counts<<<(BINS + 255) / 256, 256>>>(counts, BINS);
    hist_by_data<<<(N + 255) / 256, 256>>>(x, counts, N);
}
"""

# a mask bounds the table (256 bins); the element's work is a loop behind the early return (small
# values counted in its first pass, large ones in its second); large values keep their global atomic
# (the `v < 256` guard bounds the true branch only)
MASKED = """#include <cuda_runtime.h>

__global__ void zero_counts(int* counts, int bins) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < bins) counts[b] = 0;
}

__global__ void hist_masked(const int* x, int* counts, int n) {
    const int t = threadIdx.x + blockDim.x * blockIdx.x;
    if (t >= n) return;
    const int v = x[t];
    for (int r = 0; r < 2; r++) {
        if (v < 256) {
            if (r == 0) atomicAdd(&counts[v & 0xFF], 1);
        } else if (r == 1) atomicAdd(&counts[v], 1);
    }
}

void histogram(const int* x, int* counts, int N, int BINS) {
    zero_counts<<<(BINS + 255) / 256, 256>>>(counts, BINS);
    hist_masked<<<(N + 255) / 256, 256>>>(x, counts, N);
}
"""


def test_privatize_data_indexed_table(tmp_path):
    mats = run_rewrite("privatize_atomics", DATA_INDEXED)
    assert len(mats) == 1
    new = mats[0].source
    assert "__shared__ int ks_priv[4096];" in new and "ks_clamp_grid(" in new  # grid-stride over a clamped grid
    assert "(unsigned long long)(x[i]) < 4096ull ? atomicAdd(&ks_priv[x[i]], 1) : atomicAdd(&counts[x[i]], 1)" in new
    assert any("others in the global table" in g for g in mats[0].guards)
    assert cpu_gate("histogram", new, tmp_path).passed


def test_privatize_masked_bins_in_a_loop_behind_an_early_return(tmp_path):
    mats = run_rewrite("privatize_atomics", MASKED)
    assert len(mats) == 1
    new = mats[0].source
    assert "ks_b < (256)" in new and "atomicAdd(&ks_priv[v & 0xFF], 1)" in new
    assert "atomicAdd(&counts[v], 1);" in new  # another bound than the mask's: left on the global table
    assert "for (int t = threadIdx.x + blockDim.x * blockIdx.x; t < n;" in new
    assert cpu_gate("histogram", new, tmp_path).passed


@pytest.mark.parametrize("change", [
    # the index has a side effect: the per-update range test would evaluate it twice
    ("atomicAdd(&(counts[x[i]]), 1);", "int j = i; atomicAdd(&(counts[x[j++]]), 1);"),
    # a read-only table is no count table
    ("int* counts, int n) {", "const int* counts, int n) {"),
    # not an address: the atomic's target is a pointer variable, no table
    ("atomicAdd(&(counts[x[i]]), 1);", "int* p = counts + x[i]; atomicAdd(p, 1);"),
])
def test_privatize_refuses(change):
    assert change[0] in DATA_INDEXED
    assert run_rewrite("privatize_atomics", DATA_INDEXED.replace(*change, 1)) == []


def test_grid_stride_keeps_refusing_a_loop_body():
    # the element loop is privatize_atomics' to wrap; grid_stride alone gains nothing on it
    mats = run_rewrite("grid_stride", MASKED)
    assert [m.description.split(":")[0] for m in mats] == ["zero_counts"]


# ---------------------------------------------------------------------------- stage_matmul_tiles
GUARDED = """#include <cuda_runtime.h>

__global__ void gemm_guarded(const float *a, const float *b, float *c, int M, int N, int K) {
  int n = blockIdx.x * blockDim.x + threadIdx.x;
  int m = blockIdx.y * blockDim.y + threadIdx.y;

  if (m < M && n < N) {
    float psum = 0.0;
#pragma unroll
    for (int k = 0; k < K; k++) {
      psum += a[m * K + k] * b[k * N + n];
    }
    c[m * N + n] = psum; // c[m, n]
  }
}

void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 threads(16, 16), grid((N + 15) / 16, (M + 15) / 16);
    gemm_guarded<<<grid, threads>>>(A, B, C, M, N, K);
}
"""


def test_block_dims_of_a_multi_declarator_dim3():
    src = Source(GUARDED)
    k = kernels(src)[0]
    assert [block_dims(src, launch) for launch in launches(src, k.name)] == [(16, 16, 1)]


def test_matmul_tiles_on_the_guard_form(tmp_path):
    mats = run_rewrite("stage_matmul_tiles", GUARDED)
    assert len(mats) == 3  # 16 x 16 tiles; 32 x 32 and 64 x 64 block tiles with register outputs
    assert all("bounds guard read as an early return" in m.description for m in mats)
    square = mats[0].source
    assert "__shared__ float ks_As[16][17];" in square and "const bool ks_live = !(m >= M || n >= N);" in square
    tiled = [m.source for m in mats[1:]]
    assert all("grid((((N + 15) / 16) +" in s for s in tiled)  # the grid of the multi-declarator divided
    for s in mats:
        assert cpu_gate("sgemm", s.source, tmp_path).passed, s.description


@pytest.mark.parametrize("change", [
    # the guard has an else: threads outside the matrix do something
    ("    c[m * N + n] = psum; // c[m, n]\n  }\n", "    c[m * N + n] = psum; // c[m, n]\n  } else { c[0] = 0.0f; }\n"),
    # a statement with an effect runs before the guard: not one output per thread
    ("  if (m < M && n < N) {", "  c[0] = 0.0f;\n  if (m < M && n < N) {"),
    # a run-time block size: no tile size
    ("dim3 threads(16, 16), grid(", "dim3 threads(16, K > 64 ? 16 : 8), grid("),
])
def test_matmul_tiles_refuse(change):
    assert change[0] in GUARDED
    assert run_rewrite("stage_matmul_tiles", GUARDED.replace(*change)) == []


def test_house_sgemm_unchanged():
    # the early-return spelling is read as before (no staging step)
    mats = run_rewrite("stage_matmul_tiles", read_kernel("sgemm", "naive.cu"))
    assert mats and not any("read as an early return" in m.description for m in mats)


# ---------------------------------------------------------------------------- warp_scan on per-element prefixes
SCAN_EXCL = """#include <cuda_runtime.h>

__global__ void prefix_each(const int* x, int* y, int n) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i >= n) return;
    int acc = 0;
    for (int j = 0; j < i; j++) acc += x[j];
    y[i] = acc;
}

void exclusive_scan(const int* x, int* y, int N) {
    prefix_each<<<(N + 127) / 128, 128>>>(x, y, N);
}
"""

# guard form, inclusive bound, the element's own term taken back out
SCAN_INCL = """#include <cuda_runtime.h>

__global__ void prefix_incl(const int* x, int* y, int n) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) {
        int s = 0;
        for (int t = 0; t <= k; ++t) {
            s += x[t];
        }
        y[k] = s - x[k];
    }
}

void exclusive_scan(const int* x, int* y, int N) {
    prefix_incl<<<(N + 255) / 256, 256>>>(x, y, N);
}
"""


def _small_scan_gate(tmp_path, source):
    """The exclusive_scan problem on sizes the CPU emulates in seconds (the O(n^2) input kernels too)."""
    import shutil
    from pathlib import Path

    from mining.gate import GateConfig, run_gate
    from tests._operator_support import KERNELS

    prob = tmp_path / "exclusive_scan"
    shutil.copytree(KERNELS / "exclusive_scan", prob, dirs_exist_ok=True)
    (prob / "workloads.jsonl").write_text('{"axes": {"N": 4096}}\n{"axes": {"N": 1001}, "tags": ["odd"]}\n'
                                          '{"axes": {"N": 7}, "tags": ["tiny"]}\n')
    cfg = GateConfig(executor="cpu", stages=("correctness",), store=tmp_path / "store", seeds=(0,))
    return run_gate(prob, kernel=Path("kernel.cu"), config=cfg, source=source)


@pytest.mark.parametrize("naive", [SCAN_EXCL, SCAN_INCL])
def test_warp_scan_on_per_element_prefixes(tmp_path, naive):
    assert _small_scan_gate(tmp_path, naive).passed  # the input is an exclusive scan
    mats = run_rewrite("warp_scan", naive)
    assert len(mats) == 2 and "per-element prefix sums read as one running sum" in mats[0].description
    new = mats[0].source
    assert "__shfl_up_sync" in new and "<<<1, 32>>>" in new
    assert _small_scan_gate(tmp_path, new).passed
    block = mats[1].source  # one block of 1024 threads, warp totals through shared memory
    assert "one block of 1024 threads" in mats[1].description and "<<<1, 1024>>>" in block
    assert "__shared__ int ks_wsum[32];" in block
    assert _small_scan_gate(tmp_path, block).passed


def test_scan_needs_a_read_only_prefix():
    # the element's statements change its prefix: carried to the next element in a running sum
    src = SCAN_INCL.replace("y[k] = s - x[k];", "s -= x[k];\n        y[k] = s;")
    assert run_rewrite("warp_scan", src) == []


@pytest.mark.parametrize("change", [
    # the term depends on the element: no single running sum
    ("acc += x[j];", "acc += x[j] * (i - j);"),
    # the term reads what the kernel writes
    ("acc += x[j];", "acc += y[j];"),
    # the prefix starts at 1: not the running sum from the first element
    ("for (int j = 0; j < i; j++)", "for (int j = 1; j < i; j++)"),
    # a side effect in the term
    ("acc += x[j];", "acc += x[j]++;"),
])
def test_warp_scan_refuses_prefixes_that_are_not_a_scan(change):
    src = SCAN_EXCL.replace("const int* x", "int* x") if "++" in change[1] else SCAN_EXCL
    assert change[0] in src
    assert run_rewrite("warp_scan", src.replace(*change)) == []


# ---------------------------------------------------------------------------- vectorize_elementwise, 2- and 8-byte types
ADD_HALF = """#include <cuda_runtime.h>
#include <cuda_fp16.h>

__global__ void add_h(half *a, half *b, half *c, int N) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx < N)
    c[idx] = __hadd(a[idx], b[idx]);
}

void vector_add(const half* a, const half* b, half* y, int N) {
    add_h<<<(N + 255) / 256, 256>>>(const_cast<half*>(a), const_cast<half*>(b), y, N);
}
"""

ADD_DOUBLE = """#include <cuda_runtime.h>

__global__ void add_d(const double* a, const double* b, double* y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}

void vector_add(const double* a, const double* b, double* y, int N) {
    add_d<<<(N + 255) / 256, 256>>>(a, b, y, N);
}
"""


def _vector_add_gate(tmp_path, source, dtype, sizes=(4096, 1003, 7)):
    """vector_add in another element type, on sizes the CPU runs in seconds (odd and tiny ones too)."""
    import json
    import shutil
    from pathlib import Path

    from mining.gate import GateConfig, run_gate
    from tests._operator_support import KERNELS

    prob = tmp_path / f"vector_add_{dtype}"
    shutil.copytree(KERNELS / "vector_add", prob, dirs_exist_ok=True)
    d = json.loads((prob / "definition.json").read_text())
    for t in (*d["inputs"].values(), *d["outputs"].values()):
        t["dtype"] = dtype
    (prob / "definition.json").write_text(json.dumps(d))
    (prob / "workloads.jsonl").write_text("".join(json.dumps({"axes": {"N": n}}) + "\n" for n in sizes))
    cfg = GateConfig(executor="cpu", stages=("correctness",), store=tmp_path / "store", seeds=(0,))
    return run_gate(prob, kernel=Path("kernel.cu"), config=cfg, source=source)


@pytest.mark.parametrize("naive, dtype, lanes", [(ADD_HALF, "float16", 8), (ADD_DOUBLE, "float64", 2)])
def test_vectorize_elementwise_other_widths(tmp_path, naive, dtype, lanes):
    assert _vector_add_gate(tmp_path, naive, dtype).passed
    mats = run_rewrite("vectorize_elementwise", naive)
    assert len(mats) == 1 and f"16-byte ({lanes} x " in mats[0].description
    new = mats[0].source
    assert f"ks_k < {lanes}" in new and "reinterpret_cast<const uint4*>(a)[ks_v]" in new
    assert _vector_add_gate(tmp_path, new, dtype).passed


def test_vectorize_elementwise_refuses_mixed_widths():
    # half in, float out: no one 16-byte access per iteration covers both
    mixed = ADD_HALF.replace("half *c, int N", "float *c, int N").replace("__hadd(a[idx], b[idx])",
                                                                         "__half2float(a[idx]) + __half2float(b[idx])")
    assert run_rewrite("vectorize_elementwise", mixed) == []
    # the 4-byte form is unchanged: float4 accesses
    f4 = run_rewrite("vectorize_elementwise", read_kernel("vector_add", "naive.cu"))
    assert f4 and "float4" in f4[0].source and "alignas" not in f4[0].source


# no bound in the kernel: the launch gives every thread an element (sizes are multiples of the block)
UNGUARDED = """#include <cuda_runtime.h>

template <typename T>
__global__ void add_all(const T* a, const T* b, T* y) {
    const int t = threadIdx.x + blockDim.x * blockIdx.x;
    const T s = a[t] + b[t];
    y[t] = s;
}

void vector_add(const float* a, const float* b, float* y, int N) {
    add_all<float><<<N / 128, 128>>>(a, b, y);
}
"""


def test_vectorize_an_unguarded_element_per_thread(tmp_path):
    sizes = (4096, 128 * 37, 128)
    assert _vector_add_gate(tmp_path, UNGUARDED, "float32", sizes).passed
    concrete = UNGUARDED.replace("template <typename T>\n", "").replace("const T", "const float").replace(
        "T* y", "float* y").replace("add_all<float>", "add_all")
    for naive in (UNGUARDED, concrete):
        mats = run_rewrite("vectorize_elementwise", naive)
        assert len(mats) == (0 if naive is UNGUARDED else 2)  # a template element type is not known to be 4 bytes
    new, counted = (m.source for m in run_rewrite("vectorize_elementwise", concrete))
    assert "t < (long long)gridDim.x * blockDim.x" in new and "add_all<<<N / 128, 128>>>" in new  # the grid kept
    assert _vector_add_gate(tmp_path, new, "float32", sizes).passed
    # or each launch's thread count passed in, over a clamped grid
    assert "add_all<<<ks_clamp_grid(N / 128, 8), 128>>>(a, b, y, (long long)(N / 128) * (128));" in counted
    assert _vector_add_gate(tmp_path / "counted", counted, "float32", sizes).passed


@pytest.mark.parametrize("change", [
    # control flow: not a plain element per thread
    ("    y[t] = s;", "    if (s > 0) y[t] = s;"),
    # the grid's size read in the body: a grid-stride loop would change what it reads
    ("    y[t] = s;", "    y[t] = s + gridDim.x;"),
])
def test_vectorize_unguarded_refuses(change):
    concrete = UNGUARDED.replace("template <typename T>\n", "").replace("const T", "const float").replace(
        "T* y", "float* y").replace("add_all<float>", "add_all")
    assert change[0] in concrete
    assert run_rewrite("vectorize_elementwise", concrete.replace(*change)) == []


# the bound computed between the index and the early return; the second operand gathered (not `p[i]`)
TOTAL_FIRST = """#include <cuda_runtime.h>

__global__ void add_total(const float* a, const float* b, float* y, int n) {
    long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long total = (long long)n;
    if (o >= total) return;
    long long q = o / 2;
    y[o] = a[o] + b[q * 2 + (o % 2)];
}

void vector_add(const float* a, const float* b, float* y, int N) {
    add_total<<<(N + 255) / 256, 256>>>(a, b, y, N);
}
"""


def test_grid_stride_and_vectorize_hoist_the_bound(tmp_path):
    gs = run_rewrite("grid_stride", TOTAL_FIRST)
    assert len(gs) == 1
    assert "const long long total = (long long)n;\n    for (long long o = " in gs[0].source
    vec = run_rewrite("vectorize_elementwise", TOTAL_FIRST)
    assert len(vec) == 1 and "accesses of a, y in" in vec[0].description  # b is a gather: scalar
    for m in gs + vec:
        assert cpu_gate("vector_add", m.source, tmp_path).passed


@pytest.mark.parametrize("change", [
    # a per-thread value written after the guard: hoisting it would carry it across elements
    ("    y[o] = a[o] + b[q * 2 + (o % 2)];", "    s += a[o];\n    y[o] = s + b[q * 2 + (o % 2)];"),
    # a declaration with a call: not known to be free of side effects
    ("const long long total = (long long)n;", "const long long total = (long long)min(n, 1 << 30);"),
])
def test_grid_stride_refuses_to_hoist(change):
    src = TOTAL_FIRST.replace("const long long total = (long long)n;\n",
                              "const long long total = (long long)n;\n    float s = 0.0f;\n")
    assert change[0] in src
    assert run_rewrite("grid_stride", src.replace(*change)) == []
