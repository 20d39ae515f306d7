// PLANTED BUG: one block; lanes 0 and 16 of warp 0 each += their half-warp total to out[0] without an atomic (two lanes of one warp race on a global word).
#include <cuda_runtime.h>

#define THREADS 256
#define WARPS (THREADS / 32)

__global__ void __launch_bounds__(THREADS) block_sum_kernel(const float* __restrict__ x, float* out, int n) {
    __shared__ float warp_sums[WARPS];
    int tid = threadIdx.x;
    int lane = tid & 31, warp = tid >> 5;
    float acc = 0.0f;
    for (int i = blockIdx.x * THREADS + tid; i < n; i += gridDim.x * THREADS) acc += x[i];
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (lane == 0) warp_sums[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        float v = lane < WARPS ? warp_sums[lane] : 0.0f;
        for (int offset = 8; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
        if (lane == 0 || lane == 16) *out += v;  // lanes 0..15 and 16..31 summed separately
    }
}

void block_sum(const float* x, float* out, int N) {
    cudaMemset(out, 0, sizeof(float));
    int blocks = (N + THREADS - 1) / THREADS;
    blocks = 1;  // one block: the grid-stride loop covers N
    block_sum_kernel<<<blocks, THREADS>>>(x, out, N);
}
