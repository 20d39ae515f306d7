// kernel-skills entry shim (project code). Presets the outputs as vLLM's caller does (unused
// slots = numel; expert_ids -1), then vLLM 0.4.3's host binding: one block of num_experts threads
// with ((num_experts + 1) * num_experts + num_experts + 1) ints of dynamic shared memory, the
// kernel's shared-memory limit raised to that size first.
__global__ void ks_fill(int* p, int n, int value) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = value;
}

void moe_align_block_size(const int* topk_ids, int* sorted_token_ids, int* expert_ids, int* total_tokens_post_pad,
                          int numel, int num_experts, int block_size, int max_padded, int max_blocks) {
    ks_fill<<<(max_padded + 255) / 256, 256>>>(sorted_token_ids, max_padded, numel);
    ks_fill<<<(max_blocks + 255) / 256, 256>>>(expert_ids, max_blocks, -1);
    const int shared_mem = ((num_experts + 1) * num_experts + (num_experts + 1)) * sizeof(int32_t);
    cudaFuncSetAttribute(vllm::moe_align_block_size_kernel<int>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         shared_mem);
    // launched by name (vLLM launches through a local function pointer, which the CPU executor's
    // launch rewrite would capture as a host variable)
    vllm::moe_align_block_size_kernel<int>
        <<<1, num_experts, ((num_experts + 1) * num_experts + (num_experts + 1)) * sizeof(int32_t)>>>(
        const_cast<int*>(topk_ids), sorted_token_ids, expert_ids, total_tokens_post_pad, num_experts, block_size,
        (size_t)numel);
}
