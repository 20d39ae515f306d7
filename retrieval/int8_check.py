"""Whether int8 MiniLM may embed queries on this CPU: a one-time self-check against fp32.

onnxruntime's DynamicQuantizeMatMul rounds differently on different x86-64 CPUs (VNNI, AVX-512,
AVX2 code paths), so int8 vectors that rank like fp32's on one machine may not on another (an AMD
EPYC measured 15 of 17 nearest chunks agreeing where an Intel one had all). What a user relies on
is the ranking, so this module checks the ranking: calibration queries (chunks of the shipped
corpus's naive kernels, cut as real queries are cut) against calibration documents (chunks of its
expert kernels), both embedded by fp32; int8 is used only where its query vectors pick the same
top documents. The verdict is recorded next to the cached int8 graph
(``minilm-l6-encoder-int8.check.json``), keyed by the CPU, onnxruntime's version, the graph's
bytes and the calibration text, so it runs once per machine and again only when one of those
changes (13.6 s measured on the shared 2-core AMD EPYC VM at load average 6, 33 s at load 20:
~70 fp32 and 28 int8 chunk embeddings; `skills index` pays it, not a query). ``skills index`` runs it and prints the verdict; the server's
/health shows it (``text_encoder``).

    rec = resolve_precision(prepared_dir, 256)   # {"precision": "int8" | "fp32", "ok": ..., ...}
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from functools import lru_cache
from pathlib import Path
from typing import Optional

CHECK_FILE = "minilm-l6-encoder-int8.check.json"
KERNELS = Path(__file__).resolve().parents[1] / "corpora" / "kernels"  # the shipped corpus (data, not code)
QUERY_CHUNKS_PER_FILE, DOC_CHUNKS_PER_FILE = 2, 3

# What "ranks like fp32" means. Cosine alone is not enough (a small rotation can swap two close
# documents), and exact top-1 agreement alone is too strict (fp32's own first two documents are
# sometimes 0.0001 apart, a tie): int8 must put fp32's first document first for most queries, and
# where it does not, its pick must score within MAX_REGRET of fp32's first under fp32 itself.
MIN_COSINE = 0.95  # every calibration query, int8 vector vs fp32 vector
MIN_TOP1_AGREEMENT = 0.9  # share of queries whose first document is the same
MAX_REGRET = 0.03  # fp32 score of fp32's first document minus fp32 score of int8's first
MIN_TOP5_OVERLAP = 0.8  # mean |top5(fp32) & top5(int8)| / 5


def cpu_fingerprint() -> dict:
    """What decides int8 numerics here: the CPU model and its ISA flags, onnxruntime's version."""
    model, flags = "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            k, _, v = line.partition(":")
            if k.strip() == "model name" and not model:
                model = v.strip()
            elif k.strip() in ("flags", "Features") and not flags:
                flags = " ".join(sorted(v.split()))
            if model and flags:
                break
    except OSError:
        pass
    model = model or platform.processor()
    try:
        import onnxruntime

        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = ""
    return {"machine": platform.machine(), "cpu": model,
            "flags_sha1": hashlib.sha1(flags.encode()).hexdigest()[:12], "onnxruntime": ort_version}


def calibration_texts(count_tokens) -> tuple[list[str], list[str]]:
    """(queries, documents): line chunks of the shipped naive and expert kernels, cut as queries are."""
    from retrieval.skill_docs import query_units

    queries, docs = [], []
    for p in sorted(KERNELS.iterdir()):
        for name, out, cap in (("naive.cu", queries, QUERY_CHUNKS_PER_FILE), ("kernel.cu", docs, DOC_CHUNKS_PER_FILE)):
            f = p / name
            if f.is_file():
                units = query_units(f.read_text(), with_graphs=False, count_tokens=count_tokens).text_units
                out += [u.text for u in units[:cap]]
    return queries, docs


def compare(fp32_queries, int8_queries, fp32_docs) -> dict:
    """The ranking metrics of int8 query vectors against fp32 ones over the same documents, and the
    verdict (``ok``, ``failed``: the criteria not met)."""
    import numpy as np

    a, b, d = (np.asarray(x, dtype=np.float32) for x in (fp32_queries, int8_queries, fp32_docs))
    cos = (a * b).sum(1)
    sa, sb = a @ d.T, b @ d.T
    ta, tb = sa.argmax(1), sb.argmax(1)
    rows = np.arange(len(a))
    regret = sa[rows, ta] - sa[rows, tb]
    k = min(5, d.shape[0])
    top_a, top_b = np.argsort(-sa, 1)[:, :k], np.argsort(-sb, 1)[:, :k]
    overlap = float(np.mean([len(set(x) & set(y)) / k for x, y in zip(top_a, top_b)]))
    m = {"queries": int(len(a)), "documents": int(len(d)), "min_cosine": round(float(cos.min()), 4),
         "mean_cosine": round(float(cos.mean()), 4), "top1_agreement": round(float((ta == tb).mean()), 4),
         "max_regret": round(float(regret.max()), 4), "top5_overlap": round(overlap, 4)}
    failed = [f"{name} {m[key]} {op} {lim}" for key, name, op, lim, bad in (
        ("min_cosine", "min cosine", "<", MIN_COSINE, m["min_cosine"] < MIN_COSINE),
        ("top1_agreement", "top-1 agreement", "<", MIN_TOP1_AGREEMENT, m["top1_agreement"] < MIN_TOP1_AGREEMENT),
        ("max_regret", "max regret", ">", MAX_REGRET, m["max_regret"] > MAX_REGRET),
        ("top5_overlap", "top-5 overlap", "<", MIN_TOP5_OVERLAP, m["top5_overlap"] < MIN_TOP5_OVERLAP)) if bad]
    return dict(m, ok=not failed, failed=failed)


