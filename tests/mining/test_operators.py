"""Deoptimization operators: site detection on corpus kernels, the rewrite itself, byte identity
outside the edited range, and a real CPU-executor gate pass of the rewritten kernel."""
from pathlib import Path

import pytest

from mining.carriers import carrier_names
from mining.operators import all_operators, get_operator

from _operator_support import (
    KERNELS, cpu_gate,
    assert_outside_identical as _assert_outside_identical, read_kernel as _read, to_fixpoint as _to_fixpoint)


# operator -> (corpus problem for site detection, expected site count there, old text at first site,
#              expected substring after the first rewrite, problem gated on the CPU)
CASES = {
    "drop_unroll_pragma": ("tiled_matmul", 1, "#pragma unroll", "        for (int k = 0; k < TILE; ++k) acc +=", "tiled_matmul"),
    "drop_restrict": ("vector_add", 1, "(const float* __restrict__ a", "add_vec4(const float* a, const float* b,\n", "vector_add"),
    "ldg_to_plain_load": ("transpose", 1, "__ldg(x + (size_t)r * C + c)", "= *(x + (size_t)r * C + c);", "transpose"),
    "drop_launch_bounds": ("vector_add", 1, "__launch_bounds__(256) ", "__global__ void add_vec4(", "vector_add"),
    "fast_math_to_precise": ("bias_gelu", 2, "__fdividef(h, 1.0f + __expf(u2))", "return ((h) / (1.0f + __expf(u2)));", "bias_gelu"),
    "drop_shared_padding": ("transpose", 1, "TILE + 1", "__shared__ float tile[TILE][TILE];", "transpose"),
    "vector_load_to_scalar": ("reduce_sum", 5, "__ldg(x4 + i)",
                              "float4 v0 = make_float4(__ldg((x) + 4 * (i)), __ldg((x) + 4 * (i) + 1), "
                              "__ldg((x) + 4 * (i) + 2), __ldg((x) + 4 * (i) + 3));", "vector_add"),
    "vector_store_to_scalar": ("vector_add", 1, "y4[i] = make_float4(",
                               "{ const float4 ks_v = (make_float4(x.x + z.x, x.y + z.y, x.z + z.z, x.w + z.w)); "
                               "(y)[4 * (i)] = ks_v.x;", "vector_add"),
    "grid_stride_to_single": ("vector_add", 2, "for (int i = blockIdx.x",
                              "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n4) {", "vector_add"),
    "drop_grid_clamp": ("vector_add", 1, "    if (blocks > 132 * 8) blocks = 132 * 8;",
                        "int blocks = (N / 4 + 255) / 256;\n    if (blocks < 1) blocks = 1;", "vector_add"),
}
PARTIAL = {"drop_grid_clamp"}  # removes the launch half of grid_stride; the loop stays


def test_registry():
    ops = all_operators()
    names = [op.name for op in ops]
    assert len(names) == len(set(names)) >= 9
    assert set(CASES) <= set(names)
    assert [op.name for op in all_operators()] == names  # deterministic order
    assert all(op.carrier for op in ops)


@pytest.mark.parametrize("name", sorted(CASES))
def test_sites_and_rewrite(name):
    problem, count, old_text, expected, _ = CASES[name]
    op = get_operator(name)
    source = _read(problem)
    sites = op.find_sites(source)
    assert len(sites) == count, [s.excerpt for s in sites]
    assert sites == op.find_sites(source)  # deterministic
    site = sites[0]
    assert site.carrier == op.carrier and site.function is not None
    assert source.encode()[site.start_byte:site.end_byte].decode().startswith(old_text) or \
        old_text in source.encode()[site.start_byte:site.end_byte].decode()
    new = op.apply(source, site)
    assert expected in new, new
    _assert_outside_identical(source, new, site)
    assert op.apply(source, site) == new  # deterministic


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixpoint_removes_the_carrier(name):
    problem = CASES[name][0]
    op = get_operator(name)
    before = _read(problem)
    assert op.carrier in carrier_names(before)
    after, n = _to_fixpoint(op, before)
    assert n >= 1 and not op.find_sites(after)
    if name in PARTIAL:
        assert "132 * 8" not in after.split("void vector_add")[1]
    else:
        assert op.carrier not in carrier_names(after)


def test_no_sites_in_naive_kernels():
    for op in all_operators():
        if op.name in ("grid_stride_to_single", "drop_grid_clamp"):
            continue
        for p in sorted(KERNELS.iterdir()):
            if (p / "naive.cu").is_file():
                assert op.find_sites(_read(p.name, "naive.cu")) == [], (op.name, p.name)


