// kernel-skills entry shim (project code): launches sgemm_t_8x8_sliced_k_f32x4_bcf_kernel as the LeetCUDA host binding does.
void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(128 / 8, 128 / 8);
    dim3 grid((N + 127) / 128, (M + 127) / 128);
    sgemm_t_8x8_sliced_k_f32x4_bcf_kernel<128, 128, 8, 8, 8>
        <<<grid, block>>>(const_cast<float*>(A), const_cast<float*>(B), C, M, N, K);
}
