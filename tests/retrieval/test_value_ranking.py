"""The value ranking of `skills query` (retrieval/value.py), its order and plan (retrieval/plan.py)
and the optimizer's use of them (prompts/optimize_plan.py). Real tree-sitter, real MiniLM / GNN /
duckdb index on a small store: the shipped proxy skills plus a shared tile and a register tile
skill made from them (the house corpus' sgemm expert as their simpler/optimized code)."""
import copy
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "kernel_skills" / "proxy_skills.json"
KERNELS = ROOT / "corpora" / "kernels"
BUDGET = 20  # graph-encoder optimizer steps (the default is 200)


def _records() -> list[dict]:
    recs = json.loads(FIXTURE.read_text())
    for r in recs:
        r["evidence"] = r["evidence"][:2]
    base = next(r for r in recs if r["carrier"] == "vector_load")
    sgemm = (KERNELS / "sgemm" / "kernel.cu").read_text()
    naive = (KERNELS / "sgemm" / "naive.cu").read_text()
    for carrier, op, name, sid in (("shared_tile", "shared_tile_to_global", "Stage operand tiles in shared memory", "sk-sharedtile01"),
                                   ("register_tile", "register_tile_to_dot", "Outer-product register tile", "sk-regtile00001")):
        r = copy.deepcopy(base)
        r.update(skill_id=sid, key=f"{carrier}:{op}", name=name, carrier=carrier, operator=op, before=naive,
                 after=sgemm, diff="", provides=[carrier], requires=[], conflicts=[], intent=name)
        for e in r["evidence"]:
            e.update(problem="sgemm", op_type="gemm", before=naive, after=sgemm, diff="")
        r["scope"]["problems"] = ["sgemm"]
        recs.append(r)
    # one skill with GPU evidence: the measured ratio, not the prior, must decide its effect
    vs = next(r for r in recs if r["carrier"] == "vector_store")
    vs["evidence"][0]["effect"] = [{"device": "H200 (sm_90)", "method": "gpu_timing", "time_ratio": 1.8,
                                    "workload": "w4[M=32768,N=2048]"}]
    vs["evidence"][0]["op_type"] = "softmax"
    return recs


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from retrieval.skill_index import index_skills
    from skills.kernel_store import KernelStore
    from mining.records import Skill
    from skills.store import Store

    root = tmp_path_factory.mktemp("value") / "store"
    st = Store(root)
    ks = KernelStore(st)
    for r in _records():
        ks.put_skill(Skill.model_validate(r))
    st.close()
    st = Store(root)
    index_skills(st, step_budget=BUDGET)
    st.close()
    return root


@pytest.fixture(scope="module")
def searcher(store):
    from retrieval.skill_search import Searcher, SkillIndex

    return Searcher(SkillIndex.open(store))


# --------------------------------------------------------------------------- the kernel's regime
@pytest.mark.parametrize("problem,regime", [("sgemm", "reuse"), ("softmax", "serial"), ("layernorm", "serial"),
                                            ("histogram", "atomic_bins"), ("transpose", "transpose"),
                                            ("vector_add", "memory")])
def test_kernel_regime_from_the_syntax_tree(problem, regime):
    from retrieval.applicability import Checker
    from retrieval.value import kernel_shape

    shape = kernel_shape(Checker((KERNELS / problem / "naive.cu").read_text()))
    assert shape.regimes[0] == regime, shape.to_dict()
    assert regime in shape.to_dict()["regime_meaning"]


def test_effect_measured_before_prior_and_coverage():
    from retrieval.value import measured_effect, prior_effect

    rec = {"evidence": [{"problem": "a", "op_type": "gemm", "effect": [
        {"method": "gpu_timing", "time_ratio": 2.0, "workload": "w[M=4096,N=4096,K=4096]"}]},
        {"problem": "b", "op_type": "norm", "effect": [{"method": "gpu_timing", "time_ratio": 8.0, "workload": "w[N=64]"}]}]}
    m = measured_effect(rec, "gemm", "large")
    assert m["time_ratio"] == 2.0 and m["matched"] == "op type and size regime" and m["n"] == 1
    assert measured_effect(rec, "scan", "large")["matched"] == "size regime, other op types"
    assert measured_effect(rec, "gemm", "large", exclude_problems=["a"])["matched"] == "other op types and sizes"
    assert measured_effect({"evidence": [{"problem": "a", "effect": [{"method": "static"}]}]}, "gemm") is None
    assert prior_effect("shared_tile", ["reuse"])["time_ratio"] > prior_effect("shared_tile", ["memory"])["time_ratio"]
    assert prior_effect("vector_load", ["roofline", "memory"])["time_ratio"] < prior_effect("vector_load", ["memory"])["time_ratio"]


