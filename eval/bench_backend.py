"""Benchmark: retrieval and generation of LLVM backend functions on held-out real targets.

    python -m eval.bench_backend --llvm .skills/corpora/llvm-15 --json

For each evaluated target T (default RISCV and XCore), T is excluded from the candidates while
it is the target, and every evaluated target is excluded from GNN training. Functions
evaluated: every function of T whose role is implemented by at least two other targets.

Retrieval (query = T's function, signature + body, T's names neutralized; relevant = any
implementation of the same role in another target): Recall@1, Recall@5 and MRR for BM25,
text (MiniLM), graph (GNN) and fused (RRF of the three plus target-level similarity). The
function-level-only fusion is reported too.

Generation, per function: fork-and-adapt (best-ranked implementation of the role from another
target, identifiers mapped onto T) vs fork-flow (Mips's implementation, target renamed; no
output when Mips lacks the role). Metrics against T's real implementation: statement accuracy
(share of the real statements reproduced, after whitespace/comment normalization: aligned =
in order via longest matching blocks, bag = as a multiset), exact match (normalized bodies
equal), edit similarity (1 - token Levenshtein / longer length), compile-gate pass rate
(clang-15 -fsyntax-only with the function spliced into T's real file), and the foreign-
relocation lint. ``--model`` adds the LLM path (litellm) for up to ``--llm-limit`` functions.

Targets (exit 1 when any evaluated target misses one): fused Recall@1 >= 0.85; fork-and-adapt
aligned statement accuracy >= 2x fork-flow's. Exit 2 on bad input.

Ceilings of the one-donor fork-and-adapt design (``generation.fork_adapt.ceilings``): the best
of the top-5 ranked donors chosen with hindsight, the chosen donor with an ideal identifier
mapping, and both; each also divided by fork-flow's accuracy (eval/backend_studies.py).

``--selection-study`` and ``--selector-study`` replace the benchmark by studies of how to pick
the donor (eval/backend_studies.py), on development targets only: hand-made signals, and
learned linear selectors (retrieval/backend/selection.py) cross-validated leave-one-target-out
against the rule.

Unseen targets (``--queries TREE``): the held-out ``--targets`` come from another tree (LLVM 19's
Xtensa, LoongArch, ARC, CSKY, VE against an index of LLVM 15's other targets), each gated with its
own tree's toolchain (clang++-N, llvm-tblgen-N); gate errors are kept per target, a host file that
does not compile unmodified is an environment verdict left out of pass rates, and every figure has a
bootstrap 95% interval (eval/backend_stats.py): per target over its functions, overall as the mean
over targets.

Output: the summary table (or ``--json``: the summary) on stdout; the result JSON, stamped
(eval/stamp.py), to ``--out`` or else an untracked temporary file, with every function's scores
beside it in ``<name>.functions.json.gz`` (``load_result`` joins them again); the generated code
to ``<store>/bench/``. eval/results/README.md lists the committed results.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from collections import Counter, defaultdict
from difflib import SequenceMatcher
from pathlib import Path
from typing import Optional

from eval.backend_studies import (
    ORACLE_K, ceilings_summary, donor_ceilings, mask_target_names, selection_study, selector_data, selector_held_out,
    medoid_study, selector_study,
)
from eval.stamp import default_path, machine as stamp_machine, read_json, stamp, write_json, write_result

RECALL1_TARGET = 0.85
STATEMENT_RATIO_TARGET = 2.0
# the unseen-targets protocol (--queries): per target, and on the mean over targets
UNSEEN_RECALL1_TARGET = 0.9
UNSEEN_RATIO_PER_TARGET = 1.8
UNSEEN_RATIO_MEAN = 2.2
UNSEEN_COMPILE_RATIO = 2.0
FORK_FLOW_SOURCE = "Mips"
DEFAULT_TARGETS = ("RISCV", "XCore")
# --fusion-study: fork-and-adapt with these many top donors voting, beside the configured one
FUSION_VARIANTS = {"one_donor": 1, "fused_k3": 3, "fused_k6": 6}
REPAIRED = ("fork_adapt", *FUSION_VARIANTS)  # strategies gate-guided repair applies to (never fork-flow)


# --------------------------------------------------------------------------- metrics
from retrieval.backend.adapt import statement_accuracy  # noqa: E402  (the library's definition)
from retrieval.backend.fuse import DEFAULT_DONORS  # noqa: E402
from retrieval.backend.selection import MEDOID_DEFAULT  # noqa: E402


def score_entry(entry: dict, strat: str, T: str, dst) -> None:
    """Score one strategy's code of one function against T's real implementation (``entry["_ref"]``:
    its statements and normalized body): statement accuracy, precision, exact match, edit
    similarity, the foreign-relocation lint."""
    from corpora.backends.tree import parse_definition
    from mining.backend.gate import lint_relocations

    ref_stmts, ref_body = entry["_ref"]
    code = entry[strat]["code"]
    parsed = parse_definition(code) if code else None
    if parsed is None:
        entry[strat].update(aligned=0.0, bag=0.0, precision=0.0, exact=False, edit_similarity=0.0, lint=[])
        return
    al, bag = statement_accuracy(parsed[0], ref_stmts)
    entry[strat].update(aligned=round(al, 4), bag=round(bag, 4),
                        precision=round(statement_precision(parsed[0], ref_stmts), 4),
                        exact=parsed[1] == ref_body,
                        edit_similarity=round(token_edit_similarity(parsed[1], ref_body), 4),
                        lint=lint_relocations(code, T, dst.relocations))


def token_edit_similarity(a: str, b: str) -> float:
    ta, tb = a.split(), b.split()
    if not ta and not tb:
        return 1.0
    if len(ta) * len(tb) > 4_000_000:  # very long functions: matching-blocks ratio instead
        return SequenceMatcher(None, ta, tb, autojunk=False).ratio()
    prev = list(range(len(tb) + 1))
    for i, x in enumerate(ta, 1):
        cur = [i] + [0] * len(tb)
        for j, y in enumerate(tb, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return 1.0 - prev[-1] / max(len(ta), len(tb))


def rank_of_relevant(hits, role: str) -> Optional[int]:
    for n, h in enumerate(hits, 1):
        if h.role == role:
            return n
    return None


def summarize_ranks(ranks: list[Optional[int]]) -> dict:
    n = len(ranks)
    if not n:
        return {"n": 0, "recall@1": None, "recall@5": None, "mrr": None}
    return {"n": n,
            "recall@1": round(sum(1 for r in ranks if r == 1) / n, 4),
            "recall@5": round(sum(1 for r in ranks if r is not None and r <= 5) / n, 4),
            "mrr": round(sum(1.0 / r for r in ranks if r) / n, 4)}


def machine() -> dict:
    """The stamp's machine (eval/stamp.py) with Python's version and the load when the run ended."""
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {**stamp_machine(), "python": platform.python_version(), "load_average_at_end": load}


def load_result(path: Path) -> dict:
    """A result file with its per-function rows (``functions_file``, gzip JSON beside it) put back
    under each target's ``functions``."""
    res = read_json(path)
    if res.get("functions_file"):
        rows = read_json(Path(path).with_name(res["functions_file"]))
        for T, t in res["targets"].items():
            t["functions"] = rows.get(T, [])
    return res


