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

``apply_rules`` rewrites a fork's text token-wise, longest rule first, leaving comments and
string literals alone.
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

    def to_dict(self) -> dict:
        return {"source": self.source, "rules": [r.to_dict() for r in self.rules]}

    @classmethod
    def from_dict(cls, d: dict) -> "DriftRules":
        return cls([DriftRule(tuple(r["old"].split()), tuple(r["new"].split()), r["functions"], r["targets"],
                              r["share"]) for r in d["rules"]], d.get("source", {}))


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


def rules_from_pairs(by_target: dict[str, list[tuple[list[str], list[str]]]]) -> list[DriftRule]:
    """The recurring substitutions of ``paired_functions``' pairs, each *verified*: a statement of
    an old version that has the old tokens counts for the rule when, rewritten by the rule alone,
    it is a statement of the new version (a partial change, LLVM 19's ``getFeatureBits()[F]`` ->
    ``hasFeature(F)`` seen as ``getFeatureBits`` -> ``hasFeature``, never verifies)."""
    seen: dict[tuple, set] = defaultdict(set)
    for T, pairs in by_target.items():
        for k, (a, b) in enumerate(pairs):
            if a != b:
                for ch in changes(a, b):
                    seen[ch].add((T, k))
    cands = {ch for ch, fs in seen.items()
             if len(fs) >= MIN_FUNCTIONS and len({t for t, _ in fs}) >= MIN_TARGETS}
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
    return DriftRules(rules_from_pairs(by_target),
                      {"old_root": str(old_root), "new_root": str(new_root), "targets": sorted(by_target),
                       "min_functions": MIN_FUNCTIONS, "min_targets": MIN_TARGETS, "min_share": MIN_SHARE,
                       "max_tokens": MAX_TOKENS, "max_statements": MAX_STATEMENTS})


def cached_rules(cache_dir: Path, old_root: Path, new_root: Path, targets: Iterable[str], log=None) -> DriftRules:
    """``learn_rules`` kept in ``cache_dir/backend-drift`` under a key of its inputs."""
    targets = sorted(set(targets))
    key = hashlib.sha256(json.dumps([str(old_root), str(new_root), targets, MIN_FUNCTIONS, MIN_TARGETS, MAX_STATEMENTS,
                                     MIN_SHARE, MAX_TOKENS]).encode()).hexdigest()[:16]
    path = Path(cache_dir) / "backend-drift" / f"{key}.json"
    if path.is_file():
        return DriftRules.from_dict(json.loads(path.read_text()))
    rules = learn_rules(old_root, new_root, targets, log)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rules.to_dict(), indent=1))
    return rules


def apply_rules(text: str, rules: Optional[DriftRules]) -> tuple[str, list[dict]]:
    """``text`` with each rule's old tokens replaced by its new ones (longest first, never inside a
    comment or string literal). Returns (text, [{old, new, count}])."""
    if not rules or not rules.rules:
        return text, []
    toks = [(m.start(), m.end(), m.group()) for m in _CODE_TOKEN.finditer(text)]
    code = [(s, e, t) for s, e, t in toks if not t.startswith(("//", "/*"))]
    by_len = sorted(rules.rules, key=lambda r: -len(r.old))
    edits, applied = [], defaultdict(int)
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
