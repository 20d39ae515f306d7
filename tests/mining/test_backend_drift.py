"""API drift rules learned from the donor targets' two LLVM versions (mining/backend/drift.py) and
their use for a target of a newer tree (prompts/backend/generate.drift_rules): real tree-sitter
parsing, a real store."""
import json
import shutil

from _backend_support import TOY
from mining.backend.drift import (DriftRule, DriftRules, apply_rules, changes, learn_rules, rules_from_pairs,
                                  statement_pairs, structural_changes, structural_rules_from_pairs)

OLD = {
    "Kite": ("unsigned kiteA(SDValue InFlag) { return use(InFlag); }\n"
             "unsigned kiteB(SDValue Chain, SDValue InFlag) { Chain = glue(Chain, InFlag); return 0; }\n"
             "bool kiteC(const MCSubtargetInfo &STI) { return STI.getFeatureBits()[Kite::FeatureX]; }\n"),
    "Lark": ("unsigned larkA(SDValue InFlag) { return use(InFlag); }\n"
             "bool larkC(const MCSubtargetInfo &STI) { return STI.getFeatureBits()[Lark::FeatureX]; }\n"
             "bool larkD(const MCSubtargetInfo &STI) { return STI.getFeatureBits()[Lark::FeatureY]; }\n"),
    # the held-out query target: its own change must never become a rule
    "Wren": ("int wrenA(Optional<int> V) { Optional<int> W = V; return 0; }\n"
             "int wrenB(Optional<int> V) { Optional<int> W = V; return 1; }\n"
             "int wrenC(Optional<int> V) { Optional<int> W = V; return 2; }\n"),
}


def _new(src: str) -> str:
    return (src.replace("InFlag", "InGlue").replace("Optional<int>", "std::optional<int>")
            .replace("getFeatureBits()[Kite::FeatureX]", "hasFeature(Kite::FeatureX)")
            .replace("getFeatureBits()[Lark::FeatureX]", "hasFeature(Lark::FeatureX)")
            .replace("getFeatureBits()[Lark::FeatureY]", "hasFeature(Lark::FeatureY)"))


def _trees(tmp_path):
    old, new = tmp_path / "llvm-15", tmp_path / "llvm-19"
    for root, version, edit in ((old, "15.0.6", lambda s: s), (new, "19.1.7", _new)):
        shutil.copytree(TOY, root)
        (root / "fetch.json").write_text(json.dumps({"version": version}))
        for T, src in OLD.items():
            (root / "lib" / "Target" / T / f"{T}Drift.cpp").write_text("namespace llvm {\n" + edit(src) + "}\n")
    return old, new


def test_changes_are_short_api_substitutions():
    a = ["SDValue Glue = InFlag ;", "int N = 3 ;"]
    b = ["SDValue Glue = InGlue ;", "unsigned N = 3 ;"]
    # a stretch of C++ keywords/builtin types alone carries no API
    assert changes(a, b) == {(("InFlag",), ("InGlue",))}


def test_rules_recur_and_are_verified_statement_by_statement(tmp_path):
    old, new = _trees(tmp_path)
    rules = learn_rules(old / "lib" / "Target", new / "lib" / "Target", ["Kite", "Lark"])
    got = {(" ".join(r.old), " ".join(r.new)): r for r in rules.rules}
    # three functions of two targets; every statement with InFlag became the rewritten one
    assert ("InFlag", "InGlue") in got and got[("InFlag", "InGlue")].functions == 3
    assert got[("InFlag", "InGlue")].targets == ["Kite", "Lark"]
    # getFeatureBits()[F] -> hasFeature(F): the token diff sees two stretches, neither alone
    # rewrites a statement into its new version, so no partial rule
    assert not any("getFeatureBits" in k[0] for k in got)
    # Wren was not passed: its Optional -> std::optional is no rule
    assert not any("Optional" in k[0] for k in got)
    assert rules.source["targets"] == ["Kite", "Lark"]
    # the same change in one target only: too few targets
    assert not learn_rules(old / "lib" / "Target", new / "lib" / "Target", ["Kite"]).rules
    # a change made in fewer than half of the functions where the old tokens occur: no rule
    pairs = {"A": [(["x = InFlag ;"], ["x = InGlue ;"]), (["y = InFlag ;"], ["y = InFlag ;"]),
                   (["z = InFlag ;"], ["z = InFlag ;"])],
             "B": [(["w = InFlag ;"], ["w = InGlue ;"]), (["v = InFlag ;"], ["v = InFlag ;"])]}
    assert rules_from_pairs(pairs) == []


