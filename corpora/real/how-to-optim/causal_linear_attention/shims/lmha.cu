// kernel-skills entry shim (project code), as the file's set_params + lmha_ for the forward
// direction: contiguous [B, H, L, *] strides, one block per (head, batch), E rounded up to the
// kernel's template width (threads per head 1 up to E = 64, 2 up to 128), a block of
// round_up(max(E, M * threads per head), 32) threads and 2 * (2E + 2 round_up(M, 4)) floats of
// dynamic shared memory. (The file sends B * H < 40 to a low-occupancy kernel; this shim always
// takes the high-occupancy one.)
template <int E, int THREADS_PER_HEAD>
static void ks_launch(const nvidia::Lmha_params<float>& params) {
    const int M = nvidia::round_up(params.M, 4);
    const int block = nvidia::round_up(E > M * THREADS_PER_HEAD ? E : M * THREADS_PER_HEAD, 32);
    dim3 grid(params.H, params.B);
    nvidia::lmha_kernel<E, THREADS_PER_HEAD, false>
        <<<grid, block, nvidia::smem_buffer_elts_<E>(params) * 2 * sizeof(float)>>>(params);
}

void causal_linear_attention(const float* q, const float* k, const float* v, float* out,
                             int B, int H, int L, int E, int M) {
    nvidia::Lmha_params<float> params;
    params.out = out; params.q = q; params.k = k; params.v = v;
    params.q_stride_B = H * L * E; params.q_stride_H = L * E; params.q_stride_L = E;
    params.k_stride_B = H * L * E; params.k_stride_H = L * E; params.k_stride_L = E;
    params.v_stride_B = H * L * M; params.v_stride_H = L * M; params.v_stride_L = M;
    params.o_stride_B = H * L * M; params.o_stride_H = L * M; params.o_stride_L = M;
    params.B = B; params.L = L; params.H = H; params.E = E; params.M = M;
    if (E <= 32) ks_launch<32, 1>(params);
    else if (E <= 48) ks_launch<48, 1>(params);
    else if (E <= 64) ks_launch<64, 1>(params);
    else ks_launch<128, 2>(params);
}
