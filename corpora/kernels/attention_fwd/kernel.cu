// attention_fwd: flash-style fp32 attention. A 128-thread block owns 64 query rows of one (b, h)
// and streams K/V in 32-key tiles through shared memory; scores never reach global memory.
// Per tile: S = Q K^T from shared memory into 4 x 4 register tiles, an online-softmax update of the
// running row max / row sum (rescaling the output accumulators), P written to shared memory, and
// O += P V into 4 x 8 register tiles. The softmax scale is folded into Q when it is staged.
// Thread (ty, tx) = (tid / 8, tid % 8) owns query rows 4ty..4ty+3, keys tx + 8c of each tile and
// output columns 4tx..4tx+3, 32+4tx..32+4tx+3; a row's 8 owners are 8 consecutive lanes.
#include <cuda_runtime.h>
#include <math.h>

#define HEAD_DIM 64
#define BQ 64
#define BKV 32
#define THREADS 128
#define LD (HEAD_DIM + 4)  // carrier: shared_padding — 68-float rows: lanes reading rows tx+8c hit distinct banks
#define PLD (BQ + 4)

__global__ void __launch_bounds__(THREADS, 4)  // carrier: launch_bounds
attention_fwd_kernel(const float* __restrict__ Q, const float* __restrict__ K,  // carrier: restrict
                     const float* __restrict__ V, float* __restrict__ O, int S, float scale) {
    // carrier: shared_tile — Q tile resident for the whole key sweep; K, V, P tiles per step
    __shared__ __align__(16) float Qs[BQ][LD];
    __shared__ __align__(16) float Ks[BKV][LD];
    __shared__ __align__(16) float Vs[BKV][HEAD_DIM];
    __shared__ __align__(16) float Ps[BKV][PLD];

    const int tid = threadIdx.x, tx = tid & 7, ty = tid >> 3;
    const int q0 = blockIdx.x * BQ;
    const size_t head = (size_t)blockIdx.y * S * HEAD_DIM;
    const float* __restrict__ Qh = Q + head;
    const float* __restrict__ Kh = K + head;
    const float* __restrict__ Vh = V + head;

    // Stage Q (scaled): 64 rows x 16 float4, coalesced.
#pragma unroll
    for (int i = 0; i < (BQ * HEAD_DIM / 4) / THREADS; ++i) {
        const int f = tid + i * THREADS, r = f >> 4, c = (f & 15) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (q0 + r < S) v = __ldg(reinterpret_cast<const float4*>(Qh + (size_t)(q0 + r) * HEAD_DIM + c));  // carrier: vector_load — 16-byte loads; carrier: ldg
        *reinterpret_cast<float4*>(&Qs[r][c]) = make_float4(v.x * scale, v.y * scale, v.z * scale, v.w * scale);
    }

    float m[4], l[4], acc[4][8];  // carrier: register_tile — 4 x 8 output accumulators per thread
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r][j] = 0.0f;
    }

    for (int kv0 = 0; kv0 < S; kv0 += BKV) {
#pragma unroll
        for (int i = 0; i < (BKV * HEAD_DIM / 4) / THREADS; ++i) {
            const int f = tid + i * THREADS, r = f >> 4, c = (f & 15) * 4;
            float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
            if (kv0 + r < S) {
                kv = __ldg(reinterpret_cast<const float4*>(Kh + (size_t)(kv0 + r) * HEAD_DIM + c));
                vv = __ldg(reinterpret_cast<const float4*>(Vh + (size_t)(kv0 + r) * HEAD_DIM + c));
            }
            *reinterpret_cast<float4*>(&Ks[r][c]) = kv;
            *reinterpret_cast<float4*>(&Vs[r][c]) = vv;
        }
        __syncthreads();

        // S = (scale Q) K^T for rows 4ty+r, keys tx+8c
        float s[4][4];
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int c = 0; c < 4; ++c) s[r][c] = 0.0f;
#pragma unroll  // carrier: unroll_pragma
        for (int k = 0; k < HEAD_DIM; k += 4) {
            float4 qf[4], kf[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) qf[r] = *reinterpret_cast<const float4*>(&Qs[ty * 4 + r][k]);
#pragma unroll
            for (int c = 0; c < 4; ++c) kf[c] = *reinterpret_cast<const float4*>(&Ks[tx + 8 * c][k]);
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int c = 0; c < 4; ++c)
                {
                    s[r][c] = fmaf(qf[r].x, kf[c].x, s[r][c]);
                    s[r][c] = fmaf(qf[r].y, kf[c].y, s[r][c]);
                    s[r][c] = fmaf(qf[r].z, kf[c].z, s[r][c]);
                    s[r][c] = fmaf(qf[r].w, kf[c].w, s[r][c]);
                }
        }

        // carrier: online_softmax — running row max / row sum, accumulators rescaled per tile
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                if (kv0 + tx + 8 * c >= S) s[r][c] = -INFINITY;  // keys past the end
                mx = fmaxf(mx, s[r][c]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // carrier: warp_shuffle_reduce — across the row's 8 lanes
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            const float m_new = fmaxf(m[r], mx);   // finite: key kv0 is always valid
            const float alpha = __expf(m[r] - m_new);  // carrier: fast_math — __expf; exp(-inf) = 0 on the first tile
            float rs = 0.0f;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                s[r][c] = __expf(s[r][c] - m_new);
                rs += s[r][c];
            }
            rs += __shfl_xor_sync(0xffffffffu, rs, 1);
            rs += __shfl_xor_sync(0xffffffffu, rs, 2);
            rs += __shfl_xor_sync(0xffffffffu, rs, 4);
            l[r] = l[r] * alpha + rs;
            m[r] = m_new;
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[r][j] *= alpha;
        }
        // P^T into shared memory: for key tx+8c, the thread's 4 rows are one float4
