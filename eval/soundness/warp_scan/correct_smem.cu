// warp_scan, second correct variant: 128 threads scan their four 32-element segments in shared memory (double-buffered Hillis-Steele with __syncthreads).
#include <cuda_runtime.h>

#define THREADS 128

__global__ void segment_scan_smem(const float* x, float* y, int n) {
    __shared__ float buf[2][THREADS];
    int tid = threadIdx.x;
    int i = blockIdx.x * THREADS + tid;
    int lane = tid & 31;
    int cur = 0;
    buf[cur][tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int offset = 1; offset < 32; offset <<= 1) {
        float v = buf[cur][tid];
        if (lane >= offset) v += buf[cur][tid - offset];
        buf[cur ^ 1][tid] = v;
        cur ^= 1;
        __syncthreads();
    }
    if (i < n) y[i] = buf[cur][tid];
}

void warp_scan(const float* x, float* y, int N) {
    segment_scan_smem<<<(N + THREADS - 1) / THREADS, THREADS>>>(x, y, N);
}