# --------------------------------------------------------------------------- the run
def ingest_for_run(llvm: Path, queries: Optional[Path], store, targets: list[str], jobs: int, log) -> dict:
    """Put the benchmark's targets into the store. Without ``queries``: every target of
    ``llvm``. With it (the unseen-targets protocol): the held-out ``targets`` from the
    ``queries`` tree (another LLVM version, or any tree) and every *other* target of ``llvm``;
    the index tree's own versions of the held-out names stay out (LLVM 15's LoongArch is no
    donor for LLVM 19's), and so does any target an earlier run left in the store."""
    from corpora.backends.tree import BackendInputError, find_target_dirs
    from mining.backend.gate import corpus_version
    from retrieval.backend.index import drop_targets, ingest_targets

    if queries is None:
        report = ingest_targets(llvm, store, jobs=jobs, log=log)
        known = {t["target"] for t in report.targets}
        missing = [t for t in targets if t not in known]
        if missing:
            raise BackendInputError(f"target(s) {', '.join(missing)} not found under {llvm}")
        return {"report": report, "index_targets": sorted(known - set(targets)), "failed": len(report.failed_files),
                "corpora": {"index": {"path": str(Path(llvm).resolve()), "version": corpus_version(
                    _corpus_root(llvm))}}}
    index_names = [d.name for d in find_target_dirs(Path(llvm))[0]]
    query_names = [d.name for d in find_target_dirs(Path(queries))[0]]
    if not index_names:
        raise BackendInputError(f"no LLVM targets under {llvm}")
    missing = [t for t in targets if t not in query_names]
    if missing:
        raise BackendInputError(f"held-out target(s) {', '.join(missing)} not found under {queries}; "
                                f"found: {', '.join(query_names) or 'none'}")
    donors = [t for t in index_names if t not in set(targets)]
    r1 = ingest_targets(llvm, store, targets=donors, jobs=jobs, log=log)
    r2 = ingest_targets(queries, store, targets=targets, jobs=jobs, log=log)
    stale = sorted({r["target"] for r in store.query("SELECT target FROM targets")} - set(donors) - set(targets))
    if stale:
        log(f"dropping {len(stale)} target(s) of an earlier run from the store: {', '.join(stale)}")
        drop_targets(store, stale)
    r2.n_functions = int(store.scalar("SELECT count(*) FROM functions") or 0)
    return {"report": r2, "index_targets": donors, "failed": len(r1.failed_files) + len(r2.failed_files),
            "corpora": {"index": {"path": str(Path(llvm).resolve()), "version": corpus_version(_corpus_root(llvm))},
                        "queries": {"path": str(Path(queries).resolve()),
                                    "version": corpus_version(_corpus_root(queries))}}}


def _corpus_root(path: Path) -> Path:
    """The folder holding lib/Target (and fetch.json) for a path given as the corpus."""
    p = Path(path).resolve()
    if (p / "lib" / "Target").is_dir():
        return p
    if p.name == "Target" and p.parent.name == "lib":
        return p.parent.parent
    return p


def target_gate(store, T: str, jobs: int):
    """(CompileGate for T's own tree and LLVM version, None) or (None, why not)."""
    from mining.backend.gate import CompileGate

    root = store.scalar("SELECT root FROM targets WHERE target = ?", [T])
    gate = CompileGate(Path(root).parent, store.cache_dir, tblgen_jobs=max(1, min(jobs, 2)))
    why = gate.unavailable()
    return (None, why) if why else (gate, None)


def gate_functions(gate, T: str, per_fn: list[dict], strats, gate_files: int, log, repair_rounds: int = 0,
                   pool=None, rescore=None) -> dict:
    """One clang run per (host file, strategy). Each strategy's entry gets ``gate_verdict``:
    pass | fail | environment (the host file does not compile unmodified: not the code's fault)
    | no output (the strategy produced nothing for this function); ``gate`` (bool) is set for
    pass and fail only.

    With ``repair_rounds``, fork-and-adapt's functions (``REPAIRED`` strategies; never the
    fork-flow baseline) that fail only on undeclared identifiers are repaired without an LLM
    (prompts/backend/repair.py: each such name renamed to T's closest, re-gated together per host
    file, at most ``repair_rounds`` rounds); a repaired function replaces the strategy's code and
    ``rescore(entry, strat)`` scores it again. ``gate_before_repair`` keeps the first verdict.
    ``pool``: a NamePool, or ``pool(path, spans)`` making one per host file without the real
    versions of the functions generated for it."""
    from mining.backend.gate import Splice

    by_file: dict[str, list[dict]] = defaultdict(list)
    for e in per_fn:
        by_file[e["_host"][0]].append(e)
    files = sorted(by_file)
    if gate_files and len(files) > gate_files:
        step = len(files) / gate_files
        files = [files[int(i * step)] for i in range(gate_files)]
    checked = 0
    env_files: dict[str, str] = {}
    for n, path in enumerate(files, 1):
        for strat in strats:
            for e in by_file[path]:
                if not e[strat]["code"]:
                    e[strat]["gate_verdict"] = "no output"
            entries = [e for e in by_file[path] if e[strat]["code"]]
            if not entries:
                continue
            splices = [Splice(f"f{i}", e[strat]["code"], e["_host"][1], e["_host"][2]) for i, e in enumerate(entries)]
            res = gate.check(T, path, splices)
            if res.environment:
                env_files[path] = res.environment
            for i, e in enumerate(entries):
                v = res.function_verdict(f"f{i}") if not res.passed else "pass"
                e[strat]["gate_verdict"] = v
                if v != "environment":
                    e[strat]["gate"] = v == "pass"
                f = res.functions.get(f"f{i}", {"diagnostics": []})
                e[strat]["gate_diagnostics"] = [d["message"] for d in f["diagnostics"][:3]]
                e[strat]["gate_before_repair"] = v
                e[strat]["_verdict"] = {"verdict": v, "diagnostics": f["diagnostics"],
                                        "file_diagnostics": res.file_diagnostics}
            if repair_rounds and pool is not None and strat.startswith(REPAIRED):
                _repair_file(gate, T, path, strat, entries, repair_rounds, pool, rescore)
            for e in entries:
                e[strat].pop("_verdict", None)
        checked += len(by_file[path])
        log(f"{T}: gate {n}/{len(files)} files ({path})" + (" (environment: host file fails unmodified)"
                                                            if path in env_files else ""))
    return {"files_checked": len(files), "files_total": len(by_file), "functions_checked": checked,
            "toolchain": gate.tools.name, "llvm_version": gate.version,
            "environment_files": [{"path": p, "why": w[:600]} for p, w in sorted(env_files.items())]}


def _repair_file(gate, T: str, path: str, strat: str, entries: list[dict], rounds: int, pool, rescore) -> None:
    """Gate-guided repair of one host file's failing functions of ``strat`` (see gate_functions):
    each round one clang run over the functions still being repaired, spliced into the real file."""
    from mining.backend.gate import Splice
    from prompts.backend.repair import repair_many

    failing = [e for e in entries if e[strat]["gate_verdict"] == "fail"]
    if not failing:
        return
    if callable(pool):  # a pool per host file, without the real versions of its generated functions
        pool = pool(path, [(e["_host"][1], e["_host"][2]) for e in entries])

    def check_many(items: list[tuple[int, str]]) -> list[dict]:
        res = gate.check(T, path, [Splice(f"r{i}", code, failing[i]["_host"][1], failing[i]["_host"][2])
                                   for i, code in items])
        out = []
        for i, _ in items:
            v = res.function_verdict(f"r{i}") if not res.passed else "pass"
            f = res.functions.get(f"r{i}", {"diagnostics": []})
            out.append({"verdict": v, "diagnostics": f["diagnostics"], "file_diagnostics": res.file_diagnostics})
        return out

    results = repair_many([e[strat]["code"] for e in failing], [e[strat]["_verdict"] for e in failing],
                          check_many, pool, rounds)
    for e, r in zip(failing, results):
        e[strat]["repair"] = r.to_dict()
        if r.passed:
            e[strat]["aligned_before_repair"] = e[strat].get("aligned")
            e[strat]["code"] = r.code
            e[strat]["gate_verdict"], e[strat]["gate"], e[strat]["gate_diagnostics"] = "pass", True, []
            if rescore is not None:
                rescore(e, strat)


