"""Fork-and-adapt: carry one target's implementation of a role over to another target.

The source function's target-specific identifiers are mapped onto the destination target:

1. *rename*: the source target's name variants become the destination's
   (``MipsSubtarget`` -> ``RISCVSubtarget``, ``ELF::R_MIPS_32`` -> ``ELF::R_RISCV_32``); kept
   when the renamed name exists in the destination (one of its attributes or header
   declarations);
2. *match*: otherwise, when the source name is an attribute of a known kind (fixup,
   relocation, register, register class, feature, instruction, calling convention), the most
   similar destination attribute of the same kind by name, target names neutralized
   (``fixup_Mips_HI16`` ~ ``fixup_riscv_hi20``: shared tokens and spelling);
3. *unmapped*: otherwise the renamed name is kept (the compile gate will say if it is wrong).

A qualified name is an attribute of the source only in one of the source's own namespaces (its
name variants, the TableGen namespace its register classes declare, ``ELF`` for relocations):
``ISD::MUL`` is LLVM's node even where the source has an instruction ``MUL``, and
``MipsISD::Ret`` is a node of the source's own enum, not an instruction. Such names are
*generic* when renaming leaves them unchanged: they are kept as written.

``mappability`` = share of identifiers settled by 1 or 2 (or generic): how much of the source the
destination can express; reported with each candidate, not ranked on (see docs/backends.md). ``fork_flow`` is the baseline: rename only.
"""
from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Optional, Sequence

from corpora.backends.profile import TargetProfile, generated_base
from corpora.backends.tree import alias_pattern_cached, prepare_cpp, subtokens_of_name
from corpora.code.nodes import function_declarator
from corpora.code.parse import cpp_parser, walk

MATCH_KINDS = ("fixup", "relocation", "register", "register_class", "subtarget_feature", "instruction",
               "calling_convention", "processor", "instruction_format")
MATCH_THRESHOLD = 0.34
_WORD = re.compile(r"\b[A-Za-z_]\w*\b")
_IDENT = re.compile(r"\b[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*")


def owns_qualifier(prof: TargetProfile, ident: str, kind: Optional[str]) -> bool:
    """Is ``ident``'s qualifier one under which ``prof``'s attributes of ``kind`` live? Unqualified
    names and ``llvm::`` count; ``ELF`` only for relocations; else one of the target's name
    variants or TableGen namespaces exactly (``Mips::``, ``SP::`` for Sparc), not a namespace
    derived from them (``MipsISD::``, ``ARMCC::``) nor LLVM's own (``ISD::``, ``TargetOpcode::``)."""
    quals = [q for q in ident.split("::")[:-1] if q and q != "llvm"]
    if not quals:
        return True
    q = quals[-1]
    if q == "ELF":
        return kind == "relocation"
    return q in prof.aliases or q in prof.namespaces or q == prof.target


# --------------------------------------------------------------------------- renaming
@lru_cache(maxsize=512)
def _lower_pattern(aliases: tuple[str, ...]) -> Optional[re.Pattern]:
    lows = sorted({a.lower() for a in aliases if len(a) >= 2}, key=len, reverse=True)
    if not lows:
        return None
    return re.compile(r"(?<![A-Za-z0-9])(" + "|".join(re.escape(a) for a in lows) + r")(?=_|\d|$|[^A-Za-z0-9])")


def rename_target(text: str, src: TargetProfile, dst: TargetProfile) -> str:
    """Replace the source target's name variants in identifiers (and strings) by the destination's."""
    if src.target == dst.target:
        return text
    key = tuple(sorted(set(src.aliases)))
    pat = alias_pattern_cached(key)
    low = _lower_pattern(key)
    dp = dst.primary

    def word(m: re.Match) -> str:
        qualifier = m.string[m.end():m.end() + 2] == "::"

        def alias_repl(a_m: re.Match) -> str:
            a = a_m.group(0)
            nxt = a_m.string[a_m.end():a_m.end() + 2]
            # a short alias inside an upper-case word is not a prefix (AMDGPU's SI in SIGN_EXTEND_INREG,
            # VE's in VECTOR), except in a namespace named after the target (VEISD::)
            if len(a) <= 2 and a.isupper() and nxt[:1].isupper() and not nxt[1:2].islower() and not qualifier:
                return a
            if a.isupper() and len(a) > 1:
                prev = a_m.string[a_m.start() - 1:a_m.start()]
                camel = nxt[:1].isupper() and (nxt[1:2].islower() or qualifier)
                # an upper-case variant stays upper case (R_MIPS_32 -> R_RISCV_32) unless it prefixes a
                # CamelCase name or a namespace (SIRegisterInfo, R600ISD::); the target's own spelling
                # becomes upper case inside an upper-case name (R_ARM_ABS32 -> R_SPARC_ABS32)
                if (a != src.primary and not camel) or (a == src.primary and prev == "_"):
                    return dp.upper()
            return dp

        w = pat.sub(alias_repl, m.group(0))
        if low is not None:
            w = low.sub(lambda mm: dp.lower(), w)
        return w

    return re.sub(r"[A-Za-z_][A-Za-z0-9_]*", word, text)


