"""Shared tiles filled from registers (issue 19): a vector built in registers from global loads
and stored into a tile one lane at a time, read back after a barrier in another thread's order,
is forwarded by solving the lane stores' index equations (mining/operators/tile_algebra.py).
The two kernels below are spellings the operator was not tuned on (the real-corpus expert is
LeetCUDA's float4 column-to-row transpose); each is checked on the CPU gate before and after."""
from __future__ import annotations

import pytest

from _operator_support import cpu_gate
from mining.operators import get_operator

OP = get_operator("shared_tile_to_global")

# four columns per thread through a float4, read back by a flattened thread id over 4 rounds
FLOAT4_COLS = """
#include <cuda_runtime.h>
#define B 8
__global__ void tq(const float* __restrict__ in, float* __restrict__ out, int R, int C) {
    __shared__ float s[B][4 * B];
    const int c4 = blockIdx.x * B + threadIdx.x;
    const int r = blockIdx.y * B + threadIdx.y;
    float4 v = make_float4(r < R && 4 * c4 < C ? in[r * C + 4 * c4] : 0.0f,
                           r < R && 4 * c4 + 1 < C ? in[r * C + 4 * c4 + 1] : 0.0f,
                           r < R && 4 * c4 + 2 < C ? in[r * C + 4 * c4 + 2] : 0.0f,
                           r < R && 4 * c4 + 3 < C ? in[r * C + 4 * c4 + 3] : 0.0f);
    s[threadIdx.y][4 * threadIdx.x] = v.x;
    s[threadIdx.y][4 * threadIdx.x + 1] = v.y;
    s[threadIdx.y][4 * threadIdx.x + 2] = v.z;
    s[threadIdx.y][4 * threadIdx.x + 3] = v.w;
    __syncthreads();
    for (int q = 0; q < 4; ++q) {
        const int e = threadIdx.y * B + threadIdx.x + q * B * B;
        const int jc = e / B, ir = e % B;
        const int oc = blockIdx.x * 4 * B + jc, orow = blockIdx.y * B + ir;
        if (oc < C && orow < R) out[oc * R + orow] = s[ir][jc];
    }
}
void transpose(const float* x, float* y, int R, int C) {
    dim3 block(B, B);
    dim3 grid((C + 4 * B - 1) / (4 * B), (R + B - 1) / B);
    tq<<<grid, block>>>(x, y, R, C);
}
"""

# two rows per thread through a float2 (lanes a row apart), under a block-uniform `if`
FLOAT2_ROWS = """
#include <cuda_runtime.h>
#define TW 16
#define TH 8
__global__ void t2(const float* x, float* y, int R, int C) {
    __shared__ float buf[2 * TH][TW + 1];
    int gx = blockIdx.x * TW + threadIdx.x;
    int gy = blockIdx.y * (2 * TH) + 2 * threadIdx.y;
    if (R > 0 && C > 0) {
        float2 p = make_float2(gy < R && gx < C ? x[gy * C + gx] : 0.0f,
                               gy + 1 < R && gx < C ? x[(gy + 1) * C + gx] : 0.0f);
        buf[2 * threadIdx.y][threadIdx.x] = p.x;
        buf[2 * threadIdx.y + 1][threadIdx.x] = p.y;
        __syncthreads();
        for (int h = 0; h < 2; ++h) {
            int l = threadIdx.y * TW + threadIdx.x + h * TW * TH;
            int oc = l % (2 * TH), orow = l / (2 * TH);
            int xr = blockIdx.y * 2 * TH + oc, xc = blockIdx.x * TW + orow;
            if (xr < R && xc < C) y[xc * R + xr] = buf[oc][orow];
        }
    }
}
void transpose(const float* x, float* y, int R, int C) {
    dim3 block(TW, TH);
    dim3 grid((C + TW - 1) / TW, (R + 2 * TH - 1) / (2 * TH));
    t2<<<grid, block>>>(x, y, R, C);
}
"""


# the same tile filled by one 16-byte store through a view macro, from a register prefetch loop
FLOAT4_VIEW = FLOAT4_COLS.replace("#define B 8", "#define B 8\n#define FLOAT4(v) (reinterpret_cast<float4 *>(&(v))[0])")
FLOAT4_VIEW = FLOAT4_VIEW.replace("""    s[threadIdx.y][4 * threadIdx.x] = v.x;
    s[threadIdx.y][4 * threadIdx.x + 1] = v.y;
    s[threadIdx.y][4 * threadIdx.x + 2] = v.z;
    s[threadIdx.y][4 * threadIdx.x + 3] = v.w;""", """    float rv[4];
    for (int q = 0; q < 4; ++q) rv[q] = r < R && 4 * c4 + q < C ? in[r * C + 4 * c4 + q] : 0.0f;
    FLOAT4(s[threadIdx.y][4 * threadIdx.x]) = FLOAT4(rv[0]);""")


