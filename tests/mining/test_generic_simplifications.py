"""Generic simplifications found by meaning (issue 19): run-time dispatch to a specialized instance,
a block sum feeding one atomic, a block cooperating on one row, shuffles written through macros,
cooperative-groups tiles or wrappers. Each on variants the operators were not written for, with
sites they must refuse and a CPU gate run of a rewritten variant."""
from __future__ import annotations

import pytest

from _operator_support import cpu_gate, edited, to_fixpoint
from mining.operators import get_operator

DISPATCH = get_operator("drop_specialized_dispatch")
PUBLISH = get_operator("warp_atomic_to_thread_atomics")
ROW = get_operator("block_per_row_to_thread")
SHUFFLE = get_operator("shuffle_to_shared")


# --------------------------------------------------------------------------- specialized dispatch
VEC_DISPATCH = """
#include <cuda_runtime.h>
template <int W>
__global__ void add_w(const float* a, const float* b, float* y, int n) {
    int i = W * (blockIdx.x * blockDim.x + threadIdx.x);
    if (W == 4 && i + 3 < n) {
        float4 p = *reinterpret_cast<const float4*>(a + i), q = *reinterpret_cast<const float4*>(b + i);
        *reinterpret_cast<float4*>(y + i) = make_float4(p.x + q.x, p.y + q.y, p.z + q.z, p.w + q.w);
    } else {
        for (int k = 0; k < W; ++k) if (i + k < n) y[i + k] = a[i + k] + b[i + k];
    }
}
void vector_add(const float* a, const float* b, float* y, int N) {
    bool aligned = ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b) |
                     reinterpret_cast<unsigned long long>(y)) & 15) == 0;
    if (aligned && N % 4 == 0) {
        add_w<4><<<(N / 4 + 255) / 256, 256>>>(a, b, y, N);
    } else {
        add_w<1><<<(N + 255) / 256, 256>>>(a, b, y, N);
    }
}
"""


def test_dispatch_keeps_the_general_branch(tmp_path):
    sites = DISPATCH.find_sites(VEC_DISPATCH)
    assert len(sites) == 1 and sites[0].carrier == "specialized_dispatch"
    new = DISPATCH.apply(VEC_DISPATCH, sites[0])
    assert edited(VEC_DISPATCH, new, sites[0]) == "{\n        add_w<1><<<(N + 255) / 256, 256>>>(a, b, y, N);\n    }"
    assert cpu_gate("vector_add", new, tmp_path).passed


@pytest.mark.parametrize("code", [
    # two different launches: a vectorized kernel and a scalar one
    "__global__ void v4(float* y) {}\n__global__ void v1(float* y) {}\n"
    "void run(float* y, int n) { if (n % 4 == 0) v4<<<1, 1>>>(y); else v1<<<1, 1>>>(y); }",
])
def test_dispatch_between_two_kernels(code):
    new, n = to_fixpoint(DISPATCH, code)
    assert n == 1 and "v1<<<1, 1>>>(y);" in new and "v4<<<" not in new


@pytest.mark.parametrize("code", [
    # an else-if chain: several specializations, no single fallback
    "template <int W> void f(int n);\nvoid run(int n) { if (n % 8 == 0) f<8>(n); else if (n % 4 == 0) f<4>(n); else f<1>(n); }",
    # two different host functions: not instances of one template
    "void a(int n); void b(int n);\nvoid run(int n) { if (n > 4) a(n); else b(n); }",
    # no fallback branch
    "template <int W> void f(int n);\nvoid run(int n) { if (n % 8 == 0) f<8>(n); }",
    # device code: a branch inside a kernel is not a launch dispatch
    "template <int W> __device__ void f(int n);\n__global__ void k(int n) { if (n % 8 == 0) f<8>(n); else f<1>(n); }",
])
def test_dispatch_refusals(code):
    assert DISPATCH.find_sites(code) == [], code


# --------------------------------------------------------------------------- block sum -> per-thread atomics
BLOCK_SUM = """
#include <cuda_runtime.h>
__device__ float block_sum(float v) {
    __shared__ float buf[256];
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    return buf[0];
}
__global__ void partial(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    v = block_sum(v);
    if (threadIdx.x == 0) atomicAdd(y, v);
}
void reduce_sum(const float* x, float* y, int N) {
    cudaMemsetAsync(y, 0, sizeof(float));
    partial<<<(N + 255) / 256, 256>>>(x, y, N);
}
"""


