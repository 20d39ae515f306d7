"""`skills report`: one self-contained HTML file over a store's lineages and skills.

    html = build_report(Store(root, read_only=True), problems=["vector_add"])

The page holds, per problem, each lineage (expert -> naive) as a table and a chart of each
step's effect (GPU time with q1..q3 whiskers when measured; static deltas -- registers, shared
memory, spills, SASS mix -- when that is all there is, and labelled so; diff sizes when nothing
was measured), the walk's termination reason, the rejected candidates with their reasons, and
every step's diff (syntax highlighted; unified or side by side). Per skill: its card (intent,
anchor, carrier, preconditions with their probes, effect with device and method, risks, scope,
evidence, provenance) linked to the steps it came from; and a skills index searchable and
filterable by carrier, op type, dtype and arch.

Self-contained: inline CSS, inline SVG charts rendered here, a little inline vanilla JS for
filtering and diff views, and a Content-Security-Policy that forbids the page from loading
anything at all. `render_report(data)` is a pure function of the loaded data; `load_report_data`
is the only part that touches the store.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from mining.records import Effect, Lineage, Precondition, Skill, Step
from skills.report_assets import CSS, JS
from skills.report_charts import (DiffRow, RatioRow, StaticRow, TimeRow, count_bars, diff_sizes, ratio_bars,
                                  static_deltas, time_waterfall)
from skills.report_charts import fmt_ms
from skills.report_code import LineCache, diff_stats, highlight, render_diff

CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
       "font-src 'none'; connect-src 'none'; frame-src 'none'; form-action 'none'; base-uri 'none'")

TERMINATION = {
    "complete": ("complete", "no remaining candidate passes the gate: the walk reached its simplest validated form"),
    "step_limit": ("step limit", "stopped at the configured step limit; simpler forms may remain"),
    "rejection_limit": ("rejection limit", "stopped after too many rejected candidates in a row"),
    "time_limit": ("time limit", "stopped at the configured wall-clock limit"),
    "start_failed": ("start failed", "the expert kernel itself did not pass the gate, so nothing was walked"),
}

HOW_TO_BUILD = [
    ("Mine lineages from a folder of expert kernels (each problem folder: definition.json, workloads.jsonl, "
     "kernel.cu, solution.toml). Without a GPU use the CPU executor; with one, effects are timed on it.",
     "skills mine corpora/kernels --executor cpu --store {store}"),
    ("Render the report and open it in any browser (no server, no network).",
     "skills report --store {store} --out report.html"),
]


class ReportError(ValueError):
    """Bad input for a report: a missing store, an unknown problem."""


# --------------------------------------------------------------------------- data
@dataclass
class ReportData:
    store_root: str
    lineages: list[Lineage]
    skills: list[Skill]
    problems: dict[str, dict[str, Any]] = field(default_factory=dict)  # problem -> {op_type, dir, definition}
    sources: dict[str, str] = field(default_factory=dict)  # kernel hash -> text (expert and final states)
    selected: list[str] = field(default_factory=list)  # the PROBLEM filter ([] = all)
    total_skills: int = 0  # skills in the store (before the problem filter)


def store_state(root: Path | str) -> str:
    """'missing' (no store file), 'empty' (no lineages and no skills) or 'ok'."""
    from skills.store import Store

    st = Store(root, read_only=True)
    if not st.exists():
        return "missing"
    try:
        try:
            tables = set(st.tables())
        except Exception as exc:  # duckdb: another process holds the write lock, or not a duckdb file
            msg = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
            if "lock" in msg.lower():
                raise ReportError(f"store {root} is locked by another process (a running `skills mine`?): "
                                  "try again when it is done") from None
            raise ReportError(f"cannot open store {root}: {msg}") from None
        if not {"lineages", "skills"} <= tables:
            return "empty"
        n = (st.scalar("SELECT count(*) FROM lineages") or 0) + (st.scalar("SELECT count(*) FROM skills") or 0)
        return "ok" if n else "empty"
    finally:
        st.close()


def load_report_data(store: Any, problems: Sequence[str] = (), with_sources: bool = True) -> ReportData:
    """Read what the report shows. `store` is a Store or a KernelStore. Unknown problem -> ReportError."""
    from skills.kernel_store import KernelStore
    from skills.store import Store

    ks = store if isinstance(store, KernelStore) else KernelStore(store)
    st: Store = ks.store
    if not st.exists():
        raise ReportError(f"no store at {st.root}")
    tables = set(st.tables())
    if not {"lineages", "skills", "problems", "kernels"} <= tables:
        return ReportData(str(st.root), [], [], selected=list(problems))
    lineages = ks.lineages()
    known = sorted({lin.problem for lin in lineages})
    skills = ks.skills()
    if problems:
        skill_problems = {e.problem for s in skills for e in s.evidence}
        unknown = [p for p in problems if p not in known and p not in skill_problems]
        if unknown:
            hint = ", ".join(known[:12]) + (" ..." if len(known) > 12 else "") if known else "none"
            raise ReportError(f"unknown problem {unknown[0]!r} in store {st.root} (problems with lineages: {hint})")
    info = {}
    for r in st.query("SELECT problem, op_type, dir, definition FROM problems"):
        try:
            definition = json.loads(r["definition"]) if r["definition"] else {}
        except (TypeError, ValueError):
            definition = {}
        info[r["problem"]] = {"op_type": r["op_type"] or "", "dir": r["dir"] or "", "definition": definition}
    total = len(skills)
    if problems:
        sel = set(problems)
        lineages = [lin for lin in lineages if lin.problem in sel]
        skills = [s for s in skills if any(e.problem in sel for e in s.evidence)]
    sources: dict[str, str] = {}
    if with_sources:
        wanted = {h for lin in lineages for h in (lin.kernel_hash, lin.final_hash) if h}
        if wanted:
            hs = sorted(wanted)
            marks = ",".join("?" * len(hs))
            for r in st.query(f"SELECT kernel_hash, source FROM kernels WHERE kernel_hash IN ({marks})", hs):
                sources[r["kernel_hash"]] = r["source"]
    return ReportData(str(st.root), lineages, skills, info, sources, list(problems), total)


def build_report(store: Any, problems: Sequence[str] = (), title: str = "", generated: str = "") -> str:
    """Store (Store, KernelStore or a root path) -> the report's HTML."""
    from skills.store import Store

    if isinstance(store, (str, Path)):
        root = Path(store)
        if store_state(root) == "missing":
            raise ReportError(f"no store at {root}")
        store = Store(root, read_only=True)
    return render_report(load_report_data(store, problems), title=title, generated=generated)


# --------------------------------------------------------------------------- small helpers
def e(x: Any) -> str:
    return escape("" if x is None else str(x))


