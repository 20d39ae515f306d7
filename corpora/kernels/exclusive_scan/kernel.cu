// exclusive_scan: single-pass prefix sum with decoupled look-back. Each block scans one 4096-int
// tile: coalesced 16-byte loads are re-arranged through shared memory so each thread owns 16
// consecutive items; a thread scan, a warp shuffle scan and a block scan of the 8 warp totals give
// tile-local prefixes. Tiles are numbered in launch order by an atomic ticket, publish their
// aggregate at once and their inclusive prefix as soon as it is known; warp 0 of each tile looks
// back over up to 32 predecessors at a time until it meets a published inclusive prefix.
// x is read once and y written once (2N words of traffic, like a copy).
#include <cuda_runtime.h>

#define THREADS 256
#define ITEMS 16
#define TILE (THREADS * ITEMS)          // 4096 ints per block
#define TILE4 (TILE / 4)                // 1024 int4 per block
#define PADDED4 (TILE4 + TILE4 / 8)     // one int4 of padding after every 8
#define FLAG_AGGREGATE 1ull
#define FLAG_PREFIX 2ull

// carrier: shared_padding — int4 slot q lives at q + q/8: striped and blocked accesses are both conflict-free
__device__ __forceinline__ int pad4(int q) { return q + (q >> 3); }

__global__ void scan_init(unsigned long long* __restrict__ status, unsigned* __restrict__ ticket, int tiles) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < tiles; i += gridDim.x * blockDim.x) status[i] = 0ull;
    if (blockIdx.x == 0 && threadIdx.x == 0) *ticket = 0u;
}

__device__ __forceinline__ int warp_sum(int v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);  // carrier: warp_shuffle_reduce
    return v;
}

__device__ __forceinline__ void publish(unsigned long long* slot, unsigned long long flag, int value) {
    // flag and value travel in one 64-bit word, so a reader never sees one without the other
    atomicExch(slot, (flag << 32) | (unsigned)value);
}

__global__ void __launch_bounds__(THREADS)  // carrier: launch_bounds
scan_tiles(const int* __restrict__ x, int* __restrict__ y, int n,  // carrier: restrict
           unsigned long long* __restrict__ status, unsigned* __restrict__ ticket) {
    __shared__ int4 buf[PADDED4];  // carrier: shared_tile — striped <-> blocked re-arrangement
    __shared__ int warp_total[THREADS / 32];
    __shared__ int tile_prefix;
    __shared__ unsigned tile_id;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // carrier: dynamic_tile_id — tiles numbered in the order blocks start, so predecessors are running
    if (tid == 0) tile_id = atomicAdd(ticket, 1u);
    __syncthreads();
    const int tile = (int)tile_id;
    const long long base = (long long)tile * TILE;

    // Load: int4 slot j = tid + 256 r, coalesced across the block.
#pragma unroll  // carrier: unroll_pragma
    for (int r = 0; r < TILE4 / THREADS; ++r) {
        const int j = tid + r * THREADS;
        const long long e = base + 4ll * j;
        int4 v;
        if (e + 3 < n) {
            v = __ldg(reinterpret_cast<const int4*>(x + e));  // carrier: vector_load — 16-byte loads; carrier: ldg
        } else {  // tail of the last tile: element-wise guards, zeros past the end
            v.x = e + 0 < n ? __ldg(x + e + 0) : 0;
            v.y = e + 1 < n ? __ldg(x + e + 1) : 0;
            v.z = e + 2 < n ? __ldg(x + e + 2) : 0;
            v.w = e + 3 < n ? __ldg(x + e + 3) : 0;
        }
        buf[pad4(j)] = v;
    }
    __syncthreads();

    // Thread t owns items 16t .. 16t+15 (int4 slots 4t .. 4t+3).
    int item[ITEMS];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const int4 v = buf[pad4(4 * tid + c)];
        item[4 * c + 0] = v.x; item[4 * c + 1] = v.y; item[4 * c + 2] = v.z; item[4 * c + 3] = v.w;
    }
    int total = 0;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) total += item[i];

    // carrier: warp_scan — inclusive scan of thread totals with shuffles
    int incl = total;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int t = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += t;
    }
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();

    // carrier: block_scan — the 8 warp totals, scanned from shared memory
    int warp_prefix = 0, aggregate = 0;
