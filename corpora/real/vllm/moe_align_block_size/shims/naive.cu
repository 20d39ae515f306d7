// kernel-skills entry shim (project code): presets the outputs as vLLM's caller does (unused
// slots = numel; expert_ids -1), then one thread.
__global__ void ks_fill(int* p, int n, int value) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = value;
}

void moe_align_block_size(const int* topk_ids, int* sorted_token_ids, int* expert_ids, int* total_tokens_post_pad,
                          int numel, int num_experts, int block_size, int max_padded, int max_blocks) {
    ks_fill<<<(max_padded + 255) / 256, 256>>>(sorted_token_ids, max_padded, numel);
    ks_fill<<<(max_blocks + 255) / 256, 256>>>(expert_ids, max_blocks, -1);
    moe_align_serial<<<1, 1>>>(topk_ids, sorted_token_ids, expert_ids, total_tokens_post_pad, num_experts,
                               block_size, numel);
}
