"""A/B benchmark of a coding agent with and without the kernel-skills tools (docs/agents.md).

    python -m eval.bench_agent --agent 'claude -p "$(cat {prompt_file})" --output-format json \
        --mcp-config {mcp_config} --dangerously-skip-permissions' --arms bare,skills \
        --budget-s 1800 --store STORE --out eval/results/agent_claude_h200.json

For every problem of the problem set (eval/agent_problems.toml: the reason per case) and every arm,
the agent gets a fresh work folder holding the problem *without the expert*: definition.json, the
visible workloads (the case's hidden workloads removed), naive.cu, optimized.cu (a copy of naive.cu
to improve), a solution.toml that names optimized.cu and lists no carriers, and PROMPT.md. Arms:

* ``bare``   no project tools at all ({mcp_config} and {skills_dir} are empty strings);
* ``gate``   the MCP server restricted to gate_kernel and profile_kernel (the oracle only);
* ``skills`` the whole MCP server (gate, profile, query, get_skill, lineage, wrap) and the store's
  skills exported as SKILL.md folders in {skills_dir}.

The command template is run with ``bash -c`` in the work folder under the time budget; placeholders:
{workdir} {problem_dir} {prompt_file} {prompt} (shell-quoted) {budget_s} {arm} {case} {mcp_config}
(a Claude Code --mcp-config JSON file) {codex_mcp} (the same server as Codex `-c mcp_servers...` overrides)
{skills_dir} {python} {root}. Codex, for example:

    --agent 'codex exec --json --full-auto -C {workdir} {codex_mcp} "$(cat {prompt_file})"'
 Afterwards optimized.cu is gated against the *full* problem (visible and hidden
workloads, all seeds) and, on a GPU, timed by the gate's profile stage next to the naive kernel,
the expert and `skills optimize` (deterministic, from naive.cu, with the same store).
An agent that exits non-zero (not on the budget's timeout) is an ``agent_error``: its
optimized.cu is still the naive copy, which would otherwise count as a pass. Tokens and cost
are read from what the agent prints (Claude Code ``--output-format json`` result objects, Codex
``exec --json`` turn.completed events, or an ``agent_report.json`` it writes); wall time is measured.
Nothing here says the tools help: the JSON holds the measurements of each arm, nothing more.
JSON goes to --out only when given (eval/results/ by convention).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any, Optional

from eval.stamp import stamp, write_result

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = ROOT / "eval" / "agent_problems.toml"
ARMS = ("bare", "gate", "skills")
ARM_TOOLS = {"gate": "gate_kernel,profile_kernel", "skills": ""}
PROMPT = """# Task: make {name} fast on an NVIDIA H200 (sm_90)

`{problem_dir}/optimized.cu` is a correct but naive CUDA implementation of the problem in
`{problem_dir}/definition.json` (inputs, outputs, axes, constraints, a numpy reference). The host
entry `{entry}` must keep its signature. Rewrite optimized.cu so it is as fast as you can make it
on the H200, and correct for EVERY size the definition allows, not only the sizes in
workloads.jsonl. You have {budget_s} seconds. Leave your final kernel in optimized.cu.
{tools}"""
TOOLS_TEXT = {
    "bare": "",
    "gate": "\nThe MCP server `kernel-skills` gives you gate_kernel (builds and checks a kernel against the reference; "
            "pass extra sizes as workloads) and profile_kernel (GPU timing, GPU hosts only).\n",
    "skills": "\nThe MCP server `kernel-skills` gives you gate_kernel (correctness against the reference, extra sizes as "
              "workloads), profile_kernel (GPU timing), query_skills (optimizations mined from expert kernels that "
              "apply to your code, with preconditions checked against sizes, measured effects and risks), get_skill "
              "and lineage. Skill cards are also in {skills_dir}.\n",
}


# --------------------------------------------------------------------------- problem set
def load_problem_set(path: Path = PROBLEMS, only: Optional[list[str]] = None) -> list[dict[str, Any]]:
    """The cases of the problem set; each has name, dir, hidden_tags, hidden_workloads, reason, expect."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SystemExit(f"error: {path}: {exc}")
    cases = []
    for i, c in enumerate(data.get("case", [])):
        where = f"{path}: case[{i}]"
        for key in ("name", "dir", "reason", "expect"):
            if not isinstance(c.get(key), str) or not c[key]:
                raise SystemExit(f"error: {where}: missing {key!r}")
        d = (ROOT / c["dir"]) if not Path(c["dir"]).is_absolute() else Path(c["dir"])
        if not (d / "definition.json").is_file() or not (d / "naive.cu").is_file():
            raise SystemExit(f"error: {where}: {d} has no definition.json / naive.cu")
        cases.append({"name": c["name"], "dir": d, "reason": c["reason"], "expect": c["expect"],
                      "hidden_tags": list(c.get("hidden_tags", [])), "hidden_workloads": list(c.get("hidden_workloads", [])),
                      "evidence": c.get("evidence", ""), "ci": bool(c.get("ci", False))})
    if only:
        unknown = set(only) - {c["name"] for c in cases}
        if unknown:
            raise SystemExit(f"error: --only: no case {', '.join(sorted(unknown))} in {path}")
        cases = [c for c in cases if c["name"] in only]
    return cases


