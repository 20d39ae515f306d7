"""The coverage stage (mining/gate/coverage.py): a step inside code no case runs is refused, since
the gate cannot judge it. Real g++ + gcov on the shipped vector_add problem."""
import re
import shutil
from pathlib import Path

import pytest

from mining.checker import KernelGateChecker
from mining.gate import GateConfig
from mining.gate.coverage import kernel_lines, unexercised_reason
from mining.walk import Candidate, Verdict, backward_walk

ROOT = Path(__file__).resolve().parents[2]
VADD = ROOT / "corpora" / "kernels" / "vector_add"

# the entry never passes a null `b`: the grid-stride branch below never runs
DEAD_BRANCH = """#include <cuda_runtime.h>
__global__ void add(const float* a, const float* b, float* y, int n) {
    if (b == nullptr) {
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
            y[i] = a[i];
    } else {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a[i] + b[i];
    }
}
void vector_add(const float* a, const float* b, float* y, int N) {
    add<<<(N + 255) / 256, 256>>>(a, b, y, N);
}
"""
DEAD = "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)\n            y[i] = a[i];"
LIVE = "if (i < n) y[i] = a[i] + b[i];"


def test_gcov_json_and_the_reason():
    doc = ('{"files": [{"file": "/x/kernel.cu", "lines": [{"line_number": 3, "count": 0}, '
           '{"line_number": 4, "count": 0}, {"line_number": 7, "count": 12}]}, '
           '{"file": "/x/ks_harness_main.cu", "lines": [{"line_number": 1, "count": 1}]}]}')
    lines, ran = kernel_lines("noise\n" + doc + "\n", "kernel.cu")
    assert lines == {3, 4, 7} and ran == {7}
    cov = {"status": "pass", "lines": [3, 4, 7], "ran": [7]}
    src = "a\nb\nc\nd\ne\nf\ng\n"
    assert "lines 3-4" in unexercised_reason(cov, src, src.index("c"), src.index("d") + 1)
    assert unexercised_reason(cov, src, src.index("c"), src.index("g") + 1) == ""  # line 7 ran
    assert unexercised_reason(cov, src, src.index("e"), src.index("f") + 1) == ""  # no executable line
    assert unexercised_reason({"status": "skip"}, src, 0, 3) == ""
    # offsets are UTF-8 bytes (the parser's): a multi-byte comment before the site moves them
    wide = "// 注释\n" + src
    at = len("// 注释\n".encode()) + src.index("c")
    assert "lines 4-5" in unexercised_reason({"status": "pass", "lines": [4, 5], "ran": []}, wide, at, at + 3)


@pytest.mark.skipif(shutil.which("gcov") is None or shutil.which("g++") is None, reason="needs g++ and gcov")
def test_a_step_in_code_no_case_runs_is_refused(tmp_path):
    checker = KernelGateChecker(VADD, VADD / "kernel.cu", GateConfig(executor="cpu", store=tmp_path), None)
    dead, live = DEAD_BRANCH.index(DEAD), DEAD_BRANCH.index(LIVE)  # ASCII: characters are bytes
    why = checker.unexercised(DEAD_BRANCH, dead, dead + len(DEAD))
    assert why.startswith("unexercised: no case runs lines 4-5"), why
    assert checker.unexercised(DEAD_BRANCH, live, live + len(LIVE)) == ""

    # the walk turns the passing rewrite of the dead loop into a rejection with that reason
    single = DEAD_BRANCH.replace(DEAD, "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a[i]; }")
    cand = Candidate("grid_stride_to_single", "grid_stride", single, site_line=4, site_start=dead,
                     site_end=dead + len(DEAD))
    walk = backward_walk(DEAD_BRANCH, lambda src, step: [cand] if src == DEAD_BRANCH else [], checker, jobs=1)
    assert walk.states == [DEAD_BRANCH] and walk.termination == "complete"
    (_, c, v), = walk.rejected
    assert isinstance(v, Verdict) and v.verdict == "unexercised" and not v.passed
    assert re.search(r"lines 4-5", v.reason)
