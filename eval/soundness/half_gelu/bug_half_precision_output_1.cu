// PLANTED BUG: the bf16 output receives the fp16 bit pattern (type confusion between the two 16-bit formats): wrong bf16 values.
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
        y16[i] = __float2half_rn(g);
        __half h = __float2half_rn(g);
        yb[i] = *reinterpret_cast<const __nv_bfloat16*>(&h);  // fp16 bits stored as bf16
    }
}

void half_gelu(const __half* x, __half* y16, __nv_bfloat16* yb, int N) {
    half_gelu_kernel<<<(N + 255) / 256, 256>>>(x, y16, yb, N);
}
