"""The LLM-proposed deoptimization operator.

The deterministic operators (mining/operators/) know a fixed list of rewrites; this one asks a
model for the next simplification of a kernel and turns its answer into a candidate of the same
shape: a new source, the carrier it claims to remove, and the byte range of the old source it
changed. The walk gates it like any other candidate.

    if enabled(model):
        result = propose(source, problem_summary=summarize_problem(problem_dir),
                         carriers_present=detect_carriers(source), rejected=steps, model=model)
        for cand in result.candidates: ...           # gate cand.new_source
        for fail in result.failures: ...             # record fail.reason (never raised)

Prompt: mining/deoptimize.md (the kernel with line numbers, the problem, the carriers still
present, what was already rejected and why). The model answers in a strict format:

    CARRIER: <name from the carrier vocabulary>
    DESCRIPTION: <one line>
    <<<<<<< SEARCH
    <exact lines of the kernel>
    =======
    <replacement lines>
    >>>>>>> REPLACE

SEARCH/REPLACE blocks rather than unified diffs: models get hunk headers and context counts
wrong far more often than they fail to copy lines. Matching is exact first, then tolerant of
trailing whitespace, then of indentation (the replacement re-indented to the file's), then a
unique substring; a SEARCH text must match exactly one place.

The reply is untrusted text. It is parsed and spliced here and nothing more: no code from it is
run in this process. A reply that does not parse, does not apply, changes nothing but comments,
breaks the syntax tree, or adds `#include`/inline assembly becomes a Failure with a reason; the
gate compiles and runs accepted candidates later in its sandboxed subprocess.

Off unless a model is given (`model=` / `--model`) or `SKILLS_MODEL` is set: `enabled()` is then
False and `propose()` calls nothing.
"""
from __future__ import annotations

import difflib
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from corpora.code.edit import Edit, changed_span

OPERATOR_NAME = "llm_deoptimize"
PROMPT_FILE = Path(__file__).resolve().parent / "deoptimize.md"
MAX_BLOCKS = 4
MAX_REJECTED = 24  # most recent rejections shown in the prompt
MAX_SITES_SHOWN = 4  # per carrier
# prompt sections cut (in this order) when the prompt does not fit the model's context window;
# the kernel, the rules and the answer format are never cut
CUTTABLE = ("Already tried and rejected", "Optimizations still present", "The problem")


# --------------------------------------------------------------------------- results
@dataclass
class Candidate:
    """One applied proposal. `edit` is the changed byte range of the OLD source and what stands there
    in the new one: ``old[:edit.start] + edit.replacement + old[edit.end:] == new_source``."""
    new_source: str
    carrier: str
    description: str
    edit: Edit
    line: int  # 1-based line of `start` in the old source
    excerpt: str  # the old code of the changed region (first lines, stripped)
    diff: str  # unified diff old -> new
    raw: str  # the model's reply, verbatim
    blocks: int = 1
    carrier_sites_before: Optional[int] = None  # detected sites of `carrier` in the old / new source
    carrier_sites_after: Optional[int] = None
    operator: str = OPERATOR_NAME
    proposer: str = "llm"
    model: str = ""
    call: int = 0  # which of the n calls produced it

    @property
    def start(self) -> int:
        return self.edit.start

    @property
    def end(self) -> int:
        return self.edit.end

    @property
    def replacement(self) -> str:
        return self.edit.replacement

    @property
    def start_byte(self) -> int:  # the names Site and Step use
        return self.edit.start

    @property
    def end_byte(self) -> int:
        return self.edit.end

    @property
    def removes_carrier(self) -> Optional[bool]:
        """True when the named carrier has fewer detected sites after the edit (None: unknown)."""
        if self.carrier_sites_before is None or self.carrier_sites_after is None:
            return None
        return self.carrier_sites_after < self.carrier_sites_before

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["removes_carrier"] = self.removes_carrier
        return d


