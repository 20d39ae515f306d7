// PLANTED BUG: the element index is an unsigned short; it wraps past 65535 (N=70007), so the top elements are never written.
#include <cuda_runtime.h>

#define THREADS 256

__global__ void warp_scan_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    unsigned short i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    float v = i < n ? x[i] : 0.0f;  // every lane takes part in the shuffles, even past the end
    for (int offset = 1; offset < 32; offset <<= 1) {
        float up = __shfl_up_sync(0xffffffffu, v, offset);
        if (lane >= offset) v += up;
    }
    if (i < n) y[i] = v;
}

void warp_scan(const float* x, float* y, int N) {
    int blocks = (N + THREADS - 1) / THREADS;
    warp_scan_kernel<<<blocks, THREADS>>>(x, y, N);
}