def test_block_sum_feeding_one_atomic_becomes_per_thread_atomics(tmp_path):
    sites = PUBLISH.find_sites(BLOCK_SUM)
    assert len(sites) == 1
    new = PUBLISH.apply(BLOCK_SUM, sites[0])
    assert edited(BLOCK_SUM, new, sites[0]) == "atomicAdd(y, v);"
    assert "block_sum(v)" not in new
    assert cpu_gate("reduce_sum", new, tmp_path).passed


@pytest.mark.parametrize("change", [
    # the helper takes a maximum: not a sum, adding every thread's value would be wrong
    ("buf[threadIdx.x] += buf[threadIdx.x + s];", "buf[threadIdx.x] = fmaxf(buf[threadIdx.x], buf[threadIdx.x + s]);"),
    # the block total is used again after the atomic
    ("if (threadIdx.x == 0) atomicAdd(y, v);", "if (threadIdx.x == 0) atomicAdd(y, v);\n    y[1 + blockIdx.x] = v;"),
    # published by every thread already: nothing to drop
    ("if (threadIdx.x == 0) atomicAdd(y, v);", "atomicAdd(y, v);"),
])
def test_block_sum_refusals(change):
    code = BLOCK_SUM.replace(*change)
    assert PUBLISH.find_sites(code) == [], change


# --------------------------------------------------------------------------- block per row -> thread per row
ROW_SOFTMAX = """
#include <cuda_runtime.h>
template <typename T, int OP>
__device__ T block_all(T v) {
    __shared__ T red[128];
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = 64; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = OP ? red[threadIdx.x] + red[threadIdx.x + s]
                                                    : fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    T r = red[0];
    __syncthreads();
    return r;
}
__global__ void row_softmax(const float* x, float* y, int n) {
    const float* row = x + (size_t)blockIdx.x * n;
    __shared__ float total;
    float m = -1e30f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, row[j]);
    m = block_all<float, 0>(m);
    float s = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) s += expf(row[j] - m);
    s = block_all<float, 1>(s);
    if (threadIdx.x == 0) total = s;
    __syncthreads();
    for (int j = threadIdx.x; j < n; j += blockDim.x) y[(size_t)blockIdx.x * n + j] = expf(row[j] - m) / total;
}
void softmax(const float* x, float* y, int M, int N) {
    row_softmax<<<M, 128>>>(x, y, N);
}
"""


def test_block_per_row_becomes_one_thread_per_row(tmp_path):
    sites = ROW.find_sites(ROW_SOFTMAX)
    assert len(sites) == 1 and sites[0].carrier == "block_per_row"
    new = ROW.apply(ROW_SOFTMAX, sites[0])
    assert "row_softmax<<<M, 1>>>" in new and "float total;" in new and "__shared__ float total" not in new
    assert "for (int j = 0; j < n; j += 1)" in new and "m = (m);" in new and "s = (s);" in new
    assert "__syncthreads();\n    for (int j" not in new  # the kernel's barrier is gone
    assert cpu_gate("softmax", new, tmp_path).passed
    # the forward rewrite gives the block its row back, and that is correct too
    from mining.operators.block_per_row_to_thread import forward
    mats = forward(new)
    assert len(mats) == 1 and "row_softmax<<<M, 256>>>" in mats[0].source
    assert "for (int j = threadIdx.x; j < n; j += blockDim.x) s += expf(row[j] - m); s = ks_block_reduce<0>(s);" \
        in mats[0].source
    assert cpu_gate("softmax", mats[0].source, tmp_path).passed


def test_dispatch_forward_adds_the_wide_instance_behind_its_check(tmp_path):
    from mining.operators.drop_specialized_dispatch import forward
    general = DISPATCH.apply(VEC_DISPATCH, DISPATCH.find_sites(VEC_DISPATCH)[0])
    mats = forward(general)
    assert len(mats) == 1
    assert "add_w<4><<<(N + 255) / 256, 256>>>(a, b, y, N);" in mats[0].source and "N % 4 == 0" in mats[0].guards[0]
    assert cpu_gate("vector_add", mats[0].source, tmp_path).passed