def eval_problem(case: dict[str, Any], into: Path) -> Path:
    """The full problem the agent's kernel is judged on: the folder plus the case's hidden workloads."""
    from retrieval.agent_tools import workload_lines

    out = into / f"eval-{case['name']}"
    if not out.exists():
        shutil.copytree(case["dir"], out)
        if case["hidden_workloads"]:
            wl = out / "workloads.jsonl"
            text = wl.read_text()
            wl.write_text(text + ("" if text.endswith("\n") else "\n")
                          + "\n".join(workload_lines(case["hidden_workloads"])).replace('"extra"', '"hidden"') + "\n")
    return out


def agent_folder(case: dict[str, Any], workdir: Path) -> Path:
    """The problem as the agent sees it: no expert, no carrier list, the hidden workloads removed."""
    src, dst = case["dir"], workdir / "problem"
    dst.mkdir(parents=True)
    shutil.copy2(src / "definition.json", dst / "definition.json")
    shutil.copy2(src / "naive.cu", dst / "naive.cu")
    shutil.copy2(src / "naive.cu", dst / "optimized.cu")
    hidden = set(case["hidden_tags"])
    lines = [ln for ln in (src / "workloads.jsonl").read_text().splitlines() if ln.strip()
             and not hidden & set(json.loads(ln).get("tags", []))]
    (dst / "workloads.jsonl").write_text("\n".join(lines) + "\n")
    sol = tomllib.loads((src / "solution.toml").read_text())
    keep = [f'entry = {json.dumps(sol["entry"])}', 'kernel = "optimized.cu"',
            f'flags = {json.dumps(sol.get("flags", ["-O3"]))}']
    if sol.get("archs"):
        keep.append(f'archs = {json.dumps(sol["archs"])}')
    if sol.get("gpu_only"):
        keep.append("gpu_only = true")
    (dst / "solution.toml").write_text("\n".join(keep) + "\n")
    return dst


# --------------------------------------------------------------------------- agent usage
def parse_usage(stdout: str, workdir: Path) -> dict[str, Any]:
    """Tokens / cost / turns the agent reported: agent_report.json, Claude Code result objects,
    Codex turn.completed events (summed). Empty when the agent reports nothing."""
    rep = workdir / "agent_report.json"
    if rep.is_file():
        try:
            d = json.loads(rep.read_text())
            if isinstance(d, dict):
                return {k: d[k] for k in ("input_tokens", "output_tokens", "cost_usd", "turns") if k in d} | {"source": "agent_report.json"}
        except ValueError:
            pass
    objs = []
    for chunk in [stdout] + stdout.splitlines():
        try:
            o = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(o, dict):
            objs.append(o)
    result = next((o for o in reversed(objs) if o.get("type") == "result" and isinstance(o.get("usage"), dict)), None)
    if result is not None:  # Claude Code: one result object for the whole session
        u = result["usage"]
        return {"input_tokens": sum(int(u.get(k) or 0) for k in ("input_tokens", "cache_read_input_tokens",
                                                              "cache_creation_input_tokens")),
                "output_tokens": int(u.get("output_tokens") or 0), "cost_usd": result.get("total_cost_usd"),
                "turns": result.get("num_turns"), "source": "claude result"}
    turns = [o["usage"] for o in objs if o.get("type") == "turn.completed" and isinstance(o.get("usage"), dict)]
    if turns:  # Codex: usage per turn
        return {"input_tokens": sum(int(u.get("input_tokens") or 0) for u in turns),
                "output_tokens": sum(int(u.get("output_tokens") or 0) for u in turns), "turns": len(turns),
                "source": "codex turn.completed"}
    return {}


