"""Build and update the retrieval indexes of kernel skills.

    index_skills(store)                       # `skills index`; `skills mine` calls it after each lineage

What it maintains (all under the store root):

    chroma/  kernel_skill_text     MiniLM vectors (sentence-transformers, registered embedding
                                   function) of every skill document (retrieval/skill_docs.py)
             kernel_skill_graph    GNN vectors of the documents' syntax graphs
    models/  kernel-skill-gnn.pt   the contrastive graph encoder (torch checkpoint) + .npz (numpy
                                   weights for queries) + .train.json (what it was trained on);
                                   metadata in the `models` table
    index/kernel_skills/<build>/   the query snapshot: vectors as .npy, BM25 postings, skill records
                                   (jsonl + offsets), GNN weights, manifest.json; `CURRENT` names the
                                   live build (switched atomically, so a reader never sees half of one)

Incremental: a document is identified by its content hash; only new documents are embedded,
vectors of documents gone are deleted. The graph encoder is retrained when the data changed
enough (``RETRAIN_FRACTION`` of the documents new or gone, or ``RETRAIN_NEW_SKILLS`` of the
skills new), or on request; otherwise new documents are embedded with the existing model, and
the report says which happened and why.

The query path (retrieval/skill_search.py) reads only the snapshot: no duckdb, chromadb or torch.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from retrieval.skill_docs import SkillDoc, as_dict, code_graph, skill_docs
from retrieval.skill_fusion import calibrate, lineage_queries
from retrieval.snapshot import TEXT_MAX_TOKENS, current_snapshot, snapshot_root

TEXT_COLLECTION = "kernel_skill_text"
GRAPH_COLLECTION = "kernel_skill_graph"
GNN_NAME = "kernel-skill-gnn"
SNAPSHOT_VERSION = 1
RETRAIN_FRACTION = 0.2
RETRAIN_NEW_SKILLS = 0.1
GNN_SEED = 0
GNN_STEP_BUDGET = 200  # optimizer steps per training, spread over epochs
GNN_HIDDEN = 64
GNN_OUT = 64
GNN_LAYERS = 3


class IndexError_(Exception):
    """Nothing to index / a store problem; one line for the user."""


@dataclass
class IndexReport:
    store: str
    n_skills: int = 0
    n_docs: int = 0
    text: dict = field(default_factory=dict)
    graph: dict = field(default_factory=dict)
    snapshot: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)  # seconds per phase: load, text, graph, snapshot
    seconds: float = 0.0
    messages: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _log(log, msg: str, report: Optional[IndexReport] = None) -> None:
    if report is not None:
        report.messages.append(msg)
    if log:
        log(msg)


def _store(store):
    from skills.store import Store

    return store if hasattr(store, "db_path") else Store(store)


def skills_fingerprint(skills: Sequence[dict]) -> str:
    h = hashlib.sha256()
    for s in sorted(skills, key=lambda s: s["skill_id"]):
        h.update(s["skill_id"].encode())
        h.update(hashlib.sha1(json.dumps(s, sort_keys=True).encode()).digest())
    return h.hexdigest()[:24]


def limit_torch_threads() -> None:
    """One torch thread unless SKILLS_TORCH_THREADS says otherwise: on a shared 2-core machine a
    second thread spins and slows these small models up to ~8x (measured), and a fixed thread count
    is part of what makes the encoder's training reproducible."""
    import torch

    torch.set_num_threads(int(os.environ.get("SKILLS_TORCH_THREADS", "1")))


