"""Forward halves of the two-pass operators that had none (issue 19, Deliver 3): fuse_softmax_sweeps
(online_softmax_to_two_pass' inverse), chan_merge_stats (chan_stats_to_two_pass') and
fuse_rescale_passes (online_rescale_to_two_pass') and double_buffer_tiles (double_to_single_buffer')
on kernels
written in spellings they were not written for, the sites they must refuse, CPU gate runs of their
candidates and round trips through the backward halves."""
from __future__ import annotations

import pytest

from _operator_support import cpu_gate, read_kernel, to_fixpoint
from mining.carriers import detect_carriers
from mining.operators import get_operator
from mining.operators.forward import run_rewrite
from mining.operators.registry import inverses

SOFTMAX = get_operator("online_softmax_to_two_pass")

# --------------------------------------------------------------------------- fuse_softmax_sweeps
# one thread per row, -INFINITY as the max's identity, the max written `fmaxf(x, m)`, the sum sweep
# with its own loop variable and a named exponential
THREAD_ROWS = """
#include <cuda_runtime.h>
#include <math.h>
__global__ void softmax_thread_rows(const float* x, float* y, int M, int N) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    const float* in = x + (size_t)r * N;
    float* out = y + (size_t)r * N;
    float mx = -INFINITY;
    for (int c = 0; c < N; c++) mx = fmaxf(in[c], mx);
    float denom = 0.0f;
    for (int k = 0; k < N; k++) {
        const float e = expf(in[k] - mx);
        denom += e;
    }
    for (int c = 0; c < N; c++) out[c] = expf(in[c] - mx) / denom;
}
void softmax(const float* x, float* y, int M, int N) { softmax_thread_rows<<<(M + 63) / 64, 64>>>(x, y, M, N); }
"""

# one block per row: block-stride sweeps, the max reduced through a shared tree between them (so the
# fused sum must be rescaled to the block's max), `s = s + ...` and the fast exponential
BLOCK_ROWS = """
#include <cuda_runtime.h>
#include <float.h>
#define NT 128
__global__ void softmax_block_rows(const float* x, float* y, int M, int N) {
    __shared__ float red[NT];
    const int tid = threadIdx.x;
    const float* xr = x + (size_t)blockIdx.x * N;
    float* yr = y + (size_t)blockIdx.x * N;
    float m = -FLT_MAX;
    for (int j = tid; j < N; j += NT) {
        float v = xr[j];
        m = fmaxf(m, v);
    }
    red[tid] = m;
    __syncthreads();
    for (int h = NT / 2; h > 0; h >>= 1) {
        if (tid < h) red[tid] = fmaxf(red[tid], red[tid + h]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float s = 0.f;
    for (int i = tid; i < N; i += NT) {
        float v = xr[i];
        s = s + __expf(v - m);
    }
    red[tid] = s;
    __syncthreads();
    for (int h = NT / 2; h > 0; h >>= 1) {
        if (tid < h) red[tid] += red[tid + h];
        __syncthreads();
    }
    s = red[0];
    for (int j = tid; j < N; j += NT) yr[j] = __expf(xr[j] - m) / s;
}
void softmax(const float* x, float* y, int M, int N) { softmax_block_rows<<<M, NT>>>(x, y, M, N); }
"""


def test_thread_per_row_sweeps_fuse(tmp_path):
    assert inverses("online_softmax_to_two_pass") == ["fuse_softmax_sweeps"]
    mats = run_rewrite("fuse_softmax_sweeps", THREAD_ROWS)
    assert len(mats) == 1 and mats[0].carrier == "online_softmax"
    new = mats[0].source
    assert ("    float denom = 0.0f;\n    for (int c = 0; c < N; c++) {\n        float ks_mx = fmaxf(mx, in[c]);\n"
            "        denom = denom * expf(mx - ks_mx) + (expf(in[c] - ks_mx));\n        mx = ks_mx;\n    }\n"
            "    for (int c = 0; c < N; c++) out[c]") in new
    assert "for (int k" not in new and "ks_mx_own" not in new  # nothing reduces the max: no rescale after
    assert "online_softmax" in detect_carriers(new)
    assert cpu_gate("softmax", THREAD_ROWS, tmp_path / "a").passed
    assert cpu_gate("softmax", new, tmp_path / "b").passed


