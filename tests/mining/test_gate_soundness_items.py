"""Issue 22 (gate and probe soundness), the parts below the suite in eval/soundness/: the CPU
runtime's same-warp global ordering and race messages, the guard regions of the shared harness,
the comparison of half-precision outputs, environment failures, and value-adversarial inputs."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mining.gate import cpu_rewrite, cpu_toolchain
from mining.gate.data import bf16_round, compare

CUDA = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"  # test kernels too long to read inline

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None or not Path(
    "/usr/include/boost/context/detail/fcontext.hpp").exists(), reason="needs g++ and libboost-context-dev")

RACE_KERNELS = (CUDA / "race_kernels.cu").read_text()


@pytest.fixture(scope="module")
def race_exe(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("items_race")
    (tmp / "kernel.cu").write_text(cpu_rewrite.rewrite(RACE_KERNELS))
    exe = tmp / "races"
    res = cpu_toolchain.compile_cpu_binary(tmp / "kernel.cu", exe, mode="check", timeout_s=600)
    assert res.ok, res.stderr[-3000:]
    return exe


def _run(exe: Path, which: str, order: str = "forward") -> subprocess.CompletedProcess:
    env = {**os.environ, "KS_ORDER": order, "KS_RACECHECK": "1"}
    return subprocess.run([str(exe), which], capture_output=True, text=True, timeout=60, env=env)


def _line(needle: str) -> int:
    return next(i for i, ln in enumerate(RACE_KERNELS.splitlines(), start=1) if needle in ln)


@needs_gxx
@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_same_warp_lost_update_on_global_word_is_a_race(race_exe, order):
    p = _run(race_exe, "lost", order)
    assert p.returncode == 86, p.stdout + p.stderr
    assert "KS_ERROR race" in p.stderr and "global memory race" in p.stderr
    assert "same warp" in p.stderr
    assert f"kernel.cu:{_line('out[0] += x[threadIdx.x]')}" in p.stderr


@needs_gxx
def test_same_warp_accesses_ordered_by_syncwarp_pass(race_exe):
    p = _run(race_exe, "ordered")
    assert p.returncode == 0 and "OK ordered" in p.stdout, p.stderr


@needs_gxx
@pytest.mark.parametrize("which,read,write", [
    ("readers", "float v = out[0];", "if (threadIdx.x == 127) out[0]"),
    ("shared_readers", "float v = s;", "if (threadIdx.x == 127) s ="),
])
def test_race_report_names_two_different_threads(race_exe, which, read, write):
    p = _run(race_exe, which)
    line = next(ln for ln in p.stderr.splitlines() if ln.startswith("KS_ERROR race"))
    # "thread (127,0,0) writes ...; thread (126,0,0) read it at kernel.cu:N": never the writer twice
    assert "thread (127,0,0) writes" in line, line
    assert "thread (127,0,0) read it" not in line, line
    assert f"read it at kernel.cu:{_line(read)}" in line, line
    assert f"kernel.cu:{_line(write)}" in line, line


# ---------------------------------------------------------------------------------------------
# Half-precision outputs are compared with the tolerance, never bit-exactly (item 4)
# ---------------------------------------------------------------------------------------------
def test_bf16_output_within_tolerance_passes_and_beyond_fails():
    want = np.linspace(-3, 3, 4096)
    got = bf16_round((want * (1 + 3e-3)).astype(np.float32))  # rounding-sized error on most elements
    assert compare(got.tobytes(), want, "bfloat16", 2e-2, 1e-2).ok
    bad = bf16_round((want * 1.2).astype(np.float32))
    cmp = compare(bad.tobytes(), want, "bfloat16", 2e-2, 1e-2)
    assert not cmp.ok and cmp.wrong > 3000
    poisoned = np.full(4096, 0xFFFF, np.uint16)  # unwritten bf16 (NaN bits) never passes
    assert compare(poisoned.tobytes(), want, "bfloat16", 2e-2, 1e-2).unwritten == 4096


def test_fp16_output_within_tolerance_passes_and_beyond_fails():
    want = np.linspace(-3, 3, 1001)
    assert compare(want.astype(np.float16).tobytes(), want, "float16", 1e-2, 1e-3).ok
    assert not compare((want * 1.1).astype(np.float16).tobytes(), want, "float16", 1e-2, 1e-3).ok


# ---------------------------------------------------------------------------------------------
# Workload value distributions and the gate's derived cases (items 2 and 8)
# ---------------------------------------------------------------------------------------------
def _definition(op_type: str, extra: dict | None = None):
    from corpora.problem import Definition

    d = {"name": "p", "op_type": op_type, "axes": {"M": {"type": "var"}, "N": {"type": "var"}},
         "inputs": {"x": {"shape": ["M", "N"], "dtype": "float32"}, "w": {"shape": ["N"], "dtype": "float32"}},
         "outputs": {"y": {"shape": ["M", "N"], "dtype": "float32"}}, "reference": "def run(x): return x"}
    d.update(extra or {})
    return Definition(**d)


def test_workload_init_overrides_an_input_distribution(tmp_path):
    from corpora.problem import ProblemError, load_workloads
    from mining.gate.data import make_inputs

    d = _definition("softmax")
    path = tmp_path / "workloads.jsonl"
    path.write_text('{"axes": {"M": 4, "N": 64}, "init": {"x": {"dist": "uniform", "low": -1000, "high": -900}}}\n'
                    '{"axes": {"M": 4, "N": 64}, "init": {"x": {"dist": "constant", "value": 2.5}}}\n')
    w0, w1 = load_workloads(path, d)
    x0 = make_inputs(d, w0, 0)["x"]
    assert x0.max() < -899 and x0.min() >= -1000
    assert np.all(make_inputs(d, w1, 0)["x"] == 2.5)
    assert np.abs(make_inputs(d, w1, 0)["w"]).max() <= 1  # the other input keeps the definition's default
    for line, needle in [('{"axes": {"M": 1, "N": 1}, "init": {"nope": {"dist": "uniform"}}}', "init.nope"),
                         ('{"axes": {"M": 1, "N": 1}, "init": {"x": {"dist": "constant"}}}', "init.x"),
                         ('{"axes": {"M": 1, "N": 1}, "init": {"x": {"dist": "laplace"}}}', "init.x.dist")]:
        path.write_text(line + "\n")
        with pytest.raises(ProblemError, match=rf"workloads.jsonl:1: {needle}"):
            load_workloads(path, d)


def test_value_adversarial_cases_per_op_type():
    from corpora.problem import Workload
    from mining.gate.cases import adversarial_workloads
    from mining.gate.data import make_inputs

    base = [Workload(0, {"M": 3, "N": 64}, {}), Workload(1, {"M": 4096, "N": 4096}, {}, ("large",))]
    soft = {w.variant: w for w in adversarial_workloads(_definition("softmax"), base)}
    assert set(soft) == {"large_negative", "large_positive", "all_equal", "near_limit", "denormal"}
    assert all(w.axes == {"M": 3, "N": 64} for w in soft.values())  # derived from the first small workload
    x = make_inputs(_definition("softmax"), soft["large_negative"], 0)["x"]
    assert x.max() < -87  # every exp underflows when the running max starts at 0
    tiny = make_inputs(_definition("softmax"), soft["denormal"], 0)["x"]
    assert np.abs(tiny).max() < np.finfo(np.float32).tiny
    norm = adversarial_workloads(_definition("norm"), base)
    assert {w.variant for w in norm} == {"large_negative", "large_positive", "all_equal", "denormal"}
    assert all(set(w.init) == {"x"} for w in norm)  # x (shaped like the output), not the weights
    assert adversarial_workloads(_definition("gemm"), base) == []


def test_large_workloads_get_a_reduced_cpu_form():
    from corpora.problem import load_problem
    from mining.gate.cases import reduce_workload

    root = Path(__file__).resolve().parents[2] / "corpora" / "kernels"
    p = load_problem(root / "layernorm")
    large = next(w for w in p.workloads if "large" in w.tags)
    r = reduce_workload(p.definition, large)
    assert r.axes == {"M": 2, "N": large.axes["N"]} and r.variant == "reduced" and "reduced" in r.tags
    p = load_problem(root / "reduce_sum")  # one axis: scaled, keeping its value mod 256
    odd = next(w for w in p.workloads if "large" in w.tags and "odd" in w.tags)
    r = reduce_workload(p.definition, odd)
    assert r.axes["N"] <= 1 << 20 and r.axes["N"] % 256 == odd.axes["N"] % 256


# ---------------------------------------------------------------------------------------------
# Probing from the kernel's own geometry, `maximum` preconditions, step bounds (item 5)
# ---------------------------------------------------------------------------------------------
STAGED_ROW = r"""
#define THREADS 256
#define UNROLL 4
__global__ void k(const float* x, float* y, int C) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) { int c = u * THREADS + threadIdx.x; if (c < C) y[c] = x[c]; }
}
void entry(const float* x, float* y, int R, int C) { k<<<R, THREADS>>>(x, y, C); }
"""


def test_geometry_bounds_come_from_the_kernels_constants():
    from mining.probe import geometry_bounds, geometry_factors

    assert {256, 4} <= set(geometry_factors(STAGED_ROW))
    assert 1024 in geometry_bounds(STAGED_ROW)  # 256 threads x 4 per thread
    dim3 = "__global__ void t() {}\nvoid e() { dim3 block(32, 8); t<<<1, block>>>(); }\n"
    assert {32, 8, 256} <= set(geometry_factors(dim3))


def test_probe_sizes_include_the_bound_and_one_past_it_with_small_outer_axes():
    from corpora.problem import load_problem
    from mining.probe import probe_workloads

    suite = Path(__file__).resolve().parents[2] / "eval" / "soundness" / "row_rmsnorm"
    p = load_problem(suite)
    probes = probe_workloads(p, (suite / "bug_size_bound_1.cu").read_text())
    geo = [line["axes"] for line in probes.workloads if "geometry" in line["tags"]]
    assert {"R": 5, "C": 1024} in geo and {"R": 5, "C": 1025} in geo


def test_a_step_valid_only_below_a_bound_carries_it_as_a_maximum():
    from mining.probe import ProbeOutcome, hypotheses, induce, induce_step_bound

    sizes = [3, 17, 256, 257, 1024, 1025, 4096]
    optimized = [ProbeOutcome({"C": c}, True) for c in sizes]
    simpler = [ProbeOutcome({"C": c}, c <= 1024, "" if c <= 1024 else "wrong") for c in sizes]
    space = hypotheses(["C"], [], {}, [256, 1024, 4096])
    assert induce(optimized, simpler, space) is None  # the optimized form never fails
    bound = induce_step_bound(optimized, simpler, space)
    assert (bound.kind, bound.axis, bound.value, bound.text) == ("maximum", "C", 1024, "C <= 1024")
    assert induce_step_bound(optimized, optimized, space) is None


def test_lifted_step_with_a_bound_is_never_valid_for_every_size():
    from mining.lift import StepContext, preconditions_of
    from mining.probe import Hypothesis, ProbeOutcome

    ctx = StepContext(index=1, operator="op", carrier="grid_stride", proposer="deterministic", description="",
                      variant="", optimized="", simpler="", site_start=0, site_end=0, static_optimized={},
                      static_simpler={})
    ctx.probes_optimized = [ProbeOutcome({"C": 1025}, True)]
    ctx.probes_simpler = [ProbeOutcome({"C": 1025}, False, "wrong values")]
    ctx.step_bound = Hypothesis("maximum", "C", 1024, "C <= 1024")
    pre, risks, _ = preconditions_of(ctx)
    assert [(p.kind, p.value) for p in pre] == [("maximum", 1024)]
    assert risks and "correctness" in risks[0].text
    assert not any("every size" in p.text for p in pre)


# ---------------------------------------------------------------------------------------------
# Run modes: --sanitize adds to the checked runs; the GPU runs every compute-sanitizer tool (3, 9)
# ---------------------------------------------------------------------------------------------
def test_sanitize_adds_asan_to_the_checked_runs_and_all_tools_on_the_gpu():
    from mining.gate.executors import CpuExecutor, CudaExecutor

    plain = [(s.label, s.env.get("KS_RACECHECK"), s.build) for s in CpuExecutor().run_specs(False)]
    assert plain == [("forward", "1", "default"), ("reverse", "0", "default")]
    san = [(s.label, s.env.get("KS_RACECHECK"), s.build) for s in CpuExecutor().run_specs(True)]
    assert san == plain + [("asan", "0", "asan")]
    gpu = CudaExecutor().run_specs(True)
    assert [s.tool for s in gpu] == ["", "memcheck", "racecheck", "initcheck", "synccheck"]
    assert gpu[0].env["KS_GUARD_BYTES"] != "0" and all(s.env["KS_GUARD_BYTES"] == "0" for s in gpu[1:])


@needs_gxx
def test_guard_regions_catch_a_write_past_the_end_where_no_checker_runs(store, problem_copy, monkeypatch):
    """The reverse run has the CPU checker off: the harness's poisoned guard after the buffer (the
    same code the GPU's default run uses) reports the write one element past the end."""
    from mining.gate import GateConfig, run_gate
    from mining.gate.executors import CpuExecutor

    root = problem_copy("vector_add")
    src = (root / "naive.cu").read_text()
    assert "if (i < n)" in src
    (root / "past.cu").write_text(src.replace("if (i < n)", "if (i <= n)").replace(
        "a[i] + b[i]", "(i < n ? a[i] + b[i] : 0.f)"))
    reverse_only = [s for s in CpuExecutor().run_specs(False) if s.label == "reverse"]
    monkeypatch.setattr(CpuExecutor, "run_specs", lambda self, sanitize: reverse_only)
    res = run_gate(root, root / "past.cu", GateConfig(executor="cpu", stages=("correctness",), store=store))
    assert res.verdict == "fail"
    assert "guard: output 'y'" in res.reason and "after the end" in res.reason, res.reason


