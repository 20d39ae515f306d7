"""Operators added for carrier recall (grid_stride in loops without a declared variable and in
block-stride row sweeps, block_reduce_shared, register_cache in multi-loop register arrays,
online_softmax in row softmax and flash attention): site detection on the corpus experts, the
rewrite text, byte identity outside the edit, the carrier gone per detect_carriers, refusal of
unsound forms, and real CPU gate passes of the rewritten corpus kernels."""
from __future__ import annotations

from pathlib import Path

import pytest

from mining.carriers import detect_carriers
from mining.mine import operator_order
from mining.operators import all_operators, get_operator

from _operator_support import (
    KERNELS, assert_outside_identical as _assert_outside_identical,
    cpu_gate as _gate, read_kernel as _read, to_fixpoint)

NEW = ["block_reduce_to_serial", "register_array_to_recompute", "online_softmax_to_two_pass",
       "block_stride_to_chunks", "online_rescale_to_two_pass", "chan_stats_to_two_pass"]
MINE = NEW + ["grid_stride_to_single", "drop_grid_clamp"]


def _fix(name: str, source: str, limit: int = 40) -> tuple[str, int]:
    return to_fixpoint(get_operator(name), source, limit)


def _chain(source: str, names: list[str]) -> str:
    for name in names:
        source, _ = _fix(name, source)
    return source


def _carriers(source: str) -> set[str]:
    return set(detect_carriers(source))


# ----------------------------------------------------------------------------- registry and order

def test_registry_and_walk_order():
    names = [op.name for op in all_operators()]
    assert set(NEW) <= set(names) and len(names) == len(set(names))
    assert {get_operator(n).carrier for n in NEW} == {"block_reduce_shared", "register_cache", "online_softmax",
                                                      "grid_stride", "single_pass_stats"}
    order = [op.name for op in operator_order(None)]
    # one element per thread is tried before per-thread chunks, chunks before the softmax max gets
    # its own pass, and the flash-loop split comes after every operator that simplifies the loop
    assert order.index("grid_stride_to_single") < order.index("block_stride_to_chunks") < \
        order.index("online_softmax_to_two_pass")
    # the two-pass statistics need the single-level (serial) form of the block reduction
    assert order.index("block_reduce_to_serial") < order.index("chan_stats_to_two_pass")
    assert order == names  # the registry order is the walk order
    # only sliding_window_to_reload and register_state_to_shared (after every register tile and cache
    # is undone) come after the flash-loop split
    assert order[-3:] == ["online_rescale_to_two_pass", "sliding_window_to_reload", "register_state_to_shared"]


# ----------------------------------------------------------------------------- sites and rewrites

