"""The row-wise forward rewrites on kernels from outside the project (issue 20): a running max, min
or sum read by meaning whatever its spelling (mining/operators/running_update.py), so warp_per_row
and fuse_softmax_sweeps fire on a compare-and-assign or `s = s + e` row loop; block_per_row takes
a one-row-per-thread kernel to one row per block. Each on small kernels in other spellings, the
sites each must refuse, and the CPU gate on what they produce."""
from __future__ import annotations

import pytest

from _operator_support import cpu_gate, read_kernel
from corpora.code.source import Source
from mining.operators.base import Context
from mining.operators.forward import run_rewrite
from mining.operators.running_update import read_update


def _update(stmt: str, decls: str = "float m, s; int k; double d; __half h; float a[4];"):
    src = Source(f"__global__ void f(const float* x, int i) {{ {decls} for (;;) {{ {stmt} }} }}")
    loop = next(n for n in src.nodes("for_statement"))
    body = loop.child_by_field_name("body")
    node = [c for c in body.named_children if c.type != "comment"][0]
    u = read_update(src, node)
    return None if u is None else (u.target, u.op, " ".join(u.operand.split()), u.fn)


@pytest.mark.parametrize("stmt, want", [
    ("s += x[i];", ("s", "+", "x[i]", "")),
    ("s = s + x[i] * x[i];", ("s", "+", "x[i] * x[i]", "")),
    ("s = expf(x[i]) + s;", ("s", "+", "expf(x[i])", "")),
    ("s = x[i] - 1.0f + s;", ("s", "+", "x[i] - 1.0f", "")),
    ("m = fmaxf(x[i], m);", ("m", "max", "x[i]", "fmaxf")),
    ("m = max(m, x[i]);", ("m", "max", "x[i]", "fmaxf")),  # the call of m's type
    ("m = x[i] > m ? x[i] : m;", ("m", "max", "x[i]", "fmaxf")),
    ("m = (m < x[i]) ? x[i] : m;", ("m", "max", "x[i]", "fmaxf")),
    ("m = x[i] < m ? x[i] : m;", ("m", "min", "x[i]", "fminf")),
    ("m = m >= x[i] ? x[i] : m;", ("m", "min", "x[i]", "fminf")),
    ("if (x[i] > m) m = x[i];", ("m", "max", "x[i]", "fmaxf")),
    ("if (m < x[i]) { m = x[i]; }", ("m", "max", "x[i]", "fmaxf")),
    ("if (x[i] < d) d = x[i];", ("d", "min", "x[i]", "fmin")),
    ("k = k > i ? k : i;", ("k", "max", "i", "max")),
    ("a[i] = a[i] + x[i];", ("a[i]", "+", "x[i]", "")),
])
def test_one_update_however_spelled(stmt, want):
    assert _update(stmt) == want


@pytest.mark.parametrize("stmt", [
    "s = s * 0.5f + x[i];",  # the sum is scaled: not a running sum
    "s = s + s * x[i];",  # the term reads the sum
    "s = x[i] + x[i + 1];",  # no sum at all
    "m = x[i] > s ? x[i] : m;",  # compared with another variable
    "m = x[i] > m ? m : 0.0f;",  # the kept value is not one of the compared ones
    "if (x[i] > m) m = x[i]; else m = 0.0f;",  # an else branch
    "if (x[i] > m) m = x[i] + 1.0f;",  # assigns something other than what it compared
    "if (x[i] > m) { m = x[i]; s += 1.0f; }",  # does more than the update
    "m = x[i++] > m ? x[i] : m;",  # side effects in the operand
    "h = x[i] > h ? x[i] : h;",  # __half: no plain max call for the type
    "m -= x[i];",
])
def test_refused_updates(stmt):
    assert _update(stmt) is None


# one thread per row, the max as a compare-and-assign, the sum as `s = s + e` with the fast exponential
TERNARY = """
#include <cuda_runtime.h>
__global__ void soft_rows(const float* __restrict__ x, float* __restrict__ y, int M, int N) {
    const int r = threadIdx.x + blockIdx.x * blockDim.x;
    if (r < M) {
        float mx = -1e30f;
        for (int j = 0; j < N; j++) {
            float v = x[r * N + j];
            mx = v > mx ? v : mx;
        }
        float sum = 0.f;
        for (int j = 0; j < N; j++) sum = sum + __expf(x[r * N + j] - mx);
        for (int j = 0; j < N; j++) y[r * N + j] = __expf(x[r * N + j] - mx) / sum;
    }
}
void softmax(const float* x, float* y, int M, int N) { soft_rows<<<(M + 255) / 256, 256>>>(x, y, M, N); }
"""

