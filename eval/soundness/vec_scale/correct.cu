// vec_scale, correct: one float4 per thread for the first N/4*4 elements, then the first N%4 threads write the scalar tail.
#include <cuda_runtime.h>

__global__ void scale_vec4(const float* __restrict__ x, float* __restrict__ y, float alpha, int n) {
    int n4 = n / 4;
    int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v < n4) {
        float4 a = reinterpret_cast<const float4*>(x)[v];
        a.x *= alpha; a.y *= alpha; a.z *= alpha; a.w *= alpha;
        reinterpret_cast<float4*>(y)[v] = a;
    }
    int t = n4 * 4 + v;  // scalar tail: at most 3 elements
    if (t < n) y[t] = alpha * x[t];
}

void vec_scale(const float* x, float* y, float alpha, int N) {
    int n4 = N / 4;
    int threads = 256;
    int blocks = ((n4 > 0 ? n4 : 1) + threads - 1) / threads;
    scale_vec4<<<blocks, threads>>>(x, y, alpha, N);
}
