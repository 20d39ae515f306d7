// PLANTED BUG: the right halo is loaded without its bound check, reading past the end of x in the last block.
#include <cuda_runtime.h>

#define R 3
#define BLOCK 128

__global__ void stencil_shared(const float* __restrict__ x, float* __restrict__ y, int n) {
    __shared__ float tile[BLOCK + 2 * R];
    int gi = blockIdx.x * BLOCK + threadIdx.x;
    int li = threadIdx.x + R;
    tile[li] = gi < n ? x[gi] : 0.0f;
    if (threadIdx.x < R) {  // the first R threads also load the left and right halo
        int left = gi - R, right = gi + BLOCK;
        tile[li - R] = left >= 0 ? x[left] : 0.0f;
        tile[li + BLOCK] = x[right];
    }
    __syncthreads();
    if (gi < n) {
        float s = 0.0f;
        for (int k = -R; k <= R; ++k) s += tile[li + k];
        y[gi] = s;
    }
}

void stencil_1d(const float* x, float* y, int N) {
    stencil_shared<<<(N + BLOCK - 1) / BLOCK, BLOCK>>>(x, y, N);
}
