"""vectorize_elementwise on kernels whose every thread has an element (no bound): besides the loop
over the unchanged grid, a candidate whose loop runs to each launch's thread count, passed in as
`ks_total`, over a clamped grid; what it must refuse; the CPU gate on the house vector_add problem."""
from __future__ import annotations

import pytest

from corpora.code.source import Source
from mining.operators.base import Context
from mining.operators.grid_stride import counted_unguarded_edits
from mining.operators.vector_load import vectorize_elementwise
from tests._operator_support import cpu_gate

# one element per thread, no bound: the launch has exactly N threads (blocks of one)
ONE = """#include <cuda_runtime.h>
__global__ void add(const float* a, const float* b, float* y) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    y[i] = a[i] + b[i];
}

void vector_add(const float* a, const float* b, float* y, int N) {
    add<<<N, 1>>>(a, b, y);
}
"""


def test_counted_candidate_passes_the_gate(tmp_path):
    mats = vectorize_elementwise(ONE, Context())
    counted = [m for m in mats if "ks_total" in m.description]
    assert len(mats) == 2 and len(counted) == 1
    new = counted[0].source
    assert "__global__ void add(const float* a, const float* b, float* y, long long ks_total)" in new
    assert "add<<<ks_clamp_grid(N, 8), 1>>>(a, b, y, (long long)(N) * (1));" in new
    assert cpu_gate("vector_add", ONE, tmp_path / "naive").passed
    assert cpu_gate("vector_add", new, tmp_path / "counted").passed


@pytest.mark.parametrize("old,new", [
    ("add<<<N, 1>>>", "add<<<dim3(N), 1>>>"),  # a dim3 grid: not carried
    ("    y[i] = a[i] + b[i];\n", "    if (i < 1 << 30) y[i] = a[i] + b[i];\n"),  # guarded: grid_stride's own form
    ("float* y) {", "float* y) {\n    long long ks_total = 0;"),  # the name is taken
])
def test_refusals(old, new):
    assert old in ONE
    assert counted_unguarded_edits(Source(ONE.replace(old, new))) is None


def test_a_launch_shared_by_two_definitions_is_not_clamped_for_one():
    # a generic guarded kernel and its specialization share the name: grid_stride may rewrite only the
    # one it matched, so a clamp of the shared launch could leave the other without threads
    two = """template <typename T>
__global__ void scale(T* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] * 2;
}
template <>
__global__ void scale(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { y[i] = y[i] * 2.0f; y[0] += 0.0f; }
}
void run(float* y, int n) { scale<float><<<(n + 255) / 256, 256>>>(y, n); }
"""
    from mining.operators.grid_stride import grid_stride
    assert grid_stride(two, Context()) == []
    generic_only = two[:two.index("template <>")] + two[two.index("void run"):]
    assert grid_stride(generic_only, Context())  # one definition of the name: its templated launch is clamped