def run(llvm: Path, store_root: Optional[Path], targets: list[str], gate_files: int, model: Optional[str],
        llm_limit: int, jobs: int, use_gate: bool, log, fork_flow_source: str = FORK_FLOW_SOURCE,
        func_epochs: int = 8, target_epochs: int = 60, skills: bool = False, mine_time_limit: float = 240.0,
        mine_budget_s: Optional[float] = None, queries: Optional[Path] = None, resamples: int = 2000,
        fuse_donors: int = DEFAULT_DONORS, repair_rounds: int = 3, study: Optional[list[str]] = None,
        medoid: Optional[bool] = None) -> dict:
    """The benchmark (see the module doc). ``fuse_donors``: fork-and-adapt's top-k fusion (1: one
    donor); ``medoid``: the donor is the top-k consensus medoid (None: generation's default); ``repair_rounds``: gate-guided repair of its functions (0: none). ``study``: evaluate
    these targets (donors in the store, other than the held-out ``targets``) instead of
    ``targets``, with one-donor and k = 3 and 6 fusion side by side (the fusion study)."""
    from corpora.backends.tree import BackendInputError, parse_definition
    from eval.backend_stats import bootstrap, define_figures
    from mining.backend.gate import GateInputError, GateUnavailable
    from mining.backend.drift import apply_rules
    from prompts.backend.generate import AdaptCache, candidates_with_adaptations, drift_rules, fit_declared, fused_fork
    from retrieval.backend.adapt import fit_definition, fork_flow
    from retrieval.backend.index import build_indexes
    from retrieval.backend.search import DEPTH, MODES, BackendIndex
    from skills.store import Store

    from retrieval.backend.index import PhaseClock

    timings: dict[str, float] = {}
    t0 = time.monotonic()
    clock = PhaseClock()
    store = Store(store_root)
    ing = ingest_for_run(llvm, queries, store, targets, jobs, log)
    phases = {"ingest": clock.lap("ingest")}
    report = ing["report"]
    known = set(ing["index_targets"]) | set(targets)
    timings["ingest_s"] = round(time.monotonic() - t0, 1)
    t1 = time.monotonic()
    models = build_indexes(store, exclude=targets, func_epochs=func_epochs, target_epochs=target_epochs, log=log)
    timings["embed_and_train_s"] = round(time.monotonic() - t1, 1)
    index = BackendIndex(store, exclude_from_training=targets)
    roles = index.roles()
    mining = None
    if skills:
        tm = time.monotonic()
        mining = mine_for_skills(store, index, targets, roles, log, mine_time_limit,
                                 (tm + mine_budget_s) if mine_budget_s else None)
        timings["mining_s"] = round(time.monotonic() - tm, 1)
    # the fusion study's variants of fork-and-adapt next to the configured one (FUSION_VARIANTS)
    variants = {name: k for name, k in FUSION_VARIANTS.items() if k != fuse_donors} if study else {}
    strats = ("fork_adapt", "fork_flow") + tuple(variants) + (("skills",) if skills else ())
    eval_targets = list(study or targets)
    protocol = "unseen targets: held-out targets from the query tree, donors from the index tree" if queries \
        else "held-out targets of one tree"
    out: dict = {"llvm": str(Path(llvm).resolve()), "targets": {}, "machine": machine(),
                 "corpora": ing["corpora"],
                 "index": {"n_targets": len(known), "n_functions": report.n_functions,
                           "donor_targets": ing["index_targets"],
                           "n_shared_role_functions": models["n_shared_role_functions"],
                           "files_with_syntax_errors": ing["failed"],
                           "models": {k: v for k, v in models.items() if k in ("func_gnn", "target_gnn")},
                           "phases": {**phases, **models.get("phases", {})}},
                 "settings": {"protocol": protocol, "held_out": targets, "fork_flow_source": fork_flow_source,
                              "fusion": "RRF k=60", "target_weight": 0.5, "ranking_depth": DEPTH,
                              "fork_adapt_donors": fuse_donors, "gate_repair_rounds": repair_rounds,
                              "donor_medoid": MEDOID_DEFAULT if medoid is None else medoid,
                              "fusion_study": ({"targets": eval_targets, "variants": {"fork_adapt": fuse_donors,
                                                                                       **variants},
                                                "note": "evaluated targets are donors of this store (in GNN "
                                                        "training, as in --selection-study); each is excluded from "
                                                        "its own candidates"} if study else None),
                              "gate_files_per_target": gate_files or "all",
                              "donors": "every indexed target but the one evaluated (other held-out targets "
                                        "included), as in the benchmark's protocol"}}
    per_target_arrays: dict[str, dict[str, list]] = {}

    if study:
        missing = [T for T in study if T not in known]
        if missing:
            raise BackendInputError(f"study target(s) {', '.join(missing)} are not donors of this index "
                                    f"(held out: {', '.join(targets)})")
    for T in eval_targets:
        tt = time.monotonic()
        # evaluated: roles two other targets implement; in the fusion study the held-out targets are
        # no donors, so at least one of the two must be another
        not_donors = {T} | (set(targets) if study else set())
        rows = [r for r in index.rows if r["target"] == T and len(roles.get(r["role"], set()) - {T}) >= 2
                and roles.get(r["role"], set()) - not_donors]
        if not rows:
            raise BackendInputError(f"{T} has no function whose role two other targets implement")
        log(f"{T}: {len(rows)} functions to evaluate")
        # ---- retrieval
        ranks: dict[str, list] = defaultdict(list)
        for r in rows:
            doc, tvec, gvec = index.stored_query(r["func_id"])
            res = index.search(doc, tvec, gvec, query_target=T, exclude_targets=[T], k=DEPTH)
            for mode, hits in res.items():
                ranks[mode].append(rank_of_relevant(hits, r["role"]))
        retrieval = {mode: summarize_ranks(v) for mode, v in ranks.items()}
        t_retr = time.monotonic() - tt

        # ---- generation
        cache = AdaptCache(store)
        dst = cache.profile(T)
        src_ff = cache.profile(fork_flow_source) if fork_flow_source in known else None
        per_fn = []
        # API drift rules when T's tree is newer than the donors' (learned without T's and the held-out targets' code)
        drift = drift_rules(store, T, log=log)
        drift_used: dict = {}
        if drift is not None:
            out.setdefault("api_drift_rules", drift.to_dict())
        for r in rows:
            real = store.query("SELECT qualified_name, in_class, statements, signature, body, path, start_byte, "
                               "end_byte, identifiers FROM functions WHERE func_id = ?", [r["func_id"]])[0]
            ref_parsed = parse_definition(real["signature"] + " " + real["body"])
            ref_stmts = list(real["statements"] or [])
            ref_body = ref_parsed[1] if ref_parsed else ""
            entry = {"func_id": r["func_id"], "role": r["role"], "path": real["path"],
                     "n_statements": len(ref_stmts),
                     # donors implementing the role (T and the held-out targets aside): coverage
                     "donors": len(roles.get(r["role"], set()) - not_donors)}
            # the ranking does not depend on k: hits[0] is fork-and-adapt's pick, the rest feed the oracle
            _, hits, adapted = candidates_with_adaptations(store, index, T, r["role"],
                                                           max(ORACLE_K, fuse_donors, *variants.values(), 1),
                                                           exclude=targets if study else (), cache=cache,
                                                           medoid=medoid)
            best = hits[0]
            a = adapted[best.func_id]

            def fork_code(k: int) -> tuple[str, list, dict, str]:
                code, added = fused_fork(hits, adapted, k, known=cache.target_names(T))
                code, drift_used[k] = apply_rules(code, drift)  # T's LLVM newer than the donors': its API
                donor = fit_definition(code, real["qualified_name"], bool(real["in_class"]))
                # out of line: the parameters T's own header declares (its types and names)
                code, renamed = fit_declared(store, T, real["qualified_name"], donor) if not real["in_class"] \
                    else (donor, {})
                return code, added, renamed, donor

            fa_code, added, renamed, donor_code = fork_code(fuse_donors)
            # API drift: the donor's signature (T's names mapped) against T's own, before T's declaration
            entry["signature_same"] = _signature(donor_code) == _signature(real["signature"] + " {}")
            entry["fork_adapt"] = {"source": best.func_id, "mappability": round(a.mappability, 3),
                                   "unmapped": [m.source for m in a.mappings if m.how == "unmapped"],
                                   "code": fa_code, "fused_statements": len(added), "parameters_renamed": renamed,
                                   "api_drift": drift_used[fuse_donors]}
            for name, k in variants.items():
                code, added, _, _ = fork_code(k)
                entry[name] = {"source": best.func_id, "code": code, "fused_statements": len(added)}
            ff_rows = [x for x in index.role_rows(r["role"]) if x["target"] == fork_flow_source]
            if ff_rows and src_ff is not None:
                ff_text = cache.text(ff_rows[0]["func_id"])
                entry["fork_flow"] = {"source": ff_rows[0]["func_id"],
                                      "code": fit_definition(fork_flow(ff_text, src_ff, dst), real["qualified_name"],
                                                             bool(real["in_class"]))}
            else:
                entry["fork_flow"] = {"source": None, "code": None}
            if skills:
                from prompts.backend.generate import skills_for

                sres = skills_for(store, T, best.func_id, cache)
                entry["skills"] = {"source": best.func_id, "lineage": sres.lineage_id, "fallback": sres.fallback,
                                   "code": fit_definition(sres.code, real["qualified_name"], bool(real["in_class"])),
                                   "decisions": dict(Counter(p["decision"] for p in sres.plans)),
                                   "expansions": [{k: e[k] for k in ("kind", "source_instances", "instances")}
                                                  for e in sres.expansions]}
            entry["_ref"] = (ref_stmts, ref_body)
            for strat in strats:
                code = entry[strat]["code"]
                parsed = parse_definition(code) if code else None
                if parsed is None:
                    entry[strat].update(aligned=0.0, bag=0.0, precision=0.0, exact=False, edit_similarity=0.0,
                                        lint=[], statements_differ=True)
                    continue
                if strat == "skills":
                    fa_parsed = parse_definition(entry["fork_adapt"]["code"])
                    entry[strat]["statements_differ"] = fa_parsed is None or fa_parsed[0] != parsed[0]
                if strat == "fork_adapt":
                    # what perfect identifier mapping could add: T's names masked on both sides
                    entry[strat]["aligned_names_masked"] = round(
                        statement_accuracy(mask_target_names(parsed[0], dst), mask_target_names(ref_stmts, dst))[0], 4)
                score_entry(entry, strat, T, dst)
            entry["fork_adapt"]["oracle"] = donor_ceilings(index, cache, hits[:ORACLE_K], adapted, real,
                                                           entry["fork_adapt"]["code"], dst)
            entry["_host"] = (real["path"], real["start_byte"], real["end_byte"])
            per_fn.append(entry)
        t_gen = time.monotonic() - tt - t_retr

        # ---- compile gate (T's own tree and LLVM version), one clang run per (host file, strategy)
        gate_summary = None
        gate_error = None
        if use_gate:
            gate, why = target_gate(store, T, jobs)
            if gate is None:
                gate_error = {"error": why, "kind": "unavailable"}
            else:
                try:
                    pool = None
                    if repair_rounds:
                        from prompts.backend.repair import NamePool

                        target_dir = gate.target_dir(T)

                        def pool(path: str, spans: list, target_dir=target_dir, dst=dst):
                            # T's names without the host file's real versions of the functions
                            # generated for it (the reference must not supply its own names)
                            return NamePool.for_target(dst, target_dir, exclude={path: spans})
                    gate_summary = gate_functions(gate, T, per_fn, strats, gate_files, log, repair_rounds, pool,
                                                  lambda e, st: score_entry(e, st, T, dst))
                except (GateInputError, GateUnavailable) as exc:  # one target's tree, not the run
                    gate_error = {"error": str(exc), "kind": type(exc).__name__,
                                  "details": getattr(exc, "details", "")[-4000:]}
                    for e in per_fn:
                        for strat in strats:
                            for k in ("gate", "gate_verdict", "gate_diagnostics", "gate_before_repair", "repair"):
                                e[strat].pop(k, None)
            if gate_error:
                log(f"{T}: compile gate not run: {gate_error['error']}")
        t_gate = time.monotonic() - tt - t_retr - t_gen

        # ---- LLM (optional)
        llm = None
        if model:
            from prompts.backend.generate import GenerateRequest, generate
            from mining.llm import LEDGER

            done = []
            for e in per_fn[:llm_limit]:
                g = gate if gate_summary is not None else None
                res = generate(store, GenerateRequest(target=T, role=e["role"], k=3, strategy="llm", model=model,
                                                      gate=g is not None), index=index, gate=g)
                parsed = parse_definition(res.get("code") or "")
                real = store.query("SELECT statements FROM functions WHERE func_id = ?", [e["func_id"]])[0]
                al, bag = statement_accuracy(parsed[0], list(real["statements"] or [])) if parsed else (0.0, 0.0)
                done.append({"aligned": al, "bag": bag, "gate": (res.get("gate") or {}).get("passed")})
            llm = {"model": model, "n": len(done),
                   "statement_accuracy_aligned": round(sum(d["aligned"] for d in done) / max(len(done), 1), 4),
                   "statement_accuracy_bag": round(sum(d["bag"] for d in done) / max(len(done), 1), 4),
                   "compile_pass_rate": round(sum(1 for d in done if d["gate"]) / max(len(done), 1), 4),
                   "tokens": LEDGER.to_dict()}

        def agg(strat: str) -> dict:
            es = [e[strat] for e in per_fn]
            n = len(es)
            gated = [x for x in es if "gate" in x]
            produced = [x for x in es if x["code"]]
            # every function of a checked host file, no output counting as not compiling
            # (environment verdicts left out): the rate both strategies are compared on
            judged = [x for x in es if x.get("gate_verdict") in ("pass", "fail", "no output")]
            return {"n": n, "produced": len(produced),
                    "statement_accuracy_aligned": round(sum(x["aligned"] for x in es) / n, 4),
                    "statement_accuracy_bag": round(sum(x["bag"] for x in es) / n, 4),
                    "statement_precision_bag": round(sum(x["precision"] for x in es) / n, 4),
                    "exact_match": round(sum(1 for x in es if x["exact"]) / n, 4),
                    "edit_similarity": round(sum(x["edit_similarity"] for x in es) / n, 4),
                    "compile_pass_rate": (round(sum(1 for x in judged if x.get("gate")) / len(judged), 4)
                                          if judged else None),
                    "compile_judged": len(judged),
                    "compile_pass_rate_of_produced": (round(sum(1 for x in gated if x["gate"]) / len(gated), 4)
                                                      if gated else None),
                    "compile_checked": len(gated),
                    "compile_environment": sum(1 for x in es if x.get("gate_verdict") == "environment"),
                    "compile_pass_rate_without_repair": (
                        round(sum(1 for x in judged if x.get("gate_before_repair", x.get("gate_verdict")) == "pass")
                              / len(judged), 4) if judged else None),
                    "gate_repair": {"attempted": sum(1 for x in es if "repair" in x),
                                    "repaired": sum(1 for x in es if (x.get("repair") or {}).get("passed")),
                                    "rounds_used": dict(sorted(Counter(x["repair"]["rounds"] for x in es
                                                                       if "repair" in x).items())),
                                    "aligned_change": round(sum(x["aligned"] - x["aligned_before_repair"]
                                                                for x in es if "aligned_before_repair" in x) / n, 4)},
                    "fused_statements": (sum(x.get("fused_statements", 0) for x in es)
                                         if strat.startswith(REPAIRED) else None),
                    "compile_pass_rate_of_all": (round(sum(1 for x in gated if x["gate"]) / n, 4) if gate_summary
                                                 and gate_summary["files_checked"] == gate_summary["files_total"] else None),
                    "lint_foreign_relocations": sum(len(x["lint"]) for x in es)}

        gen = {st: agg(st) for st in strats}
        gen["fork_adapt"]["diagnostics"] = fork_adapt_diagnostics(per_fn)
        fa, ff = gen["fork_adapt"]["statement_accuracy_aligned"], gen["fork_flow"]["statement_accuracy_aligned"]
        gen["fork_adapt"]["ceilings"] = ceilings_summary(per_fn, ff, STATEMENT_RATIO_TARGET)
        ratio = (fa / ff) if ff > 0 else float("inf")
        r1_target, ratio_target = (UNSEEN_RECALL1_TARGET, UNSEEN_RATIO_PER_TARGET) if queries else \
            (RECALL1_TARGET, STATEMENT_RATIO_TARGET)
        checks = {"fused_recall@1": {"value": retrieval["fused"]["recall@1"], "target": r1_target,
                                     "met": retrieval["fused"]["recall@1"] >= r1_target},
                  "fork_adapt_vs_fork_flow_statement_accuracy": {
                      "value": round(ratio, 3) if ratio != float("inf") else "inf", "target": ratio_target,
                      "met": ratio >= ratio_target}}
        # per-function arrays for the bootstrap (NaN: no compile verdict for this function)
        nan = float("nan")

        def gate_value(x: dict) -> float:
            v = x.get("gate_verdict")
            return 1.0 if v == "pass" else 0.0 if v in ("fail", "no output") else nan

        arrays: dict[str, list] = {f"r1/{m}": [1.0 if r == 1 else 0.0 for r in ranks[m]] for m in ranks}
        arrays.update({f"r5/{m}": [1.0 if r is not None and r <= 5 else 0.0 for r in ranks[m]] for m in ranks})
        arrays["fa"] = [e["fork_adapt"]["aligned"] for e in per_fn]
        arrays["ff"] = [e["fork_flow"]["aligned"] for e in per_fn]
        arrays["gate_fa"] = [gate_value(e["fork_adapt"]) for e in per_fn]
        arrays["gate_ff"] = [gate_value(e["fork_flow"]) for e in per_fn]
        arrays["gate_fa_norepair"] = [gate_value({"gate_verdict": e["fork_adapt"].get(
            "gate_before_repair", e["fork_adapt"].get("gate_verdict"))}) for e in per_fn]
        for name in variants:
            arrays[f"al/{name}"] = [e[name]["aligned"] for e in per_fn]
            arrays[f"gate/{name}"] = [gate_value(e[name]) for e in per_fn]
        per_target_arrays[T] = arrays
        if skills:
            sk, fa_g = gen["skills"], gen["fork_adapt"]
            both = [e for e in per_fn if "gate" in e["skills"] and "gate" in e["fork_adapt"]]
            sk_rate = sum(1 for e in both if e["skills"]["gate"]) / len(both) if both else None
            fa_rate = sum(1 for e in both if e["fork_adapt"]["gate"]) / len(both) if both else None
            checks["skills_vs_fork_adapt_statement_accuracy"] = {
                "value": round(sk["statement_accuracy_aligned"] - fa_g["statement_accuracy_aligned"], 4),
                "target": "> 0", "met": sk["statement_accuracy_aligned"] > fa_g["statement_accuracy_aligned"]}
            checks["skills_compile_pass_rate_not_lower"] = {
                "value": None if sk_rate is None else round(sk_rate - fa_rate, 4), "target": ">= 0 (same functions)",
                "met": sk_rate is None or sk_rate >= fa_rate}
            es = [e["skills"] for e in per_fn]
            changed = [e for e in per_fn if e["skills"]["statements_differ"]]
            sk["coverage"] = {
                "with_lineage": sum(1 for x in es if x["lineage"] and not x["fallback"]),
                "fallback_no_lineage": sum(1 for x in es if x["fallback"] == "no lineage mined for the source"),
                "fallback_other": sum(1 for x in es if x["fallback"] and x["fallback"] != "no lineage mined for the source"),
                "differs_from_fork_adapt": len(changed),
                "decisions": dict(sum((Counter(x["decisions"]) for x in es), Counter())),
                "on_differing": {s2: round(sum(e[s2]["aligned"] for e in changed) / len(changed), 4) if changed else None
                                 for s2 in ("skills", "fork_adapt")}}
        for e in per_fn:
            e.pop("_host", None)
            e.pop("_ref", None)
        out["targets"][T] = {
            "n_functions_evaluated": len(rows), "n_roles": len({r["role"] for r in rows}),
            "similar_targets": [{"target": t, "similarity": round(s, 4)} for t, s in index.similar_targets(T, 5)],
            "retrieval": retrieval, "generation": gen, "gate": gate_summary, "gate_error": gate_error, "llm": llm,
            "checks": checks,
            "seconds": {"retrieval": round(t_retr, 1), "generation": round(t_gen, 1), "gate": round(t_gate, 1)},
            "functions": per_fn,
        }
        if skills:
            out["targets"][T]["lineages"] = lineage_statistics(
                store, sorted({e["skills"]["source"] for e in per_fn if e["skills"]["lineage"]}))
    if mining is not None:
        out["mining"] = mining
        out["skills_store"] = skill_store_statistics(store)
    modes = list(MODES) + ["fused_function_level"]
    figures = define_figures(modes)
    figures["compile_pass_ratio_without_repair"] = ("ratio", ("gate_fa_norepair", "gate_ff"))
    for name in variants:
        figures[f"{name}_aligned"] = ("mean", (f"al/{name}",))
        figures[f"{name}_aligned_ratio"] = ("ratio", (f"al/{name}", "ff"))
        figures[f"{name}_compile_pass_rate"] = ("mean", (f"gate/{name}",))
        figures[f"{name}_compile_pass_ratio"] = ("ratio", (f"gate/{name}", "gate_ff"))
    ci = bootstrap(per_target_arrays, figures, resamples=resamples)
    for T, figs in ci["targets"].items():
        out["targets"][T]["ci95"] = figs
    out["overall"] = {"method": ci["method"], "figures": ci["overall"]}
    if queries and len(targets) > 1 and not study:
        out["overall"]["checks"] = overall_checks(ci["overall"])
    timings["total_s"] = round(time.monotonic() - t0, 1)
    out["seconds"] = timings
    out["passed"] = all(c["met"] for t in out["targets"].values() for c in t["checks"].values()) and \
        all(c["met"] for c in out["overall"].get("checks", {}).values())
    return out


