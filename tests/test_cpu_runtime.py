"""The CPU executor's runtime: real CUDA C++ compiled with g++ against ks_cpu.h and run on fibers.

Builds are shared per module (one binary of correct kernels, one of buggy kernels, selected by
argv) to keep g++ time low on small machines. Every bug kernel must be reported with the right
KS_ERROR kind; every correct kernel must produce the right values in forward and reverse order.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mining.gate import cpu_rewrite, cpu_toolchain

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or not Path(
    "/usr/include/boost/context/detail/fcontext.hpp").exists(), reason="needs g++ and libboost-context-dev")

# ---------------------------------------------------------------------------------------------
# Correct kernels
# ---------------------------------------------------------------------------------------------
CORRECT_KERNELS = r"""
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__constant__ float c_scale[4];

__global__ void vadd4(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int n4 = n / 4;
    if (i < n4) {
        float4 va = reinterpret_cast<const float4*>(a)[i];
        float4 vb = __ldg(reinterpret_cast<const float4*>(b) + i);
        float4 r = make_float4(va.x + vb.x, va.y + vb.y, va.z + vb.z, va.w + vb.w);
        reinterpret_cast<float4*>(y)[i] = r;
    }
    if (i < n - 4 * n4) y[4 * n4 + i] = a[4 * n4 + i] + b[4 * n4 + i];
}

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) block_reduce(const float* x, float* out, int n) {
    __shared__ float warp_sums[BLOCK / 32];
    float v = 0.f;
    for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += BLOCK * gridDim.x) v += x[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < BLOCK / 32 ? warp_sums[lane] : 0.f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) atomicAdd(out, v);
    }
}

#define TILE 32
__global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE + 1], Bs[TILE][TILE + 1];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ka = t * TILE + threadIdx.x, kb = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[row * K + ka] : 0.f;
        Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[kb * N + col] : 0.f;
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc * c_scale[0];
}

