// layernorm: one block per row, the whole row held in registers (V float4 slots per thread), so
// x is read from memory exactly once. Each thread computes exact local (count, mean, M2) from its
// registers; the partial statistics are merged pairwise (Chan/Welford) with warp shuffles and one
// shared-memory step; the normalized row is written with the affine transform fused in.
#include <cuda_runtime.h>

#define MAX_THREADS 512

struct Stats { float n, mean, m2; };

// Chan et al. parallel merge of two (count, mean, sum of squared deviations) triples.
__device__ __forceinline__ Stats merge(Stats a, Stats b) {
    float n = a.n + b.n;
    if (n == 0.0f) return a;
    float d = b.mean - a.mean, f = b.n / n;
    Stats r;
    r.n = n;
    r.mean = a.mean + d * f;
    r.m2 = a.m2 + b.m2 + d * d * a.n * f;
    return r;
}

__device__ __forceinline__ Stats warp_merge(Stats s) {
#pragma unroll  // carrier: unroll_pragma
    for (int off = 16; off > 0; off >>= 1) {
        Stats o;
        o.n = __shfl_xor_sync(0xffffffffu, s.n, off);  // carrier: warp_shuffle_reduce — statistics merged in registers
        o.mean = __shfl_xor_sync(0xffffffffu, s.mean, off);
        o.m2 = __shfl_xor_sync(0xffffffffu, s.m2, off);
        s = merge(s, o);
    }
    return s;
}

// Register layout. VEC (N % 4 == 0): slot k of thread t is the float4 at element 4 * (k * T + t).
// Scalar rows (not 16-byte aligned): element j of thread t is at j * T + t (coalesced scalar loads).
template <int V, bool VEC>
__global__ void __launch_bounds__(MAX_THREADS)  // carrier: launch_bounds
layernorm_rows(const float* __restrict__ x, const float* __restrict__ gamma,  // carrier: restrict
               const float* __restrict__ beta, float* __restrict__ y, int N, float eps) {
    const size_t base = (size_t)blockIdx.x * N;
    const float* __restrict__ xr = x + base;
    float* __restrict__ yr = y + base;
    const int T = blockDim.x, t = threadIdx.x;

    // carrier: register_cache — the row lives in registers between the statistics and the output
    float4 v[V];
    float vs[4 * V];
    float cnt = 0.0f, sum = 0.0f;
    const int valid = t < N ? (N - t + T - 1) / T : 0;  // scalar path: slots j < valid hold elements
    if (VEC) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int e = 4 * (k * T + t);
            v[k] = e < N ? __ldg(reinterpret_cast<const float4*>(xr + e))  // carrier: vector_load — 16-byte loads; carrier: ldg
                         : make_float4(0.f, 0.f, 0.f, 0.f);
            cnt += e < N ? 4.0f : 0.0f;
            sum += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4 * V; ++j) {
            vs[j] = j < valid ? __ldg(xr + j * T + t) : 0.0f;
            sum += vs[j];
        }
    }
    // carrier: single_pass_stats — exact local mean and M2 from registers, one merge tree for both
    if (!VEC) cnt = (float)valid;
    Stats s;
    s.n = cnt;
    s.mean = cnt > 0.0f ? sum / cnt : 0.0f;
    s.m2 = 0.0f;
    if (VEC) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            if (4 * (k * T + t) < N) {
                float dx = v[k].x - s.mean, dy = v[k].y - s.mean, dz = v[k].z - s.mean, dw = v[k].w - s.mean;
                s.m2 += (dx * dx + dy * dy) + (dz * dz + dw * dw);
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4 * V; ++j) {
            float d = j < valid ? vs[j] - s.mean : 0.0f;
            s.m2 += d * d;
        }
    }

    s = warp_merge(s);
    // carrier: block_reduce_shared — one triple per warp in shared memory, every warp folds them all
    __shared__ float sn[MAX_THREADS / 32], smean[MAX_THREADS / 32], sm2[MAX_THREADS / 32];
    const int lane = t & 31, warp = t >> 5, nwarps = T >> 5;
    if (lane == 0) { sn[warp] = s.n; smean[warp] = s.mean; sm2[warp] = s.m2; }
    __syncthreads();
    s.n = lane < nwarps ? sn[lane] : 0.0f;
    s.mean = lane < nwarps ? smean[lane] : 0.0f;
    s.m2 = lane < nwarps ? sm2[lane] : 0.0f;
    s = warp_merge(s);
    const float mean = s.mean;
    const float rstd = rsqrtf(s.m2 / (float)N + eps);  // carrier: fast_math — hardware reciprocal square root

    if (VEC) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int e = 4 * (k * T + t);
            if (e < N) {
                // carrier: fused_epilogue — normalization and the gamma/beta affine in one store
                float4 g = __ldg(reinterpret_cast<const float4*>(gamma + e));
                float4 b = __ldg(reinterpret_cast<const float4*>(beta + e));
                float4 o;
                o.x = (v[k].x - mean) * rstd * g.x + b.x;
                o.y = (v[k].y - mean) * rstd * g.y + b.y;
                o.z = (v[k].z - mean) * rstd * g.z + b.z;
                o.w = (v[k].w - mean) * rstd * g.w + b.w;
                *reinterpret_cast<float4*>(yr + e) = o;  // carrier: vector_store — 16-byte stores
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4 * V; ++j) {
            const int e = j * T + t;
            if (j < valid) yr[e] = (vs[j] - mean) * rstd * __ldg(gamma + e) + __ldg(beta + e);
        }
    }
}

template <int V>
static void launch(const float* x, const float* gamma, const float* beta, float* y, int M, int N, float eps,
                   int threads) {
    if ((N & 3) == 0) layernorm_rows<V, true><<<M, threads>>>(x, gamma, beta, y, N, eps);
    else layernorm_rows<V, false><<<M, threads>>>(x, gamma, beta, y, N, eps);
}

void layernorm(const float* x, const float* gamma, const float* beta, float* y, int M, int N, float eps) {
    // Smallest register slot count V whose block (a whole number of warps) fits in 512 threads.
    const int n4 = (N + 3) / 4;
    int V = 1;
    while (V < 16 && (n4 + V - 1) / V > MAX_THREADS) V *= 2;
    int threads = ((n4 + V - 1) / V + 31) / 32 * 32;
    switch (V) {
        case 1: launch<1>(x, gamma, beta, y, M, N, eps, threads); break;
        case 2: launch<2>(x, gamma, beta, y, M, N, eps, threads); break;
        case 4: launch<4>(x, gamma, beta, y, M, N, eps, threads); break;
        case 8: launch<8>(x, gamma, beta, y, M, N, eps, threads); break;
        default: launch<16>(x, gamma, beta, y, M, N, eps, threads); break;
    }
}
