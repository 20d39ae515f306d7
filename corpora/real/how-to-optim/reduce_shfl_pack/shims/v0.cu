// kernel-skills entry shim (project code). The version's kernel leaves one partial sum per
// block in a scratch array, as in the source's own main(); one project block adds them into y[0].
__global__ void ks_add_partials(const float* partials, float* y, int count) {
    float v = 0.0f;
    for (int i = threadIdx.x; i < count; i += blockDim.x) v += partials[i];
    atomicAdd(y, v);
}

static float* ks_scratch(int count) {  // grown on demand, kept across calls
    static float* buf = nullptr;
    static int cap = 0;
    if (count > cap) {
        if (buf) cudaFree(buf);
        cudaMalloc(&buf, count * sizeof(float));
        cap = count;
    }
    return buf;
}

void reduce_sum(const float* x, float* y, int n) {
    const int blocks = n / BLOCK_SIZE;  // one element per thread
    float* partials = ks_scratch(blocks);
    cudaMemsetAsync(y, 0, sizeof(float));
    reduce_v0<<<blocks, BLOCK_SIZE>>>(const_cast<float*>(x), partials);
    ks_add_partials<<<1, 1024>>>(partials, y, blocks);
}