def _neutral_tokens(name: str, prof: TargetProfile) -> list[str]:
    lows = {a.lower() for a in prof.aliases}
    return [t for t in subtokens_of_name(name) if t not in lows]


def common_tokens(prof: TargetProfile, kind: str) -> frozenset:
    """Tokens in at least half of a target's names of one kind (``fixup``, ``r``): shared by
    all, they say nothing about which name corresponds to which."""
    key = (id(prof), kind)
    got = _COMMON.get(key)
    if got is None:
        names = prof.by_kind.get(kind, [])
        counts: dict[str, int] = {}
        for n in names:
            for t in set(_neutral_tokens(n, prof)):
                counts[t] = counts.get(t, 0) + 1
        got = frozenset(t for t, c in counts.items() if len(names) >= 2 and c * 2 >= len(names))
        _COMMON[key] = got
    return got


_COMMON: dict = {}


def kind_tokens(prof: TargetProfile, name: str, kind: Optional[str]) -> tuple[tuple[str, ...], str]:
    """(distinctive neutral tokens, their joined spelling) of one name, memoized on the profile."""
    memo = prof.__dict__.setdefault("_token_memo", {})
    key = (name, kind)
    got = memo.get(key)
    if got is None:
        toks = _neutral_tokens(name, prof)
        if kind:
            common = common_tokens(prof, kind)
            toks = [t for t in toks if t not in common] or toks
        got = (tuple(toks), "_".join(toks))
        memo[key] = got
    return got


def token_similarity(ta: tuple, ja: str, tb: tuple, jb: str) -> float:
    if not ta or not tb:
        return 0.0
    sa, sb = set(ta), set(tb)
    jac = len(sa & sb) / len(sa | sb)
    if 0.6 * jac + 0.4 * (2 * min(len(ja), len(jb)) / (len(ja) + len(jb))) < MATCH_THRESHOLD:
        return 0.0  # cannot reach the threshold whatever the spelling (saves the matcher)
    sm = difflib.SequenceMatcher(None, ja, jb, autojunk=False)
    if 0.6 * jac + 0.4 * sm.quick_ratio() < MATCH_THRESHOLD:  # quick_ratio bounds ratio from above
        return 0.0
    ratio = sm.ratio()
    nums_a = {t for t in ta if t.isdigit()}
    nums_b = {t for t in tb if t.isdigit()}
    num_pen = 0.15 if nums_a and nums_b and not (nums_a & nums_b) else 0.0
    return 0.6 * jac + 0.4 * ratio - num_pen


def name_similarity(a: str, src: TargetProfile, b: str, dst: TargetProfile, kind: Optional[str] = None) -> float:
    """Similarity of two attribute names of different targets: target names removed, tokens
    shared by most names of the kind ignored; 0.6 x token Jaccard + 0.4 x spelling ratio,
    less 0.15 when both carry numbers and none agree."""
    ta, ja = kind_tokens(src, a, kind)
    tb, jb = kind_tokens(dst, b, kind)
    return token_similarity(ta, ja, tb, jb)


@dataclass
class Mapping:
    source: str
    target: str
    how: str  # "rename" | "match" | "generic" | "unmapped"
    kind: Optional[str] = None
    score: Optional[float] = None


@dataclass
class Adapted:
    text: str
    mappings: list[Mapping]
    mappability: float
    source_func: Optional[str] = None

    def to_dict(self) -> dict:
        d = asdict(self)
        return d


