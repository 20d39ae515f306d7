// kernel-skills naive inclusive scan (project code; the sample has only its shuffle scan):
// each thread sums its own prefix straight from global memory.
__global__ void scan_naive_kernel(const int* x, int* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int sum = 0;
    for (int j = 0; j <= i; ++j) sum += x[j];
    y[i] = sum;
}
