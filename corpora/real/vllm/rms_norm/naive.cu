// rms_norm, naive (the project's own): one thread per token walks its whole row twice (sum of
// squares, then the scaled write), with the statistics in float32 like vLLM's kernel.
#include <cuda_fp16.h>

__global__ void rms_norm_row_per_thread(__half* out, const __half* input, const __half* weight,
                                        float epsilon, int num_tokens, int hidden_size) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= num_tokens) return;
    const __half* row = input + (long long)t * hidden_size;
    float ss = 0.0f;
    for (int i = 0; i < hidden_size; ++i) {
        float v = __half2float(row[i]);
        ss += v * v;
    }
    float inv = 1.0f / sqrtf(ss / hidden_size + epsilon);
    for (int i = 0; i < hidden_size; ++i)
        out[(long long)t * hidden_size + i] = __hmul(__float2half(__half2float(row[i]) * inv), weight[i]);
}