# ---------------------------------------------------------------------------------------------
# Cache keys and environment failures (item 6)
# ---------------------------------------------------------------------------------------------
def test_environment_failures_are_recognized():
    from mining.gate.static import environment_failure

    assert environment_failure("k.cu:3:10: fatal error: cub/cub.cuh: No such file or directory")
    assert environment_failure("", timed_out=True)
    assert environment_failure("g++: internal compiler error: Segmentation fault")
    assert not environment_failure("k.cu:5:3: error: 'foo' was not declared in this scope")


@needs_gxx
def test_a_missing_system_header_is_not_cached(store, problem_copy):
    from mining.gate import GateConfig, run_gate

    root = problem_copy("vector_add")
    (root / "hdr.cu").write_text("#include <ks_no_such_header_anywhere.h>\n" + (root / "naive.cu").read_text())
    cfg = GateConfig(executor="cpu", stages=("correctness",), store=store)
    first = run_gate(root, root / "hdr.cu", cfg)
    assert first.verdict == "fail" and "No such file" in first.reason
    second = run_gate(root, root / "hdr.cu", cfg)
    assert second.stages["correctness"]["cached"] is False  # recomputed: the fix is to the machine


def test_cached_results_are_keyed_by_solution_and_headers(tmp_path, problem_copy):
    from corpora.problem import load_problem
    from mining.gate.gate import kernel_inputs_hash

    root = problem_copy("vector_add")
    p = load_problem(root)
    h0 = kernel_inputs_hash(p, p.solution.for_file("kernel.cu"))
    (root / "solution.toml").write_text((root / "solution.toml").read_text().replace('"-O3"', '"-O2"'))
    p1 = load_problem(root)
    h1 = kernel_inputs_hash(p1, p1.solution.for_file("kernel.cu"))
    (root / "helpers.cuh").write_text("#pragma once\n")
    h2 = kernel_inputs_hash(p1, p1.solution.for_file("kernel.cu"))
    assert len({h0, h1, h2}) == 3


