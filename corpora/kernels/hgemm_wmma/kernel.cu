// hgemm_wmma: C (fp32) = A (fp16) @ B (fp16) on tensor cores through the wmma API.
// A 256-thread block computes a 128 x 128 tile; its 8 warps form a 2 x 4 grid and each warp owns
// a 64 x 32 sub-tile (4 x 2 accumulator fragments of 16 x 16). K advances 32 at a time through a
// 3-stage shared-memory ring filled by cp.async, so two k-slices are in flight while the third is
// multiplied. Tile-aligned sizes store fragments straight to C; other sizes take guarded scalar
// loads and a per-warp shared staging tile for the edge stores.
// GPU-only: wmma and cp.async have no CPU-executor equivalent.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <mma.h>

using namespace nvcuda;

#define BM 128
#define BN 128
#define BK 32
#define STAGES 3
#define A_LD (BK + 8)   // carrier: shared_padding — +8 halves (16 bytes) per row breaks ldmatrix bank conflicts
#define B_LD (BN + 8)
#define A_STAGE (BM * A_LD)
#define B_STAGE (BK * B_LD)
#define SMEM_BYTES (STAGES * (A_STAGE + B_STAGE) * 2)

template <bool CHECKED>
__global__ void __launch_bounds__(256)  // carrier: launch_bounds
hgemm_wmma_kernel(const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C,  // carrier: restrict
                  int M, int N, int K) {
    // carrier: shared_tile — 3-stage ring of A (128 x 32) and B (32 x 128) slices in dynamic shared memory
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __half* As = reinterpret_cast<__half*>(smem_raw);
    __half* Bs = As + STAGES * A_STAGE;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wm = warp >> 2, wn = warp & 3;  // warp grid 2 x 4: rows wm*64, cols wn*32
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;

    // Each thread moves two 16-byte chunks of A and two of B per stage.
    auto load_stage = [&](int stage, int k0) {
        __half* as = As + stage * A_STAGE;
        __half* bs = Bs + stage * B_STAGE;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const int idx = tid + c * 256;
            const int ar = idx >> 2, ak = (idx & 3) * 8;   // A: 128 rows x 4 chunks
            const int br = idx >> 4, bc = (idx & 15) * 8;  // B: 32 rows x 16 chunks
            if (!CHECKED) {
                // carrier: async_copy — cp.async global->shared, 16 bytes, bypassing registers
                __pipeline_memcpy_async(as + ar * A_LD + ak, A + (size_t)(bm + ar) * K + k0 + ak, 16);
                __pipeline_memcpy_async(bs + br * B_LD + bc, B + (size_t)(k0 + br) * N + bn + bc, 16);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const int gr = bm + ar, gk = k0 + ak + e;
                    as[ar * A_LD + ak + e] = (gr < M && gk < K) ? A[(size_t)gr * K + gk] : __float2half(0.0f);
                    const int hk = k0 + br, hc = bn + bc + e;
                    bs[br * B_LD + bc + e] = (hk < K && hc < N) ? B[(size_t)hk * N + hc] : __float2half(0.0f);
                }
            }
        }
    };

    // carrier: register_tile — 4 x 2 accumulator fragments per warp (64 x 32 outputs)
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    const int ksteps = (K + BK - 1) / BK;
    // carrier: multi_stage_pipeline — prologue fills STAGES-1 slices before the first multiply
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ksteps) load_stage(s, s * BK);
        __pipeline_commit();
    }

    for (int kt = 0; kt < ksteps; ++kt) {
        __pipeline_wait_prior(STAGES - 2);  // this thread's copies for slice kt have landed
        __syncthreads();                    // everyone's have; and slice kt-1's stage is free again
        const int next = kt + STAGES - 1;
        if (next < ksteps) load_stage(next % STAGES, next * BK);
        __pipeline_commit();

        const __half* as = As + (kt % STAGES) * A_STAGE;
        const __half* bs = Bs + (kt % STAGES) * B_STAGE;
#pragma unroll  // carrier: unroll_pragma
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb[2];
#pragma unroll
            for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(fa[i], as + (wm * 64 + i * 16) * A_LD + kk, A_LD);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], bs + kk * B_LD + wn * 32 + j * 16, B_LD);
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j)
                    wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);  // carrier: tensor_core_wmma — HMMA 16x16x16
        }
    }
    __pipeline_wait_prior(0);

    if (!CHECKED) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                float* dst = C + (size_t)(bm + wm * 64 + i * 16) * N + bn + wn * 32 + j * 16;
                wmma::store_matrix_sync(dst, acc[i][j], N, wmma::mem_row_major);
            }
    } else {
        __syncthreads();  // the pipeline stages are reused as per-warp staging tiles
        float* stage = reinterpret_cast<float*>(smem_raw) + warp * 256;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_row_major);
                __syncwarp();
                const int r0 = bm + wm * 64 + i * 16, c0 = bn + wn * 32 + j * 16;
#pragma unroll
                for (int e = lane; e < 256; e += 32) {
                    const int r = r0 + (e >> 4), c = c0 + (e & 15);
                    if (r < M && c < N) C[(size_t)r * N + c] = stage[e];
                }
                __syncwarp();
            }
    }
}

void hgemm_wmma(const __half* A, const __half* B, float* C, int M, int N, int K) {
    static bool configured = false;
    if (!configured) {  // more than 48 KB of dynamic shared memory needs an explicit opt-in
        cudaFuncSetAttribute(hgemm_wmma_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
        cudaFuncSetAttribute(hgemm_wmma_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
        configured = true;
    }
    dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    if (M % BM == 0 && N % BN == 0 && K % BK == 0)
        hgemm_wmma_kernel<false><<<grid, 256, SMEM_BYTES>>>(A, B, C, M, N, K);
    else
        hgemm_wmma_kernel<true><<<grid, 256, SMEM_BYTES>>>(A, B, C, M, N, K);
}
