import numpy as np


def run(topk_ids, num_experts, block_size, max_padded, max_blocks):
    numel = topk_ids.shape[0]
    counts = np.bincount(topk_ids, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    starts = np.concatenate([[0], np.cumsum(padded)])
    sorted_ids = np.full(max_padded, numel, dtype=np.int32)
    expert_ids = np.full(max_blocks, -1, dtype=np.int32)
    for e in range(num_experts):
        tokens = np.nonzero(topk_ids == e)[0]  # ascending: the kernel keeps token order per expert
        sorted_ids[starts[e]:starts[e] + len(tokens)] = tokens
        expert_ids[starts[e] // block_size:starts[e + 1] // block_size] = e
    return sorted_ids, expert_ids, np.array([starts[-1]], dtype=np.int32)
