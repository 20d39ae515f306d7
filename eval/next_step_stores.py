"""The stores the next-step benchmark queries: one mined store, and one fold per held-out source.

Mining is the expensive part (CPU executor, minutes per expert), so every problem is mined once
into one *all* store (the house corpus `corpora/kernels` and every CPU-runnable expert of the real
corpus), and the leave-one-source-out folds are cut from it: a fold is a copy of the all store
without the lineages of one source's problems (their evidence leaves every skill; a skill only
they produced is gone), re-indexed. That is the store a walk over the other sources and the house
corpus would have written: a lineage is a function of its own problem only (the walk is
deterministic and each lineage is saved on its own), and merged skills are recomputed from the
lineages left (skills/merge.py, the same path `skills mine` takes when a lineage stops producing a
skill).

    python -m eval.next_step_stores --root /work/wt/ranking-stores mine      # fetch first (see docs/corpora.md)
    python -m eval.next_step_stores --root /work/wt/ranking-stores folds
    python -m eval.next_step_stores --root /work/wt/ranking-stores carry --dest .carry/optreal   # for the GPU
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Iterable, Optional

HOUSE = Path(__file__).resolve().parent.parent / "corpora" / "kernels"
# the lead's small examples: not part of the corpus the benchmarks score
HOUSE_SKIP = {"vector_add", "tiled_matmul"}


def house_problems(executor: str = "cpu") -> list[Path]:
    """corpora/kernels problem folders the executor can run (GPU-only experts need cuda)."""
    import tomllib

    out = []
    for d in sorted(HOUSE.iterdir()):
        if not (d / "definition.json").is_file() or d.name in HOUSE_SKIP:
            continue
        sol = tomllib.loads((d / "solution.toml").read_text())
        if sol.get("gpu_only") and executor != "cuda":
            continue
        out.append(d)
    return out


def materialize_real(sources_root: Path, dest: Path, log=print) -> dict[str, Path]:
    """Every real expert as a problem folder under dest/<source>/<problem> ({"source/problem": dir});
    one that cannot be cut from the fetched sources is logged and left out."""
    from corpora.kernel_sources import SourceMissing
    from corpora.real import list_experts, materialize

    out = {}
    for e in list_experts():
        key = f"{e.source}/{e.problem}"
        d = dest / e.source / e.problem
        try:
            if not (d / "definition.json").is_file():
                materialize(e, sources_root, d)
            out[key] = d
        except SourceMissing as exc:
            log(f"[stores] {key}: {exc}")
        except Exception as exc:  # noqa: BLE001 - one broken wrapper must not stop the others
            log(f"[stores] {key}: materialize failed: {exc}")
    return out


def problem_name(problem_dir: Path) -> str:
    return json.loads((Path(problem_dir) / "definition.json").read_text())["name"]


def mine_all(store: Path, problems: Iterable[Path], jobs: int = 2, probe: bool = False, log=print) -> list[dict]:
    """Mine each problem into ``store`` (a lineage already there with the same settings is reused)."""
    from mining.gate import BadInput
    from mining.checker import make_pool
    from mining.mine import MineConfig, mine_problem
    from skills.kernel_store import KernelStore, MinedLineages
    from skills.store import Store

    # a store that so far holds only fetched sources has no kernel tables yet, and mine_problem's
    # read-only look-up of an earlier lineage cannot create them
    st = Store(store)
    with st.session():
        st.con  # opened for writing: KernelStore creates its tables on an open connection
        KernelStore(st)
    cfg = MineConfig(executor="cpu", jobs=jobs, store=store, probe=probe)
    pool = make_pool(jobs)
    rows = []
    try:
        for d in problems:
            t0 = time.perf_counter()
            try:
                out = mine_problem(d, cfg, pool=pool, lineages=MinedLineages(store))
                rows.append({"problem": out.problem, "dir": str(d), "steps": len(out.lineage.steps),
                             "cached": out.cached, "wall_s": round(time.perf_counter() - t0, 1)})
                log(f"[stores] {out.problem}: {len(out.lineage.steps)} steps, "
                    f"{'cached' if out.cached else f'{time.perf_counter() - t0:.0f} s'}")
            except BadInput as exc:
                rows.append({"problem": d.name, "dir": str(d), "error": str(exc)[:300]})
                log(f"[stores] {d}: not mined: {str(exc)[:200]}")
    finally:
        if pool is not None:
            pool.shutdown()
    return rows


def drop_lineages(store: Path, problems: set[str]) -> list[str]:
    """Remove every lineage of ``problems`` from the store: their steps and rows go, and each skill
    they contributed to loses their evidence (skills/merge.py recomputes it) or, with nothing left,
    is deleted. Returns the lineage ids removed."""
    from skills.kernel_store import KernelStore, without_lineage
    from skills.merge import merge_skill
    from skills.store import Store

    st = Store(store)
    ks = KernelStore(st)
    removed = []
    with st.session():
        gone = [ln for ln in ks.lineages() if ln.problem in problems]
        with st.transaction() as con:
            for ln in gone:
                ids = {r[0] for r in con.execute("SELECT skill_id FROM steps WHERE lineage_id = ? AND skill_id <> ''",
                                                 [ln.lineage_id]).fetchall()}
                con.execute("DELETE FROM steps WHERE lineage_id = ?", [ln.lineage_id])
                con.execute("DELETE FROM lineages WHERE lineage_id = ?", [ln.lineage_id])
                for sid in sorted(ids):
                    row = con.execute("SELECT record FROM skills WHERE skill_id = ?", [sid]).fetchone()
                    if row is None:
                        continue
                    from mining.records import Skill

                    s = without_lineage(Skill.model_validate_json(row[0]), ln.lineage_id)
                    if not s.evidence:
                        con.execute("DELETE FROM skills WHERE skill_id = ?", [sid])
                    else:
                        KernelStore._put_skill(con, merge_skill(None, s))
                removed.append(ln.lineage_id)
            for p in problems:
                con.execute("DELETE FROM problems WHERE problem = ?", [p])
    return removed


def make_fold(all_store: Path, fold: Path, exclude: set[str], log=print) -> dict:
    """A copy of the all store without ``exclude``'s lineages, indexed (retrieval/skill_index.py)."""
    from retrieval.skill_index import index_skills
    from skills.store import Store

    if fold.exists():
        shutil.rmtree(fold)
    fold.mkdir(parents=True)
    shutil.copyfile(all_store / "store.duckdb", fold / "store.duckdb")
    if (all_store / "store.duckdb.wal").is_file():  # a store being mined into: its last writes
        shutil.copyfile(all_store / "store.duckdb.wal", fold / "store.duckdb.wal")
    removed = drop_lineages(fold, exclude)
    st = Store(fold)
    with st.session():
        report = index_skills(st)
    log(f"[stores] {fold.name}: {len(removed)} lineage(s) dropped, indexed")
    return {"fold": str(fold), "excluded_problems": sorted(exclude), "lineages_dropped": len(removed),
            "index": report if isinstance(report, dict) else str(report)}


