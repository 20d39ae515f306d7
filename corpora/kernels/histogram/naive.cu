// histogram, naive: one global atomicAdd per element.
#include <cuda_runtime.h>

__global__ void zero_counts(int* counts, int bins) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < bins) counts[b] = 0;
}

__global__ void histogram_naive(const int* x, int* counts, int n, int bins) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] >= 0 && x[i] < bins) atomicAdd(&counts[x[i]], 1);
}

void histogram(const int* x, int* counts, int N, int BINS) {
    zero_counts<<<(BINS + 255) / 256, 256>>>(counts, BINS);
    histogram_naive<<<(N + 255) / 256, 256>>>(x, counts, N, BINS);
}