# --------------------------------------------------------------------------- measuring
def judge(problem_dir: Path, kernel: Path, executor: str, store: Path, source: Optional[str] = None) -> dict[str, Any]:
    """Gate a kernel on the full problem; time it on a GPU. Compact: verdict, reason, median_ms per workload."""
    from retrieval.agent_tools import ToolError, gate_kernel

    stages = ["static", "correctness", "profile"] if executor == "cuda" else ["correctness"]
    try:
        r = gate_kernel(problem_dir, source=source, kernel=str(kernel), executor=executor, stages=stages, store=store)
    except ToolError as exc:
        return {"verdict": "bad_input", "reason": exc.message}
    d = r["digest"]
    return {"verdict": d["verdict"], "reason": d["reason"][:400], "cases": d["cases"],
            "failing_workload": (d["failing_case"] or {}).get("workload"), "median_ms": d["median_ms"]}


def primary_ms(res: dict[str, Any]) -> Optional[float]:
    """The time on the largest workload (by the product of its sizes, read off the label
    `w4[M=32768,N=2048]`), or None."""
    import re

    ms = res.get("median_ms") or {}
    if not ms:
        return None
    size = lambda label: math.prod(int(v) for v in re.findall(r"=(\d+)", label))  # noqa: E731
    return ms[max(ms, key=size)]


def run_optimize(problem_dir: Path, executor: str, store: Optional[Path], budget: int) -> dict[str, Any]:
    from mining.gate import BadInput
    from prompts.optimize import OptimizeConfig, optimize

    if store is None or not (store / "store.duckdb").is_file():
        return {"skipped": "no store with skills (--store)"}
    try:
        res = optimize(problem_dir, Path("naive.cu"), OptimizeConfig(executor=executor, budget_steps=budget,
                                                                     store=store, seeds=(0, 1, 2)))
    except BadInput as exc:
        return {"skipped": str(exc)}
    s = res.summary()
    return {"source": res.final_source, "kept": s["kept"], "termination": s["termination"]}


def run_agent(template: str, case: dict[str, Any], arm: str, workdir: Path, budget_s: float, store: Optional[Path],
              skills_dir: Optional[Path]) -> dict[str, Any]:
    pdir = agent_folder(case, workdir)
    mcp_config, codex_mcp = "", ""
    if arm != "bare":
        # the agent's gate cache lives in its own store when none is given (never the checkout's ./.skills)
        args = ["-m", "cli", "serve", "--mcp", "--store", str(store or workdir / "store")]
        if ARM_TOOLS[arm]:
            args += ["--tools", ARM_TOOLS[arm]]
        cfg = {"mcpServers": {"kernel-skills": {"command": sys.executable, "args": args, "cwd": str(ROOT),
                                                "env": {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}}}}
        (workdir / "mcp.json").write_text(json.dumps(cfg, indent=2))
        mcp_config = str(workdir / "mcp.json")
        srv = cfg["mcpServers"]["kernel-skills"]
        env = ",".join(f"{k}={json.dumps(v)}" for k, v in srv["env"].items())
        parts = [f"mcp_servers.kernel-skills.{k}={v}" for k, v in (
            ("command", json.dumps(srv["command"])), ("args", json.dumps(args)), ("cwd", json.dumps(srv["cwd"])),
            ("env", "{" + env + "}"))]
        codex_mcp = " ".join(f"-c {shlex.quote(p)}" for p in parts)
    sdir = str(skills_dir) if arm == "skills" and skills_dir else ""
    prompt = PROMPT.format(name=case["name"], problem_dir=pdir, budget_s=int(budget_s),
                           entry=tomllib.loads((pdir / "solution.toml").read_text())["entry"],
                           tools=TOOLS_TEXT[arm].format(skills_dir=sdir or "(none)"))
    (workdir / "PROMPT.md").write_text(prompt)
    cmd = template.format(workdir=shlex.quote(str(workdir)), problem_dir=shlex.quote(str(pdir)),
                          prompt_file=shlex.quote(str(workdir / "PROMPT.md")), prompt=shlex.quote(prompt),
                          budget_s=int(budget_s), arm=arm, case=case["name"], mcp_config=shlex.quote(mcp_config),
                          codex_mcp=codex_mcp,
                          skills_dir=shlex.quote(sdir), python=shlex.quote(sys.executable), root=shlex.quote(str(ROOT)))
    t0 = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=budget_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        timed_out = True
    wall = time.monotonic() - t0
    (workdir / "agent.stdout").write_text(out or "")
    (workdir / "agent.stderr").write_text(err or "")
    return {"rc": proc.returncode, "timed_out": timed_out, "wall_s": round(wall, 1),
            "usage": parse_usage(out or "", workdir), "kernel": pdir / "optimized.cu",
            "stderr_tail": (err or "").strip()[-300:]}


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return round(a / b, 4) if a and b else None


