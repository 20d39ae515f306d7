import numpy as np
import pytest

from retrieval.bm25 import BM25, code_tokens
from retrieval.fusion import rank_by_score, rrf


def test_code_tokens_split_identifiers():
    toks = code_tokens("getRelocType(MCFixup) fixup_riscv_hi20")
    assert {"getreloctype", "get", "reloc", "type", "mcfixup", "fixup", "riscv", "hi", "20"} <= set(toks)


def test_bm25_ranks_matching_document_first():
    docs = ["unsigned getRelocType(MCFixup F) { switch (F.getKind()) {} }",
            "void emitPrologue(MachineFunction &MF) { buildStack(); }",
            "BitVector getReservedRegs(const MachineFunction &MF) { return R; }"]
    bm = BM25.from_texts(docs, ["a", "b", "c"])
    assert bm.search("reloc type of a fixup kind", k=1)[0][0] == "a"
    assert bm.search("reserved registers", k=1)[0][0] == "c"
    assert bm.search("reserved registers", k=3, allowed={0, 1}) == [] or \
        all(i != "c" for i, _ in bm.search("reserved registers", k=3, allowed={0, 1}))


def test_rrf_fuses_and_breaks_ties_deterministically():
    fused = rrf([["a", "b", "c"], ["b", "a", "d"]])
    assert [d for d, _ in fused][:2] in (["a", "b"], ["b", "a"])
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)
    assert [d for d, _ in rrf([["x", "y"], ["y", "x"]])] == ["x", "y"]  # tie: first seen wins
    weighted = rrf([["a", "b"], ["b", "a"]], weights=[1.0, 3.0])
    assert weighted[0][0] == "b"
    with pytest.raises(ValueError):
        rrf([["a"]], weights=[1, 2])
    assert rank_by_score({"p": 0.1, "q": 0.9}) == ["q", "p"]


def test_syntax_graph_has_all_edge_kinds():
    from corpora.backends.tree import parse_cpp
    from retrieval.graphs import EDGE_TYPES, PAD, syntax_graph, vocab_for

    tree = parse_cpp("int f(int a) { int b = a + 1; return b * a; }")
    g = syntax_graph(tree.root_node, vocab_for("cpp"))
    kinds = {t for _, _, t in g.edges}
    assert kinds == set(range(len(EDGE_TYPES)))  # child/parent, siblings, tokens, def-use both ways
    vocab = vocab_for("cpp")
    assert vocab("function_definition") > 0 and vocab("no_such_node_type") == 0
    assert all(len(row) == 3 for row in g.node_tokens)
    assert any(row[0] != PAD for row in g.node_tokens)
    # def-use: the parameter 'a' reaches both later uses
    defuse = [(s, d) for s, d, t in g.edges if t == EDGE_TYPES.index("def_use")]
    assert len(defuse) >= 3
    data = g.to_data()
    assert data.edge_index.shape[1] == len(g.edges) and data.x_tok.shape == (g.n_nodes, 3)
    small = syntax_graph(tree.root_node, vocab, max_nodes=10)
    assert small.n_nodes == 10 and all(s < 10 and d < 10 for s, d, _ in small.edges)


def _toy_graphs():
    from corpora.backends.tree import parse_cpp
    from retrieval.graphs import syntax_graph, vocab_for

    srcs = ["int f(int a) { return a + 1; }", "int g(int b) { return b + 2; }",
            "void h() { for (int i = 0; i < 4; ++i) x[i] = 0; }", "void k() { for (int j = 0; j < 8; ++j) y[j] = 1; }",
            "bool p(int c) { if (c) return true; return false; }", "bool q(int d) { if (d > 1) return true; return false; }"]
    return [syntax_graph(parse_cpp(s).root_node, vocab_for("cpp")).to_data() for s in srcs], [0, 0, 1, 1, 2, 2]


def test_gnn_training_is_deterministic_and_checkpoints(tmp_path):
    import torch

    from retrieval.gnn import EncoderConfig, TrainConfig, embed, load_checkpoint, save_checkpoint, train_contrastive
    from retrieval.graphs import TOKEN_BUCKETS, vocab_for

    graphs, groups = _toy_graphs()
    enc = EncoderConfig(n_types=len(vocab_for("cpp")), n_buckets=TOKEN_BUCKETS + 1, hidden=16, out_dim=8, layers=2)
    cfg = TrainConfig(seed=7, epochs=3, batch_groups=3)
    m1, info1 = train_contrastive(graphs, groups, enc, cfg)
    m2, info2 = train_contrastive(graphs, groups, enc, cfg)
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), k
    assert info1["losses"] == info2["losses"] and len(info1["losses"]) == 3
    m3, _ = train_contrastive(graphs, groups, enc, TrainConfig(seed=8, epochs=3, batch_groups=3))
    assert any(not torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m3.state_dict().values()))
    e1 = embed(m1, graphs)
    assert e1.shape == (6, 8) and np.allclose(np.linalg.norm(e1, axis=1), 1.0, atol=1e-5)
    path = tmp_path / "m.pt"
    sha = save_checkpoint(path, m1, {"seed": 7})
    m4, meta = load_checkpoint(path)
    assert meta == {"seed": 7} and len(sha) == 64
    assert np.allclose(embed(m4, graphs), e1, atol=1e-6)


def test_text_embedder_is_offline_minilm():
    from retrieval.text import get_embedder

    emb = get_embedder(64)
    v = emb.embed(["return ELF::R_RISCV_32;", "return ELF::R_MIPS_32;", "emit the function prologue"])
    assert v.shape == (3, 384)
    assert float(v[0] @ v[1]) > float(v[0] @ v[2])


def test_vector_index_uses_registered_embedding_functions(tmp_path):
    from retrieval.vector_index import VectorIndex

    vi = VectorIndex(tmp_path / "chroma")
    vi.upsert("docs", ["a", "b"], documents=["relocation type for a fixup", "callee saved registers"],
              metadatas=[{"t": "x"}, {"t": "y"}])
    hits = vi.query("docs", texts=["which relocation does this fixup get"], k=1)[0]
    assert hits[0][0] == "a"
    col = vi.collection("docs")
    assert col.configuration_json["embedding_function"]["name"] == "kernel-skills-minilm"
    vecs = np.eye(4, dtype=np.float32)
    vi.upsert("graphs", ["g0", "g1", "g2", "g3"], embeddings=vecs, kind="precomputed", dim=4)
    ids, mat, metas = vi.get_all("graphs")
    assert ids == ["g0", "g1", "g2", "g3"] and mat.shape == (4, 4)
    assert vi.query("graphs", embeddings=[vecs[2]], k=1)[0][0][0] == "g2"
    with pytest.raises(Exception, match="precomputed"):
        vi.query("graphs", texts=["text into a vector-only collection"], k=1)
    vi.drop("graphs")
    assert not vi.has("graphs")
