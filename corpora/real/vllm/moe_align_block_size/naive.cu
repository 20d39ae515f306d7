// moe_align_block_size, naive (the project's own): one thread does everything in order, scanning
// the token list once per expert (count, then place) with no scratch memory.
#include <cuda_runtime.h>

__global__ void moe_align_serial(const int* topk_ids, int* sorted_token_ids, int* expert_ids,
                                 int* total_tokens_post_pad, int num_experts, int block_size, int numel) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    int start = 0;
    for (int e = 0; e < num_experts; ++e) {
        int count = 0;
        for (int i = 0; i < numel; ++i) count += topk_ids[i] == e;
        int slot = start;
        for (int i = 0; i < numel; ++i)
            if (topk_ids[i] == e) sorted_token_ids[slot++] = i;
        const int padded = (count + block_size - 1) / block_size * block_size;
        for (int b = start / block_size; b < (start + padded) / block_size; ++b) expert_ids[b] = e;
        start += padded;
    }
    *total_tokens_post_pad = start;
}
