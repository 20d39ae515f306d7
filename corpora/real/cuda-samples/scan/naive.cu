// kernel-skills naive exclusive scan (project code; the sample has only its shared-memory scan):
// each thread sums the elements before its own straight from global memory.
__global__ void scan_exclusive_naive_kernel(const unsigned int* src, unsigned int* dst, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int sum = 0;
    for (int j = 0; j < i; ++j) sum += src[j];
    dst[i] = sum;
}