def test_block_stride_sweeps_fuse_and_rescale_to_the_block_max(tmp_path):
    mats = run_rewrite("fuse_softmax_sweeps", BLOCK_ROWS)
    assert len(mats) == 1
    new = mats[0].source
    assert ("    float s = 0.f;\n    for (int j = tid; j < N; j += NT) {\n        float v = xr[j];\n"
            "        float ks_mx = fmaxf(m, v);\n        s = s * __expf(m - ks_mx) + __expf(v - ks_mx);\n"
            "        m = ks_mx;\n    }\n    const float ks_m_own = m;\n    red[tid] = m;") in new
    assert "    __syncthreads();\n    s = s * __expf(ks_m_own - m);\n    red[tid] = s;" in new
    assert "for (int i" not in new
    assert cpu_gate("softmax", BLOCK_ROWS, tmp_path / "a").passed
    assert cpu_gate("softmax", new, tmp_path / "b").passed


def test_round_trip_through_the_operators_own_form(tmp_path):
    # the corpus expert walked back (max sweep, max reductions, barrier, sum sweep, sum reductions),
    # both VEC branches of each sweep fused, the sum rescaled once after the max's reductions
    two = read_kernel("softmax")
    two, _ = to_fixpoint(get_operator("drop_unroll_pragma"), two)
    two, n = to_fixpoint(SOFTMAX, two)
    assert n == 1 and "online_softmax" not in detect_carriers(two)
    mats = run_rewrite("fuse_softmax_sweeps", two)
    assert len(mats) == 1
    fused = mats[0].source
    assert fused.count("s = s * __expf(m - mx) + ") == 2 and fused.count("s = s * __expf(ks_m_own - m);") == 1
    assert "online_softmax" in detect_carriers(fused)
    assert cpu_gate("softmax", fused, tmp_path / "fwd").passed
    back, n = to_fixpoint(SOFTMAX, fused)
    assert n == 1 and "online_softmax" not in detect_carriers(back)
    assert cpu_gate("softmax", back, tmp_path / "back").passed


def test_a_max_sweep_from_the_second_element_starts_at_the_first(tmp_path):
    # the house naive softmax: m = xr[0], the max sweep from 1; fused from 0, fmaxf(m, xr[0]) = m
    naive = read_kernel("softmax", "naive.cu")
    mats = run_rewrite("fuse_softmax_sweeps", naive)
    assert len(mats) == 1
    new = mats[0].source
    assert ("    float m = xr[0];\n    float s = 0.0f;\n    for (int j = 0; j < N; ++j) {\n"
            "        float ks_mx = fmaxf(m, xr[j]);\n        s = s * expf(m - ks_mx) + expf(xr[j] - ks_mx);\n") in new
    assert "j = 1" not in new
    assert cpu_gate("softmax", new, tmp_path).passed
    # m holding another element than the one skipped: the extra step would change the max's start
    assert run_rewrite("fuse_softmax_sweeps", naive.replace("float m = xr[0];", "float m = xr[1];")) == []
    # the max sweep skips two elements
    assert run_rewrite("fuse_softmax_sweeps", naive.replace("int j = 1;", "int j = 2;")) == []


def test_the_corpus_expert_has_nothing_to_fuse():
    # softmax_rows is already online; softmax_warp_rows' sum sweep rewrites the register row in place
    assert run_rewrite("fuse_softmax_sweeps", read_kernel("softmax")) == []


@pytest.mark.parametrize("changes", [
    # the sum sweeps another range
    [("i < N; i += NT", "i < N - 1; i += NT")],
    # the sum does not start at zero
    [("float s = 0.f;", "float s = 1.f;")],
    # a term that is not exp(x - max)
    [("s = s + __expf(v - m);", "s = s + __expf(v) * __expf(-m);")],
    # the sum sweep also stores
    [("s = s + __expf(v - m);", "yr[i] = 0.f;\n        s = s + __expf(v - m);")],
    # something the sum sweep reads is written between the sweeps
    [("float s = 0.f;", "float s = 0.f;\n    sc = 2.f;"), ("float v = xr[i];", "float v = xr[i] * sc;")],
    # the partial sum is read between the sweeps
    [("m = red[0];", "m = red[0] + s;")],
    # the max sweep reads the sum
    [("m = fmaxf(m, v);", "m = fmaxf(m, v + s);")],
])
def test_refuses(changes):
    src = BLOCK_ROWS.replace("    float m = -FLT_MAX;", "    float m = -FLT_MAX;\n    float sc = 1.f;")
    assert run_rewrite("fuse_softmax_sweeps", src)
    for a, b in changes:
        assert a in src
        src = src.replace(a, b)
    assert run_rewrite("fuse_softmax_sweeps", src) == []


