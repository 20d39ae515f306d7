"""Code for the HTML report: a small CUDA C++ syntax highlighter and a unified-diff renderer.

The highlighter is one compiled regex (comments, preprocessor lines, strings, numbers, words,
punctuation); words are classed as keyword, type, CUDA qualifier or CUDA builtin/intrinsic. It
is a display aid, not a parser: it never fails, whatever the text. Diffs are rendered as
unified tables (old/new line numbers, `-`/`+` rows), each side highlighted as a whole so block
comments spanning lines stay coloured, and changed words inside paired `-`/`+` lines marked.
The side-by-side view is built from these rows in the browser (report JS), so the file holds
each diff once.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Optional
from html import escape

_TOKEN = re.compile(
    r"(?P<c>//[^\n]*|/\*.*?(?:\*/|\Z))"
    r"|(?P<p>^[ \t]*\#[^\n]*)"
    r"|(?P<s>\"(?:\\.|[^\"\\\n])*\"?|'(?:\\.|[^'\\\n])*'?)"
    r"|(?P<n>\b(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)[uUlLfFhH]*\b)"
    r"|(?P<f>[A-Za-z_]\w*)(?=\s*\()"
    r"|(?P<w>[A-Za-z_]\w*)",
    re.S | re.M)

KEYWORDS = frozenset("""if else for while do return break continue switch case default goto sizeof typedef struct
class union enum template typename using namespace static const constexpr volatile inline extern auto register
public private protected new delete operator this true false nullptr static_cast reinterpret_cast const_cast
dynamic_cast static_assert decltype alignas alignof noexcept mutable friend virtual""".split())
TYPES = frozenset("""void bool char short int long float double unsigned signed size_t ptrdiff_t dim3 half __half
__nv_bfloat16 __nv_bfloat162 half2 __half2 nv_bfloat16 wchar_t cudaStream_t cudaError_t""".split())
QUALIFIERS = frozenset("""__global__ __device__ __host__ __shared__ __constant__ __managed__ __restrict__
__launch_bounds__ __forceinline__ __noinline__ __align__ __grid_constant__ __cluster_dims__""".split())
BUILTINS = frozenset("""threadIdx blockIdx blockDim gridDim warpSize""".split())
_VEC_TYPE = re.compile(r"^(?:u?char|u?short|u?int|u?long|longlong|ulonglong|float|double)[1-4]$|^u?int\d+_t$")


_CLASS_CACHE: dict[tuple[str, bool], str] = {}


def _word_class(word: str, call: bool) -> str:
    cls = _CLASS_CACHE.get((word, call))
    if cls is not None:
        return cls
    if word in KEYWORDS:
        cls = "k"
    elif word in QUALIFIERS:
        cls = "q"
    elif word in TYPES or _VEC_TYPE.match(word):
        cls = "t"
    elif word in BUILTINS or word.startswith("__") or word.startswith("atomic") or word.startswith("make_"):
        cls = "b"
    else:
        cls = "f" if call else ""
    if len(_CLASS_CACHE) < 50000:
        _CLASS_CACHE[(word, call)] = cls
    return cls


Segment = tuple[str, str]  # (css class or '', text without newlines)


def tokenize_lines(text: str) -> list[list[Segment]]:
    """Split `text` into lines of (class, text) segments; joining a line's texts gives the line back."""
    lines: list[list[Segment]] = [[]]
    line = lines[0]
    pos = 0
    for m in _TOKEN.finditer(text):
        start = m.start()
        if start > pos:
            gap = text[pos:start]
            if "\n" in gap:
                parts = gap.split("\n")
                if parts[0]:
                    line.append(("", parts[0]))
                for part in parts[1:]:
                    line = []
                    lines.append(line)
                    if part:
                        line.append(("", part))
            else:
                line.append(("", gap))
        kind = m.lastgroup
        tok = m.group()
        cls = _word_class(tok, kind == "f") if kind in ("w", "f") else kind
        if kind == "c" and "\n" in tok:  # block comment over lines
            parts = tok.split("\n")
            if parts[0]:
                line.append((cls, parts[0]))
            for part in parts[1:]:
                line = []
                lines.append(line)
                if part:
                    line.append((cls, part))
        else:
            line.append((cls, tok))
        pos = m.end()
    if pos < len(text):
        for i, part in enumerate(text[pos:].split("\n")):
            if i:
                line = []
                lines.append(line)
            if part:
                line.append(("", part))
    return lines


def _esc(t: str) -> str:
    if "&" in t or "<" in t or ">" in t:
        return t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return t


