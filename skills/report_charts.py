"""SVG charts for the HTML report, rendered in Python (no chart library, no script).

Every chart is a function from plain rows to an inline `<svg>` string with a viewBox, so it
scales with the page and prints. Colours and fonts come from the page's CSS classes (`.c-*`),
so the charts follow the report's theme.

- `time_waterfall`: GPU time along a walk, expert -> naive, on a log scale: each step's bar
  spans the cumulative slowdown before and after it, whiskers show its spread (q1..q3).
- `static_deltas`: per-step static deltas (registers, shared memory, spills, SASS instruction
  count), each metric on its own diverging scale, when no timing exists.
- `diff_sizes`: lines removed/added per step, when nothing was measured at all.
- `ratio_bars`: one bar per item on a log scale with whiskers (store-wide skill effects).
- `count_bars`: plain counts (skills per carrier).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from typing import Optional

ROW_H = 30
FONT = 12


def _t(text: str, n: int) -> str:
    """Truncate for a label (full text goes in a <title>)."""
    return text if len(text) <= n else text[: n - 1] + "…"


def _fmt_ratio(r: float) -> str:
    if r >= 100:
        return f"×{r:.0f}"
    if r >= 10:
        return f"×{r:.1f}"
    return f"×{r:.2f}"


def fmt_ms(ms: float) -> str:
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 1:
        return f"{ms:.2f} ms"
    if ms >= 0.01:
        return f"{ms * 1000:.1f} µs"
    return f"{ms * 1000:.2f} µs"


def _svg(width: int, height: int, body: list[str], title: str, cls: str = "chart") -> str:
    return (f'<svg class="{cls}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
            f"<title>{escape(title)}</title>{''.join(body)}</svg>")


def _text(x: float, y: float, text: str, cls: str = "", anchor: str = "start", full: str = "") -> str:
    tip = f"<title>{escape(full)}</title>" if full and full != text else ""
    c = f' class="{cls}"' if cls else ""
    a = f' text-anchor="{anchor}"' if anchor != "start" else ""
    return f'<text x="{x:.1f}" y="{y:.1f}"{c}{a}>{tip}{escape(text)}</text>'


def _log_ticks(lo: float, hi: float, max_ticks: int = 7) -> list[float]:
    """Readable tick values between lo and hi (> 0) for a log axis."""
    mants = (1, 1.1, 1.2, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8)
    cands = []
    for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        for m in mants:
            v = round(m * 10 ** k, 6)
            if lo <= v <= hi:
                cands.append(v)
    cands = sorted(set(cands))
    if not cands:
        return [lo, hi]
    for keep in ((1, 2, 5), (1, 2, 3, 5), (1, 1.5, 2, 3, 5, 7), (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8), mants):
        picked = [v for v in cands if round(v / 10 ** math.floor(math.log10(v) + 1e-9), 6) in keep]
        if len(picked) >= 3:
            break
    else:
        picked = cands
    while len(picked) > max_ticks:
        picked = picked[::2]
    if 1.0 in cands and 1.0 not in picked and lo <= 1 <= hi:
        picked = sorted(set(picked) | {1.0})
    return picked


class _LogX:
    def __init__(self, lo: float, hi: float, x0: float, x1: float):
        lo, hi = max(lo, 1e-6), max(hi, 1e-6)
        if hi / lo < 1.25:  # at least a little range, centred
            mid = math.sqrt(lo * hi)
            lo, hi = mid / 1.12, mid * 1.12
        pad = (math.log(hi) - math.log(lo)) * 0.04
        self.l0, self.l1 = math.log(lo) - pad, math.log(hi) + pad
        self.x0, self.x1 = x0, x1

    def __call__(self, v: float) -> float:
        v = max(v, 1e-9)
        return self.x0 + (math.log(v) - self.l0) / (self.l1 - self.l0) * (self.x1 - self.x0)

    @property
    def lo(self) -> float:
        return math.exp(self.l0)

    @property
    def hi(self) -> float:
        return math.exp(self.l1)


def _axis(xs: _LogX, top: float, bottom: float, label: str, fmt=lambda v: f"{v:g}×") -> list[str]:
    out = []
    for v in _log_ticks(xs.lo, xs.hi):
        x = xs(v)
        cls = "grid one" if abs(v - 1) < 1e-9 else "grid"
        out.append(f'<line class="{cls}" x1="{x:.1f}" x2="{x:.1f}" y1="{top:.1f}" y2="{bottom:.1f}"/>')
        out.append(_text(x, bottom + 14, fmt(v), "tick", "middle"))
    out.append(_text((xs.x0 + xs.x1) / 2, bottom + 30, label, "axis", "middle"))
    return out


# --------------------------------------------------------------------------- time waterfall
@dataclass
class TimeRow:
    label: str  # "1 · vector_load"
    sub: str = ""  # "vector_load_to_scalar, line 13"
    ratio: Optional[float] = None  # simpler / optimized (> 1: the removed optimization helped)
    q1: Optional[float] = None
    q3: Optional[float] = None
    href: str = ""


def _dir_class(r: float) -> str:
    return "c-good" if r > 1.02 else "c-bad" if r < 0.98 else "c-flat"


def time_waterfall(rows: list[TimeRow], title: str, base_ms: Optional[float] = None,
                   final_label: str = "naive (end of walk)") -> str:
    """Cumulative GPU time relative to the expert, step by step, log scale."""
    W, LBL, RGT = 820, 250, 150
    x0, x1 = LBL, W - RGT
    n = len(rows) + 2
    top, H = 8, 8 + n * ROW_H + 44
    cum, spans = 1.0, []
    for r in rows:
        start = cum
        if r.ratio:
            cum = cum * r.ratio
        spans.append((start, cum))
    vals = [1.0, cum] + [s for span in spans for s in span]
    vals += [spans[i][0] * q for i, r in enumerate(rows) if r.ratio for q in (r.q1, r.q3) if q]
    xs = _LogX(min(vals), max(vals), x0 + 6, x1 - 6)
    bottom = top + n * ROW_H
    body = _axis(xs, top, bottom, "GPU time relative to the expert (log scale; right of 1× = slower)")

    def row_label(i: int, label: str, sub: str, href: str = "") -> None:
        y = top + i * ROW_H
        lab = _text(8, y + 13, _t(label, 34), "lbl", full=label)
        if href:
            lab = f'<a href="{escape(href)}">{lab}</a>'
        body.append(lab)
        if sub:
            body.append(_text(8, y + 25, _t(sub, 40), "sub", full=sub))

    # expert row
    y = top
    row_label(0, "expert", "start of the walk")
    body.append(f'<circle class="c-base" cx="{xs(1):.1f}" cy="{y + ROW_H / 2:.1f}" r="5"/>')
    body.append(_text(x1 + 8, y + 19, "1×" + (f"  {fmt_ms(base_ms)}" if base_ms else ""), "val"))
    for i, (r, (a, b)) in enumerate(zip(rows, spans), start=1):
        y = top + i * ROW_H
        row_label(i, r.label, r.sub, r.href)
        yc = y + ROW_H / 2
        if not r.ratio:
            body.append(f'<line class="c-none" x1="{xs(a):.1f}" x2="{xs(a):.1f}" y1="{y + 5:.1f}" y2="{y + ROW_H - 5:.1f}"/>')
            body.append(_text(x1 + 8, y + 19, "not timed", "val muted"))
            continue
        xa, xb = sorted((xs(a), xs(b)))
        body.append(f'<rect class="{_dir_class(r.ratio)}" x="{xa:.1f}" y="{y + 7:.1f}" width="{max(xb - xa, 2):.1f}" '
                    f'height="{ROW_H - 14}" rx="2"><title>{escape(r.label)}: {_fmt_ratio(r.ratio)}</title></rect>')
        if r.q1 and r.q3:
            w0, w1 = xs(a * r.q1), xs(a * r.q3)
            body.append(f'<path class="whisker" d="M{w0:.1f},{yc:.1f}H{w1:.1f}M{w0:.1f},{yc - 5:.1f}V{yc + 5:.1f}'
                        f'M{w1:.1f},{yc - 5:.1f}V{yc + 5:.1f}"/>')
        body.append(f'<line class="link" x1="{xs(b):.1f}" x2="{xs(b):.1f}" y1="{y + ROW_H - 7:.1f}" y2="{y + ROW_H + 7:.1f}"/>')
        spread = f" ({r.q1:.2f}–{r.q3:.2f})" if r.q1 and r.q3 else ""
        body.append(_text(x1 + 8, y + 19, _fmt_ratio(r.ratio) + spread, "val"))
    # final row: the whole walk
    i = n - 1
    y = top + i * ROW_H
    row_label(i, final_label, "all steps together")
    xa, xb = sorted((xs(1), xs(cum)))
    body.append(f'<rect class="c-total" x="{xa:.1f}" y="{y + 6:.1f}" width="{max(xb - xa, 2):.1f}" height="{ROW_H - 12}" rx="2"/>')
    body.append(_text(x1 + 8, y + 19, _fmt_ratio(cum) + (f"  {fmt_ms(base_ms * cum)}" if base_ms else ""), "val strong"))
    return _svg(W, H, body, title)


# --------------------------------------------------------------------------- static deltas
@dataclass
class StaticRow:
    label: str
    sub: str = ""
    registers: Optional[int] = None
    smem: Optional[int] = None
    spills: Optional[int] = None
    sass: dict[str, int] = field(default_factory=dict)
    href: str = ""


def _fmt_delta(v: int) -> str:
    if v == 0:
        return "0"
    sign = "+" if v > 0 else "−"
    a = abs(v)
    return f"{sign}{a / 1000:.1f}k" if a >= 10000 else f"{sign}{a / 1000:.2g}k" if a >= 1000 else f"{sign}{a}"


def static_deltas(rows: list[StaticRow], title: str) -> str:
    """Small multiples: one diverging column per metric, one row per step."""
    metrics = [("registers", "registers Δ", "c-reg"), ("smem", "shared mem Δ (B)", "c-smem"),
               ("spills", "spill bytes Δ", "c-spill"), ("sass_total", "SASS instr. Δ", "c-sass")]
    data = []
    for r in rows:
        d = {"registers": r.registers, "smem": r.smem, "spills": r.spills,
             "sass_total": sum(r.sass.values()) if r.sass else None}
        data.append(d)
    W, LBL, COL = 960, 220, 130
    H = 8 + 26 + len(rows) * ROW_H + 10
    body: list[str] = []
    top = 34
    for m, (key, name, cls) in enumerate(metrics):
        cx0 = LBL + m * COL
        mid = cx0 + COL / 2
        vals = [abs(d[key]) for d in data if d[key] is not None]
        scale = (COL / 2 - 36) / max(vals) if vals and max(vals) > 0 else 0
        body.append(_text(mid, 20, name, "colhead", "middle"))
        body.append(f'<line class="grid one" x1="{mid:.1f}" x2="{mid:.1f}" y1="{top - 4}" y2="{top + len(rows) * ROW_H}"/>')
        for i, d in enumerate(data):
            y = top + i * ROW_H
            v = d[key]
            if v is None:
                body.append(_text(mid, y + 19, "–", "val muted", "middle"))
                continue
            w = abs(v) * scale
            x = mid if v >= 0 else mid - w
            body.append(f'<rect class="{cls}{"" if v >= 0 else " neg"}" x="{x:.1f}" y="{y + 8}" width="{max(w, 1 if v else 0):.1f}" '
                        f'height="{ROW_H - 16}" rx="2"/>')
            tx = mid + w + 4 if v >= 0 else mid - w - 4
            body.append(_text(tx, y + 19, _fmt_delta(v), "val small", "start" if v >= 0 else "end", full=f"{v:+d}"))
    body.append(_text(LBL + 4 * COL + 14, 20, "SASS opcodes (top changes)", "colhead"))
    for i, r in enumerate(rows):
        y = top + i * ROW_H
        lab = _text(8, y + 13, _t(r.label, 30), "lbl", full=r.label)
        body.append(f'<a href="{escape(r.href)}">{lab}</a>' if r.href else lab)
        if r.sub:
            body.append(_text(8, y + 25, _t(r.sub, 34), "sub", full=r.sub))
        top_ops = sorted(((o, d) for o, d in r.sass.items() if d), key=lambda kv: -abs(kv[1]))[:3]
        chips = ", ".join(f"{op} {d:+d}" for op, d in top_ops)
        body.append(_text(LBL + 4 * COL + 14, y + 19, _t(chips, 30) if chips else "–", "val small mono", full=chips))
        if i:
            body.append(f'<line class="sep" x1="8" x2="{W - 8}" y1="{y:.1f}" y2="{y:.1f}"/>')
    return _svg(W, H, body, title)


# --------------------------------------------------------------------------- diff sizes
@dataclass
class DiffRow:
    label: str
    sub: str = ""
    removed: int = 0
    added: int = 0
    href: str = ""


def diff_sizes(rows: list[DiffRow], title: str) -> str:
    W, LBL = 820, 250
    mid = LBL + 200
    H = 8 + 26 + len(rows) * ROW_H + 10
    top = 34
    mx = max([max(r.removed, r.added) for r in rows] + [1])
    scale = 170 / mx
    body = [_text(mid - 6, 20, "lines removed", "colhead", "end"), _text(mid + 6, 20, "lines added", "colhead"),
            f'<line class="grid one" x1="{mid}" x2="{mid}" y1="{top - 4}" y2="{top + len(rows) * ROW_H}"/>']
    for i, r in enumerate(rows):
        y = top + i * ROW_H
        lab = _text(8, y + 13, _t(r.label, 34), "lbl", full=r.label)
        body.append(f'<a href="{escape(r.href)}">{lab}</a>' if r.href else lab)
        if r.sub:
            body.append(_text(8, y + 25, _t(r.sub, 40), "sub", full=r.sub))
        wr, wa = r.removed * scale, r.added * scale
        body.append(f'<rect class="c-del" x="{mid - wr:.1f}" y="{y + 8}" width="{wr:.1f}" height="{ROW_H - 16}" rx="2"/>')
        body.append(f'<rect class="c-add" x="{mid:.1f}" y="{y + 8}" width="{wa:.1f}" height="{ROW_H - 16}" rx="2"/>')
        body.append(_text(mid - wr - 4, y + 19, f"−{r.removed}", "val small", "end"))
        body.append(_text(mid + wa + 4, y + 19, f"+{r.added}", "val small"))
    return _svg(W, H, body, title)


# --------------------------------------------------------------------------- store-wide
@dataclass
class RatioRow:
    label: str
    ratio: float
    lo: Optional[float] = None
    hi: Optional[float] = None
    sub: str = ""
    href: str = ""


def ratio_bars(rows: list[RatioRow], title: str, axis: str) -> str:
    W, LBL, RGT = 880, 320, 110
    x0, x1 = LBL, W - RGT
    top = 8
    H = top + len(rows) * ROW_H + 44
    vals = [1.0] + [v for r in rows for v in (r.ratio, r.lo, r.hi) if v]
    xs = _LogX(min(vals), max(vals), x0 + 6, x1 - 6)
    bottom = top + len(rows) * ROW_H
    body = _axis(xs, top, bottom, axis)
    for i, r in enumerate(rows):
        y = top + i * ROW_H
        yc = y + ROW_H / 2
        lab = _text(8, y + 13, _t(r.label, 44), "lbl", full=r.label)
        body.append(f'<a href="{escape(r.href)}">{lab}</a>' if r.href else lab)
        if r.sub:
            body.append(_text(8, y + 25, _t(r.sub, 52), "sub", full=r.sub))
        xa, xb = sorted((xs(1), xs(r.ratio)))
        body.append(f'<rect class="{_dir_class(r.ratio)}" x="{xa:.1f}" y="{y + 7}" width="{max(xb - xa, 2):.1f}" '
                    f'height="{ROW_H - 14}" rx="2"/>')
        if r.lo and r.hi and (r.lo != r.ratio or r.hi != r.ratio):
            w0, w1 = xs(r.lo), xs(r.hi)
            body.append(f'<path class="whisker" d="M{w0:.1f},{yc:.1f}H{w1:.1f}M{w0:.1f},{yc - 5:.1f}V{yc + 5:.1f}'
                        f'M{w1:.1f},{yc - 5:.1f}V{yc + 5:.1f}"/>')
        body.append(_text(x1 + 8, y + 19, _fmt_ratio(r.ratio), "val"))
    return _svg(W, H, body, title)


def count_bars(rows: list[tuple[str, int, str]], title: str, unit: str = "") -> str:
    """(label, count, href) rows as horizontal bars."""
    W, LBL = 820, 250
    top = 8
    H = top + len(rows) * 24 + 10
    mx = max([c for _, c, _ in rows] + [1])
    body = []
    for i, (label, c, href) in enumerate(rows):
        y = top + i * 24
        lab = _text(8, y + 16, _t(label, 34), "lbl", full=label)
        body.append(f'<a href="{escape(href)}">{lab}</a>' if href else lab)
        w = (W - LBL - 90) * c / mx
        body.append(f'<rect class="c-count" x="{LBL}" y="{y + 5}" width="{max(w, 2):.1f}" height="14" rx="2"/>')
        body.append(_text(LBL + w + 6, y + 16, f"{c}{unit}", "val small"))
    return _svg(W, H, body, title)
