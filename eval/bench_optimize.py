"""`skills optimize` on every corpus problem: start from naive.cu, skills mined from the OTHER problems.

    python -m eval.bench_optimize --executor cuda --store STORE --out eval/results/optimize_h200.json
    python -m eval.bench_optimize --executor cpu --json          (CI: correctness only, no speed claims)

Per problem (leave-one-problem-out: the problem's own skills and the evidence it contributed to
shared skills are removed before retrieval), `prompts.optimize.optimize` runs from the problem's
naive.cu with the step budget (default 10). On the cuda executor the naive, final and expert
kernels are timed by the gate's profile stage on the problem's primary large workload (the
first tagged "large") and PyTorch eager the same way (eval/bench_corpus.py), giving

* speedup over naive = t_naive / t_final;
* fraction of the expert's speedup recovered = (t_naive / t_final) / (t_naive / t_expert) = t_expert / t_final;
* speedup vs PyTorch eager = t_eager / t_final;

per problem and as geometric means, with the steps and attempts used and the correctness
failures the gate caught. Every final kernel has passed the gate (every workload and seed).
Target (deterministic mode): geometric mean of the fraction recovered >= 0.5 within 10 steps.

Arms: `deterministic` (forward rewrites only; no LLM; with the library fallback of `skills optimize`,
on by default: once no retrieved skill has a rewrite left, the rewrite library's untried rewrites)
always; `skills_only_det` the same without the fallback (the skills alone); with --model also `skills_llm`
(retrieved skills materialized by the LLM only), `no_skills` (the LLM with the task alone) and
`flat_memory` (the LLM with past successful diffs, no preconditions or effects), all under the
same gate and budget (`--arms` picks).

`--corpus real` runs the same on the real corpus' naive kernels (corpora/real/, materialized folders
under `--real-problems`; leave-one-source-out: every problem of the held-out problem's source is
excluded from the skills), and adds:

* the share of the expert's speedup each problem recovers on a log scale,
  share = ln(t_naive / t_final) / ln(t_naive / t_expert) (1: the expert's speedup, 0: none), and
  their **geometric mean of log-ratio shares** (`geomean_log_ratio_share`; a share is clipped to
  [0.01, 1.5] first so that a problem with no gain does not zero the mean, and the arithmetic mean
  is reported beside it); problems whose expert is not at least 5% faster than naive have no share
  (`MIN_EXPERT_GAIN`: below it the denominator is timing noise and the share is meaningless);
* two deterministic baselines under the same gate, budget and rewrites: `no_skills_det` (no mined
  skills: the rewrite library in its fixed order of expected effect) and `flat_memory_det` (the
  mined skills ordered by token overlap of their past diffs with the kernel: no preconditions,
  effects or plan), beside `deterministic` (the value plan);
* every final kernel re-gated on seeds 0,1,2 (`final_correct`), whatever `--seeds` the loop used.

Runs on the GPU machine with numpy, torch, pydantic, tree-sitter and duckdb only: when the
hybrid retrieval (MiniLM tokenizer, index) cannot load, skills are ranked by a scan of the
store and the JSON says so (`retrieval.backend`). Results are written after every problem
(`--out`, else an untracked temporary optimize_<executor>.json; eval/results/optimize_h200.json
is the committed record), and a rerun with the same --out skips problems already done (`--fresh`
to redo), so the corpus can be run in pieces under a per-command time limit. Every result is
stamped (eval/stamp.py): commit, command, machine.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

from eval.stamp import STAMP_KEYS, default_path, read_json, stamp, write_json, write_result

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpora" / "kernels"
FIXTURE_SKILLS = ROOT / "tests" / "fixtures" / "kernel_skills" / "proxy_skills.json"
CPU_DEFAULT_PROBLEMS = ("vector_add", "reduce_sum", "softmax")
TARGET_FRACTION = 0.5
REAL: dict[str, tuple[Path, str]] = {}  # --corpus real: problem name -> (materialized folder, source)


def geomean(values: list[float]) -> Optional[float]:
    v = [x for x in values if isinstance(x, (int, float)) and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else None


def _has_skills(root: Path) -> bool:
    from prompts.optimize import load_skill_records

    try:
        return (root / "store.duckdb").is_file() and bool(load_skill_records(root))
    except Exception:  # noqa: BLE001
        return False


def all_problems() -> list[str]:
    return sorted(p.name for p in CORPUS.iterdir() if (p / "definition.json").exists() and (p / "naive.cu").exists())


def _primary(problem) -> Any:
    return next((w for w in problem.workloads if "large" in w.tags), problem.workloads[-1])


def _profile_ms(problem_dir: Path, kernel: str, source: Optional[str], cache: Path, label: str) -> tuple[Optional[float], str]:
    """One workload's median from the gate's profile stage (cached by content; the gate holds the GPU
    timing lock around the timed run only, so several benchmark processes may share the GPU)."""
    from mining.gate import GateConfig, run_gate

    r = run_gate(problem_dir, Path(kernel), GateConfig(executor="cuda", stages=("profile",), store=cache),
                 source=source)
    return _workload_ms(r.stages.get("profile", {}), label)


def _workload_ms(p: dict, label: str) -> tuple[Optional[float], str]:
    if p.get("status") != "pass":
        return None, str(p.get("reason", p.get("status")))[:300]
    w = p.get("workloads", {}).get(label)
    return (w["median_ms"], "") if w else (None, f"workload {label} not timed")


# per process, per problem: the expert and PyTorch eager do not change between arms, so they are timed
# once (the expert's profile is also in the gate cache, shared by the processes of one run)
_ONCE: dict[tuple, tuple[Optional[float], str]] = {}


def _once(key: tuple, timer) -> tuple[Optional[float], str]:
    if key not in _ONCE:
        _ONCE[key] = timer()
    return _ONCE[key]


def _eager_ms(name: str, problem, workload, cache: Path) -> tuple[Optional[float], str]:
    try:
        import torch

        from eval.bench_corpus import eager_reference, time_cuda, torch_inputs
        from mining.checker import gpu_timing_lock

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        fn = eager_reference(name)
        tensors = torch_inputs(problem, workload)
        axes = {**workload.axes, **workload.scalars}
        with gpu_timing_lock(cache):  # the same lock as the gate's timings: no other kernel runs meanwhile
            t = time_cuda(lambda t=tensors: fn(t, axes))["median_ms"]
        del tensors
        torch.cuda.empty_cache()
        return t, ""
    except Exception as exc:  # noqa: BLE001 - no eager twin or no torch: reported, not fatal
        return None, f"{type(exc).__name__}: {str(exc)[:200]}"


ARM_CONFIG = {
    "deterministic": {"mode": "skills", "deterministic": True, "llm": False},
    "skills": {"mode": "skills", "deterministic": True, "llm": True},
    "skills_llm": {"mode": "skills", "deterministic": False, "llm": True},
    "no_skills": {"mode": "no_skills", "deterministic": False, "llm": True},
    "flat_memory": {"mode": "flat_memory", "deterministic": False, "llm": True},
    # deterministic baselines (no LLM): same rewrites and gate, another order (prompts/optimize_plan.py)
    "no_skills_det": {"mode": "skills", "deterministic": True, "llm": False, "policy": "library"},
    "flat_memory_det": {"mode": "skills", "deterministic": True, "llm": False, "policy": "memory"},
    # the skills arm without the library fallback (the behaviour before issue 20's fix): what the skills alone do
    "skills_only_det": {"mode": "skills", "deterministic": True, "llm": False, "fallback": False},
}
SHARE_CLIP = (0.01, 1.5)
# a problem's share needs an expert measurably faster than its naive: at 69.12 vs 69.13 ms (an expert that is
# the naive kernel) ln(t_naive / t_expert) is noise and any share is meaningless
MIN_EXPERT_GAIN = 1.05


def library_records() -> list:
    """The no-skills baseline's records (prompts/optimize_plan.py, shared with the library fallback)."""
    from prompts.optimize_plan import library_records as records

    return records()


