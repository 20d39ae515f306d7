"""retrieval/backend/selection.py: the learned donor selector, its fits, its opt-in path in
BackendIndex.role_candidates and the --selector-study benchmark mode, on the toy targets."""
import json
import shutil

import numpy as np
import pytest

from _backend_support import TOY, indexed_toy_store
from retrieval.backend.selection import (
    FEATURES, LinearSelector, fit_listwise, fit_pairwise, fit_pointwise, load_selector, top1_accuracy,
)
from skills.store import Store


def _planted_groups(seed: int, n_groups: int = 120, k: str = "mappability"):
    """Groups whose best candidate is the one highest on feature ``k`` (plus noise) while the rule's
    features (consensus, target similarity) are unrelated to the label."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(n_groups):
        n = int(rng.integers(3, 7))
        X = rng.random((n, len(FEATURES)))
        X[:, FEATURES.index("rule_rank")] = np.argsort(np.argsort(-X[:, 0])) / (n - 1)
        y = X[:, FEATURES.index(k)] + 0.05 * rng.standard_normal(n)
        out.append({"target": f"T{g % 3}", "X": X, "y": y})
    return out


@pytest.mark.parametrize("fit", [fit_pointwise, fit_pairwise, fit_listwise])
def test_fits_recover_a_planted_signal(fit):
    train, test = _planted_groups(0), _planted_groups(1)
    sel = LinearSelector(fit(train, l2=1.0))
    best = float(np.mean([g["y"].max() for g in test]))
    learned = float(np.mean(top1_accuracy(sel, test)))
    rule = float(np.mean(top1_accuracy(LinearSelector.rule(), test)))
    assert learned > rule + 0.1
    assert learned >= best - 0.05
    assert int(np.argmax(np.abs(sel.weights))) == FEATURES.index("mappability")


def test_weights_round_trip_and_validation(tmp_path):
    p = tmp_path / "w.json"
    p.write_text(json.dumps({"features": ["target_similarity"], "weights": [-2.0], "provenance": {"source": "test"}}))
    sel = load_selector(p)
    assert sel.weights[FEATURES.index("target_similarity")] == -2.0
    assert sum(abs(w) for w in sel.weights) == 2.0  # features not named weigh 0
    assert LinearSelector.from_dict(sel.to_dict()).weights == sel.weights
    p.write_text(json.dumps({"features": ["nope"], "weights": [1.0]}))
    with pytest.raises(ValueError, match="nope"):
        load_selector(p)


@pytest.fixture(scope="module")
def toy_store(tmp_path_factory):
    dst = tmp_path_factory.mktemp("sel") / "store"
    shutil.copytree(indexed_toy_store(), dst)
    return dst


def _wren_inputs(st, idx):
    """Per Wren role: (consensus, adapted statements, mappability) of the other targets' versions,
    as prompts/backend/generate.candidates_with_adaptations computes them."""
    from prompts.backend.generate import AdaptCache
    from retrieval.backend.adapt import consensus_scores

    cache = AdaptCache(st)
    roles = idx.roles()
    out = {}
    for r in idx.rows:
        if r["target"] != "Wren" or len(roles[r["role"]] - {"Wren"}) < 2:
            continue
        stm, mapp = {}, {}
        for c in idx.role_rows(r["role"], ["Wren"]):
            a, s = cache.adapt(c, "Wren")
            stm[c["func_id"]], mapp[c["func_id"]] = s, a.mappability
        out[r["role"]] = (consensus_scores(stm), stm, mapp)
    return out


def test_role_candidates_with_a_selector(toy_store, tmp_path):
    from retrieval.backend.search import BackendIndex, SearchError

    st = Store(toy_store)
    idx = BackendIndex(st)
    inputs = _wren_inputs(st, idx)
    assert len(inputs) >= 10
    lark_first = tmp_path / "lark.json"
    lark_first.write_text(json.dumps({"features": ["target_similarity"], "weights": [1.0]}))
    kite_first = tmp_path / "kite.json"
    kite_first.write_text(json.dumps({"features": ["target_similarity"], "weights": [-1.0]}))
    for role, (cons, stm, mapp) in inputs.items():
        default = idx.role_candidates("Wren", role, k=5, consensus=cons, mappability=mapp)
        as_rule = idx.role_candidates("Wren", role, k=5, consensus=cons, mappability=mapp, statements=stm,
                                      selector=LinearSelector.rule())
        # the rule expressed as weights ranks exactly as the built-in rule
        assert [h.func_id for h in as_rule] == [h.func_id for h in default], role
        # stored weights decide: Lark is Wren's most similar target, Kite the least
        for path, first in ((lark_first, "Lark"), (kite_first, "Kite")):
            sel = load_selector(path)
            a = idx.role_candidates("Wren", role, k=5, consensus=cons, statements=stm, selector=sel)
            b = idx.role_candidates("Wren", role, k=5, consensus=cons, statements=stm, selector=sel)
            assert a[0].target == first and [h.func_id for h in a] == [h.func_id for h in b]
    with pytest.raises(SearchError, match="statements"):
        idx.role_candidates("Wren", role, consensus=cons, selector=LinearSelector.rule())


def test_generation_features_match_the_training_features(toy_store):
    """The features role_candidates ranks on are the ones selector_data collects for training."""
    from eval.backend_studies import selector_data
    from retrieval.backend.search import BackendIndex

    st = Store(toy_store)
    idx = BackendIndex(st)
    inputs = _wren_inputs(st, idx)
    w = [0.0] * len(FEATURES)
    for f, v in (("consensus_precision", 1.0), ("declaration_overlap", -2.0), ("log_length_ratio", 0.5),
                 ("typicality", 0.7), ("log_declaration_ratio", 0.3)):
        w[FEATURES.index(f)] = v
    sel = LinearSelector(w)
    groups = selector_data(st, idx, ["Wren"])
    assert {g["func_id"].split(":")[0] for g in groups} == {"Wren"} and len(groups) >= len(inputs)
    by_role = {idx.rows[idx.pos[g["func_id"]]]["role"]: g for g in groups}
    for role, (cons, stm, mapp) in inputs.items():
        g = by_role[role]
        hits = idx.role_candidates("Wren", role, k=5, consensus=cons, mappability=mapp, statements=stm, selector=sel)
        assert [h.func_id for h in hits] == [g["ids"][a] for a in sel.order(g["X"])], role
        assert g["y"] and all(0.0 <= y <= 1.0 for y in g["y"])


def test_selector_study_cli_on_toy(tmp_path, capsys):
    from eval.bench_backend import main

    store = tmp_path / "store"
    shutil.copytree(indexed_toy_store(), store)
    out = tmp_path / "study.json"
    out.write_text(json.dumps({"earlier": 1}))
    args = ["--llvm", str(TOY), "--store", str(store), "--targets", "Kite", "--selector-study", "Wren,Lark",
            "--epochs", "2", "--out", str(out)]
    assert main(args) == 0
    doc = json.loads(out.read_text())
    assert doc["earlier"] == 1  # other studies in the file are kept
    s = doc["learned_selector"]
    assert s["targets"] == ["Wren", "Lark"] and s["n_functions"] >= 20
    best = s["fixed"]["best with hindsight"]["mean"]
    assert all(v["mean"] <= best + 1e-9 for sec in ("fixed", "cv") for v in s[sec].values())
    rule = s["fixed"]["consensus + 0.05 x target similarity (rule used)"]["mean"]
    assert s["chosen"]["rule_mean"] == rule and s["nested"] is None  # two targets: no inner folds
    assert s["chosen"]["beats_rule_nested"] is False
    chosen = LinearSelector.from_dict(s["chosen"])  # the recorded fit loads as a selector
    assert chosen.weights == [s["chosen"]["weights"][f] for f in FEATURES]
    ho = s["held_out_evaluation"]["Kite"]
    assert ho["n_functions"] >= 10 and ho["rule"] <= ho["best with hindsight"]
    # toy roles have at most two donors: the medoid never moves rank 1, whatever the setting
    md = s["consensus_medoid"]
    assert md["rule"]["mean"] == rule and set(md["grid"].values()) == {rule}
    assert md["best_in_sample"]["minus_rule"]["mean"] == 0.0
    capsys.readouterr()
    assert main(args) == 0  # the collected data is reused and the fits are deterministic
    assert "reused" in capsys.readouterr().err
    assert json.loads(out.read_text())["learned_selector"]["cv"] == s["cv"]
    base = args[:-6] + ["--epochs", "2", "--out", str(out)]
    assert main(base + ["--selector-study", "Wren,Kite"]) == 2  # overlaps --targets
    assert main(base + ["--selector-study", "Wren"]) == 2
