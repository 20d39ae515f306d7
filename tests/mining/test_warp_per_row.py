"""warp_per_row_to_thread (issue 19): a warp, or a group of W lanes, that owns a row runs as one
thread per row. Spellings it was not tuned on (the lane from `% 32`, from `& 31`, the thread index
itself in a 2-D block; reductions inline, in helpers, with a width template argument; a group of
16; the group width as a template parameter that also sizes the per-lane work), each rewritten and
gated on the CPU; the forward rewrite; and the sites it must refuse."""
from __future__ import annotations

from pathlib import Path

import pytest

from _operator_support import cpu_gate, edited
from mining.gate import GateConfig, run_gate
from mining.operators import get_operator
from mining.operators.registry import rewrites_for

ROW = get_operator("warp_per_row_to_thread")
ROW_SOFTMAX = Path(__file__).resolve().parents[2] / "eval" / "soundness" / "row_softmax"

# the lane from `% 32`, a 2-D block of (32, 4), the reductions written inline as shuffle loops
MOD_INLINE = """
#include <cuda_runtime.h>
#include <math.h>
__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int M, int N) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= M) return;
    const float* xr = x + (size_t)row * N;
    float m = -INFINITY;
    for (int j = lane; j < N; j += 32) m = fmaxf(m, xr[j]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.0f;
    for (int j = lane; j < N; j += 32) s += expf(xr[j] - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    for (int j = lane; j < N; j += 32) y[(size_t)row * N + j] = expf(xr[j] - m) / s;
}
void softmax(const float* x, float* y, int M, int N) {
    dim3 block(32, 4);
    softmax_rows<<<(M + 3) / 4, block>>>(x, y, M, N);
}
"""

# the lane from `& 31` in a 1-D block of four warps (the row from threadIdx.x / 32); helpers that
# reduce down to lane 0, which publishes the row's value through a per-row shared slot
AND_HELPER = """
#include <cuda_runtime.h>
#include <math.h>
__device__ __forceinline__ float warp_sum_down(float v) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ float warp_max_down(float v) {
    for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, off));
    return v;
}
__global__ void softmax_warps(const float* x, float* y, int M, int N) {
    __shared__ float stat[4][2];
    const int lane = threadIdx.x & 31;
    const int slot = threadIdx.x / 32;
    const int row = blockIdx.x * 4 + slot;
    if (row >= M) return;
    float m = -INFINITY;
    for (int j = lane; j < N; j += 32) m = fmaxf(m, x[(size_t)row * N + j]);
    m = warp_max_down(m);
    if (lane == 0) stat[slot][0] = m;
    __syncwarp();
    m = stat[slot][0];
    float s = 0.0f;
    for (int j = lane; j < N; j += 32) s += expf(x[(size_t)row * N + j] - m);
    s = warp_sum_down(s);
    if (lane == 0) stat[slot][1] = s;
    __syncwarp();
    s = stat[slot][1];
    for (int j = lane; j < N; j += 32) y[(size_t)row * N + j] = expf(x[(size_t)row * N + j] - m) / s;
}
void softmax(const float* x, float* y, int M, int N) {
    softmax_warps<<<(M + 3) / 4, 128>>>(x, y, M, N);
}
"""

# the thread index itself is the lane of a (16, 8) block: half-warp groups, helpers that take the
# group width as a template argument and pass it to the shuffle, the width named by a macro
HALF_WARP = """
#include <cuda_runtime.h>
#include <math.h>
#define GROUP 16
template <int W>
__device__ float group_max(float v) {
    for (int o = W / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o, W));
    return v;
}
template <int W>
__device__ float group_sum(float v) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o, W);
    return v;
}
__global__ void softmax_groups(const float* x, float* y, int M, int N) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= M) return;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < N; j += blockDim.x) m = fmaxf(m, x[(size_t)row * N + j]);
    m = group_max<GROUP>(m);
    float s = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) s += expf(x[(size_t)row * N + j] - m);
    s = group_sum<GROUP>(s);
    for (int j = threadIdx.x; j < N; j += GROUP) y[(size_t)row * N + j] = expf(x[(size_t)row * N + j] - m) / s;
}
void softmax(const float* x, float* y, int M, int N) {
    softmax_groups<<<(M + 7) / 8, dim3(GROUP, 8)>>>(x, y, M, N);
}
"""

