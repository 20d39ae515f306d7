"""The independent judge (eval/judge.py): real nvcc static stage on a shipped problem, the
coalescing check on small kernels, and the carrier accounting of the mine JSON."""
from pathlib import Path

import pytest

from eval.judge import (Facts, JudgeError, StepPair, access_bits, check_observation, coalesced, dynamic_smem, facts_from_static,
                        judge_step, opcode_matches, static_facts)
from mining.gate.static import nvcc_path
from mining.mine import carrier_accounting

ROOT = Path(__file__).resolve().parents[2]
VADD = ROOT / "corpora" / "kernels" / "vector_add"

NAIVE_MM = """
__global__ void mm(const float* A, const float* B, float* C, int M, int N, int K) {
  const unsigned x = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < M && y < N) { float t = 0.0f;
    for (int i = 0; i < K; ++i) t += A[x * K + i] * B[i * N + y];
    C[x * N + y] = t; }
}"""
COALESCED_MM = """
#define BS 32
#define OFFSET(r, c, ld) ((r) * (ld) + (c))
__global__ void mm(const float* A, const float* B, float* C, int M, int N, int K) {
  const int row = blockIdx.x * BS + (threadIdx.x / BS);
  const int col = blockIdx.y * BS + (threadIdx.x % BS);
  if (row < M && col < N) { float t = 0.0f;
    for (int i = 0; i < K; ++i) t += A[OFFSET(row, i, K)] * B[OFFSET(i, col, N)];
    C[OFFSET(row, col, N)] = t; }
}
void launch(const float* A, const float* B, float* C, int M, int N, int K) {
  mm<<<dim3(M / BS, N / BS), BS * BS, 2 * BS * BS * sizeof(float)>>>(A, B, C, M, N, K);
}"""
VEC = """
#define FLOAT4(v) (reinterpret_cast<float4 *>(&(v))[0])
__global__ void add(float* a, float* c, int n) {
  int idx = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
  if (idx < n) { FLOAT4(c[idx]) = FLOAT4(a[idx]); }
}"""


def test_coalescing_check_and_launch_smem():
    assert coalesced(NAIVE_MM, "B")[0] is False  # stride 0 across the warp: x, not y, follows threadIdx.x
    ok, why = coalesced(NAIVE_MM, "C")
    assert ok is False and "lane strides" in why
    assert coalesced(COALESCED_MM, "B")[0] is True and coalesced(COALESCED_MM, "C")[0] is True
    assert coalesced(VEC, "a")[0] is True  # 4 floats per lane inside a float4 access
    assert coalesced(VEC, "q")[0] is None
    assert dynamic_smem(COALESCED_MM) == 2 * 32 * 32 * 4


def test_opcode_matching_and_vocabulary():
    assert opcode_matches("LDG.E.128.CONSTANT", "LDG.E.128") and opcode_matches("SHFL.BFLY", "SHFL")
    assert opcode_matches("LDG.E.128.CONSTANT", "LDG.E.CONSTANT")
    assert not opcode_matches("LDGSTS.E", "LDG") and not opcode_matches("LDG.E", "LDG.E.128")
    for ok in ("sass:LDG.E.128", "smem", "registers", "ffma_per_load", "coalesced:A", "none:hint only"):
        check_observation(ok)
    with pytest.raises(JudgeError, match="not in the judge's vocabulary"):
        check_observation("sass:ldg")


def test_verdicts_from_facts():
    naive = Facts(sass={"LDG.E": 2, "FFMA": 1}, registers=10, static_ok=True, sass_available=True)
    expert = Facts(sass={"LDG.E.128": 2, "FFMA": 16, "LDS": 4}, registers=40, smem_static=4096, static_ok=True,
                   sass_available=True)
    end_undone = Facts(sass={"LDG.E": 8, "FFMA": 4}, registers=40, static_ok=True, sass_available=True)
    v = judge_step("vector_load", "f32x4", "", ["sass:LDG.E.128"], naive, expert, end_undone)
    assert v.verdict == "undone"
    v = judge_step("register_tile", "tile", "", ["registers", "ffma_per_load"], naive, expert, end_undone)
    assert v.verdict == "kept"  # registers still above the naive's
    v = judge_step("shared_tile", "tile", "", ["smem", "sass:LDS"], naive, expert, end_undone)
    assert v.verdict == "undone"
    v = judge_step("hint", "x", "", ["none:no observation", "sass:SHFL"], naive, expert, end_undone)
    assert v.verdict == "unobservable" and "not visible in the expert" in v.reason


def test_new_vocabulary_checks():
    for ok in ("loops", "bits:LDG:32", "fewer:sass:I2F.U32.RP", "fewer:smem", "fewer:loops", "fewer:bits:STG:16",
               "half2", "launch_bounds", "fewer:half2", "loops:LDG", "fewer:loops:STS"):
        check_observation(ok)
    for bad in ("bits:LDG:33", "bits:ldg:32", "fewer:none:x", "fewer:coalesced:A", "fewer:ffma_per_load", "loop",
                "half", "launch_bounds:256", "loops:ldg", "loops:"):
        with pytest.raises(JudgeError, match="not in the judge's vocabulary"):
            check_observation(bad)
    assert [access_bits(op) for op in ("LDG.E", "LDG.E.U16", "LDG.E.S8", "LDG.E.64.CONSTANT", "STS.128")] == \
        [32, 16, 8, 64, 128]