def real_problems(root: Path) -> dict[str, tuple[Path, str]]:
    """Materialized real-corpus folders under ``root`` (<source>/<problem>): name -> (dir, source)."""
    from corpora.real import list_experts

    out = {}
    for e in list_experts():
        d = root / e.source / e.problem
        if (d / "definition.json").is_file() and (d / "naive.cu").is_file():
            out[json.loads((d / "definition.json").read_text())["name"]] = (d, e.source)
    return out


def log_share(tn: Optional[float], tf: Optional[float], te: Optional[float]) -> Optional[float]:
    """ln(t_naive / t_final) / ln(t_naive / t_expert); None when the expert is not at least
    MIN_EXPERT_GAIN times faster than the naive kernel."""
    if not (tn and tf and te) or tn / te < MIN_EXPERT_GAIN:
        return None
    return math.log(tn / tf) / math.log(tn / te)


def run_problem(name: str, arm: str, args, pool, skills_path: Optional[Path], out_dir: Optional[Path]) -> dict:
    from corpora.problem import load_problem
    from prompts.optimize import OptimizeConfig, SkillSource, optimize

    spec = ARM_CONFIG[arm]
    if getattr(args, "corpus", "house") == "real":
        problem_dir, source = REAL[name]
        exclude = tuple(sorted(n for n, (_, s) in REAL.items() if s == source))  # leave one source out
    else:
        problem_dir = CORPUS / name
        exclude = (name,)
    problem = load_problem(problem_dir)
    cfg = OptimizeConfig(executor=args.executor, mode=spec["mode"], budget_steps=args.budget, per_step=args.per_step,
                         k=args.k, model=args.model if spec["llm"] else None, deterministic=spec["deterministic"],
                         seeds=tuple(int(s) for s in args.seeds.split(",")), jobs=args.jobs, store=skills_path,
                         cache=args.cache, exclude_problems=exclude, max_tokens=args.max_tokens, max_usd=args.max_usd,
                         timeout_s=args.timeout, llm_per_step=args.llm_per_step, time_limit_s=args.problem_minutes * 60,
                         library_fallback=spec.get("fallback", True),
                         llm_kwargs=tuple(json.loads(args.llm_kwargs).items()) if args.llm_kwargs else ())
    skills = SkillSource(skills_path if spec["mode"] != "no_skills" else None, exclude, args.retrieval)
    policy = spec.get("policy")
    if policy:  # a deterministic baseline: same rewrites and gate, another order
        skills.policy, skills.searcher, skills.backend = policy, None, f"baseline:{policy}"
        if policy == "library":
            skills.records, skills.note = library_records(), "no mined skills: the rewrite library in its fixed order"
        else:
            skills.note = "mined skills ordered by token overlap of their past diffs (flat memory), no value plan"
    t0 = time.perf_counter()
    res = optimize(problem_dir, Path("naive.cu"), cfg, pool=pool, skills=skills)
    s = res.summary()
    row: dict[str, Any] = {
        "problem": name, "arm": arm, "op_type": problem.definition.op_type,
        "excluded_problems": list(exclude), "skills_available": s["retrieval"]["skills"],
        "retrieval_backend": s["retrieval"]["backend"], "retrieval_note": s["retrieval"]["note"],
        "steps_used": s["steps_used"], "attempts": s["attempts"], "kept_steps": s["kept"],
        "correctness_failures_caught": s["correctness_failures_caught"], "termination": s["termination"],
        "final_correct": True, "final_hash": s["final_hash"], "llm": s["llm"],
        "library_fallback": s["library_fallback"], "timeline": s["timeline"],
        "lineage": [{k: st.get(k) for k in ("step", "what", "skill_name", "rewrite", "materializer", "origin",
                                            "origin_why", "time_ms", "guards")} for st in res.lineage],
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    if out_dir is not None:
        res.write(out_dir / arm / name)
    if args.executor == "cuda":
        w = _primary(problem)
        row["workload"] = w.label
        # naive and final: the loop's own profile stages of those kernels (the same gate stage, already run)
        # (a profile that failed there, e.g. a timeout that is not cached, is run again here)
        tn, en = _workload_ms(res.input_profile, w.label) if res.input_profile.get("status") == "pass" else \
            _profile_ms(problem_dir, "naive.cu", res.input_source, args.cache, w.label)
        tf, ef = _workload_ms(res.final_profile, w.label) if res.final_profile.get("status") == "pass" else \
            _profile_ms(problem_dir, "naive.cu", res.final_source, args.cache, w.label)
        te, ee = _once(("expert", str(problem_dir), w.label),
                       lambda: _profile_ms(problem_dir, "kernel.cu", None, args.cache, w.label))
        tg, eg = _once(("eager", name, w.label), lambda: _eager_ms(name, problem, w, args.cache))
        row.update({"naive_ms": tn, "final_ms": tf, "expert_ms": te, "eager_ms": tg})
        errs = {k: v for k, v in (("naive", en), ("final", ef), ("expert", ee), ("eager", eg)) if v}
        if errs:
            row["timing_errors"] = errs
        if tn and tf:
            row["speedup_vs_naive"] = tn / tf
        if tn and te:
            row["expert_vs_naive"] = tn / te
        if te and tf:
            row["fraction_of_expert"] = te / tf
        if tg and tf:
            row["speedup_vs_eager"] = tg / tf
        row["loop_time_ms"] = {"input": res.input_time_ms, "final": res.final_time_ms,
                               "metric": "geometric mean of the large workloads' medians"}
        if getattr(args, "corpus", "house") == "real":
            row["log_share"] = log_share(tn, tf, te)
    if getattr(args, "corpus", "house") == "real":
        from mining.gate import GateConfig, run_gate

        # the loop may gate on fewer seeds for speed: the final kernel is re-gated on three
        chk = run_gate(problem_dir, Path("naive.cu"), GateConfig(executor=args.executor, stages=("correctness",),
                                                                  seeds=(0, 1, 2), store=args.cache),
                       source=res.final_source)
        row["final_correct"] = bool(chk.passed)
        if not chk.passed:
            row["final_reason"] = str(chk.reason)[:300]
        row["source"] = REAL[name][1]
    return row


def aggregate(rows: list[dict], executor: str) -> dict:
    ok = [r for r in rows if "error" not in r]
    out = {"problems": len(rows), "errors": len(rows) - len(ok),
           "all_final_correct": all(r.get("final_correct") for r in ok) and len(ok) == len(rows),
           "steps_used": sum(r.get("steps_used", 0) for r in ok), "attempts": sum(r.get("attempts", 0) for r in ok),
           "correctness_failures_caught": sum(r.get("correctness_failures_caught", 0) for r in ok),
           "kept_steps": sum(r.get("kept_steps", 0) for r in ok)}
    if executor == "cuda":
        for key in ("speedup_vs_naive", "fraction_of_expert", "speedup_vs_eager", "expert_vs_naive"):
            out[f"geomean_{key}"] = geomean([r.get(key) for r in ok])
        # from the row's times, so that a merge of files written before a change of the rule counts alike
        shares = [sh for r in ok if "log_share" in r
                  and (sh := log_share(r.get("naive_ms"), r.get("final_ms"), r.get("expert_ms"))) is not None]
        if shares:
            lo, hi = SHARE_CLIP
            out["geomean_log_ratio_share"] = geomean([min(hi, max(lo, s)) for s in shares])
            out["mean_log_ratio_share"] = sum(shares) / len(shares)
            out["log_ratio_share_note"] = ("share = ln(t_naive/t_final) / ln(t_naive/t_expert) per problem; geometric "
                                           f"mean over {len(shares)} problems of the shares clipped to [{lo}, {hi}]; problems whose "
                                           f"expert is less than {MIN_EXPERT_GAIN}x faster than naive have no share")
        gm = out.get("geomean_fraction_of_expert")
        out["target"] = {"geomean_fraction_of_expert_ge": TARGET_FRACTION, "met": bool(gm is not None and gm >= TARGET_FRACTION
                                                                                        and out["all_final_correct"])}
    return out


VERSUS_REFERENCE = "deterministic"
VERSUS_TRIALS = 5000
VERSUS_LEAD = 1.05  # a problem counts as led by one arm when its clipped share is at least 5% above the other's


def _clipped_shares(rows: list[dict]) -> dict[str, float]:
    lo, hi = SHARE_CLIP
    return {r["problem"]: min(hi, max(lo, sh)) for r in rows if "error" not in r
            and (sh := log_share(r.get("naive_ms"), r.get("final_ms"), r.get("expert_ms"))) is not None}


def versus(arms: dict, reference: str = VERSUS_REFERENCE, seed: int = 0, trials: int = VERSUS_TRIALS) -> dict:
    """Every other arm against ``reference``, problem by problem (the arms' own naive, final and expert
    times): the geometric mean over the problems both have a share for of reference share / arm share,
    a 95% bootstrap interval of it (problems resampled, ``trials`` draws, seeded), and the problems each
    side leads by VERSUS_LEAD. A ratio whose interval holds 1 is no measured difference."""
    import random

    if reference not in arms:
        return {}
    ref = _clipped_shares(arms[reference]["problems"])
    out = {}
    for arm, data in arms.items():
        other = _clipped_shares(data["problems"])
        common = sorted(set(ref) & set(other))
        if arm == reference or not common:
            continue
        logs = [math.log(ref[p] / other[p]) for p in common]
        rng = random.Random(seed)
        draws = sorted(math.exp(sum(rng.choices(logs, k=len(logs))) / len(logs)) for _ in range(trials))
        lead = math.log(VERSUS_LEAD)
        out[arm] = {"problems": len(common), "share_ratio": math.exp(sum(logs) / len(logs)),
                    "ci95": [draws[int(0.025 * trials)], draws[int(0.975 * trials) - 1]],
                    f"{reference}_leads": [p for p, x in zip(common, logs) if x >= lead],
                    f"{arm}_leads": [p for p, x in zip(common, logs) if x <= -lead]}
    if out:
        out["note"] = (f"per arm: geometric mean over the problems both arms have a share for of {reference}'s clipped "
                       f"share / the arm's, 95% bootstrap interval ({trials} draws, seed {seed}); a lead is a share "
                       f"{VERSUS_LEAD}x the other's or more")
    return out


def hoist_common(rows: list[dict]) -> tuple[list[dict], dict[str, Any]]:
    """What every row repeats word for word, said once: a whole dict (a deterministic arm's empty LLM
    account) or a long text, also one level down (a retrieval note, the library fallback's why). The rows
    without them, and them by dotted key; numbers and short values stay in the rows."""
    if len(rows) < 2:
        return rows, {}
    same = lambda key, v: all(_dotted(r, key) == v for r in rows)  # noqa: E731
    common = {k: v for k, v in rows[0].items() if isinstance(v, dict) and same(k, v)}
    for k, v in rows[0].items():
        if k in common:
            continue
        for key, text in ([(k, v)] if not isinstance(v, dict) else [(f"{k}.{kk}", vv) for kk, vv in v.items()]):
            if isinstance(text, str) and len(text) >= 40 and same(key, text):
                common[key] = text
    out = []
    for r in rows:
        r = {k: ({kk: vv for kk, vv in v.items() if f"{k}.{kk}" not in common} if isinstance(v, dict) else v)
             for k, v in r.items() if k not in common}
        out.append(r)
    return out, common


def _dotted(row: dict, key: str) -> Any:
    k, _, kk = key.partition(".")
    v = row.get(k)
    return (v.get(kk) if isinstance(v, dict) else None) if kk else v


def restore_common(rows: list[dict], common: dict[str, Any]) -> list[dict]:
    """hoist_common undone: each row with the texts its arm said once (a merged file merged again)."""
    out = []
    for r in rows:
        r = {k: (dict(v) if isinstance(v, dict) else v) for k, v in r.items()}
        for key, text in common.items():
            k, _, kk = key.partition(".")
            if kk:
                r.setdefault(k, {})[kk] = text
            else:
                r[k] = text
        out.append(r)
    return out


def markdown(out: dict) -> str:
    lines = []
    for arm, data in out["arms"].items():
        agg = data["aggregate"]
        lines.append(f"### arm `{arm}` ({out['executor']}; budget {out['budget']} steps)")
        lines.append("")
        lines.append("| problem | steps | attempts | kept | failures caught | naive ms | final ms | expert ms | eager ms | "
                     "x naive | % expert speedup | x eager | kept steps |")
        lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")

        def f(v, fmt):
            return fmt.format(v) if isinstance(v, (int, float)) else "-"
        for r in data["problems"]:
            if "error" in r:
                lines.append(f"| {r['problem']} | error: {r['error'][:80]} |" + " |" * 11)
                continue
            kept = ", ".join(s.get("rewrite") or "" for s in r.get("lineage", [])[1:])
            lines.append(f"| {r['problem']} | {r['steps_used']} | {r['attempts']} | {r['kept_steps']} | "
                         f"{r['correctness_failures_caught']} | {f(r.get('naive_ms'), '{:.3f}')} | {f(r.get('final_ms'), '{:.3f}')} | "
                         f"{f(r.get('expert_ms'), '{:.3f}')} | {f(r.get('eager_ms'), '{:.3f}')} | "
                         f"{f(r.get('speedup_vs_naive'), '{:.2f}x')} | {f(100 * r['fraction_of_expert'] if r.get('fraction_of_expert') else None, '{:.0f}%')} | "
                         f"{f(r.get('speedup_vs_eager'), '{:.2f}x')} | {kept} |")
        gm = agg
        lines.append("")
        lines.append(f"geomean: x naive {f(gm.get('geomean_speedup_vs_naive'), '{:.2f}')}, fraction of expert "
                     f"{f(gm.get('geomean_fraction_of_expert'), '{:.2f}')}, x eager {f(gm.get('geomean_speedup_vs_eager'), '{:.2f}')}; "
                     f"all final kernels correct: {gm['all_final_correct']}; failures caught: {gm['correctness_failures_caught']}")
        lines.append("")
    return "\n".join(lines)


def merge(paths: list[Path], out_path: Optional[Path], as_json: bool, origin: dict[str, Any],
          keep_arms: Optional[list[str]] = None) -> int:
    """One result file from runs over disjoint problem groups (parallel processes on one GPU); with
    ``keep_arms`` only those arms' rows are written (``versus`` still compares them with the reference
    arm of the parts)."""
    parts = []
    for p in paths:
        try:
            parts.append(read_json(p))
        except (OSError, ValueError) as exc:
            print(f"bench_optimize: {p}: not a results file ({exc})", file=sys.stderr)
            return 2
    if not parts:
        return 2
    # the merge's own stamp, the parts' machine (where the figures were measured)
    out = {**origin, **{k: v for k, v in parts[0].items() if k not in ("arms", "incomplete", "wall_s", "commit",
                                                                        "command", "date_utc")}}
    out["merged_from"] = [str(p) for p in paths]
    out["parts"] = [{k: p.get(k) for k in STAMP_KEYS} for p in parts]
    out["wall_s_per_part"] = [p.get("wall_s") for p in parts]
    if any(p.get("incomplete") for p in parts):
        out["incomplete"] = True
    out["arms"] = {}
    for arm in dict.fromkeys(a for p in parts for a in p.get("arms", {})):
        rows = {r["problem"]: r for p in parts
                for r in restore_common(p.get("arms", {}).get(arm, {}).get("problems", []),
                                        p.get("arms", {}).get(arm, {}).get("every_row", {}))}
        rows_sorted = [rows[n] for n in sorted(rows)]
        agg = aggregate(rows_sorted, out.get("executor", "cuda"))
        rows_sorted, common = hoist_common(rows_sorted)
        out["arms"][arm] = {"problems": rows_sorted, "aggregate": agg, **({"every_row": common} if common else {})}
    if comparison := versus(out["arms"]):
        out["versus"] = comparison
    if keep_arms:
        if missing := [a for a in keep_arms if a not in out["arms"]]:
            print(f"bench_optimize: --arms {','.join(missing)}: in none of the merged files", file=sys.stderr)
            return 2
        out["arms"] = {a: v for a, v in out["arms"].items() if a in keep_arms}
    write_result(out, out_path, f"optimize_{out.get('executor', 'cuda')}.json", indent=1)
    print(json.dumps(out, indent=2) if as_json else markdown(out))
    rows = [r for a in out["arms"].values() for r in a["problems"]]
    return 0 if rows and all("error" not in r and r.get("final_correct") for r in rows) else 1


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--executor", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--corpus", default="house", choices=("house", "real"),
                    help="house: corpora/kernels (leave one problem out); real: the real corpus' naive kernels "
                         "(leave one source out), materialized under --real-problems")
    ap.add_argument("--real-problems", type=Path, default=None,
                    help="materialized real-corpus folders <source>/<problem> (eval/next_step_stores.py mine, or "
                         "corpora.real.materialize)")
    ap.add_argument("--store", type=Path, default=None,
                    help="skills store (or a JSON list of skill records / a SKILL.md folder). Default: ./.skills when "
                         "it holds a store, else (cpu only) the shipped proxy skills fixture")
    ap.add_argument("--problems", default="", help="comma-separated subset, or 'all' (default: all on cuda; "
                                                   f"{','.join(CPU_DEFAULT_PROBLEMS)} on cpu)")
    ap.add_argument("--budget", type=int, default=None, help="steps per problem (default 10 on cuda, 3 on cpu)")
    ap.add_argument("--per-step", type=int, default=6, help="candidates gated per step")
    ap.add_argument("--k", type=int, default=8, help="skills retrieved per step")
    ap.add_argument("--model", default=None, help="litellm model: adds the LLM arms")
    ap.add_argument("--arms", default="", help="comma-separated: deterministic, skills_only_det, no_skills_det, "
                                               "flat_memory_det, skills, skills_llm, no_skills, flat_memory (with --merge: the arms written)")
    ap.add_argument("--llm-per-step", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=None, help="LLM token budget per problem and arm")
    ap.add_argument("--max-usd", type=float, default=None, help="LLM dollar budget per problem and arm")
    ap.add_argument("--llm-kwargs", default="", help="JSON object of extra litellm arguments (api_base, ...)")
    ap.add_argument("--jobs", type=int, default=None, help="gate processes (default 4 on cuda, 2 on cpu)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--timeout", type=float, default=60.0, help="gate timeout per run (s)")
    ap.add_argument("--problem-minutes", type=float, default=15.0, help="no new step starts after this per problem")
    ap.add_argument("--max-minutes", type=float, default=None,
                    help="no new problem starts after this (the results so far are saved; rerun to continue)")
    ap.add_argument("--retrieval", default="auto", choices=("auto", "search", "scan"))
    ap.add_argument("--cache", type=Path, default=None, help="gate cache root (default /tmp/ks-optimize-cache)")
    ap.add_argument("--out", type=Path, default=None,
                    help="results JSON (eval/results/... to record it; default: an untracked temporary file)")
    ap.add_argument("--out-dir", type=Path, default=None, help="also write each run's folder (final kernel, lineage, attempts)")
    ap.add_argument("--fresh", action="store_true", help="redo problems already in --out")
    ap.add_argument("--json", action="store_true", help="print the results JSON")
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="merge result files of runs over disjoint problem groups into --out, then exit")
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    origin = stamp("eval.bench_optimize", raw_argv)
    if args.merge:
        return merge(args.merge, args.out, args.json, origin, [a for a in args.arms.split(",") if a])

    cuda = args.executor == "cuda"
    if cuda:
        try:
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError("no CUDA device")
        except Exception as exc:  # noqa: BLE001
            print(f"bench_optimize --executor cuda needs a CUDA GPU ({exc}); use --executor cpu for a correctness run",
                  file=sys.stderr)
            return 2
    args.budget = args.budget or (10 if cuda else 3)
    args.jobs = args.jobs or (4 if cuda else 2)
    args.cache = args.cache or Path(os.environ.get("KS_OPT_CACHE", "/tmp/ks-optimize-cache"))
    store = args.store
    store_note = ""
    if store is None:
        if _has_skills(Path(".skills")):
            store = Path(".skills")
        elif not cuda:
            store = FIXTURE_SKILLS
            store_note = ("no --store given and ./.skills holds none: the shipped proxy skills fixture "
                          "(tests/fixtures/kernel_skills/proxy_skills.json: deterministic-operator skills, no measured effects)")
        else:
            print("bench_optimize: give --store DIR (a mined skills store)", file=sys.stderr)
            return 2
    if not store.exists():
        print(f"bench_optimize: {store}: no such store", file=sys.stderr)
        return 2
    universe = all_problems()
    if args.corpus == "real":
        if args.real_problems is None or not args.real_problems.is_dir():
            print("bench_optimize: --corpus real needs --real-problems DIR (materialized <source>/<problem> folders)",
                  file=sys.stderr)
            return 2
        REAL.update(real_problems(args.real_problems))
        from corpora.real import list_experts

        gpu_only = {e.problem for e in list_experts() if e.gpu_only}
        universe = sorted(n for n, (d, _) in REAL.items() if cuda or d.name not in gpu_only)
    names = universe if (args.problems == "all" or (not args.problems and (cuda or args.corpus == "real"))) else \
        [n for n in (args.problems.split(",") if args.problems else CPU_DEFAULT_PROBLEMS) if n]
    unknown = [n for n in names if n not in universe]
    if unknown:
        print(f"bench_optimize: unknown problem(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    arms = [a for a in args.arms.split(",") if a] or (["deterministic", "skills_llm", "no_skills", "flat_memory"]
                                                       if args.model else ["deterministic"])
    bad = [a for a in arms if a not in ARM_CONFIG or (ARM_CONFIG[a]["llm"] and not args.model)]
    if bad:
        print(f"bench_optimize: arm(s) {', '.join(bad)} unknown or need --model", file=sys.stderr)
        return 2
    out_path = args.out or default_path(f"optimize_{args.executor}.json" if args.corpus == "house"
                                        else f"optimize_real_{args.executor}.json")
    prev = {}
    if out_path.is_file() and not args.fresh:
        try:
            prev = read_json(out_path)
        except (OSError, ValueError):
            prev = {}
    device = "cpu executor (g++ fibers): correctness only"
    if cuda:
        import torch

        device = torch.cuda.get_device_name(0)
    out = {**origin, "device": device, "executor": args.executor, "corpus": args.corpus, "store": str(store), "store_note": store_note,
           "budget": args.budget, "per_step": args.per_step, "k": args.k, "model": args.model or "",
           "method": ("leave-one-problem-out: each problem starts from naive.cu with the skills mined from the other "
                      "problems; times from the gate's profile stage on the primary large workload (CUDA events, L2 "
                      "flush, median of 30 after 5 warm-up); eager via PyTorch with the same timing" if cuda else
                      "leave-one-problem-out, cpu executor: every kept step and final kernel passes the gate on every "
                      "workload and seed; no timing, no speed claim"),
           "arms": {}}
    if args.corpus == "real":
        out["method"] = out["method"].replace("leave-one-problem-out", "leave-one-source-out (the real corpus; every "
                                              "problem of the held-out problem's source excluded)").replace(
            "the other problems", "the other sources and the house corpus")
    if prev.get("arms"):  # rows kept from an earlier run of this file: say which code made them
        out["resumed_from"] = prev.get("resumed_from") or {k: prev.get(k) for k in STAMP_KEYS}
    from mining.checker import make_pool

    pool = make_pool(args.jobs)
    t0 = time.perf_counter()
    try:
        for arm in arms:
            done = {r["problem"]: r for r in prev.get("arms", {}).get(arm, {}).get("problems", [])
                    if "error" not in r and prev.get("budget") == args.budget}
            rows = []
            for name in names:
                if name in done:
                    rows.append(done[name])
                    continue
                if args.max_minutes is not None and time.perf_counter() - t0 > args.max_minutes * 60:
                    print(f"bench_optimize: --max-minutes reached; {name} and later problems not started "
                          "(rerun with the same --out to continue)", file=sys.stderr)
                    out["incomplete"] = True
                    break
                try:
                    rows.append(run_problem(name, arm, args, pool, store, args.out_dir))
                except Exception as exc:  # noqa: BLE001 - one problem must not hide the others
                    rows.append({"problem": name, "arm": arm, "error": f"{type(exc).__name__}: {str(exc)[:400]}"})
                print(json.dumps({k: v for k, v in rows[-1].items() if k != "lineage"}), file=sys.stderr, flush=True)
                others = [r for r in prev.get("arms", {}).get(arm, {}).get("problems", []) if r["problem"] not in names]
                out["arms"][arm] = {"problems": others + rows, "aggregate": aggregate(others + rows, args.executor)}
                out["retrieval"] = {"backend": rows[-1].get("retrieval_backend", ""), "note": rows[-1].get("retrieval_note", "")}
                out["wall_s"] = round(time.perf_counter() - t0, 1)
                write_json(out_path, out, indent=2)
            others = [r for r in prev.get("arms", {}).get(arm, {}).get("problems", []) if r["problem"] not in names]
            out["arms"][arm] = {"problems": others + rows, "aggregate": aggregate(others + rows, args.executor)}
            if out.get("incomplete"):
                break
    finally:
        if pool is not None:
            pool.shutdown()
    for arm, data in prev.get("arms", {}).items():
        out["arms"].setdefault(arm, data)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    if comparison := versus(out["arms"]):
        out["versus"] = comparison
    write_result(out, args.out, out_path.name, indent=2)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(markdown(out))
    rows = [r for a in arms if a in out["arms"] for r in out["arms"][a]["problems"]]
    return 0 if rows and all("error" not in r and r.get("final_correct") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
