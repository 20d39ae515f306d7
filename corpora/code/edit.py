"""The one byte-range edit of source text, for CUDA kernels and C++ backend functions alike:
replace bytes [start, end) of the original by new text. Operators (both halves), the LLM operator
and the backend operators all express a change this way, so the rest of the file stays
byte-identical by construction."""
from __future__ import annotations

from typing import NamedTuple


class Edit(NamedTuple):
    """Replace bytes [start, end) of the original text by `replacement` (start == end: an insertion).
    A named tuple, so an operator's sub-edits inside a construct and its whole edit are one type."""
    start: int  # byte offsets into the original source
    end: int
    replacement: str


def splice(raw: bytes, e: Edit) -> str:
    return (raw[:e.start] + e.replacement.encode() + raw[e.end:]).decode("utf-8")


def changed_span(old: str, new: str) -> Edit:
    """The smallest byte range of `old` whose replacement gives `new` (on UTF-8 character boundaries)."""
    a, b = old.encode(), new.encode()
    p = 0
    lim = min(len(a), len(b))
    while p < lim and a[p] == b[p]:
        p += 1
    s = 0
    while s < lim - p and a[len(a) - 1 - s] == b[len(b) - 1 - s]:
        s += 1
    while p > 0 and (a[p:p + 1] and (a[p] & 0xC0) == 0x80):
        p -= 1
    while s > 0 and (len(a) - s < len(a)) and (a[len(a) - s] & 0xC0) == 0x80:
        s -= 1
    return Edit(p, len(a) - s, b[p:len(b) - s].decode("utf-8"))