@pytest.mark.parametrize("change", [
    # the thread index reaches the data directly (one element per thread): a row needs the block
    ("for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, row[j]);", "m = row[threadIdx.x];"),
    # a two-dimensional block
    ("const float* row = x + (size_t)blockIdx.x * n;", "const float* row = x + (size_t)(blockIdx.x + threadIdx.y) * n;"),
    # dynamic shared memory sized for the block at the launch
    ("row_softmax<<<M, 128>>>", "row_softmax<<<M, 128, 512>>>"),
    # a shuffle in the kernel itself: one lane would read lanes that do not exist
    ("if (threadIdx.x == 0) total = s;", "s += __shfl_xor_sync(0xffffffffu, s, 1);\n    if (threadIdx.x == 0) total = s;"),
])
def test_block_per_row_refusals(change):
    code = ROW_SOFTMAX.replace(*change)
    assert code != ROW_SOFTMAX
    assert ROW.find_sites(code) == [], change


# --------------------------------------------------------------------------- shuffles in other forms
def test_shuffle_through_a_macro_a_tile_and_a_wrapper():
    macro = ("#define XOR_SHFL(v, m) __shfl_xor_sync(uint32_t(-1), v, m)\n"
             "__device__ float wsum(float val) { for (int o = 16; o > 0; o >>= 1) val += XOR_SHFL(val, o); return val; }")
    reps = [edited(macro, SHUFFLE.apply(macro, s), s) for s in SHUFFLE.find_sites(macro)]
    assert len(reps) == 1 and "val += ks_xchg_float[ks_tid ^ o];" in reps[0] and "__syncwarp(uint32_t(-1));" in reps[0]
    tile = ("#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n"
            "__device__ float tsum(float v) { cg::thread_block_tile<16> t = cg::tiled_partition<16>(cg::this_thread_block());\n"
            "  for (int o = 8; o > 0; o /= 2) v += t.shfl_down(v, o);\n  return v; }")
    reps = [edited(tile, SHUFFLE.apply(tile, s), s) for s in SHUFFLE.find_sites(tile)]
    assert len(reps) == 1 and "(ks_tid & 15) + o < 16 ? ks_tid + o : ks_tid" in reps[0]
    wrap = "template <typename T> __device__ T bcast(T value, int src) { return __shfl_sync(0xffffffffu, value, src); }"
    reps = [edited(wrap, SHUFFLE.apply(wrap, s), s) for s in SHUFFLE.find_sites(wrap)]
    assert len(reps) == 1 and "T ks_shfl = ks_xchg_T[(ks_tid & ~31) + (src & 31)];" in reps[0] and \
        "return ks_shfl; }" in reps[0]


@pytest.mark.parametrize("code", [
    # a macro that is not a shuffle
    "#define TWICE(v) ((v) + (v))\n__device__ float f(float val) { return TWICE(val); }",
    # a method called shfl_down on something that is not a cooperative-groups tile
    "struct Q { __device__ float shfl_down(float v, int o) const { return v; } };\n"
    "__device__ float f(Q q, float v) { return q.shfl_down(v, 1); }",
])
def test_shuffle_form_refusals(code):
    assert SHUFFLE.find_sites(code) == [], code


# --------------------------------------------------------------------------- cache hints, each by its own name
HINTED_ADD = """
#include <cuda_runtime.h>
__global__ void add_hinted(const float* a, const float* b, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) __stcs(y + i, __ldcs(a + i) + __ldcg(&b[i]));
}
void vector_add(const float* a, const float* b, float* y, int N) {
    add_hinted<<<(N + 255) / 256, 256>>>(a, b, y, N);
}
"""


