"""Fast unit tests of the kernel-skill retrieval pieces (no index build)."""
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "corpora" / "kernels"
FIXTURE = ROOT / "tests" / "fixtures" / "kernel_skills" / "proxy_skills.json"


def test_bm25_save_load_round_trip(tmp_path):
    from retrieval.bm25 import BM25, code_tokens

    docs = ["float4 v = reinterpret_cast<const float4*>(x)[i];", "#pragma unroll for (int k = 0; k < 8; ++k)",
            "s += __expf(v - m);"]
    bm = BM25.from_texts(docs, list(range(3)))
    bm.save(tmp_path / "b.npz")
    back = BM25.load(tmp_path / "b.npz")
    q = code_tokens("expf(x - m) float4 loads")
    assert np.allclose(bm.score_array(q), back.score_array(q), atol=1e-5)
    assert back.n == 3 and back.ids == ["0", "1", "2"]


def test_bm25_scores_follow_the_okapi_formula():
    from collections import Counter

    from retrieval.bm25 import BM25

    rng = np.random.default_rng(3)
    vocab = [f"t{i}" for i in range(30)]
    docs = [list(rng.choice(vocab, int(rng.integers(1, 40)))) for _ in range(60)]
    bm = BM25(docs, list(range(len(docs))), k1=1.2, b=0.75)
    query = ["t1", "t1", "t7", "t29", "absent"]
    avg = sum(map(len, docs)) / len(docs)
    want = np.zeros(len(docs))
    for term, qn in Counter(query).items():
        df = sum(term in d for d in docs)
        if not df:
            continue
        idf = np.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        for j, d in enumerate(docs):
            tf = d.count(term)
            want[j] += qn * idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(d) / avg))
    assert np.allclose(bm.score_array(query), want, rtol=1e-12)
    assert not bm.score_array(["absent"]).any()


def test_rank_breaks_ties_by_index_like_a_stable_sort():
    from retrieval.skill_search import Searcher

    rng = np.random.default_rng(0)
    for trial in range(50):
        x = rng.integers(0, 6, int(rng.integers(1, 500))).astype(np.float64)  # many ties
        x[rng.random(len(x)) < 0.2] = -np.inf
        if trial % 5 == 0:
            x[rng.random(len(x)) < 0.1] = np.nan
        want = np.argsort(-np.where(np.isfinite(x), x, -1e30), kind="stable")
        assert Searcher.rank(x).tolist() == want.tolist()
    assert Searcher.rank(np.zeros(0)).tolist() == []


def test_similar_site_is_the_best_jaccard_window():
    from retrieval.applicability import TokenWindows, CODE_TOKEN, excerpt_tokens, similar_site
    from corpora.code.source import Source

    src = Source((KERNELS / "softmax" / "naive.cu").read_text())
    win = TokenWindows(src)
    lines = src.code.decode().splitlines()
    excerpts = ["float m = -INFINITY;\nfor (int j = 0; j < n; ++j) m = fmaxf(m, x[j]); // max",
                "out[i] = expf(x[i] - m) / s;"]
    refs = excerpt_tokens(excerpts)
    assert refs and all("max" not in r for r in refs)  # comments are not compared
    best, at = -1.0, None
    for s0 in range(len(lines) - 3):  # brute force: every 4-line window, the first best one wins
        toks = set(CODE_TOKEN.findall(" ".join(lines[s0:s0 + 4])))
        if toks:
            sc = max(len(toks & r) / len(toks | r) for r in refs)
            if sc > best:
                best, at = sc, s0
    m = similar_site(src, excerpts, windows=win)
    assert m is not None and m.line == at + 1 and m.end_line == at + 4
    assert f"{best:.2f}" in m.reason
    assert similar_site(src, excerpts, windows=win, refs=refs).line == m.line
    assert similar_site(src, ["// only a comment"]) is None


def test_numpy_gnn_matches_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from retrieval.gnn import EncoderConfig, build_encoder, embed
    from retrieval.gnn_numpy import NumpyGraphEncoder, export_weights
    from retrieval.graphs import TOKEN_BUCKETS, vocab_for
    from retrieval.skill_docs import code_graph

    torch.manual_seed(0)
    model = build_encoder(EncoderConfig(n_types=len(vocab_for("cuda")), n_buckets=TOKEN_BUCKETS + 1, hidden=32,
                                        out_dim=16, layers=2))
    model.eval()
    codes = [(KERNELS / p / "naive.cu").read_text() for p in ("softmax", "sgemm", "histogram")] + ["x[0] = 1;", ""]
    graphs = [code_graph(c) for c in codes]
    ref = embed(model, [g.to_data() for g in graphs])
    export_weights(model, tmp_path / "g.npz")
    ours = NumpyGraphEncoder(tmp_path / "g.npz")
    batched = ours.embed(graphs)
    single = np.stack([ours.embed_one(g) for g in graphs])
    assert np.min((ref * batched).sum(1)) > 0.9999
    assert np.allclose(batched, single, atol=1e-5)


