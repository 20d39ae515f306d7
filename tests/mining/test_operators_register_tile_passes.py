"""Register tiles of outside GEMMs undone (issue 19): the register_tile detector by meaning (any
spelling of an element accumulated from itself), register_tile_per_output (one output per pass,
the region rerun with a scalar accumulator) and fragment_to_shared_reads (an operand cache copied
from a shared tile read from the tile). Two GEMM spellings the operators were not written on,
each gated on the CPU with the house sgemm problem's workloads, plus the sites they must refuse."""
from __future__ import annotations

from pathlib import Path

import pytest

from mining.carriers import detect_carriers
from mining.operators import all_operators, get_operator

from _operator_support import cpu_gate as _gate, to_fixpoint as _to_fixpoint


@pytest.fixture(scope="module")
def gate_store(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("register-tile-passes-gate-store")


# spelling 1: 4 x 4 outputs strided 16 apart, scalar fragments, `+=`, a nested zero loop, the
# epilogue guarded by bounds in the same nest as the tile's loops
STRIDED = r"""
#include <cuda_runtime.h>
#define TS 64
#define KS 16
__global__ void gemm_strided(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[KS][TS];
    __shared__ float Bs[KS][TS];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * TS, col0 = blockIdx.x * TS;
    float acc[4][4];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += KS) {
        for (int l = ty * 16 + tx; l < KS * TS; l += 256) {
            const int kk = l / TS, mm = l % TS;
            As[kk][mm] = (row0 + mm < M && k0 + kk < K) ? A[(row0 + mm) * K + k0 + kk] : 0.0f;
            Bs[kk][mm] = (k0 + kk < K && col0 + mm < N) ? B[(k0 + kk) * N + col0 + mm] : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < KS; ++k) {
            float af[4], bf[4];
            for (int i = 0; i < 4; ++i) af[i] = As[k][ty + 16 * i];
            for (int j = 0; j < 4; ++j) bf[j] = Bs[k][tx + 16 * j];
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) acc[i][j] += af[i] * bf[j];
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
            const int r = row0 + ty + 16 * i, c = col0 + tx + 16 * j;
            if (r < M && c < N) C[r * N + c] = acc[i][j];
        }
}
void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 grid((N + TS - 1) / TS, (M + TS - 1) / TS);
    gemm_strided<<<grid, dim3(16, 16)>>>(A, B, C, M, N, K);
}
"""

# spelling 2: 4 x 4 contiguous outputs, `= {}`, a `while` over k, `fmaf` written through the tile's
# own element, fragments copied from k-major shared tiles with reinterpret_cast float4 copies, an
# early bounds return before the tile is touched, the epilogue through `(&t[m][0])[n]`
CONTIG = r"""
#include <cuda_runtime.h>
#define TM 4
#define TN 4
#define BK 8
template <int BT>
__global__ void gemm_contig(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ __align__(16) float As[BK][BT];
    __shared__ __align__(16) float Bs[BK][BT];
    const int t = threadIdx.x;
    const int tr = t / 16, tc = t % 16;
    float sum[TM][TN] = {};
    float ra[TM], rb[TN];
    if (blockIdx.z > 0) return;
    int k0 = 0;
    while (k0 < K) {
        for (int l = t; l < BK * BT; l += 256) {
            const int m = l / BK, kk = l % BK;
            const int gm = blockIdx.y * BT + m, gk = k0 + kk;
            As[kk][m] = (gm < M && gk < K) ? A[gm * K + gk] : 0.0f;
            const int kb = l / BT, n = l % BT;
            const int gn = blockIdx.x * BT + n;
            Bs[kb][n] = (k0 + kb < K && gn < N) ? B[(k0 + kb) * N + gn] : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < BK; ++k) {
            *reinterpret_cast<float4*>(&ra[0]) = *reinterpret_cast<const float4*>(&As[k][tr * TM]);
            *reinterpret_cast<float4*>(&rb[0]) = *reinterpret_cast<const float4*>(&Bs[k][tc * TN]);
            for (int m = 0; m < TM; ++m)
                for (int n = 0; n < TN; ++n) sum[m][n] = fmaf(ra[m], rb[n], sum[m][n]);
        }
        __syncthreads();
        k0 += BK;
    }
    for (int m = 0; m < TM; ++m) {
        const int gm = blockIdx.y * BT + tr * TM + m;
        for (int n = 0; n < TN; ++n)
            if (gm < M && blockIdx.x * BT + tc * TN + n < N)
                C[gm * N + blockIdx.x * BT + tc * TN + n] = (&sum[m][0])[n];
    }
}
void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 grid((N + 63) / 64, (M + 63) / 64);
    gemm_contig<64><<<grid, 256>>>(A, B, C, M, N, K);
}
"""


def test_registered_with_their_carriers():
    names = [op.name for op in all_operators()]
    assert names.index("register_tile_to_dot") < names.index("register_tile_per_output") < \
        names.index("fragment_to_shared_reads")
    assert get_operator("register_tile_per_output").carrier == "register_tile"
    assert get_operator("fragment_to_shared_reads").carrier == "register_cache"


def test_register_tile_found_by_meaning():
    for src, name in ((STRIDED, "acc"), (CONTIG, "sum")):
        assert [s.excerpt.split("[")[0].split()[-1] for s in detect_carriers(src)["register_tile"]] == [name]
    # an intrinsic that reads the element it assigns, however it is named
    intr = CONTIG.replace("fmaf(ra[m], rb[n], sum[m][n])", "__fmaf_rn(ra[m], rb[n], sum[m][n])")
    assert len(detect_carriers(intr)["register_tile"]) == 1
    # a 2-D local table that is only written and read (never accumulated) is not a register tile
    table = CONTIG.replace("sum[m][n] = fmaf(ra[m], rb[n], sum[m][n]);", "sum[m][n] = ra[m] * rb[n];")
    assert detect_carriers(table).get("register_tile", []) == []
    # nor one set afresh on every trip and then mapped in place (`t = dot; t = exp(t - m)`)
    mapped = CONTIG.replace("sum[m][n] = fmaf(ra[m], rb[n], sum[m][n]);",
                            "{ sum[m][n] = ra[m] * rb[n]; sum[m][n] = expf(sum[m][n] - 1.0f); }")
    assert detect_carriers(mapped).get("register_tile", []) == []
    # while the same map with no fresh value before it carries the element across trips
    carried = CONTIG.replace("sum[m][n] = fmaf(ra[m], rb[n], sum[m][n]);", "sum[m][n] = expf(sum[m][n] - ra[m]);")
    assert len(detect_carriers(carried)["register_tile"]) == 1


def _per_output(src: str) -> str:
    op = get_operator("register_tile_per_output")
    sites = op.find_sites(src)
    assert len(sites) == 1 and sites == op.find_sites(src)
    return op.apply(src, sites[0])


def test_per_output_on_strided_tile():
    new = _per_output(STRIDED)
    assert "for (int ks_m_acc = 0; ks_m_acc < 4; ++ks_m_acc)" in new
    assert "for (int ks_n_acc = 0; ks_n_acc < 4; ++ks_n_acc) {" in new
    assert "float acc;" in new and "acc[" not in new
    # the zero nest and the accumulation nest run the pass's iteration only
    assert "for (int i = ks_m_acc; i < ks_m_acc + 1; ++i)" in new
    assert "acc += af[i] * bf[j];" in new
    # the epilogue's loops are solved for the pass's element (the bounds check stays)
    assert "for (int i = max(0, ks_m_acc); i < min(4, ks_m_acc + 1); ++i)" in new
    assert "if (r < M && c < N) C[r * N + c] = acc;" in new
    assert "            __syncthreads();  // the next output's pass refills what this one read\n        }\n}\n" in new
    assert new.endswith(STRIDED[STRIDED.index("void sgemm("):])
    assert "register_tile" not in detect_carriers(new)
    assert get_operator("register_tile_per_output").find_sites(new) == []


def test_per_output_on_contiguous_tile_then_fragments():
    new = _per_output(CONTIG)
    assert "float sum = 0;" in new
    assert "sum = fmaf(ra[m], rb[n], sum);" in new
    # the early return before the tile's first access leaves in the first pass, as before
    assert new.index("for (int ks_m_sum = 0;") < new.index("if (blockIdx.z > 0) return;") < new.index("while (k0")
    # `(&sum[m][0])[n]`: element [m][0 + n], solved on both loops
    assert "for (int n = max(0, ks_n_sum - 0); n < min(TN, ks_n_sum - 0 + 1); ++n)" in new
    assert "C[gm * N + blockIdx.x * BT + tc * TN + n] = sum;" in new
    frag = get_operator("fragment_to_shared_reads")
    sites = frag.find_sites(new)
    assert len(sites) == 2
    out, n = _to_fixpoint(frag, new)
    assert n == 2
    assert "ra[" not in out and "rb[" not in out and "reinterpret_cast" not in out
    assert "sum = fmaf((&As[k][tr * TM])[m], (&Bs[k][tc * TN])[n], sum);" in out


def test_fragment_with_two_copies_reads_through_a_choice():
    """The expert's FLOAT4 spelling: two 4-wide copies fill the 8 elements; a read picks its copy."""
    src = (
        "#define FLOAT4(v) (reinterpret_cast<float4 *>(&(v))[0])\n"
        "__global__ void k(const float* a, float* y, int n) {\n"
        "    __shared__ float s[2][128];\n"
        "    s[threadIdx.x / 128][threadIdx.x % 128] = a[threadIdx.x];\n"
        "    __syncthreads();\n"
        "    float r[8];\n"
        "    float acc = 0.0f;\n"
        "    for (int k = 0; k < 2; ++k) {\n"
        "        FLOAT4(r[0]) = FLOAT4(s[k][threadIdx.x % 16 * 4]);\n"
        "        FLOAT4(r[4]) = FLOAT4(s[k][threadIdx.x % 16 * 4 + 64]);\n"
        "        for (int m = 0; m < 8; ++m) acc += r[m];\n"
        "    }\n"
        "    y[threadIdx.x] = acc;\n"
        "}\n")
    op = get_operator("fragment_to_shared_reads")
    assert len(op.find_sites(src)) == 1
    out = op.apply(src, op.find_sites(src)[0])
    assert "acc += (m < 4 ? (&s[k][threadIdx.x % 16 * 4])[m] : (&s[k][threadIdx.x % 16 * 4 + 64])[m - 4]);" in out
    assert "float r[8];" not in out and "FLOAT4(r" not in out
    # refused: a barrier between the copies and the reads
    assert op.find_sites(src.replace("        for (int m = 0; m < 8; ++m)", "        __syncthreads();\n"
                                                                          "        for (int m = 0; m < 8; ++m)")) == []
    # refused: the shared tile written after the copies
    assert op.find_sites(src.replace("acc += r[m];", "{ acc += r[m]; s[k][m] = 0.0f; }")) == []
    # refused: a gap in the filled elements (r[4..7] never copied, r[8] is)
    assert op.find_sites(src.replace("FLOAT4(r[4])", "FLOAT4(r[8])").replace("float r[8]", "float r[12]")) == []
    # refused: copies from global memory (another operator's register cache)
    glob = src.replace("FLOAT4(s[k][threadIdx.x % 16 * 4])", "FLOAT4(((float*)a)[k * 4])")
    assert op.find_sites(glob) == []


def test_per_output_refuses_unsound_sites():
    op = get_operator("register_tile_per_output")
    assert len(op.find_sites(STRIDED)) == 1
    # the tile's address escapes
    esc = STRIDED.replace("    for (int k0 = 0; k0 < K; k0 += KS) {",
                          "    float* leak = &acc[0][0];\n    for (int k0 = 0; k0 < K; k0 += KS) {")
    assert op.find_sites(esc) == []
    # a start value that is not zero for every element
    one = CONTIG.replace("float sum[TM][TN] = {};", "float sum[TM][TN] = {1.0f};")
    assert op.find_sites(one) == []
    # state from before the tile updated in place: the region could not run again
    outer = STRIDED.replace("    float acc[4][4];", "    int steps = 0;\n    float acc[4][4];").replace(
        "        __syncthreads();\n    }\n", "        __syncthreads();\n        ++steps;\n    }\n")
    assert op.find_sites(outer) == []
    outer_eq = outer.replace("++steps;", "steps = steps + 1;")
    assert op.find_sites(outer_eq) == []
    # an element read where no statement can be guarded
    decl = STRIDED.replace("if (r < M && c < N) C[r * N + c] = acc[i][j];",
                           "const float v = acc[i][j];\n            if (r < M && c < N) C[r * N + c] = v;")
    assert op.find_sites(decl) == []
    # a return after the tile is touched (later passes would not run)
    late = CONTIG.replace("        k0 += BK;\n", "        k0 += BK;\n        if (k0 > 4 * K) return;\n")
    assert op.find_sites(late) == []


@pytest.mark.parametrize("name", ["strided", "contig"])
def test_rewritten_gemms_pass_the_gate(name, gate_store):
    src = {"strided": STRIDED, "contig": CONTIG}[name]
    assert _gate("sgemm", src, gate_store).passed
    new = _per_output(src)
    new, _ = _to_fixpoint(get_operator("fragment_to_shared_reads"), new)
    assert "register_tile" not in detect_carriers(new)
    result = _gate("sgemm", new, gate_store)
    assert result.passed, result.reason


def test_per_output_and_fragment_steps_are_evidence_for_the_existing_skills():
    """Another spelling of the same optimization adds evidence to its skill instead of a new key."""
    from mining.operators.registry import skill_operator
    from mining.records import skill_identity

    assert skill_operator("register_tile_per_output") == "register_tile_to_dot"
    assert skill_operator("fragment_to_shared_reads") == "register_cache_to_reload"
    assert skill_operator("register_tile_to_dot") == "register_tile_to_dot"
    assert skill_identity("register_tile", skill_operator("register_tile_per_output"))[0] == \
        "register_tile:register_tile_to_dot"