def test_each_cache_hint_is_its_own_carrier_and_operator(tmp_path):
    from mining.carriers import detect_carriers
    found = {k: len(v) for k, v in detect_carriers(HINTED_ADD).items()}
    assert found.get("streaming_load") == 1 and found.get("l2_only_load") == 1 and found.get("streaming_store") == 1
    assert "ldg" not in found  # __ldcs is not the read-only path
    assert get_operator("ldg_to_plain_load").find_sites(HINTED_ADD) == []
    src = HINTED_ADD
    for name, expect in (("drop_streaming_load_hint", "*(a + i)"), ("drop_l2_only_load_hint", "*(&b[i])"),
                         ("drop_streaming_store_hint", "*(y + i) = ")):
        op = get_operator(name)
        sites = op.find_sites(src)
        assert len(sites) == 1, name
        new = op.apply(src, sites[0])
        assert expect in edited(src, new, sites[0])
        src = new
    assert "__ld" not in src.split("void vector_add")[0] and "__st" not in src.split("void vector_add")[0]
    assert cpu_gate("vector_add", src, tmp_path).passed
    # the inverse: streaming hints on data read once and output never reread
    from mining.operators.cache_hints import forward
    mats = forward(src.replace("*(y + i) = *(a + i) + *(&b[i])", "y[i] = a[i] + b[i]"))
    assert len(mats) == 1 and "__stcs(&y[i], __ldcs(&a[i]) + __ldcs(&b[i]))" in mats[0].source
    assert cpu_gate("vector_add", mats[0].source, tmp_path).passed


def test_cache_hint_refusals():
    # a store hint whose call is part of a larger expression has no statement of its own to become
    code = "__global__ void k(float* y, float v) { int r = (__stcs(y, v), 1); y[1] = r; }"
    assert get_operator("drop_streaming_store_hint").find_sites(code) == []
    # a load hint with the wrong arity (a user function of the same name would need two)
    code = "__device__ float __ldcs(const float* p, int k);\n__global__ void k(const float* a, float* y) { y[0] = __ldcs(a, 1); }"
    assert get_operator("drop_streaming_load_hint").find_sites(code) == []


# --------------------------------------------------------------------------- per-thread work constants
COARSE_ADD = """
#include <cuda_runtime.h>
constexpr int ELEMS = 4;
template <int PER>
__global__ void add_chunks(const float* a, const float* b, float* y, int n) {
    float r[PER];
    int base = PER * (blockIdx.x * blockDim.x + threadIdx.x);
    for (int k = 0; k < PER; ++k) r[k] = base + k < n ? a[base + k] + b[base + k] : 0.0f;
    for (int k = 0; k < PER; ++k) if (base + k < n) y[base + k] = r[k];
}
void vector_add(const float* a, const float* b, float* y, int N) {
    add_chunks<ELEMS><<<(N + 256 * ELEMS - 1) / (256 * ELEMS), 256>>>(a, b, y, N);
}
"""


def test_work_constant_shrinks_to_one_and_the_launch_follows(tmp_path):
    from mining.operators.shrink_work_constant import forward, work_constants
    from corpora.code.source import Source
    op = get_operator("shrink_work_constant")
    found = [(w.name, w.value, w.how) for w in work_constants(Source(COARSE_ADD))]
    assert found == [("ELEMS", 4, "constexpr")]
    new = op.apply(COARSE_ADD, op.find_sites(COARSE_ADD)[0])
    assert "constexpr int ELEMS = 1;" in new
    assert cpu_gate("vector_add", new, tmp_path).passed
    # a literal template argument at the launch is the constant's definition too
    lit = COARSE_ADD.replace("add_chunks<ELEMS><<<(N + 256 * ELEMS - 1) / (256 * ELEMS), 256>>>",
                             "add_chunks<8><<<(N + 2047) / 2048, 256>>>")
    assert [(w.name, w.value, w.how) for w in work_constants(Source(lit))] == [("PER", 8, "template_arg")]
    assert "add_chunks<1><<<" in op.apply(lit, op.find_sites(lit)[0])
    # the inverse widens a constant that is 1 again
    mats = forward(new)
    assert [m.source.count("constexpr int ELEMS = 4;") for m in mats][:1] == [1]
    assert cpu_gate("vector_add", mats[0].source, tmp_path).passed


@pytest.mark.parametrize("code", [
    # the block size: how many threads share the work, not the work of one
    "constexpr int BLOCK = 256;\n__global__ void k(float* y) { y[threadIdx.x] = 0; }\nvoid run(float* y) { k<<<4, BLOCK>>>(y); }",
    # a shared-memory extent
    "#define TILE 32\n__global__ void k(float* y) { __shared__ float t[TILE]; float r[TILE]; t[0] = 1; r[0] = t[0]; y[0] = r[0]; }",
    # a size the host dispatch picks from the problem
    "template <int C> __global__ void k(float* y) { float r[C]; for (int i = 0; i < C; ++i) r[i] = 0; y[0] = r[0]; }\n"
    "void run(float* y, int c) { switch (c) { case 8: k<8><<<1, 32>>>(y); break; default: break; } }",
    # a loop that starts at the thread's place: a problem size walked by the block, not per-thread work
    "#define BINS 256\n__global__ void k(int* h) { for (int b = threadIdx.x; b < BINS; b += blockDim.x) h[b] = 0; }",
    # a warp-size constant
    "#define WARP_SIZE 32\n__global__ void k(float* y) { float r[WARP_SIZE]; r[0] = 1; y[0] = r[0]; }",
])
def test_work_constant_refusals(code):
    assert get_operator("shrink_work_constant").find_sites(code) == [], code


