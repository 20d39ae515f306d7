// vec_scale, second correct variant: scalar grid-stride loop with a capped grid of 128-thread blocks.
#include <cuda_runtime.h>

__global__ void scale_grid_stride(const float* x, float* y, float alpha, int n) {
    int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = alpha * x[i];
}

void vec_scale(const float* x, float* y, float alpha, int N) {
    int threads = 128;
    int blocks = (N + threads - 1) / threads;
    if (blocks > 96) blocks = 96;  // the loop covers the rest
    scale_grid_stride<<<blocks, threads>>>(x, y, alpha, N);
}
