// kernel-skills entry shim (project code): launches hgemm_wmma_m16n16k16_naive_kernel
void hgemm(const __half* A, const __half* B, __half* C, int M, int N, int K) {
    dim3 block(WARP_SIZE), grid(div_ceil(N, 16), div_ceil(M, 16));
    hgemm_wmma_m16n16k16_naive_kernel<16, 16, 16><<<grid, block>>>(const_cast<half*>(A), const_cast<half*>(B), C, M, N, K);
}
