// tile_transpose, second correct variant: 2D shared array tile[32][33], 32x16 threads, each thread moves 2 elements.
#include <cuda_runtime.h>

#define TILE 32
#define ROWS 16

__global__ void transpose_2d(const float* inp, float* out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    int bx = blockIdx.x * TILE, by = blockIdx.y * TILE;
    int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {
        int r = by + ty + j, c = bx + tx;
        if (r < rows && c < cols) tile[ty + j][tx] = inp[r * cols + c];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {
        int r = bx + ty + j, c = by + tx;  // r: row of out, c: column of out
        if (r < cols && c < rows) out[r * rows + c] = tile[tx][ty + j];
    }
}

void tile_transpose(const float* inp, float* out, int R, int C) {
    transpose_2d<<<dim3((C + TILE - 1) / TILE, (R + TILE - 1) / TILE), dim3(TILE, ROWS)>>>(inp, out, R, C);
}