@pytest.mark.parametrize("code", [FLOAT4_COLS, FLOAT2_ROWS, FLOAT4_VIEW],
                         ids=["float4_columns", "float2_rows", "float4_view_store"])
def test_tile_filled_lane_by_lane_from_a_register_vector_is_forwarded(code, tmp_path):
    assert cpu_gate("transpose", code, tmp_path).passed
    sites = OP.find_sites(code)
    assert len(sites) == 1
    new = OP.apply(code, sites[0])
    assert "__shared__" not in new and "= v.x" not in new and "= p.x" not in new
    # every element is the global load its lane made, at the writer solved from the element
    assert "% (4)" in new or "% (2)" in new
    assert cpu_gate("transpose", new, tmp_path).passed


@pytest.mark.parametrize("code,change", [
    # lanes two columns apart: the stores do not tile the row, nothing to solve
    (FLOAT2_ROWS, ("buf[2 * threadIdx.y + 1][threadIdx.x] = p.y;", "buf[2 * threadIdx.y + 2][threadIdx.x] = p.y;")),
    # the vector changes after it was built
    (FLOAT2_ROWS, ("        __syncthreads();\n", "        p.y *= 2.0f;\n        __syncthreads();\n")),
    # lanes of different kinds (a load and a constant): no one value per lane
    (FLOAT4_COLS, ("r < R && 4 * c4 + 3 < C ? in[r * C + 4 * c4 + 3] : 0.0f", "1.0f")),
    # a lane reads memory the kernel writes
    (FLOAT4_COLS, ("in[r * C + 4 * c4 + 1]", "out[r * C + 4 * c4 + 1]")),
    # a store that is not a lane of the others sits in the group
    (FLOAT4_COLS, ("    s[threadIdx.y][4 * threadIdx.x + 2] = v.z;\n",
                   "    s[threadIdx.y][4 * threadIdx.x + 2] = v.z;\n    s[0][0] = 0.0f;\n")),
    # fill and reads under an `if` inside a loop: a skipped iteration leaves the last one's values
    (FLOAT2_ROWS, ("    if (R > 0 && C > 0) {", "    for (int it = 0; it < 2; ++it) if (it < R) {")),
    # no barrier between the lanes' stores and the reads
    (FLOAT4_COLS, ("    __syncthreads();\n", "")),
    # a wide store from registers of another scalar type (the bytes are reinterpreted)
    (FLOAT4_VIEW, ("    float rv[4];\n", "    int rv[4];\n")),
    # the tile is also read wide: a wide read is not an element read this module rewrites
    (FLOAT4_VIEW, ("        if (oc < C && orow < R) out[oc * R + orow] = s[ir][jc];",
                   "        if (oc < C && orow < R) out[oc * R + orow] = s[ir][jc] + FLOAT4(s[0][0]).x;")),
])
def test_tile_from_registers_refusals(code, change):
    changed = code.replace(*change)
    assert changed != code
    assert OP.find_sites(changed) == [], change


