"""The structural deoptimization operators (shuffles, shared tiles, register tiles, buffers,
register caches, atomics, async copies): site detection on corpus kernels, the rewrite text,
byte identity outside the edit, the carrier gone from the site after a fixpoint, and a real CPU
gate pass of the rewritten kernel (one gate run per operator, two builds for the shuffle check)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from corpora.code.source import Site
from mining.carriers import detect_carriers
from mining.gate import cpu_rewrite, cpu_toolchain
from mining.operators import all_operators, get_operator

from _operator_support import (
    KERNELS, assert_outside_identical as _assert_outside_identical, cpu_gate as _gate,
    edited as _edited, read_kernel as _read, to_fixpoint as _to_fixpoint)

CUDA = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"  # test kernels too long to read inline

NEW = ["shuffle_to_shared", "scan_shuffle_to_shared", "shared_tile_to_global", "shrink_register_tile",
       "double_to_single_buffer", "register_cache_to_reload", "privatized_to_global_atomics",
       "block_reduce_to_warp_atomics", "warp_atomic_to_thread_atomics", "async_copy_to_sync", "drop_pipeline_sync",
       "sliding_window_to_reload"]


# operator -> (problem, site count, text in the first site's excerpt, text in the first rewrite)
CASES = {
    "shuffle_to_shared": ("reduce_sum", 1, "float warp_sum(float v)",
                          "{ ks_xchg_float[ks_tid] = v; __syncwarp(0xffffffffu); "
                          "v += ks_xchg_float[ks_tid ^ offset]; __syncwarp(0xffffffffu); }"),
    "scan_shuffle_to_shared": ("exclusive_scan", 1, "unsigned long long* __restrict__ status",
                               "const int t = ks_xchg_int[(ks_tid & 31) >= off ? ks_tid - off : ks_tid];"),
    "shared_tile_to_global": ("transpose", 1, "__shared__ float tile[TILE][TILE + 1];",
                              "y[(size_t)cc * R + r] = (((r0 + threadIdx.x) < R && (c0 + (threadIdx.y + i)) < C) ? "
                              "__ldg(x + (size_t)(r0 + threadIdx.x) * C + (c0 + (threadIdx.y + i))) : 0)"),
    "shrink_register_tile": ("sgemm", 1, "float acc[8][8];",
                             "for (int ks_p_acc = 0; ks_p_acc < 2; ++ks_p_acc) {\n        float acc[4][8];"),
    "double_to_single_buffer": ("sgemm", 2, "__shared__ float As[2][BK][BM + APAD];",
                                "As[a_k + 0][a_r] = ra.x;"),
    "register_cache_to_reload": ("bias_gelu", 2, "const float4 b = __ldg(",
                                 "o.x = gelu(v.x + (__ldg(reinterpret_cast<const float4*>(bias) + c)).x);"),
    "privatized_to_global_atomics": ("histogram", 1, "extern __shared__ int hist[];",
                                     "count(counts, a.x, bins);"),
    "block_reduce_to_warp_atomics": ("reduce_sum", 1, "__shared__ float warp_totals[THREADS / 32];",
                                     "sum = warp_sum(sum);\n    if (lane == 0) atomicAdd(y, sum);"),
    "warp_atomic_to_thread_atomics": ("reduce_sum", 1, "sum = warp_sum(sum); if (lane == 0) atomicAdd(y, sum);",
                                      "atomicAdd(y, sum);"),
    "sliding_window_to_reload": ("conv2d_3x3", 1, "load_row(tile, r0, tx, lane, a); load_row(tile, r0 + 1, tx,",
                                 "for (int k = 0; k < RPT; ++k) {\n        load_row(tile, r0 + k, tx, lane, a);\n"
                                 "        load_row(tile, r0 + k + 1, tx, lane, b);\n"
                                 "        load_row(tile, r0 + k + 2, tx, lane, cc);"),
    "async_copy_to_sync": ("hgemm_wmma", 2, "__pipeline_memcpy_async(as + ar * A_LD + ak",
                           "for (int ks_e = 0; ks_e < 16 / (int)sizeof(*(as + ar * A_LD + ak)); ++ks_e) "
                           "(as + ar * A_LD + ak)[ks_e] = (A + (size_t)(bm + ar) * K + k0 + ak)[ks_e];"),
}


def test_registry_holds_the_new_operators():
    names = [op.name for op in all_operators()]
    # walk priority (mining/operators/registry.py): declarative carriers first, access width next
    # (each cache hint sits right after __ldg, under its own name; packed half2 math and block swizzles
    # after fast math)
    declarative = [n for n in names[:names.index("vector_load_to_scalar") + 1] if not n.endswith("_hint")]
    assert declarative == ["drop_unroll_pragma", "drop_launch_bounds", "drop_restrict", "ldg_to_plain_load",
                           "fast_math_to_precise", "half2_to_scalar", "block_swizzle_to_natural", "drop_shared_padding",
                           "vector_store_to_scalar", "vector_load_to_scalar"]
    assert names.index("drop_streaming_load_hint") == names.index("ldg_to_plain_load") + 1
    assert set(NEW) <= set(names)
    assert {get_operator(n).carrier for n in NEW} == {
        "warp_shuffle_reduce", "warp_scan", "shared_tile", "register_tile", "double_buffer", "register_cache",
        "privatized_atomics", "block_reduce_shared", "atomic_per_block", "async_copy", "multi_stage_pipeline"}
    assert get_operator("sliding_window_to_reload").carrier == "register_tile"


@pytest.mark.parametrize("name", sorted(CASES))
def test_sites_and_rewrite(name):
    problem, count, excerpt, expected = CASES[name]
    op = get_operator(name)
    source = _read(problem)
    sites = op.find_sites(source)
    assert len(sites) == count, [s.excerpt for s in sites]
    assert sites == op.find_sites(source)  # deterministic
    site = sites[0]
    assert site.carrier == op.carrier
    assert excerpt in site.excerpt, site.excerpt
    new = op.apply(source, site)
    assert expected in _edited(source, new, site), _edited(source, new, site)
    _assert_outside_identical(source, new, site)
    assert op.apply(source, site) == new


def test_no_sites_in_naive_kernels():
    for name in NEW:
        op = get_operator(name)
        for p in sorted(KERNELS.iterdir()):
            if (p / "naive.cu").is_file():
                assert op.find_sites(_read(p.name, "naive.cu")) == [], (name, p.name)


# ----------------------------------------------------------------------------- fixpoints

def _carrier_sites(source: str, carrier: str) -> list[Site]:
    return detect_carriers(source).get(carrier, [])


@pytest.mark.parametrize("name,problem", [
    ("shuffle_to_shared", "reduce_sum"), ("shuffle_to_shared", "softmax"), ("shuffle_to_shared", "layernorm"),
    ("shuffle_to_shared", "attention_fwd"), ("scan_shuffle_to_shared", "exclusive_scan"),
    ("shared_tile_to_global", "tiled_matmul"), ("shared_tile_to_global", "transpose"),
    ("shrink_register_tile", "sgemm"), ("double_to_single_buffer", "sgemm"),
    ("register_cache_to_reload", "bias_gelu"), ("register_cache_to_reload", "conv2d_3x3"),
    ("register_cache_to_reload", "layernorm"), ("privatized_to_global_atomics", "histogram"),
    ("block_reduce_to_warp_atomics", "reduce_sum"), ("async_copy_to_sync", "hgemm_wmma"),
    ("sliding_window_to_reload", "conv2d_3x3"),
])
def test_fixpoint_removes_the_carrier(name, problem):
    op = get_operator(name)
    before = _read(problem)
    assert _carrier_sites(before, op.carrier)
    after, n = _to_fixpoint(op, before)
    assert n >= 1 and not op.find_sites(after)
    assert not _carrier_sites(after, op.carrier), [s.excerpt for s in _carrier_sites(after, op.carrier)]


def test_fixpoints_of_the_other_carriers_the_rewrites_remove():
    # the shared tile's removal takes the transpose with it
    after, _ = _to_fixpoint(get_operator("shared_tile_to_global"), _read("transpose"))
    assert "coalesced_transpose" not in detect_carriers(after) and "__shared__" not in after
    # shuffles of the shfl_up scan are the scan operator's, not shuffle_to_shared's
    scan = _read("exclusive_scan")
    after, n = _to_fixpoint(get_operator("shuffle_to_shared"), scan)
    assert n == 1 and "warp_scan" in detect_carriers(after) and "warp_shuffle_reduce" not in detect_carriers(after)
    # the exchange buffer is a per-lane slot array synchronized by __syncwarp, not a shared tile
    sm, _ = _to_fixpoint(get_operator("shuffle_to_shared"), _read("softmax"))
    assert "ks_xchg_float" in sm and "shared_tile" not in detect_carriers(sm)
    # attention: the output tile goes (its row dimension dropped), the score tile s[4][4] stays:
    # the P^T store reads s[0][c] .. s[3][c] with literal rows
    att, n = _to_fixpoint(get_operator("shrink_register_tile"), _read("attention_fwd"))
    assert n == 2 and "float m[4], l[4], acc[8];" in att and "ks_p_acc < 4" in att
    assert [s.excerpt[:12] for s in _carrier_sites(att, "register_tile")] == ["float s[4][4"]
    # histogram: the per-block merge (atomic_per_block) goes with the private copy
    hist, _ = _to_fixpoint(get_operator("privatized_to_global_atomics"), _read("histogram"))
    assert "atomic_per_block" not in detect_carriers(hist)
    assert not re.search(r"\bhist\b", hist.split("histogram_shared(")[1].split("histogram_global(")[0])
    # reduce_sum: block reduction, then the per-warp atomic; the GPU pipeline calls once copies are sync
    rs, _ = _to_fixpoint(get_operator("block_reduce_to_warp_atomics"), _read("reduce_sum"))
    rs, n = _to_fixpoint(get_operator("warp_atomic_to_thread_atomics"), rs)
    assert n == 1 and "atomic_per_block" not in detect_carriers(rs)
    hg, _ = _to_fixpoint(get_operator("async_copy_to_sync"), _read("hgemm_wmma"))
    assert get_operator("drop_pipeline_sync").find_sites(_read("hgemm_wmma")) == []
    hg, n = _to_fixpoint(get_operator("drop_pipeline_sync"), hg)
    assert n == 5 and "multi_stage_pipeline" not in detect_carriers(hg)
    assert "__pipeline" not in hg and "cuda_pipeline.h" not in hg


def test_register_cache_is_still_seen_once_ldg_is_gone():
    """__ldg(p + i) becomes *(p + i) and a float4 load (p + i)[0..3]: the detector (and with it
    register_cache_to_reload) must still see those as global loads."""
    src, _ = _to_fixpoint(get_operator("ldg_to_plain_load"), _read("conv2d_3x3"))
    src, _ = _to_fixpoint(get_operator("vector_load_to_scalar"), src)
    assert "__ldg" not in src and "reinterpret_cast<const float4*>(xc" not in src
    assert len(detect_carriers(src)["register_cache"]) == 3
    assert len(get_operator("register_cache_to_reload").find_sites(src)) == 3


def test_shrink_register_tile_halves_then_drops_the_row_dimension():
    op = get_operator("shrink_register_tile")
    src = _read("sgemm")
    steps = []
    while op.find_sites(src):
        src = op.apply(src, op.find_sites(src)[0])
        steps.append(re.search(r"float acc(\[\d+\])+;", src).group(0))
    assert steps == ["float acc[4][8];", "float acc[2][8];", "float acc[8];"]
    assert "for (int ks_p_acc = 0; ks_p_acc < 8; ++ks_p_acc) {" in src
    assert "for (int i = ks_p_acc; i < ks_p_acc + 1; ++i)" in src and "acc[j] = fmaf(a[i], b[j], acc[j]);" in src
    assert "__syncthreads();  // the next pass refills what this one read" in src


# ----------------------------------------------------------------------------- refusals

def test_operators_refuse_unsound_forms():
    sh = get_operator("shuffle_to_shared")
    # a value whose type cannot be read from a declaration
    assert sh.find_sites("__global__ void k(float* y) { y[0] = __shfl_xor_sync(0xffffffffu, y[1] * 2.0f, 1); }") == []
    # a statement with another side effect before the shuffle
    assert sh.find_sites("__global__ void k(int* y) { int v = y[0]; y[1] = v++ + __shfl_xor_sync(0xffffffffu, v, 1); }") == []
    # a shuffle in a loop condition
    assert sh.find_sites("__global__ void k(int* y) { int v = y[0]; while (__shfl_sync(0xffffffffu, v, 0) > 0) v--; }") == []
    # a 4 KiB exchange buffer would push the kernel past nvcc's 48 KiB of static shared memory
    big = ("__global__ void k(float* y) { __shared__ float t[11500]; float v = y[threadIdx.x]; t[threadIdx.x] = v;"
           " v += __shfl_xor_sync(0xffffffffu, v, 1); y[threadIdx.x] = v + t[0]; }")
    assert sh.find_sites(big) == [] and len(sh.find_sites(big.replace("11500", "11000"))) == 1
    tile = get_operator("shared_tile_to_global")
    # written twice
    two = ("__global__ void k(const float* x, float* y) { __shared__ float t[32]; t[threadIdx.x] = x[threadIdx.x];"
           " __syncthreads(); t[threadIdx.x] = 1.0f; __syncthreads(); y[threadIdx.x] = t[31 - threadIdx.x]; }")
    assert tile.find_sites(two) == []
    # the fill reads global memory the kernel writes
    rw = ("__global__ void k(float* x) { __shared__ float t[32]; t[threadIdx.x] = x[threadIdx.x];"
          " __syncthreads(); x[threadIdx.x] = t[31 - threadIdx.x]; }")
    assert tile.find_sites(rw) == []
    # a thread-dependent value that does not come through the fill index
    dep = ("__global__ void k(const float* x, float* y) { __shared__ float t[32]; int j = threadIdx.x * 2;"
           " t[threadIdx.y] = x[j]; __syncthreads(); y[threadIdx.x] = t[threadIdx.x]; }")
    assert tile.find_sites(dep) == []
    # a guarded fill inside the loop that also reads (the original may read the previous iteration)
    stale = ("__global__ void k(const float* x, float* y, int n) { __shared__ float t[32]; float a = 0;"
             " for (int s = 0; s < n; s += 32) { if (s + threadIdx.x < n) t[threadIdx.x] = x[s + threadIdx.x];"
             " __syncthreads(); a += t[31 - threadIdx.x]; __syncthreads(); } y[threadIdx.x] = a; }")
    assert tile.find_sites(stale) == []
    # a double buffer that stores before it reads would need reordering
    db = ("__global__ void k(const float* x, float* y, int n) { __shared__ float t[2][32]; float a = 0;"
          " t[0][threadIdx.x] = x[threadIdx.x]; __syncthreads();"
          " for (int s = 0; s < n; ++s) { t[(s + 1) & 1][threadIdx.x] = x[(s + 1) * 32 + threadIdx.x];"
          " a += t[s & 1][31 - threadIdx.x]; __syncthreads(); } y[threadIdx.x] = a; }")
    assert get_operator("double_to_single_buffer").find_sites(db) == []
    # a register tile whose region updates state from before it in place could not run twice
    rt = ("__global__ void k(float* y) { int calls = 0; float acc[2][2];"
          " for (int i = 0; i < 2; ++i) for (int j = 0; j < 2; ++j) acc[i][j] += 1.0f;"
          " calls += 1; for (int i = 0; i < 2; ++i) y[i] = acc[i][0] + calls; }")
    assert get_operator("shrink_register_tile").find_sites(rt) == []


def test_double_buffer_barrier_is_inserted_once_before_the_refill():
    op = get_operator("double_to_single_buffer")
    src, n = _to_fixpoint(op, _read("sgemm"))
    assert n == 2
    body = src.split("for (int kt = 0; kt < ksteps; ++kt) {")[1]
    assert body.count("__syncthreads();") == 2
    assert re.search(r"__syncthreads\(\);  // one stage[^\n]*\n\s*if \(kt \+ 1 < ksteps\) store_slice\(cur \^ 1\);",
                     body)


# ----------------------------------------------------------------------------- shuffle semantics

SHUFFLES = (CUDA / "shuffles.cu").read_text()

SHUFFLE_MAIN = (CUDA / "shuffles_main.cu").read_text()


@pytest.mark.skipif(shutil.which("g++") is None or not Path("/usr/include/boost/context/detail/fcontext.hpp").exists(),
                    reason="needs g++ and libboost-context-dev")
def test_shared_exchange_matches_every_shuffle_form(tmp_path):
    """xor / down / up / idx, widths 8, 16, 32, a variable source lane, struct and vector members, a
    2-D block with a partial warp, and the scan: the rewritten kernel computes the same values as
    the shuffles on the CPU executor's runtime (race checker on)."""
    rewritten = SHUFFLES
    for name in ("shuffle_to_shared", "scan_shuffle_to_shared"):
        rewritten, _ = _to_fixpoint(get_operator(name), rewritten)
    assert "__shfl" not in rewritten
    assert rewritten.count("__shared__ int ks_xchg_int[1024];") == 1
    assert rewritten.count("__shared__ float ks_xchg_float[1024];") == 1
    assert "o[1] = ks_xchg_int[((ks_tid & 31) ^ 5) < ((ks_tid & 31) & ~7) + 8 ? ks_tid ^ 5 : ks_tid];" in rewritten
    assert "o[8] = ks_xchg_int[(ks_tid & ~7) + (13 & 7)];" in rewritten
    both = SHUFFLES + rewritten.split("#include <cuda_runtime.h>", 1)[1].replace(
        "struct Pair { float a; int b; };", "").replace("void shuf(", "void shuf_shared(")
    (tmp_path / "kernel.cu").write_text(cpu_rewrite.rewrite(both))
    (tmp_path / "main.cu").write_text(cpu_rewrite.rewrite(SHUFFLE_MAIN))
    res = cpu_toolchain.compile_cpu_binary(tmp_path / "main.cu", tmp_path / "main", timeout_s=600)
    assert res.ok, res.stderr[-3000:]
    for env in ({}, {"KS_ORDER": "reverse", "KS_RACECHECK": "0"}):
        p = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, timeout=120,
                           env={**__import__("os").environ, **env})
        assert p.returncode == 0 and "MATCH" in p.stdout, p.stdout + p.stderr[-2000:]


