// sgemm: C = A @ B (float32, row-major). A 256-thread block computes a 128 x 128 tile of C; each
// thread owns an 8 x 8 register tile (two 4 x 4 quadrants 64 rows/cols apart, so its shared-memory
// fragment reads are conflict-free float4s). K advances in steps of 8 through two shared-memory
// stages: while the block multiplies stage s, the next A/B slices are already in flight from
// global memory into registers and land in stage s^1, so one barrier per step suffices.
// The A slice is stored transposed (k-major) so a thread's 8 A values for one k are two float4s.
// Sizes that are not multiples of the tile take the same kernel with guarded scalar loads/stores.
#include <cuda_runtime.h>

#define BM 128
#define BN 128
#define BK 8
#define APAD 4  // keeps k-major A rows 16-byte aligned and makes the transposing stores conflict-free

template <bool CHECKED>
__global__ void __launch_bounds__(256, 2)  // carrier: launch_bounds — 2 blocks/SM, at most 128 registers
sgemm_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,  // carrier: restrict
            int M, int N, int K) {
    // carrier: shared_tile — A and B slices staged once per block, reused by 128 threads each
    // carrier: double_buffer — two stages; compute on one while the other is refilled
    // carrier: transposed_tile — A kept k-major so fragments are contiguous along m
    // carrier: shared_padding — +4 floats per A row
    __shared__ __align__(16) float As[2][BK][BM + APAD];
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid & 15, ty = tid >> 4;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    // global -> shared mapping: A: row tid/2, k offset 4*(tid%2); B: k row tid/32, col 4*(tid%32)
    const int a_r = tid >> 1, a_k = (tid & 1) * 4;
    const int b_r = tid >> 5, b_c = (tid & 31) * 4;
    const float* __restrict__ a_src = A + (size_t)(bm + a_r) * K + a_k;
    const float* __restrict__ b_src = B + (size_t)b_r * N + bn + b_c;

    float4 ra, rb;  // the next k-slice, in flight while the current one is multiplied
    auto load_slice = [&](int k0) {
        if (!CHECKED) {
            ra = __ldg(reinterpret_cast<const float4*>(a_src + k0));  // carrier: vector_load — 16-byte loads; carrier: ldg
            rb = __ldg(reinterpret_cast<const float4*>(b_src + (size_t)k0 * N));
        } else {
            const bool arow = bm + a_r < M;
            const int ak = k0 + a_k;
            ra.x = arow && ak + 0 < K ? __ldg(a_src + k0 + 0) : 0.0f;
            ra.y = arow && ak + 1 < K ? __ldg(a_src + k0 + 1) : 0.0f;
            ra.z = arow && ak + 2 < K ? __ldg(a_src + k0 + 2) : 0.0f;
            ra.w = arow && ak + 3 < K ? __ldg(a_src + k0 + 3) : 0.0f;
            const bool brow = k0 + b_r < K;
            const int bc = bn + b_c;
            const float* bp = b_src + (size_t)k0 * N;
            rb.x = brow && bc + 0 < N ? __ldg(bp + 0) : 0.0f;
            rb.y = brow && bc + 1 < N ? __ldg(bp + 1) : 0.0f;
            rb.z = brow && bc + 2 < N ? __ldg(bp + 2) : 0.0f;
            rb.w = brow && bc + 3 < N ? __ldg(bp + 3) : 0.0f;
        }
    };
    auto store_slice = [&](int s) {
        As[s][a_k + 0][a_r] = ra.x;
        As[s][a_k + 1][a_r] = ra.y;
        As[s][a_k + 2][a_r] = ra.z;
        As[s][a_k + 3][a_r] = ra.w;
        *reinterpret_cast<float4*>(&Bs[s][b_r][b_c]) = rb;
    };

    // carrier: register_tile — 8 x 8 accumulators per thread, 64 FMAs per 4 shared loads
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    const int ksteps = (K + BK - 1) / BK;
    load_slice(0);
    store_slice(0);
    __syncthreads();
    for (int kt = 0; kt < ksteps; ++kt) {
        const int cur = kt & 1;
        if (kt + 1 < ksteps) load_slice((kt + 1) * BK);  // prefetch: global loads overlap the FMAs below
#pragma unroll  // carrier: unroll_pragma — fully unrolled inner product over the k-slice
        for (int k = 0; k < BK; ++k) {
            float a[8], b[8];
            const float4 a0 = *reinterpret_cast<const float4*>(&As[cur][k][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[cur][k][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[cur][k][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[cur][k][64 + tx * 4]);
            a[0] = a0.x; a[1] = a0.y; a[2] = a0.z; a[3] = a0.w; a[4] = a1.x; a[5] = a1.y; a[6] = a1.z; a[7] = a1.w;
            b[0] = b0.x; b[1] = b0.y; b[2] = b0.z; b[3] = b0.w; b[4] = b1.x; b[5] = b1.y; b[6] = b1.z; b[7] = b1.w;
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (kt + 1 < ksteps) store_slice(cur ^ 1);
        __syncthreads();
    }

    // Epilogue: rows ty*4+i and 64+ty*4+i, columns tx*4.. and 64+tx*4..
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = bm + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int col = bn + h * 64 + tx * 4;
            if (!CHECKED) {
                *reinterpret_cast<float4*>(C + (size_t)row * N + col) =  // carrier: vector_store — 16-byte stores
                    make_float4(acc[i][4 * h + 0], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
            } else if (row < M) {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (col + j < N) C[(size_t)row * N + col + j] = acc[i][4 * h + j];
            }
        }
    }
}

void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    if (M % BM == 0 && N % BN == 0 && K % BK == 0) sgemm_tiled<false><<<grid, 256>>>(A, B, C, M, N, K);
    else sgemm_tiled<true><<<grid, 256>>>(A, B, C, M, N, K);
}