def test_coverage_follows_the_hot_loop():
    from retrieval.applicability import Checker
    from retrieval.value import coverage, kernel_shape

    c = Checker((KERNELS / "layernorm" / "naive.cu").read_text())
    shape = kernel_shape(c)
    loads = c.opportunities("vector_load")
    stores = c.opportunities("vector_store")
    cov_loads, _ = coverage(shape, c.src, loads)
    cov_store, _ = coverage(shape, c.src, stores)
    assert 0.5 < cov_loads <= 1.0 and 0.0 < cov_store < cov_loads  # three loops read, one writes


# --------------------------------------------------------------------------- order and plan
def test_order_puts_enabling_steps_first_and_plan_drops_unsupported():
    from retrieval.plan import make_plan, order

    entries = [("register_tile", 2.0), ("vector_load", 1.0), ("shared_tile", 1.5), ("block_reduce_shared", 0.9)]
    out = order(entries, lambda e: e[0], lambda e: e[1])
    names = [e[0] for e in out]
    assert names.index("shared_tile") < names.index("register_tile")
    assert names[:2] == ["shared_tile", "register_tile"] and names[-1] == "block_reduce_shared"
    hits = [{"kind": "skill", "skill_id": "a", "key": "shared_padding:x", "carrier": "shared_padding", "flags": ["after:shared_tile"],
             "value": {"expected_time_ratio": 1.1}},
            {"kind": "skill", "skill_id": "b", "key": "vector_load:y", "carrier": "vector_load", "flags": [],
             "value": {"expected_time_ratio": 1.001}}]
    plan = make_plan(hits)
    assert plan["steps"] == []
    reasons = {x["key"]: x["reason"] for x in plan["left_out"]}
    assert "shared_tile" in reasons["shared_padding:x"] and "below" in reasons["vector_load:y"]


# --------------------------------------------------------------------------- the answer
def test_sgemm_naive_tile_first_qualifiers_grouped(searcher):
    src = (KERNELS / "sgemm" / "naive.cu").read_text()
    ans = searcher.query(code=src, path="naive.cu", k=8, plan=True)
    assert ans["ranking"]["method"] == "value" and ans["ranking"]["kernel"]["regimes"][0] == "reuse"
    hits = ans["hits"]
    carriers = [h["carrier"] for h in hits]
    assert carriers[0] == "shared_tile" and carriers.index("register_tile") > 0
    rt = hits[carriers.index("register_tile")]
    assert "placed after shared_tile" in rt["why_rank"] and "prior x2.5" in rt["why_rank"]
    also = [h for h in hits if h["kind"] == "also"]
    assert len(also) == 1 and {m["carrier"] for m in also[0]["skills"]} <= {"restrict", "unroll_pragma", "ldg",
                                                                            "launch_bounds", "fast_math"}
    assert not any(h["carrier"] in ("restrict", "ldg", "unroll_pragma", "launch_bounds") for h in hits if h["kind"] == "skill")
    for h in hits:
        assert {"rank", "kind", "skill_id", "key", "value", "why_rank"} <= set(h)
        if h["kind"] == "skill":
            v = h["value"]
            # the fixture's vector_store skill carries a GPU timing; the others only the stated prior
            want = "gpu_evidence" if h["carrier"] == "vector_store" else "static_prior"
            assert v["effect"]["source"] == want and v["expected_time_ratio"] >= 1.0
            assert 0 < v["coverage"] <= 1 and v["applicability"]["how"] in ("detector", "requires", "similar_code")
    steps = ans["plan"]["steps"]
    keys = [s.get("carrier") for s in steps]
    assert keys[0] == "shared_tile" and "shared_tile" in steps[keys.index("register_tile")]["after"]
    assert steps[-1]["kind"] == "also"
    json.dumps(ans)  # plain JSON (no NaN / infinities)


def test_measured_effect_and_similarity_mode(searcher):
    src = (KERNELS / "softmax" / "naive.cu").read_text()
    ans = searcher.query(code=src, k=8, op_type="softmax")
    vs = next(h for h in ans["hits"] if h.get("carrier") == "vector_store")
    assert vs["value"]["effect"]["source"] == "gpu_evidence" and vs["value"]["effect"]["time_ratio"] == 1.8
    assert ans["ranking"]["op_type_from"] == "given"
    old = searcher.query(code=src, k=8, rank="similarity")
    assert old["ranking"]["method"] == "similarity" and all("kind" not in h for h in old["hits"])
    assert any(h["carrier"] == "restrict" for h in old["hits"])  # one hit per skill, qualifiers among them
    from retrieval.skill_search import QueryError

    with pytest.raises(QueryError):
        searcher.query(code=src, rank="popular")


