// softmax, naive: one thread per row, three sequential passes (max, sum, normalize).
#include <cuda_runtime.h>
#include <math.h>

__global__ void softmax_naive(const float* x, float* y, int M, int N) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    const float* xr = x + (size_t)row * N;
    float* yr = y + (size_t)row * N;
    float m = xr[0];
    for (int j = 1; j < N; ++j) m = fmaxf(m, xr[j]);
    float s = 0.0f;
    for (int j = 0; j < N; ++j) s += expf(xr[j] - m);
    for (int j = 0; j < N; ++j) yr[j] = expf(xr[j] - m) / s;
}

void softmax(const float* x, float* y, int M, int N) {
    softmax_naive<<<(M + 127) / 128, 128>>>(x, y, M, N);
}
