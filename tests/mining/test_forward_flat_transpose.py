"""stage_transpose_tile on a transpose walked through one flattened index: read as the 2-D kernel
it spells (x = column, y = row, 32 x 32 blocks), then staged through a shared tile; the spellings
it must refuse; the CPU gate on the house transpose problem."""
from __future__ import annotations

import pytest

from mining.operators.forward import run_rewrite
from tests._operator_support import cpu_gate

FLAT = """#include <cuda_runtime.h>

__global__ void t_flat(const float* in, float* out, int R, int C) {
    unsigned i = threadIdx.x + blockDim.x * blockIdx.x;
    unsigned c = i % C;
    unsigned r = i / C;
    if (i < C * R) { out[c * R + r] = in[i]; }
}

void transpose(const float* x, float* y, int R, int C) {
    t_flat<<<(R * C + 127) / 128, 128>>>(x, y, R, C);
}
"""


def test_flat_transpose_staged(tmp_path):
    mats = run_rewrite("stage_transpose_tile", FLAT)
    assert len(mats) == 1 and "flattened index read as 2-D" in mats[0].description
    new = mats[0].source
    assert "t_flat<<<dim3(((C) + 31) / 32, ((R) + 31) / 32), dim3(32, 32)>>>(x, y, R, C);" in new
    assert "__shared__ float ks_tile[32][33];" in new
    assert cpu_gate("transpose", new, tmp_path).passed


@pytest.mark.parametrize("old,new", [
    ("unsigned r = i / C;", "unsigned r = i / R;"),  # not the same row length
    ("out[c * R + r] = in[i];", "out[c * R + r] = in[i + 1];"),  # not the element at i
    ("out[c * R + r] = in[i];", "out[i] = in[c * R + r];"),  # the store walks the flat index
    ("if (i < C * R) {", "if (i < C * R - 1) {"),  # not the whole matrix
    ("if (i < C * R) { out[c * R + r] = in[i]; }", "if (i < C * R) { out[c * R + r] = in[i]; out[0] = 0.0f; }"),
    ("<<<(R * C + 127) / 128, 128>>>", "<<<(R * C + 127) / 128, dim3(16, 8)>>>"),  # already a 2-D block
])
def test_refusals(old, new):
    assert old in FLAT
    assert run_rewrite("stage_transpose_tile", FLAT.replace(old, new)) == []