# --------------------------------------------------------------------------- graph encoder
def train_graph_model(docs: Sequence[SkillDoc], seed: int = GNN_SEED, step_budget: int = GNN_STEP_BUDGET, log=None):
    """Contrastive GNN over the documents' syntax graphs. Positives: two documents of the same
    skill from different kernels (groups = skill, sources = problem), plus node-drop views of a
    document whose skill has only one. Returns (torch model, info)."""
    from retrieval.gnn import EncoderConfig, TrainConfig, train_contrastive
    from retrieval.graphs import TOKEN_BUCKETS, vocab_for

    limit_torch_threads()
    graphs = [code_graph(d.code).to_data() for d in docs]
    by_skill: dict[str, int] = {}
    for d in docs:
        by_skill[d.skill_id] = by_skill.get(d.skill_id, 0) + 1
    groups = [d.skill_id if by_skill[d.skill_id] >= 2 else None for d in docs]
    n_units = len({g for g in groups if g is not None}) + sum(g is None for g in groups)
    batch = 64
    steps_per_epoch = max(1, -(-n_units // batch))
    epochs = max(5, min(300, step_budget // steps_per_epoch))
    enc = EncoderConfig(n_types=len(vocab_for("cuda")), n_buckets=TOKEN_BUCKETS + 1, hidden=GNN_HIDDEN,
                        out_dim=GNN_OUT, layers=GNN_LAYERS)
    cfg = TrainConfig(seed=seed, epochs=epochs, batch_groups=batch, lr=3e-3, temperature=0.1, node_drop=0.15)
    if log:
        log(f"training {GNN_NAME}: {len(graphs)} graphs, {len(by_skill)} skills, {epochs} epochs (seed {seed})")
    model, info = train_contrastive(graphs, groups, enc, cfg, sources=[d.problem or d.doc_id for d in docs])
    info["vocab"] = "tree-sitter-cuda node kinds"
    info["positives"] = "documents of the same skill from different kernels + node-drop views"
    return model, info


def graph_vectors(npz_path: Path, docs: Sequence[SkillDoc]):
    """Document graph vectors with the numpy encoder (the one queries use)."""
    from retrieval.gnn_numpy import NumpyGraphEncoder

    import numpy as np

    enc = NumpyGraphEncoder(npz_path)
    out = [enc.embed([code_graph(d.code) for d in docs[s: s + 256]]) for s in range(0, len(docs), 256)]
    return np.concatenate(out) if out else np.zeros((0, enc.out_dim), np.float32)


def _retrain_decision(prev_train: Optional[dict], docs: Sequence[SkillDoc], force: bool) -> tuple[bool, str]:
    if force:
        return True, "retrain requested"
    if not prev_train:
        return True, "no model yet"
    before = set(prev_train.get("doc_shas", []))
    now = {d.sha for d in docs}
    changed = len(before ^ now)
    frac = changed / max(1, len(before))
    old_sk = set(prev_train.get("skills", []))
    new_sk = {d.skill_id for d in docs} - old_sk
    sk_frac = len(new_sk) / max(1, len(old_sk))
    if frac >= RETRAIN_FRACTION:
        return True, f"{changed} documents new or gone since training ({frac:.0%} >= {RETRAIN_FRACTION:.0%})"
    if sk_frac >= RETRAIN_NEW_SKILLS:
        return True, f"{len(new_sk)} new skills since training ({sk_frac:.0%} >= {RETRAIN_NEW_SKILLS:.0%})"
    return False, (f"data changed little since training ({changed} documents new or gone, {frac:.0%} < "
                   f"{RETRAIN_FRACTION:.0%}; {len(new_sk)} new skills): kept the model, new documents embedded with it")


def _check_numpy_encoder(model, npz: Path, docs: Sequence[SkillDoc]) -> float:
    """Min cosine between the torch and numpy encoders on a few documents."""
    import numpy as np

    from retrieval.gnn import embed
    from retrieval.gnn_numpy import NumpyGraphEncoder

    sample = list(docs)[:8]
    if not sample:
        return 1.0
    a = embed(model, [code_graph(d.code).to_data() for d in sample])
    b = NumpyGraphEncoder(npz).embed([code_graph(d.code) for d in sample])
    return float(np.min((a * b).sum(1)))


# --------------------------------------------------------------------------- snapshot
def write_snapshot(root: os.PathLike | str, skills: Sequence[dict], docs: Sequence[SkillDoc], text_mat, graph_mat,
                   gnn_npz: Optional[Path], manifest: dict, keep: int = 2,
                   calibration: Optional[Sequence[tuple[str, str]]] = None, log=None) -> Path:
    """Write a query snapshot under ``root``/index/kernel_skills and make it current.

    ``calibration``: (problem, query code) pairs; when given, the fusion weights are chosen by
    leave-one-problem-out on the written (not yet published) snapshot and stored in its manifest
    (retrieval/skill_fusion.py)."""
    import numpy as np

    from retrieval.bm25 import BM25

    base = snapshot_root(root)
    base.mkdir(parents=True, exist_ok=True)
    build = time.strftime("%Y%m%dT%H%M%S") + "-" + hashlib.sha1(os.urandom(8)).hexdigest()[:6]
    tmp = base / (".tmp-" + build)
    tmp.mkdir()
    order = {s["skill_id"]: i for i, s in enumerate(skills)}
    np.save(tmp / "text.npy", np.asarray(text_mat, dtype=np.float32))
    np.save(tmp / "graph.npy", np.asarray(graph_mat, dtype=np.float32))
    np.save(tmp / "doc_skill.npy", np.array([order[d.skill_id] for d in docs], dtype=np.int32))
    BM25.from_texts([d.terms for d in docs], list(range(len(docs)))).save(tmp / "bm25.npz")
    offsets = []
    with open(tmp / "skills.jsonl", "wb") as fh:
        for s in skills:
            offsets.append(fh.tell())
            fh.write(json.dumps(s, separators=(",", ":")).encode())
            fh.write(b"\n")
        offsets.append(fh.tell())
    table = {"skill_id": [s["skill_id"] for s in skills], "key": [s.get("key", "") for s in skills],
             "name": [s.get("name", "") for s in skills], "carrier": [s.get("carrier", "") for s in skills],
             "operator": [s.get("operator", "") for s in skills],
             "n_problems": [len({e.get("problem") for e in s.get("evidence") or [] if e.get("problem")}) for s in skills],
             "requires": [list(s.get("requires") or []) for s in skills],
             "conflicts": [list(s.get("conflicts") or []) for s in skills],
             "offsets": offsets}
    (tmp / "skills.json").write_text(json.dumps(table, separators=(",", ":")))
    (tmp / "docs.json").write_text(json.dumps({"doc_id": [d.doc_id for d in docs], "role": [d.role for d in docs],
                                               "problem": [d.problem for d in docs]}, separators=(",", ":")))
    if gnn_npz is not None:
        shutil.copyfile(gnn_npz, tmp / "gnn.npz")
    man = {"version": SNAPSHOT_VERSION, "build": build, "built_at": time.time(), "n_skills": len(skills),
           "n_docs": len(docs), "text_model": f"all-MiniLM-L6-v2@{TEXT_MAX_TOKENS}", "graph_dim": int(np.asarray(graph_mat).shape[1]) if len(docs) else 0,
           "has_graph": gnn_npz is not None, "skills_fingerprint": skills_fingerprint(skills), **manifest}
    (tmp / "manifest.json").write_text(json.dumps(man, indent=1, sort_keys=True))
    if calibration and docs:
        man["fusion"] = calibrate(tmp, calibration, log=log)
        (tmp / "manifest.json").write_text(json.dumps(man, indent=1, sort_keys=True))
    os.replace(tmp, base / build)
    cur_tmp = base / ".CURRENT.tmp"
    cur_tmp.write_text(build)
    os.replace(cur_tmp, base / "CURRENT")
    # prune by age, never the one just published (two builds in one second sort by their random suffix)
    builds = sorted((p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != build),
                    key=lambda p: p.stat().st_mtime)
    for old in builds[:max(0, len(builds) - (keep - 1))]:
        shutil.rmtree(old, ignore_errors=True)
    return base / build


# --------------------------------------------------------------------------- the store's index
def _store_skills(store) -> list[dict]:
    from skills.kernel_store import KernelStore

    if not store.exists():
        return []
    return [s.model_dump(mode="json") for s in KernelStore(store).skills(kind="kernel")]


def store_stamp_of(store) -> dict:
    row = store.query("SELECT count(*) AS n, CAST(max(updated_at) AS VARCHAR) AS t FROM skills WHERE kind = 'kernel'")
    return {"n": int(row[0]["n"]), "max_updated_at": row[0]["t"] or ""}


def index_is_current(store) -> bool:
    """True when the live snapshot was built from the store's skills as they are now (or the store
    has none): a run killed while indexing leaves a snapshot that says otherwise."""
    from skills.store import Store

    store = _store(store)
    if not store.exists():
        return True
    with Store(store.root, read_only=True).session() as reader:
        stamp = store_stamp_of(reader)
    if stamp["n"] == 0:
        return True
    snap = current_snapshot(store.root)
    if snap is None:
        return False
    try:
        manifest = json.loads((snap / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("store_stamp") == stamp


def index_skills(store, skills: Optional[Sequence[Any]] = None, *, retrain: bool = False, seed: int = GNN_SEED,
                 step_budget: int = GNN_STEP_BUDGET, log: Optional[Callable[[str], None]] = None) -> IndexReport:
    """Bring the kernel-skill indexes up to date with the store (incremental).

    ``skills``: what the caller just added or changed (`skills mine` passes the merged skills of a
    lineage). The index is always reconciled with the whole store, so this is only reported;
    skills removed from the store leave the index too.
    """
    t0 = time.perf_counter()
    store = _store(store)
    report = IndexReport(store=str(store.root))
    all_skills = _store_skills(store)
    store.close()  # embedding and training take a while: other processes may use the store meanwhile
    if skills is not None:
        report.messages.append(f"{len(list(skills))} skill(s) added or changed by the caller")
    if not all_skills:
        raise IndexError_(f"no kernel skills in the store at {store.root}: build them with "
                          f"`skills mine corpora/kernels --executor cpu --store {store.root}`")
    docs = [d for s in all_skills for d in skill_docs(s)]
    report.n_skills, report.n_docs = len(all_skills), len(docs)
    report.phases["load"] = round(time.perf_counter() - t0, 2)
    _log(log, f"text: {len(all_skills)} skills, {len(docs)} documents; reconciling the text collection", report)
    tp = time.perf_counter()

    from retrieval.vector_index import VectorIndex

    vi = VectorIndex(store.chroma_dir)
    # ---- text
    col = vi.collection(TEXT_COLLECTION, kind="text", max_seq_length=TEXT_MAX_TOKENS)
    have = set(col.get(include=[])["ids"])
    want = {d.doc_id: d for d in docs}
    stale = sorted(have - set(want))
    for s in range(0, len(stale), 5000):
        col.delete(ids=stale[s:s + 5000])
    new = [d for d in docs if d.doc_id not in have]
    if new:
        _log(log, f"embedding {len(new)} new skill documents (MiniLM, {TEXT_MAX_TOKENS} tokens)", report)
        limit_torch_threads()
        from retrieval.text import get_embedder

        vecs = get_embedder(TEXT_MAX_TOKENS).embed([d.text for d in new])
        vi.upsert(TEXT_COLLECTION, [d.doc_id for d in new], embeddings=vecs, documents=[d.text for d in new],
                  metadatas=[{"skill_id": d.skill_id, "role": d.role, "problem": d.problem, "sha": d.sha} for d in new],
                  kind="text")
    report.text = {"collection": TEXT_COLLECTION, "embedded": len(new), "deleted": len(stale), "total": len(docs)}

    report.phases["text"] = round(time.perf_counter() - tp, 2)
    _log(log, f"graph: {len(docs)} documents", report)
    tp = time.perf_counter()
    # ---- graph
    models = store.models_dir
    models.mkdir(parents=True, exist_ok=True)
    ckpt, npz, train_json = models / f"{GNN_NAME}.pt", models / f"{GNN_NAME}.npz", models / f"{GNN_NAME}.train.json"
    prev_train = json.loads(train_json.read_text()) if train_json.is_file() and npz.is_file() else None
    do_train, why = _retrain_decision(prev_train, docs, retrain)
    gcol = GRAPH_COLLECTION
    if do_train:
        from retrieval.gnn import fingerprint, save_checkpoint
        from retrieval.gnn_numpy import export_weights

        model, info = train_graph_model(docs, seed=seed, step_budget=step_budget, log=lambda m: _log(log, m, report))
        export_weights(model, npz)
        info["numpy_min_cosine"] = round(_check_numpy_encoder(model, npz, docs), 6)
        fp = fingerprint(sorted(d.sha for d in docs) + [seed])
        info["data_fingerprint"] = fp
        info["reason"] = why
        info["checkpoint_sha256"] = save_checkpoint(ckpt, model, info)
        train_json.write_text(json.dumps({"doc_shas": sorted(d.sha for d in docs),
                                          "skills": sorted({d.skill_id for d in docs}), "seed": seed}))
        store.register_model(GNN_NAME, "graph-encoder", ckpt, fp, {**info, "numpy_weights": str(npz)})
        store.close()
        vi.drop(gcol)
        gvecs = graph_vectors(npz, docs)
        vi.upsert(gcol, [d.doc_id for d in docs], embeddings=gvecs,
                  metadatas=[{"skill_id": d.skill_id, "sha": d.sha} for d in docs], kind="precomputed",
                  dim=gvecs.shape[1])
        report.graph = {"model": GNN_NAME, "status": "trained", "reason": why, "epochs": info["train"]["epochs"],
                        "seconds": info["seconds"], "final_loss": info["losses"][-1] if info["losses"] else None,
                        "numpy_min_cosine": info["numpy_min_cosine"], "embedded": len(docs)}
        _log(log, f"graph model {GNN_NAME} retrained: {why}", report)
    else:
        gc = vi.collection(gcol, kind="precomputed", dim=GNN_OUT)
        ghave = set(gc.get(include=[])["ids"])
        gstale = sorted(ghave - set(want))
        for s in range(0, len(gstale), 5000):
            gc.delete(ids=gstale[s:s + 5000])
        gnew = [d for d in docs if d.doc_id not in ghave]
        if gnew:
            gv = graph_vectors(npz, gnew)
            vi.upsert(gcol, [d.doc_id for d in gnew], embeddings=gv,
                      metadatas=[{"skill_id": d.skill_id, "sha": d.sha} for d in gnew], kind="precomputed",
                      dim=gv.shape[1])
        m = store.model(GNN_NAME) or {}
        report.graph = {"model": GNN_NAME, "status": "unchanged", "reason": why, "embedded": len(gnew),
                        "data_fingerprint": m.get("data_fingerprint", "")}
        _log(log, f"graph model {GNN_NAME} kept: {why}", report)

    report.phases["graph"] = round(time.perf_counter() - tp, 2)
    _log(log, "snapshot: vectors, BM25, fusion calibration", report)
    tp = time.perf_counter()
    # ---- snapshot (vectors read back from chroma: the persistent copy is the source of truth)

    ids_t, mat_t, _ = vi.get_all(TEXT_COLLECTION)
    ids_g, mat_g, _ = vi.get_all(gcol)
    pos_t = {i: n for n, i in enumerate(ids_t)}
    pos_g = {i: n for n, i in enumerate(ids_g)}
    missing = [d.doc_id for d in docs if d.doc_id not in pos_t or d.doc_id not in pos_g]
    if missing:
        raise IndexError_(f"{len(missing)} documents have no vector after indexing (first: {missing[0]})")
    text_mat = mat_t[[pos_t[d.doc_id] for d in docs]]
    graph_mat = mat_g[[pos_g[d.doc_id] for d in docs]]
    gm = store.model(GNN_NAME) or {}
    meta = gm.get("metadata", {})
    manifest = {"store": str(Path(store.root).resolve()), "store_stamp": store_stamp_of(store),
                "gnn": {"name": GNN_NAME, "data_fingerprint": gm.get("data_fingerprint", ""),
                        "checkpoint_sha256": meta.get("checkpoint_sha256", ""), "seed": meta.get("train", {}).get("seed"),
                        "epochs": meta.get("train", {}).get("epochs"), "numpy_min_cosine": meta.get("numpy_min_cosine")}}
    prev_check = (_prev_manifest(store.root) or {}).get("minilm_numpy_min_cosine")
    if new and prev_check is None:
        # the query path embeds with numpy: check it against sentence-transformers (once per store;
        # it is a property of the code and the weights, and costs ~10 s on 2 busy cores)
        from retrieval.minilm_numpy import check_against_reference

        manifest["minilm_numpy_min_cosine"] = round(
            check_against_reference([d.text for d in new[:4]], TEXT_MAX_TOKENS)["min_cosine"], 6)
    else:
        manifest["minilm_numpy_min_cosine"] = prev_check
    mdir = models / "minilm-numpy"
    if not (mdir / "layout.json").is_file():
        from retrieval.minilm_onnx import export_query_encoders

        export_query_encoders(mdir)
        _log(log, f"exported MiniLM for numpy queries to {mdir}", report)
    manifest["minilm_prepared"] = "models/minilm-numpy"  # relative to the store root
    from retrieval.minilm_onnx import query_precision

    if query_precision() == "int8":
        # queries embed with int8 only where it ranks like fp32 on this CPU: decide now, not at the first query
        from retrieval.int8_check import describe, resolve_precision

        check = resolve_precision(mdir, TEXT_MAX_TOKENS, log=lambda m: _log(log, m, report))
        report.text["query_precision"] = check["precision"]
        _log(log, describe(check), report)
    from skills.kernel_store import KernelStore

    queries = lineage_queries(KernelStore(store).lineages(kind="kernel"))
    store.close()
    path = write_snapshot(store.root, all_skills, docs, text_mat, graph_mat, npz, manifest, calibration=queries,
                          log=lambda m: _log(log, m, report))
    fusion = json.loads((path / "manifest.json").read_text()).get("fusion") or {}
    report.snapshot = {"path": str(path), "n_skills": len(all_skills), "n_docs": len(docs),
                       "fusion_weights": fusion.get("weights"), "fusion": fusion.get("chosen")}
    report.phases["snapshot"] = round(time.perf_counter() - tp, 2)
    report.seconds = round(time.perf_counter() - t0, 2)
    return report


def _prev_manifest(root) -> Optional[dict]:
    cur = current_snapshot(root)
    return json.loads((cur / "manifest.json").read_text()) if cur else None


def build_index_dir(skills: Sequence[Any], root: os.PathLike | str, text_vectors: Callable[[list[SkillDoc]], Any],
                    seed: int = GNN_SEED, step_budget: int = GNN_STEP_BUDGET, log=None,
                    calibration: Optional[Sequence[tuple[str, str]]] = None) -> Path:
    """A query snapshot from a list of skills, without a store (the benchmark's per-fold index).

    ``text_vectors(docs)`` returns their MiniLM vectors (the benchmark caches them across folds).
    The graph encoder is trained on these skills only; ``calibration`` as in write_snapshot.
    """
    from retrieval.gnn_numpy import export_weights

    skills = [as_dict(s) for s in skills]
    docs = [d for s in skills for d in skill_docs(s)]
    root = Path(root)
    model, info = train_graph_model(docs, seed=seed, step_budget=step_budget, log=log)
    npz = root / "models" / f"{GNN_NAME}.npz"
    export_weights(model, npz)
    gmat = graph_vectors(npz, docs)
    tmat = text_vectors(docs)
    return write_snapshot(root, skills, docs, tmat, gmat, npz,
                          {"store": "", "gnn": {"name": GNN_NAME, "seed": seed, "epochs": info["train"]["epochs"],
                                                "seconds": info["seconds"]}}, calibration=calibration, log=log)