def geomean(values: list[Optional[float]]) -> Optional[float]:
    v = [x for x in values if x and x > 0 and math.isfinite(x)]
    return round(math.exp(sum(map(math.log, v)) / len(v)), 4) if v else None


def bench(template: str, cases: list[dict[str, Any]], arms: list[str], budget_s: float, executor: str,
          store: Optional[Path], optimize_budget: int = 10, keep: Optional[Path] = None,
          log=lambda m: print(m, file=sys.stderr)) -> dict[str, Any]:
    from mining.gate.executors import gpu_info, resolve_executor

    executor = resolve_executor(executor)
    tmp = Path(tempfile.mkdtemp(prefix="ks-bench-agent-", dir=keep))
    gate_store = tmp / "gate-store"  # the judge's gate cache, apart from the agent's store
    skills_dir = None
    if "skills" in arms and store is not None and (store / "store.duckdb").is_file():
        from skills.kernel_store import KernelStore
        from skills.skillmd import export_skills
        from skills.store import Store

        skills_dir = tmp / "skills-md"
        try:
            st = Store(store, read_only=True)
            try:
                export_skills(KernelStore(st).skills(), skills_dir)
            finally:
                st.close()
        except Exception as exc:  # noqa: BLE001 - the MCP tools still work without the cards
            log(f"SKILL.md export failed ({exc}); the skills arm gets the MCP tools only")
            skills_dir = None
    problems = []
    for case in cases:
        full = eval_problem(case, tmp)
        log(f"{case['name']}: baselines (naive, expert, skills optimize) on {executor}")
        naive = judge(full, full / "naive.cu", executor, gate_store)
        expert = judge(full, full / tomllib.loads((full / "solution.toml").read_text()).get("kernel", "kernel.cu"),
                       executor, gate_store)
        opt = run_optimize(case["dir"], executor, store, optimize_budget)
        opt_res = {k: v for k, v in opt.items() if k != "source"}
        if "source" in opt:
            opt_res |= judge(full, full / "optimized_by_skills.cu", executor, gate_store, source=opt["source"])
        t_naive, t_expert = primary_ms(naive), primary_ms(expert)
        runs = {}
        for arm in arms:
            wd = tmp / f"{case['name']}-{arm}"
            wd.mkdir()
            log(f"{case['name']}: agent, arm {arm}, budget {budget_s:g}s")
            a = run_agent(template, case, arm, wd, budget_s, store, skills_dir)
            # optimized.cu starts as naive.cu: an agent that never ran would "pass" with it, so a
            # non-zero exit (not a timeout, which leaves the agent's last kernel) is an agent error
            if a["rc"] != 0 and not a["timed_out"]:
                res = {"verdict": "agent_error", "reason": f"the agent exited {a['rc']}: {a['stderr_tail'][-200:]}"}
            else:
                res = judge(full, full / "optimized.cu", executor, gate_store, source=_read(a["kernel"]))
            t = primary_ms(res) if res["verdict"] == "pass" else None
            runs[arm] = {**{k: v for k, v in a.items() if k != "kernel"}, **res,
                         "unchanged": _read(a["kernel"]) == _read(full / "naive.cu"),
                         "hidden_failure": res["verdict"] not in ("pass", "agent_error") and _visible_pass(a["kernel"], wd / "problem",
                                                                                    executor, gate_store),
                         "speedup_vs_naive": _ratio(t_naive, t), "fraction_of_expert": _ratio(t_expert, t)}
            log(f"{case['name']}: {arm}: {res['verdict']} {res['reason'][:120]}")
        problems.append({"name": case["name"], "expect": case["expect"], "reason": case["reason"],
                         "hidden_tags": case["hidden_tags"], "hidden_workloads": case["hidden_workloads"],
                         "naive": naive, "expert": expert, "skills_optimize": opt_res, "runs": runs})
    summary = {arm: {"passed": sum(p["runs"][arm]["verdict"] == "pass" for p in problems),
                     "hidden_failures": sum(bool(p["runs"][arm]["hidden_failure"]) for p in problems),
                     "agent_errors": sum(p["runs"][arm]["verdict"] == "agent_error" for p in problems),
                     "geomean_fraction_of_expert": geomean([p["runs"][arm]["fraction_of_expert"] for p in problems]),
                     "wall_s": round(sum(p["runs"][arm]["wall_s"] for p in problems), 1),
                     "output_tokens": sum(int(p["runs"][arm]["usage"].get("output_tokens") or 0) for p in problems)}
               for arm in arms}
    gpu = gpu_info()
    return {"version": 1, "agent": template, "arms": arms, "budget_s": budget_s, "executor": executor,
            "timing": "gpu" if executor == "cuda" else "none (cpu executor: correctness only, no speed claims)",
            "machine": {"gpu": gpu, "load": os.getloadavg(), "cpus": os.cpu_count()}, "store": str(store) if store else None,
            "problems": problems, "summary": summary, "workdir": str(tmp)}