#pragma unroll
    for (int w = 0; w < THREADS / 32; ++w) {
        const int v = warp_total[w];
        warp_prefix += w < warp ? v : 0;
        aggregate += v;
    }

    // carrier: decoupled_lookback — tile prefix from predecessors' published aggregates / prefixes
    if (warp == 0) {
        int exclusive = 0;
        if (tile == 0) {
            if (lane == 0) publish(status, FLAG_PREFIX, aggregate);
        } else {
            if (lane == 0) publish(status + tile, FLAG_AGGREGATE, aggregate);
            int pred = tile - 1 - lane;  // lane 0 looks at the nearest predecessor
            while (true) {
                const unsigned long long word =
                    pred >= 0 ? *reinterpret_cast<volatile unsigned long long*>(status + pred)
                              : (FLAG_PREFIX << 32);  // before tile 0: an inclusive prefix of 0
                const unsigned long long flag = word >> 32;
                if (__any_sync(0xffffffffu, flag == 0ull)) continue;  // someone in the window not ready: re-read
                const int value = (int)(unsigned)word;
                const unsigned prefix_lanes = __ballot_sync(0xffffffffu, flag == FLAG_PREFIX);
                if (prefix_lanes) {
                    const int stop = __ffs(prefix_lanes) - 1;  // nearest predecessor with an inclusive prefix
                    exclusive += warp_sum(lane <= stop ? value : 0);
                    break;
                }
                exclusive += warp_sum(value);  // 32 aggregates; slide the window back
                pred -= 32;
            }
            if (lane == 0) publish(status + tile, FLAG_PREFIX, exclusive + aggregate);
        }
        if (lane == 0) tile_prefix = exclusive;
    }
    __syncthreads();

    int run = tile_prefix + warp_prefix + (incl - total);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int v = item[i];
        item[i] = run;
        run += v;
    }
#pragma unroll
    for (int c = 0; c < 4; ++c)
        buf[pad4(4 * tid + c)] = make_int4(item[4 * c + 0], item[4 * c + 1], item[4 * c + 2], item[4 * c + 3]);
    __syncthreads();

#pragma unroll
    for (int r = 0; r < TILE4 / THREADS; ++r) {
        const int j = tid + r * THREADS;
        const long long e = base + 4ll * j;
        const int4 v = buf[pad4(j)];
        if (e + 3 < n) {
            *reinterpret_cast<int4*>(y + e) = v;  // carrier: vector_store — 16-byte stores
        } else {
            if (e + 0 < n) y[e + 0] = v.x;
            if (e + 1 < n) y[e + 1] = v.y;
            if (e + 2 < n) y[e + 2] = v.z;
            if (e + 3 < n) y[e + 3] = v.w;
        }
    }
}

void exclusive_scan(const int* x, int* y, int N) {
    // Tile status words and the ticket counter, allocated once and grown on demand.
    static unsigned long long* scratch = nullptr;
    static int capacity = 0;
    const int tiles = (N + TILE - 1) / TILE;
    if (tiles > capacity) {
        if (scratch) cudaFree(scratch);
        cudaMalloc(&scratch, (tiles + 1) * sizeof(unsigned long long));
        capacity = tiles;
    }
    unsigned long long* status = scratch;
    unsigned* ticket = reinterpret_cast<unsigned*>(scratch + capacity);
    int init_blocks = (tiles + 255) / 256;
    if (init_blocks > 264) init_blocks = 264;
    scan_init<<<init_blocks, 256>>>(status, ticket, tiles);
    scan_tiles<<<tiles, THREADS>>>(x, y, N, status, ticket);
}