# OneFlow's shape: the group width a template parameter that also sizes the per-lane work
# (COLS columns per lane, kept in registers), the launch picking COLS from the row length
TEMPLATE_WIDTH = """
#include <cuda_runtime.h>
#include <math.h>
template <int COLS, int W>
__global__ void softmax_cols(const float* x, float* y, int R, int C) {
    static_assert(W <= 32, "a group is at most a warp");
    float buf[COLS];
    const int lane = threadIdx.x;
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= R) return;
    float m = -INFINITY;
    for (int i = 0; i < COLS; ++i) {
        const int col = i * W + lane;
        buf[i] = col < C ? x[(size_t)row * C + col] : -INFINITY;
        m = fmaxf(m, buf[i]);
    }
    for (int o = W / 2; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o, W));
    float s = 0.0f;
    for (int i = 0; i < COLS; ++i) { buf[i] = expf(buf[i] - m); s += buf[i]; }
    for (int o = W / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o, W);
    for (int i = 0; i < COLS; ++i) {
        const int col = i * W + lane;
        if (col < C) y[(size_t)row * C + col] = buf[i] / s;
    }
}
template <int COLS>
static void launch(const float* x, float* y, int R, int C) {
    constexpr int group = 32;
    dim3 block(group, 4);
    softmax_cols<COLS, group><<<(R + 3) / 4, block>>>(x, y, R, C);
}
void row_softmax(const float* x, float* y, int R, int C) {
    if (C <= 128) launch<4>(x, y, R, C);
    else if (C <= 1024) launch<32>(x, y, R, C);
    else launch<96>(x, y, R, C);
}
"""


# a 1-D block of exactly one warp per row (the row is the block), the thread index itself the lane,
# the max reduced inline (the shuffle as the first operand), the sum in an unrolled `__shfl_down_sync`
# helper of a templated type, `threadIdx.x == 0` publishing it through shared memory
WARP_BLOCK = """
#include <cuda_runtime.h>
#include <math.h>
template <typename T>
__device__ T reduce_down(T v) {
    v += __shfl_down_sync(0xffffffffu, v, 16);
    v += __shfl_down_sync(0xffffffffu, v, 8);
    v += __shfl_down_sync(0xffffffffu, v, 4);
    v += __shfl_down_sync(0xffffffffu, v, 2);
    v += __shfl_down_sync(0xffffffffu, v, 1);
    return v;
}
__global__ void softmax_warp_block(const float* x, float* y, int N) {
    __shared__ float total;
    const float* xr = x + (size_t)blockIdx.x * N;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < N; j += 32) m = fmaxf(m, xr[j]);
    for (int o = 16; o; o >>= 1) m = fmaxf(__shfl_xor_sync(0xffffffffu, m, o), m);
    float s = 0.0f;
    for (int j = threadIdx.x; j < N; j += 32) s += expf(xr[j] - m);
    s = reduce_down<float>(s);
    if (threadIdx.x == 0) total = s;
    __syncwarp();
    for (int j = threadIdx.x; j < N; j += 32) y[(size_t)blockIdx.x * N + j] = expf(xr[j] - m) / total;
}
void softmax(const float* x, float* y, int M, int N) {
    softmax_warp_block<<<M, 32>>>(x, y, N);
}
"""


def _one(code: str) -> str:
    sites = ROW.find_sites(code)
    assert len(sites) == 1 and sites[0].carrier == "warp_per_row"
    return ROW.apply(code, sites[0])


def _row_softmax_gate(source: str, store: Path):
    cfg = GateConfig(executor="cpu", stages=("correctness",), store=store)
    return run_gate(ROW_SOFTMAX, kernel=Path("correct.cu"), config=cfg, source=source)


def test_lane_mod_32_inline_shuffles(tmp_path):
    new = _one(MOD_INLINE)
    assert "int lane = 0;" in new and "dim3 block(1, 4);" in new
    assert new.count("j < N; j += 1)") == 3 and "__shfl" not in new  # the shuffle loops are gone
    assert "int row = blockIdx.x * blockDim.y + threadIdx.y;" in new  # every block keeps its rows
    assert cpu_gate("softmax", new, tmp_path).passed


def test_after_shuffle_to_shared_the_exchange_array_goes_too(tmp_path):
    """The walk meets inline shuffles as `shuffle_to_shared` left them (a shared exchange array and
    its slot): the reduction steps, the array and the slot are deleted."""
    from _operator_support import to_fixpoint
    staged, n = to_fixpoint(get_operator("shuffle_to_shared"), MOD_INLINE)
    assert n == 2 and "ks_xchg_float" in staged
    new = _one(staged)
    assert "ks_xchg" not in new and "ks_tid" not in new and "threadIdx.z" not in new
    assert new.count("j < N; j += 1)") == 3 and "dim3 block(1, 4);" in new
    assert cpu_gate("softmax", new, tmp_path).passed
    # an exchange array that broadcasts (every lane reads slot 0 of its row) is not a reduction
    bcast = staged.replace("m = fmaxf(m, ks_xchg_float[ks_tid ^ o]);", "m = ks_xchg_float[ks_tid & ~31];")
    assert bcast != staged and ROW.find_sites(bcast) == []


