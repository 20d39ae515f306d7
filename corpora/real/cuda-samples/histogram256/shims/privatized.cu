// kernel-skills entry shim (project code): launches histogram256Kernel, mergeHistogram256Kernel
void histogram256(const unsigned int* data, unsigned int* hist, int N) {
    // The sample's host sequence: 240 blocks of per-warp sub-histograms, then one merge block per bin.
    const unsigned int partial_count = 240;
    uint* partial = nullptr;
    cudaMalloc(&partial, partial_count * HISTOGRAM256_BIN_COUNT * sizeof(uint));
    histogram256Kernel<<<partial_count, HISTOGRAM256_THREADBLOCK_SIZE>>>(partial, const_cast<uint*>(data), N);
    mergeHistogram256Kernel<<<HISTOGRAM256_BIN_COUNT, MERGE_THREADBLOCK_SIZE>>>(hist, partial, partial_count);
    cudaFree(partial);
}