def overall_checks(fig: dict) -> dict:
    """The unseen-targets protocol's goals on the mean over targets (issue 23)."""
    def check(name: str, target: float) -> dict:
        f = fig.get(name) or {}
        v = f.get("value")
        return {"value": v, "ci95": f.get("ci95"), "target": target, "met": v is not None and v >= target}

    return {"mean_fork_adapt_vs_fork_flow_statement_accuracy": check("aligned_ratio", UNSEEN_RATIO_MEAN),
            "mean_compile_pass_ratio": check("compile_pass_ratio", UNSEEN_COMPILE_RATIO),
            "mean_fused_recall@1": check("recall@1/fused", UNSEEN_RECALL1_TARGET)}


def _signature(code: str) -> str:
    """A definition's head up to its body with parameter names, default arguments, whitespace,
    ``llvm::`` and the class qualification dropped: what must agree for a donor's definition to
    fit T's declaration (in-class and out-of-line definitions of one signature compare equal)."""
    head = code.split("{", 1)[0].replace("llvm::", "")
    head = re.sub(r"\b(virtual|override|final|static|inline)\b", " ", head)
    head = re.sub(r"(?:\b\w+\s*::\s*)+(?=~?\w+\s*\()", "", head)
    open_at = head.find("(")
    if open_at < 0:
        return " ".join(head.split())
    params, depth, cur, close_at = [], 0, "", len(head)
    for i in range(open_at + 1, len(head)):
        ch = head[i]
        if ch == ")" and depth == 0:
            close_at = i
            break
        depth += 1 if ch in "<(" else -1 if ch in ">)" else 0
        if ch == "," and depth == 0:
            params.append(cur)
            cur = ""
        else:
            cur += ch
    params.append(cur)
    types = []
    for prm in params:
        toks = re.findall(r"\w+|[^\w\s]", prm.split("=", 1)[0])
        if len(toks) > 1 and re.fullmatch(r"[A-Za-z_]\w*", toks[-1]):
            toks = toks[:-1]  # the parameter's name
        types.append(" ".join(toks))
    return " ".join(f"{head[:open_at]} ( {' , '.join(t for t in types if t)} ) {head[close_at + 1:]}".split())