class IdentifierMapper:
    def __init__(self, src: TargetProfile, dst: TargetProfile):
        self.src, self.dst = src, dst

    def _split_generated(self, base: str) -> tuple[str, str]:
        return generated_base(self.src.kind_of, base)

    def kind(self, ident: str) -> Optional[str]:
        """The source attribute kind ``ident`` names, or None (not an attribute, or one spelled
        the same in a namespace that is not the source's)."""
        base, _ = self._split_generated(ident.split("::")[-1])
        kind = self.src.kind_of.get(base)
        return kind if kind is not None and owns_qualifier(self.src, ident, kind) else None

    def map_generic(self, ident: str) -> Optional[Mapping]:
        """A qualified name outside the source's namespaces that renaming leaves unchanged
        (``ISD::MUL``, ``TargetOpcode::COPY``): LLVM's, kept as written."""
        if "::" in ident and self.kind(ident) is None and not owns_qualifier(self.src, ident, None) \
                and rename_target(ident, self.src, self.dst) == ident:
            return Mapping(ident, ident, "generic")
        return None

    def map_rename(self, ident: str) -> Optional[Mapping]:
        """The renamed identifier, when the destination has it: as an attribute of the same kind
        when the source name is an attribute (a register must stay a register), else as any
        attribute or header declaration."""
        renamed = rename_target(ident, self.src, self.dst)
        base = renamed.split("::")[-1]
        src_base, suffix = self._split_generated(ident.split("::")[-1])
        kind = self.kind(ident)
        if kind is not None:
            dst_base = base[: -len(suffix)] if suffix and base.endswith(suffix) else base
            if self.dst.kind_of.get(dst_base) == kind:
                return Mapping(ident, renamed, "rename", kind)
            return None
        if self.dst.knows(renamed):
            return Mapping(ident, renamed, "rename")
        return None

    def map_class(self, ident: str, used: set) -> Optional[Mapping]:
        """A class of the source that T has under another name: the one class of T deriving from
        the same LLVM base as this one, the source's only class of that base (Mips's
        ``MipsFunctionInfo`` and ARC's ``ARCFunctionInfo`` against RISCV's
        ``RISCVMachineFunctionInfo``, all ``MachineFunctionInfo``s). None when either target has
        no or several such classes (passes: ``MachineFunctionPass``), or T has the renamed name."""
        if "::" in ident or ident not in self.src.classes:
            return None
        # a pass base (MachineFunctionPass, FunctionPass..) says what a class is, not which one
        bases = {b for b in self.src.classes[ident]
                 if b and not b.endswith("Pass") and b == rename_target(b, self.src, self.dst)}
        if not bases:
            return None
        cands = [c for c, cb in self.dst.classes.items() if bases & set(cb)]
        peers = [c for c, cb in self.src.classes.items() if bases & set(cb)]
        # one to one: the base names a part both targets have once (not MachineFunctionPass)
        if len(cands) != 1 or len(peers) != 1 or cands[0] in used \
                or rename_target(ident, self.src, self.dst) in self.dst.classes:
            return None
        return Mapping(ident, cands[0], "match", "class", 1.0)

    def declaration_candidates(self, ident: str) -> list[tuple[float, str]]:
        """(score, T's declared name) for a name spelled with the source's name that is no attribute
        and that T lacks renamed: T's header declarations spelled with T's name of the same family,
        i.e. the same first and last word once the target's name is taken out (``getTheMipsTarget``
        -> ``getTheLoongArch32Target``, ``createXBranchTargetsPass`` -> ``createARCBranchFinalizePass``,
        ``initializeX..Pass``), above the attribute matcher's threshold, best first. A family needs
        two words; classes of either target are left to ``map_class``."""
        base = ident.split("::")[-1]
        renamed = rename_target(base, self.src, self.dst)
        # classes go by their base (map_class): XRegisterBankInfo is no XRegisterInfo
        if renamed == base or self.kind(ident) is not None or self.dst.knows(renamed) or base in self.src.classes:
            return []
        ta, ja = kind_tokens(self.dst, renamed, None)
        if len(ta) < 2:
            return []
        out = []
        for cand, tb, jb in _spelled_declarations(self.dst):
            if tb[0] == ta[0] and tb[-1] == ta[-1] and cand not in self.dst.classes:
                s = token_similarity(ta, ja, tb, jb)
                if s >= MATCH_THRESHOLD:
                    out.append((s, cand))
        out.sort(key=lambda x: (-x[0], x[1]))
        return out[:8]

    def match_candidates(self, ident: str) -> list[tuple[float, str, str, str]]:
        """(score, destination attribute, kind, generated suffix) above the threshold, best first
        (memoized on the destination profile per source target)."""
        memo = self.dst.__dict__.setdefault("_match_memo", {})
        key = (self.src.target, ident)
        if key not in memo:
            memo[key] = self._match_candidates(ident)
        return memo[key]

    def _match_candidates(self, ident: str) -> list[tuple[float, str, str, str]]:
        src_base, suffix = self._split_generated(ident.split("::")[-1])
        kind = self.kind(ident)
        if kind not in MATCH_KINDS:
            return []
        out = []
        ta, ja = kind_tokens(self.src, src_base, kind)
        for cand in self.dst.by_kind.get(kind, []):
            tb, jb = kind_tokens(self.dst, cand, kind)
            s = token_similarity(ta, ja, tb, jb)
            if s >= MATCH_THRESHOLD:
                out.append((s, cand, kind, suffix))
        out.sort(key=lambda x: (-x[0], x[1]))
        return out[:8]


