"""The studies of the backend benchmark, apart from the benchmark itself (eval/bench_backend.py):

* the ceilings of the one-donor fork-and-adapt design, computed in every benchmark run
  (``generation.fork_adapt.ceilings``; definitions in ``CEILING_DEFINITIONS``): the best of the
  top-``ORACLE_K`` ranked donors chosen with hindsight, the chosen donor with an ideal identifier
  mapping, and both;
* how to pick the donor, on development targets only (``--selection-study``: hand-made signals;
  ``--selector-study``: learned linear selectors of retrieval/backend/selection.py
  cross-validated leave-one-target-out against the rule).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Optional

from retrieval.backend.adapt import statement_accuracy

ORACLE_K = 5  # donors the donor oracle may pick from: the top of fork-and-adapt's own ranking


# --------------------------------------------------------------------------- ceilings of the one-donor design
def mask_target_names(statements, prof, extra=frozenset()) -> list[str]:
    """Statements with the target's own names (attributes, header declarations, names carrying
    its name) and the tokens in ``extra`` replaced by one placeholder: what statement accuracy
    would be if every identifier mapped perfectly."""
    import re

    names = set(prof.kind_of) | set(prof.declared) | set(extra)
    alias = re.compile("|".join(re.escape(a) for a in prof.aliases)) if prof.aliases else None
    return [" ".join("@" if t in names or (alias is not None and alias.search(t)) else t for t in s.split(" "))
            for s in statements]


CEILING_DEFINITIONS = {
    "oracle_donor": f"per function, the best aligned statement accuracy among the top-{ORACLE_K} donors of "
                    "fork-and-adapt's ranking, each adapted and fitted exactly as fork-and-adapt does (the donor "
                    "chosen with hindsight); mean over the evaluated functions",
    "oracle_mapping": "fork-and-adapt's chosen donor with an ideal identifier mapping, measured as aligned statement "
                      "accuracy modulo target-specific identifiers: every token naming something target-specific "
                      "(T's attributes, header declarations, TableGen namespaces, names carrying T's name; the "
                      "identifiers the indexer marks target-specific in T's real function; every name part the "
                      "adaptation wrote for one of the donor's target-specific identifiers, mapped or not) becomes "
                      "one placeholder on both sides; the donor both with and without case arms pruned for "
                      "unmapped labels (an ideal mapping would keep them); per function the maximum of these and "
                      "the unmasked accuracy. An upper bound of any remapping of the donor's target-specific "
                      "identifiers onto T's names",
    "oracle_donor_and_mapping": f"both: per function the best oracle_mapping score among the top-{ORACLE_K} donors",
}


def donor_ceilings(index, cache, hits, adapted: dict, real: dict, fa_code: Optional[str], dst) -> dict:
    """One function's ceilings of the one-donor design (CEILING_DEFINITIONS): for each of the top
    donors, its accuracy as fork-and-adapt would produce it and with an ideal identifier mapping."""
    from corpora.backends.tree import parse_definition
    from retrieval.backend.adapt import MATCH_KINDS, adapt, fit_definition

    ref = list(real["statements"] or [])
    ref_names = {p for i in real["identifiers"] or [] for p in i.split("::") if p != "llvm"}
    acc, ideal = [], []
    for n, h in enumerate(hits):
        a = adapted[h.func_id]
        # the top donor's code is fork-and-adapt's own output, so oracle_donor >= fork_adapt exactly
        code = fa_code if n == 0 else fit_definition(a.text, real["qualified_name"], bool(real["in_class"]))
        parsed = parse_definition(code) if code else None
        stmts = parsed[0] if parsed else []
        al = statement_accuracy(stmts, ref)[0] if parsed else 0.0
        names = ref_names | dst.namespaces | {p for m in a.mappings if m.how != "generic"
                                              for p in m.target.split("::") if p != "llvm"}
        best = al
        variants = [stmts] if parsed else []
        if any(m.how == "unmapped" and m.kind in MATCH_KINDS for m in a.mappings):  # adapt pruned some arms
            row = index.rows[index.pos[h.func_id]]
            unpruned = adapt(cache.text(h.func_id), list(row["identifiers"] or []), cache.profile(row["target"]),
                             dst, h.func_id, prune=False).text
            p2 = parse_definition(fit_definition(unpruned, real["qualified_name"], bool(real["in_class"])))
            if p2:
                variants.append(p2[0])
        masked_ref = mask_target_names(ref, dst, names)
        for v in variants:
            best = max(best, statement_accuracy(mask_target_names(v, dst, names), masked_ref)[0])
        acc.append(al)
        ideal.append(best)
    top = max(range(len(acc)), key=lambda i: (acc[i], -i))
    return {"donor": round(acc[top], 4), "donor_source": hits[top].func_id, "donor_rank": top + 1,
            "mapping": round(ideal[0], 4), "donor_and_mapping": round(max(ideal), 4)}


def ceilings_summary(per_fn: list[dict], fork_flow_aligned: float, ratio_target: float) -> dict:
    """Mean of each ceiling over the evaluated functions, and its ratio to fork-flow's accuracy:
    does any one-donor fork-and-adapt reach the benchmark's target ratio (``ratio_target``) at all?"""
    n = len(per_fn)
    out: dict = {"k": ORACLE_K, "fork_flow_aligned": fork_flow_aligned,
                 "needed_for_target": round(ratio_target * fork_flow_aligned, 4)}
    for name, key in (("oracle_donor", "donor"), ("oracle_mapping", "mapping"),
                      ("oracle_donor_and_mapping", "donor_and_mapping")):
        v = round(sum(e["fork_adapt"]["oracle"][key] for e in per_fn) / n, 4)
        ratio = v / fork_flow_aligned if fork_flow_aligned > 0 else None
        out[name] = {"statement_accuracy_aligned": v,
                     "ratio_to_fork_flow": round(ratio, 3) if ratio is not None else None,
                     "reaches_target": ratio is None or ratio >= ratio_target}
    out["oracle_donor"]["functions_improved"] = sum(1 for e in per_fn if e["fork_adapt"]["oracle"]["donor_rank"] > 1)
    out["definitions"] = CEILING_DEFINITIONS
    return out