def _facts(**kw) -> Facts:
    return Facts(static_ok=True, sass_available=True, **kw)


def test_half2_loads_are_32_bit_not_16():
    naive = _facts(sass={"LDG.E.U16": 2})  # one half per thread
    expert = _facts(sass={"LDG.E": 2})  # half2 pairs: 32-bit loads
    assert judge_step("vector_load", "f16x2", "", ["bits:LDG:32"], naive, expert, naive).verdict == "undone"
    assert judge_step("vector_load", "f16x2", "", ["bits:LDG:32"], naive, expert, expert).verdict == "kept"
    # by prefix, sass:LDG.E cannot tell them apart (both count 2)
    assert judge_step("vector_load", "f16x2", "", ["sass:LDG.E"], naive, expert, naive).verdict == "unobservable"


def test_fewer_is_a_step_that_removes_something():
    naive = _facts(sass={"I2F.U32.RP": 1, "MUFU.RCP": 1}, loops=1)
    expert = _facts(sass={"FADD": 1}, loops=1)
    back = _facts(sass={"I2F.U32.RP": 1}, loops=1)
    assert judge_step("divergence_free_indexing", "v1", "", ["fewer:sass:I2F.U32.RP"], naive, expert, back).verdict \
        == "undone"
    v = judge_step("divergence_free_indexing", "v1", "", ["fewer:sass:I2F.U32.RP"], naive, expert, expert)
    assert v.verdict == "kept"
    # an expert with as many as the naive does not show the step
    v = judge_step("x", "v1", "", ["fewer:loops"], naive, expert, back)
    assert v.verdict == "unobservable" and "expert >= naive" in v.reason


def test_loops_need_a_static_result_that_counted_them():
    naive, expert = _facts(loops=0), _facts(loops=1)
    assert judge_step("grid_stride", "v1", "", ["loops"], naive, expert, _facts(loops=0)).verdict == "undone"
    assert judge_step("grid_stride", "v1", "", ["loops"], naive, expert, _facts(loops=1)).verdict == "kept"
    old = _facts()  # recorded before the static stage counted loops: no verdict, not a wrong one
    v = judge_step("grid_stride", "v1", "", ["loops"], naive, expert, old)
    assert v.verdict == "unobservable" and "no loops figure" in v.reason


def test_loops_that_read_global_memory():
    """A grid-stride loop reads global memory; the shared-memory tree loop a walk restores does not."""
    before = _facts(loops=0, loop_ops={})
    after = _facts(loops=2, loop_ops={"LDG": 2, "BRA": 2})
    end = _facts(loops=1, loop_ops={"LDS": 1, "STS": 1, "BAR": 1, "BRA": 1})  # only the tree loop is left
    assert judge_step("grid_stride", "v6", "", ["loops"], before, after, end).verdict == "kept"
    assert judge_step("grid_stride", "v6", "", ["loops:LDG"], before, after, end).verdict == "undone"
    assert judge_step("grid_stride", "v6", "", ["loops:LDG"], before, after, after).verdict == "kept"
    v = judge_step("grid_stride", "v6", "", ["loops:LDG"], before, after, _facts(loops=1))  # before static-5
    assert v.verdict == "unobservable" and "no loops:LDG figure" in v.reason


def test_a_step_is_judged_against_the_version_before_it():
    """A padding column (128 bytes over a shared tile) is the step of version 2; the end point that
    keeps the tile but drops the padding undid it, though its smem is far above the naive's 0."""
    naive, tile = _facts(smem_static=0), _facts(smem_static=4096)
    padded = _facts(smem_static=4224)
    pair = StepPair("coalesced", tile, "no_bank_conflicts", padded)
    end = _facts(smem_static=4096)
    v = judge_step("shared_padding", "no_bank_conflicts", "", ["smem"], naive, padded, end, pair)
    assert v.verdict == "undone" and "vs coalesced 4096" in v.reason
    assert v.observations[0].compared == "coalesced -> no_bank_conflicts"
    # naive vs expert alone would call it kept (4096 > 0)
    assert judge_step("shared_padding", "x", "", ["smem"], naive, padded, end).verdict == "kept"
    assert judge_step("shared_padding", "x", "", ["smem"], naive, padded, padded, pair).verdict == "kept"
    # a step its own version does not show falls back to naive vs expert, and says so
    flat = StepPair("coalesced", padded, "no_bank_conflicts", padded)
    v = judge_step("shared_padding", "x", "", ["smem"], naive, padded, naive, flat)
    assert v.verdict == "undone" and v.observations[0].compared == "naive -> expert"
    assert "does not show it" in v.observations[0].note


