"""Forward halves of structural operators that had none (issue 19, Deliver 3): chunks_to_block_stride
(block_stride_to_chunks' inverse) on chunk loops written in spellings it was not written for, the
sites it must refuse, CPU gate runs of its candidates and round trips through the backward half."""
from __future__ import annotations

import pytest

from _operator_support import cpu_gate, to_fixpoint
from mining.carriers import detect_carriers
from mining.operators import get_operator
from mining.operators.forward import run_rewrite
from mining.operators.registry import inverses

CHUNKS = get_operator("block_stride_to_chunks")

# --------------------------------------------------------------------------- chunks_to_block_stride
# one block per softmax row; each thread sweeps a contiguous chunk, named three ways: a begin / end
# pair through `min`, the same again, and the bounds written into the loop header
CHUNK_SOFTMAX = """
#include <cuda_runtime.h>
#include <math.h>
#define T 128
__global__ void softmax_rows(const float* x, float* y, int M, int N) {
    __shared__ float red[T];
    const int tid = threadIdx.x;
    const float* xr = x + (size_t)blockIdx.x * N;
    float* yr = y + (size_t)blockIdx.x * N;
    int per = (N + blockDim.x - 1) / blockDim.x;
    int begin = tid * per;
    int end = min(begin + per, N);
    float m = -INFINITY;
    for (int j = begin; j < end; j++) m = fmaxf(m, xr[j]);
    red[tid] = m;
    __syncthreads();
    for (int s = T / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.f;
    for (int j = begin; j < end; ++j) {
        const float e = expf(xr[j] - m);
        sum += e;
    }
    red[tid] = sum;
    __syncthreads();
    for (int s = T / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    const float inv = 1.f / red[0];
    for (int j = tid * per; j < (tid + 1) * per && j < N; j += 1) yr[j] = expf(xr[j] - m) * inv;
}
void softmax(const float* x, float* y, int M, int N) { softmax_rows<<<M, T>>>(x, y, M, N); }
"""


def test_chunks_become_block_stride_sweeps(tmp_path):
    assert inverses("block_stride_to_chunks") == ["chunks_to_block_stride"]
    mats = run_rewrite("chunks_to_block_stride", CHUNK_SOFTMAX)
    assert len(mats) == 4 and mats[0].carrier == "grid_stride" and "3 loops" in mats[0].description
    new = mats[0].source
    assert "for (int j = tid; j < N; j += blockDim.x) m = fmaxf(m, xr[j]);" in new
    assert "for (int j = tid; j < N; j += blockDim.x) {\n        const float e" in new
    assert "for (int j = tid; j < N; j += blockDim.x) yr[j] = expf(xr[j] - m) * inv;" in new
    assert "j < end" not in new and "tid * per;" in new  # only the headers change
    assert cpu_gate("softmax", CHUNK_SOFTMAX, tmp_path / "a").passed  # the chunked kernel itself is right
    assert cpu_gate("softmax", new, tmp_path / "b").passed
    # each loop alone is a candidate too, and correct on its own
    assert cpu_gate("softmax", mats[3].source, tmp_path / "c").passed


def test_chunks_of_a_fixed_size_stop_where_the_chunks_did():
    # C = 4 elements per thread: the threads cover [0, 4 * blockDim.x) only, so the sweep keeps that bound
    src = CHUNK_SOFTMAX.replace("int per = (N + blockDim.x - 1) / blockDim.x;", "int per = 4;")
    new = run_rewrite("chunks_to_block_stride", src)[0].source
    assert "for (int j = tid; j < N && j < blockDim.x * per; j += blockDim.x) m = fmaxf(m, xr[j]);" in new


def test_round_trip_through_the_operators_own_form(tmp_path):
    # the backward half's chunk loop (ks_chunk declared in the header) is read back as a block-stride loop
    strided = run_rewrite("chunks_to_block_stride", CHUNK_SOFTMAX)[0].source
    back, n = to_fixpoint(CHUNKS, strided)
    assert n == 3 and "ks_chunk = (N + blockDim.x - 1) / blockDim.x, j = tid * ks_chunk" in back
    assert cpu_gate("softmax", back, tmp_path / "back").passed
    again = run_rewrite("chunks_to_block_stride", back)[0].source
    assert again == strided
    assert cpu_gate("softmax", again, tmp_path / "fwd").passed