# --------------------------------------------------------------------------- tiles by index algebra, thread axes swapped
TILED_T = """
#include <cuda_runtime.h>
#define TD 32
#define ROWS 8
__global__ void tt(const float* x, float* y, int R, int C) {
    __shared__ float t[TD][TD + 1];
    int cx = blockIdx.x * TD + threadIdx.x;
    int ry = blockIdx.y * TD + threadIdx.y;
    for (int j = 0; j < TD; j += ROWS)
        if (ry + j < R && cx < C) t[threadIdx.y + j][threadIdx.x] = x[(ry + j) * C + cx];
    __syncthreads();
    int ox = blockIdx.y * TD + threadIdx.x;
    int oy = blockIdx.x * TD + threadIdx.y;
    for (int j = 0; j < TD; j += ROWS)
        if (oy + j < C && ox < R) y[(oy + j) * R + ox] = t[threadIdx.x][threadIdx.y + j];
}
void transpose(const float* x, float* y, int R, int C) {
    dim3 block(TD, ROWS);
    dim3 grid((C + TD - 1) / TD, (R + TD - 1) / TD);
    tt<<<grid, block>>>(x, y, R, C);
}
"""


def test_tile_filled_by_a_multi_row_loop_is_forwarded_by_index_algebra(tmp_path):
    op = get_operator("shared_tile_to_global")
    sites = op.find_sites(TILED_T)
    assert len(sites) == 1
    new = op.apply(TILED_T, sites[0])
    assert "__shared__" not in new and "t[threadIdx.x]" not in new
    # the writer's loop variable cancels; the guard is solved with the value
    assert "x[C * threadIdx.x + C * TD * blockIdx.x + threadIdx.y + j + TD * blockIdx.y]" in new.replace("(", "").replace(")", "") \
        or "x[" in new
    assert "? x[" in new and ": 0)" in new
    assert cpu_gate("transpose", new, tmp_path).passed
    # then the thread axes trade places: the stores stop being coalesced, the result is the same
    swap = get_operator("swap_thread_axes")
    s2 = swap.find_sites(new)
    assert len(s2) == 1
    swapped = swap.apply(new, s2[0])
    assert "dim3 block(ROWS, TD);" in swapped and "dim3 grid((R + TD - 1) / TD, (C + TD - 1) / TD);" in swapped
    assert "int cx = blockIdx.y * TD + threadIdx.y;" in swapped
    assert cpu_gate("transpose", swapped, tmp_path).passed
    from mining.operators.swap_thread_axes import forward
    assert forward(swapped)  # swapping back makes a store coalesced again


@pytest.mark.parametrize("change", [
    # a thread-dependent integer division in a fill index: not exact integer algebra (one in the
    # value is fine: it is evaluated at the solved writer, never solved through)
    ("t[threadIdx.y + j][threadIdx.x] =", "t[threadIdx.y + j][threadIdx.x / 2] ="),
    # the value reads memory the kernel writes
    ("x[(ry + j) * C + cx]", "y[(ry + j) * C + cx]"),
    # no barrier between the fill and the reads
    ("    __syncthreads();\n", ""),
    # a second write to the tile
    ("    __syncthreads();\n", "    t[0][0] = 0.0f;\n    __syncthreads();\n"),
])
def test_tile_algebra_refusals(change):
    from corpora.code.source import Source
    from mining.operators.tile_algebra import algebraic_forward
    code = TILED_T.replace(*change)
    assert code != TILED_T
    src = Source(code)
    f = next(f for f in src.funcs if f.is_kernel)
    fn = src.func_node(f)
    decl, name, _ = next(d for d in src.shared_decls)
    assert algebraic_forward(src, fn, decl, name) is None, change