def _slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"
    return s


def step_anchor(lineage_id: str, index: int) -> str:
    return f"{lineage_id}-s{index}"


def _fmt_ratio(r: float) -> str:
    return f"×{r:.0f}" if r >= 100 else f"×{r:.1f}" if r >= 10 else f"×{r:.2f}"


def _ratio_class(r: float) -> str:
    return "good" if r > 1.02 else "bad" if r < 0.98 else "flat"


def _ratio_html(eff: Effect, device: bool = False) -> str:
    if not eff.time_ratio:
        return ""
    spread = ""
    if eff.time_ratio_q1 and eff.time_ratio_q3 and (eff.time_ratio_q1, eff.time_ratio_q3) != (eff.time_ratio, eff.time_ratio):
        spread = f' <span class="spread">({eff.time_ratio_q1:.2f}–{eff.time_ratio_q3:.2f})</span>'
    dev = f' <span class="muted">{e(eff.device)}</span>' if device else ""
    return f'<span class="ratio {_ratio_class(eff.time_ratio)}">{_fmt_ratio(eff.time_ratio)}</span>{spread}{dev}'


def _static_parts(eff: Effect, sass_top: int = 3) -> list[str]:
    parts = []
    if eff.registers_delta is not None:
        parts.append(f"regs {eff.registers_delta:+d}")
    if eff.smem_delta is not None:
        parts.append(f"smem {eff.smem_delta:+d} B")
    if eff.spill_delta:
        parts.append(f"spills {eff.spill_delta:+d} B")
    for op, dlt in sorted(((o, d) for o, d in eff.sass_delta.items() if d), key=lambda kv: -abs(kv[1]))[:sass_top]:
        parts.append(f"{op} {dlt:+d}")
    return parts


def _abs_ms(eff: Effect) -> tuple[Optional[float], Optional[float]]:
    """(optimized median ms, simpler median ms) from an effect's raw timings, when recognisable."""
    t = eff.timings_ms or {}

    def med(v: Any) -> Optional[float]:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        if isinstance(v, dict):
            for k in ("median_ms", "median", "ms"):
                if isinstance(v.get(k), (int, float)):
                    return float(v[k])
        return None

    opt = simp = None
    for k, v in t.items():
        kl = k.lower()
        if opt is None and ("optim" in kl or kl in ("after", "expert", "fast")):
            opt = med(v)
        elif simp is None and ("simpl" in kl or kl in ("before", "naive", "slow")):
            simp = med(v)
    return opt, simp


def _dtypes(definition: dict[str, Any]) -> list[str]:
    out = []
    for group in ("inputs", "outputs"):
        for spec in (definition.get(group) or {}).values():
            if isinstance(spec, dict) and spec.get("dtype"):
                out.append(str(spec["dtype"]))
    return sorted(set(out))


def _probe_text(probe: dict[str, Any]) -> str:
    parts = []
    for k, v in probe.items():
        if isinstance(v, dict):
            parts.append(", ".join(f"{kk}={vv}" for kk, vv in v.items()))
        else:
            parts.append(f"{k}: {v}")
    return "; ".join(parts)


def _probe_table(probes: list[dict[str, Any]]) -> str:
    if not probes:
        return ""
    cols: list[str] = []
    for p in probes:
        for k in p:
            if k not in cols:
                cols.append(k)
    head = "".join(f"<th>{e(c)}</th>" for c in cols)

    def cell(v: Any) -> str:
        if isinstance(v, bool):  # a verdict
            v = "pass" if v else "fail"
        if isinstance(v, dict):
            v = ", ".join(f"{k}={x}" for k, x in v.items())
        elif isinstance(v, list):
            v = ", ".join(str(x) for x in v)
        s = str(v)
        verdict = "pass" if s in ("pass", "ok") else "fail" if s in ("fail", "error") else ""
        if verdict:
            return f'<td><span class="chip {verdict}">{e(s)}</span></td>'
        return f'<td class="mono">{e(s)}</td>'

    body = "".join("<tr>" + "".join(cell(p.get(c, "")) for c in cols) + "</tr>" for p in probes[:24])
    more = f'<p class="muted">{len(probes) - 24} more probes not shown</p>' if len(probes) > 24 else ""
    verdicts = {c: sum(1 for p in probes if p.get(c) in (True, "pass", "ok")) for c in cols
                if any(isinstance(p.get(c), bool) or p.get(c) in ("pass", "fail") for p in probes)}
    tally = ", ".join(f"{c} passes {n}" for c, n in verdicts.items())
    failed = any(n < len(probes) for n in verdicts.values())
    return (f'<details class="probes"{" open" if failed else ""}><summary class="muted">{len(probes)} probe(s)'
            f'{": " + e(tally) if tally else ""}</summary><table class="t probes"><thead><tr>{head}</tr></thead>'
            f'<tbody>{body}</tbody></table>{more}</details>')


def _step_effects(lin: Lineage, step: Step, by_id: dict[str, Skill]) -> list[Effect]:
    if step.effect:
        return step.effect
    sk = by_id.get(step.skill_id)
    if sk:
        for ev in sk.evidence:
            if ev.lineage_id == lin.lineage_id and ev.step == step.index:
                return ev.effect
    return []


def _gate_summary(gate: dict[str, Any]) -> str:
    """One line from a step's compact gate summary (stages' status, cases)."""
    parts = []
    stages = gate.get("stages")
    if isinstance(stages, dict):
        for k, v in stages.items():
            st = v.get("status") if isinstance(v, dict) else v
            if st:
                parts.append(f"{k} {st}")
    for k, v in gate.items():
        if k in ("stages", "verdict", "wall_s"):
            continue
        if isinstance(v, dict):
            st = v.get("status") or v.get("verdict")
            n = v.get("cases")
            if st:
                parts.append(f"{k} {st}" + (f" ({n} cases)" if isinstance(n, (int, str)) and n != "" else ""))
        elif isinstance(v, (str, int, float)) and not isinstance(v, bool) and v != "" and len(str(v)) < 60:
            parts.append(f"{k} {v}")
    return " · ".join(parts[:8])


def _short(h: str, n: int = 10) -> str:
    return h[:n] if h else ""


# --------------------------------------------------------------------------- lineage
@dataclass
class _LineageView:
    lin: Lineage
    effects: dict[int, list[Effect]]  # accepted step index -> effects
    device: str  # primary timing device ('' when no GPU timing)
    total_ratio: Optional[float]  # naive / expert time on `device`


