// rmsnorm_residual: one block per row. The residual add is fused into the load (h = x + residual
// is stored once and kept in registers), the sum of squares is reduced with warp shuffles and one
// shared-memory step, and the scaled, weighted row is written from registers: x and residual are
// read once, both outputs written once.
#include <cuda_runtime.h>

#define MAX_THREADS 512

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll  // carrier: unroll_pragma
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);  // carrier: warp_shuffle_reduce
    return v;
}

// Register layout. VEC (N % 4 == 0): slot k of thread t is the float4 at element 4 * (k * T + t).
// Scalar rows (not 16-byte aligned): element j of thread t is at j * T + t (coalesced scalar loads).
template <int V, bool VEC>
__global__ void __launch_bounds__(MAX_THREADS)  // carrier: launch_bounds
rmsnorm_rows(const float* __restrict__ x, const float* __restrict__ residual,  // carrier: restrict
             const float* __restrict__ weight, float* __restrict__ y, float* __restrict__ residual_out,
             int N, float eps) {
    const size_t base = (size_t)blockIdx.x * N;
    const float* __restrict__ xr = x + base;
    const float* __restrict__ rr = residual + base;
    float* __restrict__ hr = residual_out + base;
    float* __restrict__ yr = y + base;
    const int T = blockDim.x, t = threadIdx.x;

    float4 h[V];  // carrier: register_cache — h stays in registers from the add to the output
    float hs[4 * V];
    float ss = 0.0f;
    const int valid = t < N ? (N - t + T - 1) / T : 0;  // scalar path: slots j < valid hold elements
    if (VEC) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int e = 4 * (k * T + t);
            if (e < N) {
                float4 a = __ldg(reinterpret_cast<const float4*>(xr + e));  // carrier: vector_load — 16-byte loads; carrier: ldg
                float4 b = __ldg(reinterpret_cast<const float4*>(rr + e));
                // carrier: fused_residual — the residual add happens in registers and is stored once
                h[k] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
                *reinterpret_cast<float4*>(hr + e) = h[k];  // carrier: vector_store — 16-byte stores
            } else {
                h[k] = make_float4(0.f, 0.f, 0.f, 0.f);
            }
            ss += (h[k].x * h[k].x + h[k].y * h[k].y) + (h[k].z * h[k].z + h[k].w * h[k].w);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4 * V; ++j) {
            const int e = j * T + t;
            hs[j] = 0.0f;
            if (j < valid) {
                hs[j] = __ldg(xr + e) + __ldg(rr + e);
                hr[e] = hs[j];
            }
            ss += hs[j] * hs[j];
        }
    }

    // carrier: block_reduce_shared — warp sums meet in shared memory, every warp folds them all
    __shared__ float partial[MAX_THREADS / 32];
    const int lane = t & 31, warp = t >> 5, nwarps = T >> 5;
    ss = warp_sum(ss);
    if (lane == 0) partial[warp] = ss;
    __syncthreads();
    ss = warp_sum(lane < nwarps ? partial[lane] : 0.0f);
    const float scale = rsqrtf(ss / (float)N + eps);  // carrier: fast_math — hardware reciprocal square root

    if (VEC) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int e = 4 * (k * T + t);
            if (e < N) {
                float4 w = __ldg(reinterpret_cast<const float4*>(weight + e));
                // carrier: fused_epilogue — normalization and weight applied in the same store
                *reinterpret_cast<float4*>(yr + e) =
                    make_float4(h[k].x * scale * w.x, h[k].y * scale * w.y, h[k].z * scale * w.z, h[k].w * scale * w.w);
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4 * V; ++j) {
            const int e = j * T + t;
            if (j < valid) yr[e] = hs[j] * scale * __ldg(weight + e);
        }
    }
}

template <int V>
static void launch(const float* x, const float* residual, const float* weight, float* y, float* residual_out,
                   int M, int N, float eps, int threads) {
    if ((N & 3) == 0) rmsnorm_rows<V, true><<<M, threads>>>(x, residual, weight, y, residual_out, N, eps);
    else rmsnorm_rows<V, false><<<M, threads>>>(x, residual, weight, y, residual_out, N, eps);
}

void rmsnorm_residual(const float* x, const float* residual, const float* weight, float* y, float* residual_out,
                      int M, int N, float eps) {
    // Smallest register slot count V whose block (a whole number of warps) fits in 512 threads.
    const int n4 = (N + 3) / 4;
    int V = 1;
    while (V < 16 && (n4 + V - 1) / V > MAX_THREADS) V *= 2;
    const int threads = ((n4 + V - 1) / V + 31) / 32 * 32;
    switch (V) {
        case 1: launch<1>(x, residual, weight, y, residual_out, M, N, eps, threads); break;
        case 2: launch<2>(x, residual, weight, y, residual_out, M, N, eps, threads); break;
        case 4: launch<4>(x, residual, weight, y, residual_out, M, N, eps, threads); break;
        case 8: launch<8>(x, residual, weight, y, residual_out, M, N, eps, threads); break;
        default: launch<16>(x, residual, weight, y, residual_out, M, N, eps, threads); break;
    }
}