#pragma unroll
        for (int c = 0; c < 4; ++c)
            *reinterpret_cast<float4*>(&Ps[tx + 8 * c][ty * 4]) = make_float4(s[0][c], s[1][c], s[2][c], s[3][c]);
        __syncthreads();

        // O += P V
#pragma unroll 8
        for (int j = 0; j < BKV; ++j) {
            const float4 p = *reinterpret_cast<const float4*>(&Ps[j][ty * 4]);
            const float4 v0 = *reinterpret_cast<const float4*>(&Vs[j][tx * 4]);
            const float4 v1 = *reinterpret_cast<const float4*>(&Vs[j][32 + tx * 4]);
            const float pr[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                acc[r][0] += pr[r] * v0.x; acc[r][1] += pr[r] * v0.y; acc[r][2] += pr[r] * v0.z; acc[r][3] += pr[r] * v0.w;
                acc[r][4] += pr[r] * v1.x; acc[r][5] += pr[r] * v1.y; acc[r][6] += pr[r] * v1.z; acc[r][7] += pr[r] * v1.w;
            }
        }
        __syncthreads();  // K, V and P tiles are overwritten by the next step
    }

    float* __restrict__ Oh = O + head;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int row = q0 + ty * 4 + r;
        if (row < S) {
            const float inv = 1.0f / l[r];
            // carrier: vector_store — 16-byte stores of the normalized output
            *reinterpret_cast<float4*>(Oh + (size_t)row * HEAD_DIM + tx * 4) =
                make_float4(acc[r][0] * inv, acc[r][1] * inv, acc[r][2] * inv, acc[r][3] * inv);
            *reinterpret_cast<float4*>(Oh + (size_t)row * HEAD_DIM + 32 + tx * 4) =
                make_float4(acc[r][4] * inv, acc[r][5] * inv, acc[r][6] * inv, acc[r][7] * inv);
        }
    }
}

void attention_fwd(const float* Q, const float* K, const float* V, float* O, int B, int H, int S, int D) {
    (void)D;  // the definition fixes D = 64 (HEAD_DIM)
    dim3 grid((S + BQ - 1) / BQ, B * H);
    attention_fwd_kernel<<<grid, THREADS>>>(Q, K, V, O, S, 1.0f / sqrtf((float)HEAD_DIM));
}
