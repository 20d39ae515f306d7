"""The report's inline CSS and JavaScript (no external resources: the page's CSP forbids them)."""

CSS = r"""
:root{--bg:#f5f6f8;--card:#fff;--ink:#18202c;--muted:#667085;--line:#e3e6eb;--nav:#0f1720;--navink:#c9d1dc;
--accent:#76b900;--accent-ink:#3d6300;--good:#5a9e1c;--bad:#d1453b;--flat:#a3acb9;--total:#2f3b4c;
--reg:#4f6bed;--smem:#9b59d0;--spill:#e07b39;--sass:#1f9d8f;--del:#ffeef0;--add:#e8f7ec;--delm:#f9b6bf;--addm:#a6eeb8;
--mono:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono","Liberation Mono",monospace}
*{box-sizing:border-box}
html{scroll-padding-top:12px}
body{margin:0;font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue","DejaVu Sans",Arial,sans-serif;
background:var(--bg);color:var(--ink)}
a{color:#2d5bd7;text-decoration:none}a:hover{text-decoration:underline}
code,pre,.mono{font-family:var(--mono);font-size:12.5px}
.layout{display:grid;grid-template-columns:232px minmax(0,1fr);min-height:100vh}
nav.side{position:sticky;top:0;height:100vh;overflow:auto;background:var(--nav);color:var(--navink);padding:18px 14px;font-size:13px}
nav.side .brand{font-weight:700;color:#fff;font-size:15px;letter-spacing:.2px;margin-bottom:2px}
nav.side .brand b{color:var(--accent)}
nav.side .store{color:#8793a3;font-size:11.5px;word-break:break-all;margin-bottom:14px}
nav.side h4{color:#8793a3;text-transform:uppercase;font-size:10.5px;letter-spacing:.8px;margin:16px 0 6px}
nav.side a{display:block;color:var(--navink);padding:3px 8px;border-radius:6px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
nav.side a:hover{background:#1d2a38;text-decoration:none;color:#fff}
nav.side a .cnt{float:right;color:#8793a3;font-size:11px}
main{padding:26px 36px 80px;max-width:1280px;min-width:0}
header.top h1{font-size:28px;margin:0 0 2px;letter-spacing:-.3px}
header.top .lede{color:var(--muted);margin:0 0 18px;max-width:900px}
h2{font-size:21px;margin:34px 0 8px;letter-spacing:-.2px}
h3{font-size:16px;margin:0 0 6px}
h4{font-size:13.5px;margin:16px 0 6px}
.muted{color:var(--muted)}
.card{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:18px 22px;margin:14px 0;
box-shadow:0 1px 2px rgba(16,24,40,.05)}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(128px,1fr));gap:12px;margin:8px 0 6px}
.tile{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:12px 16px}
.tile .num{font-size:27px;font-weight:700;line-height:1.15;font-variant-numeric:tabular-nums}
.tile .lab{color:var(--muted);font-size:12px}
.tile.hl{border-color:#cfe6a8;background:linear-gradient(180deg,#fbfff4,#fff)}
.chip{display:inline-block;padding:1px 8px;border-radius:999px;background:#eef1f5;color:#344054;font-size:11.5px;
line-height:18px;margin:1px 2px 1px 0;white-space:nowrap;border:0;font-family:inherit;cursor:default}
.chip.carrier{background:#ecf6d9;color:var(--accent-ink);font-weight:600}
.chip.op{background:#e8eefc;color:#2947a9}
.chip.dtype{background:#f3e8fc;color:#6b2fa0}
.chip.arch{background:#e3f5f3;color:#146c62}
.chip.pass{background:#e6f4ea;color:#1e6b35}.chip.fail{background:#fdecea;color:#a3261d}
.chip.warn{background:#fff4e0;color:#8a5300}
button.chip{cursor:pointer}button.chip:hover{filter:brightness(.95)}
table.t{border-collapse:collapse;width:100%;font-size:13px}
table.t th{text-align:left;font-weight:600;color:var(--muted);font-size:11.5px;text-transform:uppercase;letter-spacing:.4px;
border-bottom:1px solid var(--line);padding:6px 10px 6px 0}
table.t td{border-bottom:1px solid #eef0f3;padding:7px 10px 7px 0;vertical-align:top}
table.t tr:last-child td{border-bottom:0}
table.t td.num,table.t th.num{text-align:right;font-variant-numeric:tabular-nums}
table.t th[data-sort]{cursor:pointer}table.t th[data-sort]:hover{color:var(--ink)}
.ratio{font-weight:700;font-variant-numeric:tabular-nums}.ratio.good{color:var(--good)}.ratio.bad{color:var(--bad)}.ratio.flat{color:var(--muted)}
.spread{color:var(--muted);font-size:12px}
.excerpt{font-family:var(--mono);font-size:12px;color:#344054;white-space:pre-wrap;word-break:break-word}
.term{display:flex;gap:10px;align-items:flex-start;border-radius:10px;padding:10px 14px;margin:10px 0 4px;background:#f4f9ec;border:1px solid #d7ebb8}
.term.other{background:#fff8ec;border-color:#f3dcb0}.term.failed{background:#fdf0ee;border-color:#f3c4bd}
.term b{white-space:nowrap}
figure{margin:14px 0 8px}
figure .headline{font-size:16px;font-weight:650;margin:0 0 4px;letter-spacing:-.1px}
figcaption{font-size:12.5px;color:var(--muted);margin:0 0 6px}
figcaption b{color:var(--ink)}
figcaption .kind{display:inline-block;font-weight:700;font-size:10.5px;letter-spacing:.6px;text-transform:uppercase;
padding:1px 7px;border-radius:5px;margin-right:6px;background:#e9f5d6;color:var(--accent-ink)}
figcaption .kind.static{background:#e8eefc;color:#2947a9}figcaption .kind.none{background:#eef1f5;color:#475467}
svg.chart{display:block;width:100%;max-width:900px;height:auto;overflow:visible}
svg .lbl{font-size:12.5px;font-weight:600;fill:var(--ink)}svg a .lbl{fill:#2d5bd7}
svg .sub{font-size:10.5px;fill:var(--muted)}svg .tick{font-size:10.5px;fill:var(--muted)}
svg .axis,svg .colhead{font-size:11px;fill:var(--muted);font-weight:600}
svg .val{font-size:12px;fill:var(--ink);font-variant-numeric:tabular-nums}svg .val.small{font-size:11px}
svg .val.strong{font-weight:700}svg .val.muted{fill:var(--muted)}svg .mono{font-family:var(--mono);font-size:10.5px}
svg .grid{stroke:#e7eaee;stroke-width:1}svg .grid.one{stroke:#98a2b3;stroke-dasharray:3 3}
svg .sep{stroke:#f0f2f5}svg .link{stroke:#98a2b3;stroke-dasharray:2 2}
svg .whisker{stroke:#1d2939;stroke-width:1.4;fill:none}
svg .c-good{fill:var(--good)}svg .c-bad{fill:var(--bad)}svg .c-flat{fill:var(--flat)}svg .c-total{fill:var(--total)}
svg .c-base{fill:var(--total)}svg .c-none{stroke:var(--flat);stroke-width:2;stroke-dasharray:2 2}
svg .c-reg{fill:var(--reg)}svg .c-smem{fill:var(--smem)}svg .c-spill{fill:var(--spill)}svg .c-sass{fill:var(--sass)}
svg .neg{opacity:.55}svg .c-del{fill:#e5707a}svg .c-add{fill:#4fb872}svg .c-count{fill:var(--accent)}
details>summary{cursor:pointer;font-weight:600;margin:8px 0;list-style-position:outside}
details>summary .muted{font-weight:400}
.step{border-top:1px solid var(--line);padding:14px 0 4px;margin-top:10px}
.step h4{margin:0 0 4px;font-size:14.5px}
.step .meta{font-size:12.5px;color:var(--muted);margin-bottom:8px}
.diffbox{border:1px solid var(--line);border-radius:8px;overflow:hidden;margin:8px 0;background:#fcfcfd}
.diffbar{display:flex;justify-content:space-between;align-items:center;gap:8px;padding:5px 10px;background:#f3f5f8;
border-bottom:1px solid var(--line);font-size:12px;color:var(--muted)}
.diffbar .files{font-family:var(--mono);white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.seg{display:inline-flex;border:1px solid #d0d5dd;border-radius:6px;overflow:hidden;flex:none}
.seg button{font:inherit;font-size:11.5px;border:0;background:#fff;padding:2px 9px;cursor:pointer;color:#344054}
.seg button.on{background:#18202c;color:#fff}
.diffscroll{overflow-x:auto}
table.diff{border-collapse:collapse;width:100%;font:12px/1.5 var(--mono);tab-size:4}
table.diff td{padding:0 8px;vertical-align:top}
table.diff td.ln,table.diff:not(.split) tr:not(.h) td:nth-child(-n+2){color:#98a2b3;text-align:right;user-select:none;width:1%;white-space:nowrap;font-size:11px;padding-top:1px}
table.diff td.cd,table.diff:not(.split) tr:not(.h) td:nth-child(3){white-space:pre;width:100%}
table.diff.split{table-layout:fixed}table.diff.split col.ln{width:46px}
table.diff.split td.cd{white-space:pre-wrap;overflow-wrap:anywhere}
table.diff tr.h td{background:#eef3fd;color:#4862c4;font-size:11.5px;padding:2px 10px}
table.diff tr.d td,table.diff td.d{background:var(--del)}table.diff tr.a td,table.diff td.a{background:var(--add)}
table.diff td.e{background:#f6f7f9}
table.diff mark{border-radius:2px;color:inherit;padding:0}
table.diff tr.d mark,table.diff td.d mark{background:var(--delm)}table.diff tr.a mark,table.diff td.a mark{background:var(--addm)}
table.diff.split td.ln{border-left:1px solid #eef0f3}
.hl .k{color:#cf222e}.hl .t{color:#0550ae}.hl .q{color:#8250df;font-weight:600}.hl .b{color:#953800}.hl .f{color:#6639ba}
.hl .n{color:#0a3069}.hl .s{color:#0a3069}.hl .c{color:#6e7781;font-style:italic}.hl .p{color:#116329}
pre.code{background:#fcfcfd;border:1px solid var(--line);border-radius:8px;padding:8px 12px;overflow-x:auto;margin:6px 0}
pre.reason{white-space:pre-wrap;word-break:break-word;max-height:9.5em;overflow:auto;margin:0;font-size:11.5px;color:#475467;background:none;border:0;padding:0}
.lineage,.skill,.problem-head{content-visibility:auto;contain-intrinsic-size:auto 900px}
.skill{content-visibility:auto;contain-intrinsic-size:auto 520px}
article.skill h3{font-size:17px;display:flex;flex-wrap:wrap;gap:8px;align-items:baseline}
article.skill h3 .sid{font:11.5px var(--mono);color:var(--muted);font-weight:400}
article.skill .intent{font-size:14.5px;margin:4px 0 10px}
dl.kv{display:grid;grid-template-columns:140px minmax(0,1fr);gap:6px 16px;margin:8px 0}
dl.kv dt{color:var(--muted);font-size:12px;font-weight:600;text-transform:uppercase;letter-spacing:.4px;padding-top:2px}
dl.kv dd{margin:0;min-width:0}
ul.plain{margin:0;padding-left:18px}ul.plain li{margin:2px 0}
.probes{font-size:12px;margin:4px 0 2px}table.probes{width:auto;min-width:320px}table.probes td{padding:2px 18px 2px 0}
details.probes>summary{font-weight:400;font-size:12px;margin:2px 0}
.filters{display:flex;flex-wrap:wrap;gap:10px;align-items:center;margin:6px 0 10px}
.filters input,.filters select{font:inherit;font-size:13px;padding:6px 10px;border:1px solid #d0d5dd;border-radius:8px;background:#fff}
.filters input{min-width:260px;flex:1}
.intent-s{color:var(--muted);font-size:12px}
.filters .count{color:var(--muted);font-size:12.5px}
.filters button{font:inherit;font-size:12.5px;padding:6px 12px;border:1px solid #d0d5dd;border-radius:8px;background:#fff;cursor:pointer}
.indexwrap{max-height:560px;overflow:auto;border:1px solid var(--line);border-radius:10px;background:#fff}
.indexwrap table.t th{position:sticky;top:0;background:#fff;z-index:1;padding-left:12px}
.indexwrap table.t td{padding-left:12px}
.empty{max-width:760px}
.empty ol li{margin:8px 0}
.empty pre{background:#0f1720;color:#e4e7ec;border-radius:8px;padding:10px 14px;overflow-x:auto}
.legend{display:flex;flex-wrap:wrap;gap:14px;font-size:12px;color:var(--muted);margin:4px 0}
.legend i{display:inline-block;width:11px;height:11px;border-radius:3px;margin-right:5px;vertical-align:-1px}
.toolbar{display:flex;gap:10px;align-items:center;justify-content:flex-end;font-size:12.5px;color:var(--muted);margin-top:-8px}
[hidden]{display:none!important}
@media (max-width:900px){.layout{grid-template-columns:1fr}nav.side{position:static;height:auto}main{padding:16px}}
@media print{nav.side,.toolbar,.filters,.seg{display:none}.layout{display:block}.lineage,.skill{content-visibility:visible}
.card{break-inside:avoid-page;box-shadow:none}}
"""

