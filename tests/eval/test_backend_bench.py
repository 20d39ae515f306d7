"""eval/bench_backend.py: its metrics, and a full run on the toy targets."""
import json
import shutil

import pytest

from _backend_support import TOY, copy_toy, gate_skip_reason, indexed_toy_store
from eval.bench_backend import load_result, main, statement_accuracy, summarize_ranks, token_edit_similarity


def test_statement_accuracy_aligned_and_bag():
    ref = ["a ;", "b ;", "c ;", "d ;"]
    assert statement_accuracy(ref, ref) == (1.0, 1.0)
    assert statement_accuracy(["d ;", "c ;", "b ;", "a ;"], ref) == (0.25, 1.0)  # order matters only when aligned
    assert statement_accuracy(["a ;", "x ;", "c ;"], ref) == (0.5, 0.5)
    assert statement_accuracy([], ref) == (0.0, 0.0)
    assert statement_accuracy(["a ;", "a ;"], ["a ;"]) == (1.0, 1.0)


def test_edit_similarity_is_token_levenshtein():
    assert token_edit_similarity("a b c d", "a b c d") == 1.0
    assert token_edit_similarity("a b c d", "a x c d") == 0.75
    assert token_edit_similarity("", "a") == 0.0


def test_rank_summary():
    s = summarize_ranks([1, 2, None, 6])
    assert s == {"n": 4, "recall@1": 0.25, "recall@5": 0.5, "mrr": round((1 + 0.5 + 1 / 6) / 4, 4)}


def test_bench_runs_on_toy_targets(tmp_path, capsys):
    store = tmp_path / "store"
    shutil.copytree(indexed_toy_store(), store)
    out = tmp_path / "res.json"
    args = ["--llvm", str(TOY), "--store", str(store), "--targets", "Wren", "--fork-flow-source", "Kite",
            "--epochs", "2", "--out", str(out), "--json"]
    if gate_skip_reason() is not None:
        args.append("--no-gate")
    rc = main(args)
    summary = json.loads(capsys.readouterr().out)
    assert "functions" not in json.loads(out.read_text())["targets"]["Wren"]  # the rows: beside it, gzip
    full = load_result(out)
    t = full["targets"]["Wren"]
    # toy sizes: 18 Wren functions, all roles shared by Lark and Kite except the ones Kite lacks
    assert t["n_functions_evaluated"] >= 10
    assert set(t["retrieval"]) == {"bm25", "text", "graph", "fused", "fused_function_level"}
    assert t["retrieval"]["fused"]["recall@1"] >= 0.85
    fa, ff = t["generation"]["fork_adapt"], t["generation"]["fork_flow"]
    assert fa["statement_accuracy_aligned"] > ff["statement_accuracy_aligned"]
    assert fa["statement_accuracy_bag"] >= fa["statement_accuracy_aligned"]
    assert t["similar_targets"][0]["target"] == "Lark"
    if gate_skip_reason() is None:
        assert fa["compile_checked"] == t["n_functions_evaluated"]
        assert fa["compile_pass_rate"] >= ff["compile_pass_rate"]
        # gate-guided repair only ever adds passes, and never touches fork-flow
        assert fa["compile_pass_rate"] >= fa["compile_pass_rate_without_repair"]
        assert fa["gate_repair"]["repaired"] <= fa["gate_repair"]["attempted"] and ff["gate_repair"]["attempted"] == 0
    assert full["settings"]["fork_adapt_donors"] == 6 and full["settings"]["gate_repair_rounds"] == 3
    assert rc == (0 if summary["passed"] else 1)
    assert "functions" not in summary["targets"]["Wren"] and len(t["functions"]) == t["n_functions_evaluated"]
    assert "code" not in t["functions"][0]["fork_adapt"]
    codes = json.loads(open(full["generated_code_file"]).read())["Wren"]
    assert set(codes) == {e["func_id"] for e in t["functions"]}
    assert full["machine"]["cores"] >= 1 and full["seconds"]["total_s"] > 0


