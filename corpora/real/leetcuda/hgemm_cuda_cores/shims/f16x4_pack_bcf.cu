// kernel-skills entry shim (project code): launches hgemm_t_8x8_sliced_k_f16x4_pack_bcf_kernel
void hgemm(const __half* A, const __half* B, __half* C, int M, int N, int K) {
    dim3 block(128 / 8, 128 / 8), grid((N + 127) / 128, (M + 127) / 128);
    hgemm_t_8x8_sliced_k_f16x4_pack_bcf_kernel<128, 128, 8, 8, 8, 4><<<grid, block>>>(const_cast<half*>(A), const_cast<half*>(B), C, M, N, K);
}
