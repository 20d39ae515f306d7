"""`skills report` (issue 9): the HTML report of a small mined store.

The store is built from real operators applied to shipped kernels (eval/bench_report.py:
vector_add with GPU timing + static deltas, tiled_matmul with static deltas only, transpose
with nothing measured). The page is checked as text and, when Chromium is installed (always in
CI: it fails instead of skipping there), opened in headless Chromium: the rendered DOM shows
every step, chart and skill card, the script ran, filters and diff views work, and the page
asks the network for nothing.
"""
from __future__ import annotations

import difflib
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eval.bench_report import chromium_binary, demo_store, page_requests, run_chromium
from skills.kernel_store import KernelStore
from skills.report import ReportError, build_report, load_report_data, render_report
from skills.report_code import diff_stats, render_diff, tokenize_lines
from skills.store import Store

ROOT = Path(__file__).resolve().parents[2]
EVIL = '<img src="http://example.invalid/evil.png" alt="x">'  # (no onerror: an alert would block headless Chromium)


@pytest.fixture(scope="module")
def mined(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report") / "store"
    demo_store(root)
    # a hostile reason must come out as text, never as markup
    st = Store(root)
    ks = KernelStore(st)
    lin = ks.lineage("vector_add")
    lin.sources = {h: ks.source(h) for h in {lin.kernel_hash, lin.final_hash, *(s.after_hash for s in lin.steps)}}
    lin.rejections[0].reason += " " + EVIL
    skills = [ks.skill(s.skill_id) for s in lin.steps]
    ks.save_lineage(lin, skills, {"definition": {}})
    st.close()
    return root


@pytest.fixture(scope="module")
def report(mined: Path, tmp_path_factory) -> tuple[Path, str]:
    html = build_report(mined, generated="2025-01-01 00:00")
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(html, encoding="utf-8")
    return path, html


def _lineages(root: Path):
    st = Store(root, read_only=True)
    try:
        return KernelStore(st).lineages(), KernelStore(st).skills()
    finally:
        st.close()


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: dict[str, dict] = {}
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if "id" in a:
            self.ids[a["id"]] = {"tag": tag, **a}


def _parse(html: str) -> _Ids:
    p = _Ids()
    p.feed(html)
    return p


# --------------------------------------------------------------------------- code rendering
def test_highlighter_keeps_every_character():
    for name in ("vector_add", "tiled_matmul", "softmax", "histogram"):
        src = (ROOT / "corpora" / "kernels" / name / "kernel.cu").read_text()
        lines = tokenize_lines(src)
        assert "\n".join("".join(t for _, t in line) for line in lines) == src
    classes = {c: t for line in tokenize_lines("__global__ void k(const float4* __restrict__ p) { /* x\ny */ "
                                                "#pragma unroll\n x = __ldg(p) + 1.5f; }") for c, t in line}
    assert classes["q"] in ("__global__", "__restrict__") and classes["t"] in ("void", "float4")
    assert classes["n"] == "1.5f" and classes["b"] == "__ldg" and classes["c"].startswith("y */")


def test_diff_table_rows_numbers_and_word_marks():
    a = "int f(const float* __restrict__ x,\n      int n) {\n  return n < 4;\n}\n"
    b = "int f(const float* x,\n      int n) {\n  return n < 4;\n}\n"
    diff = "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), "a.cu", "b.cu"))
    html = render_diff(diff)
    assert html.count('<tr class="d">') == 1 and html.count('<tr class="a">') == 1 == diff_stats(diff)[0]
    assert '<tr class="d"><td>1</td><td></td>' in html  # old line number only on a removed row
    assert re.search(r"<mark><span class=\"q\">__restrict__</span> ?</mark>", html)  # the removed word is marked
    assert "n &lt; <span" in html and " < " not in html


# --------------------------------------------------------------------------- the page, as text
def test_report_shows_every_lineage_step_chart_and_skill(mined, report):
    _, html = report
    lineages, skills = _lineages(mined)
    page = _parse(html)
    assert len(lineages) == 3 and len(skills) == 6
    for lin in lineages:
        assert lin.lineage_id in page.ids
        for s in lin.steps:
            sec = page.ids[f"{lin.lineage_id}-s{s.index}"]
            assert sec["tag"] == "section"
        for n, r in enumerate(lin.rejections):
            assert f"{lin.lineage_id}-r{n}" in page.ids
    for sk in skills:
        assert page.ids[f"skill-{sk.skill_id}"]["tag"] == "article"
        assert f'<tr data-id="{sk.skill_id}"' in html
    # one chart per lineage, of the kind its data allows, labelled so
    charts = re.findall(r'<figure class="chart-(\w+)">', html)
    assert sorted(charts) == ["diff", "static", "time"]
    assert "static deltas only" in html and "no effect measured" in html and "GPU timing" in html
    assert html.count('<svg class="chart"') == 4  # + the store-wide "what each optimization is worth"
    # termination reasons and rejection reasons
    assert "step limit" in html and "no remaining candidate passes the gate" in html
    assert "the grid is capped at 1056 blocks" in html
    # probes that discovered a precondition, effect device and method
    assert "K % 16 == 0" in html and "offset" in html and "NVIDIA H200 (sm_90)" in html and "gpu timing" in html


def test_report_is_self_contained_and_escapes_text(report):
    _, html = report
    assert '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'' in html
    # nothing to fetch: every src/href/action is an in-page anchor; no url(), no @import, no <link>
    page = _parse(html)
    refs = [v for _, a in page.tags for k, v in a.items()
            if k in ("src", "href", "action", "poster", "srcset", "formaction", "data", "background")]
    assert refs and all(r.startswith("#") for r in refs), [r for r in refs if not r.startswith("#")][:5]
    assert {t for t, _ in page.tags}.isdisjoint({"link", "iframe", "object", "embed", "img", "video", "audio"})
    assert "url(" not in html and "@import" not in html and "<link" not in html and "<iframe" not in html
    assert EVIL not in html and "&lt;img src=&quot;http://example.invalid/evil.png&quot;" in html


def test_problem_filter_and_bad_input(mined):
    st = Store(mined, read_only=True)
    try:
        data = load_report_data(st, ["tiled_matmul"])
        assert {lin.problem for lin in data.lineages} == {"tiled_matmul"}
        assert {s.carrier for s in data.skills} == {"unroll_pragma", "shared_padding", "restrict"}
        html = render_report(data)
        # restrict was also mined from vector_add, which this report leaves out: not a dead link
        assert "vector_add · step 2 (not in this report)" in html
        with pytest.raises(ReportError, match="unknown problem 'nope'"):
            load_report_data(st, ["nope"])
    finally:
        st.close()
    with pytest.raises(ReportError, match="no store"):
        build_report(mined.parent / "missing")


def test_cli_report(mined, tmp_path):
    from cli import app

    runner = CliRunner()
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", "vector_add", "--store", str(mined), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["lineages"] == 1 and info["skills"] == 4 and out.stat().st_size == info["bytes"]
    res = runner.invoke(app, ["report", "nope", "--store", str(mined), "--out", str(out)])
    assert res.exit_code == 2 and "unknown problem 'nope'" in res.output and len(res.output.strip().splitlines()) == 1
    res = runner.invoke(app, ["report", "--store", str(tmp_path / "none"), "--out", str(out)])
    assert res.exit_code == 2 and "no store at" in res.output and "skills mine" in res.output
    assert not (tmp_path / "none").exists()  # reading never creates a store
    empty = tmp_path / "empty"
    Store(empty).con  # an existing store with no lineages
    res = runner.invoke(app, ["report", "--store", str(empty), "--out", str(out)])
    assert res.exit_code == 0 and "no lineages" in res.output
    html = out.read_text()
    assert 'id="empty-store"' in html and f"skills mine corpora/kernels --executor cpu --store {empty}" in html


def test_render_is_deterministic(mined):
    st = Store(mined, read_only=True)
    try:
        data = load_report_data(st)
    finally:
        st.close()
    assert render_report(data, generated="x") == render_report(data, generated="x")


# --------------------------------------------------------------------------- headless Chromium
def _need_chromium():
    if chromium_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed but CI is set (.ci/apt-extra.txt installs it)")
        pytest.skip("chromium not installed (apt-get install chromium)")


def test_chromium_renders_every_step_chart_and_card_without_network(mined, report, tmp_path):
    _need_chromium()
    path, _ = report
    netlog = tmp_path / "net.json"
    cp = run_chromium(path.as_uri(), "--dump-dom", netlog=netlog)
    dom = cp.stdout
    assert "</html>" in dom, cp.stderr[-2000:]
    page = _parse(dom)
    body = next(a for t, a in page.tags if t == "body")
    assert body.get("data-ready-ms", "").isdigit(), "the page's script did not finish"
    lineages, skills = _lineages(mined)
    for lin in lineages:
        assert page.ids[lin.lineage_id]["tag"] == "div"
        for s in lin.steps:
            assert f"{lin.lineage_id}-s{s.index}" in page.ids
    assert len([1 for t, a in page.tags if t == "svg" and a.get("class") == "chart"]) == 4
    assert len([1 for t, a in page.tags if t == "figure"]) >= 3
    for sk in skills:
        assert f"skill-{sk.skill_id}" in page.ids and "hidden" not in page.ids[f"skill-{sk.skill_id}"]
    assert "6 of 6 skills" in dom
    assert page_requests(netlog) == []


def test_chromium_network_check_can_fail(report, tmp_path):
    """The no-request check sees a request when there is one, and the report's CSP stops one."""
    _need_chromium()
    path, html = report
    plain = tmp_path / "plain.html"
    plain.write_text(f"<!DOCTYPE html><html><body><p>x</p>{EVIL}</body></html>")
    log1 = tmp_path / "n1.json"
    run_chromium(plain.as_uri(), "--dump-dom", netlog=log1)
    assert any("example.invalid/evil.png" in u for u in page_requests(log1))
    injected = tmp_path / "injected.html"
    injected.write_text(html.replace("</main>", EVIL + "</main>", 1))
    log2 = tmp_path / "n2.json"
    run_chromium(injected.as_uri(), "--dump-dom", netlog=log2)
    assert page_requests(log2) == []


def test_chromium_filters_and_side_by_side(mined, report):
    _need_chromium()
    path, _ = report
    _, skills = _lineages(mined)
    cp = run_chromium(path.as_uri() + "?carrier=restrict&diff=split", "--dump-dom")
    page = _parse(cp.stdout)
    restrict = {s.skill_id for s in skills if s.carrier == "restrict"}
    assert len(restrict) == 1
    for sk in skills:
        card = page.ids[f"skill-{sk.skill_id}"]
        assert ("hidden" in card) == (sk.skill_id not in restrict)
    assert "1 of 6 skills" in cp.stdout
    n_split = len(re.findall(r'<table class="diff split hl"', cp.stdout))
    n_boxes = len(re.findall(r'<div class="diffbox"', cp.stdout))
    assert n_split == n_boxes > 0
    # paired removed/added lines sit side by side in one row
    assert re.search(r'<td class="cd d">.*?</td><td class="ln a">', cp.stdout)


def test_lazy_mode_packs_cards_and_chromium_unpacks_them(mined, tmp_path):
    """Big stores: lineage and skill cards wait, gzipped, in one data block; the page fills them in."""
    import base64
    import gzip

    st = Store(mined, read_only=True)
    try:
        data = load_report_data(st)
    finally:
        st.close()
    html = render_report(data, lazy=True)
    page = _parse(html)
    lineages, skills = data.lineages, data.skills
    for lin in lineages:
        assert page.ids[lin.lineage_id].get("data-lazy") == "1" and f"{lin.lineage_id}-s1" not in page.ids
    for sk in skills:
        assert page.ids[f"skill-{sk.skill_id}"].get("data-lazy") == "1"
    packed = re.search(r'<script type="application/octet-stream" id="lazy-data"[^>]*>([^<]+)</script>', html).group(1)
    blocks = json.loads(gzip.decompress(base64.b64decode(packed)))
    assert set(blocks) == {lin.lineage_id for lin in lineages} | {f"skill-{s.skill_id}" for s in skills} | {"skill-tbody"}
    assert all(f'<tr data-id="{s.skill_id}"' in blocks["skill-tbody"] for s in skills)
    assert all(f'id="{lin.lineage_id}-s{s.index}"' in blocks[lin.lineage_id] for lin in lineages for s in lin.steps)
    _need_chromium()
    path = tmp_path / "lazy.html"
    path.write_text(html, encoding="utf-8")
    netlog = tmp_path / "net.json"
    cp = run_chromium(path.as_uri() + "?expand=all", "--dump-dom", "--virtual-time-budget=10000", netlog=netlog)
    dom = cp.stdout
    body = next(a for t, a in _parse(dom).tags if t == "body")
    assert body.get("data-expanded") == "1" and 'data-lazy="1"' not in dom, cp.stderr[-1500:]
    page = _parse(dom)
    for lin in lineages:
        for s in lin.steps:
            assert f"{lin.lineage_id}-s{s.index}" in page.ids
    assert dom.count('<dl class="kv">') == len(skills) and dom.count("<tr data-id=") == len(skills)
    assert len([1 for t, a in page.tags if t == "svg" and a.get("class") == "chart"]) == 4
    assert page_requests(netlog) == []
    # a filter in the address unpacks the index and filters it
    cp = run_chromium(path.as_uri() + "?carrier=restrict", "--dump-dom", "--virtual-time-budget=10000")
    assert "1 of 6 skills" in cp.stdout and cp.stdout.count("<tr data-id=") == len(skills)