def _lineage_view(lin: Lineage, by_id: dict[str, Skill]) -> _LineageView:
    effects = {s.index: _step_effects(lin, s, by_id) for s in lin.steps}
    devices = Counter(ef.device for effs in effects.values() for ef in effs if ef.method == "gpu_timing" and ef.time_ratio)
    device = devices.most_common(1)[0][0] if devices else ""
    total = None
    if device:
        total = 1.0
        for effs in effects.values():
            g = next((ef for ef in effs if ef.method == "gpu_timing" and ef.device == device and ef.time_ratio), None)
            if g:
                total *= g.time_ratio
    return _LineageView(lin, effects, device, total)


def _chart(view: _LineageView) -> str:
    lin = view.lin
    rows_meta = [(s, f"{s.index} · {s.carrier}", f"{s.operator}" + (f", line {s.site_line}" if s.site_line else ""),
                  "#" + step_anchor(lin.lineage_id, s.index)) for s in lin.steps]
    if not lin.steps:
        return ('<figure class="chart-none"><figcaption><span class="kind none">no steps</span>'
                "the walk accepted no simplification, so there is no effect to chart</figcaption></figure>")
    if view.device:
        rows, workloads, base = [], Counter(), None
        for s, label, sub, href in rows_meta:
            g = next((ef for ef in view.effects[s.index] if ef.method == "gpu_timing" and ef.device == view.device
                      and ef.time_ratio), None)
            if g and g.workload:
                workloads[g.workload] += 1
            if g and base is None and s is lin.steps[0]:
                base = _abs_ms(g)[0]
            rows.append(TimeRow(label, sub, g.time_ratio if g else None, g.time_ratio_q1 if g else None,
                                g.time_ratio_q3 if g else None, href))
        wl = workloads.most_common(1)[0][0] if workloads else ""
        title = f"GPU time along the walk of {lin.problem}/{lin.kernel} on {view.device}"
        svg = time_waterfall(rows, title, base_ms=base, final_label="naive (end of walk)")
        cap = (f'<span class="kind">GPU timing</span><b>{e(view.device)}</b>'
               + (f" · workload <code>{e(wl)}</code>" if wl else "")
               + " · each bar: how much slower the kernel became when the step removed its optimization"
                 " (median ratio, whiskers q1–q3); bottom: expert → naive")
        legend = ('<div class="legend"><span><i style="background:var(--good)"></i>optimization helped</span>'
                  '<span><i style="background:var(--bad)"></i>optimization hurt</span>'
                  '<span><i style="background:var(--flat)"></i>within ±2%</span>'
                  '<span><i style="background:var(--total)"></i>whole walk</span></div>')
        timed = [r for r in rows if r.ratio]
        total = math.prod(r.ratio for r in timed) if timed else 1.0
        ms = f" ({fmt_ms(base)} → {fmt_ms(base * total)})" if base else ""
        top = max(timed, key=lambda r: r.ratio) if timed else None
        cls = _ratio_class(total)
        how = (f"<span class='ratio {cls}'>{_fmt_ratio(total)}</span> slower" if cls == "good" else
               f"<span class='ratio {cls}'>{_fmt_ratio(1 / total)}</span> faster" if cls == "bad" else
               f"no slower (<span class='ratio flat'>{_fmt_ratio(total)}</span>)")
        head = (f"Removing {len(lin.steps)} optimization{'s' if len(lin.steps) != 1 else ''} made "
                f"{e(lin.problem)} {how} on {e(view.device)}{ms}"
                + (f"; the biggest single step: {e(top.label.split(' · ', 1)[-1])} {_fmt_ratio(top.ratio)}"
                   if top and len(timed) > 1 and top.ratio > 1.02 else ""))
        return f'<figure class="chart-time"><div class="headline">{head}</div><figcaption>{cap}</figcaption>{svg}{legend}</figure>'
    static_devs = {ef.device for s in lin.steps for ef in view.effects[s.index] if ef.method == "static"}
    sdev = max(static_devs, key=_arch_key) if static_devs else ""
    statics = {s.index: next((ef for ef in view.effects[s.index] if ef.method == "static" and ef.device == sdev), None)
               for s in lin.steps}
    if any(statics.values()):
        devs = Counter(ef.device for ef in statics.values() if ef)
        rows = []
        for s, label, sub, href in rows_meta:
            ef = statics[s.index]
            rows.append(StaticRow(label, sub, ef.registers_delta if ef else None, ef.smem_delta if ef else None,
                                  ef.spill_delta if ef else None, dict(ef.sass_delta) if ef else {}, href))
        dev = devs.most_common(1)[0][0]
        svg = static_deltas(rows, f"Static deltas of each step's optimization, {lin.problem}/{lin.kernel} ({dev})")
        cap = (f'<span class="kind static">static deltas only</span><b>{e(dev)}</b> · no GPU timing in this store '
               f"(executor <code>{e(lin.executor)}</code>), so no speed is claimed: what each removed optimization "
               "changed in the compiled kernel (optimized − simpler; ptxas registers, shared memory, spills, SASS opcodes)")
        tot = {k: sum(getattr(ef, k) or 0 for ef in statics.values() if ef) for k in ("registers_delta", "smem_delta")}
        sass_tot = sum(sum(ef.sass_delta.values()) for ef in statics.values() if ef)
        head = (f"Expert − naive in the compiled kernel ({e(dev)}): registers {tot['registers_delta']:+,d}, "
                f"shared memory {tot['smem_delta']:+,d} B, SASS instructions {sass_tot:+,d}")
        return f'<figure class="chart-static"><div class="headline">{head}</div><figcaption>{cap}</figcaption>{svg}</figure>'
    rows = []
    for s, label, sub, href in rows_meta:
        rem, add = diff_stats(s.diff)
        rows.append(DiffRow(label, sub, rem, add, href))
    svg = diff_sizes(rows, f"Diff size of each step, {lin.problem}/{lin.kernel}")
    cap = (f'<span class="kind none">no effect measured</span>executor <code>{e(lin.executor)}</code> recorded neither '
           "GPU timing nor static deltas: the chart shows only how many lines each step changed")
    return f'<figure class="chart-diff"><figcaption>{cap}</figcaption>{svg}</figure>'


def _arch_key(device: str) -> tuple[int, str]:
    """Sort key preferring the newest architecture ("static:sm_90" over "static:sm_80")."""
    m = re.search(r"sm_?(\d+)", device)
    return (int(m.group(1)) if m else 0, device)


def _effect_cell(effs: list[Effect], device: str) -> str:
    if not effs:
        return '<span class="muted">not measured</span>'
    parts = []
    g = [ef for ef in effs if ef.method == "gpu_timing" and ef.time_ratio]
    for ef in sorted(g, key=lambda x: (x.device != device, x.device))[:2]:
        parts.append(f"<div>{_ratio_html(ef, device=True)}</div>")
    st = max((ef for ef in effs if ef.method == "static"), key=lambda ef: _arch_key(ef.device), default=None)
    if st:
        sp = _static_parts(st)
        if sp:
            parts.append(f'<div class="mono muted" title="{e(st.device)}">{e(" · ".join(sp))}</div>')
    return "".join(parts) or '<span class="muted">not measured</span>'


