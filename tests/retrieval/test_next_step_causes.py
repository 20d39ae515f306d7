"""Causes of next-step misses fixed in the query's applicability and value ranking (issue 20): each
rule on small kernels in spellings of their own, with one code it must refuse. Real tree-sitter,
the real detectors and site finders; no store needed."""
import math

import pytest

HALF2_SKILL = {"carrier": "packed_half2_math", "operator": "half2_to_scalar",
               "before": "r.x = __hadd(a.x, b.x); r.y = __hadd(a.y, b.y);"}

FLOAT_ONLY = """
// half2 is named only in this comment
__global__ void scale2(const float2* __restrict__ x, float2* y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float2 v = x[i]; v.x = v.x * s; v.y = v.y * s; y[i] = v; }
}
"""

BF16 = """
#include <cuda_bf16.h>
__global__ void add_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = __hadd(a[i], b[i]);
}
"""

TORCH_HALF = """
template <typename scalar_t>
__global__ void axpy(const scalar_t* x, scalar_t* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (scalar_t)(a * (float)x[i] + (float)y[i]);
}
void launch(const at::Half* x, at::Half* y, float a, int n) { axpy<at::Half><<<(n + 255) / 256, 256>>>(x, y, a, n); }
"""


def test_packed_half2_needs_sixteen_bit_float_data():
    from retrieval.applicability import Checker

    no = Checker(FLOAT_ONLY).check(HALF2_SKILL)
    assert no.status == "no_site" and "16-bit float" in no.detail
    for code in (BF16, TORCH_HALF):
        yes = Checker(code).check(HALF2_SKILL)
        assert yes.status == "applicable" and yes.sites and yes.sites[0].how == "similar_code"


VIEW_WRITE = """
#define AS_F2(v) (*reinterpret_cast<float2 *>(&(v)))
__global__ void stage(const float* in, float* out, int n) {
    __shared__ float tile[32][64];
    int tx = threadIdx.x, ty = threadIdx.y;
    AS_F2(tile[ty][tx * 2]) = AS_F2(in[(blockIdx.x * 32 + ty) * 64 + tx * 2]);
    __syncthreads();
    out[(blockIdx.x * 64 + tx) * 32 + ty] = tile[ty][tx];
}
"""

MEMBER_WRITE = """
struct pair_t { float lo, hi; };
__global__ void pairs(const pair_t* in, float* out) {
    __shared__ pair_t buf[128];
    int t = threadIdx.x;
    buf[t].lo = in[blockIdx.x * 128 + t].lo;
    __syncthreads();
    out[blockIdx.x * 128 + t] = buf[127 - t].lo;
}
"""

VIEW_READ_ONLY = """
#define AS_F2(v) (*reinterpret_cast<float2 *>(&(v)))
__global__ void peek(float* out) {
    __shared__ float scratch[32][64];
    __syncthreads();
    AS_F2(out[threadIdx.x * 2]) = AS_F2(scratch[0][threadIdx.x * 2]);
}
"""


def test_shared_tile_written_through_a_view_macro_or_a_member():
    from corpora.code.source import Source
    from mining.carriers import DETECTORS, written_through

    for code, name in ((VIEW_WRITE, "tile"), (MEMBER_WRITE, "buf")):
        assert written_through(Source(code), name)
        assert [s.line for s in DETECTORS["shared_tile"](Source(code))] == [4]
    ro = Source(VIEW_READ_ONLY)
    assert not written_through(ro, "scratch") and DETECTORS["shared_tile"](ro) == []


def test_a_step_that_builds_on_a_staged_tile_is_not_halved_when_the_tile_is_written_through_a_macro():
    from retrieval.applicability import Checker

    app = Checker(VIEW_WRITE).check({"carrier": "shared_padding", "operator": "drop_shared_padding",
                                     "requires": ["shared_tile"]})
    assert app.status == "applicable" and not any(f.startswith("requires:") for f in app.flags)