@pytest.mark.parametrize("code", [
    # warp-level code: swapping the axes changes which threads form a warp
    "__global__ void k(float* y) { float v = threadIdx.x + threadIdx.y; v += __shfl_xor_sync(0xffffffffu, v, 1);"
    " y[threadIdx.y * 32 + threadIdx.x] = v; }\nvoid run(float* y) { dim3 b(32, 4); k<<<1, b>>>(y); }",
    # the block shape is shared with another kernel's launch
    "__global__ void k(float* y) { y[threadIdx.y * 32 + threadIdx.x] = 1; }\n__global__ void q(float* y) {}\n"
    "void run(float* y) { dim3 b(32, 4); k<<<1, b>>>(y); q<<<1, b>>>(y); }",
    # one-dimensional: nothing to swap
    "__global__ void k(float* y) { y[threadIdx.x] = 1; }\nvoid run(float* y) { k<<<1, 32>>>(y); }",
])
def test_swap_thread_axes_refusals(code):
    assert get_operator("swap_thread_axes").find_sites(code) == [], code


# --------------------------------------------------------------------------- packed half2 math, block swizzles
def test_half2_math_one_lane_at_a_time_and_back():
    from mining.operators.half2_to_scalar import forward
    op = get_operator("half2_to_scalar")
    code = ("#include <cuda_fp16.h>\n__global__ void k(const __half2* a, const __half2* b, __half2* c, __nv_bfloat162* d) {\n"
            "  int i = threadIdx.x;\n  c[i] = __hfma2(a[i], b[i], c[i]);\n  d[i] = __hmax2(d[i], d[i + 1]);\n}")
    reps = [edited(code, op.apply(code, s), s) for s in op.find_sites(code)]
    assert reps[0] == ("([&]() { auto ks_a = (a[i]); const auto ks_b = (b[i]); const auto ks_c = (c[i]); "
                       "ks_a.x = __hfma(ks_a.x, ks_b.x, ks_c.x); ks_a.y = __hfma(ks_a.y, ks_b.y, ks_c.y); return ks_a; }())")
    assert "__hmax(ks_a.y, ks_b.y)" in reps[1]
    lanes = "__global__ void k(__half2* r, __half2 a, __half2 b) { __half2 t; t.x = __hmul(a.x, b.x); t.y = __hmul(a.y, b.y); r[0] = t; }"
    mats = forward(lanes)
    assert len(mats) == 1 and "t = __hmul2(a, b);" in mats[0].source
    # refused: a wrong arity (not the intrinsic), and a scalar half operation
    assert op.find_sites("__device__ __half2 __hadd2(__half2 a);\n__global__ void k(__half2* y) { y[0] = __hadd2(y[1]); }") == []
    assert op.find_sites("#include <cuda_fp16.h>\n__global__ void k(__half* y) { y[0] = __hadd(y[1], y[2]); }") == []


MACRO_LOOP = """
#include <cuda_runtime.h>
#define KERNEL_LOOP(i, n) \\
  for (int i = blockIdx.x * blockDim.x + threadIdx.x, step = blockDim.x * gridDim.x; i < (n); i += step)
__global__ void add_k(const float* a, const float* b, float* y, int N) {
  KERNEL_LOOP(k, N) {
    y[k] = a[k] + b[k];
  }
}
void vector_add(const float* a, const float* b, float* y, int N) { add_k<<<(N + 255) / 256, 256>>>(a, b, y, N); }
"""


def test_grid_stride_loop_spelled_by_a_macro(tmp_path):
    """OneFlow's CUDA_1D_KERNEL_LOOP(i, n) { body }: the loop is found and rewritten from the expansion."""
    op = get_operator("grid_stride_to_single")
    sites = op.find_sites(MACRO_LOOP)
    assert len(sites) == 1 and sites[0].carrier == "grid_stride"
    new = op.apply(MACRO_LOOP, sites[0])
    assert "KERNEL_LOOP(k, N)" not in new and "if (k < (N))" in new
    assert cpu_gate("vector_add", new, tmp_path).passed
    # refused: a macro loop that is not grid-stride (one thread walks all), and a plain call + block
    serial = MACRO_LOOP.replace("i = blockIdx.x * blockDim.x + threadIdx.x, step = blockDim.x * gridDim.x; i < (n); i += step",
                                "i = 0; i < (n); ++i")
    assert op.find_sites(serial) == []
    assert op.find_sites(MACRO_LOOP.replace("#define KERNEL_LOOP", "#define OTHER_LOOP")) == []


