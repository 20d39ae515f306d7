// PLANTED BUG: the entry fills a 2-int host launch table one slot past its end (host memory: only AddressSanitizer sees it; the kernel is right).
#include <cuda_runtime.h>
#include <cstdlib>

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
    int* table = static_cast<int*>(std::malloc(2 * sizeof(int)));
    table[0] = ((n4 > 0 ? n4 : 1) + threads - 1) / threads;
    table[1] = threads;
    table[2] = N;  // one past the end of the table
    scale_vec4<<<table[0], table[1]>>>(x, y, alpha, N);
    std::free(table);
}
