"""Forward rewrites of the register-tile, tile-layout and block-scan operators, on kernels in spellings
they were not written for: fuse_output_passes (mining/operators/register_tile_per_output.py,
inverting register_tile_per_output and register_tile_to_dot), transpose_operand_tile
(mining/operators/untranspose_tile.py) and warp_totals_block_scan
(mining/operators/block_scan_to_thread_totals.py): the sites each takes and refuses, the round trip
through the operators' backward halves, and the real CPU gate on every result."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from _operator_support import cpu_gate, read_kernel
from mining.carriers import detect_carriers
from mining.operators import get_operator
from mining.operators.forward import run_rewrite
from mining.operators.registry import inverses, rewrites_for

sys.path.insert(0, str(Path(__file__).parent))
from test_operators_register_tile_passes import CONTIG, STRIDED  # noqa: E402

PER_OUTPUT = get_operator("register_tile_per_output")
TO_DOT = get_operator("register_tile_to_dot")


@pytest.fixture(scope="module")
def gate_store(tmp_path_factory):
    return tmp_path_factory.mktemp("forward-register-tiles-gate-store")


def _back(op, src: str) -> str:
    sites = op.find_sites(src)
    assert len(sites) == 1
    return op.apply(src, sites[0])


# --------------------------------------------------------------------------- fuse_output_passes
# a hand-written thread that computes its 2 x 2 outputs one after the other over global memory: a
# `while` over k with the index declared before it, the operands in per-output locals, `fmaf`, a
# guarded store; the grid already covers 2 x 2 outputs per thread
QUADS = r"""
#include <cuda_runtime.h>
#define RM 2
#define RN 2
__global__ void sgemm_quads(const float* __restrict__ A, const float* __restrict__ B, float* C, int M, int N, int K) {
    const int r0 = (blockIdx.y * blockDim.y + threadIdx.y) * RM;
    const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * RN;
    for (int a = 0; a < RM; a++) {
        for (int b = 0; b < RN; b++) {
            float dot = 0.f;
            int kk = 0;
            while (kk < K) {
                const float x = r0 + a < M ? A[(r0 + a) * K + kk] : 0.f;
                const float y = c0 + b < N ? B[kk * N + c0 + b] : 0.f;
                dot = fmaf(x, y, dot);
                kk++;
            }
            if (r0 + a < M && c0 + b < N) C[(r0 + a) * N + c0 + b] = dot;
        }
    }
}
void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(8, 8);
    dim3 grid((N + 15) / 16, (M + 15) / 16);
    sgemm_quads<<<grid, block>>>(A, B, C, M, N, K);
}
"""


def test_registered_as_the_inverse_of_both_register_tile_operators():
    assert inverses("register_tile_per_output") == ["fuse_output_passes"]
    assert inverses("register_tile_to_dot") == ["fuse_output_passes", "register_tile_outputs"]
    assert rewrites_for("register_tile_to_dot", "register_tile")[0] == "fuse_output_passes"


def test_round_trip_through_per_output_restores_the_tile(gate_store):
    back = _back(PER_OUTPUT, STRIDED)
    mats = run_rewrite("fuse_output_passes", back)
    assert len(mats) == 1 and mats[0].carrier == "register_tile"
    assert mats[0].source == STRIDED  # the register tile as it was written, barrier of each pass gone
    back = _back(PER_OUTPUT, CONTIG)
    mats = run_rewrite("fuse_output_passes", back)
    assert len(mats) == 1
    new = mats[0].source
    # the tile as written but for the row-pointer read, which comes back as the element it read
    assert new == CONTIG.replace("= (&sum[m][0])[n];", "= sum[m][n];")
    assert "register_tile" in detect_carriers(new)
    assert cpu_gate("sgemm", new, gate_store / "contig").passed
    # and the operator takes the fused tile apart again
    assert PER_OUTPUT.find_sites(new)


def test_round_trip_through_to_dot(gate_store):
    src = read_kernel("attention_fwd")
    back = _back(TO_DOT, src)
    assert "float ks_dot_s = 0.0f;" in back
    mats = run_rewrite("fuse_output_passes", back)
    assert len(mats) == 1
    new = mats[0].source
    # the reduction loop runs once, every output's update inside it: an outer product again
    assert "float ks_dot_s[4][4];" in new
    assert "ks_dot_s[r][c] = fmaf(qf[r].x, kf[c].x, ks_dot_s[r][c]);" in new
    assert new.count("for (int k = 0; k < HEAD_DIM; k += 4) {") == 1
    assert "#pragma unroll  // carrier: unroll_pragma\n        for (int k = 0;" in new  # pragmas stay
    assert "s[r][c] = ks_dot_s[r][c];" in new
    assert cpu_gate("attention_fwd", new, gate_store / "dot").passed
    assert TO_DOT.find_sites(new)  # the backward half finds the tile it made


def test_hand_written_outputs_one_at_a_time_become_a_tile(gate_store):
    mats = run_rewrite("fuse_output_passes", QUADS)
    assert len(mats) == 1
    new = mats[0].source
    assert "float dot[RM][RN];" in new and "dot[a][b] = 0.f;" in new
    assert new.count("while (kk < K)") == 1 and "kk++;" in new
    assert "dot[a][b] = fmaf(x, y, dot[a][b]);" in new
    assert "C[(r0 + a) * N + c0 + b] = dot[a][b];" in new
    assert cpu_gate("sgemm", QUADS, gate_store / "quads").passed
    assert cpu_gate("sgemm", new, gate_store / "quads-fused").passed


@pytest.mark.parametrize("change", [
    # a barrier that depends on the output: the passes would no longer meet it together
    ("dot = fmaf(x, y, dot);", "dot = fmaf(x, y, dot);\n                if (c0 + b < N) __syncthreads();"),
    # the output store is read back inside the nest: passes would see each other's stores
    ("const float x = r0 + a < M ? A[(r0 + a) * K + kk] : 0.f;",
     "const float x = r0 + a < M ? A[(r0 + a) * K + kk] + C[0] : 0.f;"),
    # state from before the nest updated in place by work that now runs once instead of four times
    ("kk++;", "kk++;\n                seen += 1;"),
    # an early exit after an output was stored (the first pass stored one output, now all would be)
    ("= dot;\n", "= dot;\n            if (kk > 4096) return;\n"),
    # an atomic among the work
    ("dot = fmaf(x, y, dot);", "dot = fmaf(x, y, dot);\n                atomicAdd(C, 0.f);"),
    # a pass count that is not a compile-time constant
    ("a < RM;", "a < K / 64;"),
    # a per-output local read after its output's work
    ("            if (r0 + a < M && c0 + b < N)", "            seen = (int)x;\n            if (r0 + a < M && c0 + b < N)"),
    # the pass variable written inside
    ("kk++;", "kk++;\n                b += 0;"),
    # shared memory written with one output's value: every pass would overwrite it, now in another order
    ("dot = fmaf(x, y, dot);", "dot = fmaf(x, y, dot);\n                sh[0] = x;"),
    # a store through a local pointer in the shared work (it ran once per output, now once)
    ("kk++;", "kk++;\n                { float* p = C + kk; p[0] += 1.f; }"),
    # and in one output's work: a second store that is not tracked as the output's
    ("dot = fmaf(x, y, dot);", "dot = fmaf(x, y, dot);\n                { float* q = C + a; q[0] = x; }"),
])
def test_fuse_refuses(change):
    src = QUADS.replace("    const int r0", "    int seen = 0;\n    __shared__ float sh[1];\n    const int r0")
    assert change[0] in src and run_rewrite("fuse_output_passes", src)
    assert run_rewrite("fuse_output_passes", src.replace(*change)) == []


def test_a_barrier_of_the_shared_work_stays_one_barrier(gate_store):
    """A barrier that every pass met at the same point of the reduction is met once per step for all
    outputs: still uniform, and no per-output work writes shared memory."""
    src = QUADS.replace("kk++;", "kk++;\n                __syncthreads();")
    mats = run_rewrite("fuse_output_passes", src)
    assert len(mats) == 1 and mats[0].source.count("__syncthreads();") == 1
    assert cpu_gate("sgemm", mats[0].source, gate_store / "barrier").passed


def test_fuse_refuses_loops_with_nothing_to_fuse():
    # outputs written straight to memory: no per-output accumulator, no register tile to make
    direct = QUADS.replace("dot = fmaf(x, y, dot);", "C[(r0 + a) * N + c0 + b] += x * y;")
    assert run_rewrite("fuse_output_passes", direct) == []
    # the naive one-output-per-thread kernel has no pass nest
    naive = (Path(__file__).resolve().parents[2] / "corpora" / "kernels" / "sgemm" / "naive.cu").read_text()
    assert run_rewrite("fuse_output_passes", naive) == []


# --------------------------------------------------------------------------- register_tile_outputs
# one output per thread, spelled by hand: index locals written `threadIdx + blockIdx * blockDim`,
# the bounds test in the other order, `sum` and `kk`, a dim3 grid and block written in the launch
PER_THREAD = r"""
#include <cuda_runtime.h>
__global__ void mm_per_thread(const float* A, const float* B, float* C, int M, int N, int K) {
    const int c = threadIdx.x + blockIdx.x * blockDim.x;
    const int r = threadIdx.y + blockIdx.y * blockDim.y;
    if (c >= N || r >= M) return;
    float sum = 0.f;
    for (int kk = 0; kk < K; kk++) {
        sum += A[r * K + kk] * B[kk * N + c];
    }
    C[r * N + c] = sum;
}
void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    mm_per_thread<<<dim3((N + 7) / 8, (M + 7) / 8), dim3(8, 8)>>>(A, B, C, M, N, K);
}
"""


def test_one_output_per_thread_becomes_a_register_tile(gate_store):
    assert inverses("register_tile_to_dot") == ["fuse_output_passes", "register_tile_outputs"]
    mats = run_rewrite("register_tile_outputs", PER_THREAD)
    assert [m.description.split(":")[1].split(",")[0].strip() for m in mats] == \
        ["4 x 4 outputs per thread in a register tile", "2 x 2 outputs per thread in a register tile"]
    new = mats[0].source
    assert "const int ks_row0 = blockIdx.y * 32 + threadIdx.y;" in new
    assert "ks_a[ks_i] = !(r >= M) ? A[r * K + kk] : float();" in new
    assert "ks_acc[ks_i][ks_j] += ks_a[ks_i] * ks_b[ks_j];" in new
    assert "mm_per_thread<<<dim3((((N + 7) / 8) + 3) / 4, (((M + 7) / 8) + 3) / 4), dim3(8, 8)>>>" in new
    assert "register_tile" in detect_carriers(new)
    assert cpu_gate("sgemm", PER_THREAD, gate_store / "per-thread").passed
    for i, m in enumerate(mats):
        assert cpu_gate("sgemm", m.source, gate_store / f"per-thread-{i}").passed
    # round trip: the operator computes the tile one output per pass; fusing the passes gives it back
    back = _back(PER_OUTPUT, new)
    assert cpu_gate("sgemm", back, gate_store / "per-thread-back").passed
    assert [m.source for m in run_rewrite("fuse_output_passes", back)] == [new]


@pytest.mark.parametrize("change", [
    # the grid is not a dim3 the rewrite can divide
    ("<<<dim3((N + 7) / 8, (M + 7) / 8), dim3(8, 8)>>>", "<<<grid_of(M, N), dim3(8, 8)>>>"),
    # the loop writes more than the accumulator
    ("sum += A[r * K + kk] * B[kk * N + c];", "sum += A[r * K + kk] * B[kk * N + c]; C[0] = 0.f;"),
    # a bounds term that mixes the row and the column
    ("if (c >= N || r >= M) return;", "if (r * N + c >= M * N) return;"),
    # the epilogue updates state from before it (it would run once per output)
    ("    C[r * N + c] = sum;\n", "    C[r * N + c] = sum;\n    M += 0;\n"),
    # the operand read uses the row outside its subscript
    ("sum += A[r * K + kk] * B[kk * N + c];", "sum += A[r * K + kk] * B[kk * N + c] * r;"),
])
def test_register_tile_outputs_refuses(change):
    src = PER_THREAD.replace("void sgemm(", "dim3 grid_of(int M, int N) { return dim3((N + 7) / 8, (M + 7) / 8); }\n"
                             "void sgemm(")
    assert change[0] in src and run_rewrite("register_tile_outputs", src)
    assert run_rewrite("register_tile_outputs", src.replace(*change)) == []


def test_register_tile_outputs_leaves_staged_kernels_to_the_staging_rewrite():
    assert run_rewrite("register_tile_outputs", read_kernel("tiled_matmul")) == []  # shared tiles already


# --------------------------------------------------------------------------- transpose_operand_tile
UNTRANSPOSE = get_operator("untranspose_tile")

# STRIDED with its A tile in the natural (m-major) layout: the fill writes `As[mm][kk]`, the
# fragment loop reads a column `As[ty + 16 * i][k]` (16 rows apart) - written here, not by an operator
NATURAL = STRIDED.replace("__shared__ float As[KS][TS];", "__shared__ float As[TS][KS];") \
    .replace("As[kk][mm] = ", "As[mm][kk] = ").replace("af[i] = As[k][ty + 16 * i];", "af[i] = As[ty + 16 * i][k];")


def test_transpose_registered_as_the_inverse_of_untranspose():
    assert inverses("untranspose_tile") == ["transpose_operand_tile"]
    assert rewrites_for("llm", "transposed_tile")[0] == "transpose_operand_tile"


def test_natural_fragment_columns_become_k_major(gate_store):
    assert NATURAL != STRIDED and "transposed_tile" not in detect_carriers(NATURAL)
    mats = run_rewrite("transpose_operand_tile", NATURAL)
    assert [m.description for m in mats] == ["gemm_strided: As stored transposed, its fragment reads contiguous"]
    assert mats[0].source == STRIDED  # k-major: the fragment's 4 values per k are one row
    assert cpu_gate("sgemm", NATURAL, gate_store / "natural").passed


def test_round_trip_from_the_corpus_sgemm(gate_store):
    src = read_kernel("sgemm")
    assert run_rewrite("transpose_operand_tile", src) == []  # already k-major
    back = UNTRANSPOSE.apply(src, UNTRANSPOSE.find_sites(src)[0])
    mats = run_rewrite("transpose_operand_tile", back)
    assert len(mats) == 1
    new = mats[0].source
    # the layout as written; the vector fragment reads come back as four contiguous scalars
    assert "__shared__ __align__(16) float As[2][BK][BM + APAD];" in new
    assert "As[s][a_k + 0][a_r] = ra.x;" in new
    assert "make_float4(As[cur][k][ty * 4], As[cur][k][ty * 4 + 1], As[cur][k][ty * 4 + 2], As[cur][k][ty * 4 + 3])" in new
    assert "transposed_tile" in detect_carriers(new)
    assert cpu_gate("sgemm", new, gate_store / "sgemm").passed


@pytest.mark.parametrize("change", [
    # the tile's address escapes
    ("        for (int k = 0; k < KS; ++k) {", "        sink(&As[0][0]);\n        for (int k = 0; k < KS; ++k) {"),
    # the element passed to a function that may take it by reference
    ("af[i] = As[ty + 16 * i][k];", "af[i] = pick(As[ty + 16 * i][k]);"),
    # the fragment is one row (the same row for every i): nothing becomes contiguous
    ("af[i] = As[ty + 16 * i][k];", "af[i] = As[ty][k] * i;"),
])
def test_transpose_refuses(change):
    src = NATURAL.replace("__global__ void gemm_strided", "__device__ void sink(float*) {}\n"
                          "__device__ float pick(const float& v) { return v; }\n__global__ void gemm_strided")
    assert change[0] in src and run_rewrite("transpose_operand_tile", src)
    assert run_rewrite("transpose_operand_tile", src.replace(*change)) == []


def test_transpose_refuses_a_one_row_fragment_and_wide_row_reads():
    tiled = read_kernel("tiled_matmul")  # `As[ty][k]`: one row per thread, a broadcast either way
    assert run_rewrite("transpose_operand_tile", tiled) == []
    # attention's Qs / Ks fragments are float4 reads along k already: transposing would split them
    assert run_rewrite("transpose_operand_tile", read_kernel("attention_fwd")) == []


# --------------------------------------------------------------------------- warp_totals_block_scan
SCAN = get_operator("block_scan_to_thread_totals")

# a hand-written block sum: every thread publishes its grid-stride partial in its own slot
# (`part[tid]`, tid an unsigned copy of threadIdx.x), thread 0 folds all 128 slots (`u++`) and
# adds the block's total atomically; the block size is a macro
BLOCK_SUMS = r"""
#include <cuda_runtime.h>
#define BLOCK 128
__global__ void block_sums(const float* x, float* y, int n) {
    __shared__ float part[BLOCK];
    const unsigned tid = threadIdx.x;
    float mine = 0.0f;
    for (int i = blockIdx.x * BLOCK + tid; i < n; i += gridDim.x * BLOCK) mine += x[i];
    part[tid] = mine;
    __syncthreads();
    if (tid == 0) {
        float block_total = 0.0f;
        for (int u = 0; u < BLOCK; u++) {
            const float v = part[u];
            block_total += v;
        }
        atomicAdd(y, block_total);
    }
}
void reduce_sum(const float* x, float* y, int N) {
    cudaMemset(y, 0, sizeof(float));
    block_sums<<<64, BLOCK>>>(x, y, N);
}
"""


def test_block_scan_registered_as_its_inverse():
    assert inverses("block_scan_to_thread_totals") == ["warp_totals_block_scan"]
    assert rewrites_for("llm", "block_scan")[:2] == ["warp_totals_block_scan", "warp_scan"]


def test_round_trip_through_thread_totals(gate_store):
    src = read_kernel("exclusive_scan")
    assert run_rewrite("warp_totals_block_scan", src) == []  # one total per warp already
    back = _back(SCAN, src)
    mats = run_rewrite("warp_totals_block_scan", back)
    assert len(mats) == 1
    new = mats[0].source
    # the warp scan's lane 31 publishes again; the block step folds THREADS / 32 values
    assert "if (lane == 31) ks_warp_total[warp] = incl;" in new
    assert "__shared__ int ks_warp_total[THREADS / 32];" in new
    assert "for (int ks_u = 0; ks_u < THREADS / 32; ++ks_u) {\n        const int v = ks_warp_total[ks_u];\n" \
           "        warp_prefix += ks_u < warp ? v : 0;" in new
    assert new == src.replace("warp_total", "ks_warp_total").replace(
        "for (int w = 0; w < THREADS / 32; ++w)", "for (int ks_u = 0; ks_u < THREADS / 32; ++ks_u)").replace(
        "ks_warp_total[w];", "ks_warp_total[ks_u];").replace("warp_prefix += w < warp", "warp_prefix += ks_u < warp")
    assert cpu_gate("exclusive_scan", new, gate_store / "scan").passed
    assert SCAN.find_sites(new)  # and the operator takes it back


def test_hand_written_thread_totals_become_warp_totals(gate_store):
    mats = run_rewrite("warp_totals_block_scan", BLOCK_SUMS)
    assert len(mats) == 1
    new = mats[0].source
    assert "__shared__ float ks_warp_total[BLOCK / 32];" in new
    assert "ks_ws += __shfl_xor_sync(0xffffffffu, ks_ws, ks_o);" in new
    assert "if ((tid & 31) == 0) ks_warp_total[(tid >> 5)] = ks_ws;" in new
    assert "for (int u = 0; u < BLOCK / 32; u++) {\n            const float v = ks_warp_total[u];" in new
    assert cpu_gate("reduce_sum", BLOCK_SUMS, gate_store / "sums").passed
    assert cpu_gate("reduce_sum", new, gate_store / "sums-warps").passed


def test_a_condition_on_the_warp_of_the_slot_folds_per_warp():
    per_warp = BLOCK_SUMS.replace("block_total += v;", "block_total += (u / 32) < 2 ? v : 0;")
    mats = run_rewrite("warp_totals_block_scan", per_warp)
    assert len(mats) == 1 and "block_total += u < 2 ? v : 0;" in mats[0].source


@pytest.mark.parametrize("change", [
    # a per-thread prefix: the slot's own index, not its warp, decides
    ("block_total += v;", "block_total += u < tid ? v : 0;"),
    # a value that is not linear in the slot read
    ("block_total += v;", "block_total += v * v;"),
    # a block that is not the array's size: slots beyond the block would be folded as warps
    ("block_sums<<<64, BLOCK>>>", "block_sums<<<64, 64>>>"),
    # a thread that leaves before the shuffles
    ("    part[tid] = mine;", "    if (blockIdx.x > 64) return;\n    part[tid] = mine;"),
    # the publication is not every thread's (a shuffle there would miss lanes)
    ("    part[tid] = mine;", "    if (mine != 0.0f) part[tid] = mine;"),
    # a slot that is not the thread's own
    ("    part[tid] = mine;", "    part[(tid + 1) % BLOCK] = mine;"),
    # the array written twice
    ("    __syncthreads();\n    if (tid == 0)", "    part[0] = mine;\n    __syncthreads();\n    if (tid == 0)"),
])
def test_block_scan_refuses(change):
    assert change[0] in BLOCK_SUMS and run_rewrite("warp_totals_block_scan", BLOCK_SUMS)
    assert run_rewrite("warp_totals_block_scan", BLOCK_SUMS.replace(*change)) == []


# --------------------------------------------------------------------------- decoupled_lookback
CHAIN = get_operator("lookback_to_chained")


def _chained() -> str:
    src = read_kernel("exclusive_scan")
    return CHAIN.apply(src, CHAIN.find_sites(src)[0])


def test_lookback_registered_as_its_inverse():
    assert inverses("lookback_to_chained") == ["decoupled_lookback"]
    assert rewrites_for("llm", "decoupled_lookback") == ["decoupled_lookback"]


def test_round_trip_through_the_chained_scan(gate_store):
    src = read_kernel("exclusive_scan")
    assert run_rewrite("decoupled_lookback", src) == []  # a look-back already
    chained = _chained()
    mats = run_rewrite("decoupled_lookback", chained)
    assert len(mats) == 1
    new = mats[0].source
    assert "int ks_pred = (tile - 1) - lane;" in new
    assert "if (__any_sync(0xffffffffu, ks_flag != FLAG_AGGREGATE && ks_flag != FLAG_PREFIX)) continue;" in new
    assert "exclusive += ks_warp_sum_int(lane <= ks_stop ? ks_value : 0);\n" \
           "                        break;" in new
    assert "__device__ __forceinline__ int ks_warp_sum_int(int v) {" in new
    assert "decoupled_lookback" in detect_carriers(new)
    assert cpu_gate("exclusive_scan", new, gate_store / "lookback").passed
    assert CHAIN.find_sites(new)  # the operator chains it again


def test_a_hand_written_chained_wait_gets_the_look_back(gate_store):
    # the same protocol, the wait spelled by hand: another word name, `(tile - 1)`, `(int)st`
    hand = _chained().replace(
        "unsigned long long word;", "unsigned long long st;").replace(
        "word = (tile - 1 - 0) >= 0 ? *reinterpret_cast<volatile unsigned long long*>(status + (tile - 1 - 0))",
        "st = tile - 1 >= 0 ? *reinterpret_cast<volatile unsigned long long*>(status + (tile - 1))").replace(
        "} while ((word >> 32) != FLAG_PREFIX);", "} while ((st >> 32) != FLAG_PREFIX);").replace(
        "exclusive += (int)(unsigned)word;", "exclusive += (int)st;")
    assert "unsigned long long st;" in hand and "exclusive += (int)st;" in hand
    mats = run_rewrite("decoupled_lookback", hand)
    assert len(mats) == 1
    assert "const unsigned long long st = ks_pred >= 0 ? *reinterpret_cast<volatile unsigned long long*>(status + ks_pred)" \
        in mats[0].source
    assert cpu_gate("exclusive_scan", mats[0].source, gate_store / "lookback-hand").passed


@pytest.mark.parametrize("change", [
    # a status word written outside the packing helper (flag and value no longer one word)
    ("            if (lane == 0) publish(status + tile, FLAG_AGGREGATE, aggregate);",
     "            if (lane == 0) publish(status + tile, FLAG_AGGREGATE, aggregate);\n            status[tile] = 0ull;"),
    # an aggregate that is not what the tile's prefix adds
    ("publish(status + tile, FLAG_AGGREGATE, aggregate);", "publish(status + tile, FLAG_AGGREGATE, aggregate + 1);"),
    # no aggregate published: nothing to look back over
    ("            if (lane == 0) publish(status + tile, FLAG_AGGREGATE, aggregate);\n", ""),
    # the helper stores flag and value as two writes
    ("atomicExch(slot, (flag << 32) | (unsigned)value);", "slot[0] = flag << 32; atomicOr(slot, (unsigned)value);"),
    # part of the warp waits
    ("            {  // chained: wait", "            if (lane < 16) {  // chained: wait"),
    # the wait runs in a loop
    ("            {  // chained: wait", "            for (int again = 0; again < 1; ++again) {  // chained: wait"),
])
def test_lookback_refuses(change):
    src = _chained()
    assert change[0] in src and run_rewrite("decoupled_lookback", src)
    assert run_rewrite("decoupled_lookback", src.replace(*change)) == []
