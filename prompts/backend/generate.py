"""Backend function generation: retrieve, prompt, generate (LLM or fork-and-adapt), gate, repair.

    generate(store, GenerateRequest(target="RISCV", role="ELFObjectWriter::getRelocType"))

Strategies:
* ``fork-adapt`` (default, no LLM): the best-ranked implementation from another target with
  its target identifiers mapped onto T's (retrieval/backend/adapt.py), plus the statements at
  least half of the top ``fuse_donors`` donors (adapted the same way) agree on, in the best
  donor's order (retrieval/backend/fuse.py; ``fuse_donors=1``: the one donor alone);
* ``fork-flow`` (the baseline): Mips's implementation with the target renamed;
* ``skills``: the best-ranked implementation's lineage (mined by ``skills backend mine``)
  gives the role's skeleton and its compile-validated skills; each skill is decided and
  instantiated with T's attributes (prompts/backend/skills.py). With ``--model`` the prompt
  (prompts/backend/skills.md) carries the skeleton, the skills and T's attributes, and the
  mechanical instantiation as a starting point;
* ``llm``: a few-shot prompt (prompts/backend/generate.md: the top-k implementations from the
  most similar targets, T's relevant attributes, the fork-and-adapt draft) sent through
  mining/llm.py; with ``repair=N`` the compile gate's diagnostics go back to the model for
  up to N more attempts.

Every result is checked by the compile gate (mining/backend/gate.py; clang and headers of the
LLVM version T's tree came from) when that toolchain is installed, spliced into T's real file: replacing T's own implementation when T has one (the
benchmark's case), else appended to the file that holds T's class for the role.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence

from corpora.backends.tree import BackendInputError
from corpora.backends.profile import TargetProfile, load_profile
from retrieval.backend.adapt import (
    adapt, definition_parameters, fit_definition, fit_parameters, fork_flow, rename_target,
)
from mining.backend.drift import apply_rules
from retrieval.backend.fuse import DEFAULT_DONORS, fuse_top
from retrieval.backend.search import BackendIndex, SearchError

PROMPT_DIR = Path(__file__).parent
STRATEGIES = ("fork-adapt", "fork-flow", "skills", "llm")
FORK_FLOW_SOURCE = "Mips"  # the fixed backend fork-flow copies
# Attribute kinds shown in the prompt, by words in the role (else: the kinds the candidates use).
ROLE_KINDS = [
    (re.compile(r"Reloc|Fixup|ObjectWriter|AsmBackend|CodeEmitter", re.I), ["fixup", "relocation"]),
    (re.compile(r"Reg|Frame|CallingConv|Call|Return|Arguments|Prologue|Epilogue|Spill|copyPhys", re.I),
     ["register_class", "register", "calling_convention"]),
    (re.compile(r"Subtarget|Feature|Processor|CPU", re.I), ["subtarget_feature", "processor"]),
    (re.compile(r"Instr|ISel|Lower|Select|Branch|Inst", re.I), ["instruction_format", "register_class", "subtarget_feature"]),
]
ATTR_LIMIT = 60
# prompt sections cut (in this order) when the prompt does not fit the model's context window
CUTTABLE = ("How the most similar existing targets", "What ", "Skills, in the order", "A starting point")


def render(template: str, **values: str) -> str:
    def sub(m: re.Match) -> str:
        key = m.group(1)
        if key not in values:
            raise KeyError(f"template needs {key!r}")
        return str(values[key])

    return re.sub(r"\{\{(\w+)\}\}", sub, template)


def load_template(name: str) -> str:
    return (PROMPT_DIR / name).read_text()


@dataclass
class GenerateRequest:
    target: str
    role: str
    k: int = 3
    strategy: str = "fork-adapt"
    model: Optional[str] = None
    prompt_only: bool = False
    repair: int = 0
    gate: bool = True
    exclude_targets: Sequence[str] = ()
    llm_kwargs: dict = field(default_factory=dict)
    fuse_donors: int = DEFAULT_DONORS  # top-k donors voting statements in; 1 = one donor (no fusion)
    gate_repair: bool = True  # without an LLM: rename undeclared identifiers to T's closest (repair.py)
    repair_rounds: int = 3


# --------------------------------------------------------------------------- resolution
def target_role_classes(store, target: str) -> set[str]:
    """The role classes T's own classes stand for: every class T defines or declares, T's name
    stripped (``LoongArchELFObjectWriter`` -> ``ELFObjectWriter``), renamed where its base
    class says it implements another role's class (``XtensaObjectWriter`` -> ``ELFObjectWriter``:
    retrieval/backend_index.role_renames)."""
    from corpora.backends.tree import strip_target
    from retrieval.backend.index import role_renames, target_aliases

    aliases = target_aliases(store)
    classes = store.query("SELECT target, name, parents FROM target_attributes WHERE kind = 'class'")
    renames = role_renames(classes, aliases)
    names = {r["name"] for r in store.query("SELECT name FROM target_attributes WHERE target = ? AND "
                                            "kind IN ('class', 'declaration')", [target])}
    names |= {r["class_name"] for r in store.query("SELECT DISTINCT class_name FROM functions WHERE target = ? "
                                                   "AND class_name IS NOT NULL", [target])}
    own = aliases.get(target, [target])
    return {renames.get((target, n)) or strip_target(n, own) for n in names}


def resolve_role(index: BackendIndex, role: str, target: Optional[str] = None) -> str:
    """A role as given (``ELFObjectWriter::getRelocType``, or just ``getRelocType``) -> one known role.

    A bare method name that several roles end in is resolved by ``target``'s own code: the one
    role T implements, else the one whose class T defines or declares (a new target's header
    comes before its function bodies); otherwise it is ambiguous."""
    roles = index.roles()
    if role in roles:
        return role
    all_roles = {r["role"] for r in index.store.query("SELECT DISTINCT role FROM functions")}
    if role in all_roles:
        return role
    tail = [r for r in sorted(roles) if r.split("::")[-1] == role or r.endswith("::" + role)]
    if len(tail) == 1:
        return tail[0]
    if len(tail) > 1:
        cands, why = tail, ""
        if target:
            own = {r["role"] for r in index.store.query("SELECT DISTINCT role FROM functions WHERE target = ?",
                                                        [target])}
            implemented = [r for r in tail if r in own]
            if len(implemented) == 1:
                return implemented[0]
            if implemented:
                cands, why = implemented, f" ({target} implements {len(implemented)} of them)"
            else:
                classes = target_role_classes(index.store, target)
                declared = [r for r in tail if r.rsplit("::", 1)[0] in classes]
                if len(declared) == 1:
                    return declared[0]
                if declared:
                    cands, why = declared, f" ({target} has classes for {len(declared)} of them)"
                else:
                    why = f" ({target} implements none of them and has no class for any)"
        raise BackendInputError(f"role {role!r} is ambiguous{why}: {', '.join(cands[:8])}; "
                                f"name the class too (e.g. {cands[0]})")
    import difflib

    close = difflib.get_close_matches(role, sorted(roles), n=3, cutoff=0.6)
    if not close:
        tails: dict[str, list[str]] = {}
        for r in sorted(roles):
            tails.setdefault(r.split("::")[-1], []).append(r)
        for t in difflib.get_close_matches(role.split("::")[-1], sorted(tails), n=3, cutoff=0.6):
            close.extend(tails[t][:2])
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise BackendInputError(f"unknown role {role!r} (no indexed target implements it){hint}")


def host_location(store, target: str, role: str, qualified_name: str) -> Optional[dict]:
    """Where T's version of ``role`` goes: T's own implementation if it has one, else the end
    of the file holding the most functions of T's class for the role."""
    rows = store.query("SELECT func_id, path, start_byte, end_byte, qualified_name, in_class "
                       "FROM functions WHERE target = ? AND role = ? ORDER BY func_id", [target, role])
    if rows:
        r = rows[0]
        return {"path": r["path"], "start_byte": r["start_byte"], "end_byte": r["end_byte"], "replaces": r["func_id"],
                "qualified_name": r["qualified_name"], "in_class": bool(r["in_class"])}
    cls = qualified_name.rsplit("::", 1)[0] if "::" in qualified_name else None
    if cls:
        got = store.query("SELECT path, count(*) n FROM functions WHERE target = ? AND class_name = ? GROUP BY path "
                          "ORDER BY n DESC, path LIMIT 1", [target, cls])
        if got:
            return {"path": got[0]["path"], "start_byte": None, "end_byte": None, "replaces": None,
                    "qualified_name": "llvm::" + qualified_name, "in_class": False}
    return None