PACK_LOADS = """
#define AS_SHORT2(v) (*reinterpret_cast<short2 *>(&(v)))
__global__ void widen(short* src, short* dst, int n, int steps) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    for (int s = 0; s < steps; ++s) {
        int base = (g * steps + s) * 4;
        short2 lo = AS_SHORT2(src[base + 0]);
        short2 hi = AS_SHORT2(src[base + 2]);
        dst[g * steps + s] = lo.x + lo.y + hi.x + hi.y;
    }
}
"""

UNROLLED_SCALARS = """
__global__ void sum4(const float* x, float* y, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    for (int it = 0; it < rows; it += gridDim.x * blockDim.x) {
        int q = 4 * (r + it);
        y[r + it] = x[q] + x[q + 1] + x[q + 2] + x[q + 3];
    }
}
"""

STENCIL = """
__global__ void blur(const float* x, float* y, int n, int reps) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int k = 0; k < reps; ++k) y[i] += x[i] + x[i + 1] + x[i + 2];
}
"""

GAPPED = """
__global__ void evens(const float* x, float* y, int reps) {
    int j = 8 * (blockIdx.x * blockDim.x + threadIdx.x);
    for (int k = 0; k < reps; ++k) y[j] += x[j] + x[j + 2];
}
"""


def test_adjacent_loads_of_one_index_are_a_wider_load():
    from retrieval.applicability import Checker, adjacent_runs

    p = Checker(PACK_LOADS)
    assert sorted({s.line for s in p.opportunities("vector_load")}) == [7, 8]
    assert "4 consecutive elements (8 bytes)" in p.opportunities("vector_load")[0].reason
    u = Checker(UNROLLED_SCALARS)
    assert len(adjacent_runs(u.src)) == 4 and [s.line for s in u.opportunities("vector_load")] == [6]
    for code in (STENCIL, GAPPED):  # overlapping lanes, a gap: no pack for one wider load
        assert adjacent_runs(Checker(code).src) == {}


ONE_PER_BLOCK = """
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void partial(const float* x, float* out, int n) {
    cg::thread_block cta = cg::this_thread_block();
    __shared__ float s[256];
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.f;
    cg::sync(cta);
    for (int h = 128; h > 0; h >>= 1) { if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h]; cg::sync(cta); }
    if (cta.thread_rank() == 0) out[blockIdx.x] = s[0];
}
__global__ void copy(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (0 == threadIdx.x) y[n + blockIdx.x] = 0.f;
    if (i < n) y[i] = x[i];
}
"""


def test_a_value_one_thread_stores_per_block_is_no_vector_store_site():
    from retrieval.applicability import Checker

    sites = Checker(ONE_PER_BLOCK).opportunities("vector_store")
    assert [(s.function, s.line) for s in sites] == [("copy", 16)]  # the element-wise store stays


PREFIX_PER_ELEMENT = """
__global__ void prefix(const int* in, int* out, int n) {
    int gid = blockIdx.x * blockDim.x + threadIdx.x;
    if (gid >= n) return;
    int acc = 0;
    for (int k = 0; k < gid; k++) acc += in[k];
    out[gid] = acc;
}
"""

ROW_SUM = """
__global__ void rowsum(const float* m, float* out, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float acc = 0.f;
    for (int c = 0; c < cols; c++) acc += m[row * cols + c];
    out[row] = acc;
}
"""


def test_a_prefix_loop_is_a_scan_site_not_a_reduction_site():
    from retrieval.applicability import Checker

    p = Checker(PREFIX_PER_ELEMENT)
    assert [s.line for s in p.opportunities("warp_scan")] == [6]
    for carrier in ("warp_shuffle_reduce", "block_reduce_shared", "block_per_row", "warp_per_row"):
        assert p.opportunities(carrier) == []
    r = Checker(ROW_SUM)  # a row per thread stays a reduction
    assert r.opportunities("warp_scan") == []
    assert [s.line for s in r.opportunities("warp_shuffle_reduce")] == [6]
    assert [s.line for s in r.opportunities("block_per_row")] == [6]
    assert [s.line for s in r.opportunities("warp_per_row")] == [6]


