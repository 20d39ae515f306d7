// transpose: y = x^T through a 32 x 32 shared tile. A 32 x 8 block reads four tile rows per thread
// with consecutive threads on consecutive columns (coalesced), then writes the tile's columns as
// rows of y, again with consecutive threads on consecutive addresses (coalesced). The tile row is
// 33 floats wide so the column-wise shared reads fall in 32 different banks.
#include <cuda_runtime.h>

#define TILE 32
#define ROWS 8

__global__ void __launch_bounds__(TILE * ROWS)  // carrier: launch_bounds
transpose_tiled(const float* __restrict__ x, float* __restrict__ y, int R, int C) {  // carrier: restrict
    __shared__ float tile[TILE][TILE + 1];  // carrier: shared_tile; carrier: shared_padding — +1 column, conflict-free column reads

    const int c0 = blockIdx.x * TILE, r0 = blockIdx.y * TILE;
    // carrier: coalesced_transpose — read rows of x, write rows of y; the transpose happens in shared memory
    int c = c0 + threadIdx.x;
#pragma unroll  // carrier: unroll_pragma — four independent loads in flight per thread
    for (int i = 0; i < TILE; i += ROWS) {
        const int r = r0 + threadIdx.y + i;
        if (r < R && c < C) tile[threadIdx.y + i][threadIdx.x] = __ldg(x + (size_t)r * C + c);  // carrier: ldg
    }
    __syncthreads();
    const int r = r0 + threadIdx.x;
#pragma unroll
    for (int i = 0; i < TILE; i += ROWS) {
        const int cc = c0 + threadIdx.y + i;
        if (cc < C && r < R) y[(size_t)cc * R + r] = tile[threadIdx.x][threadIdx.y + i];
    }
}

void transpose(const float* x, float* y, int R, int C) {
    dim3 block(TILE, ROWS);
    dim3 grid((C + TILE - 1) / TILE, (R + TILE - 1) / TILE);
    transpose_tiled<<<grid, block>>>(x, y, R, C);
}