def test_apply_rules_rewrites_tokens_not_comments_strings_or_qualified_tails():
    rules = DriftRules([DriftRule(("Optional",), ("std", "::", "optional"), 5, ["A", "B"], 0.8),
                        DriftRule(("InFlag",), ("InGlue",), 5, ["A", "B"], 1.0),
                        DriftRule(("MatchOperand_Success",), ("ParseStatus", "::", "Success"), 5, ["A", "B"], 0.9)])
    code = ('Optional<unsigned> f(SDValue InFlag) {\n  // InFlag stays in a comment\n'
            '  report("InFlag");\n  Foo::InFlag = InFlag;\n  return MatchOperand_Success;\n}')
    out, used = apply_rules(code, rules)
    assert out == ('std::optional<unsigned> f(SDValue InGlue) {\n  // InFlag stays in a comment\n'
                   '  report("InFlag");\n  Foo::InFlag = InGlue;\n  return ParseStatus::Success;\n}')
    assert {(u["old"], u["new"], u["count"]) for u in used} == {
        ("Optional", "std :: optional", 1), ("InFlag", "InGlue", 2),
        ("MatchOperand_Success", "ParseStatus :: Success", 1)}
    assert apply_rules(code, None) == (code, [])


def test_drift_rules_for_a_target_of_a_newer_tree(tmp_path):
    from prompts.backend.generate import drift_rules
    from retrieval.backend.index import ingest_targets
    from skills.store import Store

    old, new = _trees(tmp_path)
    st = Store(tmp_path / "store")
    ingest_targets(old / "lib" / "Target", st, targets=["Kite", "Lark"])
    ingest_targets(new / "lib" / "Target", st, targets=["Wren"])
    rules = drift_rules(st, "Wren")
    assert rules is not None and rules.source["targets"] == ["Kite", "Lark"]  # Wren's own code never read
    assert [(" ".join(r.old), " ".join(r.new)) for r in rules.rules] == [("InFlag", "InGlue")]
    # the structural change of Kite's and Lark's three functions, with the feature as a hole
    assert [(" ".join(r.old), " ".join(r.new)) for r in rules.structural] == [
        ("getFeatureBits ( ) [ $1 ]", "hasFeature ( $1 )")]
    # a donor of the same tree as the index: no drift
    assert drift_rules(st, "Kite") is None
    # cached in the store: the second call reads the file
    cached = list((st.cache_dir / "backend-drift").glob("*.json"))
    assert len(cached) == 1 and drift_rules(st, "Wren").to_dict() == rules.to_dict()


def test_structural_changes_abstract_operands_into_holes():
    a = ["if ( STI . getFeatureBits ( ) [ Kite :: FeatureX ] ) ;", "int N = 3 ;"]
    b = ["if ( STI . hasFeature ( Kite :: FeatureX ) ) ;", "int N = 3 ;"]
    got = structural_changes(a, b)
    # the unchanged operand between the two changed stretches is a hole; also tried with context
    assert (("getFeatureBits", "(", ")", "[", "$1", "]"), ("hasFeature", "(", "$1", ")")) in got
    assert ((".", "getFeatureBits", "(", ")", "[", "$1", "]"), (".", "hasFeature", "(", "$1", ")")) in got
    # a hole first on the old side is bound by nothing before it: one token of context
    got = structural_changes(["if ( Res != MatchOperand_Success )"], ["if ( ! Res . isSuccess ( ) )"])
    assert (("(", "$1", "!=", "MatchOperand_Success", ")"), ("(", "!", "$1", ".", "isSuccess", "(", ")", ")")) in got
    assert not any(o[0] == "$1" for o, _ in got)
    # one name for another with context is a token rule's business (mostly a local's rename)
    assert structural_changes(["SDValue Flag ;"], ["SDValue Glue ;"]) == set()
    # ... but a qualified name is no local, and the token rules never rewrite one
    assert (("::", "FLT_ROUNDS_"), ("::", "GET_ROUNDING")) in structural_changes(
        ["case ISD :: FLT_ROUNDS_ :"], ["case ISD :: GET_ROUNDING :"])


def test_statement_pairs_take_the_counterpart_not_any_statement():
    old = ["if ( X )", "return MatchOperand_ParseFail ;", "return MatchOperand_Success ;"]
    new = ["if ( X )", "return ParseStatus :: Failure ;", "return ParseStatus :: Success ;"]
    assert statement_pairs(old, new) == [("if ( X )", "if ( X )"),
                                         ("return MatchOperand_ParseFail ;", "return ParseStatus :: Failure ;"),
                                         ("return MatchOperand_Success ;", "return ParseStatus :: Success ;")]
    # deleted statements have none
    assert statement_pairs(["a ( ) ;", "b ( ) ;"], ["a ( ) ;"]) == [("a ( ) ;", "a ( ) ;"), ("b ( ) ;", None)]