# --------------------------------------------------------------------------- how to pick the donor
def selection_study(store, index, targets: list[str], fork_flow_source: str, log=None) -> dict:
    """How well each signal picks the implementation to fork, on *validation* targets (never the
    reported ones): mean aligned statement accuracy of the fork each strategy picks."""
    import numpy as np

    from prompts.backend.generate import AdaptCache
    from retrieval.backend.adapt import consensus_scores
    from retrieval.backend.selection import declaration_sets

    cache = AdaptCache(store)
    roles = index.roles()
    tm, th = index.text
    gm, gh = index.graph
    picks: dict[str, list[float]] = defaultdict(list)
    decls = declaration_sets(store)
    per_target: dict[str, dict] = {}
    for T in targets:
        start = defaultdict(int, {k: len(v) for k, v in picks.items()})
        tsim = index.target_similarity(T)
        decl = {S: len(decls[T] & d) / max(len(decls[T] | d), 1) for S, d in decls.items() if S != T} if T in decls else {}
        rows = [r for r in index.rows if r["target"] == T and len(roles.get(r["role"], set()) - {T}) >= 2]
        for r in rows:
            ref = list(store.scalar("SELECT statements FROM functions WHERE func_id = ?", [r["func_id"]]) or [])
            cands = index.role_rows(r["role"], [T])
            stm, acc, mapp = {}, {}, {}
            for c in cands:
                a, st = cache.adapt(c, T)
                stm[c["func_id"]], mapp[c["func_id"]] = st, a.mappability
                acc[c["func_id"]] = statement_accuracy(st, ref)[0]
            ids = list(acc)
            cons = consensus_scores(stm)
            ps = {i: index.pos[i] for i in ids}
            typ = {}
            for i in ids:
                others = [ps[j] for j in ids if j != i]
                typ[i] = (float(np.mean(tm[others] @ tm[ps[i]])) + float(np.mean(gm[others] @ gm[ps[i]]))) if others else 0.0
            tgt = {i: tsim.get(index.rows[ps[i]]["target"], 0.0) for i in ids}

            def best(key):
                return acc[max(ids, key=lambda i: (key(i), -ids.index(i)))]

            lens = {i: len(stm[i]) for i in ids}
            f1 = {}
            for i in ids:  # the same vote with a symmetric utility (F1 of matched statements)
                others = [j for j in ids if j != i]
                f1[i] = (sum(2 * statement_accuracy(stm[i], stm[j])[0] * lens[j] / max(lens[i] + lens[j], 1)
                             for j in others) / len(others)) if others else 0.0
            dsim = {i: decl.get(index.rows[ps[i]]["target"], 0.0) for i in ids}
            picks["consensus + 0.05 x target similarity (used)"].append(best(lambda i: cons[i] + 0.05 * tgt[i]))
            picks["consensus only"].append(best(lambda i: cons[i]))
            picks["consensus + 0.3 x target similarity"].append(best(lambda i: cons[i] + 0.3 * tgt[i]))
            picks["consensus, F1 utility"].append(best(lambda i: f1[i]))
            picks["consensus + 0.05 x target sim. + 0.3 x header-declaration overlap"].append(
                best(lambda i: cons[i] + 0.05 * tgt[i] + 0.3 * dsim[i]))
            picks["header-declaration overlap only"].append(best(lambda i: dsim[i]))
            picks["target similarity only"].append(best(lambda i: tgt[i]))
            picks["text+graph typicality"].append(best(lambda i: typ[i]))
            picks["identifier mappability"].append(best(lambda i: (mapp[i], typ[i])))
            ff = [i for i in ids if index.rows[ps[i]]["target"] == fork_flow_source]
            picks[f"{fork_flow_source} (fork-flow's source, adapted)"].append(acc[ff[0]] if ff else 0.0)
            picks["mean over candidates"].append(sum(acc.values()) / len(acc))
            picks["best with hindsight"].append(max(acc.values()))
        per_target[T] = {k: round(sum(v[start[k]:]) / max(len(v) - start[k], 1), 4) for k, v in picks.items()}
        if log:
            log(f"selection study: {T} done ({len(rows)} functions)")
    return {"targets": targets, "n_functions": len(picks["best with hindsight"]), "per_target": per_target,
            "mean_aligned_statement_accuracy": {k: round(sum(v) / len(v), 4) for k, v in picks.items()}}