@pytest.mark.parametrize("change", [
    # the work depends on the thread, not only on j
    ("yr[j] = expf(xr[j] - m) * inv;", "yr[j] = expf(xr[j] - m) * inv + (float)(tid & 0);"),
    # a carried dependence: element j reads the element the previous iteration wrote
    ("yr[j] = expf(xr[j] - m) * inv;", "yr[j] = expf(xr[j] - m) * inv + (j > 0 ? yr[j - 1] : 0.f);"),
    # state carried from one iteration to the next in a thread-local (not an accumulation)
    ("yr[j] = expf(xr[j] - m) * inv;", "{ yr[j] = prev; prev = xr[j]; }"),
    # a chunk that does not start at the thread's own offset
    ("j = tid * per; j < (tid + 1) * per", "j = (tid + 1) * per; j < (tid + 2) * per"),
    # not a unit step through the chunk
    ("j < N; j += 1)", "j < N; j += 2)"),
    # leaves the chunk early
    ("yr[j] = expf(xr[j] - m) * inv;", "{ if (xr[j] > 1e30f) break; yr[j] = expf(xr[j] - m) * inv; }"),
])
def test_refuses(change):
    src = CHUNK_SOFTMAX.replace("const float inv", "float prev = 0.f;\n    const float inv")
    assert change[0] in src
    mats = run_rewrite("chunks_to_block_stride", src.replace(*change))
    # the first two loops are still sites; the changed one is not
    assert len(mats) == 3 and all("yr[j]" not in m.site_excerpt for m in mats[1:])


# --------------------------------------------------------------------------- merge_register_passes
TILE = get_operator("shrink_register_tile")

# a hand-written 2-pass GEMM: each thread computes 4 x 4 outputs as two passes of 2 rows (pass
# variable `half`, rows `2 * half` .. `(half + 1) * 2`, `r++`, a zero-initialised tile, the row
# index written `r - 2 * half`), the shared staging repeated in each pass
HALVES = r"""
#include <cuda_runtime.h>
#define TS 64
#define KS 16
__global__ void gemm_halves(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[KS][TS];
    __shared__ float Bs[KS][TS];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * TS, col0 = blockIdx.x * TS;
    for (int half = 0; half < 2; half++) {
        float acc[2][4] = {};
        for (int k0 = 0; k0 < K; k0 += KS) {
            for (int l = ty * 16 + tx; l < KS * TS; l += 256) {
                const int kk = l / TS, mm = l % TS;
                As[kk][mm] = (row0 + mm < M && k0 + kk < K) ? A[(row0 + mm) * K + k0 + kk] : 0.0f;
                Bs[kk][mm] = (k0 + kk < K && col0 + mm < N) ? B[(k0 + kk) * N + col0 + mm] : 0.0f;
            }
            __syncthreads();
            for (int k = 0; k < KS; ++k)
                for (int r = 2 * half; r < (half + 1) * 2; r++)
                    for (int c = 0; c < 4; ++c)
                        acc[r - 2 * half][c] += As[k][ty + 16 * r] * Bs[k][tx + 16 * c];
            __syncthreads();
        }
        for (int r = 2 * half; r < (half + 1) * 2; r++)
            for (int c = 0; c < 4; ++c) {
                const int gr = row0 + ty + 16 * r, gc = col0 + tx + 16 * c;
                if (gr < M && gc < N) C[gr * N + gc] = acc[r - 2 * half][c];
            }
    }
}
void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 grid((N + TS - 1) / TS, (M + TS - 1) / TS);
    gemm_halves<<<grid, dim3(16, 16)>>>(A, B, C, M, N, K);
}
"""


