// kernel-skills naive matrix product (project code; the sample has only its tiled kernel):
// one thread per element of C, the dot product read straight from global memory.
__global__ void matmul_naive_kernel(float* C, const float* A, const float* B, int hA, int wA, int wB) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= hA || col >= wB) return;
    float sum = 0.0f;
    for (int k = 0; k < wA; ++k) sum += A[row * wA + k] * B[k * wB + col];
    C[row * wB + col] = sum;
}