def test_lane_and_31_helpers_and_a_one_dimensional_block(tmp_path):
    site = ROW.find_sites(AND_HELPER)[0]
    new = ROW.apply(AND_HELPER, site)
    assert "const int lane = 0;" in new and "const int slot = threadIdx.x / 1;" in new
    assert "m = (m);" in new and "s = (s);" in new and "__syncwarp" not in new.split("__global__")[1]
    assert "softmax_warps<<<(M + 3) / 4, 4>>>" in new  # 128 threads = 4 groups -> 4 threads, one per row
    assert "if (lane == 0) stat[slot][1] = s;" in new  # lane 0 is the row's one thread
    assert cpu_gate("softmax", new, tmp_path).passed


def test_thread_index_as_the_lane_of_a_half_warp(tmp_path):
    new = _one(HALF_WARP)
    assert "dim3(1, 8)" in new and "m = (m);" in new and "s = (s);" in new
    assert "for (int j = 0; j < N; j += blockDim.x)" in new and "for (int j = 0; j < N; j += 1)" in new
    assert "#define GROUP 16" in new  # the macro stays; the kernel's uses of it become 1
    assert cpu_gate("softmax", new, tmp_path).passed


def test_a_block_of_one_warp(tmp_path):
    """No lane variable, no threadIdx.y: the block of 32 threads is the row's group."""
    new = _one(WARP_BLOCK)
    assert "softmax_warp_block<<<M, 1>>>" in new and "s = (s);" in new and "if (0 == 0) total = s;" in new
    assert new.count("for (int j = 0; j < N; j += 1)") == 3 and "__syncwarp" not in new
    assert "__shfl" not in new.split("__global__")[1]  # the inline max steps went with their loop
    assert cpu_gate("softmax", new, tmp_path).passed


def test_template_width_carries_the_per_lane_count(tmp_path):
    new = _one(TEMPLATE_WIDTH)
    assert "softmax_cols<(COLS) * (group), 1><<<(R + 3) / 4, block>>>" in new
    assert "dim3 block(1, 4);" in new and "const int lane = 0;" in new
    assert "__shfl" not in new.split("static void launch")[0].split("softmax_cols(")[1]
    assert _row_softmax_gate(new, tmp_path).passed


def test_the_soundness_suite_kernel_and_the_forward_rewrite(tmp_path):
    """The 2-D thread-per-row form gets its warp back from the forward rewrite, and both are correct."""
    new = _one(MOD_INLINE)
    assert rewrites_for("warp_per_row_to_thread", "warp_per_row")[:2] == ["warp_per_row_2d", "warp_per_row"]
    from mining.operators.warp_per_row_to_thread import forward
    mats = forward(new)
    assert len(mats) == 1
    fwd = mats[0].source
    assert "const int ks_lane = threadIdx.x & 31;" in fwd and "dim3 block(32, 4);" in fwd
    assert "for (int j = (lane) + ks_lane; j < N; j += 32) s += expf(xr[j] - m);\n" \
           "    for (int ks_o = 16; ks_o > 0; ks_o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, ks_o);" in fwd
    assert cpu_gate("softmax", fwd, tmp_path).passed
    # the soundness suite's warp-per-row softmax (lane from & 31, row from threadIdx.x >> 5)
    correct = (ROW_SOFTMAX / "correct.cu").read_text()
    new = _one(correct)
    assert "(threadIdx.x >> 0)" in new and "<<<blocks, WARPS_PER_BLOCK * 1>>>" in new
    assert _row_softmax_gate(new, tmp_path).passed


@pytest.mark.parametrize("change", [
    # a shuffle broadcast: every lane takes lane 0's value, not a reduction
    ("    m = warp_max_down(m);\n", "    m = warp_max_down(m);\n    m = __shfl_sync(0xffffffffu, m, 0);\n"),
    # a scan across the lanes
    ("    s = warp_sum_down(s);\n", "    s = warp_sum_down(s);\n    s += __shfl_up_sync(0xffffffffu, s, 1);\n"),
    # the lane indexes shared memory: lanes meet through it
    ("    if (lane == 0) stat[slot][0] = m;", "    stat[slot][lane & 1] = m;"),
    # every lane writes an output of its own (no sweep of the row, no reduction publishing one value)
    ("    if (lane == 0) stat[slot][1] = s;", "    y[(size_t)row * N + lane] = s;\n    if (lane == 0) stat[slot][1] = s;"),
    # the block's threads are not groups of the width (a 1-D block of 96 threads is, 100 is not)
    ("softmax_warps<<<(M + 3) / 4, 128>>>", "softmax_warps<<<(M + 3) / 4, 100>>>"),
])
def test_refusals(change):
    code = AND_HELPER.replace(*change)
    assert code != AND_HELPER
    assert ROW.find_sites(code) == [], change


