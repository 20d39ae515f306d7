// PLANTED BUG: each warp caches its row in a fixed 2048-float shared slot: right while C <= 2048; the large workload (C = 3000) writes past the slot (only its reduced CPU form shows it).
#include <cuda_runtime.h>

#define WARPS_PER_BLOCK 4
#define ROW_CACHE 2048

__global__ void softmax_warp_per_row(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    __shared__ float cache[WARPS_PER_BLOCK][ROW_CACHE];
    if (row >= rows) return;  // the whole warp leaves together; no block barrier below
    float* cr = cache[threadIdx.x >> 5];
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;
    float m = -INFINITY;
    for (int c = lane; c < cols; c += 32) { cr[c] = xr[c]; m = fmaxf(m, cr[c]); }
    for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += expf(cr[c] - m);
    for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
    float inv = 1.0f / s;
    for (int c = lane; c < cols; c += 32) yr[c] = expf(cr[c] - m) * inv;
}

void row_softmax(const float* x, float* y, int R, int C) {
    int blocks = (R + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    softmax_warp_per_row<<<blocks, WARPS_PER_BLOCK * 32>>>(x, y, R, C);
}
