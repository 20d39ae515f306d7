// kernel-skills entry shim (project code): launches Sgemv_v0 as the source's main() does, a
// 32 x 4 block (one warp per row, four rows per block), the grid rounded up for any M.
void sgemv(const float* A, const float* x, float* y, int M, int N) {
    dim3 block(32, 4);
    dim3 grid((M + 3) / 4);
    Sgemv_v0<<<grid, block>>>(const_cast<float*>(A), const_cast<float*>(x), y, M, N);
}