# --------------------------------------------------------------------------- learned donor selection
def selector_data(store, index, targets: list[str], log=None) -> list[dict]:
    """Per function of each development target: every candidate donor's generation-time features
    (retrieval/backend/selection.FEATURES) and its label, the aligned statement accuracy of its
    adaptation against T's real implementation. The labels read T's real code: fit only on
    development targets; the reported targets may only score a selector already frozen."""
    from prompts.backend.generate import AdaptCache
    from retrieval.backend.selection import agreement_matrix, candidate_features, declaration_sets as decl_sets, votes

    cache = AdaptCache(store)
    roles = index.roles()
    decls = decl_sets(store)
    groups = []
    for T in targets:
        tsim = index.target_similarity(T)
        rows = [r for r in index.rows if r["target"] == T and len(roles.get(r["role"], set()) - {T}) >= 2]
        for r in rows:
            ref = list(store.scalar("SELECT statements FROM functions WHERE func_id = ?", [r["func_id"]]) or [])
            cands = index.role_rows(r["role"], [T])
            stm, mapp = {}, {}
            for c in cands:
                a, st = cache.adapt(c, T)
                stm[c["func_id"]], mapp[c["func_id"]] = st, a.mappability
            ids = [c["func_id"] for c in cands]
            donor = {c["func_id"]: c["target"] for c in cands}
            A = agreement_matrix(stm)
            rec, prec = votes(ids, A)
            X = candidate_features(ids, donor, rec, prec, tsim, decls, T, index.typicality(ids), mapp,
                                   {i: len(stm[i]) for i in ids})
            groups.append({"target": T, "func_id": r["func_id"], "ids": ids, "donors": [donor[i] for i in ids],
                           "X": [[round(x, 6) for x in row] for row in X],
                           "y": [round(statement_accuracy(stm[i], ref)[0], 6) for i in ids],
                           "agreement": [[round(x, 4) for x in row] for row in A]})
        if log:
            log(f"selector data: {T} done ({len(rows)} functions)")
    return groups


