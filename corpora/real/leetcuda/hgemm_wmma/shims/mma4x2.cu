// kernel-skills entry shim (project code): launches hgemm_wmma_m16n16k16_mma4x2_kernel
void hgemm(const __half* A, const __half* B, __half* C, int M, int N, int K) {
    dim3 block(256), grid(div_ceil(N, 16 * 2), div_ceil(M, 16 * 4));
    hgemm_wmma_m16n16k16_mma4x2_kernel<16, 16, 16, 4, 2><<<grid, block>>>(const_cast<half*>(A), const_cast<half*>(B), C, M, N, K);
}