TWO_PASS = """
__global__ void first(const float* x, float* partial, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.f;
    __syncthreads();
    for (int h = 128; h > 0; h >>= 1) { if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h]; __syncthreads(); }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}
__global__ void finish(const float* partial, float* y, int count) {
    float v = 0.f;
    for (int k = threadIdx.x; k < count; k += blockDim.x) v += partial[k];
    atomicAdd(y, v);
}
void reduce(const float* x, float* y, float* partial, int n) {
    int blocks = (n + 255) / 256;
    first<<<blocks, 256>>>(x, partial, n);
    finish<<<1, 1024>>>(partial, y, blocks);
}
"""


def test_work_is_weighted_by_the_grid_a_kernel_is_launched_with():
    from retrieval.applicability import Checker
    from retrieval.value import LOOP_TRIPS, kernel_shape, work_weights

    c = Checker(TWO_PASS)
    raw = work_weights(c.src)
    shape = kernel_shape(c)
    assert sum(shape.work["first"].values()) == sum(raw["first"].values())
    assert sum(shape.work["finish"].values()) == pytest.approx(sum(raw["finish"].values()) / LOOP_TRIPS)
    same = Checker(TWO_PASS.replace("finish<<<1, 1024>>>", "finish<<<blocks / 64 + 1, 1024>>>"))
    assert kernel_shape(same).work == work_weights(same.src)  # both grids grow with the problem: unchanged


def test_the_thread_mapping_line_covers_its_whole_function():
    from retrieval.applicability import Checker
    from retrieval.value import coverage, kernel_shape

    c = Checker(TWO_PASS)
    shape = kernel_shape(c)
    mapping = c.opportunities("thread_coarsening")
    assert [s.function for s in mapping] == ["first"]
    total = sum(sum(w.values()) for w in shape.work.values())
    cov, _ = coverage(shape, c.src, mapping)
    assert cov == pytest.approx(sum(shape.work["first"].values()) / total)
    store = [s for s in c.opportunities("ldg") if s.function == "finish"]  # a line inside a loop: its loop only
    assert store and coverage(shape, c.src, store)[0] < cov


def test_block_order_buys_nothing_without_reuse_between_blocks():
    from retrieval.value import prior_effect

    assert prior_effect("block_swizzle", ["memory"])["time_ratio"] == 1.0
    assert prior_effect("block_swizzle", ["transpose"])["time_ratio"] == 1.0
    assert math.log(prior_effect("block_swizzle", ["reuse"])["time_ratio"]) > 0


def test_a_finishing_pass_on_one_block_does_not_decide_the_regime():
    from retrieval.applicability import Checker
    from retrieval.value import kernel_shape, minor_kernels

    c = Checker(TWO_PASS)
    assert minor_kernels(c.src) == {"finish"}
    shape = kernel_shape(c)
    assert "atomic" not in shape.regimes and any("finish" in n for n in shape.notes)
    alone = Checker(TWO_PASS.split("void reduce(")[0])  # no launches seen: the finisher's atomics count
    assert minor_kernels(alone.src) == set() and "atomic" in kernel_shape(alone).regimes


WARP_HELPER = """
template <unsigned int B>
__device__ void lastWarp(volatile float* buf, int t) {
    if (B >= 64) buf[t] += buf[t + 32];
    buf[t] += buf[t + 16];
}
__device__ void emit(float* dst, int t, float v) { dst[t] = v; }
__global__ void tree(const float* x, float* out) {
    __shared__ float part[256];
    int t = threadIdx.x;
    part[t] = x[blockIdx.x * 256 + t];
    __syncthreads();
    if (t < 32) lastWarp<256>(part, t);
    emit(out, blockIdx.x * 256 + t, part[t]);
}
"""


def test_a_helper_given_a_shared_array_accesses_shared_memory():
    from retrieval.applicability import Checker, global_accesses

    c = Checker(WARP_HELPER)
    names = {(f.name, name) for f, _, name, *_ in global_accesses(c.src)}
    assert ("lastWarp", "buf") not in names  # every call passes `part`, a shared array
    assert ("emit", "dst") in names and ("tree", "x") in names  # `out` is global: a global store stays
    assert {s.function for s in c.opportunities("vector_store")} == {"emit"}


