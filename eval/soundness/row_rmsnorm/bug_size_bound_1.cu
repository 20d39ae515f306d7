// PLANTED BUG: the block-stride staging loop collapsed into one unrolled pass of UNROLL x 256 threads: right while C <= 1024; every workload has C <= 1000, so only probe sizes from the kernel's own geometry (256 x 4 = 1024, and 1025) show it.
#include <cuda_runtime.h>

#define THREADS 256
#define MAX_C 8192
#define UNROLL 4

__global__ void __launch_bounds__(THREADS) rmsnorm_rows(const float* __restrict__ x, const float* __restrict__ w,
                                                        float* __restrict__ y, int C, float eps) {
    __shared__ float row[MAX_C];
    __shared__ float partial[THREADS];
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) {  // one pass: covers C <= UNROLL * THREADS
        int c = k * THREADS + threadIdx.x;
        if (c < C) {
            float v = xr[c];
            row[c] = v;
            ss += v * v;
        }
    }
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    float inv = rsqrtf(partial[0] / (float)C + eps);
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) {
        int c = k * THREADS + threadIdx.x;
        if (c < C) yr[c] = row[c] * inv * w[c];
    }
}

void row_rmsnorm(const float* x, const float* w, float* y, float eps, int R, int C) {
    rmsnorm_rows<<<R, THREADS>>>(x, w, y, C, eps);
}