def test_hand_written_passes_merge_into_one_tile(tmp_path):
    assert inverses("shrink_register_tile") == ["merge_register_passes"]
    mats = run_rewrite("merge_register_passes", HALVES)
    assert len(mats) == 1 and mats[0].carrier == "register_tile"  # two passes: only the full merge
    new = mats[0].source
    assert "half" not in new and "float acc[4][4] = {};" in new
    assert "for (int r = 0; r < 4; r++)\n                for (int c = 0; c < 4; ++c)\n" \
           "                    acc[r][c] += As[k][ty + 16 * r] * Bs[k][tx + 16 * c];" in new
    assert "C[gr * N + gc] = acc[r][c];" in new
    assert cpu_gate("sgemm", HALVES, tmp_path / "a").passed
    assert cpu_gate("sgemm", new, tmp_path / "b").passed
    # one register tile of all the thread's rows
    assert [s.excerpt for s in detect_carriers(new)["register_tile"]] == ["float acc[4][4] = {};"]


def test_round_trip_through_the_operators_passes(tmp_path):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from test_operators_register_tile_passes import STRIDED
    once = TILE.apply(STRIDED, TILE.find_sites(STRIDED)[0])  # 2 passes of 2 rows
    twice = TILE.apply(once, TILE.find_sites(once)[0])  # 4 passes, the row dimension dropped
    assert "float acc[4];" in twice
    mats = run_rewrite("merge_register_passes", twice)
    assert [m.description for m in mats] == ["acc: 4 passes of 1 rows become one register tile of 4 rows",
                                             "acc: 4 passes of 1 rows become 2 passes of 2 rows"]
    assert mats[0].source == STRIDED  # the register tile as it was written
    assert mats[1].source == once  # one backward step undone
    assert [m.source for m in run_rewrite("merge_register_passes", once)] == [STRIDED]
    assert cpu_gate("sgemm", mats[1].source, tmp_path).passed


@pytest.mark.parametrize("change", [
    # the pass number is read outside the row loops: passes differ by more than their rows
    ("float acc[2][4] = {};", "float acc[2][4] = {};\n        if (half == 1) __syncthreads();"),
    # state carried from one pass to the next
    ("float acc[2][4] = {};", "float acc[2][4] = {};\n        k_seen += K;"),
    # a tile row that is not the pass's own row
    ("C[gr * N + gc] = acc[r - 2 * half][c];", "C[gr * N + gc] = acc[0][c];"),
    # a non-zero initialiser (only the first row would get it after the merge)
    ("float acc[2][4] = {};", "float acc[2][4] = {1.0f};"),
    # rows of the pass that do not tile the pass's range
    ("for (int r = 2 * half; r < (half + 1) * 2; r++)\n            for (int c = 0; c < 4; ++c) {",
     "for (int r = 2 * half; r < (half + 1) * 3; r++)\n            for (int c = 0; c < 4; ++c) {"),
    # a pass count that is not a compile-time constant
    ("half < 2;", "half < K / 64;"),
])
def test_merge_refuses(change):
    src = HALVES.replace("const int tx", "int k_seen = 0;\n    const int tx")
    assert change[0] in src and run_rewrite("merge_register_passes", src)
    assert run_rewrite("merge_register_passes", src.replace(*change)) == []


# --------------------------------------------------------------------------- warp_reduce_per_block
SERIAL = get_operator("block_reduce_to_serial")

# a hand-written block-per-row softmax whose two block reductions are serial folds over one slot per
# thread (a max with the partner first, a sum written `s = s + ...`), the block size a macro
SERIAL_SOFTMAX = """
#include <cuda_runtime.h>
#include <float.h>
#define THREADS 256
__global__ void softmax_rows(const float* x, float* y, int M, int N) {
    __shared__ float smax[THREADS];
    __shared__ float ssum[THREADS];
    const unsigned tid = threadIdx.x;
    const float* xr = x + (size_t)blockIdx.x * N;
    float* yr = y + (size_t)blockIdx.x * N;
    float m = -FLT_MAX;
    for (int j = tid; j < N; j += THREADS) m = fmaxf(m, xr[j]);
    smax[tid] = m;
    __syncthreads();
    m = smax[0];
    for (int w = 1; w < THREADS; w++) m = fmaxf(smax[w], m);
    float s = 0.f;
    for (int j = tid; j < N; j += THREADS) s += expf(xr[j] - m);
    ssum[tid] = s;
    __syncthreads();
    s = ssum[0];
    for (int w = 1; w < THREADS; w++) {
        s = s + ssum[w];
    }
    for (int j = tid; j < N; j += THREADS) yr[j] = expf(xr[j] - m) / s;
}
void softmax(const float* x, float* y, int M, int N) { softmax_rows<<<M, THREADS>>>(x, y, M, N); }
"""


