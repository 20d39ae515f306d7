"""vectorize_loop on block-stride and lane-stride loops (issue 20): each thread moves W consecutive
elements per pass as one 16- or 8-byte access per pointer, the pass's stride scaled, per-thread
accumulations fed all W elements, the rest (and rows whose start is not aligned) in the original
strided order. Variants written here in other spellings than the real corpus' vLLM
fused_add_rms_norm and how-to-optim sgemv (aliases of the thread index and the block size, a
hand-written tree reduction, a warp per row on a one-dimensional block, a template element type
named through an alias), the sites it must refuse, and CPU gate runs: on the house rmsnorm_residual
problem, on the real sgemv wrapper with a kernel written here, and on the real fused_add_rms_norm
naive itself, read from a materialized real-corpus folder (`SKILLS_REAL_PROBLEMS`, the folder
`eval/bench_optimize.py --real-problems` takes; skipped otherwise: fetched code is never committed)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from mining.gate import GateConfig, run_gate
from mining.operators.forward import run_rewrite

ROOT = Path(__file__).resolve().parents[2]
HOUSE_RMS = ROOT / "corpora" / "kernels" / "rmsnorm_residual"
SGEMV = ROOT / "corpora" / "real" / "how-to-optim" / "sgemv"
FUSED = ROOT / "corpora" / "real" / "vllm" / "fused_add_rms_norm"
RMS = ROOT / "corpora" / "real" / "vllm" / "rms_norm"  # its naive.cu is the project's own
REAL = os.environ.get("SKILLS_REAL_PROBLEMS")
REAL_FUSED = Path(REAL) / "vllm" / "fused_add_rms_norm" / "naive.cu" if REAL else None
REAL_SGEMV = Path(REAL) / "how-to-optim" / "sgemv" / "naive.cu" if REAL else None

# a block per row; the thread index and block size through locals, a hand-written shared tree
# reduction between the two row loops (its barriers separate the producer of residual_out from
# the loop that reads it back)
BLOCK_ROWS = r"""
#define NT 128
__global__ void rms_rows(const float* __restrict__ x, const float* __restrict__ residual,
                         const float* __restrict__ weight, float* __restrict__ y, float* __restrict__ residual_out,
                         int M, int N, float eps) {
    __shared__ float part[NT];
    __shared__ float scale;
    const int tid = threadIdx.x;
    const int nthreads = blockDim.x;
    const size_t base = (size_t)blockIdx.x * N;
    float ss = 0.0f;
    for (int j = tid; j < N; j += nthreads) {
        const float h = x[base + j] + residual[base + j];
        residual_out[base + j] = h;
        ss += h * h;
    }
    part[tid] = ss;
    __syncthreads();
    for (int s = NT / 2; s > 0; s >>= 1) {
        if (tid < s) part[tid] += part[tid + s];
        __syncthreads();
    }
    if (tid == 0) scale = 1.0f / sqrtf(part[0] / N + eps);
    __syncthreads();
    for (int j = tid; j < N; j += nthreads) y[base + j] = residual_out[base + j] * scale * weight[j];
}

void rmsnorm_residual(const float* x, const float* residual, const float* weight, float* y, float* residual_out,
                      int M, int N, float eps) {
    rms_rows<<<M, NT>>>(x, residual, weight, y, residual_out, M, N, eps);
}
"""

# a warp per row on a one-dimensional block: the warp index `threadIdx.x >> 5` is one value per
# warp, the lane `threadIdx.x & 31`, the element `WARP * k + lane` bound in the loop's first line
LANE_ROWS = r"""
#define WARP 32
__global__ void gemv_warps(const float* A, const float* x, float* y, int M, int N) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x / WARP) + (threadIdx.x >> 5);
    if (row >= M) return;
    float acc = 0.0f;
    for (int k = 0; k < N / WARP; k++) {
        int c = WARP * k + lane;
        acc += A[(size_t)row * N + c] * __ldg(&x[c]);
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) y[row] = acc;
}

