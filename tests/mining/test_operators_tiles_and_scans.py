"""Carrier-recall operators (part B): outer-product register tile -> dot products, transposed
shared tile -> global layout, decoupled look-back -> chained scan, and the register budget of
shared_tile_to_global. Site detection on corpus kernels, byte identity outside the edit, the
carrier gone per detect_carriers, refusals of unsound forms, a real nvcc register check and a real
CPU gate pass of each rewritten corpus kernel."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from corpora.code.source import Source
from mining.carriers import detect_carriers
from mining.gate.static import nvcc_path, static_stage
from mining.operators import all_operators, get_operator
from mining.operators.rewrite_util import structural
from mining.operators.unroll_budget import block_threads, load_budget, trip_count, unroll_factor

from _operator_support import (
    KERNELS, assert_outside_identical as _assert_outside_identical, cpu_gate as _gate,
    edited as _edited, read_kernel as _read, to_fixpoint as _to_fixpoint)

MINE = ["register_tile_to_dot", "untranspose_tile", "lookback_to_chained", "block_scan_to_thread_totals"]


def test_registered_with_their_carriers():
    names = [op.name for op in all_operators()]
    assert all(n in names for n in MINE)
    assert {n: get_operator(n).carrier for n in MINE} == {
        "register_tile_to_dot": "register_tile", "untranspose_tile": "transposed_tile",
        "lookback_to_chained": "decoupled_lookback", "block_scan_to_thread_totals": "block_scan"}


# ----------------------------------------------------------------------------- register_tile_to_dot

def test_register_tile_to_dot_on_attention():
    op = get_operator("register_tile_to_dot")
    src = _read("attention_fwd")
    sites = op.find_sites(src)
    assert len(sites) == 1 and "s[r][c] = 0.0f" in sites[0].excerpt
    assert sites == op.find_sites(src)
    new = op.apply(src, sites[0])
    _assert_outside_identical(src, new, sites[0])
    edited = _edited(src, new, sites[0])
    assert "for (int r = 0; r < 4; ++r)\n            for (int c = 0; c < 4; ++c) {\n" \
           "                float ks_dot_s = 0.0f;\n" in edited
    assert "ks_dot_s = fmaf(qf[r].x, kf[c].x, ks_dot_s);" in edited
    assert edited.rstrip().endswith("s[r][c] = ks_dot_s;\n            }")
    # the reduction loop keeps its pragma; the fragment loads stay as they were
    assert "#pragma unroll  // carrier: unroll_pragma\n                for (int k = 0; k < HEAD_DIM; k += 4) {" in edited
    # the score tile is no longer a register tile; the output tile acc[4][8] still is
    assert [s.excerpt[:27] for s in detect_carriers(new)["register_tile"]] == ["float m[4], l[4], acc[4][8]"]
    assert op.find_sites(new) == []


def test_register_tile_gone_after_both_tile_operators():
    att, n = _to_fixpoint(get_operator("shrink_register_tile"), _read("attention_fwd"))
    assert n == 2
    att, n = _to_fixpoint(get_operator("register_tile_to_dot"), att)
    assert n == 1 and "register_tile" not in detect_carriers(att)


def test_register_tile_to_dot_refuses_unsound_forms():
    op = get_operator("register_tile_to_dot")
    base = ("__global__ void k(const float* a, const float* b, float* y, int n) {\n"
            "    float s[2][2];\n"
            "    for (int r = 0; r < 2; ++r)\n"
            "        for (int c = 0; c < 2; ++c) s[r][c] = 0.0f;\n"
            "    for (int k = 0; k < n; ++k) {\n"
            "        float af[2], bf[2];\n"
            "        for (int r = 0; r < 2; ++r) af[r] = a[k * 2 + r];\n"
            "        for (int c = 0; c < 2; ++c) bf[c] = b[k * 2 + c];\n"
            "        STEP\n"
            "        for (int r = 0; r < 2; ++r)\n"
            "            for (int c = 0; c < 2; ++c) s[r][c] = fmaf(af[r], bf[c], s[r][c]);\n"
            "    }\n"
            "    for (int r = 0; r < 2; ++r)\n"
            "        for (int c = 0; c < 2; ++c) y[r * 2 + c] = s[r][c];\n"
            "}\n")
    ok = base.replace("STEP", "")
    assert len(op.find_sites(ok)) == 1
    new = op.apply(ok, op.find_sites(ok)[0])
    assert "float ks_dot_s = 0.0f;" in new and "ks_dot_s = fmaf(af[r], bf[c], ks_dot_s);" in new
    # a fragment statement with an effect that outlives one step would now run 4 times
    assert op.find_sites(base.replace("STEP", "y[k] = 1.0f;")) == []
    # a loop header that steps something besides its own variable
    assert op.find_sites(ok.replace("for (int k = 0; k < n; ++k) {", "for (int k = 0; k < n; ++k, ++n) {")) == []
    # a barrier in the reduction loop
    assert op.find_sites(base.replace("STEP", "__syncthreads();")) == []
    # the element read transposed inside the nest
    assert op.find_sites(ok.replace("fmaf(af[r], bf[c], s[r][c])", "fmaf(af[r], bf[c], s[c][r])")) == []
    # an initial value that is not a constant
    assert op.find_sites(ok.replace("s[r][c] = 0.0f;", "s[r][c] = y[0];")) == []
    # the nest does not cover the tile's extent
    assert op.find_sites(ok.replace("for (int c = 0; c < 2; ++c) s[r][c] = fmaf", "for (int c = 0; c < 1; ++c) s[r][c] = fmaf")) == []
    # an outer variable named like a nest variable would be captured by the new loops
    captured = base.replace("float s[2][2];", "float s[2][2];\n    const int c = 1;").replace("STEP", "bf[0] += c;")
    assert op.find_sites(captured) == []
    assert len(op.find_sites(captured.replace("bf[0] += c;", "bf[0] += 1;"))) == 1


# ----------------------------------------------------------------------------- untranspose_tile

def test_untranspose_tile_on_sgemm():
    op = get_operator("untranspose_tile")
    src = _read("sgemm")
    assert "transposed_tile" in detect_carriers(src)
    sites = op.find_sites(src)
    assert len(sites) == 1
    new = op.apply(src, sites[0])
    _assert_outside_identical(src, new, sites[0])
    edited = _edited(src, new, sites[0])
    assert "__shared__ __align__(16) float As[2][BM + APAD][BK];" in new
    assert "As[s][a_r][a_k + 3] = ra.w;" in edited
    assert ("const float4 a1 = make_float4(As[cur][64 + ty * 4][k], As[cur][64 + ty * 4 + 1][k], "
            "As[cur][64 + ty * 4 + 2][k], As[cur][64 + ty * 4 + 3][k]);") in new
    # Bs keeps its vector store and reads (not transposed)
    assert "*reinterpret_cast<float4*>(&Bs[s][b_r][b_c]) = rb;" in new
    found = detect_carriers(new)
    assert "transposed_tile" not in found and "shared_tile" in found
    assert op.find_sites(new) == []


def test_untranspose_tile_vector_store_and_refusals():
    op = get_operator("untranspose_tile")
    src = ("__global__ void k(const float* A, float* y, int K) {\n"
           "    __shared__ float t[4][64];\n"
           "    const int m = threadIdx.x;\n"
           "    const float* g = A + (size_t)(blockIdx.x * 64 + m) * K;\n"
           "    *reinterpret_cast<float4*>(&t[0][m]) = make_float4(g[0], g[0], g[0], g[0]);\n"
           "    t[1][m] = g[1];\n"
           "    __syncthreads();\n"
           "    float4 v = *reinterpret_cast<const float4*>(&t[1][(m & 15) * 4]);\n"
           "    y[m] = v.x + v.y + v.z + v.w + t[0][63 - m];\n"
           "}\n")
    assert "transposed_tile" in detect_carriers(src)
    sites = op.find_sites(src)
    assert len(sites) == 1
    new = op.apply(src, sites[0])
    assert "__shared__ float t[64][4];" in new and "t[m][1] = g[1];" in new
    assert "{ const float4 ks_v = (make_float4(g[0], g[0], g[0], g[0])); t[m][0] = ks_v.x; t[m + 1][0] = ks_v.y; " \
           "t[m + 2][0] = ks_v.z; t[m + 3][0] = ks_v.w; }" in new
    assert "float4 v = make_float4(t[(m & 15) * 4][1], t[(m & 15) * 4 + 1][1], t[(m & 15) * 4 + 2][1], " \
           "t[(m & 15) * 4 + 3][1]);" in new and "t[63 - m][0]" in new
    # the array passed on whole, or an element's address taken for something else: not a site
    assert op.find_sites(src.replace("__syncthreads();", "__syncthreads(); use(t);")) == []
    assert op.find_sites(src.replace("__syncthreads();", "__syncthreads(); float* p = &t[2][m];")) == []
    # an index with a side effect would be repeated by the split vector access
    assert op.find_sites(src.replace("(m & 15) * 4]", "(m++ & 15) * 4]")) == []


# ----------------------------------------------------------------------------- lookback_to_chained

def test_lookback_to_chained_on_exclusive_scan():
    op = get_operator("lookback_to_chained")
    src = _read("exclusive_scan")
    sites = op.find_sites(src)
    assert len(sites) == 1 and "int pred = tile - 1 - lane;" in sites[0].excerpt
    new = op.apply(src, sites[0])
    _assert_outside_identical(src, new, sites[0])
    edited = _edited(src, new, sites[0])
    assert not re.search(r"\bpred\b", edited) and "__ballot_sync" not in edited and "__any_sync" not in edited
    assert ("word = (tile - 1 - 0) >= 0 ? *reinterpret_cast<volatile unsigned long long*>(status + (tile - 1 - 0)) "
            ": (FLAG_PREFIX << 32);") in edited
    assert "} while ((word >> 32) != FLAG_PREFIX);" in edited and "exclusive += (int)(unsigned)word;" in edited
    found = detect_carriers(new)
    assert "decoupled_lookback" not in found and "dynamic_tile_id" in found  # the ticket keeps the chain live
    assert op.find_sites(new) == []


def test_lookback_to_chained_refuses_other_loops():
    op = get_operator("lookback_to_chained")
    src = _read("exclusive_scan")
    # the window variable read after the loop
    used = src.replace("if (lane == 0) publish(status + tile, FLAG_PREFIX, exclusive + aggregate);",
                       "if (lane == 0) publish(status + tile, FLAG_PREFIX, exclusive + aggregate + pred);")
    assert used != src and op.find_sites(used) == []
    # no ballot deciding the stop: not a look-back loop this operator knows
    nob = src.replace("__ballot_sync(0xffffffffu, flag == FLAG_PREFIX)", "(flag == FLAG_PREFIX)")
    assert nob != src and op.find_sites(nob) == []


# ----------------------------------------------------------------------------- block_scan_to_thread_totals

def test_block_scan_to_thread_totals_on_exclusive_scan():
    op = get_operator("block_scan_to_thread_totals")
    src = _read("exclusive_scan")
    sites = op.find_sites(src)
    assert len(sites) == 1 and "__shared__ int warp_total[THREADS / 32];" in sites[0].excerpt
    new = op.apply(src, sites[0])
    _assert_outside_identical(src, new, sites[0])
    assert "__shared__ int ks_thread_total[(THREADS / 32) * 32];" in new
    assert "    ks_thread_total[warp * 32 + lane] = total;\n    __syncthreads();" in new
    assert ("for (int ks_u = 0; ks_u < (THREADS / 32) * 32; ++ks_u) {\n        const int v = ks_thread_total[ks_u];\n"
            "        warp_prefix += (ks_u / 32) < warp ? v : 0;\n        aggregate += v;") in new
    assert "warp_total" not in new.split("carrier: block_scan")[0].split("__shared__ int4 buf")[1]
    found = detect_carriers(new)
    assert "block_scan" not in found and "warp_scan" in found  # the warp scan still gives the in-warp prefix
    assert op.find_sites(new) == []


def test_block_scan_to_thread_totals_refusals():
    op = get_operator("block_scan_to_thread_totals")
    src = _read("exclusive_scan")
    # a reader that is not linear in the warp total
    nonlin = src.replace("aggregate += v;", "aggregate = max(aggregate, v);")
    assert nonlin != src and op.find_sites(nonlin) == []
    # the published value is not (only) a warp scan of the thread total
    extra = src.replace("    if (lane == 31) warp_total[warp] = incl;", "    incl *= 2;\n    if (lane == 31) warp_total[warp] = incl;")
    assert extra != src and op.find_sites(extra) == []
    # lane and warp taken from different indices
    mixed = src.replace("const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;",
                        "const int tid = threadIdx.x, lane = tid & 31, warp = blockIdx.x >> 5;")
    assert mixed != src and op.find_sites(mixed) == []
    # a warp scan with an offset that does not double
    slow = src.replace("for (int off = 1; off < 32; off <<= 1) {", "for (int off = 1; off < 32; off += 1) {")
    assert slow != src and op.find_sites(slow) == []


def test_no_sites_in_naive_kernels():
    for name in MINE:
        op = get_operator(name)
        for p in sorted(KERNELS.iterdir()):
            if (p / "naive.cu").is_file():
                assert op.find_sites(_read(p.name, "naive.cu")) == [], (name, p.name)


# ----------------------------------------------------------------------------- register budget

def test_unroll_budget_reads_pragmas_trip_counts_and_block_sizes():
    src = structural(Source(_read("tiled_matmul")))
    loop = next(n for n in src.nodes("for_statement") if n.child_by_field_name("condition").text == b"k < TILE")
    assert trip_count(src, loop) == 32 and unroll_factor(src, loop) == 32
    assert block_threads(src, "matmul_tiled") == 1024 and load_budget(src, "matmul_tiled") == 32
    tr = Source(_read("transpose"))
    assert block_threads(tr, "transpose_tiled") == 256 and load_budget(tr, "transpose_tiled") == 127
    four = Source("__global__ void k(float* y) {\n#pragma unroll 4\n    for (int i = 0; i < 64; i += 2) y[i] = 0;\n}\n")
    assert unroll_factor(four, next(four.nodes("for_statement"))) == 4


def test_shared_tile_to_global_keeps_forwarded_loads_within_the_register_budget():
    op = get_operator("shared_tile_to_global")
    src = _read("tiled_matmul")
    one = op.apply(src, op.find_sites(src)[0])
    # 32 unrolled loads fit a 1024-thread block's budget: the pragma stays
    assert "#pragma unroll  // carrier: unroll_pragma" in one
    two = op.apply(one, op.find_sites(one)[0])
    # 64 would not: the same edit drops the product loop's full unroll
    assert "#pragma unroll" not in two and "__shared__" not in two
    assert "for (int k = 0; k < TILE; ++k) acc += ((row < M && t + k < K) ? A[row * K + t + k] : 0.0f) * " \
           "((t + k < K && col < N) ? B[(t + k) * N + col] : 0.0f);" in two
    # transpose: four unrolled loads in a 256-thread block stay unrolled
    tr, _ = _to_fixpoint(op, _read("transpose"))
    assert tr.count("#pragma unroll") == 1  # the read loop keeps its own (the fill loop is gone)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_forwarded_tiled_matmul_fits_its_block_on_the_gpu(tmp_path):
    """The budget's reason, measured with the real compiler: with the pragma kept, both forwarded
    tiles need more registers than a 1024-thread block allows; the operator's output does not."""
    op = get_operator("shared_tile_to_global")
    src = _read("tiled_matmul")
    one = op.apply(src, op.find_sites(src)[0])
    two = op.apply(one, op.find_sites(one)[0])
    kept = two.replace("    for (int t = 0; t < K; t += TILE) {\n        __syncthreads();\n",
                       "    for (int t = 0; t < K; t += TILE) {\n        __syncthreads();\n#pragma unroll\n")
    assert kept != two

    def regs(text: str, name: str) -> int:
        d = tmp_path / name
        d.mkdir()
        (d / "k.cu").write_text(text)
        res = static_stage(d / "k.cu", d, ("sm_90",), ["-O3"])
        assert res["status"] == "pass", res.get("reason")
        return next(iter(res["archs"]["sm_90"]["kernels"].values()))["registers"]

    assert regs(kept, "kept") * 1024 > 65536
    assert regs(two, "out") * 1024 <= 65536


