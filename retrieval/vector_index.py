"""Persistent vector collections (chromadb) with embedding functions of our own.

chromadb falls back to its default ONNX model (a network download) whenever a collection has
no embedding function; every collection here is created with one of the two registered below:

* ``kernel-skills-minilm``: texts -> all-MiniLM-L6-v2 vectors (retrieval/text.py), so
  ``query_texts`` works offline;
* ``kernel-skills-precomputed``: for vectors computed elsewhere (GNN graph embeddings); asking
  it to embed text is an error rather than a silent download.

One PersistentClient per path per process (two with different settings raise in chromadb).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Optional, Sequence

MAX_BATCH = 5000  # chromadb's max batch is 5461 at 384 dims

_CLIENTS: dict[str, Any] = {}
_LOCK = threading.Lock()
_REGISTERED = False


def _register() -> tuple[type, type]:
    """Define and register the embedding functions (imports chromadb, so done lazily)."""
    global _REGISTERED, MiniLMEmbeddingFunction, PrecomputedEmbeddingFunction
    if _REGISTERED:
        return MiniLMEmbeddingFunction, PrecomputedEmbeddingFunction
    from chromadb.api.types import EmbeddingFunction
    from chromadb.utils.embedding_functions import register_embedding_function

    class _MiniLM(EmbeddingFunction):
        def __init__(self, max_seq_length: int = 256):
            self.max_seq_length = int(max_seq_length)

        def __call__(self, input):
            from retrieval.text import get_embedder

            return [v for v in get_embedder(self.max_seq_length).embed(list(input))]

        @staticmethod
        def name() -> str:
            return "kernel-skills-minilm"

        def get_config(self) -> dict:
            return {"max_seq_length": self.max_seq_length}

        @staticmethod
        def build_from_config(config: dict):
            return _MiniLM(int(config.get("max_seq_length", 256)))

        def default_space(self):
            return "cosine"

    class _Precomputed(EmbeddingFunction):
        def __init__(self, dim: int = 0):
            self.dim = int(dim)

        def __call__(self, input):
            raise RuntimeError("this collection holds precomputed vectors; pass query_embeddings, not texts")

        @staticmethod
        def name() -> str:
            return "kernel-skills-precomputed"

        def get_config(self) -> dict:
            return {"dim": self.dim}

        @staticmethod
        def build_from_config(config: dict):
            return _Precomputed(int(config.get("dim", 0)))

        def default_space(self):
            return "cosine"

    _MiniLM.__name__ = "MiniLMEmbeddingFunction"
    _Precomputed.__name__ = "PrecomputedEmbeddingFunction"
    register_embedding_function(_MiniLM)
    register_embedding_function(_Precomputed)
    MiniLMEmbeddingFunction, PrecomputedEmbeddingFunction = _MiniLM, _Precomputed
    _REGISTERED = True
    return _MiniLM, _Precomputed


MiniLMEmbeddingFunction: Any = None
PrecomputedEmbeddingFunction: Any = None


def client(path: os.PathLike | str):
    """The process's PersistentClient for ``path`` (telemetry off)."""
    key = str(Path(path).resolve())
    with _LOCK:
        if key not in _CLIENTS:
            import chromadb
            from chromadb.config import Settings

            Path(key).mkdir(parents=True, exist_ok=True)
            _CLIENTS[key] = chromadb.PersistentClient(path=key, settings=Settings(anonymized_telemetry=False,
                                                                                   allow_reset=False))
        return _CLIENTS[key]


class VectorIndex:
    """Named collections under one chroma folder; cosine space."""

    def __init__(self, path: os.PathLike | str):
        self.path = Path(path)
        self._client = None

    @property
    def client(self):
        if self._client is None:
            _register()
            self._client = client(self.path)
        return self._client

    def collection(self, name: str, kind: str = "text", dim: int = 0, max_seq_length: int = 256):
        """Get or create collection ``name``; ``kind`` is "text" (MiniLM) or "precomputed"."""
        minilm, pre = _register()
        ef = minilm(max_seq_length) if kind == "text" else pre(dim)
        return self.client.get_or_create_collection(name=name, embedding_function=ef,
                                                    metadata={"hnsw:space": "cosine", "kind": kind})

    def has(self, name: str) -> bool:
        return name in {c.name if hasattr(c, "name") else str(c) for c in self.client.list_collections()}

    def drop(self, name: str) -> None:
        if self.has(name):
            self.client.delete_collection(name)

    def upsert(self, name: str, ids: Sequence[str], embeddings=None, metadatas: Optional[Sequence[dict]] = None,
               documents: Optional[Sequence[str]] = None, kind: str = "text", dim: int = 0) -> int:
        col = self.collection(name, kind=kind, dim=dim)
        n = len(ids)
        for s in range(0, n, MAX_BATCH):
            e = s + MAX_BATCH
            kw: dict[str, Any] = {"ids": list(ids[s:e])}
            if embeddings is not None:
                kw["embeddings"] = [list(map(float, v)) for v in embeddings[s:e]]
            if metadatas is not None:
                kw["metadatas"] = list(metadatas[s:e])
            if documents is not None:
                kw["documents"] = list(documents[s:e])
            col.upsert(**kw)
        return n

    def delete_where(self, name: str, where: dict) -> None:
        if self.has(name):
            self.collection(name).delete(where=where)

    def get_all(self, name: str, where: Optional[dict] = None) -> tuple[list[str], Any, list[dict]]:
        """(ids, embeddings as float32 matrix, metadatas) of a collection, in id order."""
        import numpy as np

        col = self.client.get_collection(name)
        got = col.get(where=where, include=["embeddings", "metadatas"])
        ids = list(got["ids"])
        emb = got["embeddings"]
        mat = np.asarray(emb, dtype=np.float32) if emb is not None and len(emb) else np.zeros((0, 0), np.float32)
        order = sorted(range(len(ids)), key=lambda i: ids[i])
        return [ids[i] for i in order], (mat[order] if len(order) else mat), [got["metadatas"][i] for i in order]

    def query(self, name: str, embeddings=None, texts: Optional[Sequence[str]] = None, k: int = 10,
              where: Optional[dict] = None) -> list[list[tuple[str, float, dict]]]:
        """Approximate nearest neighbours (HNSW): per query, [(id, cosine distance, metadata)]."""
        col = self.client.get_collection(name)
        kw: dict[str, Any] = {"n_results": k, "include": ["distances", "metadatas"]}
        if where:
            kw["where"] = where
        if embeddings is not None:
            kw["query_embeddings"] = [list(map(float, v)) for v in embeddings]
        else:
            kw["query_texts"] = list(texts or [])
        res = col.query(**kw)
        return [list(zip(ids, dists, metas)) for ids, dists, metas in
                zip(res["ids"], res["distances"], res["metadatas"])]
