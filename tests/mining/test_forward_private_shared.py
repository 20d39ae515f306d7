"""private_shared_to_registers (forward) and register_state_to_shared (backward), issue 20: a shared
array that only its own thread indexes becomes a register array. Variants written here in other
spellings than the real corpus' causal linear attention (a static 2-D `acc[k][threadIdx.x]`, a
dynamic-shared array indexed directly), the sites the rewrite must refuse, a round trip through the
operator, and CPU gate runs against the real corpus' causal_linear_attention wrapper. The real
naive itself is read from a materialized real-corpus folder (`SKILLS_REAL_PROBLEMS`, the folder
`eval/bench_optimize.py --real-problems` takes): fetched public code is never committed."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from mining.gate import GateConfig, run_gate
from mining.operators import get_operator
from mining.operators.forward import run_rewrite
from mining.operators.registry import get_rewrite, inverses

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = ROOT / "corpora" / "real" / "how-to-optim" / "causal_linear_attention"
REAL = os.environ.get("SKILLS_REAL_PROBLEMS")
REAL_NAIVE = Path(REAL) / "how-to-optim" / "causal_linear_attention" / "naive.cu" if REAL else None

# out[b,h,t,m] = sum_{s <= t} sum_e q[b,h,t,e] k[b,h,s,e] v[b,h,s,m]: one block per (8 features,
# batch x head, 128 output columns), the running k^T v state of its column in a static 2-D array
STATIC = r"""
#define EB 8
#define THREADS 128

__global__ void cla_static(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                           float* out, int L, int E, int M) {
    const int bh = blockIdx.y;
    const int e0 = blockIdx.x * EB;
    const int col = blockIdx.z * THREADS + threadIdx.x;
    __shared__ float acc[EB][THREADS];
    if (col >= M) return;
    const float* qb = q + (size_t)bh * L * E;
    const float* kb = k + (size_t)bh * L * E;
    const float* vb = v + (size_t)bh * L * M;
    float* ob = out + (size_t)bh * L * M;
    for (int e = 0; e < EB; ++e) acc[e][threadIdx.x] = 0.0f;
    for (int t = 0; t < L; ++t) {
        const float vt = vb[t * M + col];
        float s = 0.0f;
        for (int e = 0; e < EB; ++e) {
            if (e0 + e < E) {
                acc[e][threadIdx.x] += kb[t * E + e0 + e] * vt;
                s += qb[t * E + e0 + e] * acc[e][threadIdx.x];
            }
        }
        atomicAdd(&ob[t * M + col], s);
    }
}

void causal_linear_attention(const float* q, const float* k, const float* v, float* out,
                             int B, int H, int L, int E, int M) {
    cudaMemsetAsync(out, 0, sizeof(float) * B * H * L * M);
    dim3 grid((E + EB - 1) / EB, B * H, (M + THREADS - 1) / THREADS);
    cla_static<<<grid, THREADS>>>(q, k, v, out, L, E, M);
}
"""

# the same computation over dynamic shared memory indexed directly (no alias), the stride blockDim.x
DYNAMIC = r"""
#define EB 8

__global__ void cla_dynamic(const float* q, const float* k, const float* v, float* out, int L, int E, int M) {
    extern __shared__ float state[];
    const int lane = threadIdx.x;
    const int col = blockIdx.z * blockDim.x + lane;
    const int e0 = blockIdx.x * EB;
    if (col >= M) return;
    const size_t bh = blockIdx.y;
    for (int e = 0; e < EB; e++) state[lane + e * blockDim.x] = 0.0f;
    for (int t = 0; t < L; t++) {
        float s = 0.0f;
        for (int e = 0; e < EB && e0 + e < E; e++) {
            state[e * blockDim.x + lane] += k[(bh * L + t) * E + e0 + e] * v[(bh * L + t) * M + col];
            s += q[(bh * L + t) * E + e0 + e] * state[e * blockDim.x + lane];
        }
        atomicAdd(out + (bh * L + t) * M + col, s);
    }
}

