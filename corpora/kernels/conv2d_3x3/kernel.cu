// conv2d_3x3 (depthwise): a 64 x 4 block produces a 256-wide x 32-tall output tile of one channel.
// The block first stages the 34 x 258 input window (its one-pixel halo included) in shared memory:
// every thread issues all of its 16-byte row loads back to back (about 35 KB in flight per block),
// the two halo columns are scalar loads by 68 threads, zeros are written outside the image. A wide
// tile keeps the halo re-reads to 2/32 rows and 2/256 columns. Each thread then computes a 4-wide
// x 8-tall patch: one 16-byte shared read per input row plus its left / right neighbours from the
// adjacent lanes (shuffles), a sliding three-row register window, and one 16-byte store per row.
// When W % 4 != 0 rows are not 16-byte aligned: the same tile is staged with coalesced scalar loads
// and stored with guarded scalar stores.
#include <cuda_runtime.h>

#define TX 64             // threads along W; each owns 4 adjacent columns
#define TY 4              // threads along H
#define NT (TX * TY)
#define TW (4 * TX)       // output tile width  (256)
#define RPT 8             // output rows per thread
#define TH (TY * RPT)     // output tile height (32)
#define SH (TH + 2)       // staged rows including the halo
#define OFF 4             // interior starts at column 4 (16-byte aligned); halo at 3 and OFF + TW
#define SW (TW + 8)       // staged row pitch (multiple of 4 floats)

// One staged input row as six floats around a thread's four columns: l | v.x v.y v.z v.w | r.
// The neighbours come from the adjacent lanes' float4; the warp's edge lanes read them from shared.
__device__ __forceinline__ void load_row(const float (*tile)[SW], int r, int tx, int lane, float p[6]) {
    const float4 v = *reinterpret_cast<const float4*>(&tile[r][OFF + 4 * tx]);
    float l = __shfl_up_sync(0xffffffffu, v.w, 1);
    float rr = __shfl_down_sync(0xffffffffu, v.x, 1);
    if (lane == 0) l = tile[r][OFF + 4 * tx - 1];
    if (lane == 31) rr = tile[r][OFF + 4 * tx + 4];
    p[0] = l; p[1] = v.x; p[2] = v.y; p[3] = v.z; p[4] = v.w; p[5] = rr;
}

template <bool VEC>
__global__ void __launch_bounds__(NT, 4)  // carrier: launch_bounds — 256 threads, >= 4 blocks (1024 threads) per SM
conv3x3_wide(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,  // carrier: restrict
             int H, int W) {
    __shared__ __align__(16) float tile[SH][SW];  // carrier: halo_tile — 32 x 256 output tile plus a 1-pixel border

    const int c = blockIdx.z;
    const int j0 = blockIdx.x * TW, i0 = blockIdx.y * TH;
    const size_t plane = (size_t)c * H * W;
    const float* __restrict__ xc = x + plane;
    float* __restrict__ yc = y + plane;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * TX + tx, lane = tid & 31;

    // carrier: shared_tile — cooperative load of the (TH + 2) x (TW + 2) input window, read by all threads
    // Halo columns j0 - 1 and j0 + TW: one scalar per thread for the first 2 * SH threads.
    if (tid < 2 * SH) {
        const int r = tid >> 1, right = tid & 1;
        const int gi = i0 + r - 1, gj = right ? j0 + TW : j0 - 1;
        tile[r][right ? OFF + TW : OFF - 1] =
            (gi >= 0 && gi < H && gj >= 0 && gj < W) ? __ldg(xc + (size_t)gi * W + gj) : 0.0f;  // carrier: ldg
    }
    if (VEC) {
        // Thread (tx, ty) loads the float4 at columns j0 + 4 tx .. + 3 of rows ty, ty + 4, ...; with
        // W % 4 == 0 a float4 is either wholly inside the row or wholly past its end.
        const int gj = j0 + 4 * tx;
        float4 v[(SH + TY - 1) / TY];
#pragma unroll  // carrier: unroll_pragma — all nine 16-byte loads issued before the first shared store
        for (int k = 0; k < (SH + TY - 1) / TY; ++k) {
            const int r = ty + k * TY, gi = i0 + r - 1;
            v[k] = (r < SH && gi >= 0 && gi < H && gj < W)
                       ? __ldg(reinterpret_cast<const float4*>(xc + (size_t)gi * W + gj))  // carrier: vector_load; carrier: ldg
                       : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int k = 0; k < (SH + TY - 1) / TY; ++k) {
            const int r = ty + k * TY;
            if (r < SH) *reinterpret_cast<float4*>(&tile[r][OFF + 4 * tx]) = v[k];
        }
    } else {
        // Unaligned rows: thread tid loads column j0 + tid of every staged row (coalesced scalars).
        const int gj = j0 + tid;
        float v[SH];
#pragma unroll
        for (int r = 0; r < SH; ++r) {
            const int gi = i0 + r - 1;
            v[r] = (gi >= 0 && gi < H && gj < W) ? __ldg(xc + (size_t)gi * W + gj) : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < SH; ++r) tile[r][OFF + tid] = v[r];
    }
    // carrier: register_cache — the channel's 3 x 3 weights live in registers
    float wr[9];
#pragma unroll
    for (int k = 0; k < 9; ++k) wr[k] = __ldg(w + c * 9 + k);
    __syncthreads();

    // carrier: register_tile — a 4 x 8 output patch per thread from a sliding three-row register window
    const int r0 = ty * RPT;
    const int gj = j0 + 4 * tx;
    float a[6], b[6], cc[6];
    load_row(tile, r0, tx, lane, a);
    load_row(tile, r0 + 1, tx, lane, b);
#pragma unroll
    for (int k = 0; k < RPT; ++k) {
        load_row(tile, r0 + k + 2, tx, lane, cc);
        float o[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            float acc = wr[0] * a[q];
            acc = fmaf(wr[1], a[q + 1], acc);
            acc = fmaf(wr[2], a[q + 2], acc);
            acc = fmaf(wr[3], b[q], acc);
            acc = fmaf(wr[4], b[q + 1], acc);
            acc = fmaf(wr[5], b[q + 2], acc);
            acc = fmaf(wr[6], cc[q], acc);
            acc = fmaf(wr[7], cc[q + 1], acc);
            acc = fmaf(wr[8], cc[q + 2], acc);
            o[q] = acc;
        }
        const int i = i0 + r0 + k;
        if (i < H) {
            float* __restrict__ yr = yc + (size_t)i * W;
            if (VEC) {
                if (gj < W) *reinterpret_cast<float4*>(yr + gj) = make_float4(o[0], o[1], o[2], o[3]);  // carrier: vector_store
            } else {
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    if (gj + q < W) yr[gj + q] = o[q];
            }
        }
#pragma unroll
        for (int q = 0; q < 6; ++q) { a[q] = b[q]; b[q] = cc[q]; }
    }
}

void conv2d_3x3(const float* x, const float* w, float* y, int C, int H, int W) {
    dim3 block(TX, TY);
    dim3 grid((W + TW - 1) / TW, (H + TH - 1) / TH, C);
    if ((W & 3) == 0) conv3x3_wide<true><<<grid, block>>>(x, w, y, H, W);  // 16-byte aligned rows
    else conv3x3_wide<false><<<grid, block>>>(x, w, y, H, W);
}