def _read(path: Path) -> Optional[str]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    return text if text.strip() else None


def _visible_pass(kernel: Path, agent_problem: Path, executor: str, store: Path) -> bool:
    """Did the kernel pass what the agent could see? (Then its failure is on a hidden workload.)"""
    src = _read(kernel)
    return src is not None and judge(agent_problem, kernel, executor, store, source=src)["verdict"] == "pass"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--agent", required=True, help="command template run with bash -c (placeholders: see the module doc)")
    ap.add_argument("--arms", default="bare,skills", help=f"comma-separated, of {', '.join(ARMS)}")
    ap.add_argument("--problems", type=Path, default=PROBLEMS)
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--ci", action="store_true", help="only the cases marked ci = true")
    ap.add_argument("--budget-s", type=float, default=1800.0)
    ap.add_argument("--executor", default="auto")
    ap.add_argument("--store", type=Path, help="skills store for the skills arm and `skills optimize`")
    ap.add_argument("--optimize-budget", type=int, default=10)
    ap.add_argument("--keep", type=Path, help="make the work folders under this folder and keep them (else removed)")
    ap.add_argument("--out", type=Path, help="write the JSON here (eval/results/... to record it)")
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    origin = stamp("eval.bench_agent", raw_argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or set(arms) - set(ARMS):
        print(f"error: --arms: expected some of {', '.join(ARMS)}, got {args.arms!r}", file=sys.stderr)
        return 2
    cases = load_problem_set(args.problems, args.only.split(",") if args.only else None)
    if args.ci:
        cases = [c for c in cases if c["ci"]]
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    from mining.gate import BadInput

    try:
        res = bench(args.agent, cases, arms, args.budget_s, args.executor, args.store, args.optimize_budget, args.keep)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.keep:  # the work folders are kept only on request
        shutil.rmtree(res["workdir"], ignore_errors=True)
        res["workdir"] = None
    res = {**origin, **res, "machine": {**origin["machine"], **res["machine"]}}
    if args.out:
        write_result(res, args.out, "bench_agent.json", indent=2)
    print(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
