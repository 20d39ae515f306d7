"""Measure every corpus expert and naive kernel on a GPU against PyTorch eager and the roofline.

    python -m eval.bench_corpus [--problems a,b] [--store DIR] [--json] [--out FILE]   (needs a CUDA GPU)

Kernel times come from the gate's profile stage (CUDA events around the entry, L2 flushed
before each repeat, median of repeats) on each problem's primary large workload (the first
tagged "large"). PyTorch eager is timed the same way (events, flush, median). Memory-bound
problems are compared with the measured device-to-device copy bandwidth, GEMMs with cuBLAS
(torch.matmul; TF32 off for fp32). Targets (issue 3): memory-bound experts >= 70% of copy
bandwidth and >= 1.0x eager; sgemm >= 60% of cuBLAS fp32; every expert >= 3x its naive.
The table goes to stdout; the JSON (stamped: eval/stamp.py) to --out, else to an untracked
temporary corpus_<device>.json (eval/results/corpus_h200.json is the committed record).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

from eval.stamp import stamp, write_result

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpora" / "kernels"

F32, F16, I32 = 4, 2, 4


def eager_reference(name: str) -> Callable[..., Any]:
    """PyTorch eager equivalent per problem: f(inputs: dict of tensors, axes) -> outputs."""
    import torch
    import torch.nn.functional as F

    def rmsnorm(t, a):
        h = t["x"] + t["residual"]
        return F.rms_norm(h, (a["N"],), t["weight"], float(a["eps"])), h

    table = {
        "vector_add": lambda t, a: t["a"] + t["b"],
        "reduce_sum": lambda t, a: t["x"].sum(),
        "softmax": lambda t, a: torch.softmax(t["x"], dim=-1),
        "layernorm": lambda t, a: F.layer_norm(t["x"], (a["N"],), t["gamma"], t["beta"], float(a["eps"])),
        "rmsnorm_residual": rmsnorm,
        "sgemm": lambda t, a: t["A"] @ t["B"],
        "tiled_matmul": lambda t, a: t["A"] @ t["B"],
        "hgemm_wmma": lambda t, a: torch.matmul(t["A"], t["B"]).float(),
        "transpose": lambda t, a: t["x"].t().contiguous(),
        "histogram": lambda t, a: torch.bincount(t["x"], minlength=a["BINS"]),
        "exclusive_scan": lambda t, a: torch.cumsum(t["x"], 0, dtype=torch.int32) - t["x"],
        "bias_gelu": lambda t, a: F.gelu(t["x"] + t["bias"], approximate="tanh"),
        "attention_fwd": lambda t, a: F.scaled_dot_product_attention(t["Q"], t["K"], t["V"]),
        "conv2d_3x3": lambda t, a: F.conv2d(t["x"][None], t["w"][:, None], padding=1, groups=a["C"])[0],
    }
    return table[name]


def _work(name: str, a: dict[str, int]) -> dict[str, float]:
    """Minimum bytes moved and flops for one workload (what a perfect kernel must do)."""
    if name in ("sgemm", "tiled_matmul"):
        return {"flops": 2.0 * a["M"] * a["N"] * a["K"], "bytes": F32 * (a["M"] * a["K"] + a["K"] * a["N"] + a["M"] * a["N"])}
    if name == "hgemm_wmma":
        return {"flops": 2.0 * a["M"] * a["N"] * a["K"], "bytes": F16 * (a["M"] * a["K"] + a["K"] * a["N"]) + F32 * a["M"] * a["N"]}
    if name == "attention_fwd":
        n = a["B"] * a["H"] * a["S"] * a["D"]
        return {"flops": 4.0 * a["B"] * a["H"] * a["S"] * a["S"] * a["D"], "bytes": F32 * 4 * n}
    if name == "vector_add":
        return {"bytes": F32 * 3 * a["N"]}
    if name == "reduce_sum":
        return {"bytes": F32 * a["N"]}
    if name in ("softmax", "transpose", "layernorm"):
        key = ("M", "N") if name != "transpose" else ("R", "C")
        return {"bytes": F32 * 2 * a[key[0]] * a[key[1]]}
    if name == "rmsnorm_residual":
        return {"bytes": F32 * 4 * a["M"] * a["N"]}
    if name == "bias_gelu":
        return {"bytes": F32 * 2 * a["M"] * a["N"]}
    if name == "histogram":
        return {"bytes": I32 * a["N"]}
    if name == "exclusive_scan":
        return {"bytes": I32 * 2 * a["N"]}
    if name == "conv2d_3x3":
        return {"bytes": F32 * 2 * a["C"] * a["H"] * a["W"]}
    raise KeyError(name)


def time_cuda(fn: Callable[[], Any], warmup: int = 5, repeats: int = 30, flush_bytes: int = 256 << 20) -> dict[str, float]:
    import torch

    flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for r in range(repeats):
        flush.fill_(r & 0xFF)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    q = statistics.quantiles(times, n=4)
    return {"median_ms": statistics.median(times), "iqr_ms": q[2] - q[0], "min_ms": min(times)}


def copy_bandwidth_gbs(nbytes: int = 2 << 30) -> float:
    import torch

    x = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    y = torch.empty_like(x)
    t = time_cuda(lambda: y.copy_(x), repeats=20)
    return 2 * nbytes / (t["median_ms"] * 1e-3) / 1e9


def torch_inputs(problem, workload) -> dict[str, Any]:
    import numpy as np
    import torch

    from mining.gate.data import bf16_to_f32, make_inputs

    out = {}
    for name, value in make_inputs(problem.definition, workload, 0).items():
        spec = problem.definition.inputs[name]
        if spec.is_scalar:
            out[name] = value
            continue
        arr = bf16_to_f32(value) if spec.dtype == "bfloat16" else value
        t = torch.from_numpy(np.ascontiguousarray(arr)).cuda()
        if spec.dtype == "int32" and problem.name == "histogram":
            t = t.long()  # bincount needs int64
        out[name] = t
    return out


def bench_problem(name: str, store: Path, copy_gbs: float) -> dict[str, Any]:
    import torch

    from corpora.problem import load_problem
    from mining.gate import GateConfig, run_gate

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    problem = load_problem(CORPUS / name)
    primary = next(w for w in problem.workloads if "large" in w.tags)
    row: dict[str, Any] = {"problem": name, "op_type": problem.definition.op_type, "workload": primary.label,
                           "gpu_only": problem.solution.gpu_only}
    cfg = GateConfig(executor="cuda", stages=("profile",), store=store)
    for kernel in ("kernel.cu", "naive.cu"):
        r = run_gate(CORPUS / name, kernel=Path(kernel), config=cfg)
        prof = r.stages["profile"]
        key = "expert" if kernel == "kernel.cu" else "naive"
        if prof.get("status") != "pass":
            row[f"{key}_error"] = prof.get("reason")
            continue
        row[f"{key}_ms"] = prof["workloads"][primary.label]["median_ms"]
        row[f"{key}_iqr_ms"] = prof["workloads"][primary.label]["iqr_ms"]
    tensors = torch_inputs(problem, primary)
    axes = {**primary.axes, **primary.scalars}
    fn = eager_reference(name)
    eager = time_cuda(lambda t=tensors: fn(t, axes))
    row["eager_ms"] = eager["median_ms"]
    work = _work(name, primary.axes)
    row.update(work)
    if "expert_ms" in row:
        t = row["expert_ms"] * 1e-3
        row["expert_gbs"] = work["bytes"] / t / 1e9
        row["pct_copy_bw"] = 100 * row["expert_gbs"] / copy_gbs
        row["vs_eager"] = row["eager_ms"] / row["expert_ms"]
        if "flops" in work:
            row["expert_tflops"] = work["flops"] / t / 1e12
            row["eager_tflops"] = work["flops"] / (row["eager_ms"] * 1e-3) / 1e12
        if "naive_ms" in row:
            row["vs_naive"] = row["naive_ms"] / row["expert_ms"]
    row["memory_bound"] = "flops" not in work
    row["example"] = "example" in problem.definition.tags
    targets = {}
    if "expert_ms" in row and not row["example"]:  # the gate's small examples carry no corpus targets
        targets["ge_3x_naive"] = row.get("vs_naive", 0) >= 3.0
        if row["memory_bound"]:
            targets["ge_70pct_copy_bw"] = row["pct_copy_bw"] >= 70.0
            targets["ge_1x_eager"] = row["vs_eager"] >= 1.0
        if name == "sgemm":
            targets["ge_60pct_cublas"] = row["vs_eager"] >= 0.6
    row["targets"] = targets
    del tensors
    torch.cuda.empty_cache()
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--store", type=Path, default=ROOT / ".skills")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here (eval/results/... to record it)")
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    origin = stamp("eval.bench_corpus", raw_argv)
    import torch

    if not torch.cuda.is_available():
        print("bench_corpus needs a CUDA GPU (run it through the device machine)", file=sys.stderr)
        return 2
    names = [n for n in args.problems.split(",") if n] or sorted(
        p.name for p in CORPUS.iterdir() if (p / "definition.json").exists() and (p / "naive.cu").exists())
    copy_gbs = copy_bandwidth_gbs()
    device = torch.cuda.get_device_name(0)
    rows = []
    for name in names:
        try:
            rows.append(bench_problem(name, args.store, copy_gbs))
        except Exception as exc:  # noqa: BLE001 - one broken problem must not hide the others
            rows.append({"problem": name, "error": f"{type(exc).__name__}: {exc}"})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    out = {**origin, "device": device, "copy_bandwidth_gbs": copy_gbs, "method": "CUDA events, L2 flush before each repeat, "
           "median of 30 after 5 warm-up; expert/naive via the gate's profile stage", "problems": rows}
    tag = "h200" if "H200" in device else device.lower().replace(" ", "_")
    write_result(out, args.out, f"corpus_{tag}.json", indent=2)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(markdown_table(out))
    return 0 if all(all(r.get("targets", {}).values()) and "error" not in r for r in rows) else 1


def markdown_table(out: dict[str, Any]) -> str:
    lines = [f"Measured on {out['device']}, copy bandwidth {out['copy_bandwidth_gbs']:.0f} GB/s; {out['method']}.", "",
             "| problem | workload | expert ms | naive ms | eager ms | expert vs naive | expert vs eager | GB/s (% copy) | TFLOP/s | targets |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]

    def f(v, fmt):
        return fmt.format(v) if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)) else "-"

    for r in out["problems"]:
        if "error" in r:
            lines.append(f"| {r['problem']} | error: {r['error'][:80]} | | | | | | | | |")
            continue
        tg = ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in r.get("targets", {}).items())
        lines.append(f"| {r['problem']} | {r['workload']} | {f(r.get('expert_ms'), '{:.3f}')} | {f(r.get('naive_ms'), '{:.3f}')} | "
                     f"{f(r.get('eager_ms'), '{:.3f}')} | {f(r.get('vs_naive'), '{:.1f}x')} | {f(r.get('vs_eager'), '{:.2f}x')} | "
                     f"{f(r.get('expert_gbs'), '{:.0f}')} ({f(r.get('pct_copy_bw'), '{:.0f}%')}) | {f(r.get('expert_tflops'), '{:.1f}')} | {tg} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
