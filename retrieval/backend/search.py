"""Two-level retrieval over the backend corpus.

Level 1, targets: cosine similarity of the targets' attribute-graph embeddings (a GNN trained
contrastively on LLVM's own targets, retrieval/backend/index.py).

Level 2, functions, over the shared-role functions of the other targets:
* ``bm25``:  BM25 over code tokens of signature + body (target names neutralized);
* ``text``:  MiniLM cosine of the same text;
* ``graph``: cosine of syntax-graph GNN embeddings;
* ``fused``: reciprocal-rank fusion of the three, plus the candidate's target rank (level 1)
  with weight ``TARGET_WEIGHT``, so among equally good functions the one from the more similar
  target wins.

``BackendIndex`` loads what it needs from the store once (the benchmark issues hundreds of
queries); ``search`` answers a code query, ``role_candidates`` ranks the implementations of one
role for generation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from retrieval.backend.index import (
    TEXT_COLLECTION, function_doc, function_graph, model_tag, shared_role_functions, target_aliases,
)
from retrieval.backend.selection import TARGET_TIEBREAK, agreement_matrix, candidate_features, declaration_sets, votes
from retrieval.fusion import rrf

MODES = ("bm25", "text", "graph", "fused")
TARGET_WEIGHT = 0.5
DEPTH = 200  # per-modality ranking depth fed to fusion


class SearchError(Exception):
    """Bad query input (unknown target or role, empty store); one line for the user."""


@dataclass
class Hit:
    func_id: str
    target: str
    role: str
    qualified_name: str
    score: float
    ranks: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"func_id": self.func_id, "target": self.target, "role": self.role,
                "qualified_name": self.qualified_name, "score": round(self.score, 6), "ranks": self.ranks}


class BackendIndex:
    def __init__(self, store, exclude_from_training: Optional[Sequence[str]] = None):
        """``exclude_from_training`` picks the models (the targets they were trained without);
        None: the models trained on every target, else the most recent ones the store has."""
        self.store = store
        if exclude_from_training is None:
            self.tag = model_tag(())
            if store.model(f"backend-func-gnn__{self.tag}") is None:
                latest = store.query("SELECT name FROM models WHERE name LIKE 'backend-func-gnn__%' "
                                     "ORDER BY created_at DESC LIMIT 1")
                if latest:
                    self.tag = latest[0]["name"].split("__", 1)[1]
        else:
            self.tag = model_tag(exclude_from_training)
        self.rows = shared_role_functions(store)
        if not self.rows:
            raise SearchError(f"no backend functions in the store at {store.root}; run `skills backend index <llvm>/lib/Target` first")
        self.aliases = target_aliases(store)
        self.pos = {r["func_id"]: i for i, r in enumerate(self.rows)}
        self.targets = sorted({r["target"] for r in self.rows} | set(self.aliases))
        self._bm25 = None
        self._text = None
        self._graph = None
        self._tvec = None
        self._func_model = None
        self._decls = None

    # ---- lazy parts
    def docs(self) -> list[str]:
        return [function_doc(r["signature"], r["body"], self.aliases.get(r["target"], [r["target"]])) for r in self.rows]

    @property
    def bm25(self):
        if self._bm25 is None:
            from retrieval.bm25 import BM25

            self._bm25 = BM25.from_texts(self.docs(), list(range(len(self.rows))))
        return self._bm25

    def _matrix(self, collection: str):
        import numpy as np

        from retrieval.vector_index import VectorIndex

        vi = VectorIndex(self.store.chroma_dir)
        if not vi.has(collection):
            raise SearchError(f"the store has no {collection} vectors; run `skills backend index` first")
        ids, mat, _ = vi.get_all(collection)
        out = np.zeros((len(self.rows), mat.shape[1]), dtype=np.float32)
        have = np.zeros(len(self.rows), dtype=bool)
        for i, fid in enumerate(ids):
            p = self.pos.get(fid)
            if p is not None:
                out[p] = mat[i]
                have[p] = True
        return out, have

    @property
    def text(self):
        if self._text is None:
            self._text = self._matrix(TEXT_COLLECTION)
        return self._text

    @property
    def graph(self):
        if self._graph is None:
            self._graph = self._matrix(f"backend_func_graph__{self.tag}")
        return self._graph

    @property
    def target_vectors(self) -> dict:
        if self._tvec is None:
            from retrieval.vector_index import VectorIndex

            vi = VectorIndex(self.store.chroma_dir)
            name = f"backend_target_graph__{self.tag}"
            if not vi.has(name):
                raise SearchError(f"the store has no {name} vectors; run `skills backend index` first")
            ids, mat, _ = vi.get_all(name)
            self._tvec = {t: mat[i] for i, t in enumerate(ids)}
        return self._tvec

    def func_model(self):
        if self._func_model is None:
            from retrieval.gnn import load_checkpoint

            m = self.store.model(f"backend-func-gnn__{self.tag}")
            if m is None:
                raise SearchError(f"no function graph model backend-func-gnn__{self.tag} in the store")
            self._func_model, _ = load_checkpoint(m["path"])
        return self._func_model

    # ---- level 1
    def target_similarity(self, target: str) -> dict[str, float]:
        import numpy as np

        tv = self.target_vectors
        if target not in tv:
            raise SearchError(f"unknown target {target!r}; indexed: {', '.join(sorted(tv))}")
        q = tv[target]
        return {t: float(np.dot(q, v)) for t, v in tv.items() if t != target}

    def similar_targets(self, target: str, k: int = 5) -> list[tuple[str, float]]:
        sims = self.target_similarity(target)
        return sorted(sims.items(), key=lambda kv: (-kv[1], kv[0]))[:k]

    # ---- query vectors
    def query_vectors(self, signature: str, body: str, target: Optional[str]):
        """(doc, text vector, graph vector) for a function given as text."""
        from retrieval.backend.index import text_embedder
        from retrieval.gnn import embed

        aliases = self.aliases.get(target, [target]) if target else []
        doc = function_doc(signature, body, aliases)
        tvec = text_embedder().embed([doc[:2000]])[0]  # cut as the index cuts
        gvec = embed(self.func_model(), [function_graph(signature, body, aliases)])[0]
        return doc, tvec, gvec

    def stored_query(self, func_id: str):
        """Query parts of an indexed function (the benchmark queries with held-out functions)."""
        p = self.pos.get(func_id)
        if p is None:
            raise SearchError(f"{func_id} is not a shared-role function in the store")
        r = self.rows[p]
        doc = function_doc(r["signature"], r["body"], self.aliases.get(r["target"], [r["target"]]))
        tm, th = self.text
        gm, gh = self.graph
        return doc, (tm[p] if th[p] else None), (gm[p] if gh[p] else None)

    # ---- level 2
    def search(self, doc: str, text_vec, graph_vec, query_target: Optional[str] = None,
               exclude_targets: Sequence[str] = (), k: int = 10, roles: Optional[set[str]] = None,
               target_weight: float = TARGET_WEIGHT) -> dict[str, list[Hit]]:
        """Rankings per mode (``MODES``, plus ``fused_function_level``: the fusion without the
        target level) over the functions of targets not excluded."""
        import numpy as np

        excl = set(exclude_targets)
        if query_target:
            excl.add(query_target)
        allowed = np.array([r["target"] not in excl and (roles is None or r["role"] in roles) for r in self.rows])
        idx = np.nonzero(allowed)[0]
        rankings: dict[str, list[int]] = {}
        scores: dict[str, dict[int, float]] = {}
        from retrieval.bm25 import code_tokens

        bm = self.bm25.score_array(code_tokens(doc))
        bm_allowed = np.where(allowed, bm, 0.0)
        nz = np.nonzero(bm_allowed > 0)[0]
        order = nz[np.lexsort((nz, -bm_allowed[nz]))][:DEPTH]
        rankings["bm25"] = [int(i) for i in order]
        scores["bm25"] = {int(i): float(bm[i]) for i in order}
        for mode, vec, (mat, have) in (("text", text_vec, self.text), ("graph", graph_vec, self.graph)):
            if vec is None:
                rankings[mode], scores[mode] = [], {}
                continue
            sims = mat[idx] @ vec
            sims = np.where(have[idx], sims, -1.0)
            top = np.argsort(-sims, kind="stable")[:DEPTH]
            rankings[mode] = [int(idx[j]) for j in top]
            scores[mode] = {int(idx[j]): float(sims[j]) for j in top}
        lists = [rankings["bm25"], rankings["text"], rankings["graph"]]
        fused_fn = rrf(lists)
        rankings["fused_function_level"] = [i for i, _ in fused_fn]
        scores["fused_function_level"] = dict(fused_fn)
        weights = [1.0, 1.0, 1.0]
        if query_target and target_weight > 0 and query_target in self.target_vectors:
            tsim = self.target_similarity(query_target)
            pool = sorted({i for lst in lists for i in lst})
            t_order = sorted(pool, key=lambda i: (-tsim.get(self.rows[i]["target"], -1.0), i))
            lists = lists + [t_order]
            weights.append(target_weight)
            fused = rrf(lists, weights=weights)
        else:
            fused = fused_fn
        rankings["fused"] = [i for i, _ in fused]
        scores["fused"] = dict(fused)
        out: dict[str, list[Hit]] = {}
        all_modes = MODES + ("fused_function_level",)
        rank_of = {m: {i: n + 1 for n, i in enumerate(rankings[m])} for m in all_modes}
        for mode in all_modes:
            hits = []
            for i in rankings[mode][:k]:
                r = self.rows[i]
                hits.append(Hit(r["func_id"], r["target"], r["role"], r["qualified_name"], scores[mode].get(i, 0.0),
                                {m: rank_of[m].get(i) for m in MODES}))
            out[mode] = hits
        return out

    def roles(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for r in self.rows:
            out.setdefault(r["role"], set()).add(r["target"])
        return out

    def role_rows(self, role: str, exclude_targets: Sequence[str] = ()) -> list[dict]:
        excl = set(exclude_targets)
        return [r for r in self.rows if r["role"] == role and r["target"] not in excl]

    def typicality(self, func_ids: Sequence[str]) -> dict[str, float]:
        """Per function: mean of its text and graph cosines to the other functions given."""
        import numpy as np

        tm, th = self.text
        gm, gh = self.graph
        ps = [self.pos[f] for f in func_ids]
        out = {}
        for a, p in enumerate(ps):
            others = [q for b, q in enumerate(ps) if b != a]
            t = float(np.mean(tm[others] @ tm[p])) if others and th[p] else 0.0
            g = float(np.mean(gm[others] @ gm[p])) if others and gh[p] else 0.0
            out[self.rows[p]["func_id"]] = (t + g) / 2
        return out

    def declarations(self) -> dict[str, set]:
        if self._decls is None:
            self._decls = declaration_sets(self.store)
        return self._decls

    def role_candidates(self, target: str, role: str, k: int = 3, exclude_targets: Sequence[str] = (),
                        consensus: Optional[dict[str, float]] = None,
                        mappability: Optional[dict[str, float]] = None,
                        statements: Optional[dict[str, Sequence[str]]] = None, selector=None) -> list[Hit]:
        """Implementations of ``role`` from other targets, best first, for generating T's version.

        Score = consensus + ``TARGET_TIEBREAK`` x target similarity (level 1). ``consensus`` is
        the candidate's minimum-Bayes-risk score (retrieval/backend/adapt.consensus_scores:
        how much of what the other implementations agree on it reproduces, all adapted to T);
        without it, the function-level text+graph typicality (mean cosine to the role's other
        implementations) stands in. ``mappability`` is reported, not ranked on (it did not
        help on validation targets; see docs/backends.md).

        ``selector`` (opt-in, a retrieval/backend/selection.LinearSelector) ranks by learned weights
        over ``retrieval.backend.selection.FEATURES`` instead; it needs ``consensus`` and ``statements`` (the
        candidates' adapted statements). Not the default: no fit beat the rule on the
        development targets (eval/results/backend_selection_study.json, ``learned_selector``).
        """
        cands = [r for r in self.role_rows(role, list(exclude_targets) + [target])]
        if not cands:
            raise SearchError(f"no implementation of role {role!r} in targets other than {target}")
        tsim = self.target_similarity(target) if target in self.target_vectors else {}
        ps = [self.pos[r["func_id"]] for r in cands]
        ids = [r["func_id"] for r in cands]
        if selector is not None and (consensus is None or statements is None):
            raise SearchError("a learned donor selector needs the candidates' consensus scores and adapted statements")
        if consensus is None:
            consensus = self.typicality(ids)
        scored = []
        for p in ps:
            r = self.rows[p]
            c = consensus.get(r["func_id"], 0.0)
            ts = tsim.get(r["target"], 0.0)
            scored.append((c + TARGET_TIEBREAK * ts, p, c, ts))
        scored.sort(key=lambda x: (-x[0], x[1]))
        if selector is not None:
            _, precision = votes(ids, agreement_matrix({i: statements.get(i, []) for i in ids}))
            rows = candidate_features(ids, {r["func_id"]: r["target"] for r in cands}, consensus, precision, tsim,
                                      self.declarations(), target, self.typicality(ids), mappability or {},
                                      {i: len(statements.get(i, [])) for i in ids})
            sc = selector.scores(rows)
            by_p = {x[1]: x for x in scored}
            scored = [(sc[a],) + by_p[ps[a]][1:] for a in selector.order(rows)]
        hits = []
        for score, p, c, ts in scored[:k]:
            r = self.rows[p]
            ranks = {"consensus": round(c, 4), "target_similarity": round(ts, 4)}
            if mappability:
                ranks["mappability"] = round(mappability.get(r["func_id"], 0.0), 4)
            hits.append(Hit(r["func_id"], r["target"], r["role"], r["qualified_name"], score, ranks))
        return hits
