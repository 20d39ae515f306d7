// smem_matmul, second correct variant: 16x8 threads, each computes 2 outputs (rows ty and ty+8), unrolled inner loop.
#include <cuda_runtime.h>

#define TILE 16
#define HALF 8

__global__ void matmul_2x(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                          int M, int N, int K) {
    __shared__ float As[TILE][TILE + 1];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row0 = blockIdx.y * TILE + ty, row1 = row0 + HALF;
    int col = blockIdx.x * TILE + tx;
    float acc0 = 0.0f, acc1 = 0.0f;
    for (int t = 0; t < K; t += TILE) {
        As[ty][tx] = (row0 < M && t + tx < K) ? A[row0 * K + t + tx] : 0.0f;
        As[ty + HALF][tx] = (row1 < M && t + tx < K) ? A[row1 * K + t + tx] : 0.0f;
        Bs[ty][tx] = (t + ty < K && col < N) ? B[(t + ty) * N + col] : 0.0f;
        Bs[ty + HALF][tx] = (t + ty + HALF < K && col < N) ? B[(t + ty + HALF) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) {
            float b = Bs[k][tx];
            acc0 += As[ty][k] * b;
            acc1 += As[ty + HALF][k] * b;
        }
        __syncthreads();
    }
    if (col < N) {
        if (row0 < M) C[row0 * N + col] = acc0;
        if (row1 < M) C[row1 * N + col] = acc1;
    }
}

void smem_matmul(const float* A, const float* B, float* C, int M, int N, int K) {
    matmul_2x<<<dim3((N + TILE - 1) / TILE, (M + TILE - 1) / TILE), dim3(TILE, HALF)>>>(A, B, C, M, N, K);
}
