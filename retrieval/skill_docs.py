"""What of a kernel skill gets indexed, and how query code is cut into comparable pieces.

Index side: a skill becomes several *documents*, one per distinct code form it was seen in
(its exemplar, then every piece of evidence: the same optimization mined from another kernel).
Each document has three views, one per retrieval modality:

* ``text``  (MiniLM):  name + intent + carrier + anchor (function, loop) + simpler and optimized code;
* ``code``  (graph):   the *simpler* form only: un-optimized query code looks like it;
* ``terms`` (BM25):    the text view's words and code tokens.

Query side (``query_units``): the text modality embeds the kernels of the query (at most
``MAX_TEXT_UNITS``) cut into consecutive chunks of whole lines of at most ``TEXT_CHUNK_TOKENS``
MiniLM tokens (comments and blank lines dropped), at most ``QUERY_TEXT_TOKENS`` tokens per query;
a document scores as its best chunk. Chunks bound the cost of one embedding (MiniLM's cost grows
with the tokens: ~0.17 ms per token on one core), let a server that re-embeds an edited kernel
reuse every chunk the edit did not touch, and compare a query with documents at the scale of
their excerpts (a few lines) rather than of a whole kernel. The graph modality embeds overlapping
windows of a few lines, parsed on their own exactly as documents are, so a window and an excerpt
are compared at the same granularity, and the best window names the matched lines.

Everything here is a pure function of its input; skills may be ``Skill`` records or their JSON
dicts (the query path never imports pydantic).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

TEXT_CHARS = 1800  # text view cap (256 MiniLM tokens hold ~1000-1500 characters of code)
GRAPH_MAX_NODES = 256  # per document / per query window
WINDOW_LINES = 6
WINDOW_STRIDE = 3
MAX_TEXT_UNITS = 4  # kernels read by the text modality
TEXT_CHUNK_TOKENS = 64  # per text chunk, [CLS]/[SEP] included: ~11 ms on one core
QUERY_TEXT_TOKENS = 512  # per query: bounds the text modality's cost on very long files
MAX_GRAPH_UNITS = 64


def as_dict(skill: Any) -> dict:
    if isinstance(skill, dict):
        return skill
    return skill.model_dump(mode="json")


def _squash(code: str) -> str:
    """Comment-free, blank-line-free code (whitespace inside lines kept)."""
    code = re.sub(r"/\*.*?\*/", " ", code, flags=re.S)
    code = re.sub(r"//[^\n]*", "", code)
    return "\n".join(ln.rstrip() for ln in code.splitlines() if ln.strip())


@dataclass
class SkillDoc:
    skill_id: str
    role: str  # "exemplar" | "evidence"
    problem: str  # where this form was seen ('' for an exemplar of unknown origin)
    text: str
    code: str
    terms: str
    sha: str = ""
    doc_id: str = ""

    def __post_init__(self):
        if not self.sha:
            self.sha = hashlib.sha1(f"{self.text}\x00{self.code}\x00{self.terms}".encode()).hexdigest()[:16]
        if not self.doc_id:
            self.doc_id = f"{self.skill_id}#{self.sha}"


def _text_view(s: dict, before: str, after: str, function: str = "", loop: str = "", op_type: str = "") -> str:
    parts = [f"{s.get('name', '')}: {s.get('intent', '')}".strip(": "),
             f"optimization: {s.get('carrier', '')}" + (f" ({s['variant']})" if s.get("variant") else "")]
    where = []
    if op_type:
        where.append(f"{op_type} kernel")
    if function:
        where.append(f"in {function}")
    if loop:
        where.append(f"loop {loop}")
    if where:
        parts.append(" ".join(where))
    if before:
        parts.append("before:\n" + _squash(before))
    if after:
        parts.append("after:\n" + _squash(after))
    return "\n".join(p for p in parts if p)[:TEXT_CHARS]


def skill_docs(skill: Any) -> list[SkillDoc]:
    """The documents of one skill: exemplar first, then one per distinct evidence form."""
    s = as_dict(skill)
    sid = s["skill_id"]
    anchor = s.get("anchor") or {}
    out: list[SkillDoc] = []
    seen: set[str] = set()
    forms: list[tuple[str, str, str, str, str, str]] = []  # role, problem, before, after, function, loop
    ex_problem = ""
    for ev in s.get("evidence") or []:
        if ev.get("before") == s.get("before") and ev.get("after") == s.get("after"):
            ex_problem = ev.get("problem", "")
            break
    if s.get("before") or s.get("after"):
        forms.append(("exemplar", ex_problem, s.get("before", ""), s.get("after", ""), anchor.get("function", ""),
                      anchor.get("enclosing_loop", "")))
    op_types = {ev.get("problem", ""): ev.get("op_type", "") for ev in s.get("evidence") or []}
    for ev in s.get("evidence") or []:
        forms.append(("evidence", ev.get("problem", ""), ev.get("before", ""), ev.get("after", ""), "", ""))
    for role, problem, before, after, function, loop in forms:
        code = _squash(before) or _squash(after)
        key = code + "\x00" + _squash(after)
        if not code or key in seen:
            continue
        seen.add(key)
        text = _text_view(s, before, after, function, loop, op_types.get(problem, ""))
        terms = " ".join([s.get("name", ""), s.get("intent", ""), s.get("carrier", ""), s.get("operator", ""),
                          _squash(before), _squash(after)])
        out.append(SkillDoc(sid, role, problem, text, code, terms))
    if not out:  # a skill with no code at all is still findable by its words
        text = _text_view(s, "", "")
        out.append(SkillDoc(sid, "exemplar", "", text, "", text))
    return out


# --------------------------------------------------------------------------- query side
@dataclass
class Unit:
    kind: str  # "function" | "window" | "text"
    start_line: int  # 1-based, inclusive
    end_line: int
    function: str
    text: str
    graph: Any = None  # SyntaxGraph (filled for graph units)


@dataclass
class QueryUnits:
    text_units: list[Unit] = field(default_factory=list)
    graph_units: list[Unit] = field(default_factory=list)
    whole: str = ""


def code_graph(code: str, max_nodes: int = GRAPH_MAX_NODES):
    """SyntaxGraph of a code excerpt, parsed on its own (tree-sitter-cuda, comments skipped)."""
    from corpora.code.parse import parse_cuda
    from retrieval.graphs import syntax_graph, vocab_for

    tree = parse_cuda(code.encode())
    return syntax_graph(tree.root_node, vocab_for("cuda"), max_nodes=max_nodes)


def _windows(lines: list[str], start: int, end: int, size: int, stride: int) -> list[tuple[int, int]]:
    """1-based inclusive line windows over [start, end] that hold code (not blank/comment only)."""
    out = []
    s = start
    while s <= end:
        e = min(end, s + size - 1)
        if any(ln.strip() and not ln.strip().startswith("//") for ln in lines[s - 1:e]):
            out.append((s, e))
        if e >= end:
            break
        s += stride
    return out


def text_chunks(lines: list[str], start: int, end: int, count_tokens: Callable[[list[str]], list[int]],
                max_tokens: int = TEXT_CHUNK_TOKENS) -> list[tuple[int, int, str, int]]:
    """(first line, last line, text, tokens) chunks of lines [start, end] (1-based, inclusive): consecutive
    code lines, comments and blank lines dropped, each chunk at most ``max_tokens`` tokens with the
    two special tokens (a longer line is a chunk of its own). ``count_tokens(texts)`` -> tokens per
    text without special tokens."""
    kept = []
    for ln in range(start, end + 1):
        t = re.sub(r"//[^\n]*", "", lines[ln - 1]).rstrip() if ln - 1 < len(lines) else ""
        if t.strip():
            kept.append((ln, t))
    if not kept:
        return []
    counts = count_tokens([t for _, t in kept])
    out, cur, n = [], [], 2
    for (ln, t), c in zip(kept, counts):
        if cur and n + c > max_tokens:
            out.append((cur[0][0], cur[-1][0], "\n".join(x for _, x in cur), n))
            cur, n = [], 2
        cur.append((ln, t))
        n += c
    if cur:
        out.append((cur[0][0], cur[-1][0], "\n".join(x for _, x in cur), n))
    return out


def query_units(source: str, functions: Optional[list] = None, with_graphs: bool = True,
                count_tokens: Optional[Callable[[list[str]], list[int]]] = None) -> QueryUnits:
    """Cut query code into text units and graph units (line windows).

    ``functions``: FunctionSig list from corpora.code.parse.functions (computed here if None).
    ``count_tokens``: MiniLM token counts per text; with it the text units are the line chunks of
    ``text_chunks`` (the query path), without it one unit per kernel.
    """
    lines = source.splitlines()
    n = len(lines)
    if functions is None:
        from corpora.code.parse import functions as parse_functions, parse_cuda

        functions = parse_functions(parse_cuda(source.encode()))
    spans = []
    raw = source.encode()
    for f in functions:
        end_line = raw[:f.end_byte].count(b"\n") + 1
        head = raw[f.start_byte:f.end_byte].split(b"{", 1)[0]
        spans.append((f.line, end_line, f.name, getattr(f, "is_kernel", False) or b"__device__" in head))
    if not spans:
        spans = [(1, max(n, 1), "", True)]
    # kernels first: they carry the optimizations, and the unit caps keep the cost bounded
    spans.sort(key=lambda t: (not t[3], t[0]))
    qu = QueryUnits(whole=source)
    device = [sp for sp in spans if sp[3]] or spans
    budget = QUERY_TEXT_TOKENS
    # block comments blanked with their line breaks kept, so chunk line numbers stay the query's
    code_lines = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), source, flags=re.S).splitlines()
    for (a, b, name, _) in device[:MAX_TEXT_UNITS]:
        if count_tokens is None:  # one unit per kernel (MiniLM truncates at its token limit)
            qu.text_units.append(Unit("function", a, b, name, "\n".join(lines[a - 1:b])))
            continue
        for (s, e, t, n) in text_chunks(code_lines, a, b, count_tokens):
            if n > budget and qu.text_units:
                break
            budget -= n
            qu.text_units.append(Unit("chunk", s, e, name, t))
    if with_graphs:
        for (a, b, name, _) in spans:
            for (s, e) in _windows(lines, a, b, WINDOW_LINES, WINDOW_STRIDE):
                qu.graph_units.append(Unit("window", s, e, name, "\n".join(lines[s - 1:e])))
    qu.graph_units = qu.graph_units[:MAX_GRAPH_UNITS]
    return qu


def unit_graph(u: Unit):
    """The unit's syntax graph (built on first use: a cached embedding needs none)."""
    if u.graph is None:
        u.graph = code_graph(_squash(u.text) or u.text)
    return u.graph