def test_skill_docs_and_query_units():
    from retrieval.skill_docs import query_units, skill_docs, unit_graph

    skill = json.loads(FIXTURE.read_text())[0]
    docs = skill_docs(skill)
    assert docs[0].role == "exemplar" and all(d.skill_id == skill["skill_id"] for d in docs)
    assert len({d.doc_id for d in docs}) == len(docs)  # distinct forms only
    assert skill["intent"][:30] in docs[0].text and docs[0].code
    assert skill_docs(skill)[0].sha == docs[0].sha  # deterministic
    src = (KERNELS / "reduce_sum" / "naive.cu").read_text()
    qu = query_units(src)
    assert [u.function for u in qu.text_units] == ["chunk_sums", "total"]  # kernels only, not the host launcher
    assert qu.graph_units and all(u.graph is None for u in qu.graph_units)  # graphs built lazily
    assert unit_graph(qu.graph_units[0]).n_nodes > 3
    lines = src.splitlines()
    u = qu.graph_units[0]
    assert u.text == "\n".join(lines[u.start_line - 1:u.end_line])


@pytest.mark.parametrize("problem,carrier,lines", [
    ("softmax", "fast_math", [13, 14]),
    ("softmax", "restrict", [5]),
    ("softmax", "launch_bounds", [5]),
    ("softmax", "grid_stride", [6]),
    ("sgemm", "grid_stride", []),  # 2-D mapping: not a grid-stride site
    ("sgemm", "shared_tile", [9]),
    ("transpose", "shared_tile", [7]),  # the transposed copy
    ("softmax", "shared_tile", []),  # each thread reads its own row
    ("histogram", "atomic_per_block", [11]),
    ("layernorm", "vector_store", [18]),
])
def test_site_finders_on_naive_kernels(problem, carrier, lines):
    from retrieval.applicability import Checker

    c = Checker((KERNELS / problem / "naive.cu").read_text())
    got = [s.line for s in c.opportunities(carrier)]
    assert got[:len(lines)] == lines if lines else got == []


def test_precondition_checks():
    from retrieval.applicability import check_precondition

    p = {"kind": "divisible", "axis": "N", "value": 4, "text": "N % 4 == 0", "status": "discovered"}
    assert check_precondition(p, {"N": 1024}).check == "satisfied"
    assert check_precondition(p, {"N": 1000 + 2}).check == "violated"
    assert check_precondition(p, {"M": 8}).check == "unknown"
    assert check_precondition(p, None).detail == "no --axes given"
    assert check_precondition({"kind": "minimum", "axis": "N", "value": 32}, {"N": 16}).check == "violated"
    assert check_precondition({"kind": "power_of_two", "axis": "N", "value": 0}, {"N": 64}).check == "satisfied"
    assert check_precondition({"kind": "none_found", "status": "not_needed"}, {"N": 3}).check == "not_needed"


def test_fold_and_metrics():
    from eval.bench_retrieval import fold_skills, metrics

    skills = json.loads(FIXTURE.read_text())
    fold = fold_skills(skills, "softmax")
    assert all(e["problem"] != "softmax" for s in fold for e in s["evidence"])
    assert all("softmax" not in s["scope"]["problems"] for s in fold)
    m = metrics(["a", "x", "b", "y", "z"], {"a", "b", "c"})
    assert m["mrr"] == 1.0 and m["recall_at_5"] == pytest.approx(2 / 3)
    assert metrics(["x", "a"], {"a"})["mrr"] == 0.5
    assert metrics(["a", "b", "c", "d", "e"], set("abcdefg"))["recall_at_5"] == 1.0  # capped at min(5, |rel|)


def test_scale_set_makes_distinct_skills():
    from eval.skill_fixtures import scale_set
    from mining.records import Skill

    base = [Skill.model_validate(d) for d in json.loads(FIXTURE.read_text())]
    syn = scale_set(base, 25)
    assert len({s.skill_id for s in syn}) == 25 and not ({s.skill_id for s in syn} & {s.skill_id for s in base})
    assert syn[0].carrier == base[0].carrier and syn[0].before != base[0].before


def test_graph_encoder_training_is_seeded_and_deterministic():
    pytest.importorskip("torch_geometric")
    from retrieval.skill_docs import skill_docs
    from retrieval.skill_index import train_graph_model

    skills = json.loads(FIXTURE.read_text())[:4]
    docs = [d for s in skills for d in skill_docs(s)[:3]]
    a, info_a = train_graph_model(docs, seed=3, step_budget=5)
    b, info_b = train_graph_model(docs, seed=3, step_budget=5)
    c, _ = train_graph_model(docs, seed=4, step_budget=5)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(np.array_equal(sa[k].numpy(), sb[k].numpy()) for k in sa)
    assert info_a["losses"] == info_b["losses"] and info_a["train"]["seed"] == 3
    assert not all(np.array_equal(sa[k].numpy(), sc[k].numpy()) for k in sa)


