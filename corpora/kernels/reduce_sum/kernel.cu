// reduce_sum: y[0] = sum(x). Memory-bound: each thread streams 16-byte loads through a
// grid-stride loop into four independent accumulators, the block folds its 256 partial sums
// with warp shuffles and one shared-memory step, and only one atomic per block touches y.
#include <cuda_runtime.h>

#define THREADS 256

__global__ void zero_output(float* y) { y[0] = 0.0f; }

// Sum of one value per lane across the warp; every lane gets the total.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll  // carrier: unroll_pragma — five fixed butterfly steps
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, offset);  // carrier: warp_shuffle_reduce — register-to-register tree
    return v;
}

__global__ void __launch_bounds__(THREADS)  // carrier: launch_bounds — fixes the block size for register allocation
reduce_sum_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {  // carrier: restrict
    const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x);  // carrier: vector_load — 16-byte loads, 4 floats per thread
    const int n4 = n >> 2;
    const int stride = gridDim.x * blockDim.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    // Four independent accumulators keep four 16-byte loads in flight per thread.
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    for (; i + 3 * stride < n4; i += 4 * stride) {  // carrier: grid_stride — a fixed grid walks any N
        float4 v0 = __ldg(x4 + i);               // carrier: ldg — read-only data path
        float4 v1 = __ldg(x4 + i + stride);
        float4 v2 = __ldg(x4 + i + 2 * stride);
        float4 v3 = __ldg(x4 + i + 3 * stride);
        a0 += (v0.x + v0.y) + (v0.z + v0.w);
        a1 += (v1.x + v1.y) + (v1.z + v1.w);
        a2 += (v2.x + v2.y) + (v2.z + v2.w);
        a3 += (v3.x + v3.y) + (v3.z + v3.w);
    }
    for (; i < n4; i += stride) {
        float4 v = __ldg(x4 + i);
        a0 += (v.x + v.y) + (v.z + v.w);
    }
    // scalar tail: the last n % 4 elements
    for (int j = (n4 << 2) + blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) a1 += __ldg(x + j);
    float sum = (a0 + a1) + (a2 + a3);

    // carrier: block_reduce_shared — warp totals meet in shared memory, warp 0 folds them
    __shared__ float warp_totals[THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    sum = warp_sum(sum);
    if (lane == 0) warp_totals[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        sum = lane < THREADS / 32 ? warp_totals[lane] : 0.0f;
        sum = warp_sum(sum);
        if (lane == 0) atomicAdd(y, sum);  // carrier: atomic_per_block — one global atomic per block
    }
}

void reduce_sum(const float* x, float* y, int N) {
    int blocks = ((N >> 2) + THREADS - 1) / THREADS;
    if (blocks > 132 * 8) blocks = 132 * 8;  // 8 resident blocks on each of 132 SMs; the loop covers the rest
    if (blocks < 1) blocks = 1;
    zero_output<<<1, 1>>>(y);
    reduce_sum_kernel<<<blocks, THREADS>>>(x, y, N);
}