IF_MAX = TERNARY.replace("            mx = v > mx ? v : mx;\n", "            if (v > mx) { mx = v; }\n")


@pytest.mark.parametrize("naive", [TERNARY, IF_MAX], ids=["ternary", "if"])
def test_warp_per_row_reads_the_max_and_sum_however_spelled(naive, tmp_path):
    mats = run_rewrite("warp_per_row", naive, Context())
    assert len(mats) == 1 and "3 loop(s) lane-strided" in mats[0].description
    new = mats[0].source
    assert "mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, ks_o));" in new
    assert "sum += __shfl_xor_sync(0xffffffffu, sum, ks_o);" in new
    assert cpu_gate("softmax", new, tmp_path).passed


@pytest.mark.parametrize("naive", [TERNARY, IF_MAX], ids=["ternary", "if"])
def test_fuse_softmax_sweeps_reads_the_max_however_spelled(naive, tmp_path):
    mats = run_rewrite("fuse_softmax_sweeps", naive, Context())
    assert len(mats) == 1
    new = mats[0].source
    assert ("float ks_mx = fmaxf(mx, v);\n            sum = sum * __expf(mx - ks_mx) + "
            "__expf(x[r * N + j] - ks_mx);\n            mx = ks_mx;") in new
    assert new.count("for (int j") == 2
    assert cpu_gate("softmax", new, tmp_path).passed


def test_a_double_row_keeps_its_type():
    naive = TERNARY.replace("float", "double").replace("__expf", "exp").replace("1e30f", "1e300")
    fused = run_rewrite("fuse_softmax_sweeps", naive, Context())[0].source
    assert "double ks_mx = fmax(mx, v);" in fused
    warp = run_rewrite("warp_per_row", naive, Context())[0].source
    assert "mx = fmax(mx, __shfl_xor_sync(" in warp


@pytest.mark.parametrize("change", [
    ("mx = v > mx ? v : mx;", "mx = v > sum ? v : mx;"),  # compared with another variable
    ("mx = v > mx ? v : mx;", "mx = v > mx ? v : mx * 0.5f;"),
])
def test_max_sweeps_that_are_no_running_max_are_refused(change):
    naive = TERNARY.replace(*change)
    assert run_rewrite("fuse_softmax_sweeps", naive, Context()) == []
    warp = run_rewrite("warp_per_row", naive, Context())
    assert all("3 loop(s)" not in m.description for m in warp)  # that loop stays serial in every lane


# --------------------------------------------------------------------------- block_per_row
def test_block_per_row_from_one_row_per_thread(tmp_path):
    """The house naive softmax and layernorm (one row per thread, `m = xr[0]` then a max sweep from
    1) become one row per block: block-stride sweeps, block all-reduces, the grid times the block."""
    for problem in ("softmax", "layernorm"):
        naive = read_kernel(problem, "naive.cu")
        mats = [m for m in run_rewrite("block_per_row", naive, Context()) if "per block" in m.description]
        assert len(mats) == 1
        new = mats[0].source
        assert "/ blockDim.x;  // ks-optimize: one row per block" in new
        assert "j += blockDim.x)" in new and "j += 1)" not in new
        assert "<<<((M + 127) / 128) * 128, 128>>>" in new
        assert cpu_gate(problem, new, tmp_path / problem).passed


def test_block_per_row_spellings(tmp_path):
    mats = [m for m in run_rewrite("block_per_row", TERNARY, Context()) if "per block" in m.description]
    assert len(mats) == 1 and "3 loop(s) block-strided" in mats[0].description
    new = mats[0].source
    assert "__shared__ float ks_part_mx[32];" in new and "mx = fmaxf(mx, ks_part_mx[ks_w]);" in new
    assert "sum += ks_part_sum[ks_w];" in new
    assert cpu_gate("softmax", new, tmp_path).passed


