// kernel-skills entry shim (project code): launches scanExclusiveShared, scanExclusiveShared2, uniformUpdate
void scan(const unsigned int* src, unsigned int* dst, int N) {
    // scanExclusiveLarge's sequence for one array of N elements (batchSize = 1).
    uint* buf = nullptr;
    cudaMalloc(&buf, sizeof(uint) * (N / (4 * THREADBLOCK_SIZE)));
    scanExclusiveShared<<<N / (4 * THREADBLOCK_SIZE), THREADBLOCK_SIZE>>>((uint4*)dst, (uint4*)const_cast<uint*>(src), 4 * THREADBLOCK_SIZE);
    const uint blocks2 = (N / (4 * THREADBLOCK_SIZE) + THREADBLOCK_SIZE - 1) / THREADBLOCK_SIZE;
    scanExclusiveShared2<<<blocks2, THREADBLOCK_SIZE>>>(buf, dst, const_cast<uint*>(src), N / (4 * THREADBLOCK_SIZE), N / (4 * THREADBLOCK_SIZE));
    uniformUpdate<<<N / (4 * THREADBLOCK_SIZE), THREADBLOCK_SIZE>>>((uint4*)dst, buf);
    cudaFree(buf);
}