def test_bench_reports_one_donor_ceilings(tmp_path, capsys):
    store = tmp_path / "store"
    shutil.copytree(indexed_toy_store(), store)
    out = tmp_path / "res.json"
    main(["--llvm", str(TOY), "--store", str(store), "--targets", "Wren", "--fork-flow-source", "Kite",
          "--epochs", "2", "--out", str(out), "--json", "--no-gate"])
    summary = json.loads(capsys.readouterr().out)
    t = load_result(out)["targets"]["Wren"]
    fa, ff = t["generation"]["fork_adapt"], t["generation"]["fork_flow"]
    ce = fa["ceilings"]
    assert ce == summary["targets"]["Wren"]["generation"]["fork_adapt"]["ceilings"]
    assert ce["k"] == 5 and set(ce["definitions"]) == {"oracle_donor", "oracle_mapping", "oracle_donor_and_mapping"}
    v = {k: ce[k]["statement_accuracy_aligned"] for k in ce["definitions"]}
    assert all(0.0 <= x <= 1.0 for x in v.values())
    # each ceiling includes fork-and-adapt's own output; the combined one includes both others
    assert v["oracle_donor"] >= fa["statement_accuracy_aligned"]
    assert v["oracle_mapping"] >= fa["statement_accuracy_aligned"]
    assert v["oracle_donor_and_mapping"] >= max(v["oracle_donor"], v["oracle_mapping"])
    for k, x in v.items():
        assert ce[k]["ratio_to_fork_flow"] == round(x / ff["statement_accuracy_aligned"], 3)
        assert ce[k]["reaches_target"] == (x / ff["statement_accuracy_aligned"] >= 2.0)
    for e in t["functions"]:  # per function too, and the top donor is fork-and-adapt's pick
        o = e["fork_adapt"]["oracle"]
        assert 1.0 >= o["donor_and_mapping"] >= max(o["donor"], o["mapping"])
        assert min(o["donor"], o["mapping"]) >= e["fork_adapt"]["aligned"] >= 0.0
        assert o["donor_rank"] > 1 or (o["donor_source"] == e["fork_adapt"]["source"]
                                        and o["donor"] == e["fork_adapt"]["aligned"])
    assert "ceilings" not in t["generation"]  # generation's keys stay the strategies


def test_bench_with_skills_on_toy_targets(tmp_path, capsys):
    if gate_skip_reason() is not None:
        pytest.skip(gate_skip_reason())
    store = tmp_path / "store"
    shutil.copytree(indexed_toy_store(), store)
    out = tmp_path / "lineages.json"
    rc = main(["--llvm", str(TOY), "--store", str(store), "--targets", "Kite", "--fork-flow-source", "Wren",
               "--epochs", "2", "--skills", "--out", str(out), "--json"])
    summary = json.loads(capsys.readouterr().out)
    full = load_result(out)
    t = full["targets"]["Kite"]
    sk, fa = t["generation"]["skills"], t["generation"]["fork_adapt"]
    cov = sk["coverage"]
    # every evaluated function is either instantiated from a lineage or falls back to fork-and-adapt
    assert cov["with_lineage"] + cov["fallback_no_lineage"] + cov["fallback_other"] == t["n_functions_evaluated"]
    assert full["mining"]["lineages"] >= 1 and cov["with_lineage"] >= 1
    assert t["lineages"]["n_lineages"] >= 1 and t["lineages"]["steps"] > 0
    # Kite's getRelocType: Lark's arms are replaced by one arm per Kite fixup
    reloc = next(e for e in t["functions"] if e["role"] == "ELFObjectWriter::getRelocType")
    assert reloc["skills"]["lineage"] and reloc["skills"]["aligned"] > reloc["fork_adapt"]["aligned"]
    assert any(x["instances"] >= 3 for x in reloc["skills"]["expansions"])
    for e in t["functions"]:  # a function without a lineage is fork-and-adapt's, to the statement
        if not e["skills"]["lineage"]:
            assert e["skills"]["aligned"] == e["fork_adapt"]["aligned"]
    checks = t["checks"]
    assert {"skills_vs_fork_adapt_statement_accuracy", "skills_compile_pass_rate_not_lower"} <= set(checks)
    assert sk["compile_checked"] == fa["compile_checked"] == t["n_functions_evaluated"]
    assert rc == (0 if summary["passed"] else 1)