@lru_cache(maxsize=512)
def _file_declarations(path: str, mtime: float) -> list:
    from corpora.backends.tree import function_declarations

    return function_declarations(Path(path).read_bytes())


def target_declaration(store, target: str, qualified_name: str, arity: Optional[int]) -> Optional[list]:
    """The parameters T's own headers (``*.h`` under its tree) declare for ``qualified_name`` with
    ``arity`` parameters (``corpora.backends.tree.parameters_of``; None: any number), or None: T
    declares no such function, or several overloads of that arity differ."""
    qn = qualified_name[len("llvm::"):] if qualified_name.startswith("llvm::") else qualified_name
    root = store.scalar("SELECT root FROM targets WHERE target = ?", [target])
    if not root or not Path(root).is_dir():
        return None
    found = set()
    for f in sorted(Path(root).rglob("*.h")):
        for name, params in _file_declarations(str(f), f.stat().st_mtime):
            if name == qn and params is not None and (arity is None or len(params) == arity):
                found.add(tuple(params))
    return list(found.pop()) if len(found) == 1 else None


def fit_declared(store, target: str, qualified_name: str, code: str) -> tuple[str, dict[str, str]]:
    """``code`` (a definition out of line) with the parameters T's own declaration of the function
    gives it (retrieval.backend.adapt.fit_parameters): T's types and names, the body's uses
    renamed. A porter writes the header first, so the declaration is what the definition must
    match. The declaration of the same arity first; else T's one declaration of the function of
    any arity (the API gained or lost a parameter between the donor's LLVM and T's: LLVM 19's
    ``loadRegFromStackSlot(.., Register VReg)``), its parameters paired with the donor's by type
    and position. Unchanged where T declares no such function or several differing overloads.
    Returns (code, {old: new name})."""
    own = definition_parameters(code)
    if own is None:
        return code, {}
    decl = target_declaration(store, target, qualified_name, len(own)) if own else None
    if decl:
        return fit_parameters(code, decl)
    decl = target_declaration(store, target, qualified_name, None)
    return fit_parameters(code, decl, any_arity=True) if decl is not None else (code, {})


