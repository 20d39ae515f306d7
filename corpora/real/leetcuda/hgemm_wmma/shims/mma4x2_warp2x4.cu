// kernel-skills entry shim (project code): launches hgemm_wmma_m16n16k16_mma4x2_warp2x4_kernel
void hgemm(const __half* A, const __half* B, __half* C, int M, int N, int K) {
    dim3 block(256), grid(div_ceil(N, 16 * 2 * 4), div_ceil(M, 16 * 4 * 2));
    hgemm_wmma_m16n16k16_mma4x2_warp2x4_kernel<16, 16, 16, 4, 2, 2, 4><<<grid, block>>>(const_cast<half*>(A), const_cast<half*>(B), C, M, N, K);
}