def segments_html(segs: list[Segment], marks: list[tuple[int, int]] = ()) -> str:
    """HTML for one line's segments; character ranges in `marks` are wrapped in <mark>."""
    if not marks:
        return "".join(f'<span class="{c}">{_esc(t)}</span>' if c else _esc(t) for c, t in segs)
    out: list[str] = []
    pos = 0
    for cls, text in segs:
        start, end = pos, pos + len(text)
        cuts = {start, end}
        for a, b in marks:
            if start < a < end:
                cuts.add(a)
            if start < b < end:
                cuts.add(b)
        edges = sorted(cuts)
        for a, b in zip(edges, edges[1:]):
            piece = _esc(text[a - start:b - start])
            if cls:
                piece = f'<span class="{cls}">{piece}</span>'
            if any(ma <= a and b <= mb for ma, mb in marks):
                piece = f"<mark>{piece}</mark>"
            out.append(piece)
        pos = end
    return "".join(out).replace("</mark><mark>", "")


def highlight(text: str) -> str:
    """Highlighted HTML of a code block (newlines kept), for <pre>."""
    return "\n".join(segments_html(line) for line in tokenize_lines(text))


# --------------------------------------------------------------------------- diffs
@dataclass
class Hunk:
    old_start: int
    new_start: int
    header: str
    rows: list[tuple[str, str]] = field(default_factory=list)  # (' ' | '-' | '+', text)


_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")


def parse_unified(diff: str) -> tuple[tuple[str, str], list[Hunk]]:
    """((old name, new name), hunks) of a unified diff; lenient about anything it does not know."""
    names = ["", ""]
    hunks: list[Hunk] = []
    for line in diff.splitlines():
        if line.startswith("--- ") and not hunks:
            names[0] = line[4:].strip()
        elif line.startswith("+++ ") and not hunks:
            names[1] = line[4:].strip()
        elif (m := _HUNK.match(line)):
            hunks.append(Hunk(int(m.group(1)), int(m.group(2)), m.group(3).strip()))
        elif hunks and line[:1] in (" ", "-", "+"):
            hunks[-1].rows.append((line[0], line[1:]))
        elif hunks and line == "":
            hunks[-1].rows.append((" ", ""))
        # "\ No newline at end of file" and anything else: skipped
    return (names[0], names[1]), hunks


_WORDS = re.compile(r"\w+|\s+|[^\w\s]")