@pytest.mark.skipif(nvcc_path() is None, reason="needs nvcc for the static stage")
def test_static_stage_sees_vector_loads(tmp_path):
    store = tmp_path / "store"
    naive = static_facts(VADD, (VADD / "naive.cu").read_text(), store)
    expert = static_facts(VADD, (VADD / "kernel.cu").read_text(), store)
    assert naive.static_ok and expert.static_ok and expert.sass_available, (naive.reason, expert.reason)
    assert expert.sass_count("LDG.E.128") > naive.sass_count("LDG.E.128") == 0
    v = judge_step("vector_load", "vec4", "", ["sass:LDG.E.128", "sass:STG.E.128"], naive, expert, naive)
    assert v.verdict == "undone"  # the end point is the naive kernel: every observation says gone
    v = judge_step("vector_load", "vec4", "", ["sass:LDG.E.128"], naive, expert, expert)
    assert v.verdict == "kept"
    assert naive.loops == 0 and expert.loops is not None  # the static stage counts loops (static-2)
    assert naive.loop_ops == {} and expert.loop_ops is not None  # and what their bodies hold (static-5)


def test_carrier_accounting_never_counts_undetected_as_removed():
    expert = (VADD / "kernel.cu").read_text()
    naive = (VADD / "naive.cu").read_text()
    removed, remaining, undetected = carrier_accounting(["vector_load", "double_buffer"], expert, naive)
    assert removed == ["vector_load"] and remaining == [] and undetected == ["double_buffer"]
    # 0 steps: the end point is the expert; nothing removed even for a carrier the detectors miss
    removed, remaining, undetected = carrier_accounting(["vector_load", "double_buffer"], expert, expert)
    assert removed == [] and remaining == ["vector_load"] and undetected == ["double_buffer"]


SCALAR_HALF = """
#include <cuda_fp16.h>
__global__ void mul(const __half* x, const __half* y, __half* z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) z[i] = __hmul(x[i], y[i]);
}
void vector_add(const float* a, const float* b, float* y, int N) {}  // the problem's entry (never run)"""
PACKED_HALF = """
#include <cuda_fp16.h>
__global__ void __launch_bounds__(256) mul(const __half2* x, const __half2* y, __half2* z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) z[i] = __hmul2(x[i], y[i]);
}
void vector_add(const float* a, const float* b, float* y, int N) {}"""


@pytest.mark.skipif(nvcc_path() is None, reason="needs nvcc for the static stage")
def test_static_stage_tells_packed_half_math_and_thread_bounds(tmp_path):
    """Scalar __hmul compiles to HMUL2 on one lane: sass:HMUL2 counts it, half2 does not."""
    store = tmp_path / "store"
    scalar = static_facts(VADD, SCALAR_HALF, store)
    packed = static_facts(VADD, PACKED_HALF, store)
    assert scalar.static_ok and packed.static_ok and packed.sass_available, (scalar.reason, packed.reason)
    assert scalar.sass_count("HMUL2") >= 1  # the opcode alone cannot tell them apart
    assert scalar.half2 == 0 and packed.half2 >= 1
    assert scalar.launch_bounds == 0 and packed.launch_bounds == 1
    v = judge_step("packed_half2_math", "pack", "", ["half2"], scalar, packed, scalar)
    assert v.verdict == "undone"
    assert judge_step("launch_bounds", "pack", "", ["launch_bounds"], scalar, packed, packed).verdict == "kept"


def test_a_count_scoped_to_one_kernel():
    """histogram256: the grid-stride loop lives in the counting kernel; the merge kernel's loop over
    the partial histograms (another step's) also reads global memory."""
    def facts(**kernels) -> Facts:
        static = {"archs": {"sm_90": {"ok": True, "sass_available": True, "kernels": {
            f"void {name}(unsigned int*)": {"sass": {"LDG.E": 1}, "loops": n, "loop_ops": {"LDG": n} if n else {},
                                             "half2": 0, "max_threads": 0} for name, n in kernels.items()}}}}
        return facts_from_static(static, "", "sm_90")
    naive = facts(histogram_naive=0)
    privatized = facts(histogram256Kernel=1, mergeHistogram256Kernel=1)
    end = facts(histogram256Kernel=0, mergeHistogram256Kernel=1)
    assert judge_step("grid_stride", "privatized", "", ["loops:LDG"], naive, privatized, end).verdict == "kept"
    v = judge_step("grid_stride", "privatized", "", ["loops:LDG@histogram256Kernel"], naive, privatized, end)
    assert v.verdict == "undone", v.reason  # the naive has no such kernel: 0
    assert judge_step("grid_stride", "privatized", "", ["loops:LDG@histogram256Kernel"], naive, privatized,
                      privatized).verdict == "kept"
    assert judge_step("grid_stride", "privatized", "", ["loops@Kernel"], naive, privatized, end).verdict == "unobservable"
    check_observation("fewer:sass:I2F.U32.RP@reduce6")
    with pytest.raises(JudgeError):
        check_observation("coalesced:A@k")
