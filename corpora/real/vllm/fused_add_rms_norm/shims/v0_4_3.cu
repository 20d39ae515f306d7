// kernel-skills entry shim (project code). vLLM 0.4.3's host binding: one block per token, at
// most 1024 threads below 256 tokens and 256 from there on; the width-8 (16-byte) kernel when
// all three pointers are 16-byte aligned and hidden_size % 8 == 0, else the generic one. The
// kernel updates input and residual in place, so the shim copies them into the outputs first.
template <int width>
static void ks_launch(half* x, half* r, const half* w, float epsilon, int num_tokens, int hidden_size) {
    const int max_block_size = num_tokens < 256 ? 1024 : 256;
    dim3 grid(num_tokens);
    dim3 block(hidden_size < max_block_size ? hidden_size : max_block_size);
    vllm::fused_add_rms_norm_kernel<c10::Half, width><<<grid, block>>>(x, r, w, epsilon, num_tokens,
                                                                        hidden_size);
}

void fused_add_rms_norm(const half* input, const half* residual, const half* weight, half* out,
                        half* residual_out, float epsilon, int num_tokens, int hidden_size) {
    const size_t bytes = (size_t)num_tokens * hidden_size * sizeof(half);
    cudaMemcpyAsync(out, input, bytes, cudaMemcpyDeviceToDevice);
    cudaMemcpyAsync(residual_out, residual, bytes, cudaMemcpyDeviceToDevice);
    const bool aligned = ((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(residual_out) |
                           reinterpret_cast<unsigned long long>(weight)) % 16) == 0;
    if (aligned && hidden_size % 8 == 0) ks_launch<8>(out, residual_out, weight, epsilon, num_tokens, hidden_size);
    else ks_launch<0>(out, residual_out, weight, epsilon, num_tokens, hidden_size);
}
