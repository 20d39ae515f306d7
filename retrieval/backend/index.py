"""Ingest LLVM-style target trees into the store and build the backend retrieval indexes.

    index_backends(path, store) ->
      duckdb: targets, target_files (parse failures listed), functions, target_attributes
      chroma: backend_func_text            MiniLM vectors of the shared-role functions
              backend_func_graph__<tag>    GNN vectors of their syntax graphs
              backend_target_graph__<tag>  GNN vectors of each target's attribute graph
      models: backend-func-gnn__<tag>, backend-target-gnn__<tag> (checkpoint + metadata)

*Shared-role functions* are those whose role (qualified name with the target prefix stripped)
occurs in at least two indexed targets: the ones another target can fork from. Only they are
embedded (embedding every function of LLVM's 24 targets would take ~20 min on 2 cores).

``<tag>`` names the training set: ``all``, or ``ex-RISCV-XCore`` when targets are held out of
training (the benchmark trains without the targets it evaluates).

Re-indexing is incremental: a target whose files are unchanged (same fingerprint) is skipped;
each changed target is replaced in one transaction; only new or changed texts are embedded;
the function GNN retrains when ``RETRAIN_FRACTION`` of its training functions changed (else
the kept model embeds the changed ones), the small target GNN whenever a target changed; the
report says which and why. Long parts report progress with an ETA (retrieval/progress.py).
"""
from __future__ import annotations

import hashlib
import json
import time
import uuid
from functools import lru_cache
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from corpora.backends.tree import (
    ATTRIBUTE_KINDS, BackendInputError, TargetTree, find_target_dirs, load_target, neutralize, parse_cpp,
    strip_target, subtokens_of_name,
)

# Part of every target's fingerprint: a change to what ingest extracts (class bases, roles)
# re-parses stores made by an older version once.
INGEST_VERSION = "3"  # 3: declarations of functions returning pointers or references
TEXT_COLLECTION = "backend_func_text"
# The function GNN is retrained when this share of its training functions is new, changed or
# gone; below it the model is kept and new functions are embedded with it.
RETRAIN_FRACTION = 0.2
TEXT_MAX_TOKENS = 128
FUNC_GRAPH_MAX_NODES = 384
ATTR_CAPS = {"instruction": 300, "instruction_format": 150, "register": 300}  # nodes per kind in a target graph

FUNCTION_COLUMNS = ("func_id", "target", "path", "qualified_name", "name", "class_name", "role", "signature", "body",
                    "statements", "identifiers", "start_line", "end_line", "start_byte", "end_byte", "in_class", "n_errors")
ATTRIBUTE_COLUMNS = ("target", "kind", "name", "parents", "refs", "value", "path", "line")
FILE_COLUMNS = ("target", "path", "kind", "sha256", "parsed", "n_errors", "error", "n_functions")


def model_tag(exclude: Sequence[str] = ()) -> str:
    return "ex-" + "-".join(sorted(exclude)) if exclude else "all"


@dataclass
class IndexReport:
    root: str
    targets: list[dict] = field(default_factory=list)
    failed_files: list[dict] = field(default_factory=list)
    n_functions: int = 0
    n_shared_role_functions: int = 0
    n_embedded: int = 0
    models: dict = field(default_factory=dict)
    seconds: float = 0.0
    # phase -> {"wall_s", "cpu_s"}: CPU seconds (user + system, this process and its workers)
    # say what a phase costs on a shared machine, where wall time says how busy the machine was
    phases: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


class PhaseClock:
    """Wall and CPU seconds of consecutive phases (``lap("embedding")``)."""

    def __init__(self):
        self.wall, self.cpu = time.monotonic(), self.cpu_now()
        self.phases: dict[str, dict] = {}

    @staticmethod
    def cpu_now() -> float:
        import resource

        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    def lap(self, name: str) -> dict:
        w, c = time.monotonic(), self.cpu_now()
        self.phases[name] = {"wall_s": round(w - self.wall, 1), "cpu_s": round(c - self.cpu, 1)}
        self.wall, self.cpu = w, c
        return self.phases[name]


