"""How much of a real expert's human lineage does the backward walk undo? (issue 17)

    python -m eval.bench_lineage --executor cpu [--only PROBLEM[,..]] [--jobs N] [--out FILE]
                                 [--merge FILE] [--store DIR] [--house-store DIR]
    python -m eval.bench_lineage --prepare DIR [--only ...]       (materialize for a machine without the sources)

Per expert of the real corpus (``corpora/real/<source>/<problem>/``, sources fetched with
``skills corpora fetch NAME`` into ``<store>/sources``):

1. materialize the wrapper into a problem folder (naive = the first version, kernel.cu = the expert);
2. mine it (``mining.mine.mine_problem``: the deterministic walk, as ``skills mine`` runs it);
3. the end point (the walk's last kernel) passes the gate again on fresh seeds -> ``end_point_ok``;
4. the independent judge (``eval/judge.py``) compares naive / expert / end point on every human
   step's observations (SASS opcode mix and ptxas figures of the gate's static stage, the
   coalescing check) -> per step ``undone`` | ``kept`` | ``unobservable``;
5. the walk's steps whose carrier matches no human step are ``extra_steps`` (listed with what they are);
6. the lineage's skills are ``new`` or ``merged`` against a store mined from ``corpora/kernels``
   alone (the house store: built once per executor in ``--house-store`` and reused).

GPU-only experts (``gpu_only = true``: tensor cores, cp.async, inline PTX) are skipped on the CPU
executor with the reason; ``scripts/gpu_lineage.sh`` runs them on a GPU.
The table goes to stdout; the JSON is written only where ``--out`` names it (results hygiene).
``--merge FILE`` starts from an earlier result and replaces only the experts run now.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Optional

from eval.stamp import STAMP_KEYS, read_json, stamp, write_json

ROOT = Path(__file__).resolve().parent.parent
HOUSE_CORPUS = ROOT / "corpora" / "kernels"


# --------------------------------------------------------------------------- house store
def house_skill_ids(executor: str, house_store: Path, jobs: int, pool=None, log=print) -> dict[str, str]:
    """{skill_id: key} of a store mined from corpora/kernels alone; the problems it lacks are
    mined into it first (once: later runs reuse the stored lineages)."""
    from corpora.problem import load_problem
    from mining.gate import BadInput
    from mining.mine import MineConfig, mine_problem
    from skills.kernel_store import KernelStore, MinedLineages
    from skills.store import Store

    ks_store = Store(house_store)
    have = set()
    if ks_store.exists():
        have = {lin.problem for lin in KernelStore(ks_store).lineages() if lin.executor == executor}
    ks_store.close()
    todo = []
    for d in sorted(p.parent for p in HOUSE_CORPUS.glob("*/definition.json")):
        problem = load_problem(d)
        if "example" in problem.definition.tags or problem.name in have:
            continue
        if problem.solution.gpu_only and executor == "cpu":
            continue
        todo.append(d)
    if todo:
        log(f"[bench_lineage] house store {house_store}: mining {len(todo)} problem(s) of corpora/kernels "
            f"({', '.join(d.name for d in todo)}) once")
        cfg = MineConfig(executor=executor, jobs=jobs, store=house_store)
        for d in todo:
            try:
                mine_problem(d, cfg, pool=pool, lineages=MinedLineages(cfg.store))
            except BadInput as exc:
                log(f"[bench_lineage]   house {d.name} not mined: {exc}")
    with Store(house_store, read_only=True) as st:
        return {s.skill_id: s.key for s in KernelStore(st).skills(kind="kernel")}


def dump_house(house_store: Path, out: Path, executor: str = "cpu") -> dict[str, Any]:
    """The house store's skill ids and the problems mined into it, read from a copy of its duckdb
    file (so a house store still being mined by another process can be read)."""
    import tempfile

    from skills.kernel_store import KernelStore
    from skills.store import Store

    src = Path(house_store) / "store.duckdb"
    if not src.is_file():
        raise SystemExit(f"error: {house_store}: no house store")
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(src, Path(tmp) / "store.duckdb")
        with Store(tmp, read_only=True) as st:
            ks = KernelStore(st)
            problems = sorted({lin.problem for lin in ks.lineages() if lin.executor == executor})
            skills = {s.skill_id: s.key for s in ks.skills(kind="kernel")}
    house_all = sorted(d.name for d in HOUSE_CORPUS.iterdir() if (d / "definition.json").is_file())
    info = {"store": str(house_store), "executor": executor, "problems": problems,
            "complete": not (set(house_all) - set(problems) - {"vector_add", "tiled_matmul", "hgemm_wmma"}),
            "skills": skills}
    Path(out).write_text(json.dumps(info, indent=1) + "\n")
    return info


def load_house(path: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """{skill_id: key} and what the file says about the house store (a --dump-house file or a plain map)."""
    data = json.loads(Path(path).read_text())
    if isinstance(data.get("skills"), dict):
        return data["skills"], {k: v for k, v in data.items() if k != "skills"}
    return data, {}


# --------------------------------------------------------------------------- one expert
def walk_steps(lineage) -> list[dict[str, Any]]:
    return [{"index": s.index, "operator": s.operator, "carrier": s.carrier, "line": s.site_line,
             "excerpt": s.site_excerpt[:120]} for s in lineage.steps if s.accepted]


def extra_steps(walk: list[dict[str, Any]], human_carriers: set[str]) -> list[dict[str, Any]]:
    """Walk steps whose carrier names no human step: what the walk simplified that the human
    lineage does not list as an optimization step (the walk entry of the same index has its excerpt)."""
    return [{k: w[k] for k in ("index", "operator", "carrier", "line")} for w in walk
            if w["carrier"] not in human_carriers]


def judge_expert(expert, problem_dir: Path, end_source: str, store: Path, arch: str) -> tuple[list[dict], dict]:
    """The judge's verdict on every human step, and the static figures it used."""
    from eval.judge import StepPair, judge_step, static_facts

    naive = static_facts(problem_dir, (problem_dir / "naive.cu").read_text(), store, arch)
    exp = static_facts(problem_dir, (problem_dir / "kernel.cu").read_text(), store, arch)
    end = static_facts(problem_dir, end_source, store, arch)
    # every version's figures, so each step is judged against the version before it
    names = [v.name for v in expert.versions]
    middle = [static_facts(problem_dir, (problem_dir / "versions" / f"{i}_{n}.cu").read_text(), store, arch)
              for i, n in enumerate(names[1:-1], start=1)]
    facts = [naive, *middle, exp] if len(names) > 1 else [exp]
    at = {n: i for i, n in enumerate(names)}
    verdicts = []
    for s in expert.steps:
        i = at[s.version]
        pair = StepPair(names[i - 1], facts[i - 1], names[i], facts[i]) if i > 0 else None
        verdicts.append(judge_step(s.carrier, s.version, s.note, s.observe, naive, exp, end, pair).to_dict())
    return verdicts, {"naive": naive.summary(), "expert": exp.summary(), "end": end.summary()}


