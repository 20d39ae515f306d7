// kernel-skills entry shim (project code): launches shfl_scan_test, uniform_add
void shfl_scan(const int* x, int* y, int N) {
    // The sample's host sequence: scan 256-element blocks in place, scan the block totals, add them back.
    const int blockSize = 256, gridSize = N / blockSize, shmem_sz = blockSize / 32 * sizeof(int);
    const int p_blockSize = gridSize < blockSize ? gridSize : blockSize;
    const int p_gridSize = (gridSize + p_blockSize - 1) / p_blockSize;
    int* partial_sums = nullptr;
    cudaMalloc(&partial_sums, sizeof(int) * gridSize);
    cudaMemsetAsync(partial_sums, 0, sizeof(int) * gridSize);
    cudaMemcpyAsync(y, x, sizeof(int) * N, cudaMemcpyDeviceToDevice);
    shfl_scan_test<<<gridSize, blockSize, shmem_sz>>>(y, 32, partial_sums);
    shfl_scan_test<<<p_gridSize, p_blockSize, shmem_sz>>>(partial_sums, 32);
    if (gridSize > 1) uniform_add<<<gridSize - 1, blockSize>>>(y + blockSize, partial_sums, N);
    cudaFree(partial_sums);
}