# --------------------------------------------------------------------------- GEMM tiles staged through registers
# one k-step per iteration: 4-lane register prefetches stored into a k-major A tile and an n-major
# B tile with `tid / 8`, `(tid & 7) << 2` fill mappings (the loop shape once a pipelined GEMM is
# rotated into `for { fill; sync; compute; sync }`)
GEMM_LANES = """
#include <cuda_runtime.h>
#define BM 32
#define BN 32
#define BK 32
__global__ void mm(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float sa[BK][BM];
    __shared__ float sb[BK][BN];
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int am = blockIdx.y * BM + tid / 8;
    const int ak = (tid & 7) << 2;
    const int bk = tid / 8;
    const int bn = blockIdx.x * BN + (tid % 8) * 4;
    float ra[4], rb[4];
    float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    for (int kt = 0; kt < K; kt += BK) {
        for (int q = 0; q < 4; ++q) ra[q] = (am < M && kt + ak + q < K) ? A[am * K + kt + ak + q] : 0.0f;
        for (int q = 0; q < 4; ++q) rb[q] = (kt + bk < K && bn + q < N) ? B[(kt + bk) * N + bn + q] : 0.0f;
        sa[ak][tid / 8] = ra[0];
        sa[ak + 1][tid / 8] = ra[1];
        sa[ak + 2][tid / 8] = ra[2];
        sa[ak + 3][tid / 8] = ra[3];
        sb[bk][(tid % 8) * 4] = rb[0];
        sb[bk][(tid % 8) * 4 + 1] = rb[1];
        sb[bk][(tid % 8) * 4 + 2] = rb[2];
        sb[bk][(tid % 8) * 4 + 3] = rb[3];
        __syncthreads();
        for (int kk = 0; kk < BK; ++kk)
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j)
                    acc[i][j] += sa[kk][threadIdx.y + 16 * i] * sb[kk][threadIdx.x + 16 * j];
        __syncthreads();
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            int r = blockIdx.y * BM + threadIdx.y + 16 * i, c = blockIdx.x * BN + threadIdx.x + 16 * j;
            if (r < M && c < N) C[r * N + c] = acc[i][j];
        }
}
void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(16, 16);
    dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    mm<<<grid, block>>>(A, B, C, M, N, K);
}
"""

# one scalar register per thread and tile, stored through `tid % 8`, `tid / 8` mappings
GEMM_SCALAR = """
#include <cuda_runtime.h>
__global__ void mm(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float sa[8][32];
    __shared__ float sb[8][32];
    int tid = threadIdx.x + threadIdx.y * 16;
    float acc[2][2] = {};
    for (int k0 = 0; k0 < K; k0 += 8) {
        int arow = blockIdx.y * 32 + tid / 8, acol = k0 + tid % 8;
        float va = (arow < M && acol < K) ? A[arow * K + acol] : 0.0f;
        int brow = k0 + tid / 32, bcol = blockIdx.x * 32 + tid % 32;
        float vb = (brow < K && bcol < N) ? B[brow * N + bcol] : 0.0f;
        sa[tid % 8][tid / 8] = va;
        sb[tid / 32][tid % 32] = vb;
        __syncthreads();
        for (int kk = 0; kk < 8; ++kk)
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j)
                    acc[i][j] += sa[kk][threadIdx.y + 16 * i] * sb[kk][threadIdx.x + 16 * j];
        __syncthreads();
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            int r = blockIdx.y * 32 + threadIdx.y + 16 * i, c = blockIdx.x * 32 + threadIdx.x + 16 * j;
            if (r < M && c < N) C[r * N + c] = acc[i][j];
        }
}
void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(16, 16);
    dim3 grid((N + 31) / 32, (M + 31) / 32);
    mm<<<grid, block>>>(A, B, C, M, N, K);
}
"""


@pytest.mark.parametrize("code", [GEMM_LANES, GEMM_SCALAR], ids=["register_lanes", "scalar_registers"])
def test_gemm_tiles_filled_from_registers_in_the_k_loop_are_forwarded(code, tmp_path):
    assert cpu_gate("sgemm", code, tmp_path).passed
    new = code
    for _ in range(2):  # one tile per step
        sites = OP.find_sites(new)
        assert len(sites) >= 1
        new = OP.apply(new, sites[0])
    assert "__shared__" not in new and "sa[" not in new and "sb[" not in new
    assert cpu_gate("sgemm", new, tmp_path).passed


@pytest.mark.parametrize("code,change", [
    # the value picks its row by another thread split than the store: no one writer per element
    (GEMM_SCALAR, ("int arow = blockIdx.y * 32 + tid / 8,", "int arow = blockIdx.y * 32 + tid / 4,")),
    # the prefetch loop runs only on some iterations: the register may hold the last k-step's value
    (GEMM_LANES, ("        for (int q = 0; q < 4; ++q) ra[q] =", "        if (kt > 0) for (int q = 0; q < 4; ++q) ra[q] =")),
    # a register lane rewritten through a vector cast after the prefetch
    (GEMM_LANES, ("        sa[ak][tid / 8] = ra[0];\n",
                  "        *reinterpret_cast<float2*>(&ra[0]) = make_float2(0.0f, 0.0f);\n        sa[ak][tid / 8] = ra[0];\n")),
])
def test_gemm_tiles_from_registers_refusals(code, change):
    changed = code.replace(*change)
    assert changed != code
    # the B tile may still go; the A tile stays
    assert all("__shared__ float sa[" in OP.apply(changed, s) for s in OP.find_sites(changed)), change


