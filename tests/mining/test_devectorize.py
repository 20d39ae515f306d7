"""Type-directed devectorization (mining/carriers_meaning.py + mining/operators/devectorize.py, issue 19):
wide global accesses found by meaning in spellings the operators were not written for, narrowed
to the memory's scalar type, refused where there is nothing to narrow; one variant gated on the
CPU and its SASS checked for the 16-byte loads being gone."""
from __future__ import annotations

import re

import pytest

from _operator_support import assert_outside_identical, cpu_gate, edited, to_fixpoint
from corpora.code.source import Source
from mining.carriers import detect_carriers
from mining.carriers_meaning import element_type, memory_space, root_of, view_macros, wide_accesses
from mining.operators import get_operator
from mining.operators.devectorize import forward, plans

LOAD, STORE = get_operator("vector_load_to_scalar"), get_operator("vector_store_to_scalar")

# a view macro spelled as a dereference (not `[0]`), over int, copying into registers
MACRO_DEREF = """
#define LD16(p) (*reinterpret_cast<int4 *>(&(p)))
__global__ void k(int* in, int* out, int n) {
    int i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    int r[4];
    LD16(r[0]) = LD16(in[i]);
    for (int j = 0; j < 4; ++j) r[j] *= 2;
    LD16(out[i]) = LD16(r[0]);
}
"""
# a C cast, a declaration, a double2 pointer bound once, an 8-byte struct store from an rvalue
MIXED = """
struct __align__(8) Pair { float a; float b; };
__device__ Pair make_pair(float x) { Pair p; p.a = x; p.b = -x; return p; }
__device__ float sum2(float2 v) { return v.x + v.y; }
__global__ void k(const float* x, const double* d, float* y, double* z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float2 v = *(const float2*)(&x[2 * i]);
    const auto* dq = (const double2*)d;
    double2 w = dq[i];
    Pair* out = reinterpret_cast<Pair*>(y);
    out[i] = make_pair(v.x + v.y);
    z[i] = w.x + w.y + sum2(((const float2*)x)[i]);
}
"""


def _rewrites(op, source):
    return [edited(source, op.apply(source, s), s) for s in op.find_sites(source)]


def test_view_macro_found_by_meaning_whatever_its_spelling():
    src = Source(MACRO_DEREF)
    assert set(view_macros(src)) == {"LD16"}
    accs = wide_accesses(src)
    spaces = sorted((a.space, a.scalar_type) for a in accs)
    assert spaces == [("global", "int"), ("global", "int"), ("local", "int"), ("local", "int")]
    assert {"vector_load", "vector_store"} <= set(detect_carriers(MACRO_DEREF))
    loads, stores = _rewrites(LOAD, MACRO_DEREF), _rewrites(STORE, MACRO_DEREF)
    assert loads == ["for (int ks_k = 0; ks_k < 4; ++ks_k) r[ks_k] = in[i + ks_k];"]
    assert stores == ["for (int ks_k = 0; ks_k < 4; ++ks_k) out[i + ks_k] = r[ks_k];"]
    site = LOAD.find_sites(MACRO_DEREF)[0]
    assert_outside_identical(MACRO_DEREF, LOAD.apply(MACRO_DEREF, site), site)
    assert LOAD.find_sites(MACRO_DEREF) == LOAD.find_sites(MACRO_DEREF)  # deterministic


def test_casts_bound_pointers_struct_types_and_expression_uses():
    loads = _rewrites(LOAD, MIXED)
    assert loads[0] == ("float2 v; for (int ks_k = 0; ks_k < 2; ++ks_k) reinterpret_cast<float *>(&v)[ks_k] = "
                        "x[2 * i + ks_k];")
    assert loads[1] == ("double2 w; for (int ks_k = 0; ks_k < 2; ++ks_k) reinterpret_cast<double *>(&w)[ks_k] = "
                        "reinterpret_cast<const double *>(dq + i)[ks_k];")
    # a wide value read inside a larger expression: assembled by a lambda, then used as before
    assert loads[2].startswith("([&]() { float2 ks_v; for (int ks_k = 0; ks_k < 2; ++ks_k)")
    stores = _rewrites(STORE, MIXED)
    assert stores == ["{ const Pair ks_v = make_pair(v.x + v.y); for (int ks_k = 0; ks_k < (int)(sizeof(Pair) / "
                      "sizeof(float)); ++ks_k) reinterpret_cast<float *>(out + i)[ks_k] = "
                      "reinterpret_cast<const float *>(&ks_v)[ks_k]; }"]
    done, n = to_fixpoint(LOAD, MIXED)
    done, m = to_fixpoint(STORE, done)
    assert (n, m) == (3, 1) and "vector_load" not in detect_carriers(done) and "vector_store" not in detect_carriers(done)


def test_types_and_spaces_read_from_declarations():
    code = """
    struct Holder { const float* src; __device__ float get(int i) const { return src[i]; } };
    __global__ void k(float* g, int n) {
        __shared__ float s[2][64];
        float r[4];
        float* row = s[1];
        const float* gp = g + 4;
        s[0][threadIdx.x] = g[threadIdx.x] + r[0] + row[0] + gp[1];
    }
    """
    src = Source(code)
    subs = {src.code[n.start_byte:n.end_byte].decode(): n for n in src.nodes("subscript_expression")}
    assert element_type(src, subs["g[threadIdx.x]"]) == "float"
    assert element_type(src, subs["s[0][threadIdx.x]"]) == "float"
    spaces = {k: memory_space(src, root_of(v)) for k, v in subs.items() if k in
              ("g[threadIdx.x]", "r[0]", "row[0]", "gp[1]", "src[i]", "s[0][threadIdx.x]")}
    assert spaces == {"g[threadIdx.x]": "global", "r[0]": "local", "row[0]": "shared", "gp[1]": "global",
                      "src[i]": "global", "s[0][threadIdx.x]": "shared"}


