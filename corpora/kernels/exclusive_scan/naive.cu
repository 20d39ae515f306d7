// exclusive_scan, naive: split x into 4096 chunks; one thread sums each chunk, a single thread scans
// the chunk sums, then one thread per chunk writes its chunk's prefix sums sequentially.
#include <cuda_runtime.h>

#define CHUNKS 4096

__global__ void chunk_sums(const int* x, int* sums, int n, int len) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= CHUNKS) return;
    int s = 0;
    for (long long i = (long long)t * len; i < (long long)(t + 1) * len && i < n; ++i) s += x[i];
    sums[t] = s;
}

__global__ void scan_sums(int* sums) {
    int acc = 0;
    for (int t = 0; t < CHUNKS; ++t) {
        int v = sums[t];
        sums[t] = acc;
        acc += v;
    }
}

__global__ void chunk_scan(const int* x, int* y, const int* sums, int n, int len) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= CHUNKS) return;
    int acc = sums[t];
    for (long long i = (long long)t * len; i < (long long)(t + 1) * len && i < n; ++i) {
        y[i] = acc;
        acc += x[i];
    }
}

void exclusive_scan(const int* x, int* y, int N) {
    static int* sums = nullptr;  // scratch for the chunk sums, allocated once
    if (!sums) cudaMalloc(&sums, CHUNKS * sizeof(int));
    int len = (N + CHUNKS - 1) / CHUNKS;
    chunk_sums<<<CHUNKS / 256, 256>>>(x, sums, N, len);
    scan_sums<<<1, 1>>>(sums);
    chunk_scan<<<CHUNKS / 256, 256>>>(x, y, sums, N, len);
}