SKEWED = """
template <int TILE = 32, int SKEW = 0>
__global__ void skewed(const float* in, float* out, int n) {
    __shared__ float t[TILE][TILE + SKEW];
    t[threadIdx.y][threadIdx.x] = in[(blockIdx.y * TILE + threadIdx.y) * n + blockIdx.x * TILE + threadIdx.x];
    __syncthreads();
    out[(blockIdx.x * TILE + threadIdx.y) * n + blockIdx.y * TILE + threadIdx.x] = t[threadIdx.x][threadIdx.y];
}
void run(const float* in, float* out, int n) {
    dim3 b(32, 32), g(n / 32, n / 32);
    skewed<32, 1><<<g, b>>>(in, out, n);
}
"""


def test_padding_set_by_a_template_argument_or_a_constant_is_detected():
    from corpora.code.source import Source
    from mining.carriers import DETECTORS

    assert [s.line for s in DETECTORS["shared_padding"](Source(SKEWED))] == [4]
    macro = SKEWED.replace("template <int TILE = 32, int SKEW = 0>", "#define SKEW 2\ntemplate <int TILE = 32>") \
        .replace("skewed<32, 1>", "skewed<32>")
    assert [s.line for s in DETECTORS["shared_padding"](Source(macro))] == [5]
    unpadded = SKEWED.replace("skewed<32, 1>", "skewed<32>")  # the launch keeps the default 0
    assert DETECTORS["shared_padding"](Source(unpadded)) == []


K_MAJOR = """
__global__ void stage_a(const float* A, float* out, int K) {
    __shared__ float sa[8][128];
    int t = threadIdx.x;
    int arow = t / 2;
    int acol = (t % 2) * 4;
    int grow = blockIdx.y * 128 + arow;
    for (int kb = 0; kb < K; kb += 8) {
        int gaddr = grow * K + kb + acol;
        sa[acol][arow] = A[gaddr];
        __syncthreads();
        out[blockIdx.y * 128 + t] += sa[t % 8][t / 8];
        __syncthreads();
    }
}
"""


def test_a_tile_stored_k_major_through_index_locals_is_a_transposed_tile():
    from corpora.code.source import Source
    from mining.carriers import DETECTORS

    assert [s.line for s in DETECTORS["transposed_tile"](Source(K_MAJOR))] == [10]
    m_major = K_MAJOR.replace("sa[acol][arow] = A[gaddr];", "sa[arow % 8][acol] = A[gaddr];")
    assert DETECTORS["transposed_tile"](Source(m_major)) == []


def test_a_soft_predecessor_worth_nothing_here_does_not_hold_a_step_back():
    from retrieval.plan import order

    entries = [("transposed_tile", 0.0, 1.0, ()), ("shared_padding", 0.24, 1.3, ()), ("vector_load", 0.18, 1.2, ())]
    c, sc, g, rq = (lambda e: e[0]), (lambda e: e[1]), (lambda e: e[2]), (lambda e: e[3])
    got = [e[0] for e in order(entries, c, sc, rq, g)]
    assert got == ["shared_padding", "vector_load", "transposed_tile"]
    assert [e[0] for e in order(entries, c, sc, rq)][:2] == ["vector_load", "transposed_tile"]  # no gains: as before
    worth = [("transposed_tile", 0.05, 1.05, ())] + entries[1:]  # worth taking: padding still comes after it
    assert [e[0] for e in order(worth, c, sc, rq, g)] == ["vector_load", "transposed_tile", "shared_padding"]
    hard = [("transposed_tile", 0.0, 1.0, ()), ("shared_padding", 0.24, 1.3, ("transposed_tile",))]
    assert [e[0] for e in order(hard, c, sc, rq, g)] == ["transposed_tile", "shared_padding"]  # a record's requires
