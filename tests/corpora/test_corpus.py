"""The shipped expert corpus: well-formed, carriers from the documented vocabulary, and every
kernel the CPU executor can run passes the gate (the GPU verification lives in
eval/results/corpus_gate_cuda_h200.json.gz and corpora/kernels/README.md)."""
import re
from pathlib import Path

import pytest

from corpora.problem import load_problem
from mining.gate import GateConfig, run_gate
from tests.conftest import KERNELS

PROBLEMS = sorted(p.name for p in KERNELS.iterdir() if (p / "definition.json").exists())
EXPERTS = [p for p in PROBLEMS if p not in ("vector_add", "tiled_matmul")]


def vocabulary() -> set[str]:
    text = (KERNELS / "README.md").read_text()
    section = text.split("## Carrier vocabulary", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z0-9_]+)` \|", section, flags=re.M))


def test_corpus_has_the_twelve_problems():
    assert len(EXPERTS) >= 12
    for name in ("reduce_sum", "softmax", "layernorm", "rmsnorm_residual", "sgemm", "hgemm_wmma", "transpose",
                 "histogram", "exclusive_scan", "bias_gelu", "attention_fwd", "conv2d_3x3"):
        assert name in EXPERTS


@pytest.mark.parametrize("name", PROBLEMS)
def test_problem_is_well_formed(name):
    p = load_problem(KERNELS / name)
    assert len(p.workloads) >= 3
    assert any("large" in w.tags for w in p.workloads), "needs a workload that saturates an H200"
    assert any(all(v & (v - 1) for v in w.axes.values() if v > 1) or any(v % 4 for v in w.axes.values())
               for w in p.workloads), "needs a workload whose sizes are not powers of two"
    assert (KERNELS / name / "naive.cu").exists()
    vocab = vocabulary()
    assert p.solution.carriers and set(p.solution.carriers) <= vocab, set(p.solution.carriers) - vocab
    assert p.solution.for_file("naive.cu").carriers == []
    source = (KERNELS / name / "kernel.cu").read_text()
    for carrier in p.solution.carriers:  # every listed carrier is marked at a site
        assert re.search(rf"carrier: {carrier}\b", source), f"{carrier} has no site comment"


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("corpus-store")


@pytest.mark.parametrize("name", PROBLEMS)
def test_kernels_pass_the_cpu_gate(name, shared_store):
    p = load_problem(KERNELS / name)
    for kernel in ("kernel.cu", "naive.cu"):
        r = run_gate(KERNELS / name, kernel=Path(kernel),
                     config=GateConfig(executor="cpu", stages=("correctness",), store=shared_store))
        if p.solution.for_file(kernel).gpu_only:
            assert r.verdict == "unsupported", r.reason
            continue
        assert r.passed, f"{name}/{kernel}: {r.reason}"