def test_stored_lineage_is_keyed_by_the_problems_content(problem_copy):
    from corpora.problem import load_problem
    from mining.mine import MineConfig, lineage_fingerprint

    root = problem_copy("vector_add")
    p = load_problem(root)
    cfg = MineConfig(executor="cpu")
    before = lineage_fingerprint(cfg, p, p.solution.for_file("kernel.cu"), "cpu")
    (root / "workloads.jsonl").write_text((root / "workloads.jsonl").read_text() + '{"axes": {"N": 5}}\n')
    p2 = load_problem(root)
    assert lineage_fingerprint(cfg, p2, p2.solution.for_file("kernel.cu"), "cpu") != before


def test_a_precondition_names_the_axis_the_failing_probes_varied():
    from mining.probe import ProbeOutcome, hypotheses, induce

    # one axis at a time around the base M=5, N=3: failures come from N alone; M=64 passing
    # (a reference for M) must not turn into `M % 64 == 0`
    probes = [{"M": 5, "N": 3}, {"M": 64, "N": 3}, {"M": 5, "N": 1024}, {"M": 5, "N": 1025}, {"M": 5, "N": 4096}]
    opt = [ProbeOutcome(a, a["M"] == 64) for a in probes]  # fails wherever M = 5, the base included
    simple = [ProbeOutcome(a, True) for a in probes]
    space = hypotheses(["M", "N"], [], {}, [1024])
    h = induce(opt, simple, space)
    assert h is None or h.axis == "N", h.text