def relevant_attributes(store, prof: TargetProfile, role: str, kinds_used: Sequence[str]) -> dict[str, list[str]]:
    kinds: list[str] = []
    for pat, ks in ROLE_KINDS:
        if pat.search(role):
            kinds = ks
            break
    for k in kinds_used:
        if k not in kinds:
            kinds.append(k)
    if not kinds:
        kinds = ["register_class", "subtarget_feature"]
    return {k: prof.by_kind.get(k, [])[:ATTR_LIMIT] for k in kinds if prof.by_kind.get(k)}


def _format_attributes(attrs: dict[str, list[str]], prof: TargetProfile) -> str:
    if not attrs:
        return f"(no TableGen records, fixups or relocations found for {prof.target})"
    lines = []
    for k, names in attrs.items():
        total = len(prof.by_kind.get(k, []))
        more = f" (first {len(names)} of {total})" if total > len(names) else ""
        lines.append(f"- {k.replace('_', ' ')}s{more}: " + ", ".join(f"`{n}`" for n in names))
    return "\n".join(lines)


# --------------------------------------------------------------------------- generation
class AdaptCache:
    """Per-process memo of target profiles, candidate texts and adaptations (the benchmark
    generates hundreds of functions against the same store)."""

    def __init__(self, store):
        self.store = store
        self.profiles: dict[str, TargetProfile] = {}
        self.texts: dict[str, str] = {}
        self.adapted: dict[tuple[str, str], tuple] = {}
        self.names: dict[str, frozenset] = {}

    def profile(self, target: str) -> TargetProfile:
        if target not in self.profiles:
            try:
                self.profiles[target] = load_profile(self.store, target)
            except KeyError:
                raise BackendInputError(f"target {target!r} has no attributes in the store") from None
        return self.profiles[target]

    def text(self, func_id: str) -> str:
        if func_id not in self.texts:
            self.texts[func_id] = self.store.scalar(
                "SELECT signature || ' ' || body FROM functions WHERE func_id = ?", [func_id])
        return self.texts[func_id]

    def target_names(self, target: str) -> frozenset:
        """T's names besides a fork's own: its attributes (with the names TableGen generates from
        them: ``RegClass``.., ``CSR_X_SaveList``..) and what its headers declare."""
        if target not in self.names:
            prof = self.profile(target)
            names = set(prof.kind_of) | {d.split("::")[-1] for d in prof.declared}
            names |= prof.generated_names()
            self.names[target] = frozenset(names)
        return self.names[target]

    def adapt(self, row: dict, target: str):
        key = (row["func_id"], target)
        if key not in self.adapted:
            from corpora.backends.tree import parse_definition

            a = adapt(self.text(row["func_id"]), list(row["identifiers"] or []), self.profile(row["target"]),
                      self.profile(target), row["func_id"])
            parsed = parse_definition(a.text)
            self.adapted[key] = (a, parsed[0] if parsed else [])
        return self.adapted[key]