@pytest.mark.parametrize("code", [
    # a helper that broadcasts instead of reducing
    MOD_INLINE.replace("for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);",
                       "s = __shfl_sync(0xffffffffu, s, 0);"),
    # a 2-D tile whose x index is a column of the grid (transpose), not a lane of a row
    "#define T 32\n__global__ void tr(float* o, const float* in, int w, int h) {\n"
    "    int x = blockIdx.x * T + threadIdx.x, y = blockIdx.y * T + threadIdx.y;\n"
    "    for (int i = 0; i < T; i += 8) o[(x) * h + y + i] = in[(y + i) * w + x];\n}\n"
    "void transpose(float* o, const float* in, int w, int h) { tr<<<dim3(w / T, h / T), dim3(T, 8)>>>(o, in, w, h); }",
    # the same through locals of the block index (a diagonal block order) and a lane-strided tile loop
    "#define T 32\n__global__ void tr(float* o, const float* in, int w, int h) {\n"
    "    int bx = (blockIdx.x + blockIdx.y) % gridDim.x, by = blockIdx.x;\n"
    "    int x = bx * T + threadIdx.x, y = by * T + threadIdx.y;\n"
    "    for (int i = 0; i < T; i += 8) o[x * h + y + i * T] = in[(y + i) * w + x];\n}\n"
    "void transpose(float* o, const float* in, int w, int h) { tr<<<dim3(w / T, h / T), dim3(T, 8)>>>(o, in, w, h); }",
    # a helper reduction that scans: it reads a lower lane
    AND_HELPER.replace("v += __shfl_down_sync(0xffffffffu, v, off);", "v += __shfl_up_sync(0xffffffffu, v, off);"),
])
def test_refusals_other_kernels(code):
    assert ROW.find_sites(code) == []


def test_outside_the_edit_is_byte_identical():
    site = ROW.find_sites(MOD_INLINE)[0]
    new = ROW.apply(MOD_INLINE, site)
    a, b = MOD_INLINE.encode(), new.encode()
    assert b[:site.start_byte] == a[:site.start_byte]
    assert b[len(b) - (len(a) - site.end_byte):] == a[site.end_byte:]
    assert edited(MOD_INLINE, new, site).startswith("0;")


def test_forward_writes_a_rows_result_from_one_lane(tmp_path):
    """After the row loops every lane holds the row's value: the scalar results (house reduce_sum's
    `sums[t] = s;` and `y[0] = s;`), an atomic, and a store that is an `if`'s body with an `else`
    are written by lane 0 (then __syncwarp), never by 32 lanes at once; the result passes the CPU gate."""
    from corpora.code.source import Source
    from mining.operators.base import Context
    from mining.operators.forward import run_rewrite

    naive = (Path(__file__).resolve().parents[2] / "corpora" / "kernels" / "reduce_sum" / "naive.cu").read_text()
    every = run_rewrite("warp_per_row", naive, Context())[0]
    assert every.description.startswith("every kernel")
    assert "{ if (ks_lane == 0) { sums[t] = s; } __syncwarp(); }" in every.source
    assert "{ if (ks_lane == 0) { y[0] = s; } __syncwarp(); }" in every.source
    assert cpu_gate("reduce_sum", every.source, tmp_path).passed
    branchy = naive.replace("    y[0] = s;\n", "    if (s > 0.0f) y[0] = s; else y[0] = -s;\n    atomicAdd(y, 0.0f);\n")
    out = run_rewrite("warp_per_row", branchy, Context())[-1].source
    assert "if (s > 0.0f) { if (ks_lane == 0) { y[0] = s; } __syncwarp(); } else { if (ks_lane == 0) { y[0] = -s; }" in out
    assert "{ if (ks_lane == 0) { atomicAdd(y, 0.0f); } __syncwarp(); }" in out
    assert not Source(out).tree.root_node.has_error
    # the lane-strided loop's own stores stay on every lane (each element written by one lane)
    lay = (Path(__file__).resolve().parents[2] / "corpora" / "kernels" / "layernorm" / "naive.cu").read_text()
    fwd = run_rewrite("warp_per_row", lay, Context())[0].source
    assert "ks_lane == 0" not in fwd and "j += 32) yr[j] = " in fwd