def _spelled_declarations(prof: TargetProfile) -> list[tuple[str, tuple, str]]:
    """(name, neutral tokens, their spelling) of the header declarations spelled with the target's
    name and of at least two other words, memoized on the profile."""
    got = prof.__dict__.get("_spelled_decls")
    if got is None:
        key = tuple(sorted(set(prof.aliases)))
        pat, low = alias_pattern_cached(key), _lower_pattern(key)
        got = []
        for d in sorted(prof.declared):
            toks, joined = kind_tokens(prof, d, None)
            if len(toks) >= 2 and (pat.search(d) or (low is not None and low.search(d))):
                got.append((d, toks, joined))
        prof.__dict__["_spelled_decls"] = got
    return got


def _apply(text: str, mapping: dict[str, str], rename) -> str:
    def repl(m: re.Match) -> str:
        tok = re.sub(r"\s+", "", m.group(0))
        if tok in mapping:
            return mapping[tok]
        if tok.startswith("llvm::") and tok[6:] in mapping:
            return "llvm::" + mapping[tok[6:]]
        # a longer chain whose tail is mapped (Foo::Mips::fixup_x)
        parts = tok.split("::")
        for i in range(1, len(parts)):
            tail = "::".join(parts[i:])
            if tail in mapping:
                return rename("::".join(parts[:i])) + "::" + mapping[tail]
        return rename(m.group(0))

    # Leave comments alone except for renaming; map code.
    return _IDENT.sub(repl, text)


