// cooperative_groups.h for kernel-skills' CPU executor: the block and warp-tile groups, built on
// the runtime's barriers and checked warp collectives (so a bad tile mask or a divergent sync is
// reported like the plain intrinsics). Grid / multi-grid groups, cluster groups, coalesced and
// labeled partitions, tiles wider than a warp and memcpy_async are not here: the gate reports
// them as unsupported before the build (cpu_toolchain.unsupported_features).
#pragma once
#include "../ks_cpu.h"

namespace cooperative_groups {

// The calling thread's rank within its block (x fastest), as CUDA numbers threads.
inline unsigned ks_block_rank() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

class thread_block {
public:
    void sync() const { ::ks::syncthreads(__FILE__, __LINE__); }
    unsigned thread_rank() const { return ks_block_rank(); }
    unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
    unsigned num_threads() const { return size(); }
    dim3 group_index() const { return blockIdx; }
    dim3 thread_index() const { return threadIdx; }
    dim3 group_dim() const { return blockDim; }
    dim3 dim_threads() const { return blockDim; }
};

inline thread_block this_thread_block() { return thread_block(); }
inline void sync(const thread_block& g) { g.sync(); }

// A tile of N threads (N a power of two, at most a warp). Lanes of one tile share a warp; the
// shuffles use the tile's mask and width, as the CUDA implementation does.
template <unsigned N>
class thread_block_tile {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "tiles of 1..32 threads (a power of two)");

public:
    static constexpr unsigned ks_width = N;
    unsigned mask() const {
        const unsigned lane = ks_block_rank() % 32u;
        return N == 32 ? 0xffffffffu : ((1u << N) - 1u) << (lane / N * N);
    }
    unsigned thread_rank() const { return ks_block_rank() % N; }
    static constexpr unsigned size() { return N; }
    static constexpr unsigned num_threads() { return N; }
    unsigned meta_group_rank() const { return ks_block_rank() / N; }
    unsigned meta_group_size() const {
        return (blockDim.x * blockDim.y * blockDim.z + N - 1) / N;
    }
    void sync() const { ::ks::syncwarp(__FILE__, __LINE__, mask()); }
    template <class T> T shfl(T v, int src) const {
        return ::ks::shfl<::ks::OP_SHFL_IDX>(__FILE__, __LINE__, mask(), v, src, (int)N);
    }
    template <class T> T shfl_down(T v, unsigned d) const {
        return ::ks::shfl<::ks::OP_SHFL_DOWN>(__FILE__, __LINE__, mask(), v, d, (int)N);
    }
    template <class T> T shfl_up(T v, unsigned d) const {
        return ::ks::shfl<::ks::OP_SHFL_UP>(__FILE__, __LINE__, mask(), v, d, (int)N);
    }
    template <class T> T shfl_xor(T v, unsigned m) const {
        return ::ks::shfl<::ks::OP_SHFL_XOR>(__FILE__, __LINE__, mask(), v, m, (int)N);
    }
    unsigned ballot(int p) const {
        return ::ks::ballot(__FILE__, __LINE__, mask(), p) >> (ks_block_rank() % 32u / N * N);
    }
    int any(int p) const { return ::ks::any(__FILE__, __LINE__, mask(), p); }
    int all(int p) const { return ::ks::all(__FILE__, __LINE__, mask(), p); }
};

template <unsigned N>
inline thread_block_tile<N> tiled_partition(const thread_block&) { return thread_block_tile<N>(); }
template <unsigned N, unsigned M>
inline thread_block_tile<N> tiled_partition(const thread_block_tile<M>&) {
    static_assert(N <= M, "a tile is partitioned into smaller tiles");
    return thread_block_tile<N>();
}
template <unsigned N>
inline void sync(const thread_block_tile<N>& g) { g.sync(); }

}  // namespace cooperative_groups
