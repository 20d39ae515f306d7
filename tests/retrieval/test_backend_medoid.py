"""retrieval/backend/selection.consensus_medoid on small C++ bodies parsed as the ingest parses them:
the body most of the rule's top donors share goes first; ties, disagreement and fewer than three
candidates leave the rule's first."""
from corpora.backends.tree import parse_definition
from retrieval.backend.selection import MEDOID_K, consensus_medoid

# a lone variant (rank 1 under the rule) and the consensus most other donors write
LONE = """unsigned LarkELFObjectWriter::getRelocType(MCContext &Ctx, const MCValue &Target,
                                          const MCFixup &Fixup, bool IsPCRel) const {
  unsigned Kind = Fixup.getTargetKind();
  if (Kind >= FirstLiteralRelocationKind)
    return Kind - FirstLiteralRelocationKind;
  llvm_unreachable("invalid fixup kind!");
}"""
SHARED = """unsigned LarkELFObjectWriter::getRelocType(MCContext &Ctx, const MCValue &Target,
                                          const MCFixup &Fixup, bool IsPCRel) const {
  switch (Fixup.getTargetKind()) {
  case FK_Data_4:
    return ELF::R_LARK_32;
  case Lark::fixup_lark_call:
    return ELF::R_LARK_CALL;
  }
  return ELF::R_LARK_NONE;
}"""
# the shared body with one statement changed: still agrees with the others on most statements
SHARED_VARIANT = SHARED.replace("return ELF::R_LARK_NONE;", 'llvm_unreachable("bad fixup");')
OTHER = """void LarkInstPrinter::printOperand(const MCInst *MI, unsigned OpNo, raw_ostream &O) {
  const MCOperand &Op = MI->getOperand(OpNo);
  if (Op.isReg()) {
    printRegName(O, Op.getReg());
    return;
  }
  O << Op.getImm();
}"""


def stm(text: str) -> list[str]:
    parsed = parse_definition(text)
    assert parsed, text
    return parsed[0]


def test_the_consensus_body_goes_first():
    # rank 1 is the lone variant; ranks 2-4 share a body: the best-ranked of them is the medoid
    assert consensus_medoid([stm(LONE), stm(SHARED_VARIANT), stm(SHARED), stm(SHARED)]) == 2
    assert consensus_medoid([stm(LONE), stm(SHARED), stm(SHARED), stm(SHARED_VARIANT)]) == 1


def test_ties_keep_the_better_rank():
    same = [stm(SHARED)] * 4
    assert consensus_medoid(same) == 0  # everyone agrees: rank 1
    # ranks 2 and 3 tie with each other (and beat rank 1): the better-ranked one
    assert consensus_medoid([stm(LONE), stm(SHARED), stm(SHARED)]) == 1
    # a fourth, unrelated body pulls the tied pair's agreement (1/3) below the threshold: rank 1
    assert consensus_medoid([stm(LONE), stm(SHARED), stm(SHARED), stm(OTHER)]) == 0


def test_fewer_than_three_candidates_keep_rank_one():
    assert consensus_medoid([stm(LONE), stm(SHARED)]) == 0
    assert consensus_medoid([stm(LONE)]) == 0
    assert consensus_medoid([]) == 0


def test_low_agreement_or_small_margin_keeps_rank_one():
    # three bodies with nothing in common: no vote to follow
    assert consensus_medoid([stm(LONE), stm(SHARED), stm(OTHER)]) == 0
    # the threshold decides: rank 2's agreement (0.5, one of its two partners) is below 0.6
    assert consensus_medoid([stm(LONE), stm(SHARED), stm(SHARED), stm(OTHER)], k=3) == 1
    assert consensus_medoid([stm(LONE), stm(SHARED), stm(SHARED), stm(OTHER)], k=3, min_agreement=0.6) == 0
    # rank 1 agrees nearly as much as the medoid: it stays when the margin is wider than the gap
    assert consensus_medoid([stm(SHARED_VARIANT), stm(SHARED), stm(SHARED)], margin=0.0) == 1
    assert consensus_medoid([stm(SHARED_VARIANT), stm(SHARED), stm(SHARED)], margin=0.5) == 0


def test_only_the_top_k_vote():
    # the consensus sits below rank MEDOID_K: the top k disagree, so rank 1 stays
    top = [stm(LONE), stm(OTHER)] + [stm(LONE.replace("Kind", f"K{i}")) for i in range(MEDOID_K - 2)]
    assert consensus_medoid(top + [stm(SHARED)] * 5) == 0
    assert consensus_medoid([stm(LONE)] + [stm(SHARED)] * 5) == 1


def test_generation_wiring_on_the_toy_targets(tmp_path):
    """candidates_with_adaptations: with two donors per role (the toy tree's three targets) the
    medoid never moves rank 1, the order is the rule's, and k still bounds the hits."""
    import shutil

    from _backend_support import indexed_toy_store
    from prompts.backend.generate import AdaptCache, candidates_with_adaptations
    from retrieval.backend.search import BackendIndex
    from skills.store import Store

    shutil.copytree(indexed_toy_store(), tmp_path / "store")
    st = Store(tmp_path / "store")
    idx = BackendIndex(st)
    roles = idx.roles()
    cache = AdaptCache(st)
    checked = 0
    for role, ts in sorted(roles.items()):
        if "Wren" not in ts or len(ts - {"Wren"}) < 2:
            continue
        _, on, _ = candidates_with_adaptations(st, idx, "Wren", role, 1, cache=cache, medoid=True)
        _, off, _ = candidates_with_adaptations(st, idx, "Wren", role, 3, cache=cache, medoid=False)
        assert len(on) == 1 and on[0].func_id == off[0].func_id and "medoid_from_rank" not in on[0].ranks
        checked += 1
    assert checked >= 3


def test_the_study_finds_a_planted_medoid():
    """eval/backend_studies.medoid_study: where the top-4 consensus body is the best fork (rank 1 a lone
    variant), some setting beats the rule in and out of sample; scored with the library's own core."""
    import numpy as np

    from eval.backend_studies import medoid_study
    from retrieval.backend.selection import FEATURES, agreement_matrix, medoid_of_agreement

    bodies = [stm(LONE), stm(SHARED), stm(SHARED), stm(SHARED_VARIANT), stm(OTHER)]
    A = agreement_matrix(dict(enumerate(bodies)))
    assert medoid_of_agreement([row[:4] for row in A[:4]]) == consensus_medoid(bodies, k=4) == 1
    groups = []
    for t in range(3):
        for g in range(6):
            X = np.zeros((5, len(FEATURES)))
            X[:, FEATURES.index("rule_rank")] = np.arange(5) / 4
            y = [0.1, 0.9, 0.9, 0.7, 0.0] if g % 2 == 0 else [0.5, 0.5, 0.5, 0.5, 0.5]
            groups.append({"target": f"T{t}", "ids": list("abcde"), "X": X.tolist(), "y": y, "agreement": A})
    res = medoid_study(groups)
    assert res["rule"]["mean"] == 0.3
    assert res["best_in_sample"]["minus_rule"]["mean"] == 0.4
    assert res["nested"]["minus_rule"]["mean"] == 0.4 and res["nested"]["minus_rule"]["functions_worse"] == 0
