// attention_fwd, naive: one thread per query row; a pass for the row max, then a pass that
// accumulates exp-weights and the weighted sum of V in a per-thread array.
#include <cuda_runtime.h>
#include <math.h>

#define HEAD_DIM 64

__global__ void attention_naive(const float* Q, const float* K, const float* V, float* O, int rows, int S) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;  // row over B * H * S
    if (row >= rows) return;
    size_t head = (size_t)(row / S) * S * HEAD_DIM;
    const float* q = Q + (size_t)row * HEAD_DIM;
    float scale = 1.0f / sqrtf((float)HEAD_DIM);
    float m = -INFINITY;
    for (int j = 0; j < S; ++j) {
        float s = 0.0f;
        for (int d = 0; d < HEAD_DIM; ++d) s += q[d] * K[head + (size_t)j * HEAD_DIM + d];
        m = fmaxf(m, s * scale);
    }
    float o[HEAD_DIM];
    for (int d = 0; d < HEAD_DIM; ++d) o[d] = 0.0f;
    float l = 0.0f;
    for (int j = 0; j < S; ++j) {
        float s = 0.0f;
        for (int d = 0; d < HEAD_DIM; ++d) s += q[d] * K[head + (size_t)j * HEAD_DIM + d];
        float p = expf(s * scale - m);
        l += p;
        for (int d = 0; d < HEAD_DIM; ++d) o[d] += p * V[head + (size_t)j * HEAD_DIM + d];
    }
    for (int d = 0; d < HEAD_DIM; ++d) O[(size_t)row * HEAD_DIM + d] = o[d] / l;
}

void attention_fwd(const float* Q, const float* K, const float* V, float* O, int B, int H, int S, int D) {
    int rows = B * H * S;
    attention_naive<<<(rows + 127) / 128, 128>>>(Q, K, V, O, rows, S);
}