# --------------------------------------------------------------------------- software-pipelined tiles
# the tiles of k-step 0 are filled before the loop; iteration t computes on k-step t - 1 while its
# registers prefetch k-step t, stored at the end of the body; the last k-step is computed after the loop
GEMM_PIPELINED = """
#include <cuda_runtime.h>
#define FLOAT4(v) (reinterpret_cast<float4 *>(&(v))[0])
__global__ void mm(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float sa[8][32];
    __shared__ float sb[8][32];
    const int tid = threadIdx.y * 16 + threadIdx.x;
    const int am = tid >> 3, ak = tid & 7;
    const int bk = tid >> 5, bn = (tid & 31);
    const int row0 = blockIdx.y * 32, col0 = blockIdx.x * 32;
    float acc[2][2] = {};
    const int steps = (K + 7) / 8;
    sa[ak][am] = (row0 + am < M && ak < K) ? A[(row0 + am) * K + ak] : 0.0f;
    sb[bk][bn] = (bk < K && col0 + bn < N) ? B[bk * N + col0 + bn] : 0.0f;
    __syncthreads();
    for (int t = 1; t < steps; ++t) {
        float ra = (row0 + am < M && t * 8 + ak < K) ? A[(row0 + am) * K + t * 8 + ak] : 0.0f;
        float rb = (t * 8 + bk < K && col0 + bn < N) ? B[(t * 8 + bk) * N + col0 + bn] : 0.0f;
        for (int kk = 0; kk < 8; ++kk)
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j)
                    acc[i][j] += sa[kk][threadIdx.y + 16 * i] * sb[kk][threadIdx.x + 16 * j];
        __syncthreads();
        sa[ak][am] = ra;
        sb[bk][bn] = rb;
        __syncthreads();
    }
    for (int kk = 0; kk < 8; ++kk)
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j)
                acc[i][j] += sa[kk][threadIdx.y + 16 * i] * sb[kk][threadIdx.x + 16 * j];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            int r = row0 + threadIdx.y + 16 * i, c = col0 + threadIdx.x + 16 * j;
            if (r < M && c < N) C[r * N + c] = acc[i][j];
        }
}
void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(16, 16);
    dim3 grid((N + 31) / 32, (M + 31) / 32);
    mm<<<grid, block>>>(A, B, C, M, N, K);
}
"""

# the same pipeline with 4-lane register prefetches (a k-major A tile filled by transposed
# lane stores, the B tile by one 16-byte store), reads through row pointers `(&s[k][c])[j]`
GEMM_PIPELINED_LANES = """
#include <cuda_runtime.h>
#define FLOAT4(v) (reinterpret_cast<float4 *>(&(v))[0])
#define BK 32
__global__ void mm(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float sa[BK][32];
    __shared__ float sb[BK][32];
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int am = blockIdx.y * 32 + tid / 8, ak = (tid & 7) << 2;
    const int bk = tid / 8, bn = blockIdx.x * 32 + (tid % 8) * 4;
    float ra[4], rb[4];
    float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    {
        for (int q = 0; q < 4; ++q) ra[q] = (am < M && ak + q < K) ? A[am * K + ak + q] : 0.0f;
        for (int q = 0; q < 4; ++q) rb[q] = (bk < K && bn + q < N) ? B[bk * N + bn + q] : 0.0f;
        sa[ak][tid / 8] = ra[0];
        sa[ak + 1][tid / 8] = ra[1];
        sa[ak + 2][tid / 8] = ra[2];
        sa[ak + 3][tid / 8] = ra[3];
        FLOAT4(sb[bk][(tid % 8) * 4]) = FLOAT4(rb[0]);
    }
    __syncthreads();
    for (int s = 1; s < (K + BK - 1) / BK; s++) {
        const int kt = s * BK;
        for (int q = 0; q < 4; ++q) ra[q] = (am < M && kt + ak + q < K) ? A[am * K + kt + ak + q] : 0.0f;
        for (int q = 0; q < 4; ++q) rb[q] = (kt + bk < K && bn + q < N) ? B[(kt + bk) * N + bn + q] : 0.0f;
        for (int kk = 0; kk < BK; ++kk)
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j)
                    acc[i][j] += (&sa[kk][threadIdx.y])[16 * i] * (&sb[kk][threadIdx.x])[16 * j];
        __syncthreads();
        sa[ak][tid / 8] = ra[0];
        sa[ak + 1][tid / 8] = ra[1];
        sa[ak + 2][tid / 8] = ra[2];
        sa[ak + 3][tid / 8] = ra[3];
        FLOAT4(sb[bk][(tid % 8) * 4]) = FLOAT4(rb[0]);
        __syncthreads();
    }
    for (int kk = 0; kk < BK; ++kk)
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j)
                acc[i][j] += (&sa[kk][threadIdx.y])[16 * i] * (&sb[kk][threadIdx.x])[16 * j];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            int r = blockIdx.y * 32 + threadIdx.y + 16 * i, c = blockIdx.x * 32 + threadIdx.x + 16 * j;
            if (r < M && c < N) C[r * N + c] = acc[i][j];
        }
}
void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(16, 16);
    dim3 grid((N + 31) / 32, (M + 31) / 32);
    mm<<<grid, block>>>(A, B, C, M, N, K);
}
"""