JS = r"""
(function () {
  'use strict';
  var d = document;
  function $$(s, r) { return Array.prototype.slice.call((r || d).querySelectorAll(s)); }

  // ---- diffs: unified (as written) or side by side (built here from the unified rows, once)
  function buildSplit(t) {
    var s = d.createElement('table'); s.className = 'diff split hl';
    var cg = s.appendChild(d.createElement('colgroup'));
    ['ln', 'cd', 'ln', 'cd'].forEach(function (c) { cg.appendChild(d.createElement('col')).className = c; });
    var tb = s.appendChild(d.createElement('tbody'));
    var rows = Array.prototype.slice.call(t.tBodies[0].rows), i = 0;
    function cell(tr, text, cls, html) {
      var td = tr.insertCell(); td.className = cls; if (html) td.innerHTML = text; else td.textContent = text;
    }
    function pair(a, b) {
      var tr = tb.insertRow();
      cell(tr, a ? a.cells[0].textContent : '', 'ln ' + (a ? (a.className === 'x' ? 'x' : 'd') : 'e'));
      cell(tr, a ? a.cells[2].innerHTML : '', 'cd ' + (a ? (a.className === 'x' ? 'x' : 'd') : 'e'), true);
      cell(tr, b ? b.cells[1].textContent : '', 'ln ' + (b ? (b.className === 'x' ? 'x' : 'a') : 'e'));
      cell(tr, b ? b.cells[2].innerHTML : '', 'cd ' + (b ? (b.className === 'x' ? 'x' : 'a') : 'e'), true);
    }
    while (i < rows.length) {
      var r = rows[i], c = r.className;
      if (c === 'h') { var tr = tb.insertRow(); tr.className = 'h'; var td = tr.insertCell(); td.colSpan = 4;
        td.textContent = r.cells[0].textContent; i++; continue; }
      if (c === 'x') { pair(r, r); i++; continue; }
      var dels = [], adds = [];
      while (i < rows.length && rows[i].className === 'd') dels.push(rows[i++]);
      while (i < rows.length && rows[i].className === 'a') adds.push(rows[i++]);
      if (!dels.length && !adds.length) { i++; continue; }
      for (var k = 0; k < Math.max(dels.length, adds.length); k++) pair(dels[k], adds[k]);
    }
    t.parentNode.insertBefore(s, t.nextSibling);
    return s;
  }
  // ---- lazy blocks (big reports): placeholders keep their ids; their HTML waits in #lazy-data
  var LAZY = null, LAZY_P = null, viewMode = 'unified', io = null;
  function loadLazy() {  // gzip + base64 -> JSON {element id: inner HTML}
    if (LAZY_P) return LAZY_P;
    var s = d.getElementById('lazy-data');
    if (!s) { LAZY = {}; LAZY_P = Promise.resolve(LAZY); return LAZY_P; }
    try {
      var bin = atob(s.textContent.trim()), n = bin.length, bytes = new Uint8Array(n);
      for (var i = 0; i < n; i++) bytes[i] = bin.charCodeAt(i);
      var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
      LAZY_P = new Response(stream).text().then(function (t) { LAZY = JSON.parse(t); return LAZY; });
    } catch (err) { LAZY_P = Promise.reject(err); }
    LAZY_P.catch(function (err) {
      var w = d.getElementById('lazy-error');
      if (w) { w.hidden = false; w.textContent += ' (' + err + ')'; }
    });
    return LAZY_P;
  }
  function hydrate(el) {
    if (!el || !el.hasAttribute('data-lazy')) return;
    if (LAZY === null) { loadLazy().then(function () { hydrate(el); }); return; }
    var html = LAZY[el.id];
    el.removeAttribute('data-lazy'); el.style.minHeight = '';
    if (io) io.unobserve(el);
    if (html != null) el.innerHTML = html;
    if (viewMode === 'split') $$('.diffbox', el).forEach(function (x) { setMode(x, 'split'); });
    if (el.id === 'skill-tbody') { rows = $$('#skill-table tbody tr'); if (filtering()) apply(false); }
  }
  function reveal(id) {
    var el = d.getElementById(id);
    if (!el) { hydrate(d.getElementById(id.replace(/-[sr]\d+$/, ''))); el = d.getElementById(id); }
    else hydrate(el);
    if (el) { var p = el.closest('details'); while (p) { p.open = true; p = p.parentElement && p.parentElement.closest('details'); } }
    return el;
  }
  var lazies = $$('[data-lazy]');
  if (lazies.length) {
    if ('IntersectionObserver' in window) {
      io = new IntersectionObserver(function (entries) {
        entries.forEach(function (en) { if (en.isIntersecting) hydrate(en.target); });
      }, { rootMargin: '1200px 0px' });
      lazies.forEach(function (el) { io.observe(el); });
    } else lazies.forEach(hydrate);
  }
  function expandAll() {
    return loadLazy().then(function () { $$('[data-lazy]').forEach(hydrate); d.body.setAttribute('data-expanded', '1'); });
  }
  d.addEventListener('click', function (e) {
    var a = e.target.closest('a[href^="#"]');
    if (a && a.getAttribute('href').length > 1) {
      var id = decodeURIComponent(a.getAttribute('href').slice(1));
      if (LAZY === null && d.querySelector('[data-lazy]')) {  // not unpacked yet: go there once it is
        e.preventDefault();
        loadLazy().then(function () { var el = reveal(id); if (el) { history.pushState(null, '', '#' + id); el.scrollIntoView(); } });
      } else reveal(id);
    }
    if (e.target.id === 'expand-all') { expandAll(); e.target.hidden = true; }
  }, true);
  window.addEventListener('hashchange', function () {
    var el = reveal(decodeURIComponent(location.hash.slice(1))); if (el) el.scrollIntoView();
  });

  function setMode(box, mode) {
    var t = box.querySelector('table.diff:not(.split)'); if (!t) return;
    var s = box.querySelector('table.diff.split');
    if (mode === 'split' && !s) s = buildSplit(t);
    t.hidden = mode === 'split'; if (s) s.hidden = mode !== 'split';
    $$('.seg button', box).forEach(function (b) { b.classList.toggle('on', b.getAttribute('data-mode') === mode); });
    box.setAttribute('data-view', mode);
  }
  d.addEventListener('click', function (e) {
    var b = e.target.closest('button[data-mode]');
    if (b) {
      var box = b.closest('.diffbox'), mode = b.getAttribute('data-mode');
      if (box) setMode(box, mode);
      else { viewMode = mode; $$('.diffbox').forEach(function (x) { setMode(x, mode); });
             $$('.toolbar button[data-mode]').forEach(function (x) { x.classList.toggle('on', x === b); }); }
      return;
    }
    var f = e.target.closest('[data-filter]');
    if (f) {
      var kv = f.getAttribute('data-filter').split(':'), sel = d.getElementById('f-' + kv[0]);
      if (sel) { sel.value = kv.slice(1).join(':'); apply(true); var ix = d.getElementById('skills-index');
        if (ix) ix.scrollIntoView(); }
    }
  });

  // ---- skills index: search + filters (carrier, op type, dtype, arch), also hides cards
  var q = d.getElementById('f-q'), sels = $$('select[data-f]'), rows = $$('#skill-table tbody tr');
  var count = d.getElementById('f-count');
  function matches(r, terms) {
    for (var i = 0; i < sels.length; i++) {
      var v = sels[i].value, k = sels[i].getAttribute('data-f');
      if (v && (' ' + (r.getAttribute('data-' + k) || '') + ' ').indexOf(' ' + v + ' ') < 0) return false;
    }
    var text = r._t || (r._t = (r.textContent + ' ' + (r.getAttribute('data-text') || '')).toLowerCase());
    for (var j = 0; j < terms.length; j++) if (text.indexOf(terms[j]) < 0) return false;
    return true;
  }
  function filtering() { return !!(q && (q.value || sels.some(function (s) { return s.value; }))); }
  function apply(push) {
    if (!q) return;
    var tbody = d.getElementById('skill-tbody');
    if (tbody && tbody.hasAttribute('data-lazy')) {  // the index rows are packed too: unpack, then filter
      loadLazy().then(function () { hydrate(tbody); apply(push); });
      return;
    }
    var terms = q.value.toLowerCase().split(/\s+/).filter(Boolean), n = 0;
    rows.forEach(function (r) {
      var ok = matches(r, terms); r.hidden = !ok; if (ok) n++;
      var card = d.getElementById('skill-' + r.getAttribute('data-id')); if (card) card.hidden = !ok;
    });
    if (count) count.textContent = n + ' of ' + rows.length + ' skills';
    var nc = d.getElementById('cards-none'); if (nc) nc.hidden = n > 0;
    if (push) {
      var p = new URLSearchParams(location.search);
      if (q.value) p.set('q', q.value); else p.delete('q');
      sels.forEach(function (s) { var k = s.getAttribute('data-f'); if (s.value) p.set(k, s.value); else p.delete(k); });
      try { history.replaceState(null, '', (p.toString() ? '?' + p.toString() : location.pathname) + location.hash); } catch (err) {}
    }
  }
  if (q) {
    q.addEventListener('input', function () { apply(true); });
    sels.forEach(function (s) { s.addEventListener('change', function () { apply(true); }); });
    var clr = d.getElementById('f-clear');
    if (clr) clr.addEventListener('click', function () { q.value = ''; sels.forEach(function (s) { s.value = ''; }); apply(true); });
  }
  // sortable columns (data-v on cells holds the sort key)
  $$('th[data-sort]').forEach(function (th) {
    th.addEventListener('click', function () {
      var table = th.closest('table'), tb = table.tBodies[0], col = th.cellIndex, num = th.getAttribute('data-sort') === 'num';
      var dir = th.getAttribute('data-dir') === 'asc' ? 'desc' : 'asc'; th.setAttribute('data-dir', dir);
      var rs = Array.prototype.slice.call(tb.rows);
      rs.sort(function (a, b) {
        var x = a.cells[col].getAttribute('data-v') || a.cells[col].textContent;
        var y = b.cells[col].getAttribute('data-v') || b.cells[col].textContent;
        var c = num ? (parseFloat(x) || 0) - (parseFloat(y) || 0) : x.localeCompare(y);
        return dir === 'asc' ? c : -c;
      });
      rs.forEach(function (r) { tb.appendChild(r); });
    });
  });

  // ---- state from the URL: ?q=..&carrier=..&op=..&dtype=..&arch=..&diff=split
  var params = new URLSearchParams(location.search);
  if (q) {
    if (params.get('q')) q.value = params.get('q');
    sels.forEach(function (s) { var v = params.get(s.getAttribute('data-f')); if (v) s.value = v; });
    if (filtering()) apply(false);
  }
  if (params.get('expand') === 'all') expandAll();
  if (params.get('diff') === 'split') {
    viewMode = 'split';
    $$('.diffbox').forEach(function (x) { setMode(x, 'split'); });
    $$('.toolbar button[data-mode]').forEach(function (x) { x.classList.toggle('on', x.getAttribute('data-mode') === 'split'); });
  }
  if (lazies.length) {
    loadLazy().then(function () {
      d.body.setAttribute('data-lazy-ready', String(Math.round(performance.now())));
      if (location.hash.length > 1) { var t = reveal(decodeURIComponent(location.hash.slice(1))); if (t) t.scrollIntoView(); }
    });
  } else if (location.hash.length > 1) { var t = reveal(decodeURIComponent(location.hash.slice(1))); if (t) t.scrollIntoView(); }
  d.body.setAttribute('data-ready-ms', String(Math.round(performance.now())));
})();
"""