def test_bench_writes_nothing_without_out(tmp_path, capsys, monkeypatch):
    store = tmp_path / "store"
    shutil.copytree(indexed_toy_store(), store)
    monkeypatch.chdir(tmp_path)
    results = TOY.parent.parent.parent / "eval" / "results"
    before = sorted(p.name for p in results.iterdir())
    main(["--llvm", str(TOY), "--store", str(store), "--targets", "Wren", "--fork-flow-source", "Kite",
          "--epochs", "2", "--no-gate"])
    text = capsys.readouterr().out
    assert "Wren:" in text and "95% CI: fork-adapt [" in text
    assert sorted(p.name for p in results.iterdir()) == before and not list(tmp_path.glob("*.json*"))


def test_bench_unseen_targets_from_another_tree(tmp_path, capsys):
    """--queries: the held-out targets come from a 'newer' tree (the toy marked LLVM 19, Wren's
    ELF writer renamed WrenObjectWriter as Xtensa's is), the donors from the toy; each target's
    gate follows its own tree, a TableGen failure stays that target's, a host file that fails
    unmodified under the newer headers is an environment verdict; intervals come with every figure."""
    newer = copy_toy(tmp_path / "llvm-19")
    (newer / "fetch.json").write_text(json.dumps({"version": "19.1.7"}))
    ow = newer / "lib" / "Target" / "Wren" / "MCTargetDesc" / "WrenELFObjectWriter.cpp"
    ow.write_text(ow.read_text().replace("WrenELFObjectWriter", "WrenObjectWriter")
                  .replace("createWrenObjectWriter", "createWrenELFObjectWriter"))
    td = newer / "lib" / "Target" / "Kite" / "Kite.td"
    td.write_text(td.read_text() + "\ndef Broken : RegisterClass<\"Kite\", [i8], 8, (add NoSuchReg)>;\n")
    store = tmp_path / "store"
    shutil.copytree(indexed_toy_store(), store)
    out = tmp_path / "unseen.json"
    args = ["--llvm", str(TOY), "--queries", str(newer), "--store", str(store), "--targets", "Wren,Kite",
            "--fork-flow-source", "Lark", "--epochs", "2", "--resamples", "300", "--out", str(out), "--json"]
    if gate_skip_reason(19) is not None:
        args.append("--no-gate")
    rc = main(args)
    summary = json.loads(capsys.readouterr().out)
    full = load_result(out)
    assert full["corpora"]["queries"]["version"] == "19.1.7" and full["corpora"]["index"]["version"] is None
    assert full["index"]["donor_targets"] == ["Lark"]
    from skills.store import Store

    roots = {r["target"]: r["root"] for r in Store(store).query("SELECT target, root FROM targets")}
    assert roots["Wren"].startswith(str(newer)) and roots["Kite"].startswith(str(newer))
    assert roots["Lark"].startswith(str(TOY))
    wren = full["targets"]["Wren"]
    assert any(e["role"] == "ELFObjectWriter::getRelocType" for e in wren["functions"])  # matched despite its name
    for T in ("Wren", "Kite"):
        ci = full["targets"][T]["ci95"]
        for name in ("recall@1/fused", "fork_adapt_aligned", "fork_flow_aligned", "aligned_ratio"):
            lo, hi = ci[name]["ci95"]
            assert lo <= ci[name]["value"] <= hi
        assert ci["recall@1/fused"]["value"] == full["targets"][T]["retrieval"]["fused"]["recall@1"]
    ov = full["overall"]["figures"]
    assert set(ov["aligned_ratio"]["targets"]) == {"Wren", "Kite"}
    assert ov["fork_adapt_aligned"]["value"] == round((wren["ci95"]["fork_adapt_aligned"]["value"]
                                                      + full["targets"]["Kite"]["ci95"]["fork_adapt_aligned"]["value"]) / 2, 4)
    assert set(full["overall"]["checks"]) == {"mean_fork_adapt_vs_fork_flow_statement_accuracy",
                                              "mean_compile_pass_ratio", "mean_fused_recall@1"}
    assert rc == (0 if summary["passed"] else 1)
    if gate_skip_reason(19) is None:
        kite = full["targets"]["Kite"]
        assert kite["gate"] is None and kite["gate_error"]["kind"] == "TableGenError"
        assert "NoSuchReg" in kite["gate_error"]["error"] + kite["gate_error"]["details"]
        g = wren["gate"]
        assert g["toolchain"] == "clang-19" and g["llvm_version"] == "19.1.7"
        env = {e["path"] for e in g["environment_files"]}
        assert "WrenRegisterInfo.cpp" in env  # eliminateFrameIndex's return type drifted in 19
        for e in wren["functions"]:
            v = e["fork_adapt"]["gate_verdict"]
            assert (v == "environment") == (e["path"] in env)
            assert ("gate" in e["fork_adapt"]) == (v != "environment")
        fa = wren["generation"]["fork_adapt"]
        assert fa["compile_environment"] == sum(1 for e in wren["functions"] if e["path"] in env) > 0
        assert fa["compile_judged"] == len(wren["functions"]) - fa["compile_environment"]


