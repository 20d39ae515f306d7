// PLANTED BUG: the fp16 output reads its neighbour's input (i ^ 1): wrong fp16 values, bf16 right.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
}

__global__ void half_gelu_kernel(const __half* __restrict__ x, __half* __restrict__ y16,
                                 __nv_bfloat16* __restrict__ yb, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float g = gelu(__half2float(x[i]));
        int j = (i ^ 1) < n ? (i ^ 1) : i;
        y16[i] = __float2half_rn(gelu(__half2float(x[j])));
        yb[i] = __float2bfloat16_rn(g);
    }
}

void half_gelu(const __half* x, __half* y16, __nv_bfloat16* yb, int N) {
    half_gelu_kernel<<<(N + 255) / 256, 256>>>(x, y16, yb, N);
}
