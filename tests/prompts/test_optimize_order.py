"""Issues 19/20: what one `skills optimize` step gates first (the candidates that attack what bounds
the kernel, by its regime), the first step's deadline estimate, and the per-problem timeline."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mining.operators.base import Context
from mining.operators.forward import materialize
from prompts.optimize import Candidate, OptimizeConfig, library_source, optimize, retrieve
from prompts.optimize_plan import bottleneck_first, candidate_key, fit_to_deadline, kernel_regimes
from retrieval.value import addresses

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "corpora" / "kernels"

# the house naive exclusive_scan's shape in another spelling: pieces instead of chunks, begin / end
# bounds, `total = total + data[j]`, 128-thread blocks
SCAN_VARIANT = """
#include <cuda_runtime.h>
#define PIECES 2048

__global__ void piece_totals(const int* __restrict__ data, int* __restrict__ totals, int count, int span) {
    const int p = threadIdx.x + blockDim.x * blockIdx.x;
    if (p < PIECES) {
        const long long begin = (long long)p * span;
        const long long end = begin + span < count ? begin + span : count;
        int total = 0;
        for (long long j = begin; j < end; j++) total = total + data[j];
        totals[p] = total;
    }
}

__global__ void scan_totals(int* totals) {
    int running = 0;
    for (int p = 0; p < PIECES; p++) {
        const int here = totals[p];
        totals[p] = running;
        running += here;
    }
}

__global__ void piece_scan(const int* __restrict__ data, int* __restrict__ out, const int* __restrict__ totals,
                           int count, int span) {
    const int p = threadIdx.x + blockDim.x * blockIdx.x;
    if (p < PIECES) {
        const long long begin = (long long)p * span;
        const long long end = begin + span < count ? begin + span : count;
        int running = totals[p];
        for (long long j = begin; j < end; j++) {
            out[j] = running;
            running += data[j];
        }
    }
}

void exclusive_scan(const int* x, int* y, int N) {
    static int* totals = nullptr;
    if (!totals) cudaMalloc(&totals, PIECES * sizeof(int));
    const int span = (N + PIECES - 1) / PIECES;
    piece_totals<<<PIECES / 128, 128>>>(x, totals, N, span);
    scan_totals<<<1, 1>>>(totals);
    piece_scan<<<PIECES / 128, 128>>>(x, y, totals, N, span);
}
"""


def _skill(carrier: str, operator: str) -> dict:
    return {"skill_id": f"sk-{carrier}", "key": f"{carrier}:{operator}", "name": f"{carrier} skill",
            "intent": f"introduce {carrier}", "carrier": carrier, "operator": operator, "kind": "kernel",
            "evidence": [{"problem": "reduce_sum", "op_type": "", "lineage_id": "ln-x", "step": 1, "kernel_hash": "h",
                          "executor": "cpu", "before": "b", "after": "a", "diff": "--- s\n+++ o\n-old\n+new\n"}]}


def library_candidates(src: str) -> list[Candidate]:
    """The rewrite library's materializations on ``src``, in candidate order (real rewrites)."""
    lib = retrieve(library_source(), src, [], 8)
    cands = [Candidate(m.rewrite, r.skill.carrier, m.source, rank=r.rank, prior=1.0)
             for r in lib for m in materialize(r.skill, src, Context())]
    return sorted(cands, key=candidate_key)


def test_addresses_reads_the_regime():
    # a serial (latency-bound) loop: parallelizing it is the step, widening its loads is not
    assert addresses("warp_scan", ["serial"]) and addresses("warp_shuffle_reduce", ["serial"])
    assert addresses("block_per_row", ["serial"]) and not addresses("vector_load", ["serial"])
    assert not addresses("grid_stride", ["serial"]) and not addresses("thread_coarsening", ["serial"])
    # bandwidth-bound: wider accesses and fewer bytes; not the grid-stride loop
    assert addresses("vector_load", ["memory"]) and addresses("online_softmax", ["memory"])
    assert not addresses("grid_stride", ["memory"])
    # at the roofline only fewer bytes help
    assert addresses("online_softmax", ["roofline", "memory"]) and not addresses("vector_load", ["roofline", "memory"])
    assert addresses("shared_tile", ["reuse"]) and not addresses("vector_load", ["reuse"])
    assert addresses("privatized_atomics", ["atomic_bins"]) and not addresses("grid_stride", ["atomic_bins"])
    assert not addresses("no_such_carrier", ["serial", "memory"])


@pytest.mark.parametrize("src", [(KERNELS / "exclusive_scan" / "naive.cu").read_text(), SCAN_VARIANT],
                         ids=["house", "variant"])
def test_a_serial_scan_gates_the_warp_steps_before_vectorizing(src):
    """Session 13 (H100): the step that gated the warp scan beside the float4 loop kept the float4
    loop (faster by noise), and the warp rewrites no longer matched the vectorized loops. The step
    now gates the candidates that parallelize the serial loops and holds the rest back."""
    assert kernel_regimes(src) == ["serial"]
    cands = library_candidates(src)
    assert "vectorize_loop" in {c.operator for c in cands}  # it applies: held back, not lost
    first, held = bottleneck_first(cands, kernel_regimes(src))
    assert first and {c.operator for c in first} <= {"warp_scan", "warp_per_row", "block_per_row"}
    assert "warp_scan" in {c.operator for c in first}
    assert {"vectorize_loop", "add_restrict"} & {c.operator for c in held} and len(first) + len(held) == len(cands)
    assert [c for c in cands if c in first] == first  # the plan's order kept among them


