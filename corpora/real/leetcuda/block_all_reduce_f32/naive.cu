// kernel-skills naive sum (project code; LeetCUDA's reduce file starts at a warp-shuffle block
// reduction): every thread adds its element to the single output with a global atomic.
__global__ void reduce_sum_atomic_naive_kernel(const float* a, float* y, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) atomicAdd(y, a[i]);
}
