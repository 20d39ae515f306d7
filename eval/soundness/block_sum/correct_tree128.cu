// block_sum, second correct variant: 128 threads, classic shared-memory tree reduction (no shuffles), one atomicAdd per block.
#include <cuda_runtime.h>

#define THREADS 128

__global__ void block_sum_tree(const float* x, float* out, int n) {
    __shared__ float partial[THREADS];
    int tid = threadIdx.x;
    float acc = 0.0f;
    for (int i = blockIdx.x * THREADS + tid; i < n; i += gridDim.x * THREADS) acc += x[i];
    partial[tid] = acc;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) partial[tid] += partial[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, partial[0]);
}

void block_sum(const float* x, float* out, int N) {
    cudaMemset(out, 0, sizeof(float));
    int blocks = (N + THREADS - 1) / THREADS;
    if (blocks > 40) blocks = 40;
    block_sum_tree<<<blocks, THREADS>>>(x, out, N);
}
