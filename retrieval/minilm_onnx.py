"""all-MiniLM-L6-v2 through onnxruntime: the fast query-time twin of retrieval/minilm_numpy.py.

The numpy encoder is exact but slow per token (one BLAS call per matmul, the GELU and softmax as
separate numpy passes). onnxruntime runs the same network with fused kernels (its graph optimizer
fuses LayerNorm, GELU, bias adds and attention) on the same float32 weights, 2-4x faster on one
core. No ONNX file ships with the model and the ``onnx`` package is not a dependency, so the graph
is written here: a small protobuf writer emits the ONNX ``ModelProto`` of the BERT encoder, its
weights taken as initializers from the prepared (memory-mapped) arrays of minilm_numpy.py. The
serialized model (42 MB) is written once next to the prepared weights (``models/minilm-numpy/``),
so a fresh process builds its session from the file in ~0.06 s (serializing costs ~0.4 s).

The embedding lookup (a 47 MB table, of which a query reads a few hundred rows) and mean pooling
stay in numpy; onnxruntime gets the summed embeddings and the attention bias. Tokenization,
truncation, pooling and normalization are minilm_numpy's own, so both encoders return the same
vectors (cosine > 0.9999; tests compare both with sentence-transformers).

    enc = get_onnx_embedder(256)      # None when onnxruntime is missing
    vecs = enc.embed(["...", "..."])  # float32, L2-normalized, (n, 384)
"""
from __future__ import annotations

import os
import struct
import threading
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence

from retrieval.minilm_numpy import DIM, EPS, HEADS, LAYERS, NumpyMiniLM

# ONNX enums (onnx.proto3)
_FLOAT, _INT64 = 1, 7
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7
OPSET = 17  # LayerNormalization is standard from 17


# --------------------------------------------------------------------------- protobuf writer
def _varint(n: int) -> bytes:
    if n < 0:
        n &= (1 << 64) - 1  # int64 two's complement, as protobuf encodes negative int64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint((field << 3) | wire)


def _int(field: int, v: int) -> bytes:
    return _key(field, 0) + _varint(int(v))


def _bytes(field: int, v: bytes | str) -> bytes:
    if isinstance(v, str):
        v = v.encode()
    return _key(field, 2) + _varint(len(v)) + v


def _float(field: int, v: float) -> bytes:
    return _key(field, 5) + struct.pack("<f", v)


def _attr(name: str, v) -> bytes:
    if isinstance(v, float):
        return _bytes(1, name) + _float(2, v) + _int(20, _ATTR_FLOAT)
    if isinstance(v, int):
        return _bytes(1, name) + _int(3, v) + _int(20, _ATTR_INT)
    return _bytes(1, name) + b"".join(_int(8, x) for x in v) + _int(20, _ATTR_INTS)


def _node(op: str, inputs: Sequence[str], outputs: Sequence[str], name: str = "", **attrs) -> bytes:
    b = b"".join(_bytes(1, i) for i in inputs) + b"".join(_bytes(2, o) for o in outputs)
    b += _bytes(3, name or outputs[0]) + _bytes(4, op)
    b += b"".join(_bytes(5, _attr(k, v)) for k, v in attrs.items())
    return b


def _value_info(name: str, elem: int, dims: Sequence) -> bytes:
    shape = b"".join(_bytes(1, _bytes(2, d) if isinstance(d, str) else _int(1, d)) for d in dims)
    tensor_type = _int(1, elem) + _bytes(2, shape)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor_type))


def _tensor(name: str, elem: int, dims: Sequence[int], raw: bytes) -> bytes:
    return b"".join(_int(1, d) for d in dims) + _int(2, elem) + _bytes(8, name) + _bytes(9, raw)


# --------------------------------------------------------------------------- the graph
def weight_shapes() -> dict[str, tuple[int, ...]]:
    """Graph weight name -> shape: the layer weights of minilm_numpy.prepare(), plus the embedding
    LayerNorm."""
    shapes = {"ln_w": (DIM,), "ln_b": (DIM,)}
    for i in range(LAYERS):
        for k, s in (("qkv_w", (DIM, 3 * DIM)), ("qkv_b", (3 * DIM,)), ("o_w", (DIM, DIM)), ("o_b", (DIM,)),
                     ("ln1_w", (DIM,)), ("ln1_b", (DIM,)), ("i_w", (DIM, 4 * DIM)), ("i_b", (4 * DIM,)),
                     ("f_w", (4 * DIM, DIM)), ("f_b", (DIM,)), ("ln2_w", (DIM,)), ("ln2_b", (DIM,))):
            shapes[f"{i}.{k}"] = s
    return shapes


