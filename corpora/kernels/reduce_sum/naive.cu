// reduce_sum, naive: x is split into 4096 contiguous chunks; one thread sums each chunk
// sequentially into a scratch array, then a single thread adds up the chunk sums.
#include <cuda_runtime.h>

#define CHUNKS 4096

__global__ void chunk_sums(const float* x, float* sums, int n, int len) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= CHUNKS) return;
    float s = 0.0f;
    for (long long i = (long long)t * len; i < (long long)(t + 1) * len && i < n; ++i) s += x[i];
    sums[t] = s;
}

__global__ void total(const float* sums, float* y) {
    float s = 0.0f;
    for (int t = 0; t < CHUNKS; ++t) s += sums[t];
    y[0] = s;
}

void reduce_sum(const float* x, float* y, int N) {
    static float* sums = nullptr;  // scratch for the chunk sums, allocated once
    if (!sums) cudaMalloc(&sums, CHUNKS * sizeof(float));
    int len = (N + CHUNKS - 1) / CHUNKS;
    chunk_sums<<<CHUNKS / 256, 256>>>(x, sums, N, len);
    total<<<1, 1>>>(sums, y);
}