WHILE_LOOP = """
#include <cuda_runtime.h>
__global__ void add_w(const float* a, const float* b, float* y, unsigned int n) {
  unsigned int gridSize = blockDim.x * gridDim.x;
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  while (i < n) {
    y[i] = a[i] + b[i];
    i += gridSize;
  }
}
void vector_add(const float* a, const float* b, float* y, int N) { add_w<<<(N + 255) / 256, 256>>>(a, b, y, N); }
"""


def test_grid_stride_while_loop(tmp_path):
    """The CUDA-samples spelling: `while (i < n) { ...; i += gridSize; }` becomes `if`."""
    op = get_operator("grid_stride_to_single")
    sites = op.find_sites(WHILE_LOOP)
    assert len(sites) == 1 and sites[0].carrier == "grid_stride"
    new = op.apply(WHILE_LOOP, sites[0])
    assert "if (i < n) {" in new and "while" not in new
    assert cpu_gate("vector_add", new, tmp_path).passed
    # refused: i also written in the body (not one step per iteration), the update not last, a plain stride
    assert op.find_sites(WHILE_LOOP.replace("y[i] = a[i] + b[i];", "y[i] = a[i] + b[i]; i += 1;")) == []
    assert op.find_sites(WHILE_LOOP.replace("    y[i] = a[i] + b[i];\n    i += gridSize;",
                                            "    i += gridSize;\n    y[i] = a[i] + b[i];")) == []
    assert op.find_sites(WHILE_LOOP.replace("blockDim.x * gridDim.x", "n / 8")) == []


def test_stride_variables_follow_other_stride_variables():
    op = get_operator("grid_stride_to_single")
    two_levels = ("__global__ void k(float* y, long rows) {\n  const int groups = gridDim.x * blockDim.y;\n"
                  "  const long step = groups * 2;\n  for (long r = blockIdx.x * 2; r < rows; r += step) y[r] = 0;\n}")
    assert len(op.find_sites(two_levels)) == 1
    # a step that no grid or block size feeds is a plain strided loop
    assert op.find_sites(two_levels.replace("gridDim.x * blockDim.y", "rows / 4")) == []


PADDED_BY_PARAMETER = """
#include <cuda_runtime.h>
template <int T = 16, int SKEW = 0>
__global__ void tcopy(const float* x, float* y, int R, int C) {
  __shared__ float tile[T][T + SKEW];
  int c = blockIdx.x * T + threadIdx.x, r = blockIdx.y * T + threadIdx.y;
  if (r < R && c < C) tile[threadIdx.y][threadIdx.x] = x[r * C + c];
  __syncthreads();
  int oc = blockIdx.y * T + threadIdx.x, orow = blockIdx.x * T + threadIdx.y;
  if (orow < C && oc < R) y[orow * R + oc] = tile[threadIdx.x][threadIdx.y];
}
void transpose(const float* x, float* y, int R, int C) {
  tcopy<16, 1><<<dim3((C + 15) / 16, (R + 15) / 16), dim3(16, 16)>>>(x, y, R, C);
}
"""


def test_padding_named_by_a_template_parameter(tmp_path):
    """`[T + SKEW]` with SKEW used nowhere but in shared extents is padding, whatever its name."""
    op = get_operator("drop_shared_padding")
    sites = op.find_sites(PADDED_BY_PARAMETER)
    assert len(sites) == 1
    new = op.apply(PADDED_BY_PARAMETER, sites[0])
    assert "__shared__ float tile[T][T];" in new
    assert cpu_gate("transpose", new, tmp_path).passed
    # refused: the name also sizes an index (a pitch the code computes with), so it is not only an extent
    used = PADDED_BY_PARAMETER.replace("tile[threadIdx.x][threadIdx.y]", "tile[threadIdx.x][threadIdx.y + SKEW * 0]")
    assert op.find_sites(used) == []