def _diff_box(diff: str, old_label: str, new_label: str, cache: Optional[LineCache] = None) -> str:
    rem, add = diff_stats(diff)
    return (f'<div class="diffbox" data-view="unified"><div class="diffbar"><span class="files">{e(old_label)} → '
            f'{e(new_label)} <span style="color:#cf222e">−{rem}</span> <span style="color:#1a7f37">+{add}</span></span>'
            '<span class="seg"><button type="button" data-mode="unified" class="on">unified</button>'
            '<button type="button" data-mode="split">side by side</button></span></div>'
            f'<div class="diffscroll">{render_diff(diff, old_label, new_label, cache)}</div></div>')


def _lineage_inner(view: _LineageView, by_id: dict[str, Skill], sources: dict[str, str]) -> str:
    lin = view.lin
    cache = LineCache()  # the steps of one walk share most of their lines
    term_label, term_text = TERMINATION.get(lin.termination, (lin.termination, ""))
    term_cls = "" if lin.termination == "complete" else "failed" if lin.termination == "start_failed" else "other"
    meta = [f"expert <code>{e(lin.kernel)}</code> <span class='mono muted'>{e(_short(lin.kernel_hash))}</span>",
            f"executor <b>{e(lin.executor)}</b>", f"strategy <b>{e(lin.strategy)}</b>",
            f"{len(lin.steps)} accepted, {len(lin.rejections)} rejected",
            f"walk {lin.wall_s:.1f}s"]
    if lin.llm_tokens:
        meta.append(f"{lin.llm_tokens} LLM tokens")
    out = [f'<h3>{e(lin.problem)} / {e(lin.kernel)} <span class="mono muted" style="font-weight:400;font-size:12px">'
           f'{e(lin.lineage_id)}</span></h3>',
           f'<div class="muted" style="font-size:12.5px">{" · ".join(meta)}</div>',
           f'<div class="term {term_cls}"><b>{e(term_label)}</b><span>{e(term_text)}'
           + (f" (final state <span class='mono'>{e(_short(lin.final_hash))}</span>)" if lin.final_hash else "")
           + "</span></div>"]
    out.append(_chart(view))
    # the lineage as a table
    if lin.steps:
        rows = []
        for s in lin.steps:
            sk = by_id.get(s.skill_id)
            skill_link = (f'<a href="#skill-{e(sk.skill_id)}">{e(sk.name)}</a>' if sk else
                          f'<span class="mono muted">{e(s.skill_id)}</span>' if s.skill_id else '<span class="muted">–</span>')
            excerpt = s.site_excerpt if len(s.site_excerpt) <= 90 else s.site_excerpt[:89] + "…"
            rows.append(
                f'<tr><td class="num"><a href="#{e(step_anchor(lin.lineage_id, s.index))}">{s.index}</a></td>'
                f'<td><span class="chip carrier">{e(s.carrier)}</span><div class="mono muted" style="font-size:11.5px">'
                f'{e(s.operator)}{" · llm" if s.proposer == "llm" else ""}</div></td>'
                f'<td><span class="muted">line {s.site_line}</span> <span class="excerpt hl">{highlight(excerpt)}</span></td>'
                f"<td>{_effect_cell(view.effects[s.index], view.device)}</td><td>{skill_link}</td></tr>")
        out.append('<table class="t steps"><thead><tr><th class="num">step</th><th>removed</th><th>site</th>'
                   f'<th>effect of the optimization</th><th>skill</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')
    # rejected candidates
    if lin.rejections:
        by_reason = Counter((r.verdict or "fail") for r in lin.rejections)
        summary = ", ".join(f"{n} {v}" for v, n in by_reason.most_common())
        rows = []
        for n, r in enumerate(lin.rejections):
            diff = ""
            if r.diff:
                diff = f'<details><summary class="muted">diff</summary>{_diff_box(r.diff, "input", "candidate", cache)}</details>'
            verdict_cls = "warn" if r.verdict in ("unsupported", "error") else "fail"
            rows.append(
                f'<tr id="{e(lin.lineage_id)}-r{n}"><td class="num">{r.index}</td>'
                f'<td><span class="chip carrier">{e(r.carrier)}</span><div class="mono muted" style="font-size:11.5px">'
                f"{e(r.operator)}</div></td><td><span class='muted'>{f'line {r.site_line}' if r.site_line else '–'}</span></td>"
                f'<td><span class="chip {verdict_cls}">{e(r.verdict or "rejected")}</span></td>'
                f'<td><pre class="reason">{e(r.reason or "(no reason recorded)")}</pre>{diff}</td></tr>')
        out.append(f'<details class="rejections"{" open" if len(lin.rejections) <= 6 else ""}><summary>Rejected candidates '
                   f'<span class="muted">({len(lin.rejections)}: {e(summary)}) — each is evidence of what this kernel needs'
                   '</span></summary><table class="t"><thead><tr><th class="num">tried at</th><th>candidate</th><th>site</th>'
                   f'<th>verdict</th><th>reason</th></tr></thead><tbody>{"".join(rows)}</tbody></table></details>')
    # steps with their diffs
    for s in lin.steps:
        sk = by_id.get(s.skill_id)
        gate = _gate_summary(s.gate)
        effs = view.effects[s.index]
        eff_line = []
        for ef in effs:
            if ef.method == "gpu_timing" and ef.time_ratio:
                eff_line.append(_ratio_html(ef, device=True) + (f' <span class="muted">{e(ef.workload)}</span>' if ef.workload else ""))
            elif ef.method == "static":
                sp = _static_parts(ef, 6)
                if sp:
                    eff_line.append(f'<span class="mono">{e(" · ".join(sp))}</span> <span class="muted">({e(ef.device)})</span>')
        out.append(
            f'<section class="step" id="{e(step_anchor(lin.lineage_id, s.index))}">'
            f'<h4>Step {s.index}: removed <span class="chip carrier">{e(s.carrier)}</span> '
            f'<span class="mono" style="font-weight:400">{e(s.operator)}</span>'
            f'{f" at line {s.site_line}" if s.site_line else ""}</h4>'
            f'<div class="meta"><span class="chip pass">{e(s.verdict or "pass")}</span> '
            f"{e(gate)}{' · ' if gate else ''}{s.wall_s:.1f}s · proposer {e(s.proposer)}"
            + (f' · became skill <a href="#skill-{e(sk.skill_id)}">{e(sk.name)}</a>' if sk else "")
            + "</div>"
            + (f'<div class="meta">effect of the optimization: {" &nbsp;|&nbsp; ".join(eff_line)}</div>' if eff_line else "")
            + _diff_box(s.diff, f"step {s.index - 1} ({_short(s.before_hash, 8)})" if s.index > 1 else f"expert ({_short(s.before_hash, 8)})",
                        f"step {s.index} ({_short(s.after_hash, 8)})", cache)
            + "</section>")
    # the whole walk in one diff
    a, b = sources.get(lin.kernel_hash), sources.get(lin.final_hash)
    if a is not None and b is not None and lin.final_hash != lin.kernel_hash:
        import difflib

        whole = "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), "expert", "naive", n=2))
        out.append(f'<details class="whole"><summary>Whole walk: expert → naive in one diff</summary>'
                   f'{_diff_box(whole, "expert " + _short(lin.kernel_hash, 8), "naive " + _short(lin.final_hash, 8), cache)}</details>')
    return "".join(out)


