"""API drift between two LLVM versions, learned from the donor targets' own two versions.

A donor indexed from LLVM 15 writes against LLVM 15's API (``Optional<``, ``None``,
``InFlag``); a target of LLVM 19 reads LLVM 19's. The rules here are learned from the *same
function of the same donor target* in both trees (``Sparc``'s ``SparcTargetLowering::LowerCall``
of LLVM 15 against LLVM 19's): the two versions' statement tokens are aligned and each short
replaced stretch (at most ``MAX_TOKENS`` tokens on either side, an identifier among the old ones)
is a candidate substitution. A rule is kept when it recurs: seen in at least ``MIN_FUNCTIONS``
functions of at least ``MIN_TARGETS`` targets, and made in at least ``MIN_SHARE`` of the paired
functions whose old version has the old tokens (``unsigned`` -> ``Register`` happens here and
there but most ``unsigned`` stay: no rule). Only the targets passed in are read, so a held-out
target's code is never a source (the benchmark passes the donors that both trees hold).

**Structural rules** (``StructuralRule``) are learned from the same pairs for changes that are no
token substitution: ``STI.getFeatureBits()[X::F]`` -> ``STI.hasFeature(X::F)``, ``Res !=
MatchOperand_Success`` -> ``!Res.isSuccess()``. The changed stretches of one statement pair (the
old statement and its most similar new one in a replaced stretch) are taken together with the
unchanged tokens between them; an unchanged run that is an operand (names, ``::``, ``.``, ``->``,
bracketed groups) becomes a hole (``$1``) that must bind the same tokens on both sides, and a
pattern never starts or ends with a hole (one unchanged token of context is taken instead).
Each candidate is also tried with one token of context on either side (``return
MatchOperand_Success`` -> ``return ParseStatus::Success``, where the bare name has no rule).
They are verified and thresholded exactly as the token rules.

``apply_rules`` rewrites a fork's text token-wise, structural rules first, longest rule first,
leaving comments and string literals alone.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

MAX_TOKENS = 4
MAX_STATEMENTS = 8
MIN_FUNCTIONS = 3
MIN_TARGETS = 2
MIN_SHARE = 0.5
# structural rules: at most this many fixed tokens on a side, holes, and unchanged tokens between
# two changes of one statement for them to be one rule
MAX_FIXED = 8
MAX_HOLES = 2
MAX_GAP = 6
MIN_PAIR_SIMILARITY = 0.5  # an old statement's most similar new one, for its token diff
RULES_VERSION = 2  # of the learning code: part of the cache key
_WORDLIKE = re.compile(r"^[A-Za-z_]\w*$")
# tokens that carry no API: a stretch made only of these is no rule (``int`` -> ``unsigned``)
_NOT_API = frozenset("""auto bool char const double float int long short signed unsigned void static inline
return if else for while do switch case break continue default true false nullptr this new delete
sizeof template typename class struct enum namespace using virtual override final explicit""".split())
_CODE_TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/|\w+|::|->|\S', re.S)


@dataclass
class DriftRule:
    old: tuple[str, ...]
    new: tuple[str, ...]
    functions: int  # paired functions that made the change
    targets: list[str]
    share: float  # of the paired functions whose old version has ``old``

    def to_dict(self) -> dict:
        d = asdict(self)
        d["old"], d["new"] = " ".join(self.old), " ".join(self.new)
        return d


@dataclass
class DriftRules:
    rules: list[DriftRule]
    source: dict = field(default_factory=dict)  # what they were learned from
    structural: list[DriftRule] = field(default_factory=list)  # patterns with holes ``$1`` or context

    def to_dict(self) -> dict:
        return {"source": self.source, "rules": [r.to_dict() for r in self.rules],
                "structural": [r.to_dict() for r in self.structural]}

    @classmethod
    def from_dict(cls, d: dict) -> "DriftRules":
        def load(rs):
            return [DriftRule(tuple(r["old"].split()), tuple(r["new"].split()), r["functions"], r["targets"],
                              r["share"]) for r in rs]
        return cls(load(d["rules"]), d.get("source", {}), load(d.get("structural", [])))


def _tokens(statements: Sequence[str]) -> list[str]:
    # the normalized statements are space-joined tokens; ";" ends each, so no stretch spans two
    return [t for s in statements for t in s.split()]


def _has_seq(toks: Sequence[str], seq: tuple[str, ...]) -> bool:
    n = len(seq)
    return any(tuple(toks[i:i + n]) == seq for i in range(len(toks) - n + 1))


def _is_api(old: tuple[str, ...], new: tuple[str, ...]) -> bool:
    words = [t for t in old if _WORDLIKE.match(t)]
    return bool(words) and any(t not in _NOT_API for t in words) and bool(new) \
        and len(old) <= MAX_TOKENS and len(new) <= MAX_TOKENS


def changes(old_statements: Sequence[str], new_statements: Sequence[str]) -> set[tuple[tuple, tuple]]:
    """The short token substitutions between two versions of one function's statements: the
    statements are aligned first, then the tokens of each replaced stretch of statements (at most
    ``MAX_STATEMENTS`` on a side: a rewrite, not a drift, beyond)."""
    out = set()
    outer = difflib.SequenceMatcher(None, list(old_statements), list(new_statements), autojunk=False)
    for tag, s1, s2, t1, t2 in outer.get_opcodes():
        if tag != "replace" or s2 - s1 > MAX_STATEMENTS or t2 - t1 > MAX_STATEMENTS:
            continue
        a, b = _tokens(old_statements[s1:s2]), _tokens(new_statements[t1:t2])
        sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
        for op, i1, i2, j1, j2 in sm.get_opcodes():
            if op == "replace":
                old, new = tuple(a[i1:i2]), tuple(b[j1:j2])
                if _is_api(old, new):
                    out.add((old, new))
    return out


def paired_functions(old_dir: Path, new_dir: Path, target: str) -> list[tuple[list[str], list[str]]]:
    """(old statements, new statements) of each function that one source file of ``target`` defines
    once under the same qualified name in both versions (files with the same relative path)."""
    from corpora.backends.tree import SOURCE_SUFFIXES, extract_functions

    pairs = []
    for f in sorted(old_dir.rglob("*")):
        if f.suffix not in SOURCE_SUFFIXES or not f.is_file():
            continue
        rel = f.relative_to(old_dir).as_posix()
        g = new_dir / rel
        if not g.is_file():
            continue
        a, b = f.read_bytes(), g.read_bytes()
        fa, _ = extract_functions(a, target, rel, [], set())
        fb, _ = extract_functions(b, target, rel, [], set()) if a != b else (fa, None)
        ca = defaultdict(list)
        for fn in fa:
            ca[fn.qualified_name].append(fn)
        cb = defaultdict(list)
        for fn in fb:
            cb[fn.qualified_name].append(fn)
        for qn, xs in ca.items():
            ys = cb.get(qn, [])
            if len(xs) == 1 and len(ys) == 1:
                pairs.append((xs[0].statements, ys[0].statements))
    return pairs


def _replace(toks: Sequence[str], old: tuple, new: tuple) -> list[str]:
    out, i, n = [], 0, len(old)
    while i < len(toks):
        if tuple(toks[i:i + n]) == old:
            out.extend(new)
            i += n
        else:
            out.append(toks[i])
            i += 1
    return out


def _recurring(by_target: dict[str, list[tuple[list[str], list[str]]]], changes_of) -> set:
    """The changes ``changes_of(old, new)`` finds in at least MIN_FUNCTIONS changed pairs of at least
    MIN_TARGETS targets: the candidates a rule is verified from."""
    seen: dict[tuple, set] = defaultdict(set)
    for T, pairs in by_target.items():
        for k, (a, b) in enumerate(pairs):
            if a != b:
                for ch in changes_of(a, b):
                    seen[ch].add((T, k))
    return {ch for ch, fs in seen.items() if len(fs) >= MIN_FUNCTIONS and len({t for t, _ in fs}) >= MIN_TARGETS}


def rules_from_pairs(by_target: dict[str, list[tuple[list[str], list[str]]]]) -> list[DriftRule]:
    """The recurring substitutions of ``paired_functions``' pairs, each *verified*: a statement of
    an old version that has the old tokens counts for the rule when, rewritten by the rule alone,
    it is a statement of the new version (a partial change, LLVM 19's ``getFeatureBits()[F]`` ->
    ``hasFeature(F)`` seen as ``getFeatureBits`` -> ``hasFeature``, never verifies)."""
    cands = _recurring(by_target, changes)
    by_old = defaultdict(list)
    for old, new in cands:
        by_old[old].append(new)
    by_first = defaultdict(list)  # candidates looked up by their first token
    for old in by_old:
        by_first[old[0]].append(old)
    verified: dict[tuple, set] = defaultdict(set)
    has_old: dict[tuple, int] = defaultdict(int)
    for T, pairs in by_target.items():
        for k, (a, b) in enumerate(pairs):
            new_set = None
            for st in a:
                toks = st.split()
                for old in {o for t in set(toks) for o in by_first.get(t, ())}:
                    if not _has_seq(toks, old):
                        continue
                    news = by_old[old]
                    has_old[old] += 1
                    if new_set is None:
                        new_set = set(b)
                    for new in news:
                        if " ".join(_replace(toks, old, new)) in new_set:
                            verified[(old, new)].add((T, k))
                            verified[(old, new, "n")].add((T, k, st))
    rules = []
    for old, news in by_old.items():
        for new in news:
            fs = verified.get((old, new), set())
            n_st = len(verified.get((old, new, "n"), set()))
            share = n_st / has_old[old] if has_old[old] else 0.0
            if len(fs) >= MIN_FUNCTIONS and len({t for t, _ in fs}) >= MIN_TARGETS and share >= MIN_SHARE:
                rules.append(DriftRule(old, new, len(fs), sorted({t for t, _ in fs}), round(share, 3)))
    best: dict[tuple, DriftRule] = {}  # one rule per old stretch: the most frequent
    for r in sorted(rules, key=lambda r: (-r.functions, -r.share, r.new)):
        best.setdefault(r.old, r)
    return sorted(best.values(), key=lambda r: (-len(r.old), -r.functions, r.old))


# --------------------------------------------------------------------------- structural rules
_CLOSE = {"(": ")", "[": "]"}
_NUMBER = re.compile(r"^\d[\w.]*$")


def _is_hole(t: str) -> bool:
    return t.startswith("$") and t[1:].isdigit()


def _operand_top(t: str) -> bool:
    # a token an operand may hold outside brackets: names, numbers, literals, scope and member access
    return bool(_WORDLIKE.match(t) or _NUMBER.match(t) or t[:1] in ("'", '"') or t in ("::", ".", "->"))


def _operand(toks: Sequence[str]) -> bool:
    """Whether ``toks`` is one operand a hole may bind: ``X :: F``, ``getSTI ( )``, ``Ops [ 0 ]``."""
    if not toks:
        return False
    stack: list[str] = []
    for t in toks:
        if t in _CLOSE:
            stack.append(_CLOSE[t])
        elif t in (")", "]"):
            if not stack or stack.pop() != t:
                return False
        elif stack:
            if t in (";", "{", "}"):
                return False
        elif not _operand_top(t):
            return False
    return not stack


def _match(toks: Sequence[str], i: int, pat: Sequence[str]) -> Optional[tuple[int, dict]]:
    """(end, {hole: (start, end)}) when ``pat`` matches ``toks`` from ``i``: fixed tokens equal, each
    hole the shortest operand followed by the pattern's next token (a hole is never a pattern's
    last), the same tokens wherever the hole recurs."""
    binds: dict[str, tuple[int, int]] = {}
    k = i
    for p_i, p in enumerate(pat):
        if not _is_hole(p):
            if k >= len(toks) or toks[k] != p:
                return None
            k += 1
            continue
        if p_i + 1 == len(pat):
            return None  # nothing would end the hole (a learned pattern never ends with one)
        nxt, j, stack, end = pat[p_i + 1], k, [], None
        while j < len(toks):
            t = toks[j]
            if not stack and j > k and t == nxt:
                end = j
                break
            if t in _CLOSE:
                stack.append(_CLOSE[t])
            elif t in (")", "]"):
                if not stack or stack.pop() != t:
                    break
            elif stack:
                if t in (";", "{", "}"):
                    break
            elif not _operand_top(t):
                break
            j += 1
        if end is None or (p in binds and list(toks[slice(*binds[p])]) != list(toks[k:end])):
            return None
        binds[p] = (k, end)
        k = end
    return k, binds


def _rewrite(toks: Sequence[str], old: Sequence[str], new: Sequence[str]) -> tuple[list[str], int]:
    out, i, n = [], 0, 0
    while i < len(toks):
        m = _match(toks, i, old) if toks[i] == old[0] else None
        if m:
            end, binds = m
            out.extend(x for t in new for x in (toks[slice(*binds[t])] if _is_hole(t) else [t]))
            i, n = end, n + 1
        else:
            out.append(toks[i])
            i += 1
    return out, n


def _fixed(pat: Sequence[str]) -> list[str]:
    return [t for t in pat if not _is_hole(t)]


def _one_name(old: Sequence[str], new: Sequence[str]) -> bool:
    return len(old) == len(new) == 1 and bool(_WORDLIKE.match(old[0])) and bool(_WORDLIKE.match(new[0]))


def _patterns(x: list[str], y: list[str]) -> set[tuple[tuple, tuple]]:
    """Structural candidates of one statement pair: each cluster of changes (at most ``MAX_GAP``
    unchanged tokens apart) with operand runs between them as holes; bare and with one token of
    context on either side."""
    ops = difflib.SequenceMatcher(None, x, y, autojunk=False).get_opcodes()
    clusters: list[list[tuple]] = []
    for op in ops:
        if op[0] == "equal":
            continue
        if clusters and op[1] - clusters[-1][-1][2] <= MAX_GAP and op[3] - clusters[-1][-1][4] <= MAX_GAP:
            clusters[-1].append(op)
        else:
            clusters.append([op])
    out = set()
    for cl in clusters:
        old: list[str] = []
        new: list[str] = []
        holes = 0
        for k, (_, i1, i2, j1, j2) in enumerate(cl):
            if k:
                run = x[cl[k - 1][2]:i1]  # unchanged between two changes (the same tokens in y)
                if _operand(run):
                    holes += 1
                    old.append(f"${holes}")
                    new.append(f"${holes}")
                else:
                    old.extend(run)
                    new.extend(run)
            old.extend(x[i1:i2])
            new.extend(y[j1:j2])
        lo, hi = cl[0][1], cl[-1][2]  # the cluster's span in x; the context around it is x's (= y's)
        # the old side starts and ends with a fixed token (a hole is bound by what follows it), and
        # neither side is empty: an unchanged token of context where needed
        need_l = not old or not new or _is_hole(old[0])
        need_r = not old or not new or _is_hole(old[-1])
        left, right = (x[lo - 1:lo] if need_l else []), (x[hi:hi + 1] if need_r else [])
        if (need_l and not left) or (need_r and not right):
            continue
        variants = [(left, right)]
        variants += [(x[lo - 1:lo], right)] if not left and lo else []
        variants += [(left, x[hi:hi + 1])] if not right and hi < len(x) else []
        variants += [(x[lo - 1:lo], x[hi:hi + 1])] if not left and not right and lo and hi < len(x) else []
        for lc, rc in variants:
            o, n = tuple(lc + old + rc), tuple(lc + new + rc)
            if not holes and (not lc and not rc or _one_name(old, new) and lc != ["::"]):
                # a plain substitution, or one name for another (mostly a local's rename: ``Flag`` ->
                # ``Glue``, ``MCA`` -> ``W``): the token rules' business; but a qualified name is no
                # local, and the token rules never rewrite one (``ISD :: FLT_ROUNDS_``)
                continue
            words = [t for t in _fixed(o) if _WORDLIKE.match(t)]
            if len(_fixed(o)) > MAX_FIXED or len(_fixed(n)) > MAX_FIXED or holes > MAX_HOLES \
                    or not any(t not in _NOT_API for t in words):
                continue
            out.add((o, n))
    return out


def statement_pairs(old_statements: Sequence[str], new_statements: Sequence[str]) -> list[tuple[str, Optional[str]]]:
    """Each old statement with its counterpart in the new version: itself where the statement
    alignment keeps it, the most similar statement of its replaced stretch (at most
    ``MAX_STATEMENTS`` a side; similarity at least ``MIN_PAIR_SIMILARITY``, ties to the nearer
    relative place), else None (deleted, or inside a longer rewrite)."""
    out: list[tuple[str, Optional[str]]] = []
    outer = difflib.SequenceMatcher(None, list(old_statements), list(new_statements), autojunk=False)
    for tag, s1, s2, t1, t2 in outer.get_opcodes():
        if tag == "equal":
            out.extend((st, st) for st in old_statements[s1:s2])
        elif tag == "replace" and s2 - s1 <= MAX_STATEMENTS and t2 - t1 <= MAX_STATEMENTS:
            news = new_statements[t1:t2]
            for i, st in enumerate(old_statements[s1:s2]):
                x = st.split()
                scored = [(difflib.SequenceMatcher(None, x, t.split(), autojunk=False).ratio(),
                           -abs(i / (s2 - s1) - j / (t2 - t1)), t) for j, t in enumerate(news)]
                r, _, t = max(scored)
                out.append((st, t if r >= MIN_PAIR_SIMILARITY else None))
        elif tag in ("replace", "delete"):
            out.extend((st, None) for st in old_statements[s1:s2])
    return out


def structural_changes(old_statements: Sequence[str], new_statements: Sequence[str]) -> set[tuple[tuple, tuple]]:
    """``_patterns`` of each changed statement of ``statement_pairs``."""
    out = set()
    for st, t in statement_pairs(old_statements, new_statements):
        if t is not None and t != st:
            out |= _patterns(st.split(), t.split())
    return out


def structural_rules_from_pairs(by_target: dict[str, list[tuple[list[str], list[str]]]],
                                plain: Sequence[DriftRule] = ()) -> list[DriftRule]:
    """The recurring ``structural_changes``, verified statement by statement and thresholded as
    ``rules_from_pairs``': an old statement the pattern matches, rewritten by the rule alone, is
    its counterpart in the new version (``statement_pairs``; stricter than the token rules' "a
    statement of the new version", which lets ``return MatchOperand_ParseFail`` become the
    function's other ``return ParseStatus::Success``). A rule with context is dropped when its
    bare form is a rule, of these or of ``plain`` (the token rules)."""
    cands = _recurring(by_target, structural_changes)
    by_first = defaultdict(set)
    for old, _ in cands:
        by_first[old[0]].add(old)
    by_old = defaultdict(list)
    for old, new in cands:
        by_old[old].append(new)
    verified: dict[tuple, set] = defaultdict(set)
    n_verified: dict[tuple, int] = defaultdict(int)
    has_old: dict[tuple, int] = defaultdict(int)
    for T, pairs in by_target.items():
        for k, (a, b) in enumerate(pairs):
            for st, counterpart in statement_pairs(a, b) if a != b else ((st, st) for st in a):
                toks = st.split()
                for old in {o for t in set(toks) for o in by_first.get(t, ())}:
                    if not any(toks[i] == old[0] and _match(toks, i, old) for i in range(len(toks))):
                        continue
                    has_old[old] += 1
                    for new in by_old[old] if counterpart is not None else ():
                        if " ".join(_rewrite(toks, old, new)[0]) == counterpart:
                            verified[(old, new)].add((T, k))
                            n_verified[(old, new)] += 1
    rules = []
    for (old, new), fs in verified.items():
        share = n_verified[(old, new)] / has_old[old]
        if len(fs) >= MIN_FUNCTIONS and len({t for t, _ in fs}) >= MIN_TARGETS and share >= MIN_SHARE:
            rules.append(DriftRule(old, new, len(fs), sorted({t for t, _ in fs}), round(share, 3)))
    best: dict[tuple, DriftRule] = {}
    for r in sorted(rules, key=lambda r: (-r.functions, -r.share, r.new)):
        best.setdefault(r.old, r)
    kept = {(r.old, r.new) for r in best.values()} | {(r.old, r.new) for r in plain}

    def redundant(r: DriftRule) -> bool:
        # the same rewrite with a token of context less on either end is a rule already; not after
        # ``::``, where neither kind of rule applies a pattern that starts with a name
        for lo, hi in ((1, 0), (0, 1), (1, 1)) if r.old[0] != "::" else ((0, 1),):
            o, n = r.old[lo:len(r.old) - hi], r.new[lo:len(r.new) - hi]
            if o and n and r.old[:lo] == r.new[:lo] and r.old[len(r.old) - hi:] == r.new[len(r.new) - hi:] \
                    and (o, n) in kept:
                return True
        return False

    holed = [r for r in best.values() if any(_is_hole(t) for t in r.old)]

    def instance(r: DriftRule) -> bool:
        # what a rule with holes does already (``Register :: isVirtualRegister ( Reg )``)
        return any(h is not r and tuple(_rewrite(r.old, h.old, h.new)[0]) == r.new for h in holed)

    return sorted((r for r in best.values() if not redundant(r) and not instance(r)),
                  key=lambda r: (-len(_fixed(r.old)), -r.functions, r.old))


def learn_rules(old_root: Path, new_root: Path, targets: Iterable[str], log=None) -> DriftRules:
    """Rules from the targets' functions in ``old_root/<T>`` and ``new_root/<T>`` (``lib/Target``
    folders of two LLVM versions). ``targets``: the only targets read."""
    by_target: dict[str, list] = {}
    for T in sorted(set(targets)):
        od, nd = Path(old_root) / T, Path(new_root) / T
        if od.is_dir() and nd.is_dir():
            by_target[T] = paired_functions(od, nd, T)
            if log:
                log(f"drift: {T}: {len(by_target[T])} functions paired")
    plain = rules_from_pairs(by_target)
    return DriftRules(plain,
                      {"old_root": str(old_root), "new_root": str(new_root), "targets": sorted(by_target),
                       "min_functions": MIN_FUNCTIONS, "min_targets": MIN_TARGETS, "min_share": MIN_SHARE,
                       "max_tokens": MAX_TOKENS, "max_statements": MAX_STATEMENTS, "max_fixed": MAX_FIXED,
                       "max_holes": MAX_HOLES, "max_gap": MAX_GAP, "min_pair_similarity": MIN_PAIR_SIMILARITY},
                      structural_rules_from_pairs(by_target, plain))


def cached_rules(cache_dir: Path, old_root: Path, new_root: Path, targets: Iterable[str], log=None) -> DriftRules:
    """``learn_rules`` kept in ``cache_dir/backend-drift`` under a key of its inputs."""
    targets = sorted(set(targets))
    key = hashlib.sha256(json.dumps([str(old_root), str(new_root), targets, MIN_FUNCTIONS, MIN_TARGETS, MAX_STATEMENTS,
                                     MIN_SHARE, MAX_TOKENS, RULES_VERSION, MAX_FIXED, MAX_HOLES, MAX_GAP,
                                     MIN_PAIR_SIMILARITY]).encode()).hexdigest()[:16]
    path = Path(cache_dir) / "backend-drift" / f"{key}.json"
    if path.is_file():
        return DriftRules.from_dict(json.loads(path.read_text()))
    rules = learn_rules(old_root, new_root, targets, log)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rules.to_dict(), indent=1))
    return rules


# C++ tokens as the normalized statements have them (``corpora.backends.tree``), comments apart
_STRUCT_TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|\w+|::|->|<<=|>>=|'
                           r'[-+*/%&|^!=<>]=|&&|\|\||\+\+|--|<<|>>|\S', re.S)


def apply_structural(text: str, rules: Sequence[DriftRule]) -> tuple[str, dict]:
    """``text`` with the structural rules applied (most fixed tokens first; a hole keeps its text)."""
    toks = [(m.start(), m.end(), m.group()) for m in _STRUCT_TOKEN.finditer(text)]
    code = [(s, e, t) for s, e, t in toks if not t.startswith(("//", "/*"))]
    words = [t for _, _, t in code]
    by_len = sorted(rules, key=lambda r: -len(_fixed(r.old)))
    edits, applied = [], defaultdict(int)
    i = 0
    while i < len(words):
        for r in by_len:
            if words[i] != r.old[0] or (i and words[i - 1] == "::" and _WORDLIKE.match(r.old[0])):
                continue
            m = _match(words, i, r.old)
            if m:
                end, binds = m
                pieces = [text[code[binds[t][0]][0]:code[binds[t][1] - 1][1]] if _is_hole(t) else t for t in r.new]
                edits.append((code[i][0], code[end - 1][1], _join(pieces)))
                applied[(r.old, r.new)] += 1
                i = end
                break
        else:
            i += 1
    for s, e, rep in sorted(edits, key=lambda x: -x[0]):
        text = text[:s] + rep + text[e:]
    return text, applied


def apply_rules(text: str, rules: Optional[DriftRules]) -> tuple[str, list[dict]]:
    """``text`` with the structural rules applied (``apply_structural``), then each token rule's old
    tokens replaced by its new ones (longest first, never inside a comment or string literal).
    Returns (text, [{old, new, count}])."""
    if not rules or not (rules.rules or rules.structural):
        return text, []
    text, applied = apply_structural(text, rules.structural)
    toks = [(m.start(), m.end(), m.group()) for m in _CODE_TOKEN.finditer(text)]
    code = [(s, e, t) for s, e, t in toks if not t.startswith(("//", "/*"))]
    by_len = sorted(rules.rules, key=lambda r: -len(r.old))
    edits = []
    i = 0
    while i < len(code):
        for r in by_len:
            n = len(r.old)
            if tuple(t for _, _, t in code[i:i + n]) == r.old:
                # a whole name: not the tail of a qualified one (``Foo::None``)
                if i and code[i - 1][2] == "::" and _WORDLIKE.match(r.old[0]):
                    continue
                edits.append((code[i][0], code[i + n - 1][1], _join(r.new)))
                applied[(r.old, r.new)] += 1
                i += n
                break
        else:
            i += 1
    for s, e, rep in sorted(edits, key=lambda x: -x[0]):
        text = text[:s] + rep + text[e:]
    return text, [{"old": " ".join(o), "new": " ".join(n), "count": c} for (o, n), c in applied.items()]


def _join(tokens: Sequence[str]) -> str:
    out = ""
    for t in tokens:
        if out and _WORDLIKE.match(t[:1] or " ") and (_WORDLIKE.match(out[-1]) or out[-1].isdigit()):
            out += " "
        out += t
    return out
