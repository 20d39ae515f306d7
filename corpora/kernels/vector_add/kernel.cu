// vector_add: y = a + b. Memory-bound; the expert moves 16 bytes per load and loops grid-stride.
#include <cuda_runtime.h>

// carrier: launch_bounds — 256 threads; carrier: restrict — no-alias pointers
__global__ void __launch_bounds__(256) add_vec4(const float* __restrict__ a, const float* __restrict__ b,
                                                float* __restrict__ y, int n) {
    int n4 = n / 4;
    const float4* a4 = reinterpret_cast<const float4*>(a);  // carrier: vector_load — 16-byte loads
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* y4 = reinterpret_cast<float4*>(y);               // carrier: vector_store — 16-byte stores
    int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {  // carrier: grid_stride
        float4 x = a4[i], z = b4[i];
        y4[i] = make_float4(x.x + z.x, x.y + z.y, x.z + z.z, x.w + z.w);
    }
    // scalar tail: the last n % 4 elements
    for (int i = n4 * 4 + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = a[i] + b[i];
}

void vector_add(const float* a, const float* b, float* y, int N) {
    int blocks = (N / 4 + 255) / 256;
    if (blocks > 132 * 8) blocks = 132 * 8;  // enough resident blocks to fill the GPU; the loop covers the rest
    if (blocks < 1) blocks = 1;
    add_vec4<<<blocks, 256>>>(a, b, y, N);
}
