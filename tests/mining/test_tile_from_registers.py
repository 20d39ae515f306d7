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


@pytest.mark.parametrize("code", [FLOAT4_COLS, FLOAT2_ROWS], ids=["float4_columns", "float2_rows"])
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
    # fill and reads inside one loop: each iteration refills the tile
    (FLOAT2_ROWS, ("    if (R > 0 && C > 0) {", "    for (int it = 0; it < 1; ++it) {")),
    # no barrier between the lanes' stores and the reads
    (FLOAT4_COLS, ("    __syncthreads();\n", "")),
])
def test_tile_from_registers_refusals(code, change):
    changed = code.replace(*change)
    assert changed != code
    assert OP.find_sites(changed) == [], change