def candidates_with_adaptations(store, index: BackendIndex, target: str, role: str, k: int,
                                exclude: Sequence[str] = (), cache: Optional[AdaptCache] = None,
                                medoid: Optional[bool] = None):
    """Ranked candidates for T's ``role`` and each one's fork-and-adapt onto T.

    Every implementation of the role in another target is adapted to T; the adapted versions
    vote (consensus_scores) and target similarity breaks near-ties (BackendIndex.role_candidates).
    ``medoid`` (default ``selection.MEDOID_DEFAULT``): the rule's top ``MEDOID_K`` vote again
    among themselves and the one that agrees most with the others goes first
    (``selection.consensus_medoid``; its hit's ``ranks['medoid_from_rank']`` says from where).
    Returns (T's profile, hits, {func_id: Adapted}).
    """
    from retrieval.backend.adapt import consensus_scores
    from retrieval.backend.selection import MEDOID_DEFAULT, MEDOID_K, consensus_medoid

    cache = cache or AdaptCache(store)
    dst = cache.profile(target)
    rows = index.role_rows(role, list(exclude) + [target])
    if not rows:
        raise BackendInputError(f"no implementation of {role!r} in targets other than {target}")
    adapted = {}
    stmts = {}
    for r in rows:
        a, st = cache.adapt(r, target)
        adapted[r["func_id"]] = a
        stmts[r["func_id"]] = st
    cons = consensus_scores(stmts)
    mapp = {fid: a.mappability for fid, a in adapted.items()}
    medoid = MEDOID_DEFAULT if medoid is None else medoid
    hits = index.role_candidates(target, role, k=max(k, MEDOID_K if medoid else 1, 1), exclude_targets=exclude,
                                 consensus=cons, mappability=mapp)
    if medoid:  # the top k only: the order below them stays the rule's
        pos = consensus_medoid([stmts[h.func_id] for h in hits[:MEDOID_K]])
        if pos:
            hits[pos].ranks["medoid_from_rank"] = pos + 1
            hits = [hits[pos]] + hits[:pos] + hits[pos + 1:]
    return dst, hits[:max(k, 1)], adapted


def fused_fork(hits, adapted: dict, k: int = DEFAULT_DONORS, known: Sequence[str] = ()):
    """The best hit's adaptation with the statements at least half of the top-``k`` donors agree
    on (retrieval/backend/fuse.py); ``known``: T's own names an added statement may read
    (``AdaptCache.target_names``). Returns (code, what was added)."""
    res = fuse_top(adapted[hits[0].func_id].text, [adapted[h.func_id].text for h in hits[1:k]], k, known=known)
    return res.code, res.added


def _gate_check(gate, target: str, host: dict, code: str, label: str = "generated"):
    from mining.backend.gate import Splice

    sp = Splice(label, code, host["start_byte"], host["end_byte"])
    res = gate.check(target, host["path"], [sp])
    f = res.functions.get(label, {"passed": res.passed, "diagnostics": []})
    verdict = res.function_verdict(label) if not res.passed else "pass"
    out = {"passed": None if verdict == "environment" else verdict == "pass", "verdict": verdict,
           "function_passed": f["passed"], "diagnostics": f["diagnostics"], "file_diagnostics": res.file_diagnostics,
           "cached": res.cached, "seconds": res.seconds, "host": f"{target}/{host['path']}",
           "toolchain": gate.tools.name, "stderr": res.stderr}
    if res.environment:
        out["skipped"] = res.environment
        out["host_diagnostics"] = res.host_diagnostics
    return out


