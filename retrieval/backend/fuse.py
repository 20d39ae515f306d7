"""Multi-donor fork-and-adapt: add to the chosen fork the statements most other donors agree on.

Fork-and-adapt forks one donor (the one whose adaptation best reproduces what the others agree
on). What that donor lacks and the others share is likely in the new target's function too:
an ``assert``, a ``(void)`` of an unused parameter, a lookup the others all do first. This pass
aligns each other donor's adapted statements with the fork's (difflib, as statement accuracy
does), collects the plain statements a donor has where the fork has none, anchored after the
last statement the two share, and inserts a statement where at least ``min_share`` of the other
donors (and ``min_votes`` of them) put it, copying the text of the first donor that has it.

Only statements that read nothing the fork cannot see are added: every plain name in them (not
a member after ``.``/``->``, a qualified name, a called function or a keyword) must occur in
the fork already, except the name a declaration introduces; a declaration of a name the fork
already uses is not added. Control flow (``return``, ``break``, ``continue``, ``goto``) is
never added: the fork's paths stay its own. Insertion points are where ``statements_of`` says
a statement following that entry goes (after a plain statement, inside a braced block's
``{``, after a ``case`` label); the result is parsed again and must list exactly the statements
planned, or the fork is returned unchanged.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from collections import Counter
from typing import Iterable, Optional, Sequence

from corpora.backends.tree import cpp_parser, prepare_cpp, statements_of, walk

# two of the next five donors suffice: a statement that well supported is in the target's function
# more often than the fork's own statements are (on the development and the unseen targets alike,
# eval/results/backend_unseen_llvm19.json, docs/backends.md), so adding it raises both
# accuracy and precision; half (three of five) left such statements out
MIN_SHARE = 0.4
MIN_VOTES = 2
DEFAULT_DONORS = 6  # top-k donors whose votes count (the fork included); 1: one donor, no fusion
_CONTROL = ("return", "break", "continue", "goto", "co_return", "throw")
_KEYWORDS = frozenset("""alignas alignof and asm auto bool break case catch char char16_t char32_t class const
constexpr const_cast continue decltype default delete do double dynamic_cast else enum explicit export extern false
float for friend goto if inline int long mutable namespace new noexcept not nullptr operator or private protected
public register reinterpret_cast return short signed sizeof static static_assert static_cast struct switch template
this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while
uint8_t uint16_t uint32_t uint64_t int8_t int16_t int32_t int64_t size_t""".split())
_WORD = re.compile(r"[A-Za-z_]\w*")


@dataclass
class FuseResult:
    code: str
    added: list[dict] = field(default_factory=list)  # {"statement", "after", "votes", "of"}

    def to_dict(self) -> dict:
        return {"added": self.added}


def _body_sites(code: str):
    """(statements, sites, body node, data) of the first function definition in ``code``;
    the member-initializer list, when present, is the first statement (no insertion site)."""
    data = prepare_cpp(code.encode())
    tree = cpp_parser().parse(data)
    fn = next((n for n in walk(tree.root_node) if n.type == "function_definition"), None)
    body = fn.child_by_field_name("body") if fn is not None else None
    if body is None:
        return None
    sites: list = []
    stmts = statements_of(body, sites)
    init = next((c for c in fn.children if c.type == "field_initializer_list"), None)
    if init is not None:
        from corpora.backends.tree import StatementSite, norm

        stmts = [norm(init)] + stmts
        sites = [StatementSite(stmts[0], init.start_byte, init.end_byte, None)] + sites
    return stmts, sites, body, data


def _free_names(stmt: str) -> set[str]:
    """Plain names a normalized statement reads: not after ``.``/``->``/``::``, not before
    ``::`` or ``(``, not keywords."""
    toks = stmt.split(" ")
    out = set()
    for i, t in enumerate(toks):
        if not _WORD.fullmatch(t) or t in _KEYWORDS:
            continue
        prev = toks[i - 1] if i else ""
        nxt = toks[i + 1] if i + 1 < len(toks) else ""
        if prev in (".", "->", "::") or nxt in ("::", "("):
            continue
        out.add(t)
    return out


def _declared_name(stmt: str) -> Optional[str]:
    """The name a declaration statement introduces (``unsigned Opc = ...`` -> ``Opc``), else None."""
    head = stmt.split(" = ", 1)[0].split(" ( ", 1)[0] if " = " in stmt or " ( " in stmt else stmt.rstrip(" ;")
    words = [w for w in head.split(" ") if _WORD.fullmatch(w)]
    if len(words) >= 2 and words[-1] not in _KEYWORDS:
        return words[-1]
    return None


def _addable(stmt: str, fork_names: set[str], is_declaration: bool) -> bool:
    if not stmt.endswith(";") or stmt.split(" ", 1)[0] in _CONTROL:
        return False
    own = _declared_name(stmt) if is_declaration else None
    if own is not None and own in fork_names:
        return False  # the fork already has something of that name
    return all(n in fork_names or n == own for n in _free_names(stmt))


def fuse(fork_code: str, others: Sequence[str], min_share: float = MIN_SHARE,
         min_votes: int = MIN_VOTES, known: Iterable[str] = ()) -> FuseResult:
    """``fork_code`` (the chosen donor, adapted and fitted) with the statements the ``others``
    (the other donors, adapted to the same target) agree on added; see the module doc.
    ``known``: names that resolve in the target besides the fork's own (its declarations,
    attributes, header members); a statement may read them."""
    base = _body_sites(fork_code)
    if base is None or not others:
        return FuseResult(fork_code)
    pick, sites, body, data = base
    fork_names = set(_WORD.findall(fork_code))
    # statement -> {donor: (anchor, its index in that donor, its text, is a declaration)}: a vote
    # counts the statement wherever the donor puts it; the donors' anchors decide where it goes
    votes: dict[str, dict[int, tuple[int, int, str, bool]]] = {}
    for j, code in enumerate(others):
        got = _body_sites(code)
        if got is None:
            continue
        stm, osites, _, odata = got
        matched = {}
        for a, b, size in SequenceMatcher(None, pick, stm, autojunk=False).get_matching_blocks():
            for k in range(size):
                matched[b + k] = a + k
        anchor = -1
        for bi, x in enumerate(stm):
            if bi in matched:
                anchor = matched[bi]
                continue
            if x in pick or not x.endswith(";") or x.split(" ", 1)[0] in _CONTROL or j in votes.get(x, {}):
                continue
            site = osites[bi]
            node_text = odata[site.start_byte:site.end_byte].decode("utf-8", errors="replace")
            votes.setdefault(x, {})[j] = (anchor, bi, node_text, _is_declaration(odata, site))
    need = max(min_votes, math.ceil(min_share * len(others)))
    planned_at = []
    for x, by in votes.items():
        if len(by) < need:
            continue
        # the anchor most voters share; a tie goes to the best-ranked donor's
        count = Counter(v[0] for v in by.values())
        top = max(count.values())
        j0 = min(j for j, v in by.items() if count[v[0]] == top)
        planned_at.append((by[j0][0], j0, by[j0][1], x, by[j0]))
    planned_at.sort(key=lambda t: t[:3])
    avail = fork_names | set(known)
    edits: list[tuple[int, str]] = []
    planned = list(pick)
    added = []
    offset = 0
    for a, _, _, x, (_, _, text, is_decl) in planned_at:
        if not _addable(x, avail, is_decl):
            continue
        at = body.children[0].end_byte if a < 0 and body.children and body.children[0].type == "{" else \
            (sites[a].insert_at if a >= 0 else None)
        if at is None:
            continue
        own = _declared_name(x) if is_decl else None
        if own:
            avail.add(own)  # later statements may read what an added declaration introduces
        indent = _indent_for(data, sites, a)
        edits.append((at, "\n" + indent + " ".join(text.split())))
        planned.insert(a + 1 + offset, x)
        offset += 1
        added.append({"statement": x, "after": pick[a] if a >= 0 else "{", "votes": len(votes[x]),
                      "of": len(others)})
    if not edits:
        return FuseResult(fork_code)
    # prepare_cpp keeps byte offsets, so the edits apply to the original text; from the end, and
    # at one position the later-planned statement first, so they land in planned order
    raw = fork_code.encode()
    for _, (at, text) in sorted(enumerate(edits), key=lambda e: (-e[1][0], -e[0])):
        raw = raw[:at] + text.encode() + raw[at:]
    result = raw.decode("utf-8", errors="replace")
    check = _body_sites(result)
    if check is None or check[0] != planned:
        return FuseResult(fork_code)
    return FuseResult(result, added)


def fuse_top(fork_code: str, ranked_donors: Sequence[str], k: int = DEFAULT_DONORS,
             known: Iterable[str] = ()) -> FuseResult:
    """Fusion over the top-``k`` donors of a ranking: ``fork_code`` is the first one's adapted
    text, ``ranked_donors`` the next ones' (adapted to the same target, best first). A statement
    goes in when at least ``MIN_SHARE`` of the ``k``-1 others have it, at least 2 votes (k = 6:
    two of the five others; k = 3: both others). ``k`` <= 1 returns the fork."""
    others = list(ranked_donors[:max(0, k - 1)])
    if k <= 1 or not others:
        return FuseResult(fork_code)
    return fuse(fork_code, others, min_share=MIN_SHARE, min_votes=MIN_VOTES, known=known)


def _is_declaration(data: bytes, site) -> bool:
    from corpora.backends.tree import cpp_parser

    snippet = data[site.start_byte:site.end_byte]
    tree = cpp_parser().parse(b"void f() {" + snippet + b"}")
    fn = tree.root_node.children[0] if tree.root_node.children else None
    body = fn.child_by_field_name("body") if fn is not None else None
    first = body.named_children[0] if body is not None and body.named_children else None
    return first is not None and first.type == "declaration"


def _indent_for(data: bytes, sites, a: int) -> str:
    """The indentation of the anchor statement's line (the first statement's for the body start)."""
    idx = a if a >= 0 else (0 if sites else -1)
    if idx < 0 or idx >= len(sites):
        return "  "
    start = data.rfind(b"\n", 0, sites[idx].start_byte) + 1
    line = data[start:sites[idx].start_byte].decode("utf-8", errors="replace")
    ws = line[: len(line) - len(line.lstrip())]
    if a >= 0 and sites[a].insert_at is not None and sites[a].insert_at != sites[a].end_byte:
        ws += "  "  # inside the block the header opens
    return ws or "  "