def run_expert(expert, problem_dir: Path, executor: str, store: Path, jobs: int, pool,
               max_steps: int, time_limit_s: Optional[float], probe: bool, arch: str,
               strategy: Optional[str] = None, timeout_s: float = 120.0) -> dict[str, Any]:
    from mining.gate import BadInput, GateConfig, run_gate
    from mining.mine import MineConfig, mine_problem
    from skills.kernel_store import KernelStore, MinedLineages
    from skills.store import Store

    row: dict[str, Any] = {"problem": expert.problem, "source": expert.source, "op_type": expert.op_type,
                           "history": expert.history, "versions": [v.name for v in expert.versions],
                           "human_steps": len(expert.steps)}
    t0 = time.perf_counter()
    cfg = MineConfig(executor=executor, jobs=jobs, store=store, max_steps=max_steps, time_limit_s=time_limit_s,
                     probe=probe, strategy=strategy, timeout_s=timeout_s)
    try:
        out = mine_problem(problem_dir, cfg, pool=pool, lineages=MinedLineages(cfg.store))
    except BadInput as exc:
        row.update(status="not_run", reason=str(exc), wall_s=round(time.perf_counter() - t0, 1))
        return row
    lin = out.lineage
    with Store(store, read_only=True) as st:
        final = KernelStore(st).source(lin.final_hash) or (problem_dir / "kernel.cu").read_text()
    recheck = run_gate(problem_dir, None, GateConfig(executor=executor, stages=("correctness",), seeds=(11, 12),
                                                     store=store), source=final)
    mine_wall = out.wall_s
    verdicts, static = judge_expert(expert, problem_dir, final, store, arch)
    walk = walk_steps(lin)
    for v in verdicts:  # which walk steps removed a carrier of this name (what the detectors think happened)
        v["walk_steps_same_carrier"] = [w["index"] for w in walk if w["carrier"] == v["carrier"]]
    extras = extra_steps(walk, {s.carrier for s in expert.steps})
    ids = {s.skill_id: s.key for s in out.skills if any(e.lineage_id == lin.lineage_id for e in s.evidence)}
    count = lambda v: sum(1 for x in verdicts if x["verdict"] == v)  # noqa: E731
    row.update(status="judged", undone=count("undone"), kept=count("kept"), unobservable=count("unobservable"),
               extra_steps=len(extras), extra_step_list=extras, walk_steps=len(walk), walk=walk,
               termination=lin.termination, rejections=len(lin.rejections),
               end_point_ok=bool(recheck.passed), end_point_reason=recheck.reason,
               # a cached lineage costs nothing now: its wall time is the walk's when it was mined, plus this run's
               wall_s=round(time.perf_counter() - t0 + (lin.wall_s if out.cached else 0.0), 1),
               mine_wall_s=round(lin.wall_s if out.cached else mine_wall, 1), cached=out.cached,
               skill_ids=ids,
               steps=verdicts, static=static, carriers_removed=out.removed_carriers,
               carriers_not_detected=out.undetected_carriers)
    return row