# --------------------------------------------------------------------------- skills
def _precondition_html(p: Precondition) -> str:
    text = p.text or {"divisible": f"{p.axis} % {p.value} == 0", "minimum": f"{p.axis} >= {p.value}",
                      "maximum": f"{p.axis} <= {p.value}",
                      "alignment": f"pointers aligned to {p.value} B", "power_of_two": f"{p.axis} is a power of two",
                      "guarded": "guarded in code", "none_found": "none found"}.get(p.kind, p.kind)
    status = {"discovered": "pass", "guarded_in_code": "warn", "not_needed": ""}.get(p.status, "")
    head = (f'<code>{e(text)}</code> <span class="chip {status}">{e(p.status.replace("_", " "))}</span> '
            f'<span class="muted">{e(p.kind)} · from {e(p.source.replace("_", " "))}'
            + (f" · {len(p.probes)} probe(s)" if p.probes else "") + "</span>")
    return f"<li>{head}{_probe_table(p.probes)}</li>"


def _effects_table(effs: list[Effect]) -> str:
    if not effs:
        return '<span class="muted">not measured</span>'
    rows = []
    for ef in effs:
        ratio = _ratio_html(ef) if ef.time_ratio else '<span class="muted">–</span>'
        rows.append(f"<tr><td>{e(ef.device)}</td><td>{e(ef.method.replace('_', ' '))}</td><td>{ratio}</td>"
                    f"<td>{e(ef.workload)}</td><td class='mono'>{e(' · '.join(_static_parts(ef, 6))) or '–'}</td></tr>")
    return ('<table class="t"><thead><tr><th>device</th><th>method</th><th>time (simpler ÷ optimized)</th><th>workload</th>'
            f'<th>static (optimized − simpler)</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _chips(values: Iterable[str], cls: str, filt: str = "") -> str:
    out = []
    for v in values:
        if filt:
            out.append(f'<button type="button" class="chip {cls}" data-filter="{filt}:{e(v)}" title="filter the index">{e(v)}</button>')
        else:
            out.append(f'<span class="chip {cls}">{e(v)}</span>')
    return "".join(out) or '<span class="muted">–</span>'


def _skill_inner(sk: Skill, present: set[str]) -> str:
    a = sk.anchor
    anchor_bits = [f"in <code>{e(a.function)}</code>" if a.function else "", f"line {a.line}" if a.line else "",
                   f"loop <code>{e(a.enclosing_loop)}</code>" if a.enclosing_loop else ""]
    anchor = " · ".join(b for b in anchor_bits if b)
    if a.ast_path:
        anchor += f'<div class="mono muted" style="font-size:11px">{e(" › ".join(a.ast_path))}</div>'
    if a.excerpt:
        anchor += f'<pre class="code hl">{highlight(a.excerpt)}</pre>'
    pre = "".join(_precondition_html(p) for p in sk.preconditions) or '<li class="muted">none recorded</li>'
    risks = "".join(
        f"<li>{e(r.text)}" + (f' <span class="muted mono">[{e(_probe_text(r.probe))}]</span>' if r.probe else "")
        + (f'<pre class="reason">{e(r.failure)}</pre>' if r.failure else "") + "</li>" for r in sk.risks) \
        or '<li class="muted">none observed</li>'
    scope = sk.scope or {}
    ev_rows = []
    for ev in sk.evidence:
        anchor_id = step_anchor(ev.lineage_id, ev.step)
        step_link = (f'<a href="#{e(anchor_id)}">{e(ev.problem)} step {ev.step}</a>' if ev.lineage_id in present
                     else f"{e(ev.problem)} step {ev.step}")
        tol = ", ".join(f"{k}: rtol {v[0]:g} atol {v[1]:g}" for k, v in ev.tolerances.items() if len(v) >= 2)
        ev_rows.append(f"<tr><td>{step_link}</td><td class='mono'>{e(ev.lineage_id)}</td><td>{e(ev.executor)}</td>"
                       f"<td>{e(', '.join(ev.workloads[:6]))}{' …' if len(ev.workloads) > 6 else ''}</td>"
                       f"<td>{e(', '.join(map(str, ev.seeds)))}</td><td>{e(tol)}</td>"
                       f"<td>{' · '.join(_ratio_html(ef) for ef in ev.effect if ef.time_ratio) or ''}</td></tr>")
    evidence = ('<table class="t"><thead><tr><th>step</th><th>lineage</th><th>executor</th><th>workloads</th><th>seeds</th>'
                f'<th>tolerances</th><th>time</th></tr></thead><tbody>{"".join(ev_rows)}</tbody></table>') if ev_rows \
        else '<span class="muted">none</span>'
    prov = sk.provenance or {}
    prov_bits = [f"tool <code>{e(prov['tool_version'])}</code>" if prov.get("tool_version") else "",
                 "kernels " + " ".join(f"<code>{e(_short(h))}</code>" for h in prov.get("kernel_hashes", [])[:6])
                 if prov.get("kernel_hashes") else "",
                 f"{len(prov.get('lineages', []))} lineage(s)" if prov.get("lineages") else ""]
    for k, v in prov.items():
        if k not in ("tool_version", "kernel_hashes", "lineages", "per_lineage") and isinstance(v, (str, int, float)):
            prov_bits.append(f"{e(k)} <code>{e(v)}</code>")
    features = []
    for label, vals in (("requires", sk.requires), ("provides", sk.provides), ("conflicts", sk.conflicts)):
        if vals:
            features.append(f"{label}: " + _chips(vals, ""))
    verification = ""
    if sk.verification:
        lines = "\n".join(sk.verification[:40]) + (f"\n… {len(sk.verification) - 40} more" if len(sk.verification) > 40 else "")
        verification = (f'<details><summary class="muted">verification log ({len(sk.verification)} lines)</summary>'
                        f'<pre class="reason" style="max-height:none">{e(lines)}</pre></details>')
    came_from = []
    for ev in sk.evidence:
        if ev.lineage_id in present:
            came_from.append(f'<a href="#{e(step_anchor(ev.lineage_id, ev.step))}">{e(ev.problem)} · step {ev.step}</a>')
        else:
            came_from.append(f'<span class="muted">{e(ev.problem)} · step {ev.step} (not in this report)</span>')
    return (
        f'<h3>{e(sk.name)} <button type="button" class="chip carrier" data-filter="carrier:{e(sk.carrier)}" '
        f'title="filter the index by carrier">{e(sk.carrier)}</button><span class="sid">{e(sk.skill_id)} · {e(sk.key)}</span></h3>'
        f'<p class="intent">{e(sk.intent)}</p>'
        '<dl class="kv">'
        f'<dt>carrier</dt><dd><span class="chip carrier">{e(sk.carrier)}</span> inverse of <code>{e(sk.operator)}</code>'
        f'{f" · variant <code>{e(sk.variant)}</code>" if sk.variant else ""}{f" · {e(sk.kind)}" if sk.kind != "kernel" else ""}</dd>'
        f"<dt>anchor</dt><dd>{anchor or '<span class=muted>–</span>'}</dd>"
        f'<dt>preconditions</dt><dd><ul class="plain">{pre}</ul></dd>'
        f"<dt>effect</dt><dd>{_effects_table(sk.effect)}</dd>"
        f'<dt>risks</dt><dd><ul class="plain">{risks}</ul></dd>'
        f"<dt>scope</dt><dd>{_chips(scope.get('op_types', []), 'op', 'op')} {_chips(scope.get('dtypes', []), 'dtype', 'dtype')} "
        f"{_chips(scope.get('archs', []), 'arch', 'arch')} <span class='muted'>problems:</span> "
        f"{_chips(scope.get('problems', []), '')}</dd>"
        + (f"<dt>features</dt><dd>{' · '.join(features)}</dd>" if features else "")
        + f"<dt>evidence</dt><dd>{evidence}</dd>"
        f"<dt>provenance</dt><dd>{' · '.join(b for b in prov_bits if b) or '<span class=muted>–</span>'}{verification}</dd>"
        f"<dt>came from</dt><dd>{' · '.join(came_from) or '<span class=muted>–</span>'}</dd>"
        "</dl>")


def _best_gpu(sk: Skill) -> Optional[Effect]:
    g = [ef for ef in sk.effect if ef.method == "gpu_timing" and ef.time_ratio]
    return max(g, key=lambda ef: ef.time_ratio) if g else None


def _render_index(skills: list[Skill], blocks: "_Blocks") -> str:
    facets = {"carrier": Counter(), "op": Counter(), "dtype": Counter(), "arch": Counter()}
    rows = []
    for sk in skills:
        scope = sk.scope or {}
        ops, dts, archs = scope.get("op_types", []), scope.get("dtypes", []), scope.get("archs", [])
        facets["carrier"][sk.carrier] += 1
        for k, vals in (("op", ops), ("dtype", dts), ("arch", archs)):
            for v in vals:
                facets[k][v] += 1
        g = _best_gpu(sk)
        if g:
            eff_html, eff_v = f'<span title="{e(g.device)}">{_ratio_html(g)}</span>', f"{g.time_ratio:.4f}"
        else:
            st = next((ef for ef in sk.effect if ef.method == "static"), None)
            eff_html = f'<span class="mono muted">{e(" · ".join(_static_parts(st, 2)))}</span>' if st else '<span class="muted">–</span>'
            eff_v = "0"
        npre = sum(1 for p in sk.preconditions if p.kind != "none_found")
        hidden_text = " ".join([sk.key, sk.operator, *scope.get("problems", [])]).lower()  # the rest is visible text
        rows.append(
            f'<tr data-id="{e(sk.skill_id)}" data-carrier="{e(sk.carrier)}" data-op="{e(" ".join(ops))}" '
            f'data-dtype="{e(" ".join(dts))}" data-arch="{e(" ".join(archs))}" data-text="{e(hidden_text)}">'
            f'<td><a href="#skill-{e(sk.skill_id)}">{e(sk.name)}</a>'
            f'<div class="intent-s">{e(sk.intent[:120])}{"…" if len(sk.intent) > 120 else ""}</div></td>'
            f'<td><span class="chip carrier">{e(sk.carrier)}</span></td>'
            f"<td>{_chips(ops, 'op')}</td><td>{_chips(dts, 'dtype')}</td><td>{_chips(archs, 'arch')}</td>"
            f'<td class="num" data-v="{len(sk.evidence)}">{len(sk.evidence)}</td>'
            f'<td class="num" data-v="{npre}">{npre or "–"}</td>'
            f'<td data-v="{eff_v}">{eff_html}</td></tr>')

    def select(key: str, label: str) -> str:
        opts = "".join(f'<option value="{e(v)}">{e(v)} ({n})</option>' for v, n in sorted(facets[key].items()))
        return f'<select id="f-{key}" data-f="{key}" aria-label="{label}"><option value="">{label}: all</option>{opts}</select>'

    return (
        '<div class="filters"><input id="f-q" type="search" placeholder="Search skills: name, intent, carrier, problem…" '
        'aria-label="search skills">'
        + select("carrier", "carrier") + select("op", "op type") + select("dtype", "dtype") + select("arch", "arch")
        + f'<button type="button" id="f-clear">clear</button><span class="count" id="f-count">{len(skills)} of {len(skills)} skills</span></div>'
        '<div class="indexwrap"><table class="t" id="skill-table"><thead><tr><th data-sort="text">skill</th>'
        '<th data-sort="text">carrier</th><th>op types</th><th>dtypes</th><th>archs</th>'
        '<th class="num" data-sort="num">evidence</th><th class="num" data-sort="num">precond.</th>'
        f'<th data-sort="num" title="largest GPU time ratio, else static deltas">best effect</th></tr></thead>'
        + blocks.tbody("skill-tbody", "".join(rows)) + '</table></div>')


# --------------------------------------------------------------------------- page
def _page(title: str, nav: str, body: str, data_script: str = "") -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="generator" content="kernel-skills report"><title>{e(title)}</title>'
            f"<style>{CSS}</style></head><body><div class=\"layout\">{nav}<main>{body}</main></div>"
            f"{data_script}<script>{JS}</script></body></html>\n")


