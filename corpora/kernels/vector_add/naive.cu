// vector_add, naive: one element per thread, scalar loads.
#include <cuda_runtime.h>

__global__ void add(const float* a, const float* b, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a[i] + b[i];
}

void vector_add(const float* a, const float* b, float* y, int N) {
    add<<<(N + 255) / 256, 256>>>(a, b, y, N);
}