def test_serial_folds_become_warp_butterflies(tmp_path):
    assert inverses("block_reduce_to_serial") == ["warp_reduce_per_block"]
    mats = run_rewrite("warp_reduce_per_block", SERIAL_SOFTMAX)
    assert len(mats) == 3 and mats[0].carrier == "block_reduce_shared" and mats[0].guards == []
    new = mats[0].source
    assert "        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, ks_off));\n" in new
    assert "        s = s + __shfl_xor_sync(0xffffffffu, s, ks_off);\n" in new
    assert "if (ks_lane_smax == 0) { smax[ks_warp_smax] = m; }" in new
    assert "m = ks_lane_smax < (blockDim.x >> 5) ? smax[ks_lane_smax] : smax[0];" in new  # max: a repeat is harmless
    assert "s = ks_lane_ssum < (blockDim.x >> 5) ? ssum[ks_lane_ssum] : 0;" in new  # sum: the identity
    assert "w < THREADS" not in new
    assert cpu_gate("softmax", SERIAL_SOFTMAX, tmp_path / "a").passed
    assert cpu_gate("softmax", new, tmp_path / "b").passed
    # round trip: the backward half folds both two-level reductions serially again
    back, n = to_fixpoint(SERIAL, new)
    assert n == 2 and "__shfl" not in back and "for (int ks_w = 1; ks_w < blockDim.x; ++ks_w)" in back
    assert cpu_gate("softmax", back, tmp_path / "c").passed


def test_round_trip_from_the_corpus_form_with_a_run_time_block(tmp_path):
    # rmsnorm_residual launches a block computed at run time: the butterflies run behind a guard
    from _operator_support import read_kernel
    back = SERIAL.apply(read_kernel("rmsnorm_residual"), SERIAL.find_sites(read_kernel("rmsnorm_residual"))[0])
    mats = run_rewrite("warp_reduce_per_block", back)
    assert len(mats) == 1 and mats[0].guards and "if ((blockDim.x & 31) == 0) {" in mats[0].source
    assert "ss += __shfl_xor_sync(0xffffffffu, ss, ks_off);" in mats[0].source
    assert cpu_gate("rmsnorm_residual", mats[0].source, tmp_path).passed


def test_round_trip_restores_the_slot_count(tmp_path):
    # whole warps at every launch: no guard, and the backward half's `* 32` widening is undone
    src = SERIAL_SOFTMAX.replace("__shared__ float ssum[THREADS];", "__shared__ float ssum[THREADS / 32 * 32];")
    mats = run_rewrite("warp_reduce_per_block", src)
    assert "__shared__ float ssum[THREADS / 32];" in mats[0].source
    assert cpu_gate("softmax", mats[0].source, tmp_path).passed


@pytest.mark.parametrize("change", [
    # a step with no identity the padding lanes could use
    ("s = s + ssum[w];", "s = s * 0.5f + ssum[w];"),
    # a slot read outside the fold
    ("yr[j] = expf(xr[j] - m) / s;", "yr[j] = expf(xr[j] - m) / s + 0.f * ssum[3];"),
    # the fold starts at slot 0 again (counts it twice): not the serial fold
    ("for (int w = 1; w < THREADS; w++) {", "for (int w = 0; w < THREADS; w++) {"),
    # a fold over fewer slots than the block
    ("for (int w = 1; w < THREADS; w++) {", "for (int w = 1; w < 128; w++) {"),
    # the park under a condition: some lanes would miss the shuffles
    ("    ssum[tid] = s;\n    __syncthreads();\n    s = ssum[0];\n    for (int w = 1; w < THREADS; w++) {\n"
     "        s = s + ssum[w];\n    }\n",
     "    if (N > 0) {\n    ssum[tid] = s;\n    __syncthreads();\n    s = ssum[0];\n    for (int w = 1; w < THREADS; w++) {\n"
     "        s = s + ssum[w];\n    }\n    }\n"),
])
def test_warp_reduce_refuses(change):
    assert change[0] in SERIAL_SOFTMAX
    mats = run_rewrite("warp_reduce_per_block", SERIAL_SOFTMAX.replace(*change))
    # the max fold is still a site, the changed sum fold is not
    assert [m.site_excerpt for m in mats] == ["smax[tid] = m;"]


