// kernel-skills entry shim (project code): launches sgemv_k128_f32x4_kernel
void sgemv(const float* a, const float* x, float* y, int M, int K) {
    dim3 block(32, 4), grid((M + 4 - 1) / 4);
    sgemv_k128_f32x4_kernel<<<grid, block>>>(const_cast<float*>(a), const_cast<float*>(x), y, M, K);
}
