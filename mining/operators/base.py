"""The deoptimization operator interface.

An operator removes one carrier at one site: `find_sites(source)` lists where it applies and
`apply(source, site)` rewrites exactly the byte range `[site.start_byte, site.end_byte)` of the
original text into a simpler, intended-to-be-equivalent form. Everything outside that range is
left byte-identical (formatting and comments kept). Whether the result is still correct is the
gate's call, not the operator's. Operators are pure functions of the text: the same source gives
the same sites in the same order and the same rewrites.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from corpora.code.source import Site, Source


@dataclass(frozen=True)
class Edit:
    start: int  # byte offsets into the original source
    end: int
    replacement: str


class Operator:
    name: str = ""
    carrier: str = ""  # the carrier this operator removes (corpus vocabulary)
    description: str = ""

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


def splice(raw: bytes, e: Edit) -> str:
    return (raw[:e.start] + e.replacement.encode() + raw[e.end:]).decode("utf-8")


def code_text(src: Source, start: int, end: int) -> str:
    """The comment-free text of a byte range, whitespace runs collapsed."""
    return " ".join(src.code[start:end].decode("utf-8", "replace").split())


def raw_text(src: Source, start: int, end: int) -> str:
    return src.raw[start:end].decode("utf-8", "replace")