def test_warp_reduce_refuses_a_two_dimensional_block_and_an_early_return():
    two_d = SERIAL_SOFTMAX.replace("float* yr = y", "if (threadIdx.y > 0) return;\n    float* yr = y")
    assert run_rewrite("warp_reduce_per_block", two_d) == []
    early = SERIAL_SOFTMAX.replace("float* yr = y", "if (N == 0) return;\n    float* yr = y")
    assert run_rewrite("warp_reduce_per_block", early) == []


# --------------------------------------------------------------------------- cache_sweep_in_registers
RECOMPUTE = get_operator("register_array_to_recompute")

# a hand-written three-sweep softmax: each sweep reloads the thread's SLOTS elements of the row
# (`int j` then `float v = ... xr[j] ...`, `k++`, the bound a macro)
SWEEPS = """
#include <cuda_runtime.h>
#include <float.h>
#define SLOTS 16
#define BLOCK 1024
__global__ void softmax_sweeps(const float* x, float* y, int M, int N) {
    __shared__ float red[BLOCK];
    const int tid = threadIdx.x;
    const float* xr = x + (size_t)blockIdx.x * N;
    float* yr = y + (size_t)blockIdx.x * N;
    float m = -FLT_MAX;
    for (int k = 0; k < SLOTS; k++) {
        int j = k * BLOCK + tid;
        float v = j < N ? xr[j] : -FLT_MAX;
        m = fmaxf(m, v);
    }
    red[tid] = m;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.f;
    for (int k = 0; k < SLOTS; k++) {
        int j = k * BLOCK + tid;
        float v = j < N ? xr[j] : -FLT_MAX;
        sum += expf(v - m);
    }
    red[tid] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    const float inv = 1.f / red[0];
    for (int k = 0; k < SLOTS; k++) {
        int j = k * BLOCK + tid;
        float v = j < N ? xr[j] : -FLT_MAX;
        if (j < N) yr[j] = expf(v - m) * inv;
    }
}
void softmax(const float* x, float* y, int M, int N) { softmax_sweeps<<<M, BLOCK>>>(x, y, M, N); }
"""


def test_sweeps_load_once_into_registers(tmp_path):
    assert inverses("register_array_to_recompute") == ["cache_sweep_in_registers"]
    mats = run_rewrite("cache_sweep_in_registers", SWEEPS)
    assert [m.description for m in mats] == [
        "v: loaded once into ks_c_v[SLOTS] and read from registers by 2 later sweep(s)",
        "v: loaded once into ks_c_v[SLOTS] and read from registers by 1 later sweep(s)"]
    new = mats[0].source
    assert mats[0].carrier == "register_cache"
    assert "    float ks_c_v[SLOTS];  // v of every iteration, loaded once\n    for (int k = 0; k < SLOTS; k++) {" in new
    assert "        float v = j < N ? xr[j] : -FLT_MAX;\n        ks_c_v[k] = v;\n        m = fmaxf(m, v);" in new
    assert new.count("float v = ks_c_v[k];") == 2 and new.count("xr[j]") == 1
    assert cpu_gate("softmax", SWEEPS, tmp_path / "a").passed
    assert cpu_gate("softmax", new, tmp_path / "b").passed
    # round trip: the backward half recomputes the cached value in every sweep again
    back, n = to_fixpoint(RECOMPUTE, new)
    assert n == 1 and "ks_c_v[" not in back
    assert cpu_gate("softmax", back, tmp_path / "c").passed