def build_model(weights: dict) -> bytes:
    """Serialized ONNX ModelProto of MiniLM's encoder: inputs ``emb`` (B, L, 384: word + position +
    type embeddings, before the embedding LayerNorm) and ``bias`` (B, 1, 1, L: 0 or -1e9 per key),
    output ``hidden`` (B, L, 384). ``weights``: minilm_numpy's prepared weights, stored as graph
    initializers (22 MB; constant weights let onnxruntime pre-pack its GEMM operands)."""
    import numpy as np

    hd = DIM // HEADS
    nodes: list[bytes] = []
    consts = [_tensor("shape_heads", _INT64, [4], np.array([0, 0, HEADS, hd], np.int64).tobytes()),
              _tensor("shape_model", _INT64, [3], np.array([0, 0, DIM], np.int64).tobytes()),
              _tensor("split_qkv", _INT64, [3], np.array([DIM] * 3, np.int64).tobytes()),
              _tensor("scale", _FLOAT, [], np.float32(1.0 / np.sqrt(hd)).tobytes()),
              _tensor("half", _FLOAT, [], np.float32(0.5).tobytes()),
              _tensor("one", _FLOAT, [], np.float32(1.0).tobytes()),
              _tensor("rsqrt2", _FLOAT, [], np.float32(0.7071067811865476).tobytes())]
    nodes.append(_node("LayerNormalization", ["emb", "ln_w", "ln_b"], ["x_e"], axis=-1, epsilon=EPS))
    x = "x_e"
    for i in range(LAYERS):
        p = f"{i}."
        n = lambda s: f"l{i}_{s}"  # noqa: E731
        nodes += [
            _node("MatMul", [x, p + "qkv_w"], [n("qkv_mm")]),
            _node("Add", [n("qkv_mm"), p + "qkv_b"], [n("qkv")]),
            _node("Split", [n("qkv"), "split_qkv"], [n("q0"), n("k0"), n("v0")], axis=-1),
        ]
        for t, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            nodes += [_node("Reshape", [n(t + "0"), "shape_heads"], [n(t + "1")]),
                      _node("Transpose", [n(t + "1")], [n(t)], perm=perm)]
        nodes += [
            _node("MatMul", [n("q"), n("k")], [n("s0")]),
            _node("Mul", [n("s0"), "scale"], [n("s1")]),
            _node("Add", [n("s1"), "bias"], [n("s2")]),
            _node("Softmax", [n("s2")], [n("p")], axis=-1),
            _node("MatMul", [n("p"), n("v")], [n("c0")]),
            _node("Transpose", [n("c0")], [n("c1")], perm=[0, 2, 1, 3]),
            _node("Reshape", [n("c1"), "shape_model"], [n("c")]),
            _node("MatMul", [n("c"), p + "o_w"], [n("o0")]),
            _node("Add", [n("o0"), p + "o_b"], [n("o1")]),
            _node("Add", [x, n("o1")], [n("r1")]),
            _node("LayerNormalization", [n("r1"), p + "ln1_w", p + "ln1_b"], [n("x1")], axis=-1, epsilon=EPS),
            _node("MatMul", [n("x1"), p + "i_w"], [n("h0")]),
            _node("Add", [n("h0"), p + "i_b"], [n("h1")]),
            # exact GELU, x * 0.5 * (1 + erf(x / sqrt 2)): the pattern onnxruntime fuses into Gelu
            _node("Mul", [n("h1"), "rsqrt2"], [n("g0")]),
            _node("Erf", [n("g0")], [n("g1")]),
            _node("Add", [n("g1"), "one"], [n("g2")]),
            _node("Mul", [n("h1"), n("g2")], [n("g3")]),
            _node("Mul", [n("g3"), "half"], [n("h")]),
            _node("MatMul", [n("h"), p + "f_w"], [n("f0")]),
            _node("Add", [n("f0"), p + "f_b"], [n("f1")]),
            _node("Add", [n("x1"), n("f1")], [n("r2")]),
            _node("LayerNormalization", [n("r2"), p + "ln2_w", p + "ln2_b"], [n("x2")], axis=-1, epsilon=EPS),
        ]
        x = n("x2")
    nodes.append(_node("Identity", [x], ["hidden"]))
    inputs = [_value_info("emb", _FLOAT, ["B", "L", DIM]), _value_info("bias", _FLOAT, ["B", 1, 1, "L"])]
    for name, shape in weight_shapes().items():
        if "." in name:
            i, k = name.split(".", 1)
            arr = weights["layers"][int(i)][k]
        else:
            arr = weights[name]
        arr = np.ascontiguousarray(arr, dtype="<f4")
        if tuple(arr.shape) != shape:
            raise ValueError(f"MiniLM weight {name}: shape {arr.shape}, expected {shape}")
        consts.append(_tensor(name, _FLOAT, list(shape), arr.tobytes()))
    graph = b"".join(_bytes(1, nd) for nd in nodes) + _bytes(2, "minilm_l6_encoder")
    graph += b"".join(_bytes(5, c) for c in consts)
    graph += b"".join(_bytes(11, v) for v in inputs)
    graph += _bytes(12, _value_info("hidden", _FLOAT, ["B", "L", DIM]))
    opset = _bytes(1, "") + _int(2, OPSET)
    # ir_version 8 (onnxruntime >= 1.12), producer, graph, opset
    return _int(1, 8) + _bytes(2, "kernel-skills") + _bytes(7, graph) + _bytes(8, opset)