def test_apply_rejects_a_foreign_site():
    op = get_operator("ldg_to_plain_load")
    src = _read("transpose")
    site = op.find_sites(src)[0]
    with pytest.raises(ValueError):
        op.apply(_read("vector_add"), site)


# ----------------------------------------------------------------------------- synthetic snippets

SYNTHETIC = {
    "drop_unroll_pragma": ("__global__ void k(float* y) {\n    #pragma unroll 4 // keep me\n    for (int i = 0; i < 8; ++i) y[i] = 0;\n}\n",
                           "__global__ void k(float* y) {\n    for (int i = 0; i < 8; ++i) y[i] = 0;\n}\n"),
    "drop_restrict": ("__global__ void k(const float* __restrict__ x, float * __restrict__ y) { y[0] = x[0]; }",
                      "__global__ void k(const float* x, float * y) { y[0] = x[0]; }"),
    "ldg_to_plain_load": ("__global__ void k(const float* x, float* y) { y[0] = __ldg(&x[1]) + 1.0f; }",
                          "__global__ void k(const float* x, float* y) { y[0] = *(&x[1]) + 1.0f; }"),
    "drop_launch_bounds": ("__global__ void __launch_bounds__(128, 4) k(float* y) { y[0] = 0; }",
                           "__global__ void k(float* y) { y[0] = 0; }"),
    "fast_math_to_precise": ("__device__ float f(float a, float b) { return __fdividef(a, b + 1.0f); }",
                             "__device__ float f(float a, float b) { return ((a) / (b + 1.0f)); }"),
    "drop_shared_padding": ("__global__ void k(float* y) { __shared__ float t[16][16 + 1]; t[0][0] = 1; y[0] = t[0][0]; }",
                            "__global__ void k(float* y) { __shared__ float t[16][16]; t[0][0] = 1; y[0] = t[0][0]; }"),
    "vector_load_to_scalar": ("__global__ void k(const float* x, float* y) { const float4* x4 = reinterpret_cast<const float4*>(x); float4 v = x4[threadIdx.x]; y[0] = v.x; }",
                              "__global__ void k(const float* x, float* y) { const float4* x4 = reinterpret_cast<const float4*>(x); float4 v = make_float4((x)[4 * (threadIdx.x)], (x)[4 * (threadIdx.x) + 1], (x)[4 * (threadIdx.x) + 2], (x)[4 * (threadIdx.x) + 3]); y[0] = v.x; }"),
    "vector_store_to_scalar": ("__global__ void k(int* y) { *reinterpret_cast<int2*>(y + 2) = make_int2(1, 2); }",
                               "__global__ void k(int* y) { { const int2 ks_v = (make_int2(1, 2)); (y + 2)[0] = ks_v.x; (y + 2)[1] = ks_v.y; } }"),
    "drop_grid_clamp": ("__global__ void k(float* y) {}\nvoid f(float* y, int n) {\n    int b = n;\n    if (b > 64) b = 64;  // cap\n    k<<<b, 32>>>(y);\n}\n",
                        "__global__ void k(float* y) {}\nvoid f(float* y, int n) {\n    int b = n;\n    k<<<b, 32>>>(y);\n}\n"),
    "grid_stride_to_single": ("__global__ void k(float* y, int n) { for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = 0; }",
                              "__global__ void k(float* y, int n) { { int i = threadIdx.x; if (i < n) y[i] = 0; } }"),
}


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_synthetic_rewrite(name):
    before, after = SYNTHETIC[name]
    op = get_operator(name)
    sites = op.find_sites(before)
    assert sites, name
    assert op.apply(before, sites[0]) == after