def run_check(path: Optional[Path], max_seq_length: int = 256) -> dict:
    """Embed the calibration set with both graphs and compare (no record read or written)."""
    import numpy as np

    from retrieval.minilm_onnx import OnnxMiniLM

    t0 = time.perf_counter()
    fp32 = OnnxMiniLM(max_seq_length, path=path, precision="fp32")
    int8 = OnnxMiniLM(max_seq_length, path=path, precision="int8")
    queries, docs = calibration_texts(fp32.count_tokens)
    # one chunk per call, as the searcher embeds them (int8 quantizes activations per call)
    a = np.stack([fp32.embed([q])[0] for q in queries])
    b = np.stack([int8.embed([q])[0] for q in queries])
    rec = compare(a, b, fp32.embed(docs))
    rec["seconds"] = round(time.perf_counter() - t0, 2)
    return rec


def _record_key(path: Optional[Path]) -> dict:
    from retrieval.minilm_onnx import ONNX_FILE_INT8

    graph = path / ONNX_FILE_INT8 if path else None
    graph_sha = hashlib.sha256(graph.read_bytes()).hexdigest()[:16] if graph and graph.is_file() else ""
    calib = hashlib.sha256()
    for p in sorted(KERNELS.iterdir()):
        for name in ("naive.cu", "kernel.cu"):
            if (p / name).is_file():
                calib.update((p / name).read_bytes())
    return dict(cpu_fingerprint(), graph_sha256=graph_sha, calibration_sha256=calib.hexdigest()[:16],
                criteria=[MIN_COSINE, MIN_TOP1_AGREEMENT, MAX_REGRET, MIN_TOP5_OVERLAP])


_VERDICTS: dict[str, dict] = {}


def resolve_precision(path: Optional[os.PathLike | str], max_seq_length: int = 256, log=None) -> dict:
    """The query precision to use with the prepared weights at ``path`` on this CPU: "int8" when the
    recorded (or, if none matches, a fresh) self-check passed, else "fp32". Returns the record:
    ``precision``, ``ok``, ``failed``, the metrics, ``key`` and ``cached``."""
    path = Path(path) if path else None
    if path is None or not (path / "layout.json").is_file():
        return dict(_check_in_memory(max_seq_length), cached=False)
    from retrieval.minilm_onnx import OnnxMiniLM

    OnnxMiniLM(max_seq_length, path=path, precision="int8").onnx_file()  # the graph the key hashes
    key = _record_key(path)
    f = path / CHECK_FILE
    try:
        rec = json.loads(f.read_text())
        if rec.get("key") == key and rec.get("precision") in ("int8", "fp32"):
            return dict(rec, cached=True)
    except (OSError, ValueError):
        pass
    memo = json.dumps(key, sort_keys=True)
    rec = _VERDICTS.get(memo)  # another store of this process, same graph bytes: the same verdict
    if rec is None:
        if log:
            log("checking int8 query embeddings against fp32 on this CPU (once per machine)")
        rec = run_check(path, max_seq_length)
        rec.update(precision="int8" if rec["ok"] else "fp32", key=key,
                   checked_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        _VERDICTS[memo] = rec
    tmp = f.with_name(f".{f.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(rec, indent=1))
        os.replace(tmp, f)
    except OSError:
        pass  # a read-only store: the verdict holds for this process only
    return dict(rec, cached=False)


@lru_cache(maxsize=2)
def _check_in_memory(max_seq_length: int) -> dict:
    rec = run_check(None, max_seq_length)
    return dict(rec, precision="int8" if rec["ok"] else "fp32", key=_record_key(None))


def describe(rec: dict) -> str:
    """One line for logs and `skills index`: the verdict and the figures behind it."""
    head = ("int8 query embeddings: used on this CPU" if rec["precision"] == "int8"
            else "int8 query embeddings: NOT used on this CPU, fp32 instead (" + "; ".join(rec.get("failed") or []) + ")")
    return (f"{head}; top-1 agreement {rec['top1_agreement']}, max regret {rec['max_regret']}, "
            f"top-5 overlap {rec['top5_overlap']}, min cosine {rec['min_cosine']} over {rec['queries']} "
            f"calibration queries ({'recorded' if rec.get('cached') else 'checked now'})")