def empty_report(store_root: str, title: str = "") -> str:
    """The page for a store with nothing in it yet: how to build one."""
    steps = "".join(f"<li>{e(text)}<pre>{e(cmd.format(store=store_root))}</pre></li>" for text, cmd in HOW_TO_BUILD)
    body = (f'<header class="top"><h1>{e(title or "Kernel skills report")}</h1>'
            f'<p class="lede">Store <code>{e(store_root)}</code></p></header>'
            '<div class="card empty" id="empty-store"><h2 style="margin-top:0">This store holds no lineages yet</h2>'
            "<p>A lineage is one backward walk from an expert kernel down to a naive one, one validated "
            "simplification per step; each step reversed becomes a skill. Build some, then come back:</p>"
            f"<ol>{steps}</ol></div>")
    nav = (f'<nav class="side"><div class="brand">kernel<b>·</b>skills</div><div class="store">{e(store_root)}</div></nav>')
    return _page(title or "Kernel skills report (empty)", nav, body)


LAZY_ABOVE = 400  # steps + rejections + skills above which heavy blocks are filled in on demand


class _Blocks:
    """Lineage cards and skill cards, written in place (small reports) or lazily: the element is an
    empty placeholder with its id (so links and filters work) and its HTML waits in one JSON
    object, gzipped and base64-encoded into a data <script>, that the page's script unpacks
    (DecompressionStream) and fills in as each placeholder nears the viewport. A store with
    thousands of skills then parses as a few MB of HTML plus one opaque string (about 10x
    smaller than the same HTML written out)."""

    def __init__(self, lazy: bool):
        self.lazy = lazy
        self.data: dict[str, str] = {}

    def _block(self, tag: str, cls: str, elem_id: str, inner: str, est_px: int, extra: str = "") -> str:
        if self.lazy:
            self.data[elem_id] = inner
            return (f'<{tag} class="{cls}" id="{e(elem_id)}"{extra} data-lazy="1" '
                    f'style="min-height:{est_px}px"></{tag}>')
        return f'<{tag} class="{cls}" id="{e(elem_id)}"{extra}>{inner}</{tag}>'

    def lineage(self, view: _LineageView, by_id: dict[str, Skill], sources: dict[str, str]) -> str:
        lin = view.lin
        lines = sum(sum(diff_stats(s.diff)) + 8 for s in lin.steps)
        est = 330 + 150 * len(lin.steps) + 19 * lines + (60 + 50 * len(lin.rejections) if lin.rejections else 0)
        return self._block("div", "card lineage", lin.lineage_id, _lineage_inner(view, by_id, sources), est,
                           f' data-problem="{e(lin.problem)}"')

    def skill(self, sk: Skill, present: set[str]) -> str:
        est = 560 + 36 * len(sk.evidence) + 30 * len(sk.preconditions)
        return self._block("article", "card skill", f"skill-{sk.skill_id}", _skill_inner(sk, present), est)

    def tbody(self, elem_id: str, rows: str) -> str:
        if self.lazy:
            self.data[elem_id] = rows
            return f'<tbody id="{elem_id}" data-lazy="1"></tbody>'
        return f'<tbody id="{elem_id}">{rows}</tbody>'

    def script(self) -> str:
        if not self.data:
            return ""
        import base64
        import gzip

        raw = json.dumps(self.data, ensure_ascii=False, separators=(",", ":")).encode()
        packed = base64.b64encode(gzip.compress(raw, 6, mtime=0)).decode()
        return (f'<script type="application/octet-stream" id="lazy-data" data-encoding="gzip+base64" '
                f'data-bytes="{len(raw)}">{packed}</script>')