ONNX_FILE = "minilm-l6-encoder.onnx"


def write_onnx(dest: os.PathLike | str, weights: dict) -> Path:
    """Write ``build_model(weights)`` as ``dest``/ONNX_FILE (atomically: concurrent queries may race)."""
    dest = Path(dest)
    tmp = dest / f".{ONNX_FILE}.{os.getpid()}.tmp"
    tmp.write_bytes(build_model(weights))
    os.replace(tmp, dest / ONNX_FILE)
    return dest / ONNX_FILE


# --------------------------------------------------------------------------- the encoder
class OnnxMiniLM(NumpyMiniLM):
    """Same tokenizer, embeddings, pooling and weights as NumpyMiniLM; the encoder layers run in
    onnxruntime (``threads`` intra-op threads: 1 by default, see SKILLS_BLAS_THREADS)."""

    def __init__(self, max_seq_length: int = 256, batch_size: int = 32, path=None, threads: Optional[int] = None):
        super().__init__(max_seq_length=max_seq_length, batch_size=batch_size, path=path)
        self.threads = threads or int(os.environ.get("SKILLS_BLAS_THREADS", "1") or 1)
        self._sess = None
        self._slock = threading.Lock()

    @property
    def backend(self) -> str:
        return "onnxruntime"

    def session(self):
        with self._slock:
            if self._sess is None:
                import onnxruntime as ort

                w, _ = self._load()
                so = ort.SessionOptions()
                so.intra_op_num_threads = self.threads
                so.inter_op_num_threads = 1
                so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                so.log_severity_level = 3
                model = self.onnx_file()
                self._sess = ort.InferenceSession(str(model) if model else build_model(w), sess_options=so,
                                                  providers=["CPUExecutionProvider"])
        return self._sess

    def onnx_file(self) -> Optional[Path]:
        """The serialized graph next to the prepared weights, written on first use: loading it takes
        ~0.06 s where serializing it again takes ~0.4 s. None for the wheel's own folder (read-only)."""
        if not (self.path / "layout.json").is_file():
            return None
        f = self.path / ONNX_FILE
        if not f.is_file():
            try:
                write_onnx(self.path, self._load()[0])
            except OSError:
                return None
        return f

    def _forward(self, ids, mask):
        import numpy as np

        w, _ = self._load()
        sess = self.session()
        B, L = ids.shape
        x = np.asarray(w["word"][ids.reshape(-1)], dtype=np.float32).reshape(B, L, DIM)
        x = np.ascontiguousarray(x + w["pos"][:L][None] + w["type0"], dtype=np.float32)
        bias = np.ascontiguousarray((1.0 - mask[:, None, None, :].astype(np.float32)) * np.float32(-1e9))
        h = sess.run(["hidden"], {"emb": x, "bias": bias})[0]
        m = mask[..., None].astype(np.float32)
        pooled = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)



@lru_cache(maxsize=4)
def get_onnx_embedder(max_seq_length: int = 256, path: Optional[str] = None) -> Optional[OnnxMiniLM]:
    """The onnxruntime encoder, or None when onnxruntime cannot be imported."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return None
    return OnnxMiniLM(max_seq_length=max_seq_length, path=path)