@pytest.mark.parametrize("code", [
    # registers reinterpreted as half2 (packed math), no memory access to narrow
    "#define H2(v) (reinterpret_cast<half2 *>(&(v))[0])\n"
    "__global__ void k(half* y) { half a[8], b[8]; H2(a[0]) = __hadd2(H2(b[0]), H2(b[2])); y[0] = a[0]; }",
    # a 4-byte view is not a wide access
    "__global__ void k(short* x, int* y) { y[0] = reinterpret_cast<int*>(x)[threadIdx.x]; }",
    # a compound assignment into wide memory
    "#define F4(v) (reinterpret_cast<float4 *>(&(v))[0])\n"
    "__global__ void k(float* c, float4 v) { F4(c[4 * threadIdx.x]) += v; }",
    # a cast of a pointer to its own type
    "__global__ void k(float* a, float* b) { b[0] = reinterpret_cast<float*>(a)[1]; }",
    # a copy between shared memory and registers only (nvcc re-vectorizes what it can prove aligned)
    "__global__ void k(float* y) { __shared__ float s[256]; float r[4];"
    " *reinterpret_cast<float4*>(&r[0]) = *reinterpret_cast<float4*>(&s[4 * threadIdx.x]); y[0] = r[1]; }",
    # the scalar type under the access cannot be read from any declaration
    "__global__ void k(void* p, float4* q) { float4 v = reinterpret_cast<float4*>(p)[0]; q[0].x = v.x; }",
])
def test_refused_sites(code):
    assert LOAD.find_sites(code) == [] and STORE.find_sites(code) == [], code


def test_house_spelling_keeps_its_own_rewrite():
    """`reinterpret_cast<const float4*>(a)` bound to a pointer is the house operator's site; the
    generic rewrite does not offer a second, overlapping edit for it."""
    from _operator_support import read_kernel
    src = read_kernel("vector_add")
    reps = _rewrites(LOAD, src)
    assert len(reps) == 2 and all(r.startswith("make_float4(") for r in reps)


# a vector_add in an outside spelling: a view macro over a plain float pointer, a scalar tail
VIEW_ADD = """
#include <cuda_runtime.h>
#define VEC(x) (reinterpret_cast<float4 *>(&(x))[0])
__global__ void add4(float* a, float* b, float* y, int n) {
    int i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 3 < n) {
        float4 p = VEC(a[i]);
        float4 q = VEC(b[i]);
        float4 r;
        r.x = p.x + q.x; r.y = p.y + q.y; r.z = p.z + q.z; r.w = p.w + q.w;
        VEC(y[i]) = r;
    } else {
        for (; i < n; ++i) y[i] = a[i] + b[i];
    }
}
void vector_add(const float* a, const float* b, float* y, int N) {
    add4<<<(N + 1023) / 1024, 256>>>(const_cast<float*>(a), const_cast<float*>(b), y, N);
}
"""


def test_devectorized_kernel_passes_the_gate_and_its_16_byte_accesses_are_gone(tmp_path):
    from mining.gate import GateConfig, run_gate
    from _operator_support import KERNELS
    from pathlib import Path

    out, n = to_fixpoint(LOAD, VIEW_ADD)
    out, m = to_fixpoint(STORE, out)
    assert (n, m) == (2, 1)
    res = cpu_gate("vector_add", out, tmp_path)
    assert res.passed, res.reason
    cfg = GateConfig(executor="cpu", stages=("static",), store=tmp_path)
    static = {}
    for label, text_ in (("expert", VIEW_ADD), ("end", out)):
        r = run_gate(KERNELS / "vector_add", kernel=Path("kernel.cu"), config=cfg, source=text_).to_dict()
        kernels = r["stages"]["static"]["archs"]["sm_90"]["kernels"]
        sass = {}
        for k in kernels.values():
            for op, c in k.get("sass", {}).items():
                sass[op] = sass.get(op, 0) + c
        static[label] = sass
    def wide(s):
        return sum(c for op, c in s.items() if re.match(r"(LDG|STG)\.E\.128", op))
    assert wide(static["expert"]) == 3 and wide(static["end"]) == 0


def test_forward_vectorizes_a_copy_loop_behind_an_alignment_check():
    loop = ("__global__ void k(const float* a, float* y) { float r[4]; int i = 4 * threadIdx.x;\n"
            "  for (int j = 0; j < 4; ++j) r[j] = a[i + j];\n  y[i] = r[0] + r[3]; }")
    mats = forward(loop)
    assert len(mats) == 1
    new = mats[0].source
    assert "*reinterpret_cast<uint4 *>(&r[0]) = *reinterpret_cast<const uint4 *>(&a[i]);" in new
    assert "% 16 == 0" in mats[0].guards[0] and "else for (int j = 0; j < 4; ++j) r[j] = a[i + j];" in new
    # 12 bytes: no vector type moves them in one access
    assert forward(loop.replace("j < 4", "j < 3")) == []
    # the devectorized form round-trips to one wide access again
    back = forward(to_fixpoint(LOAD, MACRO_DEREF)[0])
    assert back and "uint4" in back[0].source


def test_plans_are_deterministic_and_one_per_statement():
    assert [p.text for p in plans(Source(MIXED))] == [p.text for p in plans(Source(MIXED))]
    copy = "#define W(v) (reinterpret_cast<uint4 *>(&(v))[0])\n__global__ void k(unsigned* a, unsigned* b) { W(b[4]) = W(a[0]); }"
    ps = plans(Source(copy))
    assert len(ps) == 1 and ps[0].kind == "load"