def test_operators_skip_comments_and_unsafe_forms():
    assert get_operator("ldg_to_plain_load").find_sites("// __ldg(x)\n/* __ldg(y) */ int a;") == []
    assert get_operator("drop_unroll_pragma").find_sites("// #pragma unroll\nint a;") == []
    # a vector cast of a byte buffer is not split into components (element k of a float4 is not c[k]);
    # the type-directed rewrite moves the same 16 bytes one char at a time instead (issue 19)
    src = "__global__ void k(const char* c, float* y) { float4 v = *reinterpret_cast<const float4*>(c); y[0] = v.x; }"
    op = get_operator("vector_load_to_scalar")
    reps = [op.apply(src, s) for s in op.find_sites(src)]
    assert len(reps) == 1 and "make_float4" not in reps[0]
    assert "for (int ks_k = 0; ks_k < 16; ++ks_k) reinterpret_cast<char *>(&v)[ks_k] = " in reps[0]
    # a grid-stride loop with `continue` would not compile as an `if`
    loop = "__global__ void k(float* y, int n) { for (int i = threadIdx.x; i < n; i += blockDim.x) { if (i & 1) continue; y[i] = 0; } }"
    assert get_operator("grid_stride_to_single").find_sites(loop) == []
    # a shared dimension without padding is not a site
    assert get_operator("drop_shared_padding").find_sites("__global__ void k() { __shared__ float t[32][32]; }") == []


# ----------------------------------------------------------------------------- gate

@pytest.fixture(scope="module")
def gate_store(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("operator-gate-store")


@pytest.mark.parametrize("name", sorted(CASES))
def test_rewritten_kernel_passes_the_gate(name, gate_store):
    problem = CASES[name][4]
    op = get_operator(name)
    source, n = _to_fixpoint(op, _read(problem))
    assert n >= 1
    result = _gate(problem, source, gate_store)
    assert result.passed, result.reason


def test_gate_rejects_grid_stride_removal_when_launch_does_not_cover(gate_store):
    """grid_stride_to_single leaves the launch alone; with a clamped grid the rewrite drops elements
    and the gate (not the operator) must say so."""
    capped = _read("vector_add").replace("if (blocks > 132 * 8) blocks = 132 * 8;", "if (blocks > 1) blocks = 1;")
    assert capped != _read("vector_add")
    assert _gate("vector_add", capped, gate_store).passed  # the grid-stride expert copes with one block
    single, n = _to_fixpoint(get_operator("grid_stride_to_single"), capped)
    assert n == 2
    result = _gate("vector_add", single, gate_store)
    assert not result.passed
    assert result.reason
    # with its launch change (the clamp deleted) the one-element form is correct again
    fixed, n = _to_fixpoint(get_operator("drop_grid_clamp"), single)
    assert n == 1
    assert _gate("vector_add", fixed, gate_store).passed


def test_grid_clamp_keeps_hardware_limits():
    src = "__global__ void k(float* y) {}\nvoid f(float* y, int gy) {\n    if (gy > 65535) gy = 65535;\n    dim3 g(1, gy);\n    k<<<g, 32>>>(y);\n}\n"
    assert get_operator("drop_grid_clamp").find_sites(src) == []


def _gate(problem: str, source: str, store: Path):
    return cpu_gate(problem, source, store, seeds=None)  # the gate's default seeds


def test_pairs_hold_both_directions_in_one_module():
    from mining.operators.registry import PAIRS, all_rewrites, inverses, rewrites_for

    rewrites = all_rewrites()
    for pair in PAIRS:
        module = pair.operator.__module__ if pair.operator is not None else pair.rewrites[0].fn.__module__
        for r in pair.rewrites:  # a forward half lives beside the operator it inverts
            assert r.fn.__module__ == module and r.carrier and r.prior > 0
        assert all(n in rewrites for n in pair.inverses)
    # every forward rewrite inverts some operator or serves some carrier
    inverted = {n for p in PAIRS for n in p.inverses}
    forward_only = {r.name for p in PAIRS if p.operator is None for r in p.rewrites}
    assert all(n in inverted or r.serves or n in forward_only for n, r in rewrites.items())
    assert inverses("drop_grid_clamp") == ["grid_stride"]  # the clamp goes back with its loop
    assert rewrites_for("warp_atomic_to_thread_atomics", "atomic_per_block") == ["warp_aggregate_atomics", "privatize_atomics",
                                                                              "warp_per_row"]
    # inverted (block_scan_to_thread_totals), then served
    assert rewrites_for("llm", "block_scan") == ["warp_totals_block_scan", "warp_scan"]


def test_sub_edits_are_edits_not_bare_tuples():
    """One edit type (issue 16): splice_range applies Edits and refuses a (start, end, text) tuple."""
    from corpora.code.edit import Edit
    from corpora.code.source import Source
    from mining.operators.rewrite_util import splice_range

    src = Source("int a = 1; int b = 2;")
    assert splice_range(src, 0, 10, [Edit(8, 9, "7")]) == "int a = 7;"
    with pytest.raises(TypeError):
        splice_range(src, 0, 10, [(8, 9, "7")])