def llvm_version(store, target: str) -> str:
    """The LLVM version of the corpus T came from (fetch.json beside lib/), else "15"."""
    root = store.scalar("SELECT root FROM targets WHERE target = ?", [target])
    if root:
        fetch = Path(root).parent.parent.parent / "fetch.json"
        if fetch.is_file():
            try:
                return str(json.loads(fetch.read_text()).get("version", "15"))
            except json.JSONDecodeError:
                pass
    return "15"


def _major(version: str) -> int:
    m = re.match(r"\d+", version or "")
    return int(m.group()) if m else 0


def drift_rules(store, target: str, log=None):
    """The API drift rules (``mining.backend.drift``) from the donors' LLVM version to T's, when T's
    tree is newer than the donors' (else None). Learned from the targets that both ``lib/Target``
    folders hold, but T and every other target the store indexed from T's tree (the queries held
    out beside it): their code is never read. Cached in the store."""
    from mining.backend.drift import cached_rules

    roots = {r["target"]: Path(r["root"]) for r in store.query("SELECT target, root FROM targets")}
    if target not in roots:
        return None
    new_lib = roots[target].parent
    donors = [t for t, r in roots.items() if r.parent != new_lib]
    if not donors:
        return None
    old_lib = Counter(roots[t].parent for t in donors).most_common(1)[0][0]
    if _major(llvm_version(store, target)) <= _major(llvm_version(store, donors[0])):
        return None
    queries = {t for t, r in roots.items() if r.parent == new_lib}
    both = [d.name for d in old_lib.iterdir() if d.is_dir() and (new_lib / d.name).is_dir()] \
        if old_lib.is_dir() and new_lib.is_dir() else []
    learn = sorted(set(both) - queries)
    return cached_rules(store.cache_dir, old_lib, new_lib, learn, log) if learn else None


def make_gate(store, target: str):
    """A CompileGate for the corpus T was indexed from (its LLVM version's toolchain), or
    (None, reason)."""
    from mining.backend.gate import CompileGate

    root = store.scalar("SELECT root FROM targets WHERE target = ?", [target])
    if not root:
        return None, f"compile gate skipped: {target} has no source tree in the store"
    gate = CompileGate(Path(root).parent, store.cache_dir)
    why = gate.unavailable()
    if why:
        return None, f"compile gate skipped: {why}"
    return gate, None