void causal_linear_attention(const float* q, const float* k, const float* v, float* out,
                             int B, int H, int L, int E, int M) {
    cudaMemsetAsync(out, 0, sizeof(float) * B * H * L * M);
    dim3 grid((E + EB - 1) / EB, B * H, (M + 63) / 64);
    cla_dynamic<<<grid, 64, EB * 64 * sizeof(float)>>>(q, k, v, out, L, E, M);
}
"""


def gate(source: str, store: Path, problem: Path = WRAPPER):
    cfg = GateConfig(executor="cpu", stages=("correctness",), store=store, seeds=(0,))
    return run_gate(problem, kernel=Path("naive.cu"), config=cfg, source=source)


def forward(source: str) -> list[str]:
    return [m.source for m in run_rewrite("private_shared_to_registers", source)]


def test_registry_pairs_both_directions():
    assert inverses("register_state_to_shared") == ["private_shared_to_registers"]
    assert get_rewrite("private_shared_to_registers").carrier == get_operator("register_state_to_shared").carrier


def test_static_2d_array_becomes_registers_and_passes_the_gate(tmp_path):
    out = forward(STATIC)
    assert len(out) == 1
    new = out[0]
    assert "__shared__" not in new
    assert re.search(r"\bfloat acc\[EB\];", new)  # the extent as the loops spell it
    assert new.count("acc[e]") == 3 and "acc[e][threadIdx.x]" not in new
    assert new.count("#pragma unroll") == 2  # the two loops that index it, not the sweep over t
    assert gate(STATIC, tmp_path / "a").passed
    assert gate(new, tmp_path / "b").passed


def test_dynamic_shared_direct_becomes_registers_and_launch_asks_no_shared(tmp_path):
    out = forward(DYNAMIC)
    assert len(out) == 1
    new = out[0]
    assert "extern __shared__" not in new and re.search(r"\bfloat state\[EB\];", new)
    assert "<<<grid, 64, 0>>>" in new
    assert "state[e]" in new and "blockDim.x + lane]" not in new
    assert gate(new, tmp_path).passed


@pytest.mark.parametrize("mutation, why", [
    (("s += qb[t * E + e0 + e] * acc[e][threadIdx.x];", "s += qb[t * E + e0 + e] * acc[e][(threadIdx.x + 1) % THREADS];"),
     "a neighbour's slot"),
    (("int L, int E, int M) {\n    const int bh", "int L, int E, int M, int EBR) {\n    const int bh"), None),
    (("cla_static<<<grid, THREADS>>>", "cla_static<<<grid, 2 * THREADS>>>"), "more threads than slots per row"),
    (("cla_static<<<grid, THREADS>>>", "cla_static<<<grid, dim3(THREADS, 2)>>>"), "a 2-D block repeats threadIdx.x"),
    (("atomicAdd(&ob[t * M + col], s);", "atomicAdd(&ob[t * M + col], s); atomicAdd(&acc[0][threadIdx.x], 1.0f);"),
     "its address escapes"),
    (("__shared__ float acc", "volatile __shared__ float acc"), "volatile"),
])
def test_static_refusals(mutation, why):
    old, new = mutation
    assert old in STATIC
    src = STATIC.replace(old, new)
    if why is None:  # the runtime extent: the loops run to a kernel argument
        src = src.replace("e < EB; ++e", "e < EBR; ++e").replace("cla_static<<<grid, THREADS>>>(q, k, v, out, L, E, M)",
                                                                  "cla_static<<<grid, THREADS>>>(q, k, v, out, L, E, M, EB)")
    assert forward(src) == []


def test_barrier_separated_producer_consumer_is_refused():
    src = STATIC.replace("        atomicAdd(&ob[t * M + col], s);",
                         "        __syncthreads();\n        s += acc[0][THREADS - 1 - threadIdx.x];\n"
                         "        atomicAdd(&ob[t * M + col], s);")
    assert forward(src) == []


def test_dynamic_refusals():
    # a runtime block size that the modulus does not bound: threadIdx.x % 32 with 64 threads
    mod = DYNAMIC.replace("const int lane = threadIdx.x;", "const int lane = threadIdx.x % 32;")
    mod = mod.replace("blockDim.x", "32")
    assert forward(mod) == []
    assert forward(mod.replace("<<<grid, 64,", "<<<grid, 32,")) != []  # 32 threads: distinct ids, accepted
    # a second dynamic-shared declaration aliases the same bytes
    two = DYNAMIC.replace("extern __shared__ float state[];", "extern __shared__ float state[];\n    extern __shared__ int flags[];")
    assert forward(two) == []
    # the array passed on: its address escapes
    esc = DYNAMIC.replace("atomicAdd(out + (bh * L + t) * M + col, s);", "atomicAdd(out + (bh * L + t) * M + col, s + *state);")
    assert forward(esc) == []
    # no launch in the file proves the ids
    assert forward(DYNAMIC.split("void causal_linear_attention")[0]) == []


MODULUS = r"""
#define EB 8
__global__ void acc_mod(const float* x, float* y, int n, int W) {
    extern __shared__ float buf[];
    float* st = buf;
    const int r = threadIdx.x % W;
    for (int e = 0; e < EB; ++e) st[r + e * W] = x[e] * r;
    float s = 0.0f;
    for (int e = 0; e < EB; ++e) s += st[e * W + r];
    y[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
void run(const float* x, float* y, int n, int W) {
    dim3 block(W);
    acc_mod<<<n, block, EB * W * sizeof(float)>>>(x, y, n, W);
}
"""


def test_modulus_proven_by_the_launch_argument_only_while_the_host_keeps_it():
    out = forward(MODULUS)
    assert len(out) == 1 and "float st[EB];" in out[0] and "<<<n, block, 0>>>" in out[0]
    assert forward(MODULUS.replace("dim3 block(W);", "dim3 block(W);\n    W = W / 2;")) == []
    assert forward(MODULUS.replace("(x, y, n, W);", "(x, y, n, W / 2);")) == []


def test_round_trip_through_the_operator(tmp_path):
    op = get_operator("register_state_to_shared")
    assert op.find_sites(STATIC) == []  # nothing in registers yet
    fwd = forward(STATIC)[0]
    sites = op.find_sites(fwd)
    assert len(sites) == 1
    back = op.apply(fwd, sites[0])
    assert re.search(r"__shared__ float acc_s\[8 \* 128\];", back)
    assert back.count("acc_s[threadIdx.x + e * 128]") == 3
    assert gate(back, tmp_path / "back").passed
    again = forward(back)
    assert len(again) == 1 and "__shared__" not in again[0]
    # the dynamic form: every launch's block is a runtime value
    dyn = forward(DYNAMIC)[0].replace("<<<grid, 64, 0>>>", "<<<grid, dim3(M < 64 ? M : 64), 0>>>")
    back = op.apply(dyn, op.find_sites(dyn)[0])
    assert "extern __shared__ float state_s[];" in back
    assert "8 * dim3(dim3(M < 64 ? M : 64)).x * sizeof(float)" in back
    assert gate(back, tmp_path / "dyn").passed
    assert forward(back) != []


def test_backward_refusals():
    op = get_operator("register_state_to_shared")
    fwd = forward(STATIC)[0]
    assert op.find_sites(fwd.replace("cla_static<<<grid, THREADS>>>", "cla_static<<<grid, dim3(THREADS, 2)>>>")) == []
    assert op.find_sites(fwd.replace("acc[e] = 0.0f;", "acc[e] = 0.0f; float* p = acc;")) == []  # escapes
    assert op.find_sites(fwd.split("void causal_linear_attention")[0]) == []  # no launch to size it


@pytest.mark.skipif(REAL_NAIVE is None or not REAL_NAIVE.is_file(),
                    reason="SKILLS_REAL_PROBLEMS names no materialized real corpus")
def test_real_causal_linear_attention_naive(tmp_path):
    naive = REAL_NAIVE.read_text()
    out = forward(naive)
    assert len(out) == 1
    new = out[0]
    assert "extern __shared__" not in new and re.search(r"float shared_kv\[E_BLOCK_SIZE\];", new)
    assert "shared_kv[e_local]" in new and "* M + m]" not in new and "m + e_local * M]" not in new
    assert "<<<gridDim, blockDim, 0>>>" in new
    assert gate(new, tmp_path, REAL_NAIVE.parent).passed
