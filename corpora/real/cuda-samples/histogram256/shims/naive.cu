// kernel-skills entry shim (project code): launches histogram256_naive_kernel
void histogram256(const unsigned int* data, unsigned int* hist, int N) {
    cudaMemsetAsync(hist, 0, 256 * sizeof(unsigned int));
    histogram256_naive_kernel<<<(N + 255) / 256, 256>>>(data, hist, N);
}