@pytest.mark.parametrize("change", [
    ("soft_rows<<<(M + 255) / 256, 256>>>", "soft_rows<<<(M + 99) / 100, 100>>>"),  # not whole warps
    ("soft_rows<<<(M + 255) / 256, 256>>>", "soft_rows<<<(M + 2047) / 2048, 2048>>>"),  # over a block's limit
    ("soft_rows<<<(M + 255) / 256, 256>>>", "soft_rows<<<(M + 255) / 256, dim3(32, 8)>>>"),  # a 2-D block
    ("    const int r = threadIdx.x + blockIdx.x * blockDim.x;\n",
     "    const int r = threadIdx.x + blockIdx.x * blockDim.x;\n    __shared__ float t[1];\n"),  # shares already
])
def test_block_per_row_refusals(change):
    naive = TERNARY.replace(*change)
    assert naive != TERNARY
    assert [m for m in run_rewrite("block_per_row", naive, Context()) if "per block" in m.description] == []


def test_block_per_row_leaves_an_array_accumulator_serial():
    # a per-thread histogram of the row: its loop is no block site (the all-reduce is scalar only)
    naive = TERNARY.replace("        float sum = 0.f;\n",
                            "        float sum = 0.f;\n        float h[2] = {0.f, 0.f};\n"
                            "        for (int j = 0; j < N; j++) h[j & 1] += x[r * N + j];\n")
    mats = [m for m in run_rewrite("block_per_row", naive, Context()) if "per block" in m.description]
    assert len(mats) == 1 and "3 loop(s) block-strided" in mats[0].description
    assert "for (int j = 0; j < N; j++) h[j & 1] += x[r * N + j];" in mats[0].source


# --------------------------------------------------------------------------- vectorize_block_rows
# one block per row, one element per thread: a max through shuffles and shared partials, a sum
# through a shared tree, the block index through a local copy, the reads unguarded
ROW_BLOCK = """
#include <cuda_runtime.h>
__device__ float row_max(float v) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = part[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) r = fmaxf(r, part[w]);
    __syncthreads();
    return r;
}
__device__ float row_sum(float v) {
    __shared__ float buf[1024];
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    float r = buf[0];
    __syncthreads();
    return r;
}
__global__ void softmax_rowblock(const float* x, float* y, int M, int N) {
    const int row = blockIdx.x;
    const int i = row * blockDim.x + threadIdx.x;
    float v = x[i];
    float m = row_max(v);
    float e = __expf(v - m);
    float s = row_sum(e);
    y[i] = e / s;
}
void softmax(const float* x, float* y, int M, int N) {
    if (N == 128) softmax_rowblock<<<M, 128>>>(x, y, M, N);
    else if (N == 256) softmax_rowblock<<<M, 256>>>(x, y, M, N);
    else softmax_rowblock<<<M, 512>>>(x, y, M, N);
}
"""


def _row_problem(tmp_path):
    """The house softmax problem with rows of 128, 256 and 512 (the block-per-row kernel's lengths)."""
    import shutil
    from pathlib import Path
    d = tmp_path / "softmax_rows"
    shutil.copytree(Path(__file__).resolve().parents[2] / "corpora" / "kernels" / "softmax", d)
    (d / "workloads.jsonl").write_text('{"axes": {"M": 64, "N": 128}}\n{"axes": {"M": 37, "N": 256}}\n'
                                       '{"axes": {"M": 5, "N": 512}, "tags": ["odd"]}\n')
    return d


def _gate(problem_dir, source, store):
    from pathlib import Path
    from mining.gate import GateConfig, run_gate
    cfg = GateConfig(executor="cpu", stages=("correctness",), store=store, seeds=(0,))
    return run_gate(problem_dir, kernel=Path("kernel.cu"), config=cfg, source=source)


def test_vectorize_block_rows(tmp_path):
    problem = _row_problem(tmp_path)
    assert _gate(problem, ROW_BLOCK, tmp_path / "a").passed
    mats = run_rewrite("vectorize_block_rows", ROW_BLOCK, Context())
    assert len(mats) == 1 and mats[0].carrier == "vector_load"
    new = mats[0].source
    assert "const int i = (row * blockDim.x + threadIdx.x) * 4;" in new
    assert "*reinterpret_cast<uint4*>(ks_x) = *reinterpret_cast<const uint4*>(x + i);" in new
    assert "float m = row_max(fmaxf(fmaxf(v_ks0, v_ks1), fmaxf(v_ks2, v_ks3)));" in new
    assert "float s = row_sum((e_ks0) + (e_ks1) + (e_ks2) + (e_ks3));" in new
    assert "*reinterpret_cast<uint4*>(y + i) = *reinterpret_cast<const uint4*>(ks_o);" in new
    assert "softmax_rowblock<<<M, 32>>>" in new and "softmax_rowblock<<<M, 128>>>" in new
    assert _gate(problem, new, tmp_path / "b").passed