__global__ void histogram256(const unsigned char* data, unsigned* hist, int n) {
    __shared__ unsigned s_hist[256];
    for (int b = threadIdx.x; b < 256; b += blockDim.x) s_hist[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&s_hist[data[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
        if (s_hist[b]) atomicAdd(&hist[b], s_hist[b]);
}

// dynamic shared memory: reverse each block's chunk
__global__ void block_reverse(const float* x, float* y, int n) {
    extern __shared__ float buf[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) buf[threadIdx.x] = x[i];
    __syncthreads();
    int j = blockDim.x - 1 - threadIdx.x;
    int src = blockIdx.x * blockDim.x + j;
    if (i < n && src < n) y[i] = buf[j];
    else if (i < n) y[i] = x[i];
}

__global__ void half_convert(const float* x, __half* h, __nv_bfloat16* b, float* back_h, float* back_b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __half hv = __float2half(x[i]);
        __nv_bfloat16 bv = __float2bfloat16(x[i]);
        hv = __hadd(hv, __float2half_rn(0.0f)) * __float2half(1.0f);
        h[i] = hv;
        b[i] = bv;
        back_h[i] = __half2float(hv);
        back_b[i] = __bfloat162float(bv);
    }
}

// warp-level exchange through shared memory, ordered by __syncwarp (no race)
__global__ void warp_exchange(const int* x, int* y) {
    __shared__ int s[64];
    int t = threadIdx.x;
    s[t] = x[t];
    __syncwarp();
    int v = s[t ^ 1];
    __syncwarp();
    s[t] = v * 2;
    __syncwarp();
    y[t] = s[t] + __popc(__ballot_sync(0xffffffffu, v > 0)) + __syncthreads_count(t < 10);
}

extern __shared__ int ns_dyn[];  // namespace-scope dynamic shared memory (old CUDA samples)
__global__ void ns_dyn_copy(const int* x, int* y) {
    ns_dyn[threadIdx.x] = x[threadIdx.x] + 1;
    __syncthreads();
    y[threadIdx.x] = ns_dyn[blockDim.x - 1 - threadIdx.x];
}

// sub-word shared and global accesses by neighbouring threads (byte-granular shadow: no race)
__global__ void subword(const __half* x, __half* y, unsigned char* flags, int n) {
    __shared__ __half s[66];
    __shared__ unsigned char f[66];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : __float2half(0.f);
    f[threadIdx.x] = (unsigned char)(threadIdx.x & 1);
    __syncthreads();
    int j = (threadIdx.x + 1) % blockDim.x;
    if (i < n) {
        y[i] = __hadd(s[j], __float2half(1.f));
        flags[i] = f[j];
    }
}

// width-16 shuffles, match/reduce, activemask in a branch, barrier predicates, an intra-block
// spin lock (threads yield while spinning) and a volatile flag handed between threads
__global__ void warp_misc(int* out, int* lock, volatile int* flag) {
    int t = threadIdx.x, lane = t % 32;
    int seg_sum = t;
    for (int o = 8; o > 0; o >>= 1) seg_sum += __shfl_xor_sync(0xffffffffu, seg_sum, o, 16);
    unsigned same = __match_any_sync(0xffffffffu, lane / 8);
    int total = __reduce_add_sync(0xffffffffu, 1);
    unsigned am = 0;
    if (lane < 5) am = __activemask();
    __shared__ int wcnt[2];   // per-warp counter: plain init, atomics, plain read, ordered by __syncwarp
    if (lane == 0) wcnt[t / 32] = 0;
    __syncwarp();
    atomicAdd(&wcnt[t / 32], 1);
    __syncwarp();
    int members = wcnt[t / 32];
    int any_big = __syncthreads_or(t == 40);
    int all_small = __syncthreads_and(t < 1000);
    while (atomicCAS(lock, 0, 1) != 0) { }
    int v = atomicAdd(&out[4 * 48], 1);
    atomicExch(lock, 0);
    if (t == 47) *flag = 1;
    while (*flag == 0) { }
    out[4 * t + 0] = seg_sum;
    out[4 * t + 1] = __popc(same);
    out[4 * t + 2] = total + (lane < 5 ? __popc(am) : 0);
    out[4 * t + 3] = any_big * 10 + all_small + (v >= 0 ? 100 : 0) + (members == (t < 32 ? 32 : 16) ? 1000 : 0);
}

void run_vadd(const float* a, const float* b, float* y, int n) {
    vadd4<<<(n / 4 + 255) / 256 + 1, 256>>>(a, b, y, n);
}
void run_reduce(const float* x, float* out, int n, int blocks) {
    cudaMemset(out, 0, sizeof(float));
    block_reduce<256><<<blocks, 256>>>(x, out,
                                      n);
}
void run_matmul(const float* A, const float* B, float* C, int M, int N, int K) {
    float scale[4] = {1.f, 0.f, 0.f, 0.f};
    cudaMemcpyToSymbol(c_scale, scale, sizeof(scale));
    dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    matmul_tiled<<<grid, block>>>(A, B, C, M, N, K);
}
void run_hist(const unsigned char* d, unsigned* h, int n) {
    cudaMemset(h, 0, 256 * sizeof(unsigned));
    histogram256<<<8, 128>>>(d, h, n);
}
void run_reverse(const float* x, float* y, int n) {
    block_reverse<<<(n + 127) / 128, 128, 128 * sizeof(float)>>>(x, y, n);
}
"""

CORRECT_MAIN = r"""
#include <cuda_runtime.h>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <vector>
#include <string>
#include <chrono>
#include "kernel.cu"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s\n", cudaGetErrorString(e_)); return 2; } } while (0)
template <class T> T* dev(const std::vector<T>& h) {
    T* d; cudaMalloc(&d, h.size() * sizeof(T) + (h.empty() ? 1 : 0));
    cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}
template <class T> std::vector<T> host(const T* d, size_t n) {
    std::vector<T> h(n); cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost); return h;
}
static unsigned rng = 12345;
static float frand() { rng = rng * 1664525u + 1013904223u; return ((rng >> 8) & 0xffff) / 65536.0f - 0.5f; }
static double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int main(int argc, char** argv) {
    std::string which = argc > 1 ? argv[1] : "";
    int size = argc > 2 ? atoi(argv[2]) : 0;
    if (which == "vadd") {
        int n = 1000003;
        std::vector<float> a(n), b(n);
        for (int i = 0; i < n; ++i) { a[i] = frand(); b[i] = frand(); }
        float *da = dev(a), *db = dev(b), *dy; CK(cudaMalloc(&dy, n * sizeof(float)));
        double t0 = now_ms();
        run_vadd(da, db, dy, n); CK(cudaDeviceSynchronize());
        printf("TIME_MS %.3f\n", now_ms() - t0);
        auto y = host(dy, n);
        for (int i = 0; i < n; ++i) if (y[i] != a[i] + b[i]) { printf("WRONG vadd at %d\n", i); return 1; }
    } else if (which == "reduce") {
        int n = size ? size : (1 << 18);
        int blocks = argc > 3 ? atoi(argv[3]) : (n + 255) / 256;
        std::vector<float> x(n); double ref = 0;
        for (int i = 0; i < n; ++i) { x[i] = frand(); ref += x[i]; }
        float *dx = dev(x), *dout; CK(cudaMalloc(&dout, sizeof(float)));
        double t0 = now_ms();
        run_reduce(dx, dout, n, blocks); CK(cudaDeviceSynchronize());
        double t1 = now_ms();
        float r = host(dout, 1)[0];
        printf("TIME_MS %.3f\n", t1 - t0);
        if (std::fabs(r - ref) > 1e-3 * (1 + std::fabs(ref))) { printf("WRONG reduce %f vs %f\n", r, ref); return 1; }
    } else if (which == "matmul") {
        int M = size ? size : 100, N = M, K = M;
        std::vector<float> A(M * K), B(K * N);
        for (auto& v : A) v = frand();
        for (auto& v : B) v = frand();
        float *dA = dev(A), *dB = dev(B), *dC; CK(cudaMalloc(&dC, M * N * sizeof(float)));
        double t0 = now_ms();
        run_matmul(dA, dB, dC, M, N, K); CK(cudaDeviceSynchronize());
        double t1 = now_ms();
        printf("TIME_MS %.3f\n", t1 - t0);
        auto C = host(dC, M * N);
        for (int i = 0; i < M; i += (M > 128 ? 7 : 1)) for (int j = 0; j < N; ++j) {
            double r = 0; for (int k = 0; k < K; ++k) r += (double)A[i * K + k] * B[k * N + j];
            if (std::fabs(C[i * N + j] - r) > 1e-3) { printf("WRONG matmul (%d,%d) %f vs %f\n", i, j, C[i * N + j], r); return 1; }
        }
    } else if (which == "hist") {
        int n = 100003;
        std::vector<unsigned char> d(n); std::vector<unsigned> ref(256, 0);
        for (int i = 0; i < n; ++i) { d[i] = (unsigned char)((i * 7919u) ^ (i >> 3)); ref[d[i]]++; }
        unsigned char* dd = dev(d); unsigned* dh; CK(cudaMalloc(&dh, 256 * sizeof(unsigned)));
        run_hist(dd, dh, n); CK(cudaDeviceSynchronize());
        auto h = host(dh, 256);
        for (int b = 0; b < 256; ++b) if (h[b] != ref[b]) { printf("WRONG hist bin %d %u vs %u\n", b, h[b], ref[b]); return 1; }
    } else if (which == "dynsmem") {
        int n = 1000;
        std::vector<float> x(n); for (int i = 0; i < n; ++i) x[i] = (float)i;
        float *dx = dev(x), *dy; CK(cudaMalloc(&dy, n * sizeof(float)));
        run_reverse(dx, dy, n); CK(cudaDeviceSynchronize());
        auto y = host(dy, n);
        for (int i = 0; i < n; ++i) {
            int blk = i / 128, j = 127 - i % 128, src = blk * 128 + j;
            float want = src < n ? x[src] : x[i];
            if (y[i] != want) { printf("WRONG dynsmem at %d: %f vs %f\n", i, y[i], want); return 1; }
        }
    } else if (which == "half") {
        std::vector<float> x = {1.0f / 3.0f, 65504.0f, 70000.0f, -2.5f, 1e-8f, 0.1f, 6.1035156e-05f, 3.0e-06f};
        int n = (int)x.size();
        float* dx = dev(x); __half* dh; __nv_bfloat16* db; float *bh, *bb;
        CK(cudaMalloc(&dh, n * 2)); CK(cudaMalloc(&db, n * 2)); CK(cudaMalloc(&bh, n * 4)); CK(cudaMalloc(&bb, n * 4));
        half_convert<<<1, 32>>>(dx, dh, db, bh, bb, n); CK(cudaDeviceSynchronize());
        auto rh = host(bh, n), rb = host(bb, n);
        auto hbits = host(reinterpret_cast<unsigned short*>(dh), n), bbits = host(reinterpret_cast<unsigned short*>(db), n);
        const unsigned short want_h[] = {0x3555, 0x7bff, 0x7c00, 0xc100, 0x0000, 0x2e66, 0x0400, 0x0032};
        const unsigned short want_b[] = {0x3eab, 0x4780, 0x4789, 0xc020, 0x322c, 0x3dcd, 0x3880, 0x3649};
        for (int i = 0; i < n; ++i) {
            if (hbits[i] != want_h[i]) { printf("WRONG half bits %d: %04x vs %04x\n", i, hbits[i], want_h[i]); return 1; }
            if (bbits[i] != want_b[i]) { printf("WRONG bf16 bits %d: %04x vs %04x\n", i, bbits[i], want_b[i]); return 1; }
        }
        if (rh[0] != 0.333251953125f || rb[0] != 0.333984375f || !std::isinf(rh[2])) { printf("WRONG half values\n"); return 1; }
    } else if (which == "warp") {
        std::vector<int> x(64); for (int i = 0; i < 64; ++i) x[i] = i - 5;
        int *dx = dev(x), *dy; CK(cudaMalloc(&dy, 64 * sizeof(int)));
        warp_exchange<<<1, 64>>>(dx, dy); CK(cudaDeviceSynchronize());
        auto y = host(dy, 64);
        for (int t = 0; t < 64; ++t) {
            int v = x[t ^ 1], pos = 0;
            for (int l = (t / 32) * 32; l < (t / 32) * 32 + 32; ++l) pos += x[l ^ 1] > 0;
            int want = 2 * v + pos + 10;
            if (y[t] != want) { printf("WRONG warp at %d: %d vs %d\n", t, y[t], want); return 1; }
        }
    } else if (which == "nsdyn") {
        std::vector<int> x(96); for (int i = 0; i < 96; ++i) x[i] = 3 * i;
        int *dx = dev(x), *dy; CK(cudaMalloc(&dy, 96 * sizeof(int)));
        ns_dyn_copy<<<1, 96, 96 * sizeof(int)>>>(dx, dy); CK(cudaDeviceSynchronize());
        auto y = host(dy, 96);
        for (int t = 0; t < 96; ++t) if (y[t] != x[95 - t] + 1) { printf("WRONG nsdyn at %d\n", t); return 1; }
    } else if (which == "subword") {
        int n = 1000;
        std::vector<__half> x(n); for (int i = 0; i < n; ++i) x[i] = __float2half((float)(i % 100));
        __half* dx = dev(x); __half* dy; unsigned char* df;
        CK(cudaMalloc(&dy, n * sizeof(__half))); CK(cudaMalloc(&df, n));
        subword<<<(n + 32) / 33, 33>>>(dx, dy, df, n); CK(cudaDeviceSynchronize());
        auto y = host(dy, n); auto f = host(df, n);
        for (int i = 0; i < n; ++i) {
            int b = i / 33, t = i % 33, j = (t + 1) % 33, src = b * 33 + j;
            float want = (src < n ? (float)(src % 100) : 0.f) + 1.f;
            if (__half2float(y[i]) != want || f[i] != (j & 1)) { printf("WRONG subword at %d\n", i); return 1; }
        }
    } else if (which == "warpmisc") {
        int *dout, *dlock, *dflag;
        CK(cudaMalloc(&dout, (4 * 48 + 1) * sizeof(int))); CK(cudaMalloc(&dlock, sizeof(int))); CK(cudaMalloc(&dflag, sizeof(int)));
        CK(cudaMemset(dout, 0, (4 * 48 + 1) * sizeof(int))); CK(cudaMemset(dlock, 0, sizeof(int))); CK(cudaMemset(dflag, 0, sizeof(int)));
        warp_misc<<<1, 48>>>(dout, dlock, dflag); CK(cudaDeviceSynchronize());
        auto o = host(dout, 4 * 48 + 1);
        for (int t = 0; t < 48; ++t) {
            int lane = t % 32, base = t & ~15, seg = 0;
            for (int k = 0; k < 16; ++k) seg += base + k;
            int members = t < 32 ? 32 : 16;
            int want2 = members + (lane < 5 ? 5 : 0);
            int same = t < 32 ? 8 : (lane / 8 < 2 ? 8 : 0);
            if (o[4 * t] != seg || o[4 * t + 2] != want2 || o[4 * t + 3] != 1111 || (same && o[4 * t + 1] != same)) {
                printf("WRONG warpmisc t=%d: %d %d %d %d\n", t, o[4 * t], o[4 * t + 1], o[4 * t + 2], o[4 * t + 3]);
                return 1;
            }
        }
        if (o[4 * 48] != 48) { printf("WRONG warpmisc counter %d\n", o[4 * 48]); return 1; }
    } else {
        printf("unknown test %s\n", which.c_str()); return 3;
    }
    printf("OK %s\n", which.c_str());
    return 0;
}
"""

# ---------------------------------------------------------------------------------------------
# Buggy kernels: each must be reported with the right KS_ERROR kind
# ---------------------------------------------------------------------------------------------
BUG_KERNELS = r"""
#include <cuda_runtime.h>

__global__ void missing_sync(const float* x, float* y, int n) {
    __shared__ float tile[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.f;
    // __syncthreads() missing here
    float right = tile[(threadIdx.x + 1) % blockDim.x];
    if (i < n) y[i] = right;
}

__global__ void early_return(const float* x, float* y, int n) {
    __shared__ float s[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    s[threadIdx.x] = x[i];
    __syncthreads();
    y[i] = s[threadIdx.x] * 2.f;
}

__global__ void shfl_exited(const float* x, float* y) {
    int lane = threadIdx.x % 32;
    if (lane >= 16) return;
    float v = x[threadIdx.x];
    v += __shfl_down_sync(0xffffffffu, v, 8);
    y[threadIdx.x] = v;
}

__global__ void shfl_wrong_mask(const float* x, float* y) {
    int lane = threadIdx.x % 32;
    float v = x[threadIdx.x];
    if (lane < 16) v += __shfl_xor_sync(0xffffffffu, v, 1);
    __syncthreads();
    y[threadIdx.x] = v;
}

__global__ void read_past_end(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) y[i < n ? i : 0] = x[i];
}

__global__ void shared_index_past_end(float* y) {
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    y[threadIdx.x] = s[threadIdx.x];
}

__global__ void hist_no_atomic(const unsigned char* d, unsigned* hist, int n) {
    __shared__ unsigned s_hist[256];
    for (int b = threadIdx.x; b < 256; b += blockDim.x) s_hist[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        s_hist[d[i]]++;
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x) atomicAdd(&hist[b], s_hist[b]);
}

__global__ void global_accumulate(const float* x, float* out, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.f;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.f;
        for (int k = 0; k < blockDim.x; ++k) t += s[k];
        out[0] += t;   // should be atomicAdd(out, t)
    }
}

__global__ void uninit_accumulator(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc;
    for (int k = 0; k < 4; ++k) acc += x[(i * 4 + k) % n];
    if (i < n) y[i] = acc;
}

__global__ void spin_forever(const int* flag, int* out) {
    while (flag[0] == 0) { }
    out[0] = 1;
}

__global__ void misaligned_vec(const float* x, float* y) {
    const float4* p = reinterpret_cast<const float4*>(x + 1);
    float4 v = p[threadIdx.x];
    reinterpret_cast<float4*>(y)[threadIdx.x] = v;
}

__global__ void use_host_pointer(const float* x, float* y) {
    y[threadIdx.x] = x[threadIdx.x];
}

__global__ void big_local_array(float* y) {
    float scratch[65536];
    for (int i = 0; i < 65536; ++i) scratch[i] = i * 0.5f;
    y[threadIdx.x] = scratch[threadIdx.x * 7];
}

__global__ void after_free(const float* x, float* y) { y[threadIdx.x] = x[threadIdx.x]; }

__global__ void warp_race(float* y) {
    __shared__ float s[32];
    s[threadIdx.x] = threadIdx.x;
    int v = s[threadIdx.x ^ 1];   // same warp, no __syncwarp
    y[threadIdx.x] = v;
}

__global__ void atomic_then_plain_read(int* y) {
    __shared__ int count;
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    atomicAdd(&count, 1);
    y[threadIdx.x] = count;   // missing __syncthreads: reads while other warps still add
}

__global__ void divergent_barriers(float* y) {
    if (threadIdx.x < 32) { y[threadIdx.x] = 1.f; __syncthreads(); }
    else { y[threadIdx.x] = 2.f; __syncthreads(); }
}

__global__ void dyn_smem_too_small(float* y) {
    extern __shared__ float buf[];
    buf[threadIdx.x] = 1.f;
    __syncthreads();
    y[threadIdx.x] = buf[threadIdx.x];
}
"""

BUG_MAIN = r"""
#include <cuda_runtime.h>
#include <cstdio>
#include <cstring>
#include <vector>
#include <string>
#include "kernel.cu"

int main(int argc, char** argv) {
    std::string w = argc > 1 ? argv[1] : "";
    int n = 1000;
    std::vector<float> hx(4096);
    for (int i = 0; i < 4096; ++i) hx[i] = 1.0f + (i % 5);
    float *x, *y, *out; int *flag, *iout; unsigned char* d; unsigned* hist;
    cudaMalloc(&x, n * sizeof(float)); cudaMalloc(&y, 4096 * sizeof(float)); cudaMalloc(&out, sizeof(float));
    cudaMalloc(&flag, sizeof(int)); cudaMalloc(&iout, sizeof(int));
    cudaMalloc(&d, 4096); cudaMalloc(&hist, 256 * sizeof(unsigned));
    cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemset(d, 7, 4096); cudaMemset(flag, 0, sizeof(int)); cudaMemset(out, 0, sizeof(float));
    if (w == "missing_sync") missing_sync<<<(n + 127) / 128, 128>>>(x, y, n);
    else if (w == "early_return") early_return<<<(n + 127) / 128, 128>>>(x, y, n);
    else if (w == "shfl_exited") shfl_exited<<<2, 64>>>(x, y);
    else if (w == "shfl_wrong_mask") shfl_wrong_mask<<<1, 64>>>(x, y);
    else if (w == "read_past_end") read_past_end<<<(n + 255) / 256, 256>>>(x, y, n);
    else if (w == "shared_past_end") shared_index_past_end<<<1, 96>>>(y);
    else if (w == "hist_race") hist_no_atomic<<<4, 128>>>(d, hist, 4096);
    else if (w == "global_accum") global_accumulate<<<4, 256>>>(x, out, n);
    else if (w == "uninit") {
        uninit_accumulator<<<(n + 127) / 128, 128>>>(x, y, n);
        std::vector<float> r(n); cudaMemcpy(r.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost);
        for (int i = 0; i < n; ++i) {
            float want = 0; for (int k = 0; k < 4; ++k) want += hx[(i * 4 + k) % n];
            if (r[i] != want) { printf("WRONG uninit at %d: %g vs %g\n", i, r[i], want); return 1; }
        }
    }
    else if (w == "launch_2048") use_host_pointer<<<1, 2048>>>(x, y);
    else if (w == "spin") spin_forever<<<1, 32>>>(flag, iout);
    else if (w == "misaligned") misaligned_vec<<<1, 32>>>(x, y);
    else if (w == "host_pointer") use_host_pointer<<<1, 32>>>(hx.data(), y);
    else if (w == "stack") big_local_array<<<1, 2>>>(y);
    else if (w == "after_free") { cudaFree(x); after_free<<<1, 32>>>(x, y); }
    else if (w == "warp_race") warp_race<<<1, 32>>>(y);
    else if (w == "atomic_then_read") atomic_then_plain_read<<<1, 64>>>(reinterpret_cast<int*>(y));
    else if (w == "divergent_barriers") divergent_barriers<<<1, 64>>>(y);
    else if (w == "dyn_too_small") dyn_smem_too_small<<<1, 64, 32 * sizeof(float)>>>(y);
    else { printf("unknown %s\n", w.c_str()); return 3; }
    cudaError_t e = cudaDeviceSynchronize();
    printf("finished %s (%s)\n", w.c_str(), cudaGetErrorString(e));
    return 0;
}
"""


def _line_of(src: str, needle: str) -> int:
    for i, line in enumerate(src.splitlines(), start=1):
        if needle in line:
            return i
    raise AssertionError(needle)


def _build(tmp: Path, kernel: str, main: str, mode: str = "check") -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "kernel.orig.cu").write_text(kernel)
    (tmp / "kernel.cu").write_text(cpu_rewrite.rewrite(kernel))
    (tmp / "main.cu").write_text(cpu_rewrite.rewrite(main))  # the test mains launch kernels too
    exe = tmp / f"main_{mode}"
    res = cpu_toolchain.compile_cpu_binary(tmp / "main.cu", exe, mode=mode, timeout_s=600)
    assert res.ok, res.stderr[-3000:]
    return exe


def _run(exe: Path, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env)
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=full)


def _ks_error(p: subprocess.CompletedProcess) -> tuple[str, str]:
    for line in p.stderr.splitlines():
        if line.startswith("KS_ERROR "):
            parts = line.split(" ", 2)
            return parts[1], parts[2] if len(parts) > 2 else ""
    return "", ""


@pytest.fixture(scope="module")
def correct_exe(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("cpu_ok"), CORRECT_KERNELS, CORRECT_MAIN)


@pytest.fixture(scope="module")
def bug_exe(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("cpu_bugs"), BUG_KERNELS, BUG_MAIN)


# ---------------------------------------------------------------------------------------------
# Correct kernels pass in both orders, with and without the checker
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("which", ["vadd", "reduce", "matmul", "hist", "dynsmem", "half", "warp", "nsdyn", "subword",
                                   "warpmisc"])
def test_correct_kernels(correct_exe, which, order):
    p = _run(correct_exe, which, KS_ORDER=order, KS_RACECHECK="1" if order == "forward" else "0")
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"OK {which}" in p.stdout
    assert "KS_ERROR" not in p.stderr


def test_correct_kernels_single_worker_with_checks_in_reverse(correct_exe):
    for which in ("reduce", "hist", "matmul"):
        p = _run(correct_exe, which, KS_ORDER="reverse", KS_RACECHECK="1", KS_THREADS="1")
        assert p.returncode == 0 and f"OK {which}" in p.stdout, p.stdout + p.stderr


def test_grid_stride_reduce_with_few_blocks(correct_exe):
    p = _run(correct_exe, "reduce", str(1 << 20), "64")
    assert p.returncode == 0, p.stdout + p.stderr


# ---------------------------------------------------------------------------------------------
# Every bug is caught with the right kind and location
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("which,kind,needle", [
    ("missing_sync", "race", "float right = tile["),
    ("early_return", "barrier_divergence", "__syncthreads();\n    y[i] = s[threadIdx.x] * 2.f;"),
    ("shfl_exited", "barrier_divergence", "v += __shfl_down_sync(0xffffffffu, v, 8);"),
    ("shfl_wrong_mask", "deadlock", None),
    ("read_past_end", "oob", "if (i <= n) y[i < n ? i : 0] = x[i];"),
    ("shared_past_end", "oob", "s[threadIdx.x] = (float)threadIdx.x;"),
    ("hist_race", "race", "s_hist[d[i]]++;"),
    ("global_accum", "race", "out[0] += t;"),
    ("misaligned", "oob", "const float4* p = reinterpret_cast<const float4*>(x + 1);"),
    ("host_pointer", "oob", "y[threadIdx.x] = x[threadIdx.x];\n}\n\n__global__ void big_local_array"),
    ("after_free", "oob", "__global__ void after_free"),
    ("warp_race", "race", "int v = s[threadIdx.x ^ 1];"),
    ("divergent_barriers", "barrier_divergence", None),
    ("atomic_then_read", "race", "y[threadIdx.x] = count;   // missing __syncthreads"),
    ("dyn_too_small", "oob", "buf[threadIdx.x] = 1.f;"),
    ("stack", "stack_overflow", "__global__ void big_local_array(float* y) {"),
    ("launch_2048", "launch_config", 'use_host_pointer<<<1, 2048>>>'),
])
@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_bugs_are_caught(bug_exe, which, kind, needle, order):
    p = _run(bug_exe, which, KS_ORDER=order, timeout=60)
    got_kind, msg = _ks_error(p)
    assert p.returncode == 86, (p.returncode, p.stdout, p.stderr)
    assert got_kind == kind, p.stderr
    if needle is not None:
        src = BUG_MAIN if "<<<" in needle else BUG_KERNELS
        first = needle.split("\n")[0]
        if "\n" in needle:
            start = src.index(needle)
            line = src[:start].count("\n") + 1
        else:
            line = _line_of(src, first)
        fname = "main.cu" if src is BUG_MAIN else "kernel.cu"
        assert f"{fname}:{line}" in msg, (line, msg)


def test_race_message_names_both_threads_and_the_variable(bug_exe):
    p = _run(bug_exe, "missing_sync")
    kind, msg = _ks_error(p)
    assert kind == "race"
    assert "tile" in msg and "thread (" in msg and "block (" in msg and "__syncthreads" in msg
    write_line = _line_of(BUG_KERNELS, "tile[threadIdx.x] = i < n ? x[i] : 0.f;")
    assert f"kernel.cu:{write_line}" in msg  # the other access is located too


def test_oob_message_says_how_far(bug_exe):
    kind, msg = _ks_error(_run(bug_exe, "read_past_end"))
    assert kind == "oob" and "bytes [4000, 4004) of device buffer" in msg and "has 4000 bytes" in msg, msg
    kind, msg = _ks_error(_run(bug_exe, "shared_past_end"))
    assert kind == "oob" and "bytes [256, 260) of __shared__ s" in msg, msg
    kind, msg = _ks_error(_run(bug_exe, "dyn_too_small"))
    assert kind == "oob" and "bytes [128, 132) of the dynamic shared memory" in msg and "has 128 bytes" in msg, msg
    kind, msg = _ks_error(_run(bug_exe, "after_free"))
    assert kind == "oob" and "use after free" in msg, msg


def test_uninitialized_local_gives_wrong_value(bug_exe):
    p = _run(bug_exe, "uninit")
    assert p.returncode == 1 and "WRONG uninit" in p.stdout, p.stdout + p.stderr


def test_infinite_loop_is_stopped_by_timeout(bug_exe):
    with pytest.raises(subprocess.TimeoutExpired):
        _run(bug_exe, "spin", timeout=3)


def test_racecheck_off_skips_race_checks(bug_exe):
    p = _run(bug_exe, "missing_sync", KS_RACECHECK="0")
    assert p.returncode == 0 and "finished missing_sync" in p.stdout, p.stderr
    # barrier checks do not depend on the race checker
    p = _run(bug_exe, "early_return", KS_RACECHECK="0")
    assert _ks_error(p)[0] == "barrier_divergence"


# ---------------------------------------------------------------------------------------------
# Rewrite, diagnostics, unsupported features, toolchain
# ---------------------------------------------------------------------------------------------
def test_rewrite_keeps_every_line():
    src = CORRECT_KERNELS + BUG_KERNELS
    out = cpu_rewrite.rewrite(src)
    assert out.count("\n") == src.count("\n")
    a, b = src.splitlines(), out.splitlines()
    for i, (x, y) in enumerate(zip(a, b)):
        if "<<<" not in x and "__shared__" not in x and "float4*" not in x:
            assert x == y, (i + 1, x, y)
    assert "<<<" not in out
    assert "::ks::launch(\"block_reduce<256>\"" in out
    assert 'auto& As = ::ks::shared_var<float [TILE][TILE + 1], __COUNTER__>' in out
    assert 'auto& Bs = ::ks::shared_var<float [TILE][TILE + 1], __COUNTER__>' in out
    assert "auto buf = ::ks::dynamic_shared<float>();" in out
    assert "static __thread ::std::add_pointer_t<int> ns_dyn;" in out
    assert "float4 va = ::ks::vcast<const float4*>(__FILE__, __LINE__, a)[i];" in out


def test_rewrite_multiline_launch_and_alignment():
    src = ("__global__ void k(float* a, int n) {\n"
           "    __shared__ __align__(16) volatile float s[2][64];\n"
           "    extern __shared__ __align__(16) unsigned char smem[];\n"
           "}\n"
           "void f(float* a, int n, cudaStream_t st) {\n"
           "    k<<<dim3(n / 256,\n"
           "           1), 256, 0, st>>>(a,\n"
           "                            n);\n"
           "}\n")
    out = cpu_rewrite.rewrite(src)
    lines = out.splitlines()
    assert len(lines) == len(src.splitlines())
    assert lines[1].strip() == 'auto& s = ::ks::shared_var<volatile float [2][64], __COUNTER__>(__FILE__, __LINE__, "s");'
    assert lines[2].strip() == "auto smem = ::ks::dynamic_shared<unsigned char>();"
    assert lines[5].startswith('    ::ks::launch("k", __FILE__, __LINE__, dim3(n / 256,')
    assert lines[6].strip() == "1), 256, 0, st, [&](auto... ks_a) { k(ks_a...); }, a,"
    assert lines[7].strip() == "n);"


def test_compile_error_reported_at_original_line(tmp_path):
    kernel = ("#include <cuda_runtime.h>\n"
              "__global__ void k(float* y) {\n"
              "    __shared__ float s[32];\n"
              "    s[threadIdx.x] = 1.f;\n"
              "    __syncthreads();\n"
              "    y[threadIdx.x] = s[threadIdx.x] + undefined_name;\n"
              "}\n"
              "void run(float* y) { k<<<1, 32>>>(y); }\n")
    (tmp_path / "kernel.cu").write_text(cpu_rewrite.rewrite(kernel))
    (tmp_path / "main.cu").write_text('#include "kernel.cu"\nint main() { return 0; }\n')
    res = cpu_toolchain.compile_cpu_binary(tmp_path / "main.cu", tmp_path / "main", timeout_s=300)
    assert not res.ok
    assert "kernel.cu:6:" in res.stderr and "undefined_name" in res.stderr, res.stderr
    assert "-fsanitize=thread" in res.command and "-include" in res.command
    if not os.environ.get("KS_CPU_NO_PCH"):
        assert "/pch-check-" in res.command  # the precompiled ks_cpu.h is used


def test_unsupported_features():
    src = ("#include <mma.h>\n"
           "// asm(\"comment mention is fine\")\n"
           "__global__ void k(float* a) {\n"
           "    asm volatile(\"membar.gl;\");\n"
           "    nvcuda::wmma::fragment<int> f;\n"
           "    __pipeline_memcpy_async(a, a, 16);\n"
           "    cooperative_groups::this_grid().sync();\n"
           "    __nanosleep(100);\n"
           "    const char* s = \"wmma:: in a string\";\n"
           "}\n"
           "void run() { cudaLaunchCooperativeKernel((void*)k, 1, 1, nullptr); }\n")
    found = cpu_toolchain.unsupported_features(src)
    lines = {line for line, _ in found}
    feats = " ".join(f for _, f in found)
    assert 1 in lines and 4 in lines and 5 in lines and 6 in lines and 7 in lines and 11 in lines
    assert 2 not in lines and 8 not in lines and 9 not in lines
    assert "inline assembly" in feats and "tensor cores" in feats and "grid-wide" in feats
    assert cpu_toolchain.unsupported_features(CORRECT_KERNELS) == []


def test_runtime_object_is_cached_per_mode(tmp_path):
    a = cpu_toolchain.build_runtime_object(cpu_toolchain.default_cache_dir(), "check")
    b = cpu_toolchain.build_runtime_object(cpu_toolchain.default_cache_dir(), "check")
    assert a == b and a.exists()
    fp = cpu_toolchain.toolchain_fingerprint()
    assert "g++" in fp.lower() and "ks-cpu-runtime" in fp
    with pytest.raises(ValueError):
        cpu_toolchain.build_runtime_object(tmp_path, "bogus")


ASAN_KERNEL = r"""
#include <cuda_runtime.h>
__global__ void scale(const float* x, float* y, int n, int extra) {
    __shared__ float s[64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n + extra ? x[i] : 0.f;
    __syncthreads();
    if (i < n) y[i] = 2.f * s[threadIdx.x];
}
"""
ASAN_MAIN = r"""
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#include <string>
#include "kernel.cu"
int main(int argc, char** argv) {
    int n = 1000, extra = argc > 1 ? atoi(argv[1]) : 0;
    std::vector<float> h(n, 1.5f);
    float *x, *y; cudaMalloc(&x, n * 4); cudaMalloc(&y, n * 4);
    cudaMemcpy(x, h.data(), n * 4, cudaMemcpyHostToDevice);
    scale<<<(n + 63) / 64, 64>>>(x, y, n, extra);
    cudaMemcpy(h.data(), y, n * 4, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; ++i) if (h[i] != 3.f) { printf("WRONG\n"); return 1; }
    printf("OK\n");
    return 0;
}
"""


def test_asan_mode(tmp_path):
    exe = _build(tmp_path, ASAN_KERNEL, ASAN_MAIN, mode="asan")
    env = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=90"}
    ok = _run(exe, "0", **env)
    assert ok.returncode == 0 and "OK" in ok.stdout, ok.stdout + ok.stderr
    bad = _run(exe, "8", **env)
    assert bad.returncode == 90 and "heap-buffer-overflow" in bad.stderr, bad.stderr[-2000:]
    line = _line_of(ASAN_KERNEL, "s[threadIdx.x] = i < n + extra")
    assert f"kernel.cu:{line}" in bad.stderr