def test_round_trip_from_the_corpus_register_cache(tmp_path):
    from _operator_support import read_kernel
    corpus = read_kernel("softmax")
    back = RECOMPUTE.apply(corpus, RECOMPUTE.find_sites(corpus)[0])  # the row reloaded in each of 3 sweeps
    mats = run_rewrite("cache_sweep_in_registers", back)
    assert mats and "float4 ks_c_ks_v_k[V];" in mats[0].source
    assert mats[0].source.count("ks_v_k = ks_c_ks_v_k[k];") == 2
    assert cpu_gate("softmax", mats[0].source, tmp_path).passed
    assert len(RECOMPUTE.find_sites(mats[0].source)) == 1  # a register cache the backward half reads again


@pytest.mark.parametrize("change,descriptions", [
    # the row is written in place later: a reload would see the new values
    ("if (j < N) yr[j] = expf(v - m) * inv;", []),
    # a later sweep's local is computed another way: that sweep keeps its own load
    ("        int j = k * BLOCK + tid;\n        float v = j < N ? xr[j] : -FLT_MAX;\n        if (j < N)",
     ["v: loaded once into ks_c_v[SLOTS] and read from registers by 1 later sweep(s)"]),
    # a variable the load reads changes between the sweeps
    ("float sum = 0.f;", []),
    # the first sweep may stop early (its slots would not all be filled): the second sweep caches
    ("        m = fmaxf(m, v);\n", ["v: loaded once into ks_c_v[SLOTS] and read from registers by 1 later sweep(s)"]),
    # a trip count only known at run time: no register array can hold it
    ("k < SLOTS", []),
])
def test_cache_refuses(change, descriptions):
    src = SWEEPS
    assert change in src
    new = {
        "if (j < N) yr[j] = expf(v - m) * inv;": "if (j < N) ((float*)xr)[j] = expf(v - m) * inv;",
        "float sum = 0.f;": "float sum = 0.f;\n    n_seen = N;",
        "        m = fmaxf(m, v);\n": "        if (v > 1e30f) break;\n        m = fmaxf(m, v);\n",
        "k < SLOTS": "k < (N + BLOCK - 1) / BLOCK",
    }.get(change, change.replace("int j = k * BLOCK + tid;\n        float v = j < N ? xr[j] : -FLT_MAX;\n        if",
                                       "int j = tid + k * BLOCK;\n        float v = j < N ? xr[j] : -FLT_MAX;\n        if"))
    if change == "float sum = 0.f;":  # the load reads a variable that is reassigned between the sweeps
        src = src.replace("const int tid = threadIdx.x;", "const int tid = threadIdx.x;\n    int n_seen = N;")
        src = src.replace("float v = j < N ?", "float v = j < n_seen ?")
    out = run_rewrite("cache_sweep_in_registers", src.replace(change, new))
    assert [m.description for m in out] == descriptions


# --------------------------------------------------------------------------- cache_operands_in_registers
FRAGMENT = get_operator("fragment_to_shared_reads")
RELOAD = get_operator("register_cache_to_reload")


def _strided_gemm():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from test_operators_register_tile_passes import STRIDED
    return STRIDED


def _no_fragments(src: str) -> str:
    """The strided GEMM with its operand fragments read from the shared tiles at every use."""
    fills = ("            float af[4], bf[4];\n            for (int i = 0; i < 4; ++i) af[i] = As[k][ty + 16 * i];\n"
             "            for (int j = 0; j < 4; ++j) bf[j] = Bs[k][tx + 16 * j];\n")
    assert fills in src
    return src.replace(fills, "").replace("af[i] * bf[j]", "As[k][ty + 16 * i] * Bs[k][tx + 16 * j]")