@pytest.mark.parametrize("code", [GEMM_PIPELINED, GEMM_PIPELINED_LANES], ids=["scalar", "lanes_and_row_pointers"])
def test_software_pipelined_tiles_are_forwarded(code, tmp_path):
    assert cpu_gate("sgemm", code, tmp_path).passed
    new = code
    for _ in range(2):
        sites = OP.find_sites(new)
        assert len(sites) >= 1
        new = OP.apply(new, sites[0])
    assert "__shared__" not in new and "sa[" not in new and "sb[" not in new
    assert "max(1, " in new  # the reads after the loop see its last k-step
    assert cpu_gate("sgemm", new, tmp_path).passed


@pytest.mark.parametrize("code,change", [
    # the prologue stages another k-step than the loop would have before its first iteration
    (GEMM_PIPELINED, ("    sa[ak][am] = (row0 + am < M && ak < K) ? A[(row0 + am) * K + ak] : 0.0f;",
                      "    sa[ak][am] = (row0 + am < M && 8 + ak < K) ? A[(row0 + am) * K + 8 + ak] : 0.0f;")),
    # no barrier after the refill: the next iteration's reads may see the old k-step
    (GEMM_PIPELINED, ("        sb[bk][bn] = rb;\n        __syncthreads();\n", "        sb[bk][bn] = rb;\n")),
    # the value reads a local of the loop body that is not one definition (an iteration's value
    # cannot be taken at the previous iteration)
    (GEMM_PIPELINED_LANES, ("const int kt = s * BK;", "int kt = s * BK;\n        if (M < 0) kt = 0;")),
    # the tile is read after the refill in the same iteration
    (GEMM_PIPELINED, ("        sb[bk][bn] = rb;\n        __syncthreads();\n",
                      "        sb[bk][bn] = rb;\n        __syncthreads();\n        acc[0][0] += sa[0][0];\n")),
])
def test_software_pipelined_tile_refusals(code, change):
    changed = code.replace(*change)
    assert changed != code
    assert all("__shared__ float sa[" in OP.apply(changed, s) for s in OP.find_sites(changed)), change


def test_register_prefetched_before_the_loop_and_rewritten_in_it_is_refused():
    # iteration 1 stores the registers loaded before the loop, later ones what the body reloaded
    pre = "        for (int q = 0; q < 4; ++q) ra[q] = (am < M && kt + ak + q < K) ? A[am * K + kt + ak + q] : 0.0f;\n"
    code = GEMM_LANES.replace(pre, "")
    code = code.replace("    for (int kt = 0; kt < K; kt += BK) {\n",
                        "    for (int q = 0; q < 4; ++q) ra[q] = (am < M && ak + q < K) ? A[am * K + ak + q] : 0.0f;\n"
                        "    for (int kt = 0; kt < K; kt += BK) {\n")
    code = code.replace("                    acc[i][j] += sa[kk][threadIdx.y + 16 * i] * sb[kk][threadIdx.x + 16 * j];\n"
                        "        __syncthreads();\n",
                        "                    acc[i][j] += sa[kk][threadIdx.y + 16 * i] * sb[kk][threadIdx.x + 16 * j];\n"
                        "        __syncthreads();\n"
                        "        for (int q = 0; q < 4; ++q) ra[q] = (am < M && kt + BK + ak + q < K) ? "
                        "A[am * K + kt + BK + ak + q] : 0.0f;\n")
    assert code.count("ra[q] =") == 2 and code != GEMM_LANES
    assert all("__shared__ float sa[" in OP.apply(code, s) for s in OP.find_sites(code))
