"""The two halves of an operator, over the one byte-range `Edit` (the code layer's,
`corpora/code/edit.py`, shared with the backend operators).

An operator is a reversible pair (docs/architecture.md, "Operators"):

* the **backward half** (`Operator`, the walk's simplification) removes one carrier at one site:
  `find_sites(source)` lists where it applies and `apply(source, site)` rewrites exactly the byte
  range `[site.start_byte, site.end_byte)` of the original text into a simpler,
  intended-to-be-equivalent form;
* the **forward half** (`Rewrite`, what `skills optimize` applies) introduces the carrier into new
  code: a pure function `source, Context -> [Materialization]`, each a whole new kernel.

Both keep everything outside their edits byte-identical (formatting and comments kept), both are
pure functions of the text (same source, same sites and candidates in the same order), and
neither decides correctness: that is the gate's call. A `Pair` binds the halves of one module;
`mining/operators/registry.py` holds every pair in the walk's priority order.
"""
from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Optional

from corpora.code.edit import Edit, splice
from corpora.code.source import Site, Source


class Skip(Exception):
    """A site that does not have the shape a rewrite needs (internal to the forward rewrites)."""


def apply_edits(raw: bytes, edits: Iterable[Edit]) -> str:
    """Apply non-overlapping byte-range edits (insertions allowed) to the original bytes."""
    edits = sorted(edits, key=lambda e: (e.start, e.end))
    for x, y in zip(edits, edits[1:]):
        if y.start < x.end:
            raise Skip("overlapping edits")
    out = bytearray()
    pos = 0
    for e in edits:
        out += raw[pos:e.start] + e.replacement.encode()
        pos = e.end
    out += raw[pos:]
    return out.decode("utf-8")


def rewrite_range(src: Source, start: int, end: int, edits: Iterable[Edit]) -> str:
    """The text of [start, end) of the original with the edits inside it applied."""
    inner = [Edit(e.start - start, e.end - start, e.replacement) for e in edits if start <= e.start and e.end <= end]
    return apply_edits(src.raw[start:end], inner)


def code_text(src: Source, start: int, end: int) -> str:
    """The comment-free text of a byte range, whitespace runs collapsed."""
    return " ".join(src.code[start:end].decode("utf-8", "replace").split())


def raw_text(src: Source, start: int, end: int) -> str:
    return src.raw[start:end].decode("utf-8", "replace")


# --------------------------------------------------------------------------- backward half
class Operator:
    """The simplification: one `Edit` per site; `edits` yields them, the rest is shared."""
    name: str = ""
    carrier: str = ""  # the carrier this operator removes (corpus vocabulary)
    description: str = ""
    # another operator whose skill this one's steps add evidence to: the same optimization undone
    # from another spelling (issue 19: one optimization, one key, whatever the spelling)
    skill_of: str = ""

    def edits(self, src: Source) -> Iterable[Edit]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _edits(self, src: Source) -> list[Edit]:
        out, seen = [], set()
        for e in self.edits(src):
            key = (e.start, e.end)
            if key in seen or e.replacement == src.raw[e.start:e.end].decode("utf-8", "replace"):
                continue
            seen.add(key)
            out.append(e)
        out.sort(key=lambda e: (e.start, e.end))
        return out

    def find_sites(self, source: str) -> list[Site]:
        src = Source(source)
        return [src.site(self.carrier, e.start, e.end) for e in self._edits(src)]

    def apply(self, source: str, site: Site) -> str:
        src = Source(source)
        for e in self._edits(src):
            if e.start == site.start_byte and e.end == site.end_byte:
                return splice(src.raw, e)
        raise ValueError(f"{self.name}: no site at bytes {site.start_byte}..{site.end_byte} of this source")

    def __repr__(self) -> str:
        return f"<operator {self.name}: removes {self.carrier}>"


# --------------------------------------------------------------------------- forward half
@dataclass
class Context:
    """What a forward rewrite may know about the problem: every workload's axes (for preconditions)."""
    axes: list[dict[str, int]] = field(default_factory=list)
    entry: str = ""
    flags: tuple[str, ...] = ()
    problem: str = ""

    @classmethod
    def from_problem(cls, problem: Any) -> "Context":
        return cls(axes=[dict(w.axes) for w in problem.workloads], entry=problem.solution.entry,
                   flags=tuple(problem.solution.flags), problem=problem.name)


@dataclass
class Materialization:
    """One forward candidate: the whole new kernel, the site it touched, the guards it generated."""
    source: str  # the whole new kernel
    rewrite: str  # forward rewrite name
    carrier: str  # the carrier it introduces
    description: str
    site_line: int = 0  # 1-based line of the first changed byte in the old source
    site_excerpt: str = ""
    start: int = 0  # changed byte range of the old source
    end: int = 0
    guards: list[str] = field(default_factory=list)  # runtime precondition checks it generated
    skill_id: str = ""
    skill_name: str = ""

    def diff(self, old: str, name: str = "kernel.cu") -> str:
        return "".join(difflib.unified_diff(old.splitlines(True), self.source.splitlines(True), f"a/{name}", f"b/{name}"))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("source")
        return d


def candidate(src: Source, edits: list[Edit], rewrite: str, description: str, guards: Iterable[str] = (),
              excerpt: str = "") -> Materialization:
    """A Materialization from edits of `src` (the registry fills in the rewrite's carrier)."""
    return Materialization(apply_edits(src.raw, edits), rewrite, "", description, guards=list(guards),
                           site_excerpt=excerpt)


def per_kernel_and_all(src: Source, rewrite: str, per: list[tuple[str, list[Edit], str]], what: str,
                       extra: Iterable[Edit] = ()) -> list[Materialization]:
    """One candidate applying every kernel's edits, then (when there are several) one per kernel."""
    per = [p for p in per if p[1]]
    if not per:
        return []
    extra = list(extra)
    out = []
    if len(per) > 1:
        out.append(candidate(src, [e for _, es, _ in per for e in es] + extra, rewrite,
                             f"{what} in {', '.join(k for k, _, _ in per)}"))
    for kname, es, excerpt in per:
        out.append(candidate(src, es + extra, rewrite, f"{what} in {kname}", excerpt=excerpt))
    return out


RewriteFn = Callable[[str, Context], list[Materialization]]


@dataclass(frozen=True)
class Rewrite:
    """A forward rewrite: what `skills optimize` applies to introduce `carrier` into new code."""
    name: str
    carrier: str  # the carrier it introduces
    fn: RewriteFn
    prior: float = 1.0  # expected effect when a skill carries no GPU measurement: the gating order
    serves: tuple[str, ...] = ()  # further carriers whose skills it applies (no operator of theirs inverts to it)


@dataclass(frozen=True)
class Pair:
    """One module's operator: its backward half, its forward rewrites, and which rewrites undo its steps.

    `operator` is None for a forward-only (structural) rewrite with no simplification behind it;
    `inverted_by` names the rewrites (of this module or another) that undo a step of `operator`,
    in the order `skills optimize` tries them (default: this module's own rewrites)."""
    operator: Optional[type[Operator]]
    rewrites: tuple[Rewrite, ...] = ()
    inverted_by: Optional[tuple[str, ...]] = None

    @property
    def name(self) -> str:
        return self.operator.name if self.operator is not None else self.rewrites[0].name

    @property
    def inverses(self) -> tuple[str, ...]:
        if self.operator is None:
            return ()
        return self.inverted_by if self.inverted_by is not None else tuple(r.name for r in self.rewrites)