# ----------------------------------------------------------------------------- gate

@pytest.fixture(scope="module")
def gate_store(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("operator-recall-b-gate-store")


# operator(s) applied to fixpoint in order -> the problem gated on the CPU
GATED = {
    "register_tile_to_dot": (["shrink_register_tile", "register_tile_to_dot"], "attention_fwd"),
    "untranspose_tile": (["untranspose_tile"], "sgemm"),
    "lookback_to_chained": (["lookback_to_chained"], "exclusive_scan"),
    "block_scan_to_thread_totals": (["block_scan_to_thread_totals"], "exclusive_scan"),
    "shared_tile_to_global": (["shared_tile_to_global"], "tiled_matmul"),
}


@pytest.mark.parametrize("name", sorted(GATED))
def test_rewritten_kernel_passes_the_gate(name, gate_store):
    ops, problem = GATED[name]
    source = _read(problem)
    for op_name in ops:
        source, n = _to_fixpoint(get_operator(op_name), source)
        assert n >= 1, op_name
    assert get_operator(name).carrier not in detect_carriers(source)
    result = _gate(problem, source, gate_store)
    assert result.passed, result.reason


def test_gate_rejects_a_broken_chain(gate_store):
    """The chained scan's correctness rests on the value it adds: off by one, the gate fails it."""
    op = get_operator("lookback_to_chained")
    src = _read("exclusive_scan")
    new = op.apply(src, op.find_sites(src)[0])
    broken = new.replace("exclusive += (int)(unsigned)word;", "exclusive += (int)(unsigned)word + 1;")
    assert broken != new
    assert not _gate("exclusive_scan", broken, gate_store).passed