def test_refuses_a_sum_carried_over_by_an_enclosing_loop():
    # s declared outside a loop over rows: a fused sweep would rescale the previous rows' sum
    src = THREAD_ROWS.replace("    float mx = -INFINITY;", "    float denom = 0.0f;\n    for (int rep = 0; rep < 2; rep++) {\n"
                              "    float mx = -INFINITY;").replace("    float denom = 0.0f;\n    for (int k", "    for (int k")
    src = src.replace("/ denom;\n", "/ denom;\n    }\n")
    assert src.count("denom = 0.0f") == 1 and "rep < 2" in src
    assert run_rewrite("fuse_softmax_sweeps", src) == []



# --------------------------------------------------------------------------- chan_merge_stats
CHAN = get_operator("chan_stats_to_two_pass")

# one block per row, block-stride sweeps over global memory, two serial folds over plain sums: the
# slot holds the thread's sum (not count * mean), loads in the other order, `w++`, two statements
# for the first slot stores, a parenthesised guarded mean, the deviations' fold without braces
FOLDS = """
#include <cuda_runtime.h>
#define BS 128
__global__ void ln_rows(const float* x, const float* g, const float* b, float* y, int N, float eps) {
    __shared__ float s_cnt[BS];
    __shared__ float s_acc[BS];
    __shared__ float s_sq[BS];
    const int tid = threadIdx.x;
    const float* row = x + (size_t)blockIdx.x * N;
    float* out = y + (size_t)blockIdx.x * N;
    float local = 0.f;
    int seen = 0;
    for (int j = tid; j < N; j += BS) {
        local += row[j];
        seen++;
    }
    float count = (float)seen;
    float acc = local;
    s_cnt[tid] = count;
    s_acc[tid] = acc;
    __syncthreads();
    acc = s_acc[0];
    count = s_cnt[0];
    for (int w = 1; w < BS; w++) {
        count += s_cnt[w];
        acc += s_acc[w];
    }
    acc = (count > 0.f) ? (acc / count) : 0.f;
    float var_acc = 0.f;
    for (int j = tid; j < N; j += BS) {
        const float d = row[j] - acc;
        var_acc += d * d;
    }
    s_sq[tid] = var_acc;
    __syncthreads();
    var_acc = s_sq[0];
    for (int w = 1; w < BS; w++) var_acc += s_sq[w];
    const float rstd = rsqrtf(var_acc / (float)N + eps);
    for (int j = tid; j < N; j += BS) out[j] = (row[j] - acc) * rstd * g[j] + b[j];
}
void layernorm(const float* x, const float* gamma, const float* beta, float* y, int M, int N, float eps) {
    ln_rows<<<M, BS>>>(x, gamma, beta, y, N, eps);
}
"""


def test_hand_written_folds_become_one_chan_merge(tmp_path):
    assert inverses("chan_stats_to_two_pass")[0] == "chan_merge_stats"
    mats = run_rewrite("chan_merge_stats", FOLDS)
    assert len(mats) == 1 and mats[0].carrier == "single_pass_stats"
    new = mats[0].source
    assert ("    ks_stats ks_s;\n    ks_s.n = (float)seen;\n    ks_s.mean = ((float)seen) > 0.0f ? (local) / ((float)seen) : 0.0f;\n"
            "    ks_s.m2 = 0.0f;\n    for (int j = tid; j < N; j += BS) {\n        const float d = row[j] - ks_s.mean;\n"
            "        ks_s.m2 += d * d;\n    }\n"
            "    { s_cnt[tid] = ks_s.n; s_acc[tid] = ks_s.mean; s_sq[tid] = ks_s.m2; }\n    __syncthreads();\n") in new
    assert "ks_s = ks_chan_merge(ks_s, ks_o); }\n    const float rstd = rsqrtf(ks_s.m2 / (float)N + eps);" in new
    assert "(row[j] - ks_s.mean) * rstd" in new and "var_acc" not in new and "count +=" not in new
    assert new.index("struct ks_stats") < new.index("__global__ void ln_rows")
    assert "single_pass_stats" in detect_carriers(new)
    assert cpu_gate("layernorm", FOLDS, tmp_path / "a").passed
    assert cpu_gate("layernorm", new, tmp_path / "b").passed
    # the backward half reads it back as two folds over plain sums, again correct
    back, n = to_fixpoint(CHAN, new)
    assert n == 1 and "ks_chan_merge" not in back and "ks_s." not in back
    assert cpu_gate("layernorm", back, tmp_path / "c").passed


