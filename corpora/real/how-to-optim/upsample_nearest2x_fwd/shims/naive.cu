// kernel-skills entry shim (project code): one thread per output element.
void upsample_nearest2x(const float* x, float* y, int nc, int h, int w) {
    long long total = (long long)nc * h * w * 4;
    upsample_per_output<<<(unsigned)((total + 255) / 256), 256>>>(x, y, nc, h, w);
}