def adapt(text: str, identifiers: Sequence[str], src: TargetProfile, dst: TargetProfile,
          source_func: Optional[str] = None, prune: bool = True) -> Adapted:
    """Fork-and-adapt ``text`` (a function of ``src``) to ``dst``.

    Renames first; then attribute matches, best score first, one destination name per source
    name (two source fixups never collapse onto one destination fixup, which would e.g. give a
    switch two equal case labels). With ``prune``, ``case`` arms labelled by a source
    attribute with no counterpart in ``dst`` are dropped: the destination has no such fixup
    or relocation to handle.
    """
    mapper = IdentifierMapper(src, dst)
    idents = list(dict.fromkeys(identifiers))
    # names TableGen generates from the source's records (Lanai's CSR_SaveList from its CSR) are
    # its identifiers too, though the ingest's list holds only names spelled with the target's name
    known = set(idents) | {i.split("::")[-1] for i in idents}  # a qualified one is mapped whole
    idents += [w for w in dict.fromkeys(_WORD.findall(text)) if w not in known and generated_base(src.kind_of, w)[1]]
    maps: dict[str, Mapping] = {}
    used: set[str] = set()
    pending = []
    for ident in idents:
        m = mapper.map_generic(ident) or mapper.map_rename(ident)
        if m is not None:
            maps[ident] = m
            if m.how != "generic":
                used.add(m.target.split("::")[-1])
        else:
            pending.append(ident)
    scored = []
    for ident in pending:
        for score, cand, kind, suffix in mapper.match_candidates(ident):
            scored.append((score, ident, cand, kind, suffix))
    scored.sort(key=lambda x: (-x[0], x[1], x[2]))
    for score, ident, cand, kind, suffix in scored:
        if ident in maps or cand + suffix in used:
            continue
        parts = rename_target(ident, src, dst).split("::")
        maps[ident] = Mapping(ident, "::".join(parts[:-1] + [cand + suffix]), "match", kind, round(score, 3))
        used.add(cand + suffix)
    # classes by their base: also the class of a qualified name (the ingest lists Foo::create, not
    # the Foo of a template argument), so every mention of it follows
    for head in dict.fromkeys(i.partition("::")[0] for i in pending):
        if head not in maps and (m := mapper.map_class(head, used)) is not None:
            maps[head] = m
            used.add(m.target)
            if head not in idents:
                idents.append(head)
    for ident in pending:  # Foo::create of a class mapped above: its members follow it
        head, _, rest = ident.partition("::")
        if ident not in maps and rest and head in maps and maps[head].kind == "class":
            maps[ident] = Mapping(ident, maps[head].target + "::" + rename_target(rest, src, dst), "match", "class", 1.0)
    present = set(_WORD.findall(rename_target(text, src, dst)))
    scored = []
    for ident in pending:
        if ident not in maps:
            scored.extend((score, ident, cand) for score, cand in mapper.declaration_candidates(ident))
    scored.sort(key=lambda x: (-x[0], x[1], x[2]))
    for score, ident, cand in scored:
        if ident in maps or cand in used or cand in present:
            continue
        parts = rename_target(ident, src, dst).split("::")
        maps[ident] = Mapping(ident, "::".join(parts[:-1] + [cand]), "match", "declaration", round(score, 3))
        used.add(cand)
    for ident in pending:
        if ident not in maps:
            maps[ident] = Mapping(ident, rename_target(ident, src, dst), "unmapped", mapper.kind(ident))
    ordered = [maps[i] for i in idents]
    table = {m.source: m.target for m in ordered}
    out = _apply(text, table, lambda s: rename_target(s, src, dst))
    if prune:
        dead = {m.target for m in ordered if m.how == "unmapped" and m.kind in MATCH_KINDS}
        if dead:
            out = prune_cases(out, dead)
    settled = sum(1 for m in ordered if m.how != "unmapped")
    return Adapted(out, ordered, (settled / len(ordered)) if ordered else 1.0, source_func)


def prune_cases(text: str, dead: set[str]) -> str:
    """Drop ``case`` arms labelled by one of ``dead``. Labels that fall through into one body
    form a group: when every label of a group is dead the whole arm goes; otherwise only the
    dead labels go and the body stays with the live ones."""
    data = text.encode()
    tree = cpp_parser().parse(prepare_cpp(data))

    def unqualified(nm: str) -> str:
        return nm[6:] if nm.startswith("llvm::") else nm

    dead_full = {unqualified(d) for d in dead}
    dead_bases = {d.split("::")[-1] for d in dead}

    def is_dead(case) -> bool:
        value = case.child_by_field_name("value")
        if value is None:
            return False  # default:
        names = {re.sub(r"\s+", "", x.text.decode(errors="replace")) for x in walk(value)
                 if x.type in ("identifier", "qualified_identifier")
                 and (x.parent is None or x.parent.type != "qualified_identifier")}
        # a label spelled without its namespace matches by base name; a qualified one must match
        # whole (ISD::ADD is not the dead Wren::ADD)
        return any(unqualified(nm) in dead_full or ("::" not in nm and nm in dead_bases) for nm in names)

    def has_body(case) -> bool:
        value = case.child_by_field_name("value")
        return any(c != value and c.type != "comment" for c in case.named_children)

    def label_end(case) -> int:
        colon = next((c for c in case.children if c.type == ":"), None)
        return colon.end_byte if colon is not None else case.end_byte

    edits: list[tuple[int, int]] = []
    for body in walk(tree.root_node):
        if body.type != "compound_statement" or body.parent is None or body.parent.type != "switch_statement":
            continue
        group: list = []
        for case in [c for c in body.named_children if c.type == "case_statement"]:
            group.append(case)
            if not has_body(case):
                continue
            dead_flags = [is_dead(c) for c in group]
            if all(dead_flags):
                edits.extend((c.start_byte, c.end_byte) for c in group)
            else:
                edits.extend((c.start_byte, label_end(c)) for c, d in zip(group, dead_flags) if d)
            group = []
        edits.extend((c.start_byte, c.end_byte) for c in group if is_dead(c))  # trailing labels
    for s, e in sorted(set(edits), key=lambda x: -x[0]):
        # take the line's leading indentation and trailing newline with it
        ls = data.rfind(b"\n", 0, s) + 1
        if data[ls:s].strip() == b"":
            s = ls
            if data[e:e + 1] == b"\n":
                e += 1
        data = data[:s] + data[e:]
    return data.decode("utf-8", errors="replace")