def generate(store, req: GenerateRequest, index: Optional[BackendIndex] = None, gate=None, log=None) -> dict:
    if req.strategy not in STRATEGIES:
        raise BackendInputError(f"unknown strategy {req.strategy!r}; use one of {', '.join(STRATEGIES)}")
    if req.k < 1:
        raise BackendInputError("--k must be at least 1")
    if req.fuse_donors < 1:
        raise BackendInputError("--fuse-donors must be at least 1 (1: one donor, no fusion)")
    if req.repair_rounds < 0:
        raise BackendInputError("--repair-rounds must be at least 0")
    if req.strategy == "llm" and not req.model and not req.prompt_only:
        raise BackendInputError("--strategy llm needs --model (or --prompt-only)")
    index = index or BackendIndex(store)
    known = {r["target"] for r in store.query("SELECT target FROM targets")}
    if req.target not in known:
        raise BackendInputError(f"unknown target {req.target!r}; indexed: {', '.join(sorted(known))} "
                                f"(index its tree with `skills backend index`)")
    role = resolve_role(index, req.role, req.target)
    cache = AdaptCache(store)
    dst, ranked, adapted = candidates_with_adaptations(store, index, req.target, role, max(req.k, req.fuse_donors),
                                                       req.exclude_targets, cache=cache)
    hits = ranked[:req.k]
    best = hits[0]
    best_adapt = adapted[best.func_id]
    fused_text, fused_added = fused_fork(ranked, adapted, req.fuse_donors, known=cache.target_names(req.target))
    # donors of an older LLVM than T's: their API as T's LLVM spells it (rules from the donors' two versions)
    fused_text, drift = apply_rules(fused_text, drift_rules(store, req.target))
    qualified = rename_target(best.qualified_name, cache.profile(best.target), dst)
    host = host_location(store, req.target, role, qualified)
    in_class = bool(host and host["in_class"])
    target_qname = host["qualified_name"] if host else qualified
    draft = fit_definition(fused_text, target_qname, in_class) if host else fused_text
    declared: dict = {}
    if host and not in_class:  # out of line: the parameters T's own header declares
        draft, declared = fit_declared(store, req.target, target_qname, draft)
    fit = (lambda text: fit_definition(text, target_qname, in_class)) if host else (lambda text: text)
    skill_res = None
    if req.strategy == "skills":
        skill_res = skills_for(store, req.target, best.func_id, cache)
        skills_draft = fit(skill_res.code)
    ff_code = None
    if req.strategy == "fork-flow":
        ff_rows = [x for x in index.role_rows(role, [req.target]) if x["target"] == FORK_FLOW_SOURCE]
        if not ff_rows:
            raise BackendInputError(f"fork-flow copies {FORK_FLOW_SOURCE}'s implementation, and {FORK_FLOW_SOURCE} "
                                    f"has none of {role}")
        ff_code = fit(fork_flow(cache.text(ff_rows[0]["func_id"]), cache.profile(FORK_FLOW_SOURCE), dst))

    kinds_used = sorted({m.kind for m in best_adapt.mappings if m.kind})
    attrs = relevant_attributes(store, dst, role, kinds_used)
    examples = []
    for n, h in enumerate(hits, start=1):
        text = store.scalar("SELECT signature || ' ' || body FROM functions WHERE func_id = ?", [h.func_id])
        path = store.scalar("SELECT path FROM functions WHERE func_id = ?", [h.func_id])
        examples.append(f"\n### {n}. {h.target} (`{h.target}/{path}`; target similarity "
                        f"{h.ranks.get('target_similarity', 0):.2f}, agreement with the other targets' versions "
                        f"{h.ranks.get('consensus', 0):.0%}, identifiers mappable to {req.target}: "
                        f"{h.ranks.get('mappability', 0):.0%})\n```cpp\n{text.strip()}\n```")
    version = llvm_version(store, req.target)
    prompt = render(load_template("generate.md"), llvm_version=str(version), target=req.target, role=role,
                    qualified_name=target_qname, host_path=host["path"] if host else "(new file)",
                    attributes=_format_attributes(attrs, dst), examples="".join(examples), draft=draft.strip(),
                    form="defined inside its class body" if in_class else "defined out of line")
    if skill_res is not None:
        prompt = render(load_template("skills.md"), llvm_version=str(version), target=req.target, role=role,
                        qualified_name=target_qname, host_path=host["path"] if host else "(new file)",
                        source_target=best.target, skeleton=fit(skill_res.skeleton or skill_res.code).strip(),
                        skills=format_skills(store, skill_res), attributes=_format_attributes(attrs, dst),
                        draft=skills_draft.strip(),
                        form="defined inside its class body" if in_class else "defined out of line")
    result: dict = {
        "target": req.target, "role": role, "strategy": req.strategy, "qualified_name": target_qname,
        "candidates": [h.to_dict() for h in hits],
        "similar_targets": [{"target": t, "similarity": round(s, 4)} for t, s in index.similar_targets(req.target, 5)]
        if req.target in index.target_vectors else [],
        "host": {k: v for k, v in (host or {}).items() if k != "qualified_name"} or None,
        "attributes": attrs,
        "mappings": [asdict(m) for m in best_adapt.mappings],
        "fusion": {"donors": min(req.fuse_donors, len(ranked)), "added": fused_added},
        "parameters_renamed": declared,
        "api_drift": drift,
        "prompt": prompt if (req.prompt_only or req.strategy == "llm" or (req.model and skill_res is not None)) else None,
    }
    if skill_res is not None:
        result["skills"] = skill_res.to_dict()
    if req.prompt_only:
        return result

    attempts = []
    if req.strategy == "fork-adapt":
        code = draft
    elif req.strategy == "fork-flow":
        code = ff_code
    elif req.strategy == "skills" and not req.model:
        code = skills_draft
    else:
        from mining.llm import LEDGER, complete, extract_code

        reply = complete(prompt, req.model, cuttable=CUTTABLE, **req.llm_kwargs)
        code = extract_code(reply.text) if reply.text.strip() else ""
        code = fit_definition(code, target_qname, in_class) if host and code else code
        attempts.append(_attempt_log(0, reply, code))
        if reply.prompt_sent is not None:
            result["prompt"] = reply.prompt_sent
    result["code"] = code
    lint = _lint(code, dst)
    result["lint"] = lint
    verdict = None
    if req.gate:
        if gate is None:
            gate, why = make_gate(store, req.target)
        else:
            why = None
        if gate is None:
            verdict = {"passed": None, "skipped": why}
        elif host is None:
            verdict = {"passed": None, "skipped": f"no host file for {target_qname} in {req.target}"}
        elif not code.strip():
            verdict = {"passed": False, "skipped": "the model answered nothing: no code to compile", "diagnostics": []}
        else:
            verdict = _gate_check(gate, req.target, host, code)
            if req.gate_repair and not req.model and req.repair_rounds and verdict.get("verdict") == "fail":
                from prompts.backend.repair import NamePool, repair

                # T's names without T's own version of this function, when it has one
                own = {host["path"]: [(host["start_byte"], host["end_byte"])]} \
                    if host.get("start_byte") is not None else None
                pool = NamePool.for_target(dst, gate.target_dir(req.target), exclude=own)
                rep = repair(code, verdict, lambda c: _gate_check(gate, req.target, host, c), pool,
                             req.repair_rounds)
                result["gate_repair"] = rep.to_dict()
                if rep.passed:
                    code, verdict = rep.code, rep.verdict
                    lint = _lint(code, dst)
                    result["code"], result["lint"] = code, lint
            n = 0
            # an environment verdict (the host file fails without the function) is nothing to repair
            while req.model and req.strategy in ("llm", "skills") and n < req.repair \
                    and verdict.get("verdict") != "environment" and not (verdict["passed"] and not lint):
                n += 1
                diag = "\n".join(f"- line {d['line']}:{d['column']}: {d['message']}" for d in verdict["diagnostics"]) \
                    or "- (no diagnostics inside the function; see the lint below)"
                lint_text = ("Lint:\n" + "\n".join(f"- line {w['line']}: {w['message']}" for w in lint)) if lint else ""
                rp = render(load_template("repair.md"), target=req.target, role=role,
                            host_path=host["path"], llvm_version=str(version), diagnostics=diag, lint=lint_text,
                            code=code.strip())
                reply = complete(rp, req.model, cuttable=CUTTABLE, **req.llm_kwargs)
                code = fit_definition(extract_code(reply.text), target_qname, in_class) if reply.text.strip() else ""
                lint = _lint(code, dst)
                verdict = _gate_check(gate, req.target, host, code) if code else \
                    {"passed": False, "skipped": "the model answered nothing", "diagnostics": []}
                attempts.append(_attempt_log(n, reply, code) | {"passed": verdict["passed"]})
            result["code"], result["lint"] = code, lint
    result["gate"] = verdict
    if attempts:
        from mining.llm import LEDGER

        result["attempts"] = attempts
        result["tokens"] = LEDGER.to_dict()
    return result