def test_chan_round_trip_through_the_operators_own_form(tmp_path):
    two = read_kernel("layernorm")
    for name in ("block_reduce_to_serial", "chan_stats_to_two_pass"):
        two, n = to_fixpoint(get_operator(name), two)
        assert n == 1
    assert "merge(" not in two
    mats = run_rewrite("chan_merge_stats", two)
    assert len(mats) == 1
    merged = mats[0].source
    assert "ks_sq" not in merged and "ks_mean" not in merged and "const float mean = ks_s.mean;" in merged
    assert cpu_gate("layernorm", merged, tmp_path / "fwd").passed
    back, n = to_fixpoint(CHAN, merged)
    assert n == 1
    # the operator's own form again, but for the (now unused) struct it leaves and blank lines
    assert back.replace("struct ks_stats { float n, mean, m2; };", "").split() == two.split()


@pytest.mark.parametrize("change", [
    # the deviations read the count (it would be the thread's own count after the rewrite)
    ("var_acc += d * d;", "var_acc += d * d / count;"),
    # the deviation sweep also stores
    ("var_acc += d * d;", "var_acc += d * d;\n        out[j] = d;"),
    # the squares reset rather than accumulated
    ("var_acc += d * d;", "var_acc = d * d;"),
    # an unguarded mean (an empty block would divide by zero where Chan's merge keeps 0)
    ("acc = (count > 0.f) ? (acc / count) : 0.f;", "acc = acc / count;"),
    # the folds run over different slot counts
    ("for (int w = 1; w < BS; w++) var_acc", "for (int w = 1; w < BS / 2; w++) var_acc"),
    # the deviations start from a non-zero value
    ("float var_acc = 0.f;", "float var_acc = 1.f;"),
    # the block's mean is written after the reductions
    ("const float rstd", "acc += 1.f;\n    const float rstd"),
    # a slot array read again later
    ("const float rstd", "var_acc += s_acc[1] * 0.f;\n    const float rstd"),
])
def test_chan_refuses(change):
    assert change[0] in FOLDS
    assert run_rewrite("chan_merge_stats", FOLDS.replace(*change)) == []



# welford_sweep: one thread's mean sweep and deviation sweep -> Welford's single sweep
LN_NAIVE = read_kernel("layernorm", "naive.cu")
# respelled: the deviation named in a block, `j++`, `mean = mean / (float)N`, `var = var + d * d`
LN_RESPELLED = LN_NAIVE.replace("for (int j = 0; j < N; ++j) mean += xr[j];", "for (int j = 0; j < N; j++) { mean += xr[j]; }") \
    .replace("mean /= N;", "mean = mean / (float)N;").replace(
    "for (int j = 0; j < N; ++j) var += (xr[j] - mean) * (xr[j] - mean);",
    "for (int k = 0; k < N; k++) {\n        const float d = xr[k] - mean;\n        var = var + d * d;\n    }")


@pytest.mark.parametrize("src", [LN_NAIVE, LN_RESPELLED], ids=["naive", "respelled"])
def test_mean_and_deviation_sweeps_become_welford(src, tmp_path):
    assert inverses("chan_stats_to_two_pass") == ["chan_merge_stats", "welford_sweep"]
    assert src != LN_NAIVE or "mean /= N;" in src
    mats = run_rewrite("welford_sweep", src)
    assert len(mats) == 1 and mats[0].carrier == "single_pass_stats"
    new = mats[0].source
    assert ("    float var = 0.0f;\n    for (int j = 0; j < N; ") in new
    assert ("        const float ks_x = xr[j];\n        const float ks_d = ks_x - mean;\n"
            "        mean += ks_d / (float)(j + 1);\n        var += ks_d * (ks_x - mean);\n    }\n    var /= N;") in new
    assert "mean /= N" not in new and "mean = mean / (float)N" not in new
    assert cpu_gate("layernorm", new, tmp_path).passed


