// PLANTED BUG: warp partials are summed with shared atomics into a static __shared__ total that is never zeroed.
#include <cuda_runtime.h>

#define THREADS 256
#define WARPS (THREADS / 32)

__global__ void __launch_bounds__(THREADS) block_sum_kernel(const float* __restrict__ x, float* out, int n) {
    __shared__ float block_total;  // never initialized
    int tid = threadIdx.x;
    int lane = tid & 31, warp = tid >> 5;
    float acc = 0.0f;
    for (int i = blockIdx.x * THREADS + tid; i < n; i += gridDim.x * THREADS) acc += x[i];
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (lane == 0) atomicAdd(&block_total, acc);
    __syncthreads();
    if (tid == 0) atomicAdd(out, block_total);
}

void block_sum(const float* x, float* out, int N) {
    cudaMemset(out, 0, sizeof(float));
    int blocks = (N + THREADS - 1) / THREADS;
    if (blocks > 64) blocks = 64;
    block_sum_kernel<<<blocks, THREADS>>>(x, out, N);
}