def test_onnx_minilm_matches_sentence_transformers(tmp_path):
    """The onnxruntime encoder (graph written here, weights from the prepared export) gives the
    vectors of sentence-transformers: what the index holds."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("sentence_transformers")
    from retrieval.minilm_numpy import NumpyMiniLM
    from retrieval.minilm_onnx import ONNX_FILE, OnnxMiniLM, build_model, export_query_encoders
    from retrieval.text import get_embedder

    prepared = export_query_encoders(tmp_path / "minilm")
    assert (prepared / ONNX_FILE).is_file()  # written with the prepared weights
    long = (KERNELS / "attention_fwd" / "naive.cu").read_text() * 2  # > 256 tokens: truncated alike
    texts = [(KERNELS / "softmax" / "naive.cu").read_text(), "use float4 vector loads", "x", long,
             "for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];"]
    ref = get_embedder(256).embed(texts)
    enc = OnnxMiniLM(256, path=prepared)
    ours = enc.embed(texts)  # one padded batch of mixed lengths
    assert ours.shape == ref.shape and ours.dtype == np.float32
    assert np.min((ref * ours).sum(1)) > 0.9999
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    one_by_one = np.stack([enc.embed([t])[0] for t in texts])  # no padding: the mask must not matter
    assert np.min((one_by_one * ours).sum(1)) > 0.99999
    assert np.min((NumpyMiniLM(256, path=prepared).embed(texts) * ours).sum(1)) > 0.9999
    # the graph is deterministic (same bytes for the same weights) and a wrong shape is refused
    w = enc._load()[0]
    assert build_model(w)[:4096] == (prepared / ONNX_FILE).read_bytes()[:4096]
    bad = dict(w, ln_w=w["ln_w"][:10])
    with pytest.raises(ValueError):
        build_model(bad)


def test_int8_queries_rank_like_fp32_or_fall_back(tmp_path):
    """Queries embed with int8 only where its self-check on this CPU says it ranks like fp32; then the
    same top documents come first on kernels outside the calibration set too. A graph whose int8
    numerics are off (here: one layer's weights scrambled) must make the check fall back to fp32."""
    pytest.importorskip("onnxruntime")
    import json

    from retrieval.int8_check import CHECK_FILE, compare, describe, resolve_precision
    from retrieval.minilm_onnx import ONNX_FILE_INT8, OnnxMiniLM, build_model, export_query_encoders, write_onnx
    from retrieval.skill_docs import query_units

    prepared = export_query_encoders(tmp_path / "minilm")
    rec = resolve_precision(prepared, 256)
    assert rec["precision"] in ("int8", "fp32") and rec["cached"] is False
    assert rec["ok"] == (rec["precision"] == "int8") and rec["ok"] == (not rec["failed"])
    assert (prepared / ONNX_FILE_INT8).is_file() and (prepared / CHECK_FILE).is_file()
    again = resolve_precision(prepared, 256)  # recorded: not re-run
    assert again["cached"] is True and again["precision"] == rec["precision"] and again["key"] == rec["key"]
    assert "int8 query embeddings" in describe(again)

    fp32 = OnnxMiniLM(256, path=prepared, precision="fp32")
    used = OnnxMiniLM(256, path=prepared, precision=rec["precision"])
    queries = [u.text for f in ("softmax", "sgemm", "attention_fwd", "transpose")
               for u in query_units((KERNELS / f / "naive.cu").read_text(), count_tokens=fp32.count_tokens).text_units[2:]]
    docs = [u.text for f in ("softmax", "sgemm", "attention_fwd", "transpose", "layernorm")
            for u in query_units((KERNELS / f / "kernel.cu").read_text(), count_tokens=fp32.count_tokens).text_units]
    a = np.stack([fp32.embed([q])[0] for q in queries])
    b = np.stack([used.embed([q])[0] for q in queries])
    held_out = compare(a, b, fp32.embed(docs))  # what users rely on: the same documents come first
    assert held_out["ok"], (rec, held_out)
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    # the int8 graph is deterministic: the same bytes for the same weights
    int8 = OnnxMiniLM(256, path=prepared, precision="int8")
    w = int8._load()[0]
    assert build_model(w, int8=True) == (prepared / ONNX_FILE_INT8).read_bytes()
    with pytest.raises(ValueError):
        OnnxMiniLM(256, path=prepared, precision="fp16")

    # a broken int8 graph: a new graph hash, so the check runs again, and fails
    rng = np.random.default_rng(0)
    layers = [dict(layer) for layer in w["layers"]]
    for k in ("i_w", "f_w"):
        layers[0][k] = rng.permutation(np.asarray(layers[0][k]).ravel()).reshape(np.shape(layers[0][k]))
    write_onnx(prepared, dict(w, layers=layers), int8=True)
    broken = resolve_precision(prepared, 256)
    assert broken["cached"] is False and broken["precision"] == "fp32" and broken["failed"], broken
    assert json.loads((prepared / CHECK_FILE).read_text())["precision"] == "fp32"
    assert "NOT used" in describe(broken)


def test_text_chunks_bound_tokens_and_keep_lines():
    from retrieval.minilm_numpy import get_numpy_embedder
    from retrieval.skill_docs import QUERY_TEXT_TOKENS, TEXT_CHUNK_TOKENS, query_units

    count = get_numpy_embedder(256).count_tokens
    src = (KERNELS / "attention_fwd" / "naive.cu").read_text()
    lines = src.splitlines()
    qu = query_units(src, count_tokens=count)
    assert len(qu.text_units) > 1 and all(u.kind == "chunk" for u in qu.text_units)
    total = 0
    for u in qu.text_units:
        n = sum(count(u.text.splitlines())) + 2
        assert n <= TEXT_CHUNK_TOKENS or len(u.text.splitlines()) == 1  # a longer line stands alone
        total += n
        assert "//" not in u.text and u.text.strip()  # comments dropped
        first = u.text.splitlines()[0].strip()
        assert first and first in lines[u.start_line - 1]  # line numbers point into the query
    assert total <= QUERY_TEXT_TOKENS
    # chunks are consecutive and do not overlap, kernels only (not the host launcher)
    spans = [(u.start_line, u.end_line) for u in qu.text_units]
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
    assert {u.function for u in qu.text_units} == {"attention_naive"}
    # an edit of one line changes one chunk's text only: the others are reused from the cache
    qe = query_units(src.replace("float s = 0.0f;", "float s0 = 0.0f;", 1), count_tokens=count)
    changed = {u.text for u in qe.text_units} - {u.text for u in qu.text_units}
    assert 1 <= len(changed) < len(qe.text_units)
    commented = query_units(src.replace("float s = 0.0f;", "float s = 0.0f;  // why", 1), count_tokens=count)
    assert [u.text for u in commented.text_units] == [u.text for u in qu.text_units]


def test_weight_grid_and_calibration_metrics():
    from retrieval.skill_fusion import distance_to_equal, ranking_metrics, weight_grid

    grid = weight_grid()
    assert all(any(w[m] for m in ("bm25", "text", "graph")) for w in grid)  # never the prior alone
    scaled = {tuple(round(w[m] / max(w.values()), 6) for m in sorted(w)) for w in grid}
    assert len(scaled) == len(grid)  # distinct up to scale ((2,2,2,2) is (1,1,1,1))
    assert {"bm25": 1.0, "text": 1.0, "graph": 1.0, "prior": 1.0} in grid
    assert distance_to_equal({"bm25": 2.0, "text": 2.0, "graph": 2.0, "prior": 2.0}) == 0.0
    rr, ndcg, rec = ranking_metrics([5, 3, 9], {3, 4})
    assert rr == 0.5 and rec == 0.5 and 0 < ndcg < 1


def test_latency_benchmark_edits_still_parse():
    """eval/bench_query's edited-code classes must stay valid CUDA (a parse error would be timed
    as an error answer): one changed line for line_edit, a renamed identifier for novel."""
    from eval.bench_query import one_line_edit, query_variant
    from corpora.code.parse import parse_cuda, syntax_issues

    for f in sorted(KERNELS.glob("*/naive.cu")):
        code = f.read_text()
        for edited in (one_line_edit(code, 7), query_variant(code, 7)):
            assert edited != code and not syntax_issues(parse_cuda(edited)), f
        changed = [a for a, b in zip(code.split("\n"), one_line_edit(code, 7).split("\n")) if a != b]
        assert len(changed) == 1 and "return" not in changed[0], f


def test_bench_query_refuses_a_bad_store_in_one_line(tmp_path, capsys):
    """No store, or a store without an index for the warm-server part: exit 2 and one line naming it."""
    import duckdb

    from eval.bench_query import main

    assert main(["--store", str(tmp_path / "none"), "--skip", "server,index"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(tmp_path / "none") in err and "store.duckdb" in err
    (tmp_path / "bare").mkdir()
    duckdb.connect(str(tmp_path / "bare" / "store.duckdb")).close()
    assert main(["--store", str(tmp_path / "bare"), "--skip", "cold,reads,index"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "has no index" in err and "skills index" in err