def test_shared_operands_read_once_per_k(tmp_path):
    assert "cache_operands_in_registers" in inverses("fragment_to_shared_reads")
    assert inverses("register_cache_to_reload") == ["cache_operands_in_registers"]
    plain = _no_fragments(_strided_gemm())
    mats = run_rewrite("cache_operands_in_registers", plain)
    assert [m.description.split(": ")[1] for m in mats] == [
        "2 operands cached in registers",
        "As[k][ty + 16 * i] read once per i into ks_r_As[4] (1 read(s) in the nest)",
        "Bs[k][tx + 16 * j] read once per j into ks_r_Bs[4] (1 read(s) in the nest)"]
    new = mats[0].source
    assert "            float ks_r_As[4];  // As[k][ty + 16 * i] for every i, read once\n" \
           "            for (int i = 0; i < 4; ++i) ks_r_As[i] = As[k][ty + 16 * i];\n" in new
    assert "acc[i][j] += ks_r_As[i] * ks_r_Bs[j];" in new
    assert cpu_gate("sgemm", new, tmp_path / "fwd").passed
    # round trip: fragment_to_shared_reads reads the fill loops back
    back, n = to_fixpoint(FRAGMENT, new)
    assert n == 2 and back == plain
    # the house spelling already caches its operands: nothing is read twice
    assert run_rewrite("cache_operands_in_registers", _strided_gemm()) == []


GLOBAL_GEMM = """
#include <cuda_runtime.h>
#define TM 4
#define TN 4
__global__ void gemm_regs(const float* __restrict__ A, const float* __restrict__ B, float* C, int M, int N, int K) {
    const int r0 = (blockIdx.y * 16 + threadIdx.y) * TM, c0 = (blockIdx.x * 16 + threadIdx.x) * TN;
    float acc[TM][TN] = {};
    for (int k = 0; k < K; ++k)
        for (int i = 0; i < TM; ++i)
            for (int j = 0; j < TN; j++)
                acc[i][j] += A[(r0 + i < M ? r0 + i : M - 1) * K + k] * B[k * N + (c0 + j < N ? c0 + j : N - 1)];
    for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j)
            if (r0 + i < M && c0 + j < N) C[(r0 + i) * N + c0 + j] = acc[i][j];
}
void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 grid((N + 16 * TN - 1) / (16 * TN), (M + 16 * TM - 1) / (16 * TM));
    gemm_regs<<<grid, dim3(16, 16)>>>(A, B, C, M, N, K);
}
"""


def test_global_operands_read_once_per_k(tmp_path):
    mats = run_rewrite("cache_operands_in_registers", GLOBAL_GEMM)
    assert len(mats) == 3
    new = mats[0].source
    # the nest was the unbraced body of the k loop: the fills and the nest share a block now
    assert "    for (int k = 0; k < K; ++k)\n    {\n        float ks_r_A[TM];" in new and new.count("\n    }\n") == 1
    assert "for (int j = 0; j < TN; j++) ks_r_B[j] = B[k * N + (c0 + j < N ? c0 + j : N - 1)];" in new
    assert cpu_gate("sgemm", GLOBAL_GEMM, tmp_path / "a").passed
    assert cpu_gate("sgemm", new, tmp_path / "b").passed
    # round trip: register_cache_to_reload reloads from global memory at every use again
    back, n = to_fixpoint(RELOAD, new)
    assert n == 2 and "ks_r_" not in back
    assert cpu_gate("sgemm", back, tmp_path / "c").passed


@pytest.mark.parametrize("change", [
    # the read is what a bound keeps in range: hoisting it would read out of bounds
    ("acc[i][j] += A[", "if (r0 + i < M) acc[i][j] += A["),
    # the matrix is written by the kernel (a reload could see another value)
    ("float* C, int M", "float* C, int M", "const float* __restrict__ A", "float* __restrict__ A",
     "if (r0 + i < M && c0 + j < N) C[", "if (r0 + i < M && c0 + j < N) A[0] = 0.f; if (r0 + i < M && c0 + j < N) C["),
    # the index depends on both loops of the nest: each element is read once already
    ("B[k * N + (c0 + j < N ? c0 + j : N - 1)]", "B[k * N + (c0 + j + i < N ? c0 + j : N - 1)]",
     "A[(r0 + i < M ? r0 + i : M - 1) * K + k]", "A[(r0 + i + j < M ? r0 + i : M - 1) * K + k]"),
    # the nest's trip count is not a compile-time constant: no register array can hold it
    ("i < TM; ++i)\n            for", "i < M - r0; ++i)\n            for"),
])
def test_operand_cache_refuses(change):
    src = GLOBAL_GEMM
    for old, new in zip(change[::2], change[1::2]):
        assert old in src
        src = src.replace(old, new, 1)
    mats = run_rewrite("cache_operands_in_registers", src)
    # only B stays an operand to cache where A alone was written; nothing otherwise
    want = ["B"] if "A[0] = 0.f" in src else []
    assert [m.site_excerpt[0] for m in mats] == want