# ----------------------------------------------------------------------------- gate

@pytest.fixture(scope="module")
def gate_store(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("operator-ext-gate-store")


# operator(s) applied to fixpoint in order -> the problem gated on the CPU
GATED = {
    "shuffle_to_shared": (["shuffle_to_shared"], "layernorm"),
    "scan_shuffle_to_shared": (["scan_shuffle_to_shared", "shuffle_to_shared"], "exclusive_scan"),
    "shared_tile_to_global": (["shared_tile_to_global"], "transpose"),
    "shrink_register_tile": (["shrink_register_tile"], "attention_fwd"),
    "double_to_single_buffer": (["double_to_single_buffer", "shrink_register_tile"], "sgemm"),
    "register_cache_to_reload": (["register_cache_to_reload"], "conv2d_3x3"),
    "privatized_to_global_atomics": (["privatized_to_global_atomics"], "histogram"),
    "block_reduce_to_warp_atomics": (["block_reduce_to_warp_atomics", "warp_atomic_to_thread_atomics"], "reduce_sum"),
    "sliding_window_to_reload": (["sliding_window_to_reload", "shuffle_to_shared"], "conv2d_3x3"),
}


@pytest.mark.parametrize("name", sorted(GATED))
def test_rewritten_kernel_passes_the_gate(name, gate_store):
    ops, problem = GATED[name]
    source = _read(problem)
    for op_name in ops:
        source, n = _to_fixpoint(get_operator(op_name), source)
        assert n >= 1, op_name
    result = _gate(problem, source, gate_store)
    assert result.passed, result.reason


ASYNC_ADD = (CUDA / "async_add.cu").read_text()


def test_async_copies_made_synchronous_pass_the_gate(gate_store):
    """async_copy_to_sync and drop_pipeline_sync remove every pipeline call, and the synchronous
    kernel passes the CPU gate (the expert runs there too: the `__pipeline_*` primitives are
    emulated, tests/mining/test_forward_hints_async.py)."""
    assert get_operator("drop_pipeline_sync").find_sites(ASYNC_ADD) == []
    src, n = _to_fixpoint(get_operator("async_copy_to_sync"), ASYNC_ADD)
    assert n == 2 and "for (int ks_e = 0; ks_e < 16 / (int)sizeof(*(sa + i)); ++ks_e) (sa + i)[ks_e] = " \
                      "(a + base + i)[ks_e];" in src
    assert "async_copy" not in detect_carriers(src) and "vector_load" not in detect_carriers(src)
    src, n = _to_fixpoint(get_operator("drop_pipeline_sync"), src)
    assert n == 3 and "pipeline" not in src
    assert _gate("vector_add", src, gate_store).passed