void sgemv(const float* A, const float* x, float* y, int M, int N) {
    gemv_warps<<<(M + 3) / 4, 128>>>(A, x, y, M, N);
}
"""

# a template element type launched through an alias (two bytes: eight per 16-byte access), read,
# updated in place and written back at the same index; a float weight beside it sets a width of
# four (the half pointers then move 8 bytes a pass)
TEMPLATE_ROWS = r"""
#include <cuda_fp16.h>
using hf = __half;
template <typename T>
__global__ void add_rows(T* h, const T* r, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        h[blockIdx.x * n + i] = h[blockIdx.x * n + i] + r[blockIdx.x * n + i];
    }
}
template <typename T>
__global__ void scale_rows(T* h, const float* w, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        h[blockIdx.x * n + i] = (T)((float)h[blockIdx.x * n + i] * w[i]);
    }
}
void run(hf* h, const hf* r, const float* w, int rows, int n) {
    add_rows<hf><<<rows, 256>>>(h, r, n);
    scale_rows<hf><<<rows, 256>>>(h, w, n);
}
"""


def forward(source: str) -> list[str]:
    return [m.source for m in run_rewrite("vectorize_loop", source)]


def gate(source: str, store: Path, problem: Path):
    cfg = GateConfig(executor="cpu", stages=("correctness",), store=store, seeds=(0,))
    return run_gate(problem, kernel=Path("naive.cu"), config=cfg, source=source)


def test_block_stride_rows_move_four_floats_per_pass_and_pass_the_house_gate(tmp_path):
    out = run_rewrite("vectorize_loop", BLOCK_ROWS)
    assert len(out) == 3  # both loops, then each alone
    new = out[0].source
    assert new.count("ks_v += nthreads") == 2 and new.count("ks_e += nthreads") == 2
    assert "ks_v = tid;" in new
    assert "*reinterpret_cast<uint4*>(ks_x) = reinterpret_cast<const uint4*>(x + (base))[ks_v];" in new
    assert "reinterpret_cast<uint4*>(residual_out + (base))[ks_v] = *reinterpret_cast<const uint4*>(ks_residual_out);" in new
    assert "ss += h * h;" in new and "ks_span / 4" in new
    assert "for (int s = NT / 2; s > 0; s >>= 1)" in new  # the tree reduction is no element loop
    assert gate(BLOCK_ROWS, tmp_path / "naive", HOUSE_RMS).passed
    for i, m in enumerate(out):
        assert gate(m.source, tmp_path / f"v{i}", HOUSE_RMS).passed, m.description


def test_lane_stride_warp_rows_pass_the_sgemv_gate(tmp_path):
    out = forward(LANE_ROWS)
    assert len(out) == 1
    new = out[0]
    assert "for (long long ks_v = lane; ks_v < ks_nv; ks_v += WARP)" in new
    assert "reinterpret_cast<const uint4*>(A + ((size_t)row * N))[ks_v]" in new
    assert "acc += ks_A[ks_k] * ks_x[ks_k];" in new
    assert "const int c = (int)ks_e;" in new and "int c = WARP * k + lane;" not in new
    assert "ks_span = (long long)((N / WARP) * WARP) - (long long)(0)" in new
    assert gate(new, tmp_path, SGEMV).passed


def test_template_types_and_mixed_widths():
    out = forward(TEMPLATE_ROWS)
    assert len(out) == 3
    add = next(s for s in out if "alignas(16) T ks_r[8];" in s)
    # read, updated and written back at the same index: one load and one store of h per pass
    assert "*reinterpret_cast<uint4*>(ks_h) = reinterpret_cast<const uint4*>(h + (blockIdx.x * n))[ks_v];" in add
    assert "reinterpret_cast<uint4*>(h + (blockIdx.x * n))[ks_v] = *reinterpret_cast<const uint4*>(ks_h);" in add
    scale = next(s for s in out if "ks_w[4]" in s and "ks_r" not in s)
    assert "reinterpret_cast<const uint2*>(h + (blockIdx.x * n))[ks_v]" in scale  # 4 halves: 8 bytes
    assert "reinterpret_cast<const uint4*>(w)[ks_v]" in scale  # 4 floats: 16 bytes
    assert "& 7) == 0" in scale and "& 15) == 0" in scale
    # a second instantiation with another element size: no one width
    two = TEMPLATE_ROWS.replace("    scale_rows<hf>", "    add_rows<float><<<rows, 256>>>((float*)h, (const float*)r, n);\n"
                                "    scale_rows<hf>")
    assert not any("ks_r[" in s for s in forward(two))


@pytest.mark.parametrize("old, new, why", [
    ("y[base + j] = residual_out[base + j] * scale * weight[j];",
     "y[base + j] = residual_out[base + j] * scale * weight[j] * j;", "the index feeds a value"),
    ("y[base + j] = residual_out[base + j] * scale * weight[j];",
     "y[base + j] = residual_out[base + j] * scale * weight[j] * threadIdx.x;", "the body reads the thread"),
    ("y[base + j] = residual_out[base + j] * scale * weight[j];",
     "y[base + j] = residual_out[base + j + 1] * scale * weight[j];", "a neighbour's element"),
    ("y[base + j] = residual_out[base + j] * scale * weight[j];",
     "y[base + j] = y[base + j + 1] * scale * weight[j];", "another iteration's element of a written pointer"),
    ("for (int j = tid; j < N; j += nthreads) y", "for (int j = tid; j < N; j += 32) y", "stride and thread disagree"),
])
def test_second_loop_refusals(old, new, why):
    assert old in BLOCK_ROWS
    out = run_rewrite("vectorize_loop", BLOCK_ROWS.replace(old, new))
    # the first loop alone is still vectorized; the second one never is
    assert len(out) == 1 and "ks_y" not in out[0].source, why


def test_first_loop_refusals():
    # no barrier between the loop that writes residual_out and the one that reads it back: each
    # thread read its own elements before, another thread's after the rewrite
    nobar = BLOCK_ROWS.replace("    __syncthreads();\n    for (int s", "    for (int s").replace(
        "        __syncthreads();\n    }", "    }").replace(
        "    if (tid == 0) scale = 1.0f / sqrtf(part[0] / N + eps);\n    __syncthreads();\n", "")
    assert "__syncthreads" not in nobar
    assert not any("ks_residual_out" in s for s in forward(nobar))
    # a plain write of an outer scalar (the last element, not an accumulation)
    last = BLOCK_ROWS.replace("        ss += h * h;", "        ss = h;")
    assert not any("ks_residual[" in s for s in forward(last))
    # an element type with no vector access (a 12-byte struct)
    f3 = BLOCK_ROWS.replace("const float* __restrict__ residual,", "const float3* __restrict__ residual,").replace(
        "x[base + j] + residual[base + j]", "x[base + j] + residual[base + j].x")
    assert not any("ks_residual[" in s for s in forward(f3))
    # the start depends on the thread beyond its own index
    skew = BLOCK_ROWS.replace("const size_t base = (size_t)blockIdx.x * N;", "const size_t base = (size_t)blockIdx.x * N + tid % 2;")
    assert forward(skew) == []


def test_lane_refusals():
    # the lane form's row from the whole thread index (not one value per warp)
    bad = LANE_ROWS.replace("(threadIdx.x >> 5)", "(threadIdx.x >> 4)")
    assert forward(bad) == []
    # the loop counter read beside the element
    assert forward(LANE_ROWS.replace("* __ldg(&x[c]);", "* __ldg(&x[c]) * k;")) == []
    # the stride is not the warp
    assert forward(LANE_ROWS.replace("int c = WARP * k + lane;", "int c = 16 * k + lane;")) == []


# half rows, a warp per row in another spelling than warp_per_row's (a lane alias through `%`, the
# row from `threadIdx.x / 32` of a one-dimensional block, the start a literal 0 plus the lane)
HALF_WARPS = r"""
#include <cuda_fp16.h>
__global__ void rms_warps(__half* out, const __half* input, const __half* weight, float epsilon, int num_tokens,
                          int hidden_size) {
    const int tid = threadIdx.x;
    const int lane = tid % 32;
    const int tok = blockIdx.x * (blockDim.x / 32) + tid / 32;
    if (tok >= num_tokens) return;
    const size_t off = (size_t)tok * hidden_size;
    float ss = 0.0f;
    for (int c = lane; c < hidden_size; c += 32) {
        const float v = __half2float(input[off + c]);
        ss += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = rsqrtf(ss / hidden_size + epsilon);
    for (int c = lane; c < hidden_size; c += 32)
        out[off + c] = __hmul(__float2half(__half2float(input[off + c]) * inv), weight[c]);
}

void rms_norm(const half* input, const half* weight, half* out, float epsilon, int num_tokens, int hidden_size) {
    rms_warps<<<(num_tokens + 3) / 4, 128>>>(out, input, weight, epsilon, num_tokens, hidden_size);
}
"""


def test_half_warp_rows_move_eight_halves_and_pass_the_rms_norm_gate(tmp_path):
    out = forward(HALF_WARPS)
    assert len(out) == 3
    new = out[0]
    assert new.count("alignas(16) __half ks_input[8];") == 2 and new.count("ks_v += 32") == 2
    assert "reinterpret_cast<uint4*>(out + (off))[ks_v] = *reinterpret_cast<const uint4*>(ks_out);" in new
    assert gate(new, tmp_path / "a", RMS).passed
    # the row from the thread index itself is not one value per warp
    assert forward(HALF_WARPS.replace("+ tid / 32;", "+ tid / 16;")) == []


def test_warp_per_row_lane_loops_over_halves(tmp_path):
    # the project's own thread-per-row naive with its entry shim, through warp_per_row: its lane loops (`(0) + ks_lane`,
    # `+= 32`) over __half, which the float4 form leaves alone, move eight halves a pass
    naive = (RMS / "naive.cu").read_text() + "\n" + (RMS / "shims" / "naive.cu").read_text()  # kernel + entry
    wpr = [m.source for m in run_rewrite("warp_per_row", naive)]
    assert len(wpr) == 1
    out = forward(wpr[0])
    assert len(out) == 3 and out[0].count("ks_v = ks_lane; ks_v < ks_nv; ks_v += 32") == 2
    assert gate(out[0], tmp_path, RMS).passed


@pytest.mark.skipif(REAL_FUSED is None or not REAL_FUSED.is_file(),
                    reason="SKILLS_REAL_PROBLEMS names no materialized real corpus")
def test_real_fused_add_rms_norm_naive(tmp_path):
    out = run_rewrite("vectorize_loop", REAL_FUSED.read_text())
    assert len(out) == 3
    new = out[0].source  # both row loops
    assert new.count("alignas(16) scalar_t ks_residual[8];") == 2  # c10::Half: eight per 16-byte access
    assert "ks_v += blockDim.x" in new and "variance += x * x;" in new
    assert gate(new, tmp_path, FUSED).passed
    sg = forward(REAL_SGEMV.read_text())
    assert len(sg) == 1 and "ks_v += warp_size" in sg[0]
    assert gate(sg[0], tmp_path / "sgemv", SGEMV).passed