def test_only_qualifiers_are_entries_of_their_own(searcher):
    # nothing structural applies to an already vectorized elementwise kernel with a grid-stride loop
    src = """__global__ void scale(const float* x, float* y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n / 4; i += gridDim.x * blockDim.x) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        v.x *= 2.f; v.y *= 2.f; v.z *= 2.f; v.w *= 2.f;
        reinterpret_cast<float4*>(y)[i] = v;
    }
}
"""
    ans = searcher.query(code=src, k=5)
    assert ans["hits"] and all(h["kind"] == "skill" for h in ans["hits"])
    assert {h["carrier"] for h in ans["hits"]} <= {"restrict", "unroll_pragma", "ldg", "launch_bounds", "fast_math"}


# --------------------------------------------------------------------------- the optimizer's order
def test_optimizer_follows_the_plan():
    from mining.records import Skill
    from prompts.optimize import Candidate, Retrieved
    from prompts.optimize_plan import baseline_order, candidate_key, expand_hits, order_retrieved

    recs = [Skill.model_validate(r) for r in _records()]
    src = (KERNELS / "sgemm" / "naive.cu").read_text()
    out = order_retrieved([Retrieved(r, n) for n, r in enumerate(recs, start=1)], src)
    carriers = [r.skill.carrier for r in out]
    assert carriers[0] == "shared_tile" and carriers[1] == "register_tile"
    quals = [i for i, c in enumerate(carriers) if c in ("restrict", "ldg", "unroll_pragma", "launch_bounds")]
    structural = [i for i, r in enumerate(out) if getattr(r, "value", None) and r.skill.carrier not in
                  ("restrict", "ldg", "unroll_pragma", "launch_bounds", "fast_math")]
    assert max(structural) < min(quals)
    assert [r.rank for r in out] == list(range(1, len(out) + 1))
    cands = [Candidate("add_restrict", "restrict", "a", "deterministic", rank=5, prior=1.1),
             Candidate("stage_matmul_tiles", "shared_tile", "b", "deterministic", rank=1, prior=6.0),
             Candidate("llm_skill", "", "c", "llm", rank=0, prior=1.5)]
    # structural first (issue 20): the LLM's candidate (a skill no rewrite covers) before the qualifier
    assert [c.source for c in sorted(cands, key=candidate_key)] == ["b", "c", "a"]
    lib = baseline_order([Retrieved(r, n) for n, r in enumerate(recs, start=1)], src, "library")
    assert lib[0].skill.carrier in ("shared_tile", "transposed_tile", "coalesced_transpose")
    assert expand_hits({"hits": [{"kind": "skill", "skill_id": "x"}, {"kind": "also", "skills": [{"skill_id": "y"}]}]}) == \
        [{"kind": "skill", "skill_id": "x"}, {"skill_id": "y"}]


# --------------------------------------------------------------------------- site finders the value model reads
def test_two_pass_statistics_and_reread_rows():
    from retrieval.applicability import Checker

    ln = Checker((KERNELS / "layernorm" / "naive.cu").read_text())
    assert [s.line for s in ln.opportunities("single_pass_stats")] == [15]  # the variance pass after the mean
    assert ln.opportunities("online_softmax") == []
    sm = Checker((KERNELS / "softmax" / "naive.cu").read_text())
    assert [s.line for s in sm.opportunities("online_softmax")] == [13]  # the exp-sum after the max pass
    assert sm.opportunities("single_pass_stats") == []
    assert {s.line for s in sm.opportunities("register_cache")} == {13, 14}  # the row read again
    va = Checker((KERNELS / "vector_add" / "naive.cu").read_text())
    assert not any(va.opportunities(c) for c in ("single_pass_stats", "online_softmax", "register_cache"))


