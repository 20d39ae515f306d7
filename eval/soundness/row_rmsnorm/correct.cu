// row_rmsnorm, correct: one 256-thread block per row; a block-stride loop stages the row in shared memory (any C up to 8192), a shared tree reduces the sum of squares.
#include <cuda_runtime.h>

#define THREADS 256
#define MAX_C 8192

__global__ void __launch_bounds__(THREADS) rmsnorm_rows(const float* __restrict__ x, const float* __restrict__ w,
                                                        float* __restrict__ y, int C, float eps) {
    __shared__ float row[MAX_C];
    __shared__ float partial[THREADS];
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += THREADS) {
        float v = xr[c];
        row[c] = v;
        ss += v * v;
    }
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    float inv = rsqrtf(partial[0] / (float)C + eps);
    for (int c = threadIdx.x; c < C; c += THREADS) yr[c] = row[c] * inv * w[c];
}

void row_rmsnorm(const float* x, const float* w, float* y, float eps, int R, int C) {
    rmsnorm_rows<<<R, THREADS>>>(x, w, y, C, eps);
}