def test_bench_bad_input(tmp_path, capsys):
    store = tmp_path / "store"
    assert main(["--llvm", str(TOY), "--store", str(store), "--targets", "Nope", "--no-gate"]) == 2
    assert "Nope" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["--llvm", str(empty), "--store", str(store), "--no-gate"]) == 2


def test_fusion_study_on_toy(tmp_path, capsys):
    """--fusion-study: donor targets of the index evaluated with one donor, k = 3 and the configured
    k = 6 side by side, each gated (and repaired) like fork-and-adapt, with intervals."""
    store = tmp_path / "store"
    shutil.copytree(indexed_toy_store(), store)
    out = tmp_path / "fusion.json"
    args = ["--llvm", str(TOY), "--store", str(store), "--targets", "Kite", "--fusion-study", "Wren",
            "--fork-flow-source", "Lark", "--epochs", "2", "--resamples", "200", "--out", str(out), "--json"]
    rc = main(args + ([] if gate_skip_reason() is None else ["--no-gate"]))
    assert rc in (0, 1)
    res = load_result(out)
    t = res["targets"]["Wren"]
    assert list(res["targets"]) == ["Wren"] and res["settings"]["fusion_study"]["variants"] == {
        "fork_adapt": 6, "one_donor": 1, "fused_k3": 3}
    assert set(t["generation"]) == {"fork_adapt", "fork_flow", "one_donor", "fused_k3"}
    assert {"one_donor_aligned", "one_donor_aligned_ratio", "fused_k3_aligned"} <= set(t["ci95"])
    # Kite is held out: never a donor while Wren is evaluated
    assert all(not e["fork_adapt"]["source"].startswith("Kite") for e in t["functions"])
    assert main(["--llvm", str(TOY), "--store", str(store), "--targets", "Kite", "--fusion-study", "Nope",
                 "--no-gate", "--epochs", "2"]) == 2
    assert main(["--llvm", str(TOY), "--store", str(store), "--fuse-donors", "0", "--no-gate"]) == 2


def test_selection_study_on_toy(tmp_path, capsys):
    store = tmp_path / "store"
    shutil.copytree(indexed_toy_store(), store)
    out = tmp_path / "study.json"
    rc = main(["--llvm", str(TOY), "--store", str(store), "--targets", "Kite", "--selection-study", "Wren",
               "--epochs", "2", "--out", str(out), "--fork-flow-source", "Lark"])
    assert rc == 0
    study = json.loads(out.read_text())
    acc = study["mean_aligned_statement_accuracy"]
    assert study["targets"] == ["Wren"] and study["n_functions"] >= 10
    assert acc["best with hindsight"] >= max(v for k, v in acc.items() if k != "best with hindsight")
    assert rc == 0 and main(["--llvm", str(TOY), "--store", str(store), "--targets", "Kite",
                             "--selection-study", "Nope", "--epochs", "2", "--out", str(out)]) == 2