# operator -> (problem, operators applied first, site count, text in the first site's excerpt,
#              texts in the rewritten source)
CASES = {
    "block_reduce_to_serial": ("rmsnorm_residual", [], 1, "__shared__ float partial[MAX_THREADS / 32];", [
        "__shared__ float partial[MAX_THREADS / 32 * 32];",
        "    { partial[threadIdx.x] = ss; }\n    __syncthreads();\n    ss = partial[0];\n"
        "    for (int ks_w = 1; ks_w < blockDim.x; ++ks_w) {\n        ss += partial[ks_w];\n    }\n"
        "    const float scale = rsqrtf("]),
    "register_array_to_recompute": ("softmax", [], 1, "float4 v[V];", [
        "    for (int k = 0; k < V; ++k) {\n        float4 ks_v_k;\n        {\n            const int j = k * 32 + lane;\n"
        "            ks_v_k = j < n4 ? __ldg(x4 + j) : make_float4(-FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX);\n"
        "        }\n        m = fmaxf(m, fmaxf(fmaxf(ks_v_k.x, ks_v_k.y), fmaxf(ks_v_k.z, ks_v_k.w)));\n    }",
        "        {\n            ks_v_k.x = __expf(ks_v_k.x - m);\n"]),
    "online_softmax_to_two_pass": ("softmax", ["drop_unroll_pragma"], 1, "void merge_stats(float& m, float& s", [
        "            float mx = fmaxf(m, vm);\n            m = mx;\n",
        "            s = s + (__expf(v.x - m) + __expf(v.y - m)) + (__expf(v.z - m) + __expf(v.w - m));\n",
        "            s = s + __expf(v - m);\n", "m = fmaxf(m, m2);", "s += s2;"]),
    "block_stride_to_chunks": ("softmax", [], 4, "for (int j = threadIdx.x; j < (N >> 2); j += blockDim.x)", [
        "for (int ks_chunk = ((N >> 2) + blockDim.x - 1) / blockDim.x, j = threadIdx.x * ks_chunk; "
        "j < (N >> 2) && j < (threadIdx.x + 1) * ks_chunk; ++j) {  // carrier: grid_stride"]),
    "online_rescale_to_two_pass": ("attention_fwd", ["drop_unroll_pragma"], 1, "for (int kv0 = 0; kv0 < S; kv0 += BKV)", [
        "            m[r] = m_new;\n        }\n        __syncthreads();\n    }\n    __syncthreads();\n"
        "    for (int kv0 = 0; kv0 < S; kv0 += BKV) {",
        "                s[r][c] = __expf(s[r][c] - m[r]);", "l[r] = l[r] + rs;"]),
    "chan_stats_to_two_pass": ("layernorm", ["block_reduce_to_serial"], 1, "Stats merge(Stats a, Stats b)", [
        "    float ks_n = cnt;\n    float ks_mean = cnt > 0.0f ? sum / cnt : 0.0f;\n"
        "    { sn[threadIdx.x] = ks_n; smean[threadIdx.x] = ks_n * ks_mean; }\n    __syncthreads();\n",
        "ks_mean = ks_n > 0.0f ? ks_mean / ks_n : 0.0f;\n    float ks_sq = 0.0f;\n",
        "            float d = j < valid ? vs[j] - ks_mean : 0.0f;\n            ks_sq += d * d;\n",
        "    { sm2[threadIdx.x] = ks_sq; }\n    __syncthreads();\n    ks_sq = sm2[0];\n"
        "    for (int ks_w = 1; ks_w < blockDim.x; ++ks_w) ks_sq += sm2[ks_w];\n    const float mean = ks_mean;\n"
        "    const float rstd = rsqrtf(ks_sq / (float)N + eps);"]),
    "grid_stride_to_single": ("reduce_sum", [], 3, "for (; i + 3 * stride < n4; i += 4 * stride)", [
        "    if (i + 3 * stride < n4) {  // carrier: grid_stride — a fixed grid walks any N\n",
        "        a3 += (v3.x + v3.y) + (v3.z + v3.w);\n        i += 4 * stride;\n    }\n"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sites_and_rewrite(name):
    problem, first, count, excerpt, expected = CASES[name]
    op = get_operator(name)
    source = _chain(_read(problem), first)
    sites = op.find_sites(source)
    assert len(sites) == count, [s.excerpt for s in sites]
    assert sites == op.find_sites(source)  # deterministic
    assert sites[0].carrier == op.carrier and excerpt in sites[0].excerpt, sites[0].excerpt
    new = op.apply(source, sites[0])
    _assert_outside_identical(source, new, sites[0])
    assert op.apply(source, sites[0]) == new
    if count == 1:
        for text in expected:
            assert text in new, text
    else:  # the texts are those of the whole function's rewrite
        done, _ = _fix(name, source)
        for text in expected:
            assert text in done, text


def test_no_sites_in_naive_kernels():
    for name in NEW:
        op = get_operator(name)
        for p in sorted(KERNELS.iterdir()):
            if (p / "naive.cu").is_file():
                assert op.find_sites(_read(p.name, "naive.cu")) == [], (name, p.name)


# ----------------------------------------------------------------------------- the carrier goes

@pytest.mark.parametrize("name,problem,first", [
    ("block_reduce_to_serial", "softmax", []), ("block_reduce_to_serial", "layernorm", []),
    ("block_reduce_to_serial", "rmsnorm_residual", []),
    ("block_reduce_to_serial", "softmax", ["shuffle_to_shared"]),  # the exchange form of the warp reductions
    ("register_array_to_recompute", "softmax", []), ("register_array_to_recompute", "rmsnorm_residual", []),
    ("register_array_to_recompute", "layernorm", []),
    ("online_softmax_to_two_pass", "softmax", ["drop_unroll_pragma"]),
    ("online_softmax_to_two_pass", "softmax", ["drop_unroll_pragma", "shuffle_to_shared", "block_reduce_to_serial",
                                               "block_stride_to_chunks"]),
    ("online_rescale_to_two_pass", "attention_fwd", ["drop_unroll_pragma"]),
    ("online_rescale_to_two_pass", "attention_fwd", ["drop_unroll_pragma", "shuffle_to_shared", "shrink_register_tile"]),
    ("block_stride_to_chunks", "softmax", []),
    ("chan_stats_to_two_pass", "layernorm", ["block_reduce_to_serial"]),
    ("chan_stats_to_two_pass", "layernorm", ["drop_unroll_pragma", "shuffle_to_shared", "register_cache_to_reload",
                                             "block_reduce_to_serial"]),
    ("grid_stride_to_single", "reduce_sum", []), ("grid_stride_to_single", "histogram", []),
])
def test_fixpoint_removes_the_carrier(name, problem, first):
    op = get_operator(name)
    before = _chain(_read(problem), first)
    assert op.carrier in _carriers(before)
    after, n = _fix(name, before)
    assert n >= 1 and not op.find_sites(after)
    assert op.carrier not in _carriers(after), [s.excerpt for s in detect_carriers(after)[op.carrier]]


def test_chan_merge_goes_with_the_device_functions_calling_it():
    src = _chain(_read("layernorm"), ["block_reduce_to_serial", "chan_stats_to_two_pass"])
    assert "Stats merge(" not in src and "warp_merge(" not in src and "Chan et al." not in src
    assert "struct Stats" in src  # the type stays (unused)


def test_chan_stats_refuses_the_two_level_form_and_other_uses():
    op = get_operator("chan_stats_to_two_pass")
    # the reduction must be single-level (warp_merge calls are not a fold over slots)
    assert op.find_sites(_read("layernorm")) == []
    src = _chain(_read("layernorm"), ["block_reduce_to_serial"])
    assert len(op.find_sites(src)) == 1
    # the triple written after the reduction
    later = src.replace("    const float mean = s.mean;\n", "    const float mean = s.mean;\n    s.m2 = 0.0f;\n")
    assert later != src and op.find_sites(later) == []
    # the merge called somewhere that stays
    extra = src.replace("template <int V, bool VEC>\n__global__",
                        "__global__ void other(float* y) { Stats a{}, b{}; y[0] = merge(a, b).m2; }\n\n"
                        "template <int V, bool VEC>\n__global__")
    assert extra != src and op.find_sites(extra) == []


def test_merge_function_goes_with_its_last_call():
    src = _chain(_read("softmax"), ["drop_unroll_pragma", "online_softmax_to_two_pass"])
    assert "merge_stats" not in src and "Merge two (max, sum) pairs" not in src
    # the fold of the two-level reduction becomes a max fold and a sum fold
    assert src.count("__syncthreads();") == 3


# ----------------------------------------------------------------------------- unsound forms refused

def test_grid_clamp_keeps_block_size_limits():
    # softmax clamps its block size to 1024 threads: a hardware limit, not a grid clamp
    assert get_operator("drop_grid_clamp").find_sites(_read("softmax")) == []
    block = "__global__ void k(float* y) {}\nvoid f(float* y, int t) {\n    if (t > 512) t = 512;\n    dim3 g(4), b(t);\n    k<<<g, b>>>(y);\n}\n"
    assert get_operator("drop_grid_clamp").find_sites(block) == []
    grid = block.replace("dim3 g(4), b(t);", "dim3 g(t), b(32);")
    assert len(get_operator("drop_grid_clamp").find_sites(grid)) == 1


def test_grid_stride_without_declaration_keeps_the_final_value_only_when_read():
    op = get_operator("grid_stride_to_single")
    src = ("__global__ void k(float* y, int n) {\n    int i = threadIdx.x;\n    const int s = gridDim.x * blockDim.x;\n"
           "    for (; i + s < n; i += 2 * s) {\n        y[i] = 0; y[i + s] = 0;\n    }\n    if (i < n) y[i] = 1;\n}\n")
    assert op.apply(src, op.find_sites(src)[0]) == src.replace(
        "for (; i + s < n; i += 2 * s) {\n        y[i] = 0; y[i + s] = 0;\n    }",
        "if (i + s < n) {\n        y[i] = 0; y[i + s] = 0;\n        i += 2 * s;\n    }")
    src = "__global__ void k(float* y, int n) {\n    int i;\n    for (i = threadIdx.x; i < n; i += blockDim.x) y[i] = 0;\n}\n"
    assert op.apply(src, op.find_sites(src)[0]) == src.replace(
        "for (i = threadIdx.x; i < n; i += blockDim.x) y[i] = 0;", "{ i = threadIdx.x; if (i < n) y[i] = 0; }")


def test_block_stride_to_chunks_refuses_thread_dependent_bodies():
    op = get_operator("block_stride_to_chunks")
    loop = "__global__ void k(float* y, int n) { for (int j = threadIdx.x; j < n; j += blockDim.x) %s }"
    assert op.find_sites(loop % "y[j] = 2 * y[j];")
    for body in ("{ y[j] = 0; __syncthreads(); }", "{ y[j] = threadIdx.x; }", "{ n--; y[j] = 0; }",
                 "{ if (y[j] < 0) break; y[j] = 0; }", "y[j] = __shfl_xor_sync(0xffffffffu, y[j], 1);"):
        assert op.find_sites(loop % body) == [], body


def test_block_reduce_to_serial_refuses_unsound_forms():
    op = get_operator("block_reduce_to_serial")
    src = _read("rmsnorm_residual")
    assert len(op.find_sites(src)) == 1
    # a thread that left early would leave its slot unwritten
    early = src.replace("    const int T = blockDim.x, t = threadIdx.x;\n",
                        "    const int T = blockDim.x, t = threadIdx.x;\n    if (N == 0) return;\n")
    assert early != src and op.find_sites(early) == []
    # the partial array read elsewhere is not scratch of this reduction
    other = src.replace("const float scale = rsqrtf(ss / (float)N + eps);",
                        "const float scale = rsqrtf(ss / (float)N + eps) + 0.0f * partial[0];")
    assert other != src and op.find_sites(other) == []
    # a two-dimensional block: threadIdx.x does not number the threads
    twod = src.replace("const int T = blockDim.x, t = threadIdx.x;", "const int T = blockDim.x, t = threadIdx.x + threadIdx.y;")
    assert twod != src and op.find_sites(twod) == []


def test_register_array_to_recompute_refuses_unsound_forms():
    op = get_operator("register_array_to_recompute")
    src = _read("softmax")
    assert len(op.find_sites(src)) == 1
    # a rewrite of the array that may not run before the readers (under a condition)
    cond = src.replace("    float s = 0.0f;\n#pragma unroll\n    for (int k = 0; k < V; ++k) {\n        v[k].x",
                       "    float s = 0.0f;\n#pragma unroll\n    if (N > 4) for (int k = 0; k < V; ++k) {\n        v[k].x")
    assert cond != src and op.find_sites(cond) == []
    # an array declared inside the enclosing loop is fresh in every iteration: a site
    fresh = ("__global__ void k(const float* x, float* y, int n) {\n    for (int t = 0; t < n; ++t) {\n"
             "        float a[4];\n        for (int k = 0; k < 4; ++k) a[k] = x[t * 4 + k];\n"
             "        for (int k = 0; k < 4; ++k) y[t * 4 + k] = a[k];\n    }\n}\n")
    assert len(op.find_sites(fresh)) == 1
    # declared outside it, the array may carry values from one iteration to the next (a fill under
    # `if (t == 0)` would): not analysed, refused
    carried = fresh.replace("    for (int t = 0; t < n; ++t) {\n        float a[4];\n",
                            "    float a[4];\n    for (int t = 0; t < n; ++t) {\n")
    assert carried != fresh and op.find_sites(carried) == []
    # filled once before the loop and read in every iteration
    outside = ("__global__ void k(const float* x, float* y, int n) {\n    float a[4];\n"
               "    for (int k = 0; k < 4; ++k) a[k] = x[k];\n    for (int t = 0; t < n; ++t) {\n"
               "        for (int k = 0; k < 4; ++k) y[t * 4 + k] = a[k];\n    }\n}\n")
    assert op.find_sites(outside) == []
    # an index other than the loop variable
    shifted = fresh.replace("y[t * 4 + k] = a[k];", "y[t * 4 + k] = a[3 - k];")
    assert op.find_sites(shifted) == []


def test_online_operators_refuse_unsound_forms():
    sm = _chain(_read("softmax"), ["drop_unroll_pragma"])
    op = get_operator("online_softmax_to_two_pass")
    assert len(op.find_sites(sm)) == 1
    # a statement that mixes the running max and the running sum
    mixed = sm.replace("    if (lane == 0) { wm[warp] = m; ws[warp] = s; }",
                       "    s += 0.0f * m;\n    if (lane == 0) { wm[warp] = m; ws[warp] = s; }")
    assert mixed != sm and op.find_sites(mixed) == []
    # preprocessor lines inside the region (they would be lost)
    assert op.find_sites(_read("softmax")) == []
    att = _chain(_read("attention_fwd"), ["drop_unroll_pragma"])
    op = get_operator("online_rescale_to_two_pass")
    assert len(op.find_sites(att)) == 1
    # the rescale factor used for something else than rescaling
    other = att.replace("l[r] = l[r] * alpha + rs;", "l[r] = l[r] * alpha + rs + alpha;")
    assert other != att and op.find_sites(other) == []
    # the running max written elsewhere in the sweep
    twice = att.replace("m[r] = m_new;", "m[r] = m_new; m[0] = m[0];")
    assert twice != att and op.find_sites(twice) == []


# ----------------------------------------------------------------------------- gate

@pytest.fixture(scope="module")
def gate_store(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("operator-recall-a-gate-store")


# problem -> operators applied to fixpoint in this order; the carriers that must be gone after
GATED = {
    "block_reduce_to_serial/layernorm": ("layernorm", ["block_reduce_to_serial"], {"block_reduce_shared"}),
    "register_array_to_recompute/rmsnorm": ("rmsnorm_residual", ["register_array_to_recompute", "block_reduce_to_serial"],
                                            {"register_cache", "block_reduce_shared"}),
    "softmax/all": ("softmax", ["drop_unroll_pragma", "block_reduce_to_serial", "register_array_to_recompute",
                                "block_stride_to_chunks", "online_softmax_to_two_pass"],
                    {"block_reduce_shared", "register_cache", "grid_stride", "online_softmax"}),
    "online_rescale_to_two_pass/attention": ("attention_fwd", ["drop_unroll_pragma", "online_rescale_to_two_pass"],
                                             {"online_softmax"}),
    "chan_stats_to_two_pass/layernorm": ("layernorm", ["block_reduce_to_serial", "chan_stats_to_two_pass"],
                                         {"single_pass_stats", "block_reduce_shared"}),
    "grid_stride/reduce_sum": ("reduce_sum", ["drop_grid_clamp", "grid_stride_to_single"], {"grid_stride"}),
    # (the block-stride zeroing of the private histogram goes with the private copy first, as in the walk)
    "grid_stride/histogram": ("histogram", ["privatized_to_global_atomics", "drop_grid_clamp", "grid_stride_to_single"],
                              {"grid_stride"}),
}


@pytest.mark.parametrize("case", sorted(GATED))
def test_rewritten_corpus_kernel_passes_the_gate(case, gate_store):
    problem, ops, gone = GATED[case]
    source = _read(problem)
    for name in ops:
        source, n = _fix(name, source)
        assert n >= 1, name
    assert not gone & _carriers(source), gone & _carriers(source)
    result = _gate(problem, source, gate_store)
    assert result.passed, result.reason


def test_gate_rejects_a_serial_fold_over_one_warp(gate_store):
    """The fold must visit every thread's slot: stopping at 32 loses the other warps' values."""
    src, _ = _fix("block_reduce_to_serial", _read("rmsnorm_residual"))
    broken = src.replace("ks_w < blockDim.x", "ks_w < 32")
    assert broken != src
    assert not _gate("rmsnorm_residual", broken, gate_store).passed
