"""Forward rewrites of the cache hints (mining/operators/cache_hints.py, one per hint, each where its
rule makes the hint applicable) and of the asynchronous shared-tile fill (async_copy_fill in
mining/operators/async_copy_to_sync.py, inverting async_copy_to_sync and drop_pipeline_sync), on
kernels written in spellings they were not written for: the sites each takes and refuses, the
round trip through the operators' backward halves, the real CPU gate on every result, and nvcc's
SASS (sm_90) for the compiled forms."""
from __future__ import annotations

from pathlib import Path

import pytest

from _operator_support import KERNELS, cpu_gate, to_fixpoint
from mining.operators import get_operator
from mining.operators.async_copy_to_sync import async_copy_fill
from mining.operators.base import Context
from mining.operators.cache_hints import HINT_RULES, hint_rewrite
from mining.operators.registry import inverses, rewrites_for

# --------------------------------------------------------------------------- cache hints
# grid-stride, in place: `out` is written, read back and written again; the inputs are read in a loop
INPLACE_ADD = """
#include <cuda_runtime.h>
__global__ void add_inplace(const float* __restrict__ lhs, const float* rhs, float* out, int count) {
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < count; idx += gridDim.x * blockDim.x) {
        out[idx] = lhs[idx];
        out[idx] = out[idx] + rhs[idx];
    }
}
void vector_add(const float* a, const float* b, float* y, int N) {
    add_inplace<<<64, 128>>>(a, b, y, N);
}
"""

# one element per thread, guarded by an early return; `p` is read twice, `q` once
GUARDED_ADD = """
#include <cuda_runtime.h>
__global__ void add_guarded(const float* p, const float* q, float* dst, int len) {
    const int t = threadIdx.x + blockDim.x * blockIdx.x;
    if (t >= len) return;
    float first = p[t];
    float again = (t & 1) ? p[t] : first;
    dst[t] = again + q[t];
}
void vector_add(const float* a, const float* b, float* y, int N) {
    add_guarded<<<(N + 127) / 128, 128>>>(a, b, y, N);
}
"""

# text each hint's candidate must contain on each kernel (None: the rule has no site there)
EXPECT = {
    "add_ldcg": ("__ldcg(&out[idx])", "__ldcg(&q[t])"),
    "add_ldca": ("__ldca(&lhs[idx])", "__ldca(&p[t])"),
    "add_ldlu": (None, "__ldlu(&p[t])"),
    "add_ldcv": ("__ldcv(&out[idx])", None),
    "add_stcg": (None, "__stcg(&dst[t], (float)(again + q[t]));"),
    "add_stwt": (None, "__stwt(&dst[t], (float)(again + q[t]));"),
    "add_stwb": ("__stwb(&out[idx], (float)(out[idx] + rhs[idx]));", None),
}


def _rule(name: str):
    return next(r for r in HINT_RULES.values() if r.rewrite == name)


def test_each_hint_has_its_own_forward_rewrite_in_the_registry():
    for rule in HINT_RULES.values():
        op = f"drop_{rule.carrier}_hint"
        assert inverses(op) == [rule.rewrite] and rewrites_for(op, rule.carrier)[0] == rule.rewrite
    assert set(EXPECT) == {r.rewrite for r in HINT_RULES.values()}


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_hint_sites_on_other_spellings(name):
    rule = _rule(name)
    for kernel, expect in zip((INPLACE_ADD, GUARDED_ADD), EXPECT[name]):
        mats = hint_rewrite(rule.carrier)(kernel, Context())
        if expect is None:
            assert mats == [], (name, kernel)
            continue
        assert len(mats) == 1 and expect in mats[0].source, mats[0].source if mats else name
    # ldca takes both reads of p but ldlu only the last one; ldcg leaves p (read twice) alone
    g = hint_rewrite("last_use_load")(GUARDED_ADD, Context())[0].source
    assert "float first = p[t];" in g and g.count("__ldlu(&p") == 1 and "__ldlu(&q[t])" in g
    assert "p[t]" in hint_rewrite("l2_only_load")(GUARDED_ADD, Context())[0].source.replace("__ldcg(&q[t])", "")