def render_report(data: ReportData, title: str = "", generated: str = "", lazy: Optional[bool] = None) -> str:
    """The report's HTML for loaded data (pure: same data, same page). `lazy`: fill lineage and
    skill cards in on demand (default: when the store is big, see LAZY_ABOVE)."""
    if not data.lineages and not data.skills:
        return empty_report(data.store_root, title)
    if lazy is None:
        lazy = sum(len(lin.steps) + len(lin.rejections) for lin in data.lineages) + len(data.skills) > LAZY_ABOVE
    blocks = _Blocks(lazy)
    title = title or "Kernel skills report"
    generated = generated or _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    by_id = {s.skill_id: s for s in data.skills}
    views = [_lineage_view(lin, by_id) for lin in data.lineages]
    present = {lin.lineage_id for lin in data.lineages}
    by_problem: dict[str, list[_LineageView]] = {}
    for v in views:
        by_problem.setdefault(v.lin.problem, []).append(v)
    problems = sorted(by_problem)
    n_steps = sum(len(v.lin.steps) for v in views)
    n_rej = sum(len(v.lin.rejections) for v in views)
    devices = sorted({v.device for v in views if v.device})
    executors = sorted({v.lin.executor for v in views})
    timed = [s for s in data.skills if _best_gpu(s)]

    tiles = [("problems", len(problems), ""), ("lineages", len(views), ""), ("accepted steps", n_steps, ""),
             ("rejected candidates", n_rej, ""), ("skills", len(data.skills), "hl"), ("skills timed on a GPU", len(timed), "")]
    tiles_html = "".join(f'<div class="tile {c}"><div class="num">{n}</div><div class="lab">{e(lbl)}</div></div>'
                         for lbl, n, c in tiles)
    scope_note = (f" Showing problems {', '.join(data.selected)} ({len(data.skills)} of {data.total_skills} skills)."
                  if data.selected else "")
    head = (f'<header class="top" id="overview"><h1>{e(title)}</h1>'
            '<p class="lede">Each lineage walks an expert kernel backward, one validated simplification at a time, '
            "until nothing simpler passes the gate; every accepted step still compiles and computes the right answer. "
            "Read upward, each step is an optimization, and each one became a skill."
            f'{e(scope_note)}</p><div class="tiles">{tiles_html}</div>'
            f'<p class="muted" style="font-size:12px">store <code>{e(data.store_root)}</code> · generated {e(generated)} · '
            f"executors {e(', '.join(executors) or '–')} · timing devices {e(', '.join(devices) or 'none (no GPU timing)')}</p>"
            + ('<p class="term failed" id="lazy-error" hidden>This browser could not unpack the report\'s lineage and '
               'skill cards (it needs DecompressionStream: Chrome 80+, Firefox 113+, Safari 16.4+).</p>' if lazy else "")
            + '<div class="toolbar">'
            + ('<button type="button" id="expand-all" class="chip" title="fill in every lineage and card now '
               '(for find-in-page or printing)">load everything</button>' if lazy else "")
            + 'diffs: <span class="seg"><button type="button" data-mode="unified" class="on">unified</button>'
            '<button type="button" data-mode="split">side by side</button></span></div></header>')

    # overview: what the walks found
    ov_rows = []
    for v in views:
        lin = v.lin
        tl = TERMINATION.get(lin.termination, (lin.termination, ""))[0]
        tot = f'<span class="ratio {_ratio_class(v.total_ratio)}" title="{e(v.device)}">{_fmt_ratio(v.total_ratio)}</span>' \
            if v.total_ratio else '<span class="muted">–</span>'
        carriers = _chips([s.carrier for s in lin.steps], "carrier")
        ov_rows.append(f'<tr><td><a href="#{e(lin.lineage_id)}">{e(lin.problem)}</a> <span class="muted">/ {e(lin.kernel)}</span></td>'
                       f'<td>{e(data.problems.get(lin.problem, {}).get("op_type") or lin.op_type)}</td>'
                       f'<td class="num">{len(lin.steps)}</td><td class="num">{len(lin.rejections)}</td>'
                       f'<td>{e(tl)}</td><td>{carriers}</td><td>{tot}</td></tr>')
    overview = ('<div class="card"><h3>Lineages</h3><table class="t"><thead><tr><th>problem / kernel</th><th>op type</th>'
                '<th class="num">steps</th><th class="num">rejected</th><th>termination</th><th>optimizations removed, in order</th>'
                f'<th title="GPU time of the naive end of the walk over the expert\'s">naive ÷ expert</th></tr></thead><tbody>{"".join(ov_rows)}</tbody></table></div>')
    if timed:
        dev = Counter(ef.device for s in timed for ef in s.effect if ef.method == "gpu_timing" and ef.time_ratio).most_common(1)[0][0]
        rr = []
        for s in data.skills:
            g = next((ef for ef in s.effect if ef.method == "gpu_timing" and ef.device == dev and ef.time_ratio), None)
            if g:
                rr.append(RatioRow(s.name, g.time_ratio, g.time_ratio_q1, g.time_ratio_q3,
                                   f"{s.carrier} · {len(s.evidence)} evidence", f"#skill-{s.skill_id}"))
        rr.sort(key=lambda r: -r.ratio)
        shown = rr[:20]
        svg = ratio_bars(shown, f"What each optimization is worth on {dev}",
                         "time without the optimization ÷ time with it (log scale)")
        overview += (f'<div class="card"><h3>What each optimization is worth</h3><figure><figcaption><span class="kind">GPU timing</span>'
                     f"<b>{e(dev)}</b> · geometric mean over the skill's evidence, whiskers: smallest and largest"
                     + (f" · top {len(shown)} of {len(rr)}" if len(rr) > len(shown) else "")
                     + f"</figcaption>{svg}</figure></div>")
    elif data.skills and max(Counter(s.carrier for s in data.skills).values()) > 1:
        cnt = Counter(s.carrier for s in data.skills).most_common(20)
        svg = count_bars([(c, n, "") for c, n in cnt], "Skills per carrier")
        overview += ('<div class="card"><h3>Skills per carrier</h3><figure><figcaption><span class="kind none">counts</span>'
                     "no GPU timing in this store, so skills are counted, not ranked by speed</figcaption>"
                     f"{svg}</figure></div>")

    # problems
    sections = []
    for p in problems:
        info = data.problems.get(p, {})
        definition = info.get("definition") or {}
        axes = definition.get("axes") or {}
        facts = []
        if info.get("op_type"):
            facts.append(f'<span class="chip op">{e(info["op_type"])}</span>')
        facts += [f'<span class="chip dtype">{e(d)}</span>' for d in _dtypes(definition)]
        if axes:
            facts.append('<span class="muted">axes</span> ' + " ".join(f"<code>{e(a)}</code>" for a in axes))
        desc = definition.get("description") or ""
        sections.append(f'<section class="problem" id="p-{e(_slug(p))}"><h2>{e(p)}</h2>'
                        f'<div>{" ".join(facts)}</div>' + (f'<p class="muted" style="margin:4px 0 0">{e(desc)}</p>' if desc else "")
                        + "".join(blocks.lineage(v, by_id, data.sources) for v in by_problem[p]) + "</section>")
    if not problems:
        sections.append('<div class="card muted">No lineages in this selection: the skills below were imported '
                        "(SKILL.md) or mined from lineages not shown.</div>")

    skills_sorted = sorted(data.skills, key=lambda s: (s.name.lower(), s.skill_id))
    index = (f'<h2 id="skills-index">Skills index</h2><p class="muted">{len(skills_sorted)} skills. Search and filter by carrier, '
             "op type, dtype and arch; the cards below follow the filter. Filters are kept in the address (share the link).</p>"
             + _render_index(skills_sorted, blocks))
    cards = ('<h2 id="skill-cards">Skill cards</h2><p class="muted" id="cards-none" hidden>No skill matches the filter.</p>'
             + "".join(blocks.skill(s, present) for s in skills_sorted))

    nav_problems = "".join(
        f'<a href="#p-{e(_slug(p))}">{e(p)}<span class="cnt">{sum(len(v.lin.steps) for v in by_problem[p])}</span></a>'
        for p in problems)
    nav = ('<nav class="side"><div class="brand">kernel<b>·</b>skills</div>'
           f'<div class="store">{e(data.store_root)}</div>'
           '<a href="#overview">Overview</a><a href="#skills-index">Skills index<span class="cnt">'
           f'{len(skills_sorted)}</span></a><a href="#skill-cards">Skill cards</a>'
           f'<h4>Problems · steps</h4>{nav_problems}</nav>')
    body = head + overview + '<h2 id="problems">Lineages by problem</h2>' + "".join(sections) + index + cards
    return _page(title, nav, body, blocks.script())


