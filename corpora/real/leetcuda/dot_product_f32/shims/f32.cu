// kernel-skills entry shim (project code): launches dot_prod_f32_f32_kernel
void dot_product(const float* a, const float* b, float* y, int N) {
    cudaMemsetAsync(y, 0, sizeof(float));
    dot_prod_f32_f32_kernel<256><<<((N + 256 - 1) / 256) / 1, 256>>>(const_cast<float*>(a), const_cast<float*>(b), y, N);
}
