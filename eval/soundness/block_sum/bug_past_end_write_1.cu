// PLANTED BUG: block 0 thread 0 also clears out[1], one element past the 1-element output (values stay right; the GPU allocator's slack hides it).
#include <cuda_runtime.h>

#define THREADS 256
#define WARPS (THREADS / 32)

__global__ void __launch_bounds__(THREADS) block_sum_kernel(const float* __restrict__ x, float* out, int n) {
    __shared__ float warp_sums[WARPS];
    int tid = threadIdx.x;
    if (blockIdx.x == 0 && tid == 0) out[1] = 0.0f;  // "scratch" slot that was never allocated
    int lane = tid & 31, warp = tid >> 5;
    float acc = 0.0f;
    for (int i = blockIdx.x * THREADS + tid; i < n; i += gridDim.x * THREADS) acc += x[i];
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (lane == 0) warp_sums[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        float v = lane < WARPS ? warp_sums[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
        if (lane == 0) atomicAdd(out, v);
    }
}

void block_sum(const float* x, float* out, int N) {
    cudaMemset(out, 0, sizeof(float));
    int blocks = (N + THREADS - 1) / THREADS;
    if (blocks > 64) blocks = 64;
    block_sum_kernel<<<blocks, THREADS>>>(x, out, N);
}
