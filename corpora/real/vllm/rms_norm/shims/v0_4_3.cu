// kernel-skills entry shim (project code). vLLM 0.4.3's host binding: one block per token,
// min(hidden_size, 1024) threads.
void rms_norm(const half* input, const half* weight, half* out, float epsilon, int num_tokens, int hidden_size) {
    dim3 grid(num_tokens);
    dim3 block(hidden_size < 1024 ? hidden_size : 1024);
    vllm::rms_norm_kernel<c10::Half><<<grid, block>>>(out, input, weight, epsilon, num_tokens, hidden_size);
}