def write_report(store_root: Path | str, out: Path | str, problems: Sequence[str] = (), title: str = "") -> dict[str, Any]:
    """Build the report for a store root and write it; returns what the CLI prints."""
    import time

    from skills.store import Store

    t0 = time.perf_counter()
    out = Path(out)
    if not out.parent.is_dir():  # a typo in --out must not create folders
        raise ReportError(f"{out}: the folder {out.parent} does not exist")
    state = store_state(store_root)
    if state == "missing":
        raise ReportError(f"no store at {store_root}")
    if state == "empty":
        if problems:
            raise ReportError(f"unknown problem {problems[0]!r}: store {store_root} holds no lineages yet")
        html, data = empty_report(str(store_root), title), None
    else:
        st = Store(store_root, read_only=True)
        try:
            data = load_report_data(st, problems)
        finally:
            st.close()
        html = render_report(data, title=title)
    out.write_text(html, encoding="utf-8")
    return {"out": str(out), "bytes": len(html.encode()), "seconds": round(time.perf_counter() - t0, 3),
            "state": state, "problems": len({lin.problem for lin in data.lineages}) if data else 0,
            "lineages": len(data.lineages) if data else 0, "skills": len(data.skills) if data else 0,
            "steps": sum(len(lin.steps) for lin in data.lineages) if data else 0}