def test_structural_rules_recur_verified_against_the_counterpart():
    fb = [(["return STI . getFeatureBits ( ) [ A :: F1 ] ;"], ["return STI . hasFeature ( A :: F1 ) ;"]),
          (["bool B = getFeatureBits ( ) [ A :: F2 ] ;"], ["bool B = hasFeature ( A :: F2 ) ;"])]
    parse = [(["if ( X )", "return MatchOperand_ParseFail ;", "return MatchOperand_Success ;"],
              ["if ( X )", "return ParseStatus :: Failure ;", "return ParseStatus :: Success ;"])]
    rules = structural_rules_from_pairs({"A": fb + parse * 2, "B": fb[:1] + parse})
    got = {(" ".join(r.old), " ".join(r.new)): r for r in rules}
    assert got[("getFeatureBits ( ) [ $1 ]", "hasFeature ( $1 )")].functions == 3
    assert got[("getFeatureBits ( ) [ $1 ]", "hasFeature ( $1 )")].targets == ["A", "B"]
    # a name changed with its context (the bare substitution is the token rules'); never into the
    # function's other ``return ParseStatus :: Success ;``
    assert ("return MatchOperand_ParseFail", "return ParseStatus :: Failure") in got
    assert not any(n.endswith("Success") and "ParseFail" in o for o, n in got)
    # a token rule doing the same already makes the rule with context redundant
    plain = [DriftRule(("MatchOperand_ParseFail",), ("ParseStatus", "::", "Failure"), 3, ["A", "B"], 1.0)]
    assert ("return MatchOperand_ParseFail", "return ParseStatus :: Failure") not in {
        (" ".join(r.old), " ".join(r.new)) for r in structural_rules_from_pairs({"A": parse * 2, "B": parse}, plain)}
    # after ``::`` the token rule does not apply, so the rule with that context stays
    rounding = [(["case ISD :: FLT_ROUNDS_ :"], ["case ISD :: GET_ROUNDING :"])]
    plain = [DriftRule(("FLT_ROUNDS_",), ("GET_ROUNDING",), 3, ["A", "B"], 1.0)]
    assert (":: FLT_ROUNDS_", ":: GET_ROUNDING") in {
        (" ".join(r.old), " ".join(r.new)) for r in structural_rules_from_pairs({"A": rounding * 2, "B": rounding}, plain)}
    # kept in fewer than half of the old statements: no rule
    kept = [(["bool C = getFeatureBits ( ) [ A :: F3 ] ;"], ["bool C = getFeatureBits ( ) [ A :: F3 ] ;"])]
    assert not structural_rules_from_pairs({"A": fb + kept * 3, "B": fb[:1] + kept * 3})


def test_apply_structural_rules_binds_operands_and_leaves_the_rest_alone():
    rules = DriftRules([DriftRule(("InFlag",), ("InGlue",), 5, ["A", "B"], 1.0)], {}, [
        DriftRule(tuple("getFeatureBits ( ) [ $1 ]".split()), tuple("hasFeature ( $1 )".split()), 9, ["A", "B"], 0.8),
        DriftRule(tuple("( $1 != MatchOperand_Success )".split()), tuple("( ! $1 . isSuccess ( ) )".split()),
                  9, ["A", "B"], 0.8),
        DriftRule(tuple("Register :: isVirtualRegister ( $1 )".split()), tuple("$1 . isVirtual ( )".split()),
                  9, ["A", "B"], 0.8),
        DriftRule(("::", "FLT_ROUNDS_"), ("::", "GET_ROUNDING"), 9, ["A", "B"], 0.8)])
    code = ('bool f(SDValue InFlag) {\n'
            '  // STI.getFeatureBits()[A::F] stays in a comment\n'
            '  if (STI.getFeatureBits()[Kite::FeatureX] && Register::isVirtualRegister(MO.getReg()))\n'
            '    report("getFeatureBits()[X]");\n'
            '  if (parseOperand(Operands, Name) != MatchOperand_Success) return use(InFlag);\n'
            '  const FeatureBitset &Bits = STI.getFeatureBits();\n'
            '  bool B = STI.getFeatureBits()[Idx++];\n'
            '  Ops.push_back(ISD::FLT_ROUNDS_);\n'
            '  return (Ok && Res != MatchOperand_Success);\n}')
    out, used = apply_rules(code, rules)
    assert out == ('bool f(SDValue InGlue) {\n'
                   '  // STI.getFeatureBits()[A::F] stays in a comment\n'
                   '  if (STI.hasFeature(Kite::FeatureX) && MO.getReg().isVirtual())\n'
                   '    report("getFeatureBits()[X]");\n'
                   '  if (!parseOperand(Operands, Name).isSuccess()) return use(InGlue);\n'
                   # no subscript, a hole that is no operand (``Idx++``, ``Ok && Res``): left alone
                   '  const FeatureBitset &Bits = STI.getFeatureBits();\n'
                   '  bool B = STI.getFeatureBits()[Idx++];\n'
                   '  Ops.push_back(ISD::GET_ROUNDING);\n'
                   '  return (Ok && Res != MatchOperand_Success);\n}')
    assert {(u["old"], u["count"]) for u in used} == {
        ("getFeatureBits ( ) [ $1 ]", 1), ("( $1 != MatchOperand_Success )", 1),
        ("Register :: isVirtualRegister ( $1 )", 1), (":: FLT_ROUNDS_", 1), ("InFlag", 2)}
    # the cached form keeps them
    assert DriftRules.from_dict(rules.to_dict()).structural == rules.structural