def paired_difference(diff) -> dict:
    """Per-function differences of two selectors' accuracies: mean, 95% bootstrap interval over
    functions (seeded), and how many functions each side wins."""
    import numpy as np

    rng = np.random.default_rng(0)
    boots = [diff[rng.integers(0, len(diff), len(diff))].mean() for _ in range(2000)]
    return {"mean": round(float(diff.mean()), 4),
            "ci95_bootstrap_functions": [round(float(np.percentile(boots, 2.5)), 4),
                                         round(float(np.percentile(boots, 97.5)), 4)],
            "functions_better": int((diff > 1e-9).sum()), "functions_worse": int((diff < -1e-9).sum())}


def selector_held_out(groups: list[dict], weights: dict) -> dict:
    """The frozen selector (``selector_study``'s ``chosen``) against the rule on the held-out
    targets' groups: reported once, after the decision, which rests on development targets only."""
    import numpy as np

    from retrieval.backend.selection import FEATURES, LinearSelector, top1_accuracy

    sel = LinearSelector([float(weights.get(f, 0.0)) for f in FEATURES])
    out = {}
    for T in dict.fromkeys(g["target"] for g in groups):
        gs = [dict(g, X=np.array(g["X"], dtype=float), y=np.array(g["y"], dtype=float))
              for g in groups if g["target"] == T and g["ids"]]
        learned, rule = np.array(top1_accuracy(sel, gs)), np.array(top1_accuracy(LinearSelector.rule(), gs))
        out[T] = {"n_functions": len(gs), "rule": round(float(rule.mean()), 4),
                  "learned": round(float(learned.mean()), 4),
                  "best with hindsight": round(float(np.mean([g["y"].max() for g in gs])), 4),
                  "learned_minus_rule": paired_difference(learned - rule)}
    return out


def mbr_variants() -> dict:
    """Score functions over a group's agreement matrix A (A[i][j]: share of j's statements i
    reproduces): the plain vote weights every other candidate equally; these reweight the voters
    or aggregate differently."""
    import numpy as np

    def weighted(g, w):
        A = np.asarray(g["agreement"], dtype=float)
        n = len(A)
        if n < 2:
            return np.zeros(n)
        W = np.where(np.eye(n, dtype=bool), 0.0, np.asarray(w, dtype=float)[None, :])
        return (A * W).sum(1) / np.maximum(W.sum(1), 1e-12)

    def by_feature(name, beta):
        from retrieval.backend.selection import FEATURES

        k = FEATURES.index(name)
        return lambda g: weighted(g, np.exp(beta * (g["X"][:, k] - g["X"][:, k].mean())))

    def reliability(gamma):
        def f(g):
            w = np.ones(len(g["y"]))
            for _ in range(3):  # voters that agree with the others count more
                w = np.maximum(weighted(g, w), 1e-6) ** gamma
            return weighted(g, w)
        return f

    def topk(k):
        def f(g):
            A = np.asarray(g["agreement"], dtype=float)
            n = len(A)
            if n < 2:
                return np.zeros(n)
            M = np.where(np.eye(n, dtype=bool), -1.0, A)
            return -np.sort(-M, axis=1)[:, :min(k, n - 1)].mean(1)
        return f

    def median(g):
        A = np.asarray(g["agreement"], dtype=float)
        n = len(A)
        return np.array([np.median(np.delete(A[i], i)) if n > 1 else 0.0 for i in range(n)])

    out = {f"votes weighted by voter target similarity (beta={b})": by_feature("target_similarity", b)
           for b in (1, 3, 10)}
    out.update({f"votes weighted by voter declaration overlap (beta={b})": by_feature("declaration_overlap", b)
                for b in (3, 10)})
    out.update({f"votes weighted by voter reliability (gamma={c})": reliability(c) for c in (1, 2)})
    out.update({f"mean of the {k} strongest agreements": topk(k) for k in (3, 5)})
    out["median agreement"] = median
    return out


MEDOID_GRID = [(k, m, d) for k in (3, 4, 5, 6, 8) for m in (0.0, 0.2, 0.4) for d in (0.0, 0.05, 0.1)]