def fork_flow(text: str, src: TargetProfile, dst: TargetProfile) -> str:
    """The baseline: the source function with the target renamed, nothing else."""
    return rename_target(text, src, dst)


# --------------------------------------------------------------------------- consensus
def statement_accuracy(generated: Sequence[str], reference: Sequence[str]) -> tuple[float, float]:
    """(aligned, bag): share of ``reference``'s statements that ``generated`` reproduces, in
    order (longest matching blocks) and as a multiset. The "correct statements" measure."""
    if not reference:
        return (1.0, 1.0) if not generated else (0.0, 0.0)
    sm = difflib.SequenceMatcher(None, list(generated), list(reference), autojunk=False)
    aligned = sum(b.size for b in sm.get_matching_blocks()) / len(reference)
    bag = sum((Counter(generated) & Counter(reference)).values()) / len(reference)
    return aligned, bag


def consensus_scores(statements: dict[str, Sequence[str]]) -> dict[str, float]:
    """Minimum-Bayes-risk selection: each candidate's mean statement accuracy when the *other*
    candidates (all adapted to the same target) stand in for the unknown real implementation.
    The candidate that best reproduces what the others agree on is the safest fork."""
    ids = list(statements)
    out = {}
    for i in ids:
        others = [j for j in ids if j != i]
        out[i] = (sum(statement_accuracy(statements[i], statements[j])[0] for j in others) / len(others)) \
            if others else 0.0
    return out


# --------------------------------------------------------------------------- parameters
def definition_parameters(text: str) -> Optional[list[tuple[str, Optional[str]]]]:
    """``parameters_of`` the first function definition in ``text`` (None when there is none)."""
    from corpora.backends.tree import parameters_of

    tree = cpp_parser().parse(prepare_cpp(text.encode()))
    fn = next((n for n in walk(tree.root_node) if n.type == "function_definition"), None)
    decl = fn.child_by_field_name("declarator") if fn is not None else None
    fdecl, _ = function_declarator(decl) if decl is not None else (None, None)
    return parameters_of(fdecl) if fdecl is not None else None


def _type_key(param: tuple[str, Optional[str]]) -> str:
    """A parameter's type as written: its text without its name, tokens single-spaced."""
    text, name = param
    toks = re.findall(r"\w+|::|\S", text)
    if name and name in toks:
        i = len(toks) - 1 - toks[::-1].index(name)
        toks = toks[:i] + toks[i + 1:]
    return " ".join(toks)


def pair_parameters(own: Sequence[tuple[str, Optional[str]]],
                    declared: Sequence[tuple[str, Optional[str]]]) -> list[tuple[int, int]]:
    """(donor index, declared index) pairs of two parameter lists of different lengths: parameters
    of the same type in order (longest matching blocks: LLVM 19's ``loadRegFromStackSlot`` keeps
    LLVM 15's six parameters and appends ``Register VReg``), then, where a stretch of unmatched
    parameters has the same length on both sides, by position (a changed type: ``unsigned`` ->
    ``Register``). A parameter in an uneven stretch stays unpaired."""
    sm = difflib.SequenceMatcher(None, [_type_key(p) for p in own], [_type_key(p) for p in declared],
                                 autojunk=False)
    pairs = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            pairs.extend(zip(range(i1, i2), range(j1, j2)))
    return pairs


