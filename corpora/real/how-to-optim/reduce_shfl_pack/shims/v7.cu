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

// The source derives NUM_PER_THREAD from its fixed N and 1024 blocks; a template argument
// must be a constant here, so the shim fixes 8 and launches n / 2048 blocks.
#define KS_PER_THREAD 8

void reduce_sum(const float* x, float* y, int n) {
    const int blocks = n / (KS_PER_THREAD * BLOCK_SIZE);
    float* partials = ks_scratch(blocks);
    cudaMemsetAsync(y, 0, sizeof(float));
    reduce7<BLOCK_SIZE, KS_PER_THREAD><<<blocks, BLOCK_SIZE>>>(const_cast<float*>(x), partials, n);
    ks_add_partials<<<1, 1024>>>(partials, y, blocks);
}