# --------------------------------------------------------------------------- helpers
def fingerprint_dir(target_dir: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(target_dir.rglob("*")):
        if f.is_file() and f.suffix in (".cpp", ".h", ".td", ".def", ".txt"):
            h.update(f.relative_to(target_dir).as_posix().encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _fingerprint_with_relocs(target_dir: Path, relocs_dir: Optional[Path]) -> str:
    h = hashlib.sha256(fingerprint_dir(target_dir).encode())
    h.update(INGEST_VERSION.encode())
    if relocs_dir is not None:
        for f in sorted(relocs_dir.glob("*.def")):
            h.update(f.name.encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def function_doc(signature: str, body: str, aliases: Sequence[str]) -> str:
    """The text every modality sees: signature + body with the target's names neutralized."""
    return neutralize(f"{signature}\n{body}", aliases)


def _source_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.suffix in (".cpp", ".h", ".td") and f.is_file())


def _load_one(args: tuple[str, Optional[str]]) -> TargetTree:
    d, r = args
    return load_target(Path(d), Path(r) if r else None)


# --------------------------------------------------------------------------- ingest
def ingest_targets(path: Path, store, targets: Optional[Sequence[str]] = None, force: bool = False,
                   jobs: int = 1, log: Callable[[str], None] | None = None) -> IndexReport:
    """Parse and store the target trees under ``path`` (duckdb only; no embeddings)."""
    started = time.monotonic()
    path = Path(path)
    if not path.exists():
        raise BackendInputError(f"{path} does not exist")
    dirs, relocs_dir = find_target_dirs(path)
    if not dirs:
        raise BackendInputError(f"no LLVM targets under {path} (expected <llvm>/lib/Target: folders with .td and .cpp files)")
    by_name = {d.name: d for d in dirs}
    if targets:
        unknown = [t for t in targets if t not in by_name]
        if unknown:
            raise BackendInputError(f"unknown target(s) {', '.join(unknown)} under {path}; found: {', '.join(sorted(by_name))}")
        dirs = [by_name[t] for t in targets]
    report = IndexReport(root=str(path.resolve()))
    existing = {r["target"]: r["fingerprint"] for r in store.query("SELECT target, fingerprint FROM targets")}
    todo: list[tuple[Path, str]] = []
    for d in dirs:
        fp = _fingerprint_with_relocs(d, relocs_dir)
        if not force and existing.get(d.name) == fp:
            row = store.query("SELECT target, n_files, n_failed, n_functions, n_attributes FROM targets WHERE target = ?",
                              [d.name])[0]
            report.targets.append({**row, "status": "unchanged"})
            for fr in store.query("SELECT path, error FROM target_files WHERE target = ? AND NOT parsed ORDER BY path",
                                  [d.name]):
                report.failed_files.append({"target": d.name, **fr})
            continue
        todo.append((d, fp))

    from retrieval.progress import Progress

    trees: list[TargetTree] = []
    args = [(str(d), str(relocs_dir) if relocs_dir else None) for d, _ in todo]
    weight = {d.name: _source_bytes(d) for d, _ in todo}  # a target costs what its sources weigh
    bar = Progress(f"parsing {len(args)} target(s)", sum(weight.values()) // 1000, log=log, unit="kB")

    def parsed(tree: TargetTree) -> None:
        trees.append(tree)
        bar.advance(weight[tree.target] // 1000, note=tree.target)
        if log and not bar.tty:
            log(f"parsed {tree.target}: {len(tree.functions)} functions, {len(tree.attributes)} attributes")

    if jobs > 1 and len(args) > 1:
        import multiprocessing as mp

        # biggest first, so the last target to finish is a small one
        order = sorted(args, key=lambda a: -weight[Path(a[0]).name])
        with mp.get_context("fork").Pool(min(jobs, len(args))) as pool:
            for tree in pool.imap_unordered(_load_one, order):
                parsed(tree)
        trees.sort(key=lambda t: t.target)
    else:
        for a in args:
            parsed(_load_one(a))
    if args:
        bar.close()

    # Validate everything before writing anything.
    for tree in trees:
        parsable = [f for f in tree.files if f.parsed or f.n_functions]
        if not tree.files:
            raise BackendInputError(f"target {tree.target} has no .cpp/.h/.td sources")
        if not parsable and not tree.attributes:
            raise BackendInputError(f"target {tree.target} has no parsable sources ({len(tree.files)} files, all failed)")

    ingest_id = uuid.uuid4().hex[:12]
    fps = {d.name: fp for d, fp in todo}
    for tree in trees:
        with store.transaction() as con:
            for table in ("functions", "target_attributes", "target_files", "targets"):
                con.execute(f"DELETE FROM {table} WHERE target = ?", [tree.target])
            store.bulk_insert(con, "functions", FUNCTION_COLUMNS, (
                (f.func_id, f.target, f.path, f.qualified_name, f.name, f.class_name, f.role, f.signature, f.body,
                 f.statements, f.identifiers, f.start_line, f.end_line, f.start_byte, f.end_byte, f.in_class,
                 f.n_errors)
                for f in tree.functions))
            store.bulk_insert(con, "target_attributes", ATTRIBUTE_COLUMNS, (
                (a.target, a.kind, a.name, a.parents, a.refs, a.value, a.path, a.line) for a in tree.attributes))
            store.bulk_insert(con, "target_files", FILE_COLUMNS, (
                (tree.target, f.path, f.kind, f.sha256, f.parsed, f.n_errors, f.error, f.n_functions) for f in tree.files))
            n_failed = len(tree.failed_files)
            con.execute("INSERT INTO targets (target, root, fingerprint, n_files, n_failed, n_functions, n_attributes, "
                        "ingest_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [tree.target, tree.root, fps[tree.target], len(tree.files), n_failed, len(tree.functions),
                         len(tree.attributes), ingest_id])
            # T's name variants (RISCV; PPC and PowerPC) are kept as attributes of kind 'alias'.
            for a in tree.aliases:
                con.execute("INSERT INTO target_attributes (target, kind, name) VALUES (?, 'alias', ?)", [tree.target, a])
        report.targets.append({"target": tree.target, "n_files": len(tree.files), "n_failed": len(tree.failed_files),
                               "n_functions": len(tree.functions), "n_attributes": len(tree.attributes),
                               "status": "indexed"})
        for f in tree.failed_files:
            report.failed_files.append({"target": tree.target, "path": f.path, "error": f.error})
    with store.transaction() as con:
        con.execute("INSERT INTO backend_ingests VALUES (?, ?, ?, current_timestamp, ?, ?, ?, ?)",
                    [ingest_id, str(path.resolve()), time.strftime("%Y-%m-%d %H:%M:%S"),
                     [t.target for t in trees], sum(len(t.files) for t in trees),
                     sum(len(t.failed_files) for t in trees), json.dumps({"force": force, "targets": list(targets or [])})])
    if trees:
        canonical_roles(store)
    report.targets.sort(key=lambda r: r["target"])
    report.n_functions = int(store.scalar("SELECT count(*) FROM functions") or 0)
    report.seconds = round(time.monotonic() - started, 2)
    return report


def drop_targets(store, targets: Sequence[str]) -> None:
    """Remove targets from the store (a benchmark's store holding a target of another run)."""
    if not targets:
        return
    with store.transaction() as con:
        for t in targets:
            for table in ("functions", "target_attributes", "target_files", "targets"):
                con.execute(f"DELETE FROM {table} WHERE target = ?", [t])
    canonical_roles(store)


def role_renames(classes: Sequence[dict], aliases: dict[str, list[str]]) -> dict[tuple[str, str], str]:
    """(target, class) -> the role class it implements, where its own name hides it.

    A role's class part is the class name with T's name stripped (``RISCVELFObjectWriter`` ->
    ``ELFObjectWriter``). Xtensa calls its ELF writer ``XtensaObjectWriter``; like the others it
    derives from ``MCELFObjectTargetWriter``. Per LLVM base class B (one T does not define), the
    stripped names of the classes deriving from it vote, one vote per target; a class whose
    stripped name no other target uses for B takes the majority name, when two or more targets
    hold it and T has no class of that name for B already."""
    own = {(c["target"], c["name"]) for c in classes}
    votes: dict[str, dict[str, set]] = {}
    per_class: list[tuple[str, str, str, list[str]]] = []
    for c in classes:
        T = c["target"]
        stripped = strip_target(c["name"], aliases.get(T, [T]))
        bases = [b.split("::")[-1] for b in (c["parents"] or []) if (T, b.split("::")[-1]) not in own]
        per_class.append((T, c["name"], stripped, bases))
        for b in bases:
            votes.setdefault(b, {}).setdefault(stripped, set()).add(T)
    out: dict[tuple[str, str], str] = {}
    for T, name, stripped, bases in per_class:
        picks = set()
        for b in bases:
            ranked = sorted(votes[b].items(), key=lambda kv: (-len(kv[1]), kv[0]))
            top, holders = ranked[0]
            if len(ranked) > 1 and len(ranked[1][1]) == len(holders):
                continue  # no majority name for this base
            if top != stripped and len(holders) >= 2 and votes[b][stripped] == {T} and T not in holders:
                picks.add(top)
        if len(picks) == 1:
            out[(T, name)] = picks.pop()
    return out


def canonical_roles(store) -> int:
    """Rewrite ``functions.role`` after an ingest: the role T's own classes implement
    (``role_renames``); roles are recomputed from the qualified names each time, so the pass is
    idempotent and follows every change of the other targets. Returns the functions renamed."""
    aliases = target_aliases(store)
    classes = store.query("SELECT target, name, parents FROM target_attributes WHERE kind = 'class'")
    renames = role_renames(classes, aliases)
    rows = store.query("SELECT func_id, target, qualified_name, class_name, role FROM functions "
                       "WHERE class_name IS NOT NULL")
    updates = []
    n = 0
    for r in rows:
        T = r["target"]
        want = strip_target(r["qualified_name"], aliases.get(T, [T]))
        new_cls = renames.get((T, r["class_name"]))
        if new_cls:
            parts = want.split("::")
            if len(parts) >= 2:
                parts[-2] = new_cls
                want = "::".join(parts)
                n += 1
        if want != r["role"]:
            updates.append((want, r["func_id"]))
    if updates:
        with store.transaction() as con:
            con.executemany("UPDATE functions SET role = ? WHERE func_id = ?", updates)
    return n


def target_aliases(store) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in store.query("SELECT target, name FROM target_attributes WHERE kind = 'alias' ORDER BY target, name"):
        out.setdefault(r["target"], []).append(r["name"])
    for t in out:
        out[t].sort(key=lambda a: (-len(a), a))
    return out


def shared_role_functions(store, min_targets: int = 2) -> list[dict]:
    """Functions whose role occurs in at least ``min_targets`` indexed targets, in func_id order."""
    return store.query(
        "WITH roles AS (SELECT role FROM functions GROUP BY role HAVING count(DISTINCT target) >= ?) "
        "SELECT f.func_id, f.target, f.role, f.qualified_name, f.signature, f.body, f.path, f.identifiers "
        "FROM functions f JOIN roles USING (role) ORDER BY f.func_id", [min_targets])


# --------------------------------------------------------------------------- graphs
def function_graph(signature: str, body: str, aliases: Sequence[str]):
    """Syntax graph (torch_geometric Data) of one function, target names neutralized."""
    from retrieval.graphs import syntax_graph, vocab_for

    text = f"{signature}\n{body}"
    tree = parse_cpp(text)
    neutral = _token_mapper(tuple(aliases))
    return syntax_graph(tree.root_node, vocab_for("cpp"), max_nodes=FUNC_GRAPH_MAX_NODES, token_map=neutral).to_data()


def _token_mapper(aliases: tuple[str, ...]):
    def m(text: str) -> str:
        return neutralize(text, aliases)
    return m


ATTR_NODE_TYPES = ("<unk>", "target", "kind") + tuple(ATTRIBUTE_KINDS)


def attribute_graph(attrs: Sequence[dict], aliases: Sequence[str]):
    """A target's attribute graph: target -> one hub per attribute kind -> attributes; attributes
    linked to the attributes their records reference (class members, implied features,
    registers a calling convention assigns, a format's parent formats)."""
    from retrieval.graphs import PAD, TOKENS_PER_NODE, SyntaxGraph, hash_token

    def toks(name: str) -> list[int]:
        parts = [p for p in subtokens_of_name(neutralize(name, aliases)) if p != "tgt"][:TOKENS_PER_NODE]
        return [hash_token(p) for p in parts] + [PAD] * (TOKENS_PER_NODE - len(parts))

    kinds = [k for k in ATTRIBUTE_KINDS]
    nodes_t: list[int] = [ATTR_NODE_TYPES.index("target")]
    nodes_tok: list[list[int]] = [[PAD] * TOKENS_PER_NODE]
    edges: list[tuple[int, int, int]] = []
    hub: dict[str, int] = {}
    for k in kinds:
        hub[k] = len(nodes_t)
        nodes_t.append(ATTR_NODE_TYPES.index("kind"))
        nodes_tok.append([hash_token(k)] + [PAD] * (TOKENS_PER_NODE - 1))
        edges += [(0, hub[k], 0), (hub[k], 0, 1)]
    by_kind: dict[str, list[dict]] = {}
    for a in attrs:
        if a["kind"] in hub:
            by_kind.setdefault(a["kind"], []).append(a)
    index: dict[str, int] = {}
    for k, items in by_kind.items():
        items = sorted(items, key=lambda a: a["name"])
        cap = ATTR_CAPS.get(k)
        if cap and len(items) > cap:
            # deterministic sample spread over the name order
            step = len(items) / cap
            items = [items[int(i * step)] for i in range(cap)]
        prev = None
        for a in items:
            i = len(nodes_t)
            index.setdefault(a["name"], i)
            nodes_t.append(ATTR_NODE_TYPES.index(k))
            nodes_tok.append(toks(a["name"]))
            edges += [(hub[k], i, 0), (i, hub[k], 1)]
            if prev is not None:
                edges += [(prev, i, 2), (i, prev, 3)]
            prev = i
    for a in attrs:
        src = index.get(a["name"])
        if src is None:
            continue
        for r in list(a.get("refs") or []) + list(a.get("parents") or []):
            dst = index.get(r)
            if dst is not None and dst != src:
                edges += [(src, dst, 6), (dst, src, 7)]
    return SyntaxGraph(nodes_t, nodes_tok, edges).to_data()


# --------------------------------------------------------------------------- embeddings + models
def _doc_sha(row: dict, aliases: dict[str, list[str]]) -> str:
    doc = function_doc(row["signature"], row["body"], aliases.get(row["target"], [row["target"]]))
    return hashlib.sha1(doc.encode()).hexdigest()[:16]


def embed_texts(store, rows: Sequence[dict], aliases: dict[str, list[str]], log=None) -> int:
    """Upsert MiniLM vectors of ``rows`` that are missing or whose text changed (a hash of the
    embedded text is kept in each vector's metadata); drop vectors of functions gone."""
    from retrieval.vector_index import VectorIndex

    vi = VectorIndex(store.chroma_dir)
    want = {r["func_id"]: r for r in rows}
    shas = {fid: _doc_sha(r, aliases) for fid, r in want.items()}
    have: dict[str, str] = {}
    if vi.has(TEXT_COLLECTION):
        col = vi.collection(TEXT_COLLECTION, kind="text", max_seq_length=TEXT_MAX_TOKENS)
        got = col.get(include=["metadatas"])
        have = {i: (m or {}).get("doc_sha", "") for i, m in zip(got["ids"], got["metadatas"])}
        stale = sorted(set(have) - set(want))
        for s in range(0, len(stale), 5000):
            col.delete(ids=stale[s:s + 5000])
    missing = [want[i] for i in sorted(want) if have.get(i) != shas[i]]
    if not missing:
        return 0
    import numpy as np

    from retrieval.progress import Progress

    emb = text_embedder(build=True)
    if log:
        log(f"embedding {len(missing)} functions (MiniLM, {TEXT_MAX_TOKENS} tokens, {embedder_name(emb)})")
    # 128 tokens cover ~500 characters of code; cutting first saves tokenizing huge functions
    docs = [function_doc(r["signature"], r["body"], aliases.get(r["target"], [r["target"]]))[:2000] for r in missing]
    # chunks of similar length (less padding), progress counted in tokens (what a chunk costs)
    ntok = [min(n, TEXT_MAX_TOKENS) + 2 for n in emb.count_tokens(docs)] if hasattr(emb, "count_tokens") \
        else [len(d) // 4 for d in docs]
    order = sorted(range(len(docs)), key=lambda i: (ntok[i], i))
    vecs = np.zeros((len(docs), 384), dtype=np.float32)
    bar = Progress(f"embedding {len(docs)} functions", sum(ntok), log=log, unit="tokens")
    for s in range(0, len(order), 512):
        idx = order[s:s + 512]
        vecs[idx] = emb.embed([docs[i] for i in idx])
        bar.advance(sum(ntok[i] for i in idx))
    bar.close()
    vi.upsert(TEXT_COLLECTION, [r["func_id"] for r in missing], embeddings=vecs,
              metadatas=[{"target": r["target"], "role": r["role"], "doc_sha": shas[r["func_id"]]} for r in missing],
              kind="text")
    return len(missing)


@lru_cache(maxsize=2)
def text_embedder(build: bool = False):
    """MiniLM for the backend texts: onnxruntime with the fp32 weights when it is installed (the
    same vectors as sentence-transformers, cosine > 0.9999, at ~0.6x its CPU time), else
    sentence-transformers. ``build``: an index build may use every core (SKILLS_BLAS_THREADS
    caps it); a query stays on one."""
    import os

    from retrieval.minilm_onnx import OnnxMiniLM
    from retrieval.text import get_embedder

    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return get_embedder(TEXT_MAX_TOKENS)
    threads = int(os.environ.get("SKILLS_BLAS_THREADS") or (min(4, os.cpu_count() or 1) if build else 1))
    return OnnxMiniLM(max_seq_length=TEXT_MAX_TOKENS, precision="fp32", threads=threads)


def embedder_name(emb) -> str:
    return getattr(emb, "backend", "sentence-transformers")


def _train_func_gnn(store, rows, aliases, exclude, seed, epochs, log, retrain: bool = False):
    """The function GNN and its vectors. Trained when there is no model, on request, or when
    ``RETRAIN_FRACTION`` of its training functions are new, changed (text or role) or gone;
    otherwise the model is kept and only the graphs of new or changed functions are embedded
    with it (a one-target change re-indexes in seconds, not a retraining's minutes)."""
    from retrieval.gnn import EncoderConfig, TrainConfig, embed, fingerprint, load_checkpoint, save_checkpoint, \
        train_contrastive
    from retrieval.graphs import TOKEN_BUCKETS, vocab_for
    from retrieval.progress import Progress
    from retrieval.vector_index import VectorIndex

    tag = model_tag(exclude)
    name = f"backend-func-gnn__{tag}"
    excluded = set(exclude)
    shas = {r["func_id"]: _doc_sha(r, aliases) for r in rows}
    # roles are the contrastive positives: a changed role is changed training data
    items = sorted(f"{r['func_id']}|{shas[r['func_id']]}|{r['role']}" for r in rows if r["target"] not in excluded)
    fp = fingerprint([items, seed, epochs, FUNC_GRAPH_MAX_NODES,
                      sorted((fid, sha) for fid, sha in shas.items() if fid.split(":", 1)[0] in excluded)])
    collection = f"backend_func_graph__{tag}"
    vi = VectorIndex(store.chroma_dir)
    prev = store.model(name)
    have = bool(prev) and Path(prev["path"]).is_file()
    items_file = store.models_dir / f"{name}.items.json"
    if not retrain and have and prev["data_fingerprint"] == fp and vi.has(collection) \
            and vi.collection(collection, kind="precomputed").count() == len(rows):
        return {"name": name, "status": "unchanged", **{k: prev["metadata"].get(k) for k in ("seconds", "losses")}}
    why = ("retrain requested" if retrain else "no model yet" if not have else
           "its training set was not recorded" if not items_file.is_file() else "")
    if not why:
        changed = _changed_items(json.loads(items_file.read_text()), items)
        frac = changed / max(len(items), 1)
        if frac >= RETRAIN_FRACTION:
            why = (f"{changed} training functions new, changed or gone since it was trained "
                   f"({frac:.0%} >= {RETRAIN_FRACTION:.0%})")
    if not why:  # keep the model: embed what is new or changed, drop what is gone
        model, _ = load_checkpoint(prev["path"])
        stored: dict[str, Optional[str]] = {}
        if vi.has(collection):
            col = vi.collection(collection, kind="precomputed")
            got = col.get(include=["metadatas"])
            stored = {i: (m or {}).get("doc_sha") for i, m in zip(got["ids"], got["metadatas"])}
        todo = [r for r in rows if stored.get(r["func_id"]) != shas[r["func_id"]]]
        gone = sorted(set(stored) - set(shas))
        for s in range(0, len(gone), 5000):
            col.delete(ids=gone[s:s + 5000])
        if todo:
            graphs = [function_graph(r["signature"], r["body"], aliases.get(r["target"], [r["target"]])) for r in todo]
            bar = Progress(f"embedding {len(todo)} new or changed function graphs", len(todo), log=log)
            vecs = embed(model, graphs, progress=bar)
            bar.close()
            vi.upsert(collection, [r["func_id"] for r in todo], embeddings=vecs,
                      metadatas=[{"target": r["target"], "role": r["role"], "doc_sha": shas[r["func_id"]]}
                                 for r in todo], kind="precomputed", dim=vecs.shape[1])
        return {"name": name, "status": "kept", "embedded": len(todo), "removed": len(gone),
                "why": f"{frac:.1%} of its training functions changed (< {RETRAIN_FRACTION:.0%}); new or changed "
                       "functions embedded with it",
                **{k: prev["metadata"].get(k) for k in ("seconds", "losses")}}
    bar = Progress(f"building {len(rows)} function graphs", len(rows), log=log)
    graphs = []
    for r in rows:
        graphs.append(function_graph(r["signature"], r["body"], aliases.get(r["target"], [r["target"]])))
        bar.advance()
    bar.close()
    train_idx = [i for i, r in enumerate(rows) if r["target"] not in excluded]
    enc = EncoderConfig(n_types=len(vocab_for("cpp")), n_buckets=TOKEN_BUCKETS + 1)
    cfg = TrainConfig(seed=seed, epochs=epochs, batch_groups=64)
    bar = Progress(f"training {name} on {len(train_idx)} graphs ({epochs} epochs; {why})", 1.0, log=log)
    model, info = train_contrastive([graphs[i] for i in train_idx], [rows[i]["role"] for i in train_idx], enc, cfg,
                                    sources=[rows[i]["target"] for i in train_idx], log=log if not bar.tty else None,
                                    progress=bar)
    bar.close(f"last epoch loss {info['losses'][-1]:.4f}" if info["losses"] else "")
    path = store.models_dir / f"{name}.pt"
    meta = {**info, "excluded_targets": sorted(exclude), "vocab": "tree-sitter-cpp node kinds",
            "max_nodes": FUNC_GRAPH_MAX_NODES, "positives": "same role in two targets + node-drop views"}
    meta["checkpoint_sha256"] = save_checkpoint(path, model, meta)
    _atomic_text(items_file, json.dumps(items))
    store.register_model(name, "graph-encoder", path, fp, meta)
    bar = Progress(f"embedding {len(graphs)} function graphs", len(graphs), log=log)
    vecs = embed(model, graphs, progress=bar)
    bar.close()
    vi.drop(collection)
    vi.upsert(collection, [r["func_id"] for r in rows], embeddings=vecs,
              metadatas=[{"target": r["target"], "role": r["role"], "doc_sha": shas[r["func_id"]]} for r in rows],
              kind="precomputed", dim=vecs.shape[1])
    return {"name": name, "status": "trained", "why": why, "seconds": info["seconds"], "losses": info["losses"]}


def _changed_items(before: Sequence[str], now: Sequence[str]) -> int:
    """Training items new, changed or gone, a changed one counted once (it leaves its old
    entry and brings a new one)."""
    b, n = set(before), set(now)
    return max(len(b - n), len(n - b))


def _atomic_text(path: Path, text: str) -> None:
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _train_target_gnn(store, targets, aliases, exclude, seed, epochs, log, retrain: bool = False):
    """The target GNN and every target's vector; retrained on the same rule as the function
    GNN (``RETRAIN_FRACTION`` of its training targets new, changed or gone), else kept and all
    target graphs (a few dozen) embedded with it again."""
    from retrieval.gnn import EncoderConfig, TrainConfig, embed, fingerprint, load_checkpoint, save_checkpoint, \
        train_contrastive
    from retrieval.graphs import TOKEN_BUCKETS
    from retrieval.vector_index import VectorIndex

    tag = model_tag(exclude)
    name = f"backend-target-gnn__{tag}"
    collection = f"backend_target_graph__{tag}"
    attrs = store.query("SELECT target, kind, name, parents, refs FROM target_attributes "
                        "WHERE kind NOT IN ('alias', 'class') "
                        "ORDER BY target, kind, name")
    by_t: dict[str, list[dict]] = {}
    for a in attrs:
        by_t.setdefault(a["target"], []).append(a)
    fps = {r["target"]: r["fingerprint"] for r in store.query("SELECT target, fingerprint FROM targets")}
    fp = fingerprint([sorted((t, fps.get(t)) for t in targets), seed, epochs, ATTR_CAPS])
    items = sorted(f"{t}|{fps.get(t)}" for t in targets if t not in set(exclude))
    vi = VectorIndex(store.chroma_dir)
    prev = store.model(name)
    have = bool(prev) and Path(prev["path"]).is_file()
    if not retrain and have and prev["data_fingerprint"] == fp and vi.has(collection):
        return {"name": name, "status": "unchanged", **{k: prev["metadata"].get(k) for k in ("seconds", "losses")}}
    graphs = [attribute_graph(by_t.get(t, []), aliases.get(t, [t])) for t in targets]
    items_file = store.models_dir / f"{name}.items.json"
    why = ("retrain requested" if retrain else "no model yet" if not have else
           "its training set was not recorded" if not items_file.is_file() else "")
    if not why:
        changed = _changed_items(json.loads(items_file.read_text()), items)
        frac = changed / max(len(items), 1)
        if frac >= RETRAIN_FRACTION:
            why = f"{changed} training targets new, changed or gone ({frac:.0%} >= {RETRAIN_FRACTION:.0%})"
    if not why:
        model, _ = load_checkpoint(prev["path"])
        vecs = embed(model, graphs)
        vi.drop(collection)
        vi.upsert(collection, list(targets), embeddings=vecs, metadatas=[{"target": t} for t in targets],
                  kind="precomputed", dim=vecs.shape[1])
        return {"name": name, "status": "kept", "why": f"{frac:.0%} of its training targets changed (< "
                f"{RETRAIN_FRACTION:.0%}); every target embedded with it",
                **{k: prev["metadata"].get(k) for k in ("seconds", "losses")}}
    train_idx = [i for i, t in enumerate(targets) if t not in set(exclude)]
    enc = EncoderConfig(n_types=len(ATTR_NODE_TYPES), n_buckets=TOKEN_BUCKETS + 1, hidden=64, out_dim=32, layers=2)
    cfg = TrainConfig(seed=seed, epochs=epochs, batch_groups=len(train_idx), node_drop=0.2, lr=3e-3)
    from retrieval.progress import Progress

    bar = Progress(f"training {name} on {len(train_idx)} target graphs ({epochs} epochs; {why})", 1.0, log=log)
    model, info = train_contrastive([graphs[i] for i in train_idx], [None] * len(train_idx), enc, cfg, progress=bar)
    bar.close()
    path = store.models_dir / f"{name}.pt"
    meta = {**info, "excluded_targets": sorted(exclude), "node_types": list(ATTR_NODE_TYPES),
            "positives": "two node-drop views of the same target graph"}
    meta["checkpoint_sha256"] = save_checkpoint(path, model, meta)
    _atomic_text(items_file, json.dumps(items))
    store.register_model(name, "graph-encoder", path, fp, meta)
    vecs = embed(model, graphs)
    vi.drop(collection)
    vi.upsert(collection, list(targets), embeddings=vecs, metadatas=[{"target": t} for t in targets],
              kind="precomputed", dim=vecs.shape[1])
    return {"name": name, "status": "trained", "why": why, "seconds": info["seconds"], "losses": info["losses"]}


def build_indexes(store, exclude: Sequence[str] = (), seed: int = 0, func_epochs: int = 8, target_epochs: int = 60,
                  log=None, retrain: bool = False) -> dict:
    """Embeddings and models for what is in the store (incremental; see module doc)."""
    aliases = target_aliases(store)
    rows = shared_role_functions(store)
    targets = [r["target"] for r in store.query("SELECT target FROM targets ORDER BY target")]
    out = {"n_shared_role_functions": len(rows)}
    clock = PhaseClock()
    out["n_embedded"] = embed_texts(store, rows, aliases, log=log)
    clock.lap("text_embeddings")
    out["func_gnn"] = _train_func_gnn(store, rows, aliases, list(exclude), seed, func_epochs, log, retrain=retrain)
    clock.lap("function_gnn")
    out["target_gnn"] = _train_target_gnn(store, targets, aliases, list(exclude), seed, target_epochs, log,
                                          retrain=retrain)
    clock.lap("target_gnn")
    out["phases"] = clock.phases
    return out


def index_backends(path: Path, store, targets: Optional[Sequence[str]] = None, force: bool = False,
                   exclude_from_training: Sequence[str] = (), jobs: int = 1, seed: int = 0,
                   build: bool = True, func_epochs: int = 8, target_epochs: int = 60, log=None,
                   retrain: bool = False) -> IndexReport:
    """`skills backend index`: ingest, then (re)build embeddings and models."""
    started = time.monotonic()
    clock = PhaseClock()
    report = ingest_targets(path, store, targets=targets, force=force, jobs=jobs, log=log)
    report.phases = {"ingest": clock.lap("ingest")}
    if build:
        info = build_indexes(store, exclude=exclude_from_training, seed=seed, func_epochs=func_epochs,
                             target_epochs=target_epochs, log=log, retrain=retrain)
        report.n_shared_role_functions = info["n_shared_role_functions"]
        report.n_embedded = info["n_embedded"]
        report.models = {"func_gnn": info["func_gnn"], "target_gnn": info["target_gnn"]}
        report.phases.update(info["phases"])
    report.seconds = round(time.monotonic() - started, 2)
    return report