REFUSE = [
    # an input whose pointer escapes (offset into a row pointer): no claim about its reuse
    ("cache_all_load", "__global__ void k(const float* a, float* y) { const float* r = a + 4; y[0] = r[0] + a[1] + a[2]; }"),
    # ldcv only where another agent may write the data: never on a read-only input
    ("volatile_load", "__global__ void k(const float* a, float* y, int n) { for (int i = 0; i < n; ++i) y[i] = a[i] + a[0]; }"),
    # an output the kernel reads back is no write-through / L2-only output
    ("write_through_store", "__global__ void k(float* y, int n) { y[0] = 1.f; y[1] = y[0] * 2.f; }"),
    ("l2_only_store", "__global__ void k(float* y) { y[threadIdx.x] += 1.f; }"),
    # write-back explicitly only where the kernel rereads what it writes
    ("write_back_store", "__global__ void k(const float* a, float* y) { y[threadIdx.x] = a[threadIdx.x]; }"),
    # a volatile pointer takes no hint but ldcv (the intrinsics' pointers are not volatile)
    ("l2_only_load", "__global__ void k(volatile int* f, int* y) { y[0] = f[0]; f[1] = 2; y[1] = f[1]; }"),
    # the last read sits in a loop: later iterations read again
    ("last_use_load", "__global__ void k(const float* a, float* y, int n) { float s = 0; for (int i = 0; i < n; ++i) s += a[i]; y[0] = s; }"),
    # a type the intrinsics have no overload for
    ("write_through_store", "struct P { float a, b; };\n__global__ void k(P* y, P v) { y[threadIdx.x] = v; }"),
]


@pytest.mark.parametrize("carrier,code", REFUSE)
def test_hint_refusals(carrier, code):
    assert hint_rewrite(carrier)(code, Context()) == [], code


def test_volatile_data_gets_ldcv_through_a_cast():
    code = "__global__ void k(volatile int* flag, int* y) { y[0] = flag[0]; }"
    mats = hint_rewrite("volatile_load")(code, Context())
    assert len(mats) == 1 and "y[0] = __ldcv((const int*)&flag[0]);" in mats[0].source


def test_hinted_kernels_pass_the_gate_and_round_trip(tmp_path):
    """Every hint's candidate on both kernels passes the CPU gate, and the hint's own backward
    operator run to its fixpoint gives back a kernel without the hint that passes too."""
    for name in sorted(EXPECT):
        rule = _rule(name)
        op = get_operator(f"drop_{rule.carrier}_hint")
        for kernel in (INPLACE_ADD, GUARDED_ADD):
            mats = hint_rewrite(rule.carrier)(kernel, Context())
            if not mats:
                continue
            res = cpu_gate("vector_add", mats[0].source, tmp_path)
            assert res.passed, (name, res.reason)
            back, n = to_fixpoint(op, mats[0].source)
            assert n >= 1 and rule.intrinsic not in back.split("void vector_add")[0], name
            res = cpu_gate("vector_add", back, tmp_path)
            assert res.passed, (name, res.reason)


# the cache operator each hint compiles to (sm_90 SASS, nvcc 13)
SASS = {"add_ldcg": "LDG.E.STRONG.GPU", "add_ldca": "LDG.E.STRONG.SM", "add_ldlu": "LDG.E.LU",
        "add_ldcv": "LDG.E.STRONG.SYS", "add_stcg": "STG.E.STRONG.GPU", "add_stwt": "STG.E.STRONG.SYS",
        "add_stwb": "STG.E.STRONG.SM"}


def test_hinted_kernels_compile_with_nvcc(tmp_path):
    from mining.gate import GateConfig, run_gate

    cfg = GateConfig(executor="cpu", stages=("static",), store=tmp_path)
    for name in sorted(EXPECT):
        for kernel in (INPLACE_ADD, GUARDED_ADD):
            mats = hint_rewrite(_rule(name).carrier)(kernel, Context())
            if not mats:
                continue
            r = run_gate(KERNELS / "vector_add", kernel=Path("kernel.cu"), config=cfg, source=mats[0].source).to_dict()
            ops = {op for k in r["stages"]["static"]["archs"]["sm_90"]["kernels"].values() for op in k.get("sass", {})}
            assert SASS[name] in ops, (name, sorted(ops))
    # the unhinted kernels use none of them
    for kernel in (INPLACE_ADD, GUARDED_ADD):
        r = run_gate(KERNELS / "vector_add", kernel=Path("kernel.cu"), config=cfg, source=kernel).to_dict()
        ops = {op for k in r["stages"]["static"]["archs"]["sm_90"]["kernels"].values() for op in k.get("sass", {})}
        assert not ops & set(SASS.values()), sorted(ops)


