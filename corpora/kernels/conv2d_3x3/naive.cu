// conv2d_3x3, naive: one thread per output pixel, nine guarded global loads.
#include <cuda_runtime.h>

__global__ void conv_naive(const float* x, const float* w, float* y, int H, int W) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int c = blockIdx.z;
    if (i >= H || j >= W) return;
    const float* xc = x + (size_t)c * H * W;
    float acc = 0.0f;
    for (int di = 0; di < 3; ++di)
        for (int dj = 0; dj < 3; ++dj) {
            int ii = i + di - 1, jj = j + dj - 1;
            if (ii >= 0 && ii < H && jj >= 0 && jj < W) acc += w[c * 9 + di * 3 + dj] * xc[(size_t)ii * W + jj];
        }
    y[(size_t)c * H * W + (size_t)i * W + j] = acc;
}

void conv2d_3x3(const float* x, const float* w, float* y, int C, int H, int W) {
    dim3 block(16, 16);
    dim3 grid((W + 15) / 16, (H + 15) / 16, C);
    conv_naive<<<grid, block>>>(x, w, y, H, W);
}
