"""Okapi BM25 over code-aware tokens (camelCase and snake_case split, lower-cased)."""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Hashable, Iterable, Optional, Sequence

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*|\d+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def code_tokens(text: str) -> list[str]:
    """``getRelocType(MCFixup)`` -> ['getreloctype', 'get', 'reloc', 'type', 'mcfixup', 'mc', 'fixup']."""
    out: list[str] = []
    for word in _WORD.findall(text):
        low = word.lower()
        out.append(low)
        parts = [p.lower() for piece in word.split("_") for p in _CAMEL.findall(piece)]
        if len(parts) > 1:
            out.extend(parts)
    return out


class BM25:
    """Postings are numpy arrays of (document, precomputed term weight), so a query costs one
    vectorized add per distinct query term."""

    def __init__(self, docs: Sequence[Iterable[str]], ids: Sequence[Hashable], k1: float = 1.2, b: float = 0.75):
        import numpy as np

        if len(docs) != len(ids):
            raise ValueError("one id per document")
        self.ids = list(ids)
        self.k1, self.b = k1, b
        tfs = [Counter(doc) for doc in docs]
        self.lengths = [sum(tf.values()) for tf in tfs]
        self.n = len(self.ids)
        self.avgdl = (sum(self.lengths) / self.n) if self.n else 0.0
        raw: dict[str, tuple[list[int], list[int]]] = {}
        for i, tf in enumerate(tfs):
            for term, c in tf.items():
                d, n = raw.setdefault(term, ([], []))
                d.append(i)
                n.append(c)
        avg = self.avgdl or 1.0
        lengths = np.asarray(self.lengths, dtype=np.float64)
        self.postings: dict[str, tuple] = {}
        self.idf: dict[str, float] = {}
        for term, (d, c) in raw.items():
            di = np.asarray(d, dtype=np.int64)
            ci = np.asarray(c, dtype=np.float64)
            idf = math.log(1 + (self.n - len(d) + 0.5) / (len(d) + 0.5))
            w = idf * ci * (k1 + 1) / (ci + k1 * (1 - b + b * lengths[di] / avg))
            self.postings[term] = (di, w)
            self.idf[term] = idf

    @classmethod
    def from_texts(cls, texts: Sequence[str], ids: Sequence[Hashable], **kw) -> "BM25":
        return cls([code_tokens(t) for t in texts], ids, **kw)

    def score_array(self, query_tokens: Iterable[str]):
        """BM25 score of every document (numpy array, index = document position)."""
        import numpy as np

        out = np.zeros(self.n, dtype=np.float64)
        for term, qn in Counter(query_tokens).items():
            p = self.postings.get(term)
            if p is not None:
                out[p[0]] += qn * p[1]
        return out

    def scores(self, query_tokens: Iterable[str], allowed: Optional[set[int]] = None) -> dict[int, float]:
        arr = self.score_array(query_tokens)
        idx = arr.nonzero()[0]
        return {int(i): float(arr[i]) for i in idx if allowed is None or int(i) in allowed}

    def search(self, query: str, k: int = 10, allowed: Optional[set[int]] = None) -> list[tuple[Hashable, float]]:
        sc = self.scores(code_tokens(query), allowed)
        best = sorted(sc.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return [(self.ids[i], s) for i, s in best]

    # ---- persistence (a query process loads postings instead of re-tokenizing every document)
    def save(self, path) -> None:
        """Write ids, parameters and postings as one uncompressed .npz (ids must be strings or ints)."""
        import numpy as np

        terms = sorted(self.postings)
        lens = np.array([len(self.postings[t][0]) for t in terms], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        docs = np.concatenate([self.postings[t][0] for t in terms]) if terms else np.zeros(0, np.int64)
        weights = np.concatenate([self.postings[t][1] for t in terms]) if terms else np.zeros(0, np.float64)
        np.savez(path, terms=np.array("\n".join(terms)), offsets=offsets, docs=docs.astype(np.int32),
                 weights=weights.astype(np.float32), ids=np.array([str(i) for i in self.ids]),
                 params=np.array([self.k1, self.b, self.avgdl, self.n], dtype=np.float64))

    @classmethod
    def load(cls, path) -> "BM25":
        import numpy as np

        z = np.load(path)
        self = cls.__new__(cls)
        self.k1, self.b, self.avgdl, n = (float(v) for v in z["params"])
        self.n = int(n)
        self.ids = [str(i) for i in z["ids"]]
        self.lengths = []
        terms = str(z["terms"]).split("\n") if str(z["terms"]) else []
        offsets, docs, weights = z["offsets"], z["docs"].astype(np.int64), z["weights"].astype(np.float64)
        self.postings = {t: (docs[offsets[i]:offsets[i + 1]], weights[offsets[i]:offsets[i + 1]])
                         for i, t in enumerate(terms)}
        self.idf = {}
        return self