def fork_adapt_diagnostics(per_fn: list[dict]) -> dict:
    """Why fork-and-adapt scores what it does on one target: where it loses to fork-flow, what
    fork-flow cannot do at all (no implementation in its fixed source), the headroom of perfect
    identifier mapping, and the source identifiers that most often found no counterpart."""
    n = len(per_fn)
    lose = [e for e in per_fn if e["fork_flow"]["aligned"] > e["fork_adapt"]["aligned"]]
    win = [e for e in per_fn if e["fork_flow"]["aligned"] < e["fork_adapt"]["aligned"]]
    no_ff = [e for e in per_fn if not e["fork_flow"]["source"]]
    unmapped = Counter(i for e in per_fn for i in e["fork_adapt"].get("unmapped", []))
    return {
        "loses_to_fork_flow": {"functions": len(lose),
                               "points": round(sum(e["fork_flow"]["aligned"] - e["fork_adapt"]["aligned"]
                                                   for e in lose) / n, 4),
                               "roles": [e["role"] for e in sorted(lose, key=lambda e: e["fork_adapt"]["aligned"]
                                                                   - e["fork_flow"]["aligned"])[:15]]},
        "beats_fork_flow": {"functions": len(win),
                            "points": round(sum(e["fork_adapt"]["aligned"] - e["fork_flow"]["aligned"]
                                                for e in win) / n, 4)},
        "fork_flow_source_lacks_role": {"functions": len(no_ff),
                                        "fork_adapt_points": round(sum(e["fork_adapt"]["aligned"] for e in no_ff) / n, 4)},
        "aligned_if_names_mapped_perfectly": round(sum(e["fork_adapt"].get("aligned_names_masked", 0.0)
                                                       for e in per_fn) / n, 4),
        # fork-flow's strength: how much of T its fixed source covers, and how well where it does
        "fork_flow_coverage": {"functions": n - len(no_ff),
                               "aligned_where_covered": round(sum(e["fork_flow"]["aligned"] for e in per_fn
                                                                  if e["fork_flow"]["source"])
                                                              / max(1, n - len(no_ff)), 4)},
        # how many donors implement each evaluated function's role
        "donors_per_role": _donor_buckets(per_fn),
        # API drift: the picked donor's signature (mapped onto T) differs from T's own
        "signature_drift": _split(per_fn, lambda e: not e.get("signature_same", True)),
        # out-of-line functions whose parameters T's own header declaration renamed
        "parameters_from_declaration": _split(per_fn, lambda e: bool(e["fork_adapt"].get("parameters_renamed"))),
        # forks that API drift rules (donors' LLVM -> T's, mining/backend/drift.py) rewrote
        "api_drift_rewritten": _split(per_fn, lambda e: bool(e["fork_adapt"].get("api_drift"))),
        "sources": dict(Counter(e["fork_adapt"]["source"].split(":", 1)[0] for e in per_fn).most_common()),
        "unmapped_identifiers": dict(unmapped.most_common(25)),
    }


