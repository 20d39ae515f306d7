// kernel-skills naive byte histogram (project code; the sample has only its privatized kernel):
// every byte of every 32-bit word goes to the global histogram with its own atomic.
__global__ void histogram256_naive_kernel(const unsigned int* data, unsigned int* hist, int n_words) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_words) return;
    unsigned int w = data[i];
    for (int b = 0; b < 4; ++b) atomicAdd(&hist[(w >> (8 * b)) & 0xFFu], 1u);
}
