// softmax (rows). Rows with N % 4 == 0 and N <= 2048 (the common case): one warp per row, the
// whole row held in registers (V float4 per lane), so x is read from memory exactly once: a max over
// the registers and a warp-shuffle max, then exp(x - max) computed once in place, a warp-shuffle
// sum, and one 16-byte store per slot. No shared memory, no block barrier.
// Longer or unaligned rows: one block per row. A single sweep keeps a running (max, sum) pair per
// thread (online softmax), the pairs are merged with warp shuffles and one shared-memory step, and a
// second sweep (served from L2: the block just read the row) writes exp(x - max) / sum.
// Rows whose length is a multiple of 4 move 16 bytes per access; other rows take a scalar path.
#include <cuda_runtime.h>
#include <float.h>

#define MAX_THREADS 1024

// Merge two (max, sum) pairs: rescale both sums to the larger max.
__device__ __forceinline__ void merge_stats(float& m, float& s, float m2, float s2) {
    float mx = fmaxf(m, m2);
    s = s * __expf(m - mx) + s2 * __expf(m2 - mx);  // carrier: fast_math — hardware exp2-based __expf
    m = mx;
}

template <bool VEC>
__global__ void __launch_bounds__(MAX_THREADS)  // carrier: launch_bounds
softmax_rows(const float* __restrict__ x, float* __restrict__ y, int N) {  // carrier: restrict
    const size_t base = (size_t)blockIdx.x * N;
    const float* __restrict__ xr = x + base;
    float* __restrict__ yr = y + base;

    // -FLT_MAX (not -inf) as the identity keeps exp(m - mx) finite for threads that saw nothing.
    float m = -FLT_MAX, s = 0.0f;
    if (VEC) {
        const float4* __restrict__ x4 = reinterpret_cast<const float4*>(xr);  // carrier: vector_load — 16-byte loads
#pragma unroll 2  // two 16-byte loads in flight per thread
        for (int j = threadIdx.x; j < (N >> 2); j += blockDim.x) {  // carrier: grid_stride — block-stride over the row
            float4 v = __ldg(x4 + j);  // carrier: ldg
            // carrier: online_softmax — running max and rescaled running sum in one pass
            float vm = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
            float mx = fmaxf(m, vm);
            s = s * __expf(m - mx) + (__expf(v.x - mx) + __expf(v.y - mx)) + (__expf(v.z - mx) + __expf(v.w - mx));
            m = mx;
        }
    } else {
        for (int j = threadIdx.x; j < N; j += blockDim.x) {
            float v = __ldg(xr + j);
            float mx = fmaxf(m, v);
            s = s * __expf(m - mx) + __expf(v - mx);
            m = mx;
        }
    }

    // carrier: warp_shuffle_reduce — merge (max, sum) pairs across the warp
#pragma unroll  // carrier: unroll_pragma
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge_stats(m, s, m2, s2);
    }
    // carrier: block_reduce_shared — one pair per warp, every thread folds the (at most 32) pairs
    __shared__ float wm[MAX_THREADS / 32], ws[MAX_THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (lane == 0) { wm[warp] = m; ws[warp] = s; }
    __syncthreads();
    m = lane < nwarps ? wm[lane] : -FLT_MAX;
    s = lane < nwarps ? ws[lane] : 0.0f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge_stats(m, s, m2, s2);
    }
    const float inv = __fdividef(1.0f, s);  // carrier: fast_math — approximate reciprocal, then multiplies

    if (VEC) {
        const float4* __restrict__ x4 = reinterpret_cast<const float4*>(xr);
        float4* __restrict__ y4 = reinterpret_cast<float4*>(yr);  // carrier: vector_store — 16-byte stores
#pragma unroll 2
        for (int j = threadIdx.x; j < (N >> 2); j += blockDim.x) {
            float4 v = __ldg(x4 + j);
            y4[j] = make_float4(__expf(v.x - m) * inv, __expf(v.y - m) * inv,
                                __expf(v.z - m) * inv, __expf(v.w - m) * inv);
        }
    } else {
        for (int j = threadIdx.x; j < N; j += blockDim.x) yr[j] = __expf(__ldg(xr + j) - m) * inv;
    }
}

#define WROWS 8  // rows (warps) per block of the register-resident path

// One warp per row; lane l holds the float4s at 4 * (32 k + l), k < V (coalesced 512-byte loads).
template <int V>
__global__ void __launch_bounds__(32 * WROWS, 3)  // carrier: launch_bounds — <= 85 registers: 3 blocks / 24 rows per SM
softmax_warp_rows(const float* __restrict__ x, float* __restrict__ y, int M, int N) {  // carrier: restrict
    const int row = blockIdx.x * WROWS + (threadIdx.x >> 5);
    if (row >= M) return;  // whole warps leave together
    const int lane = threadIdx.x & 31;
    const size_t base = (size_t)row * N;
    const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x + base);  // carrier: vector_load
    float4* __restrict__ y4 = reinterpret_cast<float4*>(y + base);  // carrier: vector_store
    const int n4 = N >> 2;

    // carrier: register_cache — the row stays in registers from the load to the store (one DRAM read)
    float4 v[V];
    float m = -FLT_MAX;
#pragma unroll  // carrier: unroll_pragma — all V 16-byte loads in flight before the first use
    for (int k = 0; k < V; ++k) {
        const int j = k * 32 + lane;
        v[k] = j < n4 ? __ldg(x4 + j) : make_float4(-FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX);  // carrier: ldg
    }
#pragma unroll
    for (int k = 0; k < V; ++k) m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));  // carrier: warp_shuffle_reduce

    // Padding slots hold -FLT_MAX: exp(-FLT_MAX - m) underflows to 0 and adds nothing.
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        v[k].x = __expf(v[k].x - m);  // carrier: fast_math
        v[k].y = __expf(v[k].y - m);
        v[k].z = __expf(v[k].z - m);
        v[k].w = __expf(v[k].w - m);
        s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    const float inv = __fdividef(1.0f, s);

#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int j = k * 32 + lane;
        if (j < n4) y4[j] = make_float4(v[k].x * inv, v[k].y * inv, v[k].z * inv, v[k].w * inv);
    }
}

void softmax(const float* x, float* y, int M, int N) {
    const bool vec = (N & 3) == 0;  // rows stay 16-byte aligned only when N % 4 == 0
    if (vec && N <= 2048) {
        // Register-resident path: V = float4 slots per lane, the smallest power of two with 128 V >= N.
        const dim3 grid((M + WROWS - 1) / WROWS), block(32 * WROWS);
        if (N <= 128) softmax_warp_rows<1><<<grid, block>>>(x, y, M, N);
        else if (N <= 256) softmax_warp_rows<2><<<grid, block>>>(x, y, M, N);
        else if (N <= 512) softmax_warp_rows<4><<<grid, block>>>(x, y, M, N);
        else if (N <= 1024) softmax_warp_rows<8><<<grid, block>>>(x, y, M, N);
        else softmax_warp_rows<16><<<grid, block>>>(x, y, M, N);
        return;
    }
    // Two float4 (or 8 scalars) per thread per sweep, a whole number of warps, 32..1024 threads.
    int threads = ((N + 7) / 8 + 31) / 32 * 32;
    if (threads < 32) threads = 32;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (vec) softmax_rows<true><<<M, threads>>>(x, y, N);
    else softmax_rows<false><<<M, threads>>>(x, y, N);
}