@pytest.mark.parametrize("change", [
    # the mean divided by another count than the sweep's
    ("mean /= N;", "mean /= (N - 1);"),
    # deviations from another value than the mean
    ("var += (xr[j] - mean) * (xr[j] - mean);", "var += (xr[j] - mean) * (xr[j] - 0.5f * mean);"),
    # the deviations over another range
    ("for (int j = 0; j < N; ++j) var", "for (int j = 1; j < N; ++j) var"),
    # the mean not starting at zero
    ("float mean = 0.0f;", "float mean = 1.0f;"),
    # a sweep that does more than sum
    ("for (int j = 0; j < N; ++j) mean += xr[j];", "for (int j = 0; j < N; ++j) { mean += xr[j]; yr[j] = 0.0f; }"),
    # an element read with effects
    ("mean += xr[j];", "mean += xr[j++];"),
])
def test_welford_refuses(change):
    assert change[0] in LN_NAIVE
    assert run_rewrite("welford_sweep", LN_NAIVE.replace(*change)) == []


# --------------------------------------------------------------------------- fuse_rescale_passes
RESCALE = get_operator("online_rescale_to_two_pass")

# one thread per query row, scalar running max, the two sweeps apart (the accumulators are set up
# between them), the max written `m = fmaxf(m, x)` and the accumulation `l += p`, `o[d] += ...`
NAIVE = read_kernel("attention_fwd", "naive.cu")
# the same respelled: the max's arguments swapped, `l = l + p`, `o[d] = o[d] + ...`, exp2f of a
# pre-scaled score
RESPELLED = NAIVE.replace("m = fmaxf(m, s * scale);", "m = fmaxf(s * scale, m);").replace(
    "l += p;", "l = l + p;").replace("o[d] += p * V", "o[d] = o[d] + p * V").replace(
    "float p = expf(s * scale - m);", "float p = exp2f((s * scale - m) * 1.44269504f);")


def test_naive_sweeps_fuse_into_a_flash_loop(tmp_path):
    assert inverses("online_rescale_to_two_pass") == ["fuse_rescale_passes"]
    mats = run_rewrite("fuse_rescale_passes", NAIVE)
    assert len(mats) == 1 and mats[0].carrier == "online_softmax"
    new = mats[0].source
    assert new.count("for (int j = 0; j < S; ++j)") == 1
    assert ("        const float ks_m_new = fmaxf(m, s * scale);\n        const float ks_alpha = expf(m - ks_m_new);\n"
            "        for (int ks_i0 = 0; ks_i0 < HEAD_DIM; ++ks_i0) o[ks_i0] *= ks_alpha;\n"
            "        float p = expf(s * scale - ks_m_new);\n        l = l * ks_alpha + p;\n") in new
    assert "        m = ks_m_new;\n    }\n    for (int d = 0; d < HEAD_DIM; ++d) O[" in new
    assert "online_softmax" in detect_carriers(new)
    assert cpu_gate("attention_fwd", new, tmp_path / "b").passed
    # walked back: a max sweep again, and still correct
    back, n = to_fixpoint(RESCALE, new)
    assert n == 1 and back.count("for (int j = 0; j < S; ++j)") == 2
    assert cpu_gate("attention_fwd", back, tmp_path / "c").passed


def test_respelled_sweeps_fuse(tmp_path):
    # exp2f of a scaled difference is not `EXP(x - m)`: the rescale factor is not read off it
    assert run_rewrite("fuse_rescale_passes", RESPELLED) == []
    src = RESPELLED.replace("float p = exp2f((s * scale - m) * 1.44269504f);", "float p = __expf(s * scale - m);")
    mats = run_rewrite("fuse_rescale_passes", src)
    assert len(mats) == 1
    new = mats[0].source
    assert "const float ks_m_new = fmaxf(m, s * scale);\n        const float ks_alpha = __expf(m - ks_m_new);" in new
    assert "l = l * ks_alpha + p;" in new and "o[d] = o[d] + p * V" in new
    assert cpu_gate("attention_fwd", new, tmp_path).passed


