// hgemm_wmma, naive: one thread per output element, half operands converted to float, no tensor cores.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

__global__ void hgemm_naive(const __half* A, const __half* B, float* C, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)k * N + col]);
    C[(size_t)row * N + col] = acc;
}

void hgemm_wmma(const __half* A, const __half* B, float* C, int M, int N, int K) {
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (M + 15) / 16);
    hgemm_naive<<<grid, block>>>(A, B, C, M, N, K);
}
