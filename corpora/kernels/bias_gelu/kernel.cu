// bias_gelu: y = gelu(x + bias) with the tanh approximation, rewritten as h * sigmoid(2u) so one
// fast exponential and one fast division replace tanh. Threads own four columns each: the bias
// float4 is loaded once into registers and reused for every row the thread visits (a grid-stride
// loop over rows), and x / y move as 16-byte vectors. Rows whose length is not a multiple of 4
// are not 16-byte aligned and take a scalar grid-stride path.
#include <cuda_runtime.h>

#define THREADS 256

// 0.5 h (1 + tanh(u)) == h / (1 + exp(-2u)),  u = sqrt(2/pi) (h + 0.044715 h^3)
__device__ __forceinline__ float gelu(float h) {
    const float u2 = -2.0f * 0.7978845608028654f * (h + 0.044715f * h * h * h);
    return __fdividef(h, 1.0f + __expf(u2));  // carrier: fast_math — __expf and __fdividef intrinsics
}

__global__ void __launch_bounds__(THREADS)  // carrier: launch_bounds
bias_gelu_vec4(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ y,  // carrier: restrict
               int M, int N) {
    const int n4 = N >> 2;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;  // float4 column
    if (c < n4) {
        const float4 b = __ldg(reinterpret_cast<const float4*>(bias) + c);  // carrier: ldg; carrier: register_cache — bias reused across rows
#pragma unroll 4  // carrier: unroll_pragma — up to four rows' loads in flight per thread
        for (int r = blockIdx.y; r < M; r += gridDim.y) {  // carrier: grid_stride — over rows
            const size_t off = (size_t)r * n4 + c;
            const float4 v = __ldg(reinterpret_cast<const float4*>(x) + off);  // carrier: vector_load — 16-byte loads
            float4 o;
            // carrier: fused_epilogue — bias add and activation in one pass over memory
            o.x = gelu(v.x + b.x);
            o.y = gelu(v.y + b.y);
            o.z = gelu(v.z + b.z);
            o.w = gelu(v.w + b.w);
            reinterpret_cast<float4*>(y)[off] = o;  // carrier: vector_store — 16-byte stores
        }
    }
}

__global__ void __launch_bounds__(THREADS)
bias_gelu_scalar(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ y, int M, int N) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < N) {
        const float b = __ldg(bias + c);
#pragma unroll 4
        for (int r = blockIdx.y; r < M; r += gridDim.y) {
            const size_t off = (size_t)r * N + c;
            y[off] = gelu(__ldg(x + off) + b);
        }
    }
}

void bias_gelu(const float* x, const float* bias, float* y, int M, int N) {
    const bool vec = (N & 3) == 0;
    const int cols = vec ? N / 4 : N;
    const int gx = (cols + THREADS - 1) / THREADS;
    // Enough blocks for 8 resident per SM on 132 SMs; each walks rows with stride gridDim.y.
    int gy = (132 * 8 + gx - 1) / gx;
    if (gy > M) gy = M;
    if (gy > 65535) gy = 65535;
    dim3 grid(gx, gy);
    if (vec) bias_gelu_vec4<<<grid, THREADS>>>(x, bias, y, M, N);
    else bias_gelu_scalar<<<grid, THREADS>>>(x, bias, y, M, N);
}
