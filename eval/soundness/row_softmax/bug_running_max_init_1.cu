// PLANTED BUG: the row max starts at 0 instead of -inf: right whenever a row has a positive value, NaN for rows entirely below about -87 (every exp underflows).
#include <cuda_runtime.h>

#define WARPS_PER_BLOCK 4

__global__ void softmax_warp_per_row(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= rows) return;  // the whole warp leaves together; no block barrier below
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;
    float m = 0.0f;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, xr[c]);
    for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += expf(xr[c] - m);
    for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
    float inv = 1.0f / s;
    for (int c = lane; c < cols; c += 32) yr[c] = expf(xr[c] - m) * inv;
}

void row_softmax(const float* x, float* y, int R, int C) {
    int blocks = (R + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    softmax_warp_per_row<<<blocks, WARPS_PER_BLOCK * 32>>>(x, y, R, C);
}
