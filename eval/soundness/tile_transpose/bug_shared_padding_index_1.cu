// PLANTED BUG: the transposed read indexes the tile with stride TILE, forgetting the +1 padding the write used.
#include <cuda_runtime.h>

#define TILE 32
#define ROWS 8

__global__ void transpose_tile(const float* __restrict__ inp, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE * (TILE + 1)];  // +1 float per row: the column read hits 32 different banks
    int x = blockIdx.x * TILE + threadIdx.x;   // column of inp
    int y = blockIdx.y * TILE + threadIdx.y;   // row of inp
    for (int j = 0; j < TILE; j += ROWS)
        if (x < cols && y + j < rows) tile[(threadIdx.y + j) * (TILE + 1) + threadIdx.x] = inp[(y + j) * cols + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;       // column of out (a row of inp)
    y = blockIdx.x * TILE + threadIdx.y;       // row of out (a column of inp)
    for (int j = 0; j < TILE; j += ROWS)
        if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x * TILE + threadIdx.y + j];
}

void tile_transpose(const float* inp, float* out, int R, int C) {
    dim3 block(TILE, ROWS);
    dim3 grid((C + TILE - 1) / TILE, (R + TILE - 1) / TILE);
    transpose_tile<<<grid, block>>>(inp, out, R, C);
}