def _attempt_log(n: int, reply, code: str) -> dict:
    """One LLM attempt for the result: usage from the server, how the prompt was cut, and whether
    the answer held code (a reply with no code is rejected here, before the gate)."""
    entry = {"attempt": n, "tokens": reply.prompt_tokens + reply.completion_tokens} | reply.usage()
    if not code.strip():
        entry["rejected"] = "empty answer"
    elif not _FENCED.search(reply.text):
        entry["note"] = "no code fence: the whole reply was taken as code"
    return entry


_FENCED = re.compile(r"```")


def skills_for(store, target: str, source_func_id: str, cache: AdaptCache):
    """Skill-guided instantiation of ``source_func_id``'s lineage for ``target``
    (fork-and-adapt when no lineage was mined for it)."""
    from mining.backend.mine import function_site
    from prompts.backend.skills import instantiate, lineage_for

    row = store.query("SELECT target, identifiers FROM functions WHERE func_id = ?", [source_func_id])[0]
    lin = lineage_for(store, source_func_id)
    text = cache.text(source_func_id)  # without a lineage: exactly fork-and-adapt's input
    if lin is not None:
        try:
            text = function_site(store, source_func_id).text  # the lineage starts from the file's bytes
        except BackendInputError:
            lin = None
    return instantiate(store, target, source_func_id, cache.profile(row["target"]), cache.profile(target),
                       list(row["identifiers"] or []), text, lineage=lin, lookup=False)