def test_operand_cache_refuses_a_tile_rewritten_in_the_nest():
    plain = _no_fragments(_strided_gemm())
    # a barrier inside the nest: the tile may change under the cache
    synced = plain.replace("acc[i][j] += As[k][ty + 16 * i] * Bs[k][tx + 16 * j];",
                           "{ acc[i][j] += As[k][ty + 16 * i] * Bs[k][tx + 16 * j]; __syncthreads(); }")
    assert synced != plain and run_rewrite("cache_operands_in_registers", synced) == []
    # the tile written inside the nest
    written = plain.replace("acc[i][j] += As[k][ty + 16 * i] * Bs[k][tx + 16 * j];",
                            "{ acc[i][j] += As[k][ty + 16 * i] * Bs[k][tx + 16 * j]; As[k][0] = 0.f; }")
    assert written != plain
    assert [m.site_excerpt for m in run_rewrite("cache_operands_in_registers", written)] == ["Bs[k][tx + 16 * j]"]


# --------------------------------------------------------------------------- slide_register_window
WINDOW = get_operator("sliding_window_to_reload")


def test_window_rows_reloaded_each_iteration_slide_again(tmp_path):
    from _operator_support import read_kernel
    assert inverses("sliding_window_to_reload") == ["slide_register_window"]
    corpus = read_kernel("conv2d_3x3")
    reload = WINDOW.apply(corpus, WINDOW.find_sites(corpus)[0])  # a, b, cc loaded in every iteration
    mats = run_rewrite("slide_register_window", reload)
    assert len(mats) == 1 and mats[0].carrier == "register_tile"
    new = mats[0].source
    assert "    load_row(tile, r0, tx, lane, a);\n    load_row(tile, r0 + 1, tx, lane, b);\n#pragma unroll\n" \
           "    for (int k = 0; k < RPT; ++k) {\n        load_row(tile, r0 + k + 2, tx, lane, cc);\n" in new
    assert "for (int ks_q = 0; ks_q < 6; ++ks_q) { a[ks_q] = b[ks_q]; b[ks_q] = cc[ks_q]; }\n    }\n" in new
    assert cpu_gate("conv2d_3x3", new, tmp_path / "fwd").passed
    # round trip: the backward half reloads every row again
    back = WINDOW.apply(new, WINDOW.find_sites(new)[0])
    assert back.count("load_row(tile, r0 + k") == 3 and "ks_q" not in back
    assert cpu_gate("conv2d_3x3", back, tmp_path / "back").passed


@pytest.mark.parametrize("change", [
    # the body writes the window itself
    ("float o[4];", "float o[4];\n        a[0] = 0.f;"),
    # the rows are not consecutive
    ("load_row(tile, r0 + k + 1, tx, lane, b);", "load_row(tile, r0 + k + 3, tx, lane, b);"),
    # the window is read after the loop (it would end one row further along)
    ("    }\n}\n\n", "    }\n    if (gj < 0) yc[0] = a[0];\n}\n\n"),
    # a shared store in the body: the rows could change under the window
    ("float o[4];", "float o[4];\n        if (k == RPT) tile[0][0] = 0.f;"),
    # the loop can leave an iteration early: the shift would be skipped
    ("float o[4];", "float o[4];\n        if (r0 + k >= H) continue;"),
])
def test_slide_refuses(change):
    from _operator_support import read_kernel
    corpus = read_kernel("conv2d_3x3")
    reload = WINDOW.apply(corpus, WINDOW.find_sites(corpus)[0])
    assert change[0] in reload and run_rewrite("slide_register_window", reload)
    assert run_rewrite("slide_register_window", reload.replace(change[0], change[1], 1)) == []
