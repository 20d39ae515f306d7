// PLANTED BUG: no __syncthreads before the merge: bins are read while other threads of the block are still counting (race).
#include <cuda_runtime.h>

#define NBINS 64
#define THREADS 128

__global__ void histogram_shared(const int* __restrict__ values, int* hist, int n) {
    __shared__ int bins[NBINS];
    for (int b = threadIdx.x; b < NBINS; b += blockDim.x) bins[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&bins[values[i]], 1);
    for (int b = threadIdx.x; b < NBINS; b += blockDim.x)
        if (bins[b] != 0) atomicAdd(&hist[b], bins[b]);
}

void shared_histogram(const int* values, int* hist, int N, int BINS) {
    cudaMemset(hist, 0, BINS * sizeof(int));
    int blocks = (N + THREADS - 1) / THREADS;
    if (blocks > 16) blocks = 16;
    histogram_shared<<<blocks, THREADS>>>(values, hist, N);
}