def _split(per_fn: list[dict], pred) -> dict:
    """Functions where ``pred`` holds, and both strategies' aligned accuracy on each side."""
    yes = [e for e in per_fn if pred(e)]
    no = [e for e in per_fn if not pred(e)]

    def acc(es, s):
        return round(sum(e[s]["aligned"] for e in es) / len(es), 4) if es else None

    return {"functions": len(yes), "share": round(len(yes) / max(1, len(per_fn)), 4),
            "fork_adapt_aligned": [acc(yes, "fork_adapt"), acc(no, "fork_adapt")],
            "fork_flow_aligned": [acc(yes, "fork_flow"), acc(no, "fork_flow")],
            "note": "[where it holds, where it does not]"}


def _donor_buckets(per_fn: list[dict]) -> dict:
    """Functions by the number of donors implementing their role, with fork-and-adapt's accuracy."""
    out = {}
    for lab, lo, hi in (("2-3", 2, 3), ("4-7", 4, 7), ("8-15", 8, 15), ("16+", 16, 10 ** 6)):
        es = [e for e in per_fn if lo <= e.get("donors", 0) <= hi]
        if es:
            out[lab] = {"functions": len(es),
                        "fork_adapt_aligned": round(sum(e["fork_adapt"]["aligned"] for e in es) / len(es), 4),
                        "fork_flow_aligned": round(sum(e["fork_flow"]["aligned"] for e in es) / len(es), 4)}
    return out


def statement_precision(generated, reference) -> float:
    """Share of the generated statements that the real implementation has (as a multiset):
    statement accuracy's counterweight, since accuracy alone rewards writing more."""
    if not generated:
        return 0.0
    return sum((Counter(generated) & Counter(reference)).values()) / len(generated)


def mine_for_skills(store, index, targets: list[str], roles: dict, log, time_limit: float,
                    deadline: Optional[float]) -> dict:
    """Walk the implementations skill-guided generation starts from (the fork fork-and-adapt
    picks for each evaluated function), where skills can change the result: a step names
    something T lacks, or a skill ranges over S's attributes (prompts.backend.skills.may_differ).
    Stored lineages are reused."""
    from mining.backend.mine import BackendMineConfig, function_site, mine_backends
    from prompts.backend.generate import AdaptCache, candidates_with_adaptations
    from prompts.backend.skills import may_differ
    from skills.kernel_store import KernelStore

    t0 = time.monotonic()
    needed: dict[str, str] = {}
    picks = 0
    for T in targets:
        cache = AdaptCache(store)
        rows = [r for r in index.rows if r["target"] == T and len(roles.get(r["role"], set()) - {T}) >= 2]
        for r in rows:
            _, hits, _ = candidates_with_adaptations(store, index, T, r["role"], 1, cache=cache)
            src = hits[0].func_id
            picks += 1
            row = store.query("SELECT target, identifiers FROM functions WHERE func_id = ?", [src])[0]
            why = may_differ(function_site(store, src).text, cache.profile(row["target"]), cache.profile(T),
                             list(row["identifiers"] or []))
            if why:
                needed.setdefault(src, why)
        log(f"skills: {T} picks done; {len(needed)} sources to walk so far")
    size = {r["func_id"]: (r["target"], r["path"], r["n"]) for r in store.query(
        "SELECT func_id, target, path, end_byte - start_byte AS n FROM functions")}
    first: dict = {}
    for f in sorted(needed, key=lambda f: size[f][2]):
        first.setdefault(size[f][:2], size[f][2])
    order = sorted(needed, key=lambda f: (first[size[f][:2]], size[f][:2], size[f][2]))
    t1 = time.monotonic()
    outs = mine_backends(store, order, BackendMineConfig(time_limit_s=time_limit), log=lambda m: log("mine " + m),
                         deadline=deadline, lineages=KernelStore(store))
    by_skip = Counter(o.skipped.split(":")[0].split(" (")[0] for o in outs if o.skipped)
    return {"functions_picked": picks, "sources_to_walk": len(needed),
            "reasons": dict(Counter(w.split(":")[0] for w in needed.values())),
            "lineages": sum(1 for o in outs if o.lineage is not None),
            "walked_now": sum(1 for o in outs if o.lineage is not None and not o.cached),
            "reused": sum(1 for o in outs if o.cached), "not_walked": dict(by_skip),
            "clang_runs": sum(o.clang_runs for o in outs), "picks_s": round(t1 - t0, 1),
            "walk_s": round(time.monotonic() - t1, 1), "time_limit_per_function_s": time_limit}


def lineage_statistics(store, func_ids: list[str]) -> dict:
    """Steps and skills per lineage and per role; the share of statements that name a
    target-specific identifier; how much of each function the skeleton keeps."""
    from prompts.backend.skills import lineage_for

    lins = [lin for lin in (lineage_for(store, f) for f in func_ids) if lin is not None]
    if not lins:
        return {"n_lineages": 0}
    per_role: dict[str, list] = defaultdict(list)
    for lin in lins:
        per_role[lin.op_type].append(lin)

    def summary(ls) -> dict:
        st = sum(l.config.get("statements", 0) for l in ls)
        return {"lineages": len(ls), "targets": sorted({l.config.get("target", "") for l in ls}),
                "steps": round(sum(len(l.steps) for l in ls) / len(ls), 2),
                "rejections": round(sum(len(l.rejections) for l in ls) / len(ls), 2),
                "skills": round(sum(len({s.skill_id for s in l.steps}) for l in ls) / len(ls), 2),
                "statements": round(st / len(ls), 2),
                "target_specific_share": round(sum(l.config.get("target_specific_statements", 0) for l in ls) / st, 4)
                if st else None,
                "skeleton_share": round(sum(l.config.get("skeleton_statements", 0) for l in ls) / st, 4) if st else None}

    out = summary(lins)
    out = {"n_lineages": out.pop("lineages"), **out,
           "termination": dict(Counter(l.termination for l in lins)),
           "clang_runs": sum(l.config.get("clang_runs", 0) for l in lins),
           "steps_by_operator": dict(Counter(s.operator for l in lins for s in l.steps)),
           "per_role": {r: summary(ls) for r, ls in sorted(per_role.items())}}
    return out


def skill_store_statistics(store) -> dict:
    """The backend skills in the store: how many, how many merge steps from several targets."""
    from skills.kernel_store import KernelStore

    sk = KernelStore(store).skills(kind="backend")
    return {"skills": len(sk), "evidence": sum(len(s.evidence) for s in sk),
            "from_two_or_more_targets": sum(1 for s in sk if len(s.scope.get("archs", [])) >= 2),
            "for_each_attribute_kind": sum(1 for s in sk if s.provenance.get("slot_kinds")),
            "by_carrier": dict(Counter(s.carrier for s in sk))}