# --------------------------------------------------------------------------- asynchronous shared-tile fills
# a transpose through a 32x8-thread tile, rows filled in a loop under a bounds check
TILE_TRANSPOSE = """
#include <cuda_runtime.h>
#define TD 32
#define RW 8
__global__ void transpose_rows(const float* src, float* dst, int rows, int cols) {
    __shared__ float buf[TD][TD + 1];
    int gx = blockIdx.x * TD + threadIdx.x;
    int gy = blockIdx.y * TD + threadIdx.y;
    for (int j = 0; j < TD; j += RW)
        if (gx < cols && gy + j < rows)
            buf[threadIdx.y + j][threadIdx.x] = src[(gy + j) * cols + gx];
    __syncthreads();
    gx = blockIdx.y * TD + threadIdx.x;
    gy = blockIdx.x * TD + threadIdx.y;
    for (int j = 0; j < TD; j += RW)
        if (gx < rows && gy + j < cols) dst[(gy + j) * rows + gx] = buf[threadIdx.x][threadIdx.y + j];
}
void transpose(const float* x, float* y, int R, int C) {
    transpose_rows<<<dim3((C + TD - 1) / TD, (R + TD - 1) / TD), dim3(TD, RW)>>>(x, y, R, C);
}
"""

# a staged add: one-dimensional tiles filled through `__ldg(a + i)` and `*(b + i)`, one read per thread
STAGED_ADD = """
#include <cuda_runtime.h>
__global__ void add_via_smem(const float* a, const float* b, float* y, int n) {
    extern __shared__ float stage[];
    __shared__ float other[128];
    int i = blockIdx.x * 128 + threadIdx.x;
    int j = i < n ? i : n - 1;
    stage[threadIdx.x] = __ldg(a + j);
    other[127 - threadIdx.x] = *(b + j);
    __syncthreads();
    if (i < n) y[i] = stage[threadIdx.x] + other[127 - threadIdx.x];
}
void vector_add(const float* a, const float* b, float* y, int N) {
    add_via_smem<<<(N + 127) / 128, 128, 128 * sizeof(float)>>>(a, b, y, N);
}
"""


def test_async_fill_rewrites_other_spellings():
    t = async_copy_fill(TILE_TRANSPOSE, Context())
    assert len(t) == 1
    assert "__pipeline_memcpy_async(&buf[threadIdx.y + j][threadIdx.x], &src[(gy + j) * cols + gx], 4);" in t[0].source
    assert "    __pipeline_commit();\n    __pipeline_wait_prior(0);\n    __syncthreads();" in t[0].source
    assert t[0].source.startswith("\n#include <cuda_runtime.h>\n#include <cuda_pipeline.h>\n")
    s = async_copy_fill(STAGED_ADD, Context())
    assert len(s) == 1
    assert "__pipeline_memcpy_async(&stage[threadIdx.x], a + j, 4);" in s[0].source
    assert "__pipeline_memcpy_async(&other[127 - threadIdx.x], (b + j), 4);" in s[0].source
    assert s[0].source.count("__pipeline_commit();") == 1
    assert rewrites_for("async_copy_to_sync", "async_copy")[0] == "async_copy_fill"
    assert inverses("drop_pipeline_sync") == ["async_copy_fill"]


STAGED_BODY = """
__global__ void k(const float* g, const double* h, float* y, int n) {
    __shared__ float s[64];
    __shared__ float u[64];
    float loc[4] = {0, 0, 0, 0};
    int t = threadIdx.x;
    %s
    __syncthreads();
    y[t] = s[t] + u[t];
}
"""

ASYNC_REFUSE = [
    "s[t] = t < n ? g[t] : 0.f;",  # a condition that zero-fills
    "if (t < n) s[t] = g[t]; else s[t] = 0.f;",  # the same as a branch
    "s[t] = h[t];",  # a conversion (double into float)
    "s[t] = (float)g[t] * 2.f;",  # a computed value
    "s[t] = u[t];",  # a shared source
    "s[t] = loc[t & 3];",  # a local source
    "s[t] = g[t]; float v = s[t]; y[t] = v;",  # the destination read before the barrier
    "s[t] = g[t]; y[t] = 0.f;",  # a global store between the fill and the barrier (the source may alias it)
    "s[t] = g[t]; atomicAdd(&y[0], 1.f);",  # the same through an atomic
    "for (int r = 0; r < 4; ++r) s[t] = g[t + r];",  # every iteration copies to one element
    "s[t] = g[t]; s[t] = g[t + 1];",  # two copies in flight to one element
    "float* p = s; s[t] = g[t]; p[0] = 1.f;",  # an alias of the tile
    "if (t == 0) { s[t] = g[t]; return; }",  # a jump before the barrier
]


@pytest.mark.parametrize("body", ASYNC_REFUSE)
def test_async_fill_refusals(body):
    assert async_copy_fill(STAGED_BODY % body, Context()) == [], body


