// PLANTED BUG: the scan is done only for in-range elements, yet the shuffle mask names all 32 lanes (partial last warp).
#include <cuda_runtime.h>

#define THREADS 256

__global__ void warp_scan_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    if (i < n) {
        float v = x[i];
        for (int offset = 1; offset < 32; offset <<= 1) {
            float up = __shfl_up_sync(0xffffffffu, v, offset);
            if (lane >= offset) v += up;
        }
        y[i] = v;
    }
}

void warp_scan(const float* x, float* y, int N) {
    int blocks = (N + THREADS - 1) / THREADS;
    warp_scan_kernel<<<blocks, THREADS>>>(x, y, N);
}