# --------------------------------------------------------------------------- aggregation
def aggregate(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    def agg(rs: list[dict[str, Any]]) -> dict[str, Any]:
        judged = [r for r in rs if r.get("status") == "judged"]
        human = sum(r["human_steps"] for r in judged)
        undone = sum(r["undone"] for r in judged)
        return {"experts": len(judged), "human_steps": human, "undone": undone,
                "undone_fraction": round(undone / human, 4) if human else None,
                "kept": sum(r["kept"] for r in judged), "unobservable": sum(r["unobservable"] for r in judged),
                "extra_steps": sum(r["extra_steps"] for r in judged),
                "end_point_ok": sum(bool(r["end_point_ok"]) for r in judged),
                "skills_new": (None if any(r.get("skills_new") is None for r in judged)
                               else sum(r["skills_new"] for r in judged)),
                "skills_merged": (None if any(r.get("skills_merged") is None for r in judged)
                                  else sum(r["skills_merged"] for r in judged)),
                "skills_new_keys": sorted({k for r in judged for k in r.get("skills_new_keys", [])}),
                "skipped": [f"{r['source']}/{r['problem']}" for r in rs if r.get("status") == "skipped"],
                "not_run": [f"{r['source']}/{r['problem']}" for r in rs if r.get("status") == "not_run"],
                "wall_s": round(sum(r.get("wall_s", 0) for r in rs), 1)}
    by_source = {s: agg([r for r in rows if r["source"] == s]) for s in sorted({r["source"] for r in rows})}
    return by_source, agg(rows)


# --------------------------------------------------------------------------- driver
def select(experts: list, only: Optional[list[str]], gpu_only: bool = False) -> list:
    if gpu_only:
        experts = [e for e in experts if e.gpu_only]
    if not only:
        return experts
    keys = set(only)
    chosen = [e for e in experts if e.problem in keys or f"{e.source}/{e.problem}" in keys]
    missing = keys - {e.problem for e in chosen} - {f"{e.source}/{e.problem}" for e in chosen}
    if missing:
        raise SystemExit(f"error: --only: no expert named {sorted(missing)[0]!r} in corpora/real")
    return chosen


def problem_folder(expert, sources_root: Path, work: Path, materialized: Optional[Path]) -> Path:
    """A materialized problem folder: from the fetched source, else from --materialized."""
    from corpora.kernel_sources import SourceMissing
    from corpora.real import materialize

    out = work / expert.source / expert.problem
    try:
        return materialize(expert, sources_root, out)
    except SourceMissing:
        if materialized is not None and (materialized / expert.source / expert.problem / "definition.json").is_file():
            return materialized / expert.source / expert.problem
        raise


def run(executor: str, only: Optional[list[str]], store: Path, house_store: Path, jobs: int, max_steps: int,
        time_limit_s: Optional[float], probe: bool, arch: str, materialized: Optional[Path],
        house_skills: Optional[Path], log=print, no_house: bool = False,
        real_root: Optional[Path] = None, gpu_only: bool = False, strategy: Optional[str] = None,
        timeout_s: float = 120.0, progress=None) -> list[dict[str, Any]]:
    from corpora.kernel_sources import SourceMissing
    from corpora.real import list_experts
    from mining.gate.executors import resolve_executor
    from mining.checker import make_pool

    executor = resolve_executor(executor)
    experts = select(list_experts(real_root) if real_root else list_experts(), only, gpu_only)
    pool = make_pool(jobs)
    rows: list[dict[str, Any]] = []
    try:
        log(f"[bench_lineage] {len(experts)} expert(s) on {executor}")
        for e in experts:
            base = {"problem": e.problem, "source": e.source, "op_type": e.op_type, "history": e.history,
                    "human_steps": len(e.steps), "gpu_only": e.gpu_only}
            if e.gpu_only and executor != "cuda":
                rows.append({**base, "status": "skipped", "reason": f"gpu_only: {e.gpu_only_reason}", "wall_s": 0.0})
                log(f"[bench_lineage] {e.source}/{e.problem}: skipped on {executor} (gpu_only: {e.gpu_only_reason})")
                continue
            log(f"[bench_lineage] {e.source}/{e.problem} ({len(e.steps)} human steps) ...")
            try:
                d = problem_folder(e, store.resolve() / "sources", store.resolve() / "cache" / "bench_lineage",
                                   materialized)
            except SourceMissing as exc:
                rows.append({**base, "status": "not_run", "reason": str(exc), "wall_s": 0.0})
                log(f"[bench_lineage]   not run: {exc}")
                continue
            except Exception as exc:  # a wrapper that does not materialize is reported, not fatal
                rows.append({**base, "status": "not_run", "reason": f"materialize: {exc}", "wall_s": 0.0})
                log(f"[bench_lineage]   not run: materialize: {exc}")
                continue
            row = run_expert(e, d, executor, store, jobs, pool, max_steps, time_limit_s, probe, arch, strategy,
                             timeout_s)
            row["gpu_only"] = e.gpu_only
            rows.append(row)
            if row["status"] == "judged":
                log(f"[bench_lineage]   {row['undone']}/{row['human_steps']} undone, {row['kept']} kept, "
                    f"{row['unobservable']} unobservable; {row['walk_steps']} walk steps ({row['extra_steps']} extra); "
                    f"end {'ok' if row['end_point_ok'] else 'FAIL'}; {len(row['skill_ids'])} skills; {row['wall_s']} s")
            else:
                log(f"[bench_lineage]   not run: {row['reason']}")
            if progress is not None:
                progress(rows)
        if house_skills is not None:
            house = load_house(house_skills)[0]
        elif no_house:
            house = None
        else:
            house = house_skill_ids(executor, house_store, jobs, pool, log)
    finally:
        if pool is not None:
            pool.shutdown()
    score_skills(rows, house)
    return rows


def score_skills(rows: list[dict[str, Any]], house: Optional[dict[str, str]]) -> None:
    """skills_new / skills_merged of every judged expert against the house store's skill ids
    (None when no house store was read)."""
    for r in rows:
        if r.get("status") != "judged":
            continue
        ids = r.get("skill_ids", {})
        if house is None:
            r.update(skills_new=None, skills_merged=None)
            continue
        r["skills_new_keys"] = sorted(k for i, k in ids.items() if i not in house)
        r["skills_merged_keys"] = sorted(k for i, k in ids.items() if i in house)
        r.update(skills_new=len(r["skills_new_keys"]), skills_merged=len(r["skills_merged_keys"]))


def prepare(only: Optional[list[str]], store: Path, house_store: Path, dest: Path, gpu_only: bool = False,
            log=print) -> None:
    """Materialize experts into DEST (for a machine without the sources or network) and write
    DEST/house_skills.json from the house store (skill identity does not depend on the executor)."""
    from corpora.real import list_experts, materialize

    experts = select(list_experts(), only, gpu_only)
    dest.mkdir(parents=True, exist_ok=True)
    for e in experts:
        materialize(e, store.resolve() / "sources", dest / e.source / e.problem)
        log(f"[bench_lineage] prepared {dest / e.source / e.problem}")
    if not (Path(house_store) / "store.duckdb").is_file():
        # the walk itself does not need it: the GPU run then leaves skills new/merged empty
        # (--no-house) and they are scored here later with --rescore
        log(f"[bench_lineage] {house_store}: no house store, so no house_skills.json (score later with --rescore)")
        return
    info = dump_house(house_store, dest / "house_skills.json")
    log(f"[bench_lineage] {len(info['skills'])} house skills -> {dest / 'house_skills.json'}")


def _n(x) -> str:
    return "-" if x is None else str(x)


def print_table(res: dict[str, Any]) -> None:
    print(f"{'source/problem':34} {'human':>5} {'undone':>6} {'kept':>4} {'unobs':>5} {'walk':>4} {'extra':>5} "
          f"{'end':>4} {'new':>3} {'mrg':>3} {'time s':>7}")
    for r in res["experts"]:
        name = f"{r['source']}/{r['problem']}"[:34]
        if r.get("status") != "judged":
            print(f"{name:34} {r['human_steps']:>5}  {r.get('status')}: {r.get('reason', '')[:80]}")
            continue
        print(f"{name:34} {r['human_steps']:>5} {r['undone']:>6} {r['kept']:>4} {r['unobservable']:>5} "
              f"{r['walk_steps']:>4} {r['extra_steps']:>5} {'ok' if r['end_point_ok'] else 'FAIL':>4} "
              f"{_n(r.get('skills_new')):>3} {_n(r.get('skills_merged')):>3} {r['wall_s']:>7}")
    for src, a in res["by_source"].items():
        print(f"{'  ' + src:34} {a['human_steps']:>5} {a['undone']:>6} {a['kept']:>4} {a['unobservable']:>5} "
              f"{'':>4} {a['extra_steps']:>5} {a['end_point_ok']:>4} {_n(a['skills_new']):>3} {_n(a['skills_merged']):>3} "
              f"{a['wall_s']:>7}")
    t = res["totals"]
    print(f"total: {t['experts']} experts judged, {t['human_steps']} human steps, {t['undone']} undone "
          f"(fraction {t['undone_fraction']}), {t['kept']} kept, {t['unobservable']} unobservable, "
          f"{t['extra_steps']} extra walk steps, skills new {t['skills_new']} / merged {t['skills_merged']}; "
          f"skipped {len(t['skipped'])}, not run {len(t['not_run'])}")


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--executor", default="cpu", choices=("cpu", "cuda", "auto"))
    ap.add_argument("--only", default="", help="comma-separated PROBLEM or SOURCE/PROBLEM names")
    ap.add_argument("--jobs", type=int, default=2, help="gate worker processes")
    ap.add_argument("--store", type=Path, default=None,
                    help="store with the fetched sources (<store>/sources) that the real lineages are mined into "
                         "(default: --store / SKILLS_STORE / ./.skills)")
    ap.add_argument("--house-store", type=Path, default=None,
                    help="store mined from corpora/kernels alone (default ./.skills-house-<executor>; built once)")
    ap.add_argument("--house-skills", type=Path, default=None, help="house skill ids as JSON (from --prepare)")
    ap.add_argument("--no-house", action="store_true", help="leave skills new/merged empty (score later with --rescore)")
    ap.add_argument("--rescore", type=Path, default=None,
                    help="recompute skills new/merged of this result against the house store, write --out, exit")
    ap.add_argument("--materialized", type=Path, default=None,
                    help="problem folders from --prepare, used where a source is not fetched")
    ap.add_argument("--gpu-only", action="store_true", help="only the experts marked gpu_only")
    ap.add_argument("--strategy", default=None, help="walk strategy (default: smallest_effect on cuda, priority on cpu)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per gate run (builds included)")
    ap.add_argument("--real-root", type=Path, default=None, help="wrappers folder (default corpora/real)")
    ap.add_argument("--prepare", type=Path, default=None, help="materialize the experts into DIR and exit")
    ap.add_argument("--max-steps", type=int, default=100)
    ap.add_argument("--time-limit", type=float, default=900.0, help="seconds per walk (termination time_limit)")
    ap.add_argument("--probe", action="store_true", help="probe adversarial workloads (preconditions; slower, "
                                                          "does not change the walk)")
    ap.add_argument("--arch", default="sm_90", help="static-stage target the judge reads")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here (e.g. eval/results/bench_lineage_cpu.json)")
    ap.add_argument("--merge", type=Path, default=None, help="start from this result; replace only the experts run now")
    ap.add_argument("--dump-house", type=Path, default=None,
                    help="write the house store's skill ids and mined problems to this JSON (for --house-skills), exit")
    ap.add_argument("--combine", type=Path, nargs="+", default=None,
                    help="combine result files (a later file's expert replaces an earlier one's), write --out, exit")
    ap.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    origin = stamp("eval.bench_lineage", raw_argv)
    only = [p for p in args.only.split(",") if p] or None
    store = args.store or Path(os.environ.get("SKILLS_STORE") or ".skills")
    executor = args.executor
    if executor == "auto":
        from mining.gate.executors import resolve_executor

        executor = resolve_executor("auto")
    house_store = args.house_store or ROOT / f".skills-house-{executor}"
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if args.prepare:
        prepare(only, store, args.house_store or ROOT / ".skills-house-cpu", args.prepare, args.gpu_only, log=log)
        return 0
    if args.dump_house:
        info = dump_house(house_store, args.dump_house, executor)
        log(f"[bench_lineage] house: {len(info['skills'])} skills from {', '.join(info['problems'])}"
            f"{'' if info['complete'] else ' (partial)'} -> {args.dump_house}")
        return 0
    if args.combine:
        _finish(combine(args.combine, origin), args)
        return 0
    if args.rescore:
        res = read_json(args.rescore)
        if args.house_skills:
            house, about = load_house(args.house_skills)
        else:
            house, about = house_skill_ids(res.get("executor", executor), house_store, args.jobs, None, log), {}
        score_skills(res["experts"], house)
        res["by_source"], res["totals"] = aggregate(res["experts"])
        res["house"] = {**about, "skills": len(house)}
        res["rescored"] = {k: origin[k] for k in STAMP_KEYS}
        _finish(res, args)
        return 0
    res: dict[str, Any] = {**origin, "executor": executor}
    res["strategy"] = args.strategy or ("smallest_effect" if executor == "cuda" else "priority")
    # read the result to merge into before anything is written: --merge F --out F is an update of F
    old = read_json(args.merge) if args.merge and args.merge.is_file() else None

    def merged(new_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        now = {(r["source"], r["problem"]) for r in new_rows}
        kept = [r for r in (old or {}).get("experts", []) if (r["source"], r["problem"]) not in now]
        return sorted(kept + new_rows, key=lambda r: (r["source"], r["problem"]))

    def partial(rows_so_far: list[dict[str, Any]]) -> None:
        # a long run on a loaded machine: what is done so far survives an interruption
        if args.out:
            part = {**res, "partial": True, "experts": merged(rows_so_far)}
            part["by_source"], part["totals"] = aggregate(part["experts"])
            _write(args.out, part)

    rows = run(executor, only, store, house_store, args.jobs, args.max_steps, args.time_limit, args.probe,
               args.arch, args.materialized, args.house_skills, log, no_house=args.no_house,
               real_root=args.real_root, gpu_only=args.gpu_only, strategy=args.strategy, timeout_s=args.timeout,
               progress=partial)
    rows = merged(rows)
    if old is not None:
        res["merged_from"] = str(args.merge)
        res["runs"] = old.get("runs", [_run_stamp(old)]) + [_run_stamp(res)]
    by_source, totals = aggregate(rows)
    res.update(experts=rows, by_source=by_source, totals=totals)
    _finish(res, args)
    return 0


def _run_stamp(res: dict[str, Any]) -> dict[str, Any]:
    """One run's stamp (results made before eval/stamp.py said `date` and `load_at_start`)."""
    return {k: res.get(k) for k in STAMP_KEYS + ("date", "load_at_start") if k in res}


def combine(paths: list[Path], origin: dict[str, Any]) -> dict[str, Any]:
    """One result from several runs over parts of the corpus (runs on a loaded machine are split)."""
    runs = [read_json(p) for p in paths]
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    stamps = []
    for path, r in zip(paths, runs):
        stamps += r.get("runs") or [_run_stamp(r)]
        for row in r["experts"]:
            rows[(row["source"], row["problem"])] = {**row, "from": Path(path).name}
    first = runs[-1]
    # the combine's own stamp; the runs' executor, machine and strategy (where the figures were measured)
    res = {**origin, **{k: first.get(k) for k in ("executor", "machine", "strategy")}}
    res.update(runs=stamps, experts=sorted(rows.values(), key=lambda r: (r["source"], r["problem"])))
    res["by_source"], res["totals"] = aggregate(res["experts"])
    return res


def _write(out: Path, res: dict[str, Any]) -> None:
    write_json(out, res)


def _finish(res: dict[str, Any], args) -> None:
    if args.out:
        _write(args.out, res)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        print_table(res)


if __name__ == "__main__":
    sys.exit(main())
