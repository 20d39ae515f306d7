// histogram: each block builds a private histogram in shared memory (fast on-chip atomics, no
// cross-SM contention), streaming x with 16-byte loads through a grid-stride loop; at the end the
// block adds its non-zero bins to the global histogram. Bin counts too large for shared memory
// fall back to global atomics.
#include <cuda_runtime.h>

#define THREADS 512
#define MAX_SHARED_BINS 12288  // 48 KB of int counters

__global__ void zero_counts(int* __restrict__ counts, int bins) {
    for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < bins; b += gridDim.x * blockDim.x) counts[b] = 0;
}

__device__ __forceinline__ void count(int* hist, int v, int bins) {
    if ((unsigned)v < (unsigned)bins) atomicAdd(hist + v, 1);  // carrier: privatized_atomics — shared-memory atomics
}

__global__ void __launch_bounds__(THREADS)  // carrier: launch_bounds
histogram_shared(const int* __restrict__ x, int* __restrict__ counts, int n, int bins) {  // carrier: restrict
    extern __shared__ int hist[];  // carrier: privatized_atomics — one private histogram per block
    for (int b = threadIdx.x; b < bins; b += blockDim.x) hist[b] = 0;
    __syncthreads();

    const int4* __restrict__ x4 = reinterpret_cast<const int4*>(x);  // carrier: vector_load — 16-byte loads
    const int n4 = n >> 2;
    const int stride = gridDim.x * blockDim.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + stride < n4; i += 2 * stride) {  // carrier: grid_stride — two 16-byte loads in flight per step
        const int4 a = __ldg(x4 + i);  // carrier: ldg
        const int4 b = __ldg(x4 + i + stride);
        count(hist, a.x, bins); count(hist, a.y, bins); count(hist, a.z, bins); count(hist, a.w, bins);
        count(hist, b.x, bins); count(hist, b.y, bins); count(hist, b.z, bins); count(hist, b.w, bins);
    }
    if (i < n4) {
        const int4 a = __ldg(x4 + i);
        count(hist, a.x, bins); count(hist, a.y, bins); count(hist, a.z, bins); count(hist, a.w, bins);
    }
    // scalar tail: the last n % 4 elements
    for (int j = (n4 << 2) + blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) count(hist, __ldg(x + j), bins);
    __syncthreads();

    // carrier: atomic_per_block — one global atomic per non-empty bin per block
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {
        const int v = hist[b];
        if (v) atomicAdd(counts + b, v);
    }
}

__global__ void histogram_global(const int* __restrict__ x, int* __restrict__ counts, int n, int bins) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) count(counts, __ldg(x + i), bins);
}

void histogram(const int* x, int* counts, int N, int BINS) {
    int zb = (BINS + 255) / 256;
    if (zb > 1024) zb = 1024;
    zero_counts<<<zb, 256>>>(counts, BINS);
    if (BINS <= MAX_SHARED_BINS) {
        // Few blocks amortize the per-block clear and merge of the private histogram.
        int blocks = ((N >> 2) + THREADS - 1) / THREADS;
        const int cap = 132 * (BINS <= 2048 ? 4 : 2);
        if (blocks > cap) blocks = cap;
        if (blocks < 1) blocks = 1;
        histogram_shared<<<blocks, THREADS, BINS * sizeof(int)>>>(x, counts, N, BINS);
    } else {
        int blocks = (N + 255) / 256;
        if (blocks > 132 * 8) blocks = 132 * 8;
        histogram_global<<<blocks, 256>>>(x, counts, N, BINS);
    }
}