def format_skills(store, res) -> str:
    """The skills of a SkillResult for a prompt: one line per skill (per family for expansions)."""
    if res.fallback:
        return f"(none: {res.fallback}; the skeleton is the whole source implementation)"
    names: dict[str, str] = {}
    try:
        from skills.kernel_store import KernelStore

        ks = KernelStore(store)
        for sid in {p["skill_id"] for p in res.plans}:
            sk = ks.skill(sid)
            if sk is not None:
                names[sid] = sk.intent
    except Exception:  # a read-only store without lineage tables
        pass
    lines, seen = [], set()
    fam = {e["family"]: e for e in res.expansions}
    for p in res.plans:
        if p["decision"] == "expand":
            if ("f", p["family"]) in seen:
                continue
            seen.add(("f", p["family"]))
            e = fam.get(p["family"], {})
            lines.append(f"- {names.get(p['skill_id'], p['fragment'])} -> {e.get('instances', 0)} instance(s) for "
                         f"this target (the source had {e.get('source_instances', 0)})")
        elif p["decision"] == "drop":
            lines.append(f"- left out: `{p['fragment'][:120]}` ({p['reason']})")
        else:
            lines.append(f"- `{p['fragment'][:160]}`")
    return "\n".join(lines) or "(none: the source implementation is already its skeleton)"


def _lint(code: str, dst: TargetProfile) -> list[dict]:
    from mining.backend.gate import lint_relocations

    return lint_relocations(code, dst.target, dst.relocations)


def render_text(result: dict) -> str:
    lines = [f"{result['target']} {result['role']} ({result['strategy']})"]
    if result.get("similar_targets"):
        lines.append("similar targets: " + ", ".join(f"{t['target']} {t['similarity']:.2f}" for t in result["similar_targets"]))
    lines.append("candidates:")
    for h in result["candidates"]:
        lines.append(f"  {h['target']:12s} {h['qualified_name']}  score {h['score']:.4f}  {json.dumps(h['ranks'])}")
    if result.get("code") is None:
        lines.append(result.get("prompt") or "")
        return "\n".join(lines)
    lines.append(result["code"].rstrip())
    g = result.get("gate")
    if g:
        if g.get("verdict") == "environment":
            lines.append(f"gate: NOT CHECKED in {g.get('host')}: {g.get('skipped')}")
            for d in g.get("host_diagnostics", []):
                lines.append(f"  host file: line {d['line']}:{d['column']}: {d['message']}")
        elif g.get("passed") is None:
            lines.append(f"gate: {g.get('skipped')}")
        else:
            lines.append(f"gate: {'PASS' if g['passed'] else 'FAIL'} in {g.get('host')} ({g.get('toolchain')})")
            for d in g.get("diagnostics", []):
                lines.append(f"  line {d['line']}:{d['column']}: {d['message']}")
            for d in g.get("file_diagnostics", []):
                lines.append(f"  file: line {d['line']}:{d['column']}: {d['message']}")
    rp = result.get("gate_repair")
    if rp:
        reps = ", ".join(f"{r['from']} -> {r['to']}" for r in rp["replacements"]) or "no replacement"
        lines.append(f"gate repair: {rp['rounds']} round(s), " + (f"passes ({reps})" if rp["passed"]
                                                                  else f"not repaired: {rp['stopped']} ({reps})"))
    fu = result.get("fusion") or {}
    if fu.get("added"):
        lines.append(f"fusion: {len(fu['added'])} statement(s) from the top {fu['donors']} donors")
    for w in result.get("lint", []):
        lines.append(f"lint: line {w['line']}: {w['message']}")
    return "\n".join(lines)


__all__ = ["AdaptCache", "GenerateRequest", "candidates_with_adaptations", "generate", "render_text", "resolve_role",
           "SearchError", "fork_flow"]
