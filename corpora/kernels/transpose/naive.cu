// transpose, naive: one thread per element; reads along rows are coalesced, writes are strided by R.
#include <cuda_runtime.h>

__global__ void transpose_naive(const float* x, float* y, int R, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < R && c < C) y[(size_t)c * R + r] = x[(size_t)r * C + c];
}

void transpose(const float* x, float* y, int R, int C) {
    dim3 block(32, 8);
    dim3 grid((C + 31) / 32, (R + 7) / 8);
    transpose_naive<<<grid, block>>>(x, y, R, C);
}
