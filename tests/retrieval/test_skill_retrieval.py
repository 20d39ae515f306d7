"""Kernel-skill retrieval: indexing (incremental, retrain policy), hybrid search, applicability
filters, the JSON answer, bad input. Real MiniLM, real chromadb, real duckdb; the skills are the
gate-free proxy records of tests/fixtures/kernel_skills (eval/skill_fixtures.py made them)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "kernel_skills" / "proxy_skills.json"
KERNELS = ROOT / "corpora" / "kernels"
BUDGET = 20  # graph-encoder optimizer steps in tests (the default is 200)


def _skills(max_evidence: int = 2):
    from mining.records import Skill

    out = []
    for d in json.loads(FIXTURE.read_text()):
        d["evidence"] = d["evidence"][:max_evidence]
        out.append(Skill.model_validate(d))
    return out


def _put(root: Path, skills) -> None:
    from skills.kernel_store import KernelStore
    from skills.store import Store

    st = Store(root)
    ks = KernelStore(st)
    for s in skills:
        ks.put_skill(s)
    st.close()


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """A store with the proxy skills plus one skill with a probed precondition, indexed once."""
    from mining.records import Precondition, Risk
    from retrieval.skill_index import index_skills
    from skills.store import Store

    root = tmp_path_factory.mktemp("retrieval") / "store"
    skills = _skills()
    vec = next(s for s in skills if s.carrier == "vector_load").model_copy(deep=True)
    vec.skill_id, vec.key, vec.variant = "sk-probedvec000", "vector_load:vector_load_to_scalar:probed", "probed"
    vec.name = "Vectorize global loads (unguarded)"
    vec.preconditions = [Precondition(kind="divisible", axis="N", value=4, text="N % 4 == 0", status="discovered")]
    vec.risks = [Risk(text="violating N % 4 == 0: the optimized form fails", probe={"N": 1001}, failure="wrong output")]
    skills.append(vec)
    _put(root, skills)
    st = Store(root)
    report = index_skills(st, step_budget=BUDGET)
    st.close()
    return root, report


def _searcher(root):
    from retrieval.skill_search import Searcher, SkillIndex

    return Searcher(SkillIndex.open(root))


@pytest.fixture(scope="module")
def searcher(indexed):
    return _searcher(indexed[0])


def test_index_report_and_snapshot(indexed):
    root, report = indexed
    assert report.n_skills == 11 and report.n_docs >= 20
    assert report.text["embedded"] == report.n_docs
    assert report.graph["status"] == "trained" and report.graph["reason"] == "no model yet"
    assert report.graph["numpy_min_cosine"] > 0.999  # numpy forward == torch forward
    snap = Path(report.snapshot["path"])
    man = json.loads((snap / "manifest.json").read_text())
    assert man["n_docs"] == report.n_docs and man["minilm_numpy_min_cosine"] > 0.999
    assert (root / "models" / "kernel-skill-gnn.pt").is_file() and (root / "models" / "kernel-skill-gnn.npz").is_file()
    from skills.store import Store

    st = Store(root, read_only=True)
    m = st.model("kernel-skill-gnn")
    st.close()
    assert m["metadata"]["train"]["seed"] == 0 and m["data_fingerprint"]
    from retrieval.vector_index import VectorIndex

    vi = VectorIndex(root / "chroma")
    col = vi.collection("kernel_skill_text", kind="text", max_seq_length=256)
    assert col.count() == report.n_docs
    assert col.configuration_json["embedding_function"]["name"] == "kernel-skills-minilm"


def test_incremental_index_and_retrain_policy(indexed, tmp_path):
    import shutil

    from retrieval.skill_index import index_skills
    from skills.store import Store

    root = tmp_path / "copy"
    shutil.copytree(indexed[0], root)
    st = Store(root)
    again = index_skills(st, step_budget=BUDGET)
    assert again.text["embedded"] == 0 and again.text["deleted"] == 0
    assert again.graph["status"] == "unchanged" and "kept the model" in again.graph["reason"]
    # one changed exemplar: one new document, the old one deleted, the model kept (small change)
    from skills.kernel_store import KernelStore

    ks = KernelStore(st)
    s = ks.skill("restrict:drop_restrict")
    s.evidence = s.evidence[:1]
    s.before = s.before + "\n// edited"
    ks.put_skill(s)
    inc = index_skills(st, [s], step_budget=BUDGET)
    assert inc.text["embedded"] >= 1 and inc.text["deleted"] >= 1
    assert inc.graph["status"] == "unchanged"
    forced = index_skills(st, retrain=True, step_budget=BUDGET)
    assert forced.graph["status"] == "trained" and forced.graph["reason"] == "retrain requested"
    st.close()


def test_code_query_finds_sites_with_lines(searcher):
    src = (KERNELS / "softmax" / "naive.cu").read_text()
    ans = searcher.query(code=src, path="naive.cu", k=10, rank="similarity")  # one hit per skill
    keys = [h["key"] for h in ans["hits"]]
    assert "fast_math:fast_math_to_precise" in keys and "restrict:drop_restrict" in keys
    fm = next(h for h in ans["hits"] if h["carrier"] == "fast_math")
    assert [s["line"] for s in fm["applies_at"]] == [13, 14]  # the two expf calls
    assert "expf" in fm["applies_at"][0]["code"] and fm["why"].startswith("line 13")
    assert fm["exemplar"]["before"] and fm["exemplar"]["after"] and "__expf" in fm["exemplar"]["after"]
    rs = next(h for h in ans["hits"] if h["carrier"] == "restrict")
    assert rs["applies_at"][0]["line"] == 5 and "x, y" in rs["applies_at"][0]["reason"]
    for h in ans["hits"]:  # the contract of docs/query.md
        assert {"rank", "skill_id", "key", "name", "intent", "carrier", "score", "ranks", "why", "applies_at",
                "preconditions", "effect", "evidence", "risks", "exemplar", "flags"} <= set(h)
        assert h["evidence"]["n"] >= 1
    # no shared array in the naive softmax: padding it has no site here
    assert any(f["carrier"] == "shared_padding" and f["reason"] == "no_site" for f in ans["filtered"]) or \
        "shared_padding:drop_shared_padding" not in keys


def test_modes_and_determinism(indexed, searcher):
    root, s = indexed[0], searcher
    src = (KERNELS / "sgemm" / "naive.cu").read_text()
    runs = [[h["skill_id"] for h in s.query(code=src, k=5, mode=m, rank="similarity")["hits"]]
            for m in ("bm25", "text", "graph", "fused")]
    assert all(len(r) == 5 for r in runs)
    assert runs[3] == [h["skill_id"] for h in _searcher(root).query(code=src, k=5, rank="similarity")["hits"]]
    value = [h["skill_id"] for h in s.query(code=src, k=5)["hits"]]  # the value ranking: deterministic too
    assert value == [h["skill_id"] for h in _searcher(root).query(code=src, k=5)["hits"]]
    txt = s.query(text="use float4 vector loads for wide global memory access", k=3)
    assert txt["hits"][0]["carrier"] in ("vector_load", "vector_store") and txt["hits"][0]["applies_at"] == []


def test_carrier_already_present_is_filtered(searcher):
    src = (KERNELS / "transpose" / "kernel.cu").read_text()
    ans = searcher.query(code=src, k=10)
    reasons = {f["carrier"]: f for f in ans["filtered"]}
    for carrier in ("restrict", "launch_bounds", "ldg", "unroll_pragma", "shared_padding"):
        assert reasons[carrier]["reason"] == "already_applied", carrier
        assert reasons[carrier]["present_at"]
    assert all(h["carrier"] not in ("restrict", "launch_bounds", "ldg") for h in ans["hits"])


def test_preconditions_checked_against_axes(searcher):
    s = searcher
    src = (KERNELS / "softmax" / "naive.cu").read_text()
    bad = s.query(code=src, k=10, axes={"M": 4096, "N": 1000 + 1}, rank="similarity")
    f = next(f for f in bad["filtered"] if f["skill_id"] == "sk-probedvec000")
    assert f["reason"] == "precondition_violated" and "N % 4 == 0" in f["detail"] and "N=1001" in f["detail"]
    good = s.query(code=src, k=12, axes={"M": 4096, "N": 1024}, rank="similarity")
    h = next(h for h in good["hits"] if h["skill_id"] == "sk-probedvec000")
    pre = h["preconditions"][0]
    assert pre["check"] == "satisfied" and pre["detail"] == "N=1024"
    assert h["risks"][0]["probe"] == {"N": 1001}
    unknown = s.query(code=src, k=12, rank="similarity")
    h = next(h for h in unknown["hits"] if h["skill_id"] == "sk-probedvec000")
    assert h["preconditions"][0]["check"] == "unknown"


def test_conflicts_and_requires():
    from retrieval.applicability import Checker

    code = (KERNELS / "softmax" / "naive.cu").read_text()
    c = Checker(code)
    # a carrier no detector finds sites for (its site is the most similar window); double buffering has
    # one now (a loop over staged operands), which a softmax lacks
    skill = {"carrier": "halo_tile", "operator": "x", "conflicts": ["fast_math"], "requires": ["shared_tile"],
             "before": "for (int k = 0; k < K; ++k)", "evidence": []}
    assert c.check(skill).status == "applicable"
    assert c.check(skill, taken={"fast_math"}).status == "conflict"  # a higher-ranked hit introduces it
    assert "requires:shared_tile" in c.check(skill).flags
    fast = Checker(code.replace("expf(", "__expf("))
    assert fast.check(skill).status == "conflict"  # the code already has fast_math


def test_parse_error_is_located(searcher):
    from retrieval.skill_search import QueryError

    src = "__global__ void k(float* x) {\n  x[0] = (1.0f;\n}\n"
    with pytest.raises(QueryError) as e:
        searcher.query(code=src, path="bad.cu")
    assert e.value.kind == "parse_error" and e.value.locations[0]["line"] == 2
    assert "bad.cu:2:" in e.value.message


def test_missing_and_empty_store_say_how_to_build(tmp_path):
    from retrieval.skill_index import IndexError_, index_skills
    from retrieval.skill_search import QueryError, SkillIndex
    from skills.store import Store

    with pytest.raises(QueryError) as e:
        SkillIndex.open(tmp_path / "nothing")
    assert e.value.kind == "no_store" and "skills mine" in e.value.message
    st = Store(tmp_path / "empty")
    st.con  # creates the tables
    with pytest.raises(IndexError_) as e2:
        index_skills(st)
    assert "skills mine corpora/kernels" in str(e2.value)
    st.close()
    with pytest.raises(QueryError) as e3:
        SkillIndex.open(tmp_path / "empty")
    assert e3.value.kind == "no_index" and "skills index" in e3.value.message


def test_server_roundtrip_and_cli_uses_it(indexed, searcher):
    import threading

    from retrieval.server import find_server, request, serve

    root, _ = indexed
    ready = threading.Event()
    t = threading.Thread(target=serve, args=(root,), kwargs={"ready": lambda i: ready.set()}, daemon=True)
    t.start()
    assert ready.wait(60)
    info = find_server(root)
    assert info is not None and info["pid"] == os.getpid()
    src = (KERNELS / "softmax" / "naive.cu").read_text()
    ans = request(info, "POST", "/query", {"code": src, "path": "naive.cu", "k": 5})
    assert ans["_status"] == 200 and ans["served_by"]["kind"] == "server"
    local = searcher.query(code=src, path="naive.cu", k=5)
    assert [h["skill_id"] for h in ans["hits"]] == [h["skill_id"] for h in local["hits"]]
    err = request(info, "POST", "/query", {"code": "__global__ void k( {", "path": "bad.cu"})
    assert err["_status"] == 400 and err["error"]["kind"] == "parse_error"
    first = next(h for h in ans["hits"] if h["kind"] == "skill")  # (an "also" entry groups qualifier skills)
    rec = request(info, "GET", "/skills/" + first["skill_id"])
    assert rec["skill_id"] == first["skill_id"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "cli", "query", "--code", str(KERNELS / "softmax" / "naive.cu"),
                          "--store", str(root), "--json"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["served_by"]["kind"] == "server"
    # the console entry's thin client: the same answer, and nothing heavy imported (no CLI
    # framework, numpy, pydantic, duckdb or encoders)
    entry = [sys.executable, "-X", "importtime", str(ROOT / "skills_entry.py"), "query"]
    out = subprocess.run(entry + ["--code", str(KERNELS / "softmax" / "naive.cu"), "--store", str(root), "--json"],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    thin = json.loads(out.stdout)
    assert thin["served_by"]["kind"] == "server" and [h["skill_id"] for h in thin["hits"]] == \
        [h["skill_id"] for h in local["hits"]]
    imported = {ln.split("|")[-1].strip() for ln in out.stderr.splitlines() if ln.startswith("import time:")}
    heavy = {"typer", "numpy", "pydantic", "duckdb", "onnxruntime", "torch", "chromadb", "rich"}
    assert not heavy & imported, heavy & imported
    out = subprocess.run([sys.executable, str(ROOT / "skills_entry.py"), "query", "--text", "x", "--mode", "bogus", "--store", str(root)],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("error: unknown mode 'bogus'"), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    request(info, "POST", "/shutdown")
    t.join(10)
    assert not (root / "serve.json").exists()


def test_import_updates_the_index(indexed, tmp_path):
    """`skills import` re-indexes: a hand-written skill is searchable at once (no stale index)."""
    import shutil

    from typer.testing import CliRunner

    from cli import app
    from retrieval.skill_search import SkillIndex

    root = tmp_path / "store"
    shutil.copytree(indexed[0], root)
    before = SkillIndex.open(root).n_skills
    hand = tmp_path / "hand" / "keep-the-row-max-in-a-register"
    hand.mkdir(parents=True)
    (hand / "SKILL.md").write_text(
        "---\nname: keep-the-row-max-in-a-register\ndescription: Keep a row's running max in a register.\n"
        "metadata:\n  carrier: register_cache\n  operator: manual\n---\n\n# Keep the row max in a register\n\n"
        "Keep the running max in a register instead of re-reading it.\n\n## How to apply\n\n"
        "### Simpler form (before)\n\n```cuda\nfor (int j = 0; j < N; ++j) y[j] = x[j] - m[row];\n```\n\n"
        "### Optimized form (after)\n\n```cuda\nfloat mr = m[row];\nfor (int j = 0; j < N; ++j) y[j] = x[j] - mr;\n```\n")
    r = CliRunner().invoke(app, ["import", str(tmp_path / "hand"), "--store", str(root)])
    assert r.exit_code == 0, r.output
    assert f"index updated: {before + 1} skills searchable" in r.stdout
    idx = SkillIndex.open(root)
    assert idx.n_skills == before + 1 and idx.find("register_cache:manual") is not None
    r = CliRunner().invoke(app, ["show", "keep-the-row-max-in-a-register", "--store", str(root), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["carrier"] == "register_cache", r.output


def test_cli_bad_input_exit_codes(indexed, tmp_path):
    root, _ = indexed
    bad = tmp_path / "bad.cu"
    bad.write_text("__global__ void k(float* x) {\n  x[0] = (1.0f;\n}\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "cli", "query", "--code", str(bad), "--store", str(root), "--json",
                          "--no-server"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 2
    err = json.loads(out.stdout)["error"]
    assert err["kind"] == "parse_error" and err["locations"][0]["line"] == 2
    out = subprocess.run([sys.executable, "-m", "cli", "query", "--text", "vectorize loads", "--store",
                          str(tmp_path / "none")], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 2 and "skills mine" in out.stderr


def test_fusion_weights_calibrated_leave_one_problem_out(indexed, tmp_path):
    import shutil

    import numpy as np

    from retrieval.skill_fusion import calibrate, is_current, recalibrate, weight_grid
    from retrieval.snapshot import current_snapshot
    from retrieval.skill_search import Searcher, SkillIndex

    root = tmp_path / "copy"
    shutil.copytree(indexed[0], root)
    snap = current_snapshot(root)
    probs = ("attention_fwd", "bias_gelu", "exclusive_scan")
    queries = [(p, (KERNELS / p / "naive.cu").read_text()) for p in probs]
    cal = calibrate(snap, queries)
    assert cal["chosen"] == "grid" and cal["queries"] == list(probs)
    assert cal["weights"] in weight_grid()
    assert cal["objective"]["mrr"] >= cal["equal_weights_objective"]["mrr"]  # equal weights are in the grid
    assert calibrate(snap, queries)["weights"] == cal["weights"]  # deterministic
    assert calibrate(snap, queries[:2])["chosen"].startswith("equal")  # too few problems: no choice made
    # held-out documents are masked: a skill never scores above its unmasked score, some score lower
    s = Searcher(SkillIndex(snap))
    code = queries[0][1]
    units = s.units(code)
    full, _ = s.scores(code=code, units=units)
    drop = np.array([p == "attention_fwd" for p in s.index.docs["problem"]])
    assert drop.any() and not drop.all()
    masked, _ = s.scores(code=code, units=units, drop_docs=drop)
    for m in ("bm25", "text", "graph"):
        assert np.all(masked[m] <= full[m])
    assert any(np.any(masked[m] < full[m]) for m in ("bm25", "text", "graph"))
    # published: the searcher fuses with the calibrated weights
    assert not is_current(json.loads((snap / "manifest.json").read_text()))  # the fixture store has no lineages
    recalibrate(snap, queries)
    assert is_current(json.loads((snap / "manifest.json").read_text()))
    s2 = Searcher(SkillIndex(snap))
    assert s2.weights() == cal["weights"]
    sc, _ = s2.scores(code=code, units=s2.units(code))
    order = s2.rankings(sc, cal["weights"])["fused"]
    hits = s2.query(code=code, k=3, rank="similarity")["hits"]
    top = [s2.index.table["skill_id"][i] for i in order]
    assert [h["skill_id"] for h in hits] == [t for t in top if t in {h["skill_id"] for h in hits}][:3]


def test_edited_kernel_reuses_chunk_embeddings(indexed):
    s = _searcher(indexed[0])
    src = (KERNELS / "softmax" / "naive.cu").read_text()
    assert s.embedder.backend == "onnxruntime-int8"  # the default encoder (int8 weights: close to numpy's, faster)
    first = s.query(code=src, k=3)
    n = len(s.units(src).text_units)
    assert n > 1
    m0 = s.stats["text_cache_misses"]
    edited = s.query(code=src.replace("expf(", "__expf(", 1), k=3)
    assert 1 <= s.stats["text_cache_misses"] - m0 < n  # only the edited line's chunk is embedded again
    assert edited["query"]["cached"] is False and first["hits"]


def test_chunk_vectors_do_not_depend_on_the_cache_or_batch(indexed):
    """An edited kernel scored by a searcher that has seen the original (most chunks cached, the new
    ones embedded beside the query on the worker thread) scores like a fresh searcher: its text
    scores exactly (a chunk's int8 vector no longer depends on the chunks batched with it)."""
    import numpy as np

    src = (KERNELS / "layernorm" / "naive.cu").read_text()
    edited = src.replace("float", "double", 1)
    warm = _searcher(indexed[0])
    warm.query(code=src, k=3)
    a = warm.scores(code=edited, units=warm.units(edited))[0]
    fresh = _searcher(indexed[0])
    b = fresh.scores(code=edited, units=fresh.units(edited))[0]
    for mode in ("bm25", "text"):  # int8 MiniLM: exact (activations are quantized per chunk)
        assert np.array_equal(a[mode], b[mode]), mode
    assert np.allclose(a["graph"], b["graph"], atol=1e-6)  # fp32 GNN: batch shape moves the last bits only
    single = fresh.embed_texts([u.text for u in fresh.units(edited).text_units][:1])
    assert np.array_equal(single[0], fresh.embed_texts([u.text for u in fresh.units(edited).text_units])[0])


def test_queries_leave_no_reference_cycles(indexed):
    """The server gc.freeze()s what is alive after answers; that is only safe while queries make no
    cyclic garbage (frozen cycles would never be freed). Evicted query-cache entries included."""
    import gc

    s = _searcher(indexed[0])
    src = (KERNELS / "softmax" / "naive.cu").read_text()
    s.query(code=src, k=3)
    gc.collect()
    gc.disable()
    try:
        for i in range(40):  # more than the 32 prepared queries the searcher keeps
            s.query(code=src.replace("expf(", f"expf(0.0f * {i} + ", 1), k=3)
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_mcp_stdio_server_answers_like_the_searcher(indexed, searcher, tmp_path):
    """`skills serve --mcp` as a subprocess, driven by the official SDK's stdio client."""
    import asyncio

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    root = indexed[0]
    src = (KERNELS / "softmax" / "naive.cu").read_text()
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

    def params(store):
        return StdioServerParameters(command=sys.executable, args=["-m", "cli", "serve", "--mcp", "--store", str(store)],
                                     env=env, cwd=str(ROOT))

    async def session():
        async with Client(params(root), read_timeout_seconds=120) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            ans = await c.call_tool("query_skills", {"code": src, "path": "naive.cu", "k": 5, "axes": {"N": 1000}})
            bad = await c.call_tool("query_skills", {"code": "__global__ void k( {", "path": "bad.cu"})
            first = next(h for h in ans.structured_content["hits"] if h["kind"] == "skill")  # not an "also" entry
            rec = await c.call_tool("get_skill", {"skill_id": first["skill_id"]})
            info = await c.call_tool("index_info", {})
        async with Client(params(tmp_path / "none"), read_timeout_seconds=120) as c:
            missing = await c.call_tool("query_skills", {"text": "vectorize loads"})
        return names, ans, bad, rec, info, missing

    names, ans, bad, rec, info, missing = asyncio.run(session())
    assert names == {"query_skills", "get_skill", "index_info", "gate_kernel", "profile_kernel", "wrap_kernel", "lineage"}
    assert not ans.is_error and ans.structured_content["served_by"]["kind"] == "mcp"
    local = searcher.query(code=src, path="naive.cu", k=5, axes={"N": 1000})
    assert [h["skill_id"] for h in ans.structured_content["hits"]] == [h["skill_id"] for h in local["hits"]]
    assert bad.is_error and '"kind": "parse_error"' in bad.content[0].text and '"line": 1' in bad.content[0].text
    first = next(h for h in ans.structured_content["hits"] if h["kind"] == "skill")
    assert not rec.is_error and rec.structured_content["skill_id"] == first["skill_id"]
    assert info.structured_content["n_skills"] == local["index"]["n_skills"]
    assert missing.is_error and '"kind": "no_store"' in missing.content[0].text and "skills mine" in missing.content[0].text