def test_other_regimes_keep_their_structural_step_first():
    """vector_add (bandwidth): the float4 rewrite first, the grid-stride loop held; histogram (binned
    atomics): privatized counters before the grid-stride loop that used to come first; sgemm (reuse): tiles."""
    expect = {"vector_add": {"vectorize_elementwise"}, "histogram": {"privatize_atomics"},
              "sgemm": {"stage_matmul_tiles", "register_tile_outputs"}}
    for name, ops in expect.items():
        src = (KERNELS / name / "naive.cu").read_text()
        first, held = bottleneck_first(library_candidates(src), kernel_regimes(src))
        assert {c.operator for c in first} == ops, name
        assert any(c.operator in ("grid_stride", "add_restrict") for c in held), name


def test_llm_candidates_are_never_held():
    """An LLM candidate's tokens are spent: it is gated in its step, whatever its carrier."""
    src = (KERNELS / "softmax" / "naive.cu").read_text()
    cands = library_candidates(src)
    llm = Candidate("llm_skill", "restrict", "// the model's kernel", "llm", rank=0, prior=1.5)
    first, held = bottleneck_first(cands + [llm], kernel_regimes(src))
    assert llm in first and held and all(c.proposer == "deterministic" for c in held)
    assert bottleneck_first([llm], ["serial"]) == ([llm], [])


def test_nothing_held_when_no_candidate_attacks_the_bottleneck():
    """A row-per-thread running sum whose spelling no warp rewrite matches: every candidate is gated
    as before (holding back would leave the step empty)."""
    src = ("__global__ void row_cumsum(const float* in, float* out, int rows, int cols) {\n"
           "    int r = threadIdx.x + blockIdx.x * blockDim.x;\n    if (r >= rows) return;\n"
           "    const float* src = in + (size_t)r * cols;\n    float* dst = out + (size_t)r * cols;\n"
           "    float run = 0.0f;\n    for (int k = 0; k < cols; k++) {\n        run = run + src[k];\n"
           "        dst[k] = run;\n    }\n}\n")
    assert kernel_regimes(src) == ["serial"]
    cands = library_candidates(src)
    assert cands and not {"warp_scan", "warp_per_row"} & {c.operator for c in cands}
    assert bottleneck_first(cands, ["serial"]) == (cands, [])
    assert kernel_regimes("this is not CUDA {{{") in ([], ["memory"])


def test_first_step_deadline_uses_the_problems_own_gate_cost():
    todo = list(range(6))
    # no history and no estimate: everything (as before)
    assert fit_to_deadline(todo, 0.0, 90.0, [], 2, now=60.0) == todo
    # the input took 20 s to gate and time: 50 s left fit two batches of 2, 30 s one, not 6 candidates
    assert fit_to_deadline(todo, 0.0, 90.0, [], 2, now=40.0, estimate=20.0) == [0, 1, 2, 3]
    assert fit_to_deadline(todo, 0.0, 90.0, [], 2, now=60.0, estimate=20.0) == [0, 1]
    assert fit_to_deadline(todo, 0.0, 90.0, [], 2, now=89.0, estimate=20.0) == [0, 1]
    # a measured step wins over the estimate
    assert fit_to_deadline(todo, 0.0, 90.0, [40.0], 2, now=60.0, estimate=1.0) == [0, 1]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("order-cache")


@pytest.mark.skipif(shutil.which("g++") is None, reason="the cpu executor needs g++")
def test_the_step_log_says_what_was_held_back(tmp_path, cache):
    """vector_add under the CPU gate with the library only: step 1 gates the float4 rewrite alone
    (bandwidth-bound) while the grid-stride and restrict skills wait, and the timeline accounts for the start."""
    store = tmp_path / "s.json"
    store.write_text(json.dumps([_skill("vector_load", "vector_load_to_scalar"), _skill("grid_stride", "grid_stride_to_single"),
                                 _skill("restrict", "drop_restrict")]))
    cfg = OptimizeConfig(executor="cpu", budget_steps=1, seeds=(0,), jobs=1, store=store, cache=cache)
    res = optimize(KERNELS / "vector_add", Path("naive.cu"), cfg)
    step = res.step_log[0]
    assert step["regimes"] == ["memory"] and step["gated"] == 1 and step["held_back"]["candidates"] >= 1
    assert res.lineage[1]["rewrite"] == "vectorize_elementwise"
    t = res.summary()["timeline"]
    assert set(t) == {"input_gate_s", "input_time_s", "propose_s", "gate_s"} and t["input_gate_s"] > 0
    assert res.input_profile == {} and res.final_profile == {}  # the cpu executor times nothing


@pytest.mark.skipif(shutil.which("g++") is None, reason="the cpu executor needs g++")
def test_a_start_that_ate_the_time_limit_still_gets_one_step(tmp_path, cache):
    """softmax_warp on the H100 (naive 22.8 ms) ended with 0 attempts: gating and timing the input
    took longer than the problem's 1.5 minutes. The limit now stops new steps, never the first."""
    store = tmp_path / "s.json"
    store.write_text(json.dumps([_skill("vector_load", "vector_load_to_scalar"), _skill("restrict", "drop_restrict")]))
    cfg = OptimizeConfig(executor="cpu", budget_steps=5, seeds=(0,), jobs=1, store=store, cache=cache,
                         time_limit_s=1e-6)
    res = optimize(KERNELS / "vector_add", Path("naive.cu"), cfg)
    assert res.termination == "budget_time" and res.steps_used == 1
    assert len([a for a in res.attempts if a.step == 1]) == 1 and len(res.lineage) == 2