PACKED_PATH = """
#include <cuda_runtime.h>
template <int W> struct Pack {
  float v[W];
  __device__ Pack& operator+=(const Pack& o) {
    if constexpr (W % 2 == 0) {
      for (int j = 0; j < W; j += 2) {
        float2 t{v[j], v[j + 1]};
        t.x += o.v[j]; t.y += o.v[j + 1];
        v[j] = t.x; v[j + 1] = t.y;
      }
    } else {
      for (int j = 0; j < W; ++j) v[j] += o.v[j];
    }
    return *this;
  }
};
__global__ void add2(const float* a, const float* b, float* y, int N) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (2 * i + 1 < N) {
    Pack<2> p{{a[2 * i], a[2 * i + 1]}}, q{{b[2 * i], b[2 * i + 1]}};
    p += q; y[2 * i] = p.v[0]; y[2 * i + 1] = p.v[1];
  } else if (2 * i < N) { y[2 * i] = a[2 * i] + b[2 * i]; }
}
void vector_add(const float* a, const float* b, float* y, int N) { add2<<<(N / 2 + 256) / 256, 256>>>(a, b, y, N); }
"""


def test_packed_path_keeps_the_lane_by_lane_branch(tmp_path):
    """vLLM spells packed half2 math as an `if constexpr` packed path beside the general one."""
    op = get_operator("half2_to_scalar")
    sites = op.find_sites(PACKED_PATH)
    assert len(sites) == 1 and sites[0].carrier == "packed_half2_math"
    new = op.apply(PACKED_PATH, sites[0])
    assert "float2 t" not in new and "for (int j = 0; j < W; ++j) v[j] += o.v[j];" in new
    assert cpu_gate("vector_add", new, tmp_path).passed
    # refused: no pair packed in the taken branch; no else; host code
    plain = PACKED_PATH.replace("float2 t{v[j], v[j + 1]};", "float2 t; t.x = v[j]; t.y = v[j + 1];")
    assert op.find_sites(plain) == []
    no_else = PACKED_PATH.replace("} else {\n      for (int j = 0; j < W; ++j) v[j] += o.v[j];\n    }", "}")
    assert "else" not in no_else.split("add2")[0] and op.find_sites(no_else) == []
    host = ("template <int W> void h(float* v) {\n  if constexpr (W % 2 == 0) { float2 t{v[0], v[0 + 1]}; v[0] = t.y; }\n"
            "  else { v[0] = 1; }\n}")
    assert op.find_sites(host) == []


SWIZZLED = """
#include <cuda_runtime.h>
__global__ void tcopy(const float* x, float* y, int R, int C) {
    int bcol, brow;
    if (gridDim.x == gridDim.y) {
        brow = blockIdx.x;
        bcol = (blockIdx.x + blockIdx.y) % gridDim.x;
    } else {
        int lin = blockIdx.x + gridDim.x * blockIdx.y;
        brow = lin % gridDim.y;
        bcol = ((lin / gridDim.y) + brow) % gridDim.x;
    }
    int c = bcol * 32 + threadIdx.x, r = brow * 8 + threadIdx.y;
    if (r < R && c < C) y[(size_t)c * R + r] = x[(size_t)r * C + c];
}
void transpose(const float* x, float* y, int R, int C) {
    dim3 block(32, 8), grid((C + 31) / 32, (R + 7) / 8);
    tcopy<<<grid, block>>>(x, y, R, C);
}
"""


def test_block_swizzle_becomes_the_natural_order(tmp_path):
    from mining.operators.block_swizzle_to_natural import forward
    op = get_operator("block_swizzle_to_natural")
    sites = op.find_sites(SWIZZLED)
    assert len(sites) == 1 and sites[0].carrier == "block_swizzle"
    new = op.apply(SWIZZLED, sites[0])
    assert "bcol = blockIdx.x; brow = blockIdx.y;" in new and "%" not in new.split("void transpose")[0]
    assert cpu_gate("transpose", new, tmp_path).passed
    mats = forward(new)
    assert len(mats) == 1 and "% gridDim.x" in mats[0].source
    assert cpu_gate("transpose", mats[0].source, tmp_path).passed
    # refused: blocks that talk to each other (an atomic), and a kernel that reads blockIdx again later
    assert op.find_sites(SWIZZLED.replace("if (r < R", "atomicAdd((int*)y, 0);\n    if (r < R")) == []
    assert op.find_sites(SWIZZLED.replace("r = brow * 8", "r = blockIdx.y * 8")) == []