def test_vectorize_block_rows_narrows_to_whole_warps():
    # a 64-thread block holds no 16-byte-per-thread block of whole warps: 8 bytes (2 floats) per thread
    src = ROW_BLOCK.replace("<<<M, 128>>>", "<<<M, 64>>>")
    new = run_rewrite("vectorize_block_rows", src, Context())[0].source
    assert "const int i = (row * blockDim.x + threadIdx.x) * 2;" in new and "uint2" in new
    assert "softmax_rowblock<<<M, 32>>>" in new and "softmax_rowblock<<<M, 256>>>" in new


def test_vectorize_block_rows_on_a_template_reduction_width():
    # LeetCUDA's form: the block size is also the reductions' template argument, and it shrinks with it
    src = (ROW_BLOCK.replace("__device__ float row_sum(float v)", "template <int NT>\n__device__ float row_sum(float v)")
           .replace("__global__ void softmax_rowblock", "template <int NT>\n__global__ void softmax_rowblock")
           .replace("row_sum(e)", "row_sum<NT>(e)")
           .replace("softmax_rowblock<<<M, 128>>>", "softmax_rowblock<128><<<M, 128>>>")
           .replace("softmax_rowblock<<<M, 256>>>", "softmax_rowblock<256><<<M, 256>>>")
           .replace("softmax_rowblock<<<M, 512>>>", "softmax_rowblock<512><<<M, 512>>>"))
    new = run_rewrite("vectorize_block_rows", src, Context())[0].source
    assert "softmax_rowblock<32><<<M, 32>>>" in new and "softmax_rowblock<128><<<M, 128>>>" in new
    # the same parameter used for anything else is not (only) the block size: refused
    other = src.replace("    float v = x[i];\n", "    float v = x[i] * NT;\n")
    assert run_rewrite("vectorize_block_rows", other, Context()) == []


@pytest.mark.parametrize("change", [
    ("<<<M, 128>>>", "<<<M, 96>>>"),  # no width leaves whole warps
    ("float v = x[i];", "float v = x[i] + x[i + 1];"),  # another thread's element
    ("    y[i] = e / s;", "    ((float*)x)[i] = e / s;\n    y[i] = e / s;"),  # x read and written
    ("    y[i] = e / s;", "    y[i] = e / s;\n    if (threadIdx.x < 4) y[row] = s;"),  # another use of the thread index
    ("float e = __expf(v - m);", "float e = __expf(v - m);\n    for (int k = 0; k < 2; ++k) e *= 0.5f;"),  # a loop
    ("float s = row_sum(e);", "float s = row_sum(e) + v;"),  # a reduction mixed with the element
    ("if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];",
     "if (threadIdx.x < s) buf[threadIdx.x] *= buf[threadIdx.x + s];"),  # a product: neither sum nor max
    ("const float* x, float* y", "const double* x, float* y"),  # two element types
    ("    y[i] = e / s;", "    y[i] = e / s / row_sum(1.0f);"),  # a thread count: it changes with the block
])
def test_vectorize_block_rows_refusals(change):
    src = ROW_BLOCK.replace(*change)
    assert src != ROW_BLOCK
    assert run_rewrite("vectorize_block_rows", src, Context()) == []


# --------------------------------------------------------------------------- fuse_rescale_passes
@pytest.mark.parametrize("spelled", ["m = s * scale > m ? s * scale : m;", "if (m < s * scale) { m = s * scale; }"])
def test_fuse_rescale_passes_reads_the_max_however_spelled(spelled, tmp_path):
    naive = read_kernel("attention_fwd", "naive.cu").replace("m = fmaxf(m, s * scale);", spelled)
    mats = run_rewrite("fuse_rescale_passes", naive, Context())
    assert len(mats) == 1
    new = mats[0].source
    assert "const float ks_m_new = fmaxf(m, s * scale);\n        const float ks_alpha = expf(m - ks_m_new);" in new
    assert new.count("for (int j = 0; j < S; ++j)") == 1
    assert cpu_gate("attention_fwd", new, tmp_path).passed


def test_fuse_rescale_passes_refuses_a_running_min():
    naive = read_kernel("attention_fwd", "naive.cu").replace("m = fmaxf(m, s * scale);",
                                                              "m = s * scale < m ? s * scale : m;")
    assert run_rewrite("fuse_rescale_passes", naive, Context()) == []