def test_async_fill_refuses_without_barrier_and_two_byte_elements():
    assert async_copy_fill("__global__ void k(const float* g, float* y) { __shared__ float s[32]; "
                           "s[threadIdx.x] = g[threadIdx.x]; y[0] = 1.f; }", Context()) == []
    assert async_copy_fill("#include <cuda_fp16.h>\n__global__ void k(const __half* g, __half* y) { "
                           "__shared__ __half s[32]; s[threadIdx.x] = g[threadIdx.x]; __syncthreads(); "
                           "y[threadIdx.x] = s[31 - threadIdx.x]; }", Context()) == []
    # sanity: the same kernel with a plain fill is taken
    assert len(async_copy_fill(STAGED_BODY % "s[t] = g[t]; u[t] = g[t + 1];", Context())) == 1


@pytest.mark.parametrize("problem,kernel", [("transpose", TILE_TRANSPOSE), ("vector_add", STAGED_ADD)])
def test_async_fill_passes_the_gate_and_round_trips(problem, kernel, tmp_path):
    """The CPU executor runs the pipeline primitives (each copy deferred to its wait); the walk's
    backward steps give back synchronous element copies that pass too."""
    assert cpu_gate(problem, kernel, tmp_path).passed
    mat = async_copy_fill(kernel, Context())[0]
    res = cpu_gate(problem, mat.source, tmp_path)
    assert res.passed, res.reason
    back, n = to_fixpoint(get_operator("async_copy_to_sync"), mat.source)
    assert n >= 1 and "__pipeline_memcpy_async" not in back
    back, n = to_fixpoint(get_operator("drop_pipeline_sync"), back)
    assert n == 3 and "pipeline" not in back
    res = cpu_gate(problem, back, tmp_path)
    assert res.passed, res.reason


def test_cpu_pipeline_emulation_catches_a_missing_wait(tmp_path):
    """Copies land at the wait, not at the issue: reading the tile without waiting fails the gate."""
    mat = async_copy_fill(STAGED_ADD, Context())[0]
    broken = mat.source.replace("__pipeline_wait_prior(0);", "")
    assert broken != mat.source
    res = cpu_gate("vector_add", broken, tmp_path)
    assert not res.passed and "output 'y'" in res.reason, res.reason


def test_async_fill_compiles_to_ldgsts(tmp_path):
    from mining.gate import GateConfig, run_gate

    cfg = GateConfig(executor="cpu", stages=("static",), store=tmp_path)
    for problem, kernel in (("transpose", TILE_TRANSPOSE), ("vector_add", STAGED_ADD)):
        src = async_copy_fill(kernel, Context())[0].source
        r = run_gate(KERNELS / problem, kernel=Path("kernel.cu"), config=cfg, source=src).to_dict()
        kernels = r["stages"]["static"]["archs"]["sm_90"]["kernels"]
        ldgsts = sum(c for k in kernels.values() for op, c in k.get("sass", {}).items() if op.startswith("LDGSTS"))
        assert ldgsts >= 1, (problem, kernels)


# a templated kernel (the element type a template parameter, as in vLLM's kernels): `y` is stored,
# then updated in place
TEMPLATED_ADD = """
#include <cuda_runtime.h>
template <typename V>
__global__ void add_t(const V* a, const V* b, V* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { y[i] = a[i]; y[i] += b[i]; }
}
void vector_add(const float* a, const float* b, float* y, int N) {
    add_t<float><<<(N + 255) / 256, 256>>>(a, b, y, N);
}
"""


def test_templated_element_types_take_hints(tmp_path):
    from mining.gate import GateConfig, run_gate

    ldcg = hint_rewrite("l2_only_load")(TEMPLATED_ADD, Context())
    stwb = hint_rewrite("write_back_store")(TEMPLATED_ADD, Context())
    assert len(ldcg) == 1 and "y[i] = __ldcg(&a[i]); y[i] += __ldcg(&b[i]);" in ldcg[0].source
    assert len(stwb) == 1 and "__stwb(&y[i], (V)(a[i])); y[i] += b[i];" in stwb[0].source
    # y is read back (`+=`): no output-only store hint
    assert hint_rewrite("write_through_store")(TEMPLATED_ADD, Context()) == []
    cfg = GateConfig(executor="cpu", stages=("static",), store=tmp_path)
    for name, mat in (("add_ldcg", ldcg[0]), ("add_stwb", stwb[0])):
        res = cpu_gate("vector_add", mat.source, tmp_path)
        assert res.passed, (name, res.reason)
        r = run_gate(KERNELS / "vector_add", kernel=Path("kernel.cu"), config=cfg, source=mat.source).to_dict()
        ops = {op for k in r["stages"]["static"]["archs"]["sm_90"]["kernels"].values() for op in k.get("sass", {})}
        assert SASS[name] in ops, (name, sorted(ops))