TRANSPOSE_VIA_INDICES = """#define TILE 32
__global__ void transpose_naive(float* out, const float* in, int w, int h) {
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    int index_in = x + w * y;
    int index_out = y + h * x;
    out[index_out] = in[index_in];
}
"""
COPY_VIA_INDICES = TRANSPOSE_VIA_INDICES.replace("int index_out = y + h * x;", "int index_out = x + w * y;")
WARP_PER_ROW = """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * blockDim.y + threadIdx.y;
    float s = 0.f;
    for (int i = 0; i < N / 32; ++i) {
        int col = i * 32 + lane;
        s += A[row * N + col] * x[col];
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    if (lane == 0) atomicAdd(&y[row], s);
}
"""
THREAD_PER_ROW = """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    float s = 0.f;
    for (int i = 0; i < N; ++i) s += A[row * N + i] * x[i];
    y[row] = s;
}
"""


def test_transposing_copy_through_index_variables():
    from retrieval.applicability import Checker
    from retrieval.value import kernel_shape

    t = Checker(TRANSPOSE_VIA_INDICES)
    assert [s.line for s in t.opportunities("coalesced_transpose")] == [7]
    assert kernel_shape(t).regimes == ["transpose"]
    c = Checker(COPY_VIA_INDICES)
    assert c.opportunities("coalesced_transpose") == [] and kernel_shape(c).regimes == ["memory"]


def test_lane_partitioned_loop_is_spread_and_a_row_per_thread_is_serial():
    from retrieval.applicability import Checker
    from retrieval.value import kernel_shape

    w = Checker(WARP_PER_ROW)
    shape = kernel_shape(w)
    assert "serial" not in shape.regimes and "atomic" not in shape.regimes  # one guarded atomic per row
    vl = w.opportunities("vector_load")
    assert vl and "neighbouring lanes" in vl[0].reason
    assert w.opportunities("warp_shuffle_reduce") == []
    t = Checker(THREAD_PER_ROW)
    assert kernel_shape(t).regimes == ["serial"]
    assert [s.line for s in t.opportunities("warp_shuffle_reduce")] == [4]


def test_untrusted_constants_are_not_evaluated_when_large():
    from corpora.code.source import Source
    from retrieval.applicability import int_const

    s = Source("#define A 32\n#define B (A * 4)\ntemplate <const int TM = 8> __global__ void k() {}\n")
    assert int_const(s, "B") == 128 and int_const(s, "TM") == 8
    assert int_const(s, "9 ** 99") is None and int_const(s, "1 << 4000") is None and int_const(s, "N") is None


def test_next_step_matching_reads_carriers_only():
    from eval.bench_next_step import entry_carriers, first_match, recall

    ans = {"hits": [{"kind": "skill", "carrier": "vector_store"},
                    {"kind": "also", "skills": [{"carrier": "restrict"}, {"carrier": "ldg"}]},
                    {"kind": "skill", "carrier": "shared_vector_load"}]}
    assert entry_carriers(ans, 3) == [{"vector_store"}, {"restrict", "ldg"}, {"vector_shared_load"}]
    assert first_match(ans, {"ldg"}) == 2 and first_match(ans, {"vector_shared_load"}) == 3
    assert first_match(ans, {"shared_tile"}) is None and first_match(ans, {"vector_shared_load"}, k=2) is None
    rows = [{"answerable": True, "value": {"position": 1}}, {"answerable": True, "value": {"position": 3}},
            {"answerable": False, "value": {"position": None}}, {"answerable": True, "value": {"position": None}}]
    r = recall(rows, "value")
    assert r["recall@1"] == 0.25 and r["recall@3"] == 0.5 and r["answerable"] == 3 and r["recall@3_answerable"] == 0.667


def test_static_stage_and_profile_refine_the_regime():
    from retrieval.applicability import Checker
    from retrieval.value import kernel_shape, prior_effect

    shape = kernel_shape(Checker((KERNELS / "vector_add" / "naive.cu").read_text()))
    assert shape.boundness == "memory" and shape.source == "static"
    static = {"archs": {"sm_90": {"kernels": {"k": {"sass": {"FFMA": 64, "LDG.E.128": 4, "STG.E": 1}}}}}}
    shape.refine_with_static(static)
    assert shape.source == "static+sass" and shape.boundness == "compute" and "16.0 FMA per global load" in shape.notes[0]
    shape.refine_with_profile(time_ms=0.2, bytes_moved=800e6, peak_gbs=4300)  # 4 TB/s of 4.3: at the roofline
    assert shape.regimes[0] == "roofline" and shape.source == "static+profile"
    assert prior_effect("vector_load", shape.regimes)["time_ratio"] < 1.1  # width cannot help at the roofline
    assert prior_effect("online_softmax", shape.regimes)["time_ratio"] == 1.3  # fewer bytes still can