def fit_parameters(text: str, declared: Sequence[tuple[str, Optional[str]]],
                   any_arity: bool = False) -> tuple[str, dict[str, str]]:
    """The definition's parameters as the target declares the function (``declared``: its own
    header's parameters, ``corpora.backends.tree.function_declarations``): each parameter's text
    becomes the declaration's (the target's types, for an API the donor's LLVM version spelled
    otherwise) and each renamed parameter is renamed in the body too. A parameter the declaration
    leaves unnamed keeps the donor's text (the body may read it). When the counts agree; with
    ``any_arity`` also when they differ (the API gained or lost a parameter between the donor's
    LLVM and the target's): the list becomes the declaration's and the donor's parameters are
    paired with it by ``pair_parameters`` for the renaming (an unpaired donor parameter's uses stay
    as they are; a declared parameter left unnamed that the body reads gets the donor's name). Never
    when a new name is already another name of the function; then the text is returned unchanged.
    Returns (text, {old name: new name})."""
    from corpora.backends.tree import parameters_of

    data = prepare_cpp(text.encode())
    tree = cpp_parser().parse(data)
    fn = next((n for n in walk(tree.root_node) if n.type == "function_definition"), None)
    decl = fn.child_by_field_name("declarator") if fn is not None else None
    fdecl, _ = function_declarator(decl) if decl is not None else (None, None)
    own = parameters_of(fdecl) if fdecl is not None else None
    same = own is not None and len(own) == len(declared)
    if own is None or (not same and not any_arity) or (same and not declared) or own == list(declared):
        return text, {}
    pairs = list(zip(range(len(own)), range(len(declared)))) if same else pair_parameters(own, declared)
    renames = {own[i][1]: declared[j][1] for i, j in pairs
               if own[i][1] and declared[j][1] and own[i][1] != declared[j][1]}
    kept = {own[i][1] for i, j in pairs if own[i][1] and not declared[j][1]}
    paired_decl = {j for _, j in pairs}
    unpaired_own = {own[i][1] for i in range(len(own)) if own[i][1]} - {own[i][1] for i, _ in pairs}
    added = {d[1] for j, d in enumerate(declared) if d[1] and j not in paired_decl}
    params = fdecl.child_by_field_name("parameters")
    names = {data[n.start_byte:n.end_byte].decode(errors="replace") for n in walk(fn)
             if n.type == "identifier" and not (params.start_byte <= n.start_byte < params.end_byte)}
    if len(set(renames.values())) != len(renames) or (set(renames.values()) & ((names | kept) - set(renames))) \
            or (added & (names - unpaired_own - set(renames))) or (added & set(renames.values())):
        return text, {}
    if same:
        nodes = [c for c in params.named_children if c.type != "comment"]
        edits = [(n.start_byte, n.end_byte, d[0]) for n, o, d in zip(nodes, own, declared) if d[1] or not o[1]]
    else:
        by_decl = {j: i for i, j in pairs}
        texts = [d[0] if d[1] or j not in by_decl or not own[by_decl[j]][1] or own[by_decl[j]][1] not in names
                 else f"{d[0]} {own[by_decl[j]][1]}" for j, d in enumerate(declared)]
        edits = [(params.start_byte, params.end_byte, "(" + ", ".join(texts) + ")")]
    for n in walk(fn):
        if n.type == "identifier" and not (params.start_byte <= n.start_byte < params.end_byte):
            name = data[n.start_byte:n.end_byte].decode(errors="replace")
            if name in renames:
                edits.append((n.start_byte, n.end_byte, renames[name]))
    out = text.encode()  # prepare_cpp keeps byte offsets, so edits apply to the original
    for s, e, rep in sorted(edits, key=lambda x: -x[0]):
        out = out[:s] + rep.encode() + out[e:]
    return out.decode("utf-8", errors="replace"), renames


# --------------------------------------------------------------------------- definition form
def fit_definition(text: str, qualified_name: str, in_class: bool) -> str:
    """Make a function definition fit its destination: in a class body (unqualified name) or out
    of line (``Class::name``, no ``override``/``final``/``virtual``/``static``)."""
    data = prepare_cpp(text.encode())
    tree = cpp_parser().parse(data)
    fn = next((n for n in walk(tree.root_node) if n.type == "function_definition"), None)
    if fn is None:
        return text
    decl = fn.child_by_field_name("declarator")
    fdecl, name = function_declarator(decl) if decl is not None else (None, None)
    if name is None:
        return text
    edits: list[tuple[int, int, bytes]] = []
    parts = qualified_name.split("::")
    is_member = len(parts) > 1
    new_name = parts[-1] if in_class else qualified_name
    edits.append((name.start_byte, name.end_byte, new_name.encode()))
    if not in_class and is_member:
        for n in walk(fn):
            if n.type == "virtual_specifier" or (n.type in ("virtual", "storage_class_specifier")
                                                 and n.text in (b"virtual", b"static")):
                if n.start_byte < (fn.child_by_field_name("body") or fn).start_byte:
                    edits.append((n.start_byte, n.end_byte, b""))
    out = text.encode()  # prepare_cpp keeps byte offsets, so edits apply to the original
    for s, e, rep in sorted(edits, key=lambda x: -x[0]):
        out = out[:s] + rep + out[e:]
    return out.decode("utf-8", errors="replace")