def _ci(t: dict, name: str) -> str:
    c = (t.get("ci95") or {}).get(name) or {}
    return f" [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]" if c.get("ci95") else ""


def summary_table(res: dict) -> str:
    lines = [f"LLVM corpus {res['llvm']} on {res['machine']['cpu']} ({res['machine']['cores']} cores, no GPU)"]
    corp = res.get("corpora", {})
    if "queries" in corp:
        lines.append(f"unseen-targets protocol: held-out targets from LLVM {corp['queries']['version']} "
                     f"({corp['queries']['path']}), donors from LLVM {corp['index']['version']}; "
                     "95% intervals: bootstrap over functions")
    for T, t in res["targets"].items():
        lines.append(f"\n{T}: {t['n_functions_evaluated']} functions, {t['n_roles']} roles; similar targets: "
                     + ", ".join(f"{s['target']} {s['similarity']:.2f}" for s in t["similar_targets"]))
        lines.append(f"  {'retrieval':22s} {'R@1':>6s} {'R@5':>6s} {'MRR':>6s}")
        for mode, m in t["retrieval"].items():
            lines.append(f"  {mode:22s} {m['recall@1']:6.3f} {m['recall@5']:6.3f} {m['mrr']:6.3f}"
                         + (f"   R@1{_ci(t, 'recall@1/' + mode)}" if t.get("ci95") else ""))
        lines.append(f"  {'generation':12s} {'stmt-al':>8s} {'stmt-bag':>8s} {'prec':>6s} {'exact':>6s} {'edit':>6s} "
                     f"{'compile':>8s} {'lint':>5s}")
        for s, g in t["generation"].items():
            cp = "n/a" if g["compile_pass_rate"] is None else f"{g['compile_pass_rate']:.3f}"
            lines.append(f"  {s:12s} {g['statement_accuracy_aligned']:8.3f} {g['statement_accuracy_bag']:8.3f} "
                         f"{g.get('statement_precision_bag', 0):6.3f} {g['exact_match']:6.3f} {g['edit_similarity']:6.3f} "
                         f"{cp:>8s} {g['lint_foreign_relocations']:5d}"
                         + (f"  ({g['compile_judged']} judged, {g['compile_environment']} environment)"
                            if g.get("compile_judged") or g.get("compile_environment") else ""))
        if t.get("ci95"):
            lines.append(f"  95% CI: fork-adapt{_ci(t, 'fork_adapt_aligned')}, fork-flow{_ci(t, 'fork_flow_aligned')}, "
                         f"ratio{_ci(t, 'aligned_ratio')}; compile fork-adapt{_ci(t, 'fork_adapt_compile_pass_rate')}, "
                         f"fork-flow{_ci(t, 'fork_flow_compile_pass_rate')}, ratio{_ci(t, 'compile_pass_ratio')}")
        if t.get("gate_error"):
            lines.append(f"  compile gate not run: {t['gate_error']['error']}")
        for ef in (t.get("gate") or {}).get("environment_files", []):
            lines.append(f"  environment: {ef['why'][:200]}")
        dg = t["generation"]["fork_adapt"].get("diagnostics")
        if dg:
            lines.append(f"  fork-adapt vs fork-flow: better on {dg['beats_fork_flow']['functions']} functions "
                         f"(+{dg['beats_fork_flow']['points']:.3f}), worse on {dg['loses_to_fork_flow']['functions']} "
                         f"(-{dg['loses_to_fork_flow']['points']:.3f}); fork-flow's source lacks "
                         f"{dg['fork_flow_source_lacks_role']['functions']} roles; with perfect identifier mapping "
                         f"<= {dg['aligned_if_names_mapped_perfectly']:.3f}")
        ce = t["generation"]["fork_adapt"].get("ceilings")
        if ce:
            lines.append("  one-donor ceilings (x fork-flow): " + ", ".join(
                f"{lab} {ce[k]['statement_accuracy_aligned']:.3f} ({ce[k]['ratio_to_fork_flow'] or 'inf'}x)"
                for lab, k in ((f"best of top-{ce['k']} donors", "oracle_donor"), ("ideal mapping", "oracle_mapping"),
                               ("both", "oracle_donor_and_mapping")))
                + f"; {STATEMENT_RATIO_TARGET:g}x needs {ce['needed_for_target']:.3f}")
        if "coverage" in t["generation"].get("skills", {}):
            lines.append(f"  skills coverage: {json.dumps(t['generation']['skills']['coverage'])}")
        lin = t.get("lineages")
        if lin and lin.get("n_lineages"):
            lines.append(f"  lineages: {lin['n_lineages']}, {lin['steps']} steps and {lin['skills']} skills per lineage, "
                         f"{lin['target_specific_share']:.0%} of statements target-specific, skeleton keeps "
                         f"{lin['skeleton_share']:.0%}; terminations {lin['termination']}")
        for name, c in t["checks"].items():
            lines.append(f"  check {name}: {c['value']} (target {c['target']}) {'met' if c['met'] else 'MISSED'}")
    ov = (res.get("overall") or {}).get("figures") or {}
    if len(res["targets"]) > 1 and ov:
        lines.append(f"\noverall (mean over {len(res['targets'])} targets, 95% CI):")
        for name, f in ov.items():
            if name.startswith(("recall@5/bm25", "recall@5/text", "recall@5/graph")):
                continue
            ci = f" [{f['ci95'][0]:.3f}, {f['ci95'][1]:.3f}]" if f.get("ci95") else ""
            lines.append(f"  {name:34s} {f['value']:.3f}{ci}" + ("" if len(f["targets"]) == len(res["targets"])
                                                                   else f"  ({len(f['targets'])} targets)"))
        for name, c in (res["overall"].get("checks") or {}).items():
            lines.append(f"  check {name}: {c['value']} {c['ci95']} (target {c['target']}) "
                         f"{'met' if c['met'] else 'MISSED'}")
    lines.append(f"\ntime: {res['seconds']}")
    lines.append("PASS" if res["passed"] else "FAIL: a target missed its goals")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.bench_backend", description=__doc__.split("\n\n")[0])
    ap.add_argument("--llvm", required=True, type=Path,
                    help="LLVM corpus to index (as `skills corpora fetch` writes it); with --queries: the donors' tree")
    ap.add_argument("--queries", type=Path, default=None,
                    help="take the held-out --targets from this tree instead (another LLVM version, or any tree): the "
                         "unseen-targets protocol; --llvm's own versions of those targets stay out of the index")
    ap.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples for the confidence intervals")
    ap.add_argument("--store", type=Path, default=None, help="store root (default SKILLS_STORE or ./.skills)")
    ap.add_argument("--targets", default=",".join(DEFAULT_TARGETS), help="held-out targets, comma-separated")
    ap.add_argument("--gate-files", type=int, default=12,
                    help="compile-gate at most N host files per target, evenly spaced over the sorted "
                         "file list (0 = all; all takes ~20 min on 2 cores)")
    ap.add_argument("--no-gate", action="store_true", help="skip the compile gate")
    ap.add_argument("--fuse-donors", type=int, default=DEFAULT_DONORS, metavar="K",
                    help="fork-and-adapt adds the statements at least half of the top K donors agree on "
                         f"(default {DEFAULT_DONORS})")
    ap.add_argument("--one-donor", action="store_true", help="fork-and-adapt from the best donor alone (K = 1)")
    ap.add_argument("--medoid", action=argparse.BooleanOptionalAction, default=None,
                    help="fork the consensus medoid of the rule's top donors (retrieval/backend/selection."
                         "consensus_medoid; default: generation's, MEDOID_DEFAULT)")
    ap.add_argument("--gate-repair", action=argparse.BooleanOptionalAction, default=True,
                    help="repair fork-and-adapt's functions that fail the gate only on undeclared identifiers "
                         "(renamed to the target's closest names, re-gated; no LLM)")
    ap.add_argument("--repair-rounds", type=int, default=3, help="gate re-checks per function for --gate-repair")
    ap.add_argument("--fusion-study", default=None, metavar="TARGETS",
                    help="evaluate these donor targets of the index instead of --targets (held out as usual), with "
                         "fork-and-adapt from one donor and fused over k = 3 and 6 side by side; default result "
                         "name backend_fusion_study.json")
    ap.add_argument("--model", default=None, help="litellm model for the LLM path (optional)")
    ap.add_argument("--llm-limit", type=int, default=20, help="functions per target sent to the LLM")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--fork-flow-source", default=FORK_FLOW_SOURCE, help="the fixed backend fork-flow copies")
    ap.add_argument("--epochs", type=int, default=8, help="function GNN training epochs")
    ap.add_argument("--out", type=Path, default=None,
                    help="result file, per-function rows beside it as .functions.json.gz (default: an untracked "
                         "temporary backend_llvm<version>.json; eval/results/... to record it)")
    ap.add_argument("--json", action="store_true", help="print the summary JSON (without per-function rows)")
    ap.add_argument("--skills", action="store_true",
                    help="add skill-guided generation (--strategy skills): walk the picked sources backward under the "
                         "compile gate first (stored lineages are reused); the default result name becomes "
                         "backend_lineages_llvm<version>.json")
    ap.add_argument("--mine-time-limit", type=float, default=240.0, help="seconds per function walk (with --skills)")
    ap.add_argument("--mine-budget", type=float, default=None,
                    help="stop walking new functions after this many seconds (with --skills; the rest fall back to "
                         "fork-and-adapt and are counted)")
    ap.add_argument("--selection-study", default=None, metavar="TARGETS",
                    help="instead of the benchmark: compare fork-selection signals on these validation targets "
                         "(e.g. Sparc,Lanai; uses the index trained without --targets)")
    ap.add_argument("--selector-study", default=None, metavar="TARGETS",
                    help="instead of the benchmark: collect donor features and labels on these development "
                         "targets and cross-validate learned selectors (retrieval/backend/selection.py) against the "
                         "rule; the result goes under 'learned_selector' in the --out file (default: an untracked "
                         "temporary backend_selection_study.json), the collected data to the store (reused while "
                         "the targets and feature names match; delete <store>/bench/selector_features.json to "
                         "collect again)")
    ap.add_argument("--no-held-out-eval", action="store_true",
                    help="with --selector-study: skip scoring the chosen selector on --targets")
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    origin = stamp("eval.bench_backend", raw_argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from corpora.backends.tree import BackendInputError

    targets = [t for t in args.targets.split(",") if t]
    if not targets:
        print("error: --targets is empty", file=sys.stderr)
        return 2
    if args.fuse_donors < 1 or args.repair_rounds < 0:
        print("error: --fuse-donors must be at least 1 and --repair-rounds at least 0", file=sys.stderr)
        return 2

    def log(msg: str) -> None:
        print(f"[bench] {msg}", file=sys.stderr, flush=True)

    if args.selection_study:
        from retrieval.backend.index import build_indexes, ingest_targets
        from retrieval.backend.search import BackendIndex, SearchError
        from skills.store import Store

        try:
            store = Store(args.store)
            ingest_targets(args.llvm, store, jobs=args.jobs, log=log)
            build_indexes(store, exclude=targets, func_epochs=args.epochs, log=log)
            study = selection_study(store, BackendIndex(store, exclude_from_training=targets),
                                    [t for t in args.selection_study.split(",") if t], args.fork_flow_source, log)
        except (BackendInputError, SearchError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        write_result({**origin, **study}, args.out, "backend_selection_study.json")
        print(json.dumps(study, indent=2))
        return 0
    if args.selector_study:
        from retrieval.backend.index import build_indexes, ingest_targets
        from retrieval.backend.search import BackendIndex, SearchError
        from retrieval.backend.selection import FEATURES
        from corpora.store_root import resolve_root
        from skills.store import Store

        dev = [t for t in args.selector_study.split(",") if t]
        if len(dev) < 2:
            print("error: --selector-study needs at least two development targets (one is held out per fold)",
                  file=sys.stderr)
            return 2
        if set(dev) & set(targets):
            print(f"error: development targets overlap the held-out ones: {sorted(set(dev) & set(targets))}",
                  file=sys.stderr)
            return 2
        data_path = resolve_root(args.store) / "bench" / "selector_features.json"
        try:
            groups = None
            if data_path.is_file():  # collecting takes minutes; the fits are what one iterates on
                saved = json.loads(data_path.read_text())
                if saved.get("targets") == dev and saved.get("features") == list(FEATURES) \
                        and saved.get("held_out") == targets:
                    groups = saved["groups"]
                    log(f"selector data reused from {data_path}")
            if groups is None:
                store = Store(args.store)
                ingest_targets(args.llvm, store, jobs=args.jobs, log=log)
                build_indexes(store, exclude=targets, func_epochs=args.epochs, log=log)
                groups = selector_data(store, BackendIndex(store, exclude_from_training=targets), dev, log)
                data_path.parent.mkdir(parents=True, exist_ok=True)
                data_path.write_text(json.dumps({"targets": dev, "held_out": targets, "features": list(FEATURES),
                                                 "groups": groups}))
        except (BackendInputError, SearchError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        t0 = time.monotonic()
        study = selector_study(groups)
        study["consensus_medoid"] = medoid_study(groups)
        study["fit_seconds"] = round(time.monotonic() - t0, 1)
        if not args.no_held_out_eval:
            store = Store(args.store)
            try:
                held = selector_data(store, BackendIndex(store, exclude_from_training=targets), targets, log)
            except (BackendInputError, SearchError) as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            study["held_out_evaluation"] = dict(
                selector_held_out(held, study["chosen"]["weights"]),
                note="evaluated once after the choice; adoption is decided on the development targets only")
        study["held_out_of_training"] = targets
        study["data_file"] = str(data_path)
        study = {**origin, **study, "machine": machine()}
        out = args.out or default_path("backend_selection_study.json")
        doc = read_json(out) if out.is_file() else {}
        doc["learned_selector"] = study
        write_result(doc, args.out, out.name)
        print(json.dumps(study, indent=2))
        return 0
    try:
        res = run(args.llvm, args.store, targets, args.gate_files, args.model, args.llm_limit, args.jobs,
                  not args.no_gate, log, fork_flow_source=args.fork_flow_source, func_epochs=args.epochs,
                  skills=args.skills, mine_time_limit=args.mine_time_limit, mine_budget_s=args.mine_budget,
                  queries=args.queries, resamples=args.resamples,
                  fuse_donors=1 if args.one_donor else args.fuse_donors,
                  repair_rounds=args.repair_rounds if args.gate_repair else 0,
                  study=[t for t in args.fusion_study.split(",") if t] if args.fusion_study else None,
                  medoid=args.medoid)
    except BackendInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    version = "15"
    fetch = Path(args.llvm) / "fetch.json"
    if fetch.is_file():
        version = str(json.loads(fetch.read_text()).get("version", "15")).split(".")[0]
    stem = "backend_lineages_llvm" if args.skills else "backend_llvm"
    out_path = args.out or default_path(f"{stem}{version}.json" if not args.fusion_study
                                        else "backend_fusion_study.json")
    # The summary file is small; every function's scores go beside it gzip-compressed (~0.6 MB of
    # JSON for two LLVM targets), the generated code (MBs) to the store.
    from corpora.store_root import resolve_root

    strats = ("fork_adapt", "fork_flow") + (("skills",) if args.skills else ())
    strats += tuple(k for k in next(iter(res["targets"].values()))["generation"] if k not in strats) \
        if res["targets"] else ()
    code_path = resolve_root(args.store) / "bench" / f"{stem}{version}_code.json"
    code_path.parent.mkdir(parents=True, exist_ok=True)
    code_path.write_text(json.dumps({T: {e["func_id"]: {s: e[s].get("code") for s in strats}
                                         for e in t["functions"]} for T, t in res["targets"].items()}, indent=1))
    for t in res["targets"].values():
        for e in t["functions"]:
            for s in strats:
                e[s].pop("code", None)
    res["generated_code_file"] = str(code_path)
    res = {**origin, **res}
    rows = {T: t.pop("functions") for T, t in res["targets"].items()}
    functions_path = out_path.with_name(out_path.name.removesuffix(".json") + ".functions.json.gz")
    res["functions_file"] = functions_path.name
    write_json(functions_path, rows)
    write_result(res, args.out, out_path.name, quiet=args.json)
    if args.json:
        print(json.dumps({**res, "result_file": str(out_path)}, indent=2))
    else:
        print(summary_table(res))
        print(f"(full results: {out_path})")
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