def test_rescale_round_trip_through_the_operators_own_form(tmp_path):
    two = read_kernel("attention_fwd")
    two, _ = to_fixpoint(get_operator("drop_unroll_pragma"), two)
    two, n = to_fixpoint(RESCALE, two)
    assert n == 1 and two.count("for (int kv0 = 0; kv0 < S; kv0 += BKV)") == 2
    mats = run_rewrite("fuse_rescale_passes", two)
    assert len(mats) == 1 and "acc, l" in mats[0].description
    new = mats[0].source
    assert new.count("for (int kv0 = 0; kv0 < S; kv0 += BKV)") == 1
    assert ("            const float m_new = fmaxf(m[r], mx);\n            const float ks_alpha = __expf(m[r] - m_new);\n"
            "            for (int ks_i0 = 0; ks_i0 < 8; ++ks_i0) acc[r][ks_i0] *= ks_alpha;\n") in new
    assert "l[r] = l[r] * ks_alpha + rs;\n            m[r] = m_new;\n        }" in new
    assert "online_softmax" in detect_carriers(new)
    assert cpu_gate("attention_fwd", new, tmp_path / "fwd").passed
    back, n = to_fixpoint(RESCALE, new)
    assert n == 1 and back.count("for (int kv0 = 0; kv0 < S; kv0 += BKV)") == 2
    assert cpu_gate("attention_fwd", back, tmp_path / "back").passed


def test_rescale_after_the_register_tile_passes_and_exchanges(tmp_path):
    # deeper in the walk: warp shuffles became shared exchanges between __syncwarp()s and the
    # register tile runs in passes of one row (`r = ks_p_acc; r < ks_p_acc + 1`, acc without a row
    # index); the max pass' exchange stays apart from the sum's, each exponential is taken once
    two = read_kernel("attention_fwd")
    for name in ("drop_unroll_pragma", "shuffle_to_shared", "shrink_register_tile", "online_rescale_to_two_pass"):
        two, _ = to_fixpoint(get_operator(name), two)
    mats = run_rewrite("fuse_rescale_passes", two)
    assert len(mats) == 1
    new = mats[0].source
    assert "for (int ks_i0 = 0; ks_i0 < 8; ++ks_i0) acc[ks_i0] *= ks_alpha;" in new
    assert new.count("s[r][c] = __expf(s[r][c] - m_new);") == 1 and "__expf(s[r][c] - m[r])" not in new
    assert new.index("mx = fmaxf(mx, ks_xchg_float[ks_tid ^ 4]);") < new.index("ks_xchg_float[ks_tid] = rs;")
    assert cpu_gate("attention_fwd", new, tmp_path).passed


@pytest.mark.parametrize("change", [
    # an accumulation the exponentials do not feed (it would be rescaled all the same)
    ("l += p;", "l += p;\n        seen += 1.0f;"),
    # an output written inside the sweep
    ("l += p;", "l += p;\n        O[(size_t)row * HEAD_DIM] = l;"),
    # an accumulator scaled, not added to
    ("l += p;", "l += p;\n        o[0] *= 0.5f;"),
    # the running max changed between the sweeps
    ("float l = 0.0f, seen = 0.0f;", "float l = 0.0f, seen = 0.0f;\n    m = fmaxf(m, 0.0f);"),
    # the sweeps over other keys
    ("    for (int j = 0; j < S; ++j) {\n        float s = 0.0f;\n        for (int d = 0; d < HEAD_DIM; ++d) s += q[d] "
     "* K[head + (size_t)j * HEAD_DIM + d];\n        float p",
     "    for (int j = 1; j < S; ++j) {\n        float s = 0.0f;\n        for (int d = 0; d < HEAD_DIM; ++d) s += q[d] "
     "* K[head + (size_t)j * HEAD_DIM + d];\n        float p"),
    # the max sweep leaves early
    ("m = fmaxf(m, s * scale);", "m = fmaxf(m, s * scale);\n        if (m > 1e30f) break;"),
])
def test_rescale_refuses(change):
    src = NAIVE.replace("float l = 0.0f;", "float l = 0.0f, seen = 0.0f;")
    assert change[0] in src and run_rewrite("fuse_rescale_passes", src)
    assert run_rewrite("fuse_rescale_passes", src.replace(*change)) == []



# --------------------------------------------------------------------------- double_buffer_tiles
SINGLE = get_operator("double_to_single_buffer")

