// kernel-skills entry shim (project code): one thread per row, 128 threads per block.
void softmax(const float* x, float* y, int rows, int cols) {
    softmax_row_per_thread<<<(rows + 127) / 128, 128>>>(x, y, rows, cols);
}