def _changed_ranges(a: str, b: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Character ranges that differ between two similar lines (word granularity); nothing when
    the lines are not similar (a removed line paired with an unrelated added one)."""
    ta, tb = _WORDS.findall(a), _WORDS.findall(b)
    # common prefix and suffix first: the matcher then only sees the changed middle
    p = 0
    while p < len(ta) and p < len(tb) and ta[p] == tb[p]:
        p += 1
    q = 0
    while q < len(ta) - p and q < len(tb) - p and ta[-1 - q] == tb[-1 - q]:
        q += 1
    mid_a, mid_b = ta[p:len(ta) - q], tb[p:len(tb) - q]
    if len(mid_a) + len(mid_b) <= 120:
        sm = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False)
        ops = sm.get_opcodes()
        common = p + q + sum(i2 - i1 for tag, i1, i2, _, _ in ops if tag == "equal")
    else:  # a long rewrite: mark the changed middle as one range
        ops = [("replace", 0, len(mid_a), 0, len(mid_b))]
        common = p + q
    if 2 * common < 0.35 * (len(ta) + len(tb)):
        return [], []
    oa = [0]
    for t in ta:
        oa.append(oa[-1] + len(t))
    ob = [0]
    for t in tb:
        ob.append(ob[-1] + len(t))
    ra, rb = [], []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            continue
        i1, i2, j1, j2 = i1 + p, i2 + p, j1 + p, j2 + p
        if i2 > i1 and a[oa[i1]:oa[i2]].strip():
            ra.append((oa[i1], oa[i2]))
        if j2 > j1 and b[ob[j1]:ob[j2]].strip():
            rb.append((ob[j1], ob[j2]))
    return ra, rb


def diff_stats(diff: str) -> tuple[int, int]:
    """(lines removed, lines added) of a unified diff."""
    _, hunks = parse_unified(diff)
    rem = sum(1 for h in hunks for t, _ in h.rows if t == "-")
    add = sum(1 for h in hunks for t, _ in h.rows if t == "+")
    return rem, add


class LineCache:
    """Highlighted lines by text. Steps of one lineage share most context lines, so a cache per
    lineage saves most of the highlighting; hunks with block comments are tokenized whole."""

    def __init__(self) -> None:
        self.segs: dict[str, list[Segment]] = {}
        self.html: dict[str, str] = {}

    def lines(self, texts: list[str]) -> tuple[list[list[Segment]], bool]:
        """(segments per line, whether they depend on the line alone and may be cached)."""
        joined = "\n".join(texts)
        if "/*" in joined or "*/" in joined:
            segs = tokenize_lines(joined)
            return segs + [[] for _ in range(len(texts) - len(segs))], False
        out = []
        for t in texts:
            segs = self.segs.get(t)
            if segs is None:
                segs = self.segs[t] = tokenize_lines(t)[0] if t else []
            out.append(segs)
        return out, True

    def line_html(self, text: str, segs: list[Segment], cacheable: bool = True) -> str:
        if not cacheable:
            return segments_html(segs)
        h = self.html.get(text)
        if h is None:
            h = self.html[text] = segments_html(segs)
        return h


def render_diff(diff: str, old_label: str = "", new_label: str = "", cache: Optional[LineCache] = None) -> str:
    """A unified diff as an HTML table (class `diff`), syntax highlighted, changed words marked.

    Rows: `tr.h` hunk header, `tr.x` context, `tr.d` removed, `tr.a` added; cells: old line
    number, new line number, code. The report's JS derives the side-by-side view from them."""
    cache = cache or LineCache()
    (old_name, new_name), hunks = parse_unified(diff or "")
    if not hunks:
        return '<p class="muted">no diff recorded</p>'
    old_label = old_label or old_name or "before"
    new_label = new_label or new_name or "after"
    body: list[str] = []
    for h in hunks:
        old_lines = [t for tag, t in h.rows if tag != "+"]
        new_lines = [t for tag, t in h.rows if tag != "-"]
        # context lines are highlighted once, with the old side; added lines on their own
        old_hl, old_ok = cache.lines(old_lines)
        add_hl, add_ok = cache.lines([t for tag, t in h.rows if tag == "+"])
        # pair removed/added lines inside each change block for word marks
        marks_old: dict[int, list] = {}
        marks_new: dict[int, list] = {}
        i = oi = ni = 0
        rows = h.rows
        while i < len(rows):
            if rows[i][0] == " ":
                i += 1
                oi += 1
                ni += 1
                continue
            j = i
            dels, adds = [], []
            while j < len(rows) and rows[j][0] == "-":
                dels.append(oi + len(dels))
                j += 1
            while j < len(rows) and rows[j][0] == "+":
                adds.append(ni + len(adds))
                j += 1
            while j < len(rows) and rows[j][0] == "-":  # tolerate +/- order
                dels.append(oi + len(dels))
                j += 1
            if 0 < len(dels) <= 8 and len(dels) == len(adds):
                for d, a in zip(dels, adds):
                    ra, rb = _changed_ranges(old_lines[d], new_lines[a])
                    if ra:
                        marks_old[d] = ra
                    if rb:
                        marks_new[a] = rb
            oi += len(dels)
            ni += len(adds)
            i = j
        hdr = f"@@ -{h.old_start} +{h.new_start} @@" + (f" {h.header}" if h.header else "")
        body.append(f'<tr class="h"><td colspan="3">{escape(hdr)}</td></tr>')
        oi = ni = ai = 0
        for tag, _text in h.rows:
            if tag == " ":
                code = cache.line_html(old_lines[oi], old_hl[oi], old_ok)
                body.append(f'<tr class="x"><td>{h.old_start + oi}</td><td>{h.new_start + ni}</td><td>{code}</td></tr>')
                oi += 1
                ni += 1
            elif tag == "-":
                mk = marks_old.get(oi)
                code = segments_html(old_hl[oi], mk) if mk else cache.line_html(old_lines[oi], old_hl[oi], old_ok)
                body.append(f'<tr class="d"><td>{h.old_start + oi}</td><td></td><td>{code}</td></tr>')
                oi += 1
            else:
                mk = marks_new.get(ni)
                code = segments_html(add_hl[ai], mk) if mk else cache.line_html(new_lines[ni], add_hl[ai], add_ok)
                body.append(f'<tr class="a"><td></td><td>{h.new_start + ni}</td><td>{code}</td></tr>')
                ni += 1
                ai += 1
    return (f'<table class="diff hl" data-old="{escape(old_label)}" data-new="{escape(new_label)}">'
            f'<tbody>{"".join(body)}</tbody></table>')