# a hand-written tiled matmul: direct element fills (no lambdas), the next step's offset in a local,
# the refill under a guard, `t++`, no stage variable
TILED = """
#include <cuda_runtime.h>
#define TS 16
__global__ void mm_tiles(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float sA[TS][TS];
    __shared__ float sB[TS][TS];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TS + ty, col = blockIdx.x * TS + tx;
    const int nt = (K + TS - 1) / TS;
    float acc = 0.0f;
    sA[ty][tx] = (row < M && tx < K) ? A[row * K + tx] : 0.0f;
    sB[ty][tx] = (ty < K && col < N) ? B[ty * N + col] : 0.0f;
    __syncthreads();
    for (int t = 0; t < nt; t++) {
        for (int k = 0; k < TS; ++k) acc += sA[ty][k] * sB[k][tx];
        __syncthreads();
        if (t + 1 < nt) {
            const int k0 = (t + 1) * TS;
            sA[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
            sB[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
        }
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
void tiled_matmul(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 grid((N + TS - 1) / TS, (M + TS - 1) / TS), block(TS, TS);
    mm_tiles<<<grid, block>>>(A, B, C, M, N, K);
}
"""


def test_hand_written_refill_gets_two_stages(tmp_path):
    assert inverses("double_to_single_buffer") == ["double_buffer_tiles"]
    mats = run_rewrite("double_buffer_tiles", TILED)
    assert len(mats) == 1 and mats[0].carrier == "double_buffer"
    new = mats[0].source
    assert "__shared__ float sA[2][TS][TS];" in new and "__shared__ float sB[2][TS][TS];" in new
    assert "sA[0][ty][tx] = (row < M && tx < K)" in new
    assert "acc += sA[t & 1][ty][k] * sB[t & 1][k][tx];\n        if (t + 1 < nt) {" in new  # one barrier fewer
    assert "sA[(t + 1) & 1][ty][tx] = (row < M && k0 + tx < K)" in new
    assert "sB[(t + 1) & 1][ty][tx]" in new and new.count("__syncthreads();") == 2
    assert "double_buffer" in detect_carriers(new)
    assert cpu_gate("tiled_matmul", TILED, tmp_path / "a").passed
    assert cpu_gate("tiled_matmul", new, tmp_path / "b").passed
    # walked back: one stage and the barrier before the refill again
    back, n = to_fixpoint(SINGLE, new)
    assert n == 2 and cpu_gate("tiled_matmul", back, tmp_path / "c").passed
    assert "__syncthreads();  // one stage" in back
    assert run_rewrite("double_buffer_tiles", back)[0].source == new  # and forward again


def test_double_buffer_round_trip_through_the_operators_own_form(tmp_path):
    # the corpus sgemm walked back to one stage (lambda fills, `cur = kt & 1`) is the expert again
    expert = read_kernel("sgemm")
    single, n = to_fixpoint(SINGLE, expert)
    assert n == 2 and "As[2]" not in single
    mats = run_rewrite("double_buffer_tiles", single)
    assert len(mats) == 1 and mats[0].source == expert
    assert cpu_gate("sgemm", mats[0].source, tmp_path).passed


@pytest.mark.parametrize("change", [
    # no barrier between the reads and the refill: nothing to drop, the loop is not the refill form
    ("acc += sA[ty][k] * sB[k][tx];\n        __syncthreads();\n", "acc += sA[ty][k] * sB[k][tx];\n"),
    # no barrier after the refill
    ("        }\n        __syncthreads();\n    }\n", "        }\n    }\n"),
    # the refill is read in the same step
    ("        }\n        __syncthreads();\n    }\n", "        }\n        __syncthreads();\n        acc += sA[0][0];\n    }\n"),
    # the loop refills another part of the tile than the prologue filled
    ("            sA[ty][tx] = (row < M && k0", "            sA[tx][ty] = (row < M && k0"),
    # a tile read after the loop (which stage holds it is not plain)
    ("    if (row < M && col < N) C", "    acc += sA[0][0] * 0.0f;\n    if (row < M && col < N) C"),
    # the loop starts at step 1
    ("for (int t = 0; t < nt; t++)", "for (int t = 1; t < nt; t++)"),
])
def test_double_buffer_refuses(change):
    assert change[0] in TILED
    assert run_rewrite("double_buffer_tiles", TILED.replace(*change)) == []