def carry(all_store: Path, problems: Path, dest: Path) -> int:
    """What scripts/gpu_optimize_real.sh needs on a machine without the sources or duckdb: the
    materialized real-corpus folders and the all store's skill records as one JSON list."""
    from prompts.optimize import load_skill_records

    recs = [r.model_dump(mode="json") for r in load_skill_records(all_store)]
    tmp = dest.with_name(dest.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(problems, tmp / "problems")
    (tmp / "skills.json").write_text(json.dumps(recs))
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    print(f"[stores] {dest}: {len(recs)} skills, problems from {problems}")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.next_step_stores", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True, help="where the stores live (all/, folds/, problems/)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated problem folder names to mine (default: all)")
    ap.add_argument("--dest", type=Path, default=Path(".carry/optreal"),
                    help="carry: where to put the problem folders and skills.json for the GPU machine")
    ap.add_argument("what", choices=("mine", "folds", "carry"))
    a = ap.parse_args(argv)
    all_store = a.root / "all"
    if a.what == "carry":
        return carry(all_store, a.root / "problems", a.dest)
    if a.what == "mine":
        real = materialize_real(all_store / "sources", a.root / "problems")
        dirs = house_problems() + [d for k, d in sorted(real.items())]
        from corpora.real import list_experts

        gpu_only = {f"{e.source}/{e.problem}" for e in list_experts() if e.gpu_only}
        dirs = [d for d in dirs if f"{d.parent.name}/{d.name}" not in gpu_only]
        if a.only:
            keep = set(a.only.split(","))
            dirs = [d for d in dirs if d.name in keep]
        rows = mine_all(all_store, dirs, a.jobs)
        (a.root / "mined.json").write_text(json.dumps(rows, indent=1))
        return 0
    from corpora.real import list_experts

    real = materialize_real(all_store / "sources", a.root / "problems")
    by_source: dict[str, set[str]] = {}
    for e in list_experts():
        d = real.get(f"{e.source}/{e.problem}")
        if d is not None:
            by_source.setdefault(e.source, set()).add(problem_name(d))
    out = {}
    for src, probs in sorted(by_source.items()):
        out[src] = make_fold(all_store, a.root / "folds" / src, probs)
    # the house corpus alone: every real expert's lineage dropped
    out["house"] = make_fold(all_store, a.root / "folds" / "house", set().union(*by_source.values()))
    (a.root / "folds.json").write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