def medoid_study(groups: list[dict], grid=MEDOID_GRID) -> dict:
    """retrieval/backend/selection.consensus_medoid's settings (k, min agreement, margin) on the
    development targets' groups (``selector_data``): each setting's mean accuracy of the pick, the
    best on all targets, and nested leave-one-target-out (the setting chosen on the others, scored
    on the held-out one) against the rule, with a paired interval."""
    import numpy as np

    from retrieval.backend.selection import FEATURES, medoid_of_agreement

    ri = FEATURES.index("rule_rank")
    targets = list(dict.fromkeys(g["target"] for g in groups))
    gs = []
    for g in groups:
        if not g["ids"]:
            continue
        X, y, A = (np.asarray(g[k], dtype=float) for k in ("X", "y", "agreement"))
        gs.append({"target": g["target"], "y": y, "A": A,
                   "order": sorted(range(len(y)), key=lambda a: (X[a, ri], a))})

    def picks(cfg, ts) -> np.ndarray:
        k, m, d = cfg
        out = []
        for g in gs:
            if g["target"] in ts:
                top = g["order"][:k]
                out.append(g["y"][top[medoid_of_agreement(g["A"][np.ix_(top, top)], m, d)]])
        return np.array(out)

    rule = {t: np.array([g["y"][g["order"][0]] for g in gs if g["target"] == t]) for t in targets}
    per = {cfg: {t: picks(cfg, {t}) for t in targets} for cfg in grid}

    def gain(cfg, ts):
        return float(np.mean(np.concatenate([per[cfg][t] - rule[t] for t in ts])))

    best = max(grid, key=lambda c: (gain(c, targets), -grid.index(c)))
    nested, chosen = [], {}
    for t in targets:
        c = max(grid, key=lambda c: (gain(c, [u for u in targets if u != t]), -grid.index(c)))
        chosen[t] = list(c)
        nested.append(per[c][t] - rule[t])

    def label(c):
        return f"k={c[0]}, min_agreement={c[1]}, margin={c[2]}"
    return {"grid": {label(c): round(float(np.mean(np.concatenate(list(per[c].values())))), 4) for c in grid},
            "rule": {"mean": round(float(np.mean(np.concatenate(list(rule.values())))), 4),
                     "per_target": {t: round(float(v.mean()), 4) for t, v in rule.items()}},
            "best_in_sample": {"setting": label(best), "per_target": {t: round(float(v.mean()), 4)
                                                                     for t, v in per[best].items()},
                               "minus_rule": paired_difference(np.concatenate([per[best][t] - rule[t]
                                                                               for t in targets]))},
            "nested": {"chosen_per_fold": chosen, "minus_rule": paired_difference(np.concatenate(nested))}}


SELECTOR_CONFIGS = ([("pointwise", {"l2": l}) for l in (0.1, 1.0, 10.0, 100.0)]
                    + [("pairwise", {"l2": l}) for l in (0.1, 1.0, 10.0, 100.0)]
                    + [("listwise", {"l2": l, "temperature": t}) for t in (0.05, 0.2) for l in (1.0, 30.0)])


