"""stage_matmul_tiles' register-tile sizes follow the static shared-memory limit, not a fixed cap:
a 32 x 32 block takes 4 x 4 outputs per thread (128 x 128 tiles) for float, not for double."""
from __future__ import annotations

from mining.operators.forward import run_rewrite
from tests._operator_support import cpu_gate

GEMM32 = """#include <cuda_runtime.h>

__global__ void gemm32(const float *a, const float *b, float *c, int M, int N, int K) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += a[row * K + k] * b[k * N + col];
  c[row * N + col] = acc;
}

void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(32, 32);
    dim3 grid((N + 31) / 32, (M + 31) / 32);
    gemm32<<<grid, block>>>(A, B, C, M, N, K);
}
"""


def test_float_32x32_block_gets_128x128_tiles(tmp_path):
    mats = run_rewrite("stage_matmul_tiles", GEMM32)
    tiles = [m for m in mats if "block tile" in m.description]
    assert [m.description.split(":")[1].split(" block")[0].strip() for m in tiles] == ["128 x 128", "64 x 64"]
    big = tiles[0].source
    assert "__shared__ float ks_As[128][33];" in big and "__shared__ float ks_Bs[32][128];" in big
    assert cpu_gate("sgemm", big, tmp_path).passed


def test_double_tiles_stay_within_48_kib():
    dbl = GEMM32.replace("const float *a, const float *b, float *c", "const double *a, const double *b, double *c")
    dbl = dbl.replace("float acc = 0.0f;", "double acc = 0.0;")
    tiles = [m.description for m in run_rewrite("stage_matmul_tiles", dbl) if "block tile" in m.description]
    assert len(tiles) == 1 and "64 x 64" in tiles[0]  # 128 x 128 doubles would need 66 KiB of shared memory
