// kernel-skills entry shim (project code): launches scan_exclusive_naive_kernel
void scan(const unsigned int* src, unsigned int* dst, int N) {
    scan_exclusive_naive_kernel<<<(N + 255) / 256, 256>>>(src, dst, N);
}