def selector_study(groups: list[dict], configs=SELECTOR_CONFIGS) -> dict:
    """Leave-one-development-target-out cross-validation of the selector fits against the
    hand-made rule, single features, the candidates' mean and the hindsight best. ``nested``
    also chooses the fit inside each outer fold (inner leave-one-target-out), so its mean is an
    honest estimate of the chosen selector; ``chosen`` is the fit plain CV prefers, refitted on
    every development target (the weights one would adopt)."""
    import numpy as np

    from retrieval.backend.selection import (
        FEATURES, TARGET_TIEBREAK, LinearSelector, fit_listwise, fit_pairwise, fit_pointwise, top1_accuracy,
    )

    gs = [dict(g, X=np.array(g["X"], dtype=float), y=np.array(g["y"], dtype=float)) for g in groups if g["ids"]]
    targets = list(dict.fromkeys(g["target"] for g in gs))
    fitters = {"pointwise": fit_pointwise, "pairwise": fit_pairwise, "listwise": fit_listwise}

    def fit(cfg, train):
        kind, kw = cfg
        return LinearSelector(fitters[kind](train, **kw))

    def label(cfg):
        kind, kw = cfg
        return kind + "(" + ", ".join(f"{k}={v:g}" for k, v in kw.items()) + ")"

    def loto(cfg, pool):
        """Held-out top-1 labels per target of ``pool``."""
        out = {}
        for t in sorted(set(g["target"] for g in pool)):
            sel = fit(cfg, [g for g in pool if g["target"] != t])
            out[t] = top1_accuracy(sel, [g for g in pool if g["target"] == t])
        return out

    def summarize(per_t: dict) -> dict:
        allv = [v for t in targets for v in per_t[t]]
        return {"mean": round(float(np.mean(allv)), 4),
                "per_target": {t: round(float(np.mean(per_t[t])), 4) for t in targets}}

    by_t = {t: [g for g in gs if g["target"] == t] for t in targets}
    res: dict = {"targets": targets, "n_functions": len(gs), "n_candidates": int(sum(len(g["y"]) for g in gs)),
                 "features": list(FEATURES), "fixed": {}, "cv": {}}
    fixed = {"consensus + 0.05 x target similarity (rule used)": LinearSelector.rule()}
    for k, f in enumerate(FEATURES):
        w = [0.0] * len(FEATURES)
        w[k] = -1.0 if f in ("rule_rank", "abs_log_length_ratio") else 1.0
        fixed[f"{f} only"] = LinearSelector(w)
    for name, sel in fixed.items():
        res["fixed"][name] = summarize({t: top1_accuracy(sel, by_t[t]) for t in targets})
    # other aggregations of the same MBR vote (need the agreement matrix, not a linear feature)
    ri, ti = FEATURES.index("rule_rank"), FEATURES.index("target_similarity")

    def pick(g, sc):
        return float(g["y"][min(range(len(sc)), key=lambda a: (-round(float(sc[a]), 12), g["X"][a, ri], a))])

    for name, fn in mbr_variants().items():
        res["fixed"][name] = summarize({t: [pick(g, fn(g) + TARGET_TIEBREAK * g["X"][:, ti]) for g in by_t[t]]
                                        for t in targets})
    res["fixed"]["mean over candidates"] = summarize({t: [float(g["y"].mean()) for g in by_t[t]] for t in targets})
    res["fixed"]["best with hindsight"] = summarize({t: [float(g["y"].max()) for g in by_t[t]] for t in targets})
    cv = {}
    for cfg in configs:
        cv[label(cfg)] = loto(cfg, gs)
        res["cv"][label(cfg)] = summarize(cv[label(cfg)])
    # nested: the fit chosen without the outer target, evaluated on it (needs two inner targets)
    nested, picked = {}, {}
    for t in (targets if len(targets) >= 3 else []):
        inner = [g for g in gs if g["target"] != t]
        scores = {}
        for cfg in configs:
            per = loto(cfg, inner)
            scores[label(cfg)] = (float(np.mean([v for vs in per.values() for v in vs])), cfg)
        best = max(scores, key=lambda k: (scores[k][0], k))
        picked[t] = best
        nested[t] = top1_accuracy(fit(scores[best][1], inner), by_t[t])
    res["nested"] = dict(summarize(nested), chosen_per_fold=picked) if nested else None
    if nested:
        rule = LinearSelector.rule()
        res["nested"]["minus_rule"] = paired_difference(
            np.array([a - b for t in targets for a, b in zip(nested[t], top1_accuracy(rule, by_t[t]))]))
    # the linear family's ceiling on these features: fitted and scored on the same (all) targets
    res["in_sample_ceiling"] = {
        label(c): round(float(np.mean(top1_accuracy(fit(c, gs), gs))), 4)
        for c in (("pointwise", {"l2": 1.0}), ("listwise", {"l2": 1.0, "temperature": 0.05}))}
    best = max(res["cv"], key=lambda k: (res["cv"][k]["mean"], k))
    cfg = next(c for c in configs if label(c) == best)
    sel = fit(cfg, gs)
    rule_mean = res["fixed"]["consensus + 0.05 x target similarity (rule used)"]["mean"]
    res["chosen"] = {"fit": best, "cv_mean": res["cv"][best]["mean"], "weights": dict(zip(FEATURES, sel.weights)),
                     "beats_rule_nested": bool(nested) and res["nested"]["mean"] > rule_mean, "rule_mean": rule_mean}
    return res