@dataclass
class Failure:
    """A reply that gave no candidate, and why (one line)."""
    reason: str
    kind: str  # call_error | context | empty | truncated | no_proposal | malformed | unknown_carrier | not_found | ambiguous | overlap | no_change | syntax | forbidden | duplicate | disabled
    raw: str = ""
    call: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ProposalResult:
    candidates: list[Candidate] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    model: str = ""
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    prompts: list[str] = field(default_factory=list)  # the prompt of each call, in order
    call_log: list[dict] = field(default_factory=list)  # per call: usage, finish reason, prompt cut, outcome

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self, with_prompts: bool = False) -> dict[str, Any]:
        d = {"model": self.model, "calls": self.calls, "prompt_tokens": self.prompt_tokens,
             "completion_tokens": self.completion_tokens, "tokens": self.tokens,
             "cost_usd": round(self.cost_usd, 6), "seconds": round(self.seconds, 3),
             "candidates": [c.to_dict() for c in self.candidates],
             "failures": [f.to_dict() for f in self.failures], "call_log": list(self.call_log)}
        if with_prompts:
            d["prompts"] = list(self.prompts)
        return d


class ReplyError(ValueError):
    """A reply that does not parse or does not apply (internal; becomes a Failure)."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


# --------------------------------------------------------------------------- configuration
def resolve_model(model: Optional[str] = None) -> Optional[str]:
    """The model to use: the argument, else $SKILLS_MODEL, else None."""
    m = (model or os.environ.get("SKILLS_MODEL") or "").strip()
    return m or None


def enabled(model: Optional[str] = None) -> bool:
    """True when a model is configured (argument or SKILLS_MODEL)."""
    return resolve_model(model) is not None


def vocabulary() -> list[str]:
    """The carrier names a proposal may claim (mining/carriers.py detectors, corpus README)."""
    from mining.carriers import DETECTORS

    return list(DETECTORS)


# --------------------------------------------------------------------------- prompt
def _render(template: str, **values: str) -> str:
    def sub(m: re.Match) -> str:
        if m.group(1) not in values:
            raise KeyError(f"template needs {m.group(1)!r}")
        return str(values[m.group(1)])

    return re.sub(r"\{\{(\w+)\}\}", sub, template)


def number_lines(source: str) -> str:
    lines = source.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    width = max(3, len(str(len(lines))))
    return "\n".join(f"{i:>{width}}| {line}" for i, line in enumerate(lines, start=1))


def summarize_problem(problem: Any) -> str:
    """A few lines on the problem for the prompt: a problem folder (path) or a loaded Problem."""
    from corpora.problem import Problem, load_problem

    p = problem if isinstance(problem, Problem) else load_problem(Path(problem))
    d = p.definition

    def tensor(name: str, spec) -> str:
        shape = "scalar" if spec.shape is None else "[" + ", ".join(str(s) for s in spec.shape) + "]"
        return f"{name} {spec.dtype}{shape}"

    axes = ", ".join(f"{k} ({a.type}{'=' + str(a.value) if a.value is not None else ''})" for k, a in d.axes.items())
    lines = [f"- name: {d.name} (op_type {d.op_type}){': ' + d.description if d.description else ''}",
             f"- axes: {axes}",
             "- inputs: " + ", ".join(tensor(k, s) for k, s in d.inputs.items()),
             "- outputs: " + ", ".join(tensor(k, s) for k, s in d.outputs.items())]
    if d.constraints:
        lines.append("- constraints: " + "; ".join(d.constraints))
    if p.workloads:
        shown = []
        for w in p.workloads[:12]:
            sizes = ", ".join(f"{k}={v}" for k, v in w.axes.items())
            shown.append(sizes + (f" ({', '.join(w.tags)})" if w.tags else ""))
        lines.append("- checked on workloads: " + "; ".join(shown))
    tol = sorted({d.tolerance_for(o) for o in d.outputs})
    lines.append("- tolerance (rtol, atol): " + ", ".join(f"{r:g}, {a:g}" for r, a in tol))
    lines.append(f"- entry (host function the harness calls; keep its name and parameters): {p.solution.entry}")
    return "\n".join(lines)


def _format_carriers(carriers_present: Any) -> str:
    if not carriers_present:
        return "(none detected; an optimization the detectors do not know may still be present)"
    out = []
    if isinstance(carriers_present, Mapping):
        for name, sites in carriers_present.items():
            sites = list(sites or [])
            by_line: dict[int, str] = {}
            for s in sites:
                by_line.setdefault(getattr(s, "line", 0), getattr(s, "excerpt", ""))
            where = [f"line {line}: `{excerpt[:100]}`" if line else f"`{excerpt[:100]}`"
                     for line, excerpt in list(by_line.items())[:MAX_SITES_SHOWN]]
            more = f"; and {len(by_line) - MAX_SITES_SHOWN} more lines" if len(by_line) > MAX_SITES_SHOWN else ""
            out.append(f"- {name}" + (f" ({len(sites)} site{'s' if len(sites) != 1 else ''}): " + "; ".join(where)
                                      + more if where else ""))
    else:
        out = [f"- {name}" for name in carriers_present]
    return "\n".join(out)


def _get(item: Any, key: str, default: Any = "") -> Any:
    if isinstance(item, Mapping):
        return item.get(key, default)
    return getattr(item, key, default)


def _format_rejected(rejected: Iterable[Any]) -> str:
    items = list(rejected or [])[-MAX_REJECTED:]
    if not items:
        return "(nothing yet)"
    out = []
    for r in items:
        if isinstance(r, str):
            out.append(f"- {r.strip()}")
            continue
        op = _get(r, "operator") or "?"
        carrier = _get(r, "carrier") or "?"
        line = _get(r, "site_line", 0) or _get(r, "line", 0)
        excerpt = _get(r, "site_excerpt") or _get(r, "excerpt") or ""
        desc = _get(r, "description") or ""
        reason = " ".join(str(_get(r, "reason") or "rejected").split())[:300]
        head = f"- {op} removing {carrier}" + (f" at line {line}" if line else "") + \
               (f" (`{excerpt[:100]}`)" if excerpt else "") + (f": {desc}" if desc else "")
        out.append(f"{head}\n  rejected: {reason}")
        diff = _get(r, "diff") or ""
        if diff and (_get(r, "proposer") == "llm" or op == OPERATOR_NAME):
            body = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))][:8]
            if body:
                out.append("  its change:\n" + "\n".join("    " + ln for ln in body))
    return "\n".join(out)


def build_prompt(source: str, *, problem_summary: str, carriers_present: Any = None, rejected: Iterable[Any] = (),
                 already_proposed: Sequence[Candidate] = (), kernel_name: str = "kernel.cu") -> str:
    rej = _format_rejected(rejected)
    if already_proposed:
        extra = "\n".join(f"- {c.carrier} at line {c.line}: {c.description} (already proposed in this round; "
                          "propose a different one)" for c in already_proposed)
        rej = extra if rej == "(nothing yet)" else rej + "\n" + extra
    return _render(PROMPT_FILE.read_text(), problem_summary=problem_summary.strip() or "(no summary)",
                   kernel_name=kernel_name, numbered_source=number_lines(source),
                   carriers=_format_carriers(carriers_present), rejected=rej,
                   vocabulary=", ".join(f"`{v}`" for v in vocabulary()))


# --------------------------------------------------------------------------- parsing
_SEARCH = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$")
_FIELD = re.compile(r"^[\s>*#-]*(CARRIER|DESCRIPTION)[\s*]*:[\s*]*(.*?)[\s*]*$", re.I)
_FENCE_LINE = re.compile(r"^\s*```[\w+-]*\s*$")
_LINE_NO = re.compile(r"^\s*\d+\s?\| ?")


def _carrier_token(value: str) -> str:
    m = re.match(r"[`'\"]*([A-Za-z0-9_\-/]+)", value.strip())
    return m.group(1).lower() if m else ""


@dataclass
class ParsedReply:
    carrier: str
    description: str
    blocks: list[tuple[list[str], list[str]]]


def parse_reply(text: str) -> ParsedReply:
    """CARRIER, DESCRIPTION and the SEARCH/REPLACE blocks of a reply; ReplyError when malformed."""
    carriers, descriptions, blocks = [], [], []
    state, search, replace = "out", [], []
    for line in text.replace("\r\n", "\n").split("\n"):
        if state == "out":
            if _SEARCH.match(line):
                state, search, replace = "search", [], []
            elif _DIVIDER.match(line) or _REPLACE.match(line):
                raise ReplyError("malformed", "malformed SEARCH/REPLACE block: a divider or REPLACE marker "
                                              "without a preceding SEARCH marker")
            elif (m := _FIELD.match(line)):
                (carriers if m.group(1).upper() == "CARRIER" else descriptions).append(m.group(2).strip())
        elif state == "search":
            if _DIVIDER.match(line):
                state = "replace"
            elif _SEARCH.match(line) or _REPLACE.match(line):
                raise ReplyError("malformed", f"malformed SEARCH/REPLACE block {len(blocks) + 1}: "
                                              "expected a '=======' divider after the SEARCH lines")
            else:
                search.append(line)
        else:  # replace
            if _REPLACE.match(line):
                blocks.append((search, replace))
                state = "out"
            elif _SEARCH.match(line) or _DIVIDER.match(line):
                raise ReplyError("malformed", f"malformed SEARCH/REPLACE block {len(blocks) + 1}: "
                                              "expected '>>>>>>> REPLACE' to close it")
            else:
                replace.append(line)
    if state != "out":
        raise ReplyError("malformed", f"malformed SEARCH/REPLACE block {len(blocks) + 1}: not closed "
                                      "with '>>>>>>> REPLACE' (reply cut off?)")
    names = [_carrier_token(c) for c in carriers]
    carrier = names[0] if names else ""
    if len(set(names)) > 1:
        raise ReplyError("malformed", "more than one CARRIER line: exactly one simplification was asked for")
    if carrier in ("none", "n/a", "nothing") and not blocks:
        raise ReplyError("no_proposal", "the model found nothing left to simplify (CARRIER: none)")
    if not carrier:
        raise ReplyError("malformed", "no 'CARRIER: <name>' line in the reply")
    if not blocks:
        raise ReplyError("malformed", "no SEARCH/REPLACE block in the reply "
                                      "('<<<<<<< SEARCH' ... '=======' ... '>>>>>>> REPLACE')")
    if len(blocks) > MAX_BLOCKS:
        raise ReplyError("malformed", f"{len(blocks)} SEARCH/REPLACE blocks (at most {MAX_BLOCKS} for one simplification)")
    # blocks wrapped in code fences: fence lines inside a block belong to the wrapper, not the code
    cleaned = []
    for s, r in blocks:
        s = [ln for ln in s if not _FENCE_LINE.match(ln)]
        r = [ln for ln in r if not _FENCE_LINE.match(ln)]
        nonblank = [ln for ln in s if ln.strip()]
        if nonblank and all(_LINE_NO.match(ln) for ln in nonblank):  # copied with the prompt's line numbers
            s = [_LINE_NO.sub("", ln, count=1) for ln in s]
            r = [_LINE_NO.sub("", ln, count=1) for ln in r]
        cleaned.append((s, r))
    description = " ".join((descriptions[0] if descriptions else "").split())[:300]
    return ParsedReply(carrier=carrier, description=description, blocks=cleaned)


# --------------------------------------------------------------------------- applying
@dataclass
class _Match:
    start: int  # character offsets into the old text
    end: int
    replacement: str


def _lines_with_offsets(text: str) -> list[tuple[int, str]]:
    out, pos = [], 0
    for line in text.splitlines(keepends=True):
        out.append((pos, line))
        pos += len(line)
    return out


def _indent(s: str) -> str:
    return s[:len(s) - len(s.lstrip(" \t"))]


def _reindent(replace: list[str], search: list[str], found: list[str]) -> list[str]:
    """Replacement lines for a SEARCH text that matched only up to indentation: a line that
    repeats a SEARCH line takes the file's indentation of that line; any other line is shifted by
    the difference between the model's and the file's indentation of a code line (preprocessor
    lines usually sit at column 0 and say nothing about it)."""
    ref = next((k for k, s in enumerate(search) if s.strip() and not s.lstrip().startswith("#")),
               next((k for k, s in enumerate(search) if s.strip()), 0))
    have, said = _indent(found[ref]), _indent(search[ref])
    by_text: dict[str, list[str]] = {}
    for s, f in zip(search, found):
        if s.strip():
            by_text.setdefault(s.strip(), []).append(_indent(f))
    out = []
    for ln in replace:
        if not ln.strip():
            out.append(ln)
        elif by_text.get(ln.strip()):
            out.append(by_text[ln.strip()].pop(0) + ln.strip())
        elif ln.startswith(said):
            out.append(have + ln[len(said):])
        else:
            out.append(ln)
    return out


def _locate(text: str, search: list[str], replace: list[str], index: int) -> _Match:
    while search and not search[0].strip():  # blank lines at the edges carry no position
        search = search[1:]
    while search and not search[-1].strip():
        search = search[:-1]
    if not search:
        raise ReplyError("malformed", f"block {index}: the SEARCH part is empty (it must quote the lines to change)")
    lines = _lines_with_offsets(text)
    bare = [ln.rstrip("\r\n") for _, ln in lines]
    n = len(search)
    for tier, norm in (("exact", lambda s: s), ("trailing", lambda s: s.rstrip()), ("indent", lambda s: s.strip())):
        want = [norm(s) for s in search]
        hits = [i for i in range(len(bare) - n + 1) if [norm(b) for b in bare[i:i + n]] == want]
        if len(hits) > 1:
            raise ReplyError("ambiguous", f"block {index}: the SEARCH text occurs {len(hits)} times "
                                          f"(lines {', '.join(str(h + 1) for h in hits[:6])}); include more lines to make it unique")
        if hits:
            i = hits[0]
            start = lines[i][0]
            last_off, last = lines[i + n - 1]
            end = last_off + len(last)
            newline = last[len(last.rstrip("\r\n")):]
            rep = list(replace)
            if tier == "indent":
                rep = _reindent(rep, search, bare[i:i + n])
            body = "\n".join(rep)
            return _Match(start, end, body + newline if rep else "")
    # a fragment inside a line (e.g. one parameter): a unique plain substring
    frag = "\n".join(search)
    count = text.count(frag)
    if count == 1 and frag.strip():
        start = text.index(frag)
        return _Match(start, start + len(frag), "\n".join(replace))
    if count > 1:
        raise ReplyError("ambiguous", f"block {index}: the SEARCH text occurs {count} times; include more lines to make it unique")
    first = next((s.strip() for s in search if s.strip()), "")
    raise ReplyError("not_found", f"block {index}: the SEARCH text does not occur in the kernel "
                                  f"(first line: {first[:80]!r})")


def apply_blocks(source: str, blocks: Sequence[tuple[list[str], list[str]]]) -> str:
    """Splice every block into `source` (each located in the ORIGINAL text; no overlaps)."""
    matches = [_locate(source, s, r, i) for i, (s, r) in enumerate(blocks, start=1)]
    order = sorted(range(len(matches)), key=lambda k: matches[k].start)
    for a, b in zip(order, order[1:]):
        if matches[b].start < matches[a].end:
            raise ReplyError("overlap", f"blocks {a + 1} and {b + 1} change overlapping lines")
    out = source
    for k in reversed(order):
        m = matches[k]
        out = out[:m.start] + m.replacement + out[m.end:]
    return out


_INCLUDE = re.compile(r"^\s*#\s*(include|import)\b", re.M)
_ASM = re.compile(r"\b(asm|__asm__)\b")


def _code_only(source: str) -> str:
    from corpora.code.source import blank_comments

    return " ".join(blank_comments(source.encode()).decode("utf-8", "replace").split())


def _check(old: str, new: str) -> None:
    if new == old:
        raise ReplyError("no_change", "the edit changes nothing (REPLACE equals SEARCH)")
    if _code_only(new) == _code_only(old):
        raise ReplyError("no_change", "the edit changes only comments or whitespace")
    if len(_INCLUDE.findall(new)) > len(_INCLUDE.findall(old)):
        raise ReplyError("forbidden", "the edit adds an #include line (a simplification never needs one)")
    if len(_ASM.findall(_code_only(new))) > len(_ASM.findall(_code_only(old))):
        raise ReplyError("forbidden", "the edit adds inline assembly")
    from corpora.code.parse import parse_cuda, syntax_issues

    before = syntax_issues(parse_cuda(old), limit=50)
    after = syntax_issues(parse_cuda(new), limit=50)
    if len(after) > len(before):
        old_spots = {(i.kind, i.snippet) for i in before}
        issue = next((i for i in after if (i.kind, i.snippet) not in old_spots), after[-1])
        raise ReplyError("syntax", f"the result does not parse: line {issue.line}:{issue.column}: "
                                   f"{issue.kind} near {issue.snippet!r}")


def _site_count(source: str, carrier: str, cache: dict) -> Optional[int]:
    if source not in cache:
        try:
            from mining.carriers import detect_carriers

            cache[source] = {k: len(v) for k, v in detect_carriers(source).items()}
        except Exception:  # detection is advisory; never lose a candidate to it
            cache[source] = None
    counts = cache[source]
    return None if counts is None else counts.get(carrier, 0)


def candidate_from_reply(source: str, reply: str, *, model: str = "", call: int = 0,
                         kernel_name: str = "kernel.cu", _cache: Optional[dict] = None) -> Candidate:
    """Parse and apply one reply; ReplyError (kind, reason) when it yields no candidate."""
    parsed = parse_reply(reply)
    vocab = vocabulary()
    if parsed.carrier not in vocab:
        close = difflib.get_close_matches(parsed.carrier, vocab, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ReplyError("unknown_carrier", f"unknown carrier {parsed.carrier!r} (not in the vocabulary){hint}")
    new = apply_blocks(source, parsed.blocks)
    _check(source, new)
    edit = changed_span(source, new)
    old_b = source.encode()
    line = old_b.count(b"\n", 0, edit.start) + 1
    region = old_b[edit.start:edit.end].decode("utf-8", "replace")
    excerpt = " ".join(region.strip().split("\n")[0].split())[:160] if region.strip() else \
        " ".join(source.split("\n")[line - 1].split())[:160]
    diff = "".join(difflib.unified_diff(source.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{kernel_name}", tofile=f"b/{kernel_name}"))
    cache = _cache if _cache is not None else {}
    return Candidate(new_source=new, carrier=parsed.carrier,
                     description=parsed.description or f"remove {parsed.carrier}",
                     edit=edit, line=line, excerpt=excerpt, diff=diff,
                     raw=reply, blocks=len(parsed.blocks),
                     carrier_sites_before=_site_count(source, parsed.carrier, cache),
                     carrier_sites_after=_site_count(new, parsed.carrier, cache), model=model, call=call)


# --------------------------------------------------------------------------- the operator
def propose(source: str, *, problem_summary: str, carriers_present: Any = None, rejected: Iterable[Any] = (),
            model: Optional[str] = None, n: int = 1, timeout: float = 120.0, kernel_name: str = "kernel.cu",
            temperature: float = 0.0, max_tokens: int = 2048, **llm_kwargs: Any) -> ProposalResult:
    """Ask the model for up to `n` different single-step simplifications of `source`.

    `carriers_present`: detect_carriers() output (name -> sites) or just names. `rejected`: Step
    records, dicts with the same keys (operator, carrier, site_line, site_excerpt, reason, diff,
    description) or plain strings. Each call after the first also lists the candidates already
    proposed, so the n answers differ. Never raises on what the model says (or on an endpoint
    failure): every call gives a Candidate or a Failure. Extra keyword arguments go to
    litellm.completion (e.g. mock_response, api_base).
    """
    model = resolve_model(model)
    result = ProposalResult(model=model or "")
    if model is None:
        result.failures.append(Failure("no model configured (pass --model or set SKILLS_MODEL)", "disabled"))
        return result
    from mining.llm import LLMError, complete

    rejected = list(rejected or [])
    seen: dict[str, int] = {}
    cache: dict = {}
    for call in range(max(1, n)):
        prompt = build_prompt(source, problem_summary=problem_summary, carriers_present=carriers_present,
                              rejected=rejected, already_proposed=result.candidates, kernel_name=kernel_name)
        result.prompts.append(prompt)
        try:
            reply = complete(prompt, model, temperature=temperature, max_tokens=max_tokens, timeout=timeout,
                             cuttable=CUTTABLE, **llm_kwargs)
        except LLMError as exc:
            kind = "context" if exc.kind == "context" else "call_error"
            result.failures.append(Failure(f"LLM call failed: {exc}", kind, call=call))
            result.call_log.append({"call": call, "error": str(exc)[:300], "kind": exc.kind, "attempts": exc.attempts})
            break  # the endpoint is down or refusing: more calls would fail the same way
        except Exception as exc:  # litellm or a provider plugin misbehaving is still not our crash
            result.failures.append(Failure(f"LLM call failed: {type(exc).__name__}: {exc}"[:400], "call_error",
                                           call=call))
            break
        result.calls += 1
        result.prompt_tokens += reply.prompt_tokens
        result.completion_tokens += reply.completion_tokens
        result.cost_usd += reply.cost_usd or 0.0
        result.seconds += reply.seconds
        log = {"call": call} | reply.usage()
        result.call_log.append(log)
        if reply.prompt_sent is not None:  # cut to fit the window: keep what was really sent
            result.prompts[-1] = reply.prompt_sent
        if not reply.text.strip():
            log["outcome"] = "rejected: empty answer"
            result.failures.append(Failure("the model answered nothing (empty reply)", "empty", call=call))
            continue
        try:
            cand = candidate_from_reply(source, reply.text, model=model, call=call, kernel_name=kernel_name,
                                        _cache=cache)
        except ReplyError as exc:
            kind, reason = exc.kind, exc.reason
            if reply.truncated and kind == "malformed":
                kind, reason = "truncated", f"{reason}; the answer was cut at max_tokens={reply.max_tokens}"
            log["outcome"] = f"rejected ({kind}): {reason}"[:300]
            result.failures.append(Failure(reason, kind, raw=reply.text, call=call))
            continue
        except Exception as exc:  # a parser bug must not take the walk down either
            result.failures.append(Failure(f"could not apply the reply: {type(exc).__name__}: {exc}"[:400],
                                           "malformed", raw=reply.text, call=call))
            continue
        if cand.new_source in seen:
            result.failures.append(Failure(f"same edit as candidate {seen[cand.new_source] + 1}", "duplicate",
                                           raw=reply.text, call=call))
            continue
        seen[cand.new_source] = len(result.candidates)
        log["outcome"] = "candidate (to the gate)"
        result.candidates.append(cand)
    return result


__all__ = ["Candidate", "Failure", "OPERATOR_NAME", "ProposalResult", "ReplyError", "apply_blocks", "build_prompt",
           "candidate_from_reply", "enabled", "parse_reply", "propose", "resolve_model",
           "summarize_problem", "vocabulary"]
