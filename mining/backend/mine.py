"""Backend lineages: walk a target's implementation of a role backward under the compile gate.

    from mining.backend.mine import BackendMineConfig, mine_backends, select_functions
    from skills.kernel_store import KernelStore
    fids = select_functions(store, roles=["ELFObjectWriter::getRelocType"])
    outcomes = mine_backends(store, fids, lineages=KernelStore(store))

For one function of target T (an ingested row of the ``functions`` table): the operators of
``mining/backend/operators.py`` propose simplifications (drop a case label or arm, a
target-specific statement, an if branch; a switch becomes its default path), the generic walk
(``mining/walk.py``) accepts one per step, and every candidate is checked by the compile gate
(``mining/backend/gate.py``: clang of the tree's LLVM version) spliced into T's real file. The
final state is the function's *skeleton*; each accepted step, reversed, is lifted into a backend Skill
(``kind="backend"``) whose identity is the step's *shape*: role + operator + the added code
with T's identifiers abstracted by attribute kind (``case TGT::<fixup> : return ELF::<relocation> ;``),
so the same step found in several targets (or several times in one target) is one skill with
evidence from each. The lineage is stored with problem ``"<T>:<role>"``
(``skills lineage RISCV:ELFObjectWriter::getRelocType``).

Checking many candidates per clang run. A clang run on an LLVM target file costs seconds
(parsing the LLVM headers), while a function body costs milliseconds; so the checker batches:
every variant of the function is spliced in as a lambda ``[&]() -> R { <variant body> }``
inside the function's own definition (same scope: members, parameters and ``this`` resolve
exactly as in the real function; ``-Werror=return-type`` applies to each lambda), each body
bracketed by ``#line 1 "<gen:LABEL.vK>"`` so clang's diagnostics say which variant they belong
to. Which variants to put in one run is *speculated*: the walk's own path (in priority order,
the first candidate of each state that is not known to fail, plus the known-failing ones the
walk will re-try before it), so one run usually settles many steps, and the walk then reads
cached verdicts. The walk's semantics are unchanged: a verdict is the gate's verdict for that
exact text. A function whose wrapped form does not compile when the plain form does is checked
one variant per run (``wrapped: false`` in the lineage config).
"""
from __future__ import annotations

import difflib
import hashlib
import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

from corpora.backends.profile import load_profile
from corpora.backends.tree import BackendInputError, neutralize, normalize_code, prepare_cpp, statements_of
from corpora.code.parse import cpp_parser
from mining.backend.operators import CARRIERS, OPERATORS, BackendEdit, TargetNames, find_function, propose_edits
from mining.exemplar import exemplar
from mining.records import (TOOL_VERSION, Anchor, Evidence, Lineage, Precondition, Skill, Step, lineage_identity,
                            sha256, skill_identity)
from mining.walk import Candidate, Verdict, WalkEvent, backward_walk

MINING_VERSION = "backend-mining-1"
EXECUTOR = "clang-15"  # the executor of a tree without fetch.json (mining.backend.gate.DEFAULT_LLVM_MAJOR)
# attribute kinds abstracted into slots of a skill's pattern (the "for each <attribute>" part)
SLOT_KINDS = ("fixup", "relocation", "register", "register_class", "subtarget_feature", "instruction",
              "calling_convention", "processor")


class BackendLineages(Protocol):
    """Where backend lineages and their skills are kept: skills.kernel_store.KernelStore over the
    store the functions were ingested into (mining sits upstream of the store and never imports it)."""

    def skill(self, ident: str) -> Optional[Skill]: ...

    def save_lineage(self, lineage: Lineage, skills: list[Skill], problem_info: dict[str, Any],
                     gate_runs: list[dict[str, Any]] = (), kind: str = "kernel") -> list[Skill]: ...


@dataclass(frozen=True)
class BackendMineConfig:
    max_steps: int = 150
    max_rejections: int = 60
    time_limit_s: Optional[float] = 300.0
    max_variants: int = 40  # variants per clang run
    max_batch_chars: int = 1_200_000  # and at most this much variant text
    operators: tuple[str, ...] = OPERATORS
    use_cache: bool = True

    def fingerprint(self) -> str:
        d = asdict(self)
        for k in ("use_cache", "time_limit_s", "max_variants", "max_batch_chars"):
            d.pop(k)
        d["version"] = MINING_VERSION
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class BackendMineOutcome:
    problem: str
    func_id: str
    lineage: Optional[Lineage] = None
    skills: list[Skill] = field(default_factory=list)
    cached: bool = False
    skipped: str = ""  # why no walk happened (no sites, start failed, ...)
    clang_runs: int = 0
    wall_s: float = 0.0


# --------------------------------------------------------------------------- the function and its host
@dataclass
class FunctionSite:
    target: str
    path: str  # relative to lib/Target/<T>
    func_id: str
    qualified_name: str
    role: str
    start_byte: int
    end_byte: int
    start_line: int
    text: str  # the definition as written in the file
    executor: str = EXECUTOR  # the gate's toolchain: clang of the LLVM version the tree came from

    @property
    def problem(self) -> str:
        return f"{self.target}:{self.role}"


def function_site(store, func_id: str) -> FunctionSite:
    rows = store.query("SELECT f.func_id, f.target, f.path, f.qualified_name, f.role, f.start_byte, f.end_byte, "
                       "f.start_line, f.name, t.root FROM functions f JOIN targets t USING (target) WHERE f.func_id = ?",
                       [func_id])
    if not rows:
        raise BackendInputError(f"no function {func_id!r} in the store")
    r = rows[0]
    host = Path(r["root"]) / r["path"]
    if not host.is_file():
        raise BackendInputError(f"{host}: the host file is gone (re-index the corpus)")
    data = host.read_bytes()
    text = data[r["start_byte"]:r["end_byte"]].decode("utf-8", errors="replace")
    if r["name"] not in text.split("{", 1)[0]:
        raise BackendInputError(f"{host}: {r['qualified_name']} is not at its indexed bytes (re-index the corpus)")
    from mining.backend.gate import corpus_major

    # root is lib/Target/<T>: the corpus (fetch.json) is three folders up
    return FunctionSite(r["target"], r["path"], r["func_id"], r["qualified_name"], r["role"], r["start_byte"],
                        r["end_byte"], r["start_line"], text,
                        executor=f"clang-{corpus_major(Path(r['root']).parent.parent.parent)}")


# --------------------------------------------------------------------------- wrapping variants as lambdas
@dataclass
class Wrapper:
    head: str  # the definition up to and including the body's '{'
    return_type: Optional[str]  # None: cannot wrap (auto, conversion operator, try body)


def _return_type(func, data: bytes) -> Optional[str]:
    decl = func.child_by_field_name("declarator")
    if decl is None:
        return None
    suffix = []
    node = decl
    while node is not None and node.type in ("pointer_declarator", "reference_declarator", "attributed_declarator"):
        if node.type == "pointer_declarator":
            quals = [c.text.decode() for c in node.children if c.type == "type_qualifier"]
            suffix.append("*" + (" " + " ".join(quals) if quals else ""))
        elif node.type == "reference_declarator":
            suffix.append(next((c.text.decode() for c in node.children if c.type in ("&", "&&")), "&"))
        node = node.child_by_field_name("declarator") or (node.named_children[-1] if node.named_children else None)
    if node is None or node.type != "function_declarator":
        return None
    trailing = next((c for c in node.children if c.type == "trailing_return_type"), None)
    if trailing is not None:
        t = trailing.text.decode("utf-8", errors="replace").strip()
        return t[2:].strip() if t.startswith("->") else t
    name = node.child_by_field_name("declarator")
    if name is not None and name.type in ("operator_cast", "destructor_name"):
        return "void" if name.type == "destructor_name" else None
    tnode = func.child_by_field_name("type")
    if tnode is None:
        return "void"  # constructor / destructor
    tt = tnode.text.decode("utf-8", errors="replace")
    if tt in ("auto", "decltype(auto)"):
        return None
    quals = [c.text.decode() for c in func.children if c.type == "type_qualifier" and c.start_byte < tnode.start_byte
             and c.text in (b"const", b"volatile")]
    return " ".join(quals + [tt]) + ("".join(" " + s for s in suffix))


def make_wrapper(text: str) -> Wrapper:
    data = text.encode()
    tree = cpp_parser().parse(prepare_cpp(data))
    func = find_function(tree)
    if func is None:
        return Wrapper("", None)
    body = func.child_by_field_name("body")
    if body is None or body.type != "compound_statement" or body.end_byte != len(data):
        return Wrapper("", None)
    return Wrapper(data[:body.start_byte + 1].decode("utf-8", errors="replace"), _return_type(func, data))


def _body_of(text: str, head: str) -> Optional[str]:
    """The inside of a variant's body (operators only edit inside the body)."""
    if not text.startswith(head) or not text.rstrip().endswith("}"):
        return None
    return text[len(head):text.rstrip().rfind("}")]


def wrap_variants(wrapper: Wrapper, label: str, sources: Sequence[str]) -> Optional[str]:
    parts = [wrapper.head, "\n"]
    for i, src in enumerate(sources):
        body = _body_of(src, wrapper.head)
        if body is None:
            return None
        parts.append(f"auto __ks_v{i} = [&]() -> {wrapper.return_type} {{\n#line 1 \"<gen:{label}.v{i}>\"\n{body}\n}};\n"
                     f"#line 1 \"<gen:{label}>\"\n")
    parts.append("__builtin_unreachable();\n}")
    return "".join(parts)


# --------------------------------------------------------------------------- the checker
class BackendGateChecker:
    """The compile gate as the walk's Checker, for one function of one target file.

    ``check_many`` returns the gate's verdict for each text; texts it has not seen are checked
    together with the walk's speculated continuation (``propose`` is the walk's own
    proposer), as lambda variants in one clang run.
    """
    can_time = False

    def __init__(self, gate, site: FunctionSite, propose: Optional[Callable[[str, int], list[Candidate]]] = None,
                 max_variants: int = 40, max_batch_chars: int = 400_000, use_cache: bool = True):
        self.gate, self.site, self.propose = gate, site, propose
        self.max_variants, self.max_batch_chars, self.use_cache = max(1, max_variants), max_batch_chars, use_cache
        self.wrapper = make_wrapper(site.text)
        self.wrapped = self.wrapper.return_type is not None
        self.verdicts: dict[str, Verdict] = {}
        self.failed_patterns: set[str] = set()
        self.failed_keys: set[str] = set()
        self.parent: dict[str, str] = {}  # candidate text hash -> the state it was proposed at
        self.wrapped_ok = False  # a wrapped run has compiled cleanly outside the variants
        self.clang_runs = 0
        self.gate_seconds = 0.0
        self.label = "f" + hashlib.sha1(site.func_id.encode()).hexdigest()[:8]
        # time.monotonic() after which no clang run starts: the walk checks its time limit only
        # between steps, and one step can take dozens of runs (isolating an error by halving a batch)
        self.deadline: Optional[float] = None

    # -- walk interface
    def check_many(self, sources: Sequence[str]) -> list[Verdict]:
        for s in sources:
            if sha256(s) not in self.verdicts:
                self._run(self._speculate(s))
        return [self.verdicts[sha256(s)] for s in sources]

    def time(self, source: str) -> Optional[float]:
        return None

    def note_failure(self, cand: Candidate) -> None:
        if cand.retry_key:
            self.failed_keys.add(cand.retry_key)
            self.failed_patterns.add(cand.retry_key.rsplit("|", 1)[0])

    # -- speculation
    def _next(self, state: str, step: int, batch: list, queued: set, size: list,
              after: Optional[str] = None) -> Optional[str]:
        """Follow the walk from ``state``: its candidates in order (from ``after`` on, when
        given), queueing unchecked ones, up to the first that is not known or predicted to
        fail; returns that candidate's text (the walk's next state if it passes)."""
        started = after is None
        for c in self.propose(state, step):
            if c.source == state or (c.retry_key and c.retry_key in self.failed_keys):
                continue
            h = sha256(c.source)
            self.parent.setdefault(h, state)
            if not started:
                if c.source != after:
                    continue
                started = True
            v = self.verdicts.get(h)
            if v is not None:
                if v.passed:
                    return c.source
                continue
            if h not in queued:
                if len(batch) >= self.max_variants or size[0] >= self.max_batch_chars:
                    return None
                batch.append((c.source, c))
                queued.add(h)
                size[0] += len(c.source)
            if c.retry_key.rsplit("|", 1)[0] not in self.failed_patterns:
                return c.source
        return None

    def _speculate(self, src: str) -> list[tuple[str, Optional[Candidate]]]:
        batch: list[tuple[str, Optional[Candidate]]] = [(src, None)]
        if self.propose is None or not self.wrapped:
            return batch
        queued = {sha256(src)}
        size = [len(src)]
        parent = self.parent.get(sha256(src))
        state: Optional[str] = src
        if parent is not None:  # the walk is trying src at `parent`: the rest of parent's pool may follow
            state = self._next(parent, 0, batch, queued, size, after=src)
        step = 0
        while state is not None and len(batch) < self.max_variants and size[0] < self.max_batch_chars:
            step += 1
            state = self._next(state, step, batch, queued, size)
        return batch

    # -- clang runs
    def _out_of_time(self, sources: Sequence[str]) -> bool:
        if self.deadline is None or time.monotonic() <= self.deadline:
            return False
        for s in sources:
            self.verdicts.setdefault(sha256(s), Verdict(False, "error", "not checked: the walk's time limit was reached"))
        return True

    def _run(self, batch: list[tuple[str, Optional[Candidate]]]) -> None:
        from mining.backend.gate import GateInputError

        sources = [s for s, _ in batch]
        if self._out_of_time(sources):
            return
        if self.wrapped:
            text = wrap_variants(self.wrapper, self.label, sources)
            if text is None:
                self.wrapped = False
        if not self.wrapped:
            for s in sources:
                self._run_plain(s)
            return
        t0 = time.monotonic()
        try:
            res = self.gate.check(self.site.target, self.site.path, self.splices(text, len(sources)),
                                  use_cache=self.use_cache)
        except GateInputError as exc:
            for s in sources:
                self.verdicts[sha256(s)] = Verdict(False, "error", str(exc)[:500])
            return
        finally:
            self.gate_seconds += time.monotonic() - t0
        self.clang_runs += 0 if res.cached else 1
        self.absorb(batch, res)

    def splices(self, text: str, n: int) -> list:
        from mining.backend.gate import Splice

        return [Splice(self.label, text, self.site.start_byte, self.site.end_byte)] + \
            [Splice(f"{self.label}.v{i}", "", 0, 0) for i in range(n)]

    def first_error(self, res, n: int) -> Optional[int]:
        """Index of the first variant with an error in a run (None: none failed)."""
        return next((i for i in range(n)
                     if not res.functions.get(f"{self.label}.v{i}", {"passed": False})["passed"]), None)

    def absorb(self, batch: list[tuple[str, Optional[Candidate]]], res, shared: bool = False,
               trust_passes_before: Optional[int] = None) -> bool:
        """Take a wrapped run's verdicts. False (nothing taken) when an error outside every
        variant makes them unreliable and the run was shared with other functions.

        Once clang has reported an error in a translation unit it skips its flow-based checks
        (``-Wreturn-type``) for the function bodies that follow, so a variant that passes
        *after* a failing one is only trusted once re-checked without it (variants are laid
        out in batch order; ``trust_passes_before`` says where a shared run's first error was)."""
        sources = [s for s, _ in batch]
        main = res.functions.get(self.label, {"passed": True, "diagnostics": []})
        if res.file_diagnostics or not main["passed"]:
            if shared:
                return False
            # an error outside every variant: the wrapper itself, or the host file
            if not self.wrapped_ok:
                if len(batch) > 1:
                    self._run(batch[:1])  # the requested text alone; speculation resumes later
                    return True
                self.wrapped = False  # the wrapper does not fit this function: one plain run per text
                self._run_plain(sources[0])
                return True
            if len(batch) > 1:
                half = len(batch) // 2
                self._run(batch[:half])
                self._run(batch[half:])
                return True
            diags = [d["message"] for d in (res.file_diagnostics + main["diagnostics"])[:3]]
            self.verdicts[sha256(sources[0])] = Verdict(False, "fail", "; ".join(diags)[:1000] or "clang failed",
                                                        summary={"where": "file"}, wall_s=res.seconds)
            return True
        self.wrapped_ok = True
        per = res.seconds / max(1, len(sources))
        first = self.first_error(res, len(batch))
        limit = min(x for x in (first, trust_passes_before, len(batch)) if x is not None)
        recheck = []
        for i, (s, cand) in enumerate(batch):
            f = res.functions.get(f"{self.label}.v{i}", {"passed": False, "diagnostics": []})
            ok = bool(f["passed"])
            if ok and i > limit or (ok and i == limit and trust_passes_before is not None):
                recheck.append((s, cand))  # its return paths were not checked
                continue
            diags = f["diagnostics"]
            reason = "" if ok else "; ".join(f"line {d['line']}: {d['message']}" for d in diags[:3])[:1000]
            self.verdicts[sha256(s)] = Verdict(ok, "pass" if ok else "fail", reason,
                                               summary={"errors": len(diags), "batch": len(sources),
                                                        "cached": res.cached}, wall_s=round(per, 3))
            if not ok and cand is not None:
                self.note_failure(cand)
        if recheck and not shared:
            self._run(recheck)
        return True

    def _run_plain(self, source: str) -> None:
        from mining.backend.gate import GateInputError, Splice

        if self._out_of_time([source]):
            return
        t0 = time.monotonic()
        try:
            res = self.gate.check(self.site.target, self.site.path,
                                  [Splice(self.label, source, self.site.start_byte, self.site.end_byte)],
                                  use_cache=self.use_cache)
        except GateInputError as exc:
            self.verdicts[sha256(source)] = Verdict(False, "error", str(exc)[:500])
            return
        finally:
            self.gate_seconds += time.monotonic() - t0
        self.clang_runs += 0 if res.cached else 1
        f = res.functions.get(self.label, {"passed": False, "diagnostics": []})
        ok = bool(res.passed and f["passed"])
        diags = f["diagnostics"] + res.file_diagnostics
        self.verdicts[sha256(source)] = Verdict(
            ok, "pass" if ok else "fail",
            "" if ok else "; ".join(f"line {d['line']}: {d['message']}" for d in diags[:3])[:1000] or "clang failed",
            summary={"errors": len(diags), "batch": 1, "cached": res.cached}, wall_s=res.seconds)


def prefetch(checkers: Sequence["BackendGateChecker"]) -> int:
    """One clang run for the first speculated batch of every checker of one host file (their
    functions are spliced side by side). Returns the clang runs made (0 or 1); a checker whose
    verdicts cannot be attributed in the shared run simply checks on its own later."""
    from mining.backend.gate import GateInputError

    live = [c for c in checkers if c.wrapped and c.propose is not None]
    if len(live) < 2:
        return 0
    gate, target, path = live[0].gate, live[0].site.target, live[0].site.path
    plans, splices = [], []
    for c in sorted(live, key=lambda c: c.site.start_byte):
        batch = c._speculate(c.site.text)
        text = wrap_variants(c.wrapper, c.label, [s for s, _ in batch])
        if text is None:
            continue
        plans.append((c, batch))
        splices += c.splices(text, len(batch))
    t0 = time.monotonic()
    try:
        res = gate.check(target, path, splices, use_cache=live[0].use_cache)
    except GateInputError:
        return 0
    errored = False  # once any variant in the file failed, later passes are re-checked on their own
    for c, batch in plans:
        c.gate_seconds += (time.monotonic() - t0) / len(plans)
        first = c.first_error(res, len(batch))
        c.absorb(batch, res, shared=True, trust_passes_before=0 if errored else None)
        errored = errored or first is not None
    return 0 if res.cached else 1


# --------------------------------------------------------------------------- shapes (skill identity)
_QUAL = re.compile(r"[A-Za-z_]\w*(?: :: [A-Za-z_]\w*)*")


def abstract_code(code: str, names: TargetNames) -> tuple[str, list[tuple[str, str]]]:
    """(pattern, slots): ``code`` normalized, each target attribute replaced by ``<kind>`` (its
    target-specific qualifiers by ``TGT``), other target names neutralized. Slots are the
    (kind, name) pairs in order."""
    text = normalize_code(code)
    slots: list[tuple[str, str]] = []

    def repl(m: re.Match) -> str:
        q = m.group(0)
        ident = q.replace(" :: ", "::")
        if not names.is_target(ident):
            return q
        kind = names.kind(ident)
        parts = ident.split("::")
        if kind in SLOT_KINDS:
            slots.append((kind, parts[-1]))
            quals = [neutralize(p, names.aliases) for p in parts[:-1]]
            return " :: ".join(quals + [f"<{kind}>"])
        return neutralize(q, names.aliases)

    pieces = re.split(r'("(?:\\.|[^"\\])*")', text)
    out = "".join(neutralize(p, names.aliases) if i % 2 else _QUAL.sub(repl, p) for i, p in enumerate(pieces))
    return out, slots


def shape_of(role: str, edit: BackendEdit, names: TargetNames) -> tuple[str, str, list[tuple[str, str]]]:
    """(skill key variant, pattern, slots) of one step: what its inverse adds back."""
    pattern, slots = abstract_code(edit.fragment, names)
    variant = f"{role}#{edit.variant or 'one'}#" + hashlib.sha256(pattern.encode()).hexdigest()[:10]
    return variant, pattern, slots


def _intent(role: str, edit: BackendEdit, pattern: str, slots: list[tuple[str, str]]) -> str:
    where = " > ".join(edit.anchor.get("enclosing", [])) or "the function body"
    short = pattern if len(pattern) <= 160 else pattern[:157] + "..."
    kinds = list(dict.fromkeys(k for k, _ in slots))
    verb = {"drop_case_label": "add the label", "drop_case_arm": "add the arm", "drop_target_statement": "add",
            "drop_if_branch": "add the guarded branch" if edit.variant != "else" else "add the else branch",
            "switch_to_default": "dispatch with"}[edit.operator]
    if kinds:
        each = " and ".join(f"<{k}>" for k in kinds)
        lead = f"For each {kinds[0].replace('_', ' ')} of the target" + (
            f" (with its matching {', '.join(k.replace('_', ' ') for k in kinds[1:])})" if len(kinds) > 1 else "")
        return f"{lead}, {verb} `{short}` in {where} of {role} ({each} instantiated with the target's own names)."
    return f"{verb[0].upper() + verb[1:]} `{short}` in {where} of {role}."


def _preconditions(edit: BackendEdit, slots: list[tuple[str, str]], names: TargetNames) -> list[Precondition]:
    """What a target needs for the skill: attributes of each slot's kind (the names this
    target used are in ``probes``); for a guarded branch, its guard."""
    pre = []
    by_kind: dict[str, list[str]] = {}
    for k, n in slots:
        by_kind.setdefault(k, []).append(n)
    for k, ns in by_kind.items():
        count = sum(1 for v in names.kind_of.values() if v == k)
        pre.append(Precondition(kind="guarded", axis=k, value=0, source="code_guard", status="guarded_in_code",
                                text=f"the target defines {k.replace('_', ' ')}s",
                                probes=[{"target": names.target, "defined": count, "used": list(dict.fromkeys(ns))[:8]}]))
    if edit.operator == "drop_if_branch":
        guard = " ".join(edit.anchor.get("header", "").split())[:200]
        tids = list(dict.fromkeys(i for i in edit.target_identifiers))
        pre.append(Precondition(kind="guarded", axis="condition", value=0, source="code_guard",
                                status="guarded_in_code",
                                text=f"guarded by `{guard}`" + (f" (names {', '.join(tids[:4])})" if tids else ""),
                                probes=[{"target": names.target, "guard": guard}]))
    if not pre:
        pre.append(Precondition(kind="none_found", text="references no target attribute: applies to every target",
                                status="not_needed"))
    return pre


# --------------------------------------------------------------------------- lifting
def lift_backend_step(site: FunctionSite, names: TargetNames, edit: BackendEdit, index: int, lineage_id: str,
                      kernel_hash: str, optimized: str, simpler: str) -> Skill:
    """One accepted step, reversed (skeleton side -> expert side), as a backend Skill."""
    variant, pattern, slots = shape_of(site.role, edit, names)
    carrier = CARRIERS[edit.operator]
    key, skill_id = skill_identity(carrier, edit.operator, variant)
    before, after, diff = exemplar(optimized, simpler)
    line = site.start_line + optimized.encode()[:edit.site_start].count(b"\n")
    short = pattern if len(pattern) <= 70 else pattern[:67] + "..."
    pre = _preconditions(edit, slots, names)
    where = f"{site.target}/{site.path}"
    verification = [f"{site.problem} step {index}: {site.executor} -fsyntax-only, spliced into {where}: "
                    "compiles without it"]
    instance = {"step": index, "target": site.target, "func_id": site.func_id, "fragment": edit.fragment[:4000],
                "slots": [list(s) for s in slots], "enclosing": edit.anchor.get("enclosing", []),
                "before": edit.anchor.get("before", ""), "after": edit.anchor.get("after", ""),
                "variant": edit.variant, "target_identifiers": edit.target_identifiers[:40]}
    return Skill(
        skill_id=skill_id, key=key, name=f"{site.role}: add `{short}`", intent=_intent(site.role, edit, pattern, slots),
        carrier=carrier, operator=edit.operator, variant=variant, kind="backend",
        anchor=Anchor(function=site.qualified_name, ast_path=edit.anchor.get("path", []),
                      enclosing_loop=" > ".join(edit.anchor.get("enclosing", []))[:300], line=line,
                      excerpt=edit.fragment[:400]),
        before=before, after=after, diff=diff, preconditions=pre,
        evidence=[Evidence(problem=site.problem, op_type=site.role, lineage_id=lineage_id, step=index,
                           kernel_hash=kernel_hash, executor=site.executor, workloads=[where], before=before, after=after,
                           diff=diff)],
        scope={"op_types": [site.role], "problems": [site.problem], "dtypes": [], "archs": [site.target]},
        provides=[carrier], verification=verification,
        provenance={"tool_version": TOOL_VERSION, "mining_version": MINING_VERSION, "role": site.role,
                    "pattern": pattern, "slot_kinds": list(dict.fromkeys(k for k, _ in slots)),
                    "per_lineage": {lineage_id: {
                        "preconditions": [p.model_dump(mode="json") for p in pre], "risks": [],
                        "verification": verification, "dtypes": [], "archs": [site.target],
                        "instances": [instance]}}},
    )


def merge_within_lineage(skills: list[Skill]) -> list[Skill]:
    """Several steps of one lineage with the same shape are one skill with several pieces of
    evidence (the store merges one incoming record per skill id)."""
    out: dict[str, Skill] = {}
    for s in skills:
        if s.skill_id not in out:
            out[s.skill_id] = s.model_copy(deep=True)
            continue
        m = out[s.skill_id]
        m.evidence += s.evidence
        for lid, info in s.provenance["per_lineage"].items():
            cur = m.provenance["per_lineage"].setdefault(lid, info)
            if cur is not info:
                cur["instances"] = cur.get("instances", []) + info.get("instances", [])
                cur["verification"] = cur.get("verification", []) + info.get("verification", [])
                seen = {json.dumps(p, sort_keys=True) for p in cur.get("preconditions", [])}
                for p in info.get("preconditions", []):
                    if json.dumps(p, sort_keys=True) not in seen:
                        cur.setdefault("preconditions", []).append(p)
        m.verification += s.verification
    return list(out.values())


# --------------------------------------------------------------------------- statistics
def statement_stats(text: str, names: TargetNames) -> dict[str, Any]:
    """Statements of a function and how many name a target-specific identifier."""
    data = prepare_cpp(text.encode())
    tree = cpp_parser().parse(data)
    func = find_function(tree)
    if func is None:
        return {"statements": 0, "target_specific": 0}
    body = func.child_by_field_name("body")
    stmts = statements_of(body)
    specific = 0
    for s in stmts:
        idents = re.findall(r"[A-Za-z_]\w*(?: :: [A-Za-z_]\w*)*", s)
        if any(names.is_target(i.replace(" :: ", "::")) for i in idents):
            specific += 1
    return {"statements": len(stmts), "target_specific": specific}


# --------------------------------------------------------------------------- one function
def _names_for(store, target: str, cache: dict) -> TargetNames:
    if target not in cache:
        try:
            cache[target] = TargetNames.from_profile(load_profile(store, target))
        except KeyError:
            raise BackendInputError(f"target {target!r} has no attributes in the store") from None
    return cache[target]


def _unified(a: str, b: str, n: int = 2) -> str:
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), "before.cpp", "after.cpp", n=n))


@dataclass
class _Job:
    """One function ready to walk: its site, proposer, checker and identity."""
    store: Any
    lineages: BackendLineages
    site: FunctionSite
    names: TargetNames
    config: BackendMineConfig
    lineage_id: str
    kernel_hash: str
    propose: Callable[[str, int], list[Candidate]]
    checker: "BackendGateChecker"
    outcome: BackendMineOutcome
    t0: float


def _prepare(store, lineages: BackendLineages, gate, func_id: str, config: BackendMineConfig, names_cache: dict):
    """A _Job, or a finished outcome (stored lineage reused, nothing to simplify)."""
    t0 = time.monotonic()
    site = function_site(store, func_id)
    names = _names_for(store, site.target, names_cache)
    kernel_hash = sha256(site.text)
    lineage_id = lineage_identity(site.problem, kernel_hash, site.executor, "priority")
    outcome = BackendMineOutcome(problem=site.problem, func_id=func_id)
    if config.use_cache:
        existing = store.query("SELECT record FROM lineages WHERE lineage_id = ?", [lineage_id])
        if existing:
            lin = Lineage.model_validate_json(existing[0]["record"])
            if lin.config.get("fingerprint") == config.fingerprint():
                outcome.lineage, outcome.cached = lin, True
                ids = [r["skill_id"] for r in store.query(
                    "SELECT DISTINCT skill_id FROM steps WHERE lineage_id = ? AND skill_id <> '' ORDER BY skill_id",
                    [lineage_id])]
                outcome.skills = [sk for sk in (lineages.skill(i) for i in ids) if sk is not None]
                return outcome
    def propose(state: str, step: int) -> list[Candidate]:
        out = []
        data = state.encode()
        for e in propose_edits(state, names, config.operators):
            src = e.apply(state)
            out.append(Candidate(operator=e.operator, carrier=e.carrier, source=src, variant=e.variant,
                                 site_line=site.start_line + data[:e.site_start].count(b"\n"),
                                 site_excerpt=e.fragment[:300], site_start=e.site_start, site_end=e.site_end,
                                 description=e.description, retry_key=e.retry_key))
        return out

    if not propose(site.text, 0):
        outcome.skipped = "no operator site"
        outcome.wall_s = time.monotonic() - t0
        return outcome
    checker = BackendGateChecker(gate, site, propose, config.max_variants, config.max_batch_chars, config.use_cache)
    return _Job(store, lineages, site, names, config, lineage_id, kernel_hash, propose, checker, outcome, t0)


def _walk_and_save(job: _Job, on_event: Callable[[WalkEvent], None] = lambda e: None,
                   save: bool = True) -> BackendMineOutcome:
    site, names, config, checker, outcome = job.site, job.names, job.config, job.checker, job.outcome
    lineage_id, kernel_hash = job.lineage_id, job.kernel_hash

    def event(e: WalkEvent) -> None:
        if e.kind == "evaluated" and e.verdict is not None and not e.verdict.passed and e.candidate is not None:
            checker.note_failure(e.candidate)
        on_event(e)

    if config.time_limit_s is not None:
        checker.deadline = time.monotonic() + config.time_limit_s
    walk = backward_walk(site.text, job.propose, checker, strategy="priority", jobs=1, max_steps=config.max_steps,
                         max_rejections=config.max_rejections, time_limit_s=config.time_limit_s, on_event=event)
    outcome.clang_runs = checker.clang_runs
    if walk.termination == "start_failed" and walk.start_verdict is not None \
            and walk.start_verdict.reason.startswith("not checked: the walk's time limit"):
        outcome.skipped = "time_limit before the first step (nothing stored)"
        outcome.wall_s = time.monotonic() - job.t0
        return outcome
    if walk.termination == "start_failed":
        v = walk.start_verdict
        outcome.skipped = f"does not compile in its own file under the gate: {v.reason if v else ''}"[:500]
        outcome.wall_s = time.monotonic() - job.t0
        return outcome
    if not walk.accepted and walk.termination in ("time_limit", "rejection_limit"):
        outcome.skipped = f"{walk.termination} before the first step (nothing stored)"
        outcome.wall_s = time.monotonic() - job.t0
        return outcome

    steps: list[Step] = []
    lifted: list[Skill] = []
    for k, (cand, verdict) in enumerate(walk.accepted, start=1):
        before, after = walk.states[k - 1], walk.states[k]
        edit = next(e for e in propose_edits(before, names, config.operators)
                    if e.operator == cand.operator and e.site_start == cand.site_start and e.apply(before) == after)
        skill = lift_backend_step(site, names, edit, k, lineage_id, kernel_hash, before, after)
        lifted.append(skill)
        steps.append(_step(lineage_id, k, cand, verdict, before, after, True, skill.skill_id))
    rejections = [_step(lineage_id, k, cand, v, walk.states[min(k - 1, len(walk.states) - 1)], cand.source, False)
                  for k, cand, v in walk.rejected]
    skills = merge_within_lineage(lifted)
    expert_stats = statement_stats(site.text, names)
    skeleton_stats = statement_stats(walk.states[-1], names)
    lineage = Lineage(
        lineage_id=lineage_id, problem=site.problem, problem_dir=f"{site.target}/{site.path}", op_type=site.role,
        kernel=site.path, kernel_hash=kernel_hash, executor=site.executor, strategy="priority",
        termination=walk.termination, steps=steps, rejections=rejections,
        sources={sha256(s): s for s in walk.states}, final_hash=sha256(walk.states[-1]),
        wall_s=round(time.monotonic() - job.t0, 3),
        config={"fingerprint": config.fingerprint(), "kind": "backend", "target": site.target, "role": site.role,
                "qualified_name": site.qualified_name, "func_id": site.func_id, "path": site.path,
                "start_line": site.start_line, "operators": list(config.operators), "max_steps": config.max_steps,
                "max_rejections": config.max_rejections, "wrapped": checker.wrapped, "clang_runs": checker.clang_runs,
                "gate_seconds": round(checker.gate_seconds, 2),
                "statements": expert_stats["statements"], "target_specific_statements": expert_stats["target_specific"],
                "skeleton_statements": skeleton_stats["statements"],
                "skeleton_target_specific": skeleton_stats["target_specific"]})
    outcome.lineage, outcome.skills = lineage, skills
    if save:
        gate_runs = [{"source_hash": h, "verdict": v.verdict, "reason": v.reason, "summary": v.summary}
                     for h, v in checker.verdicts.items()]
        outcome.skills = job.lineages.save_lineage(lineage, skills, {"definition": {
            "kind": "backend", "target": site.target, "role": site.role, "qualified_name": site.qualified_name,
            "path": site.path, "func_id": site.func_id}}, gate_runs, kind="backend")
    outcome.wall_s = time.monotonic() - job.t0
    return outcome


def mine_function(store, gate, func_id: str, config: BackendMineConfig = BackendMineConfig(),
                  names_cache: Optional[dict] = None, on_event: Callable[[WalkEvent], None] = lambda e: None,
                  save: bool = True, *, lineages: BackendLineages) -> BackendMineOutcome:
    """Walk one ingested function backward under the compile gate; lift the result and (``save``)
    store it in ``lineages``."""
    job = _prepare(store, lineages, gate, func_id, config, {} if names_cache is None else names_cache)
    if isinstance(job, BackendMineOutcome):
        return job
    return _walk_and_save(job, on_event, save)


def _step(lineage_id: str, index: int, cand: Candidate, verdict: Verdict, before: str, after: str, accepted: bool,
          skill_id: str = "") -> Step:
    return Step(lineage_id=lineage_id, index=index, accepted=accepted, operator=cand.operator, carrier=cand.carrier,
                proposer="deterministic", site_line=cand.site_line, site_excerpt=cand.site_excerpt,
                site_start=cand.site_start, site_end=cand.site_end, before_hash=sha256(before),
                after_hash=sha256(after), diff=_unified(before, after)[:20000],
                reason="" if accepted else (verdict.reason or verdict.verdict)[:1000], verdict=verdict.verdict,
                gate=verdict.summary, skill_id=skill_id, wall_s=float(verdict.wall_s or 0.0))


# --------------------------------------------------------------------------- many functions
def select_functions(store, targets: Optional[Sequence[str]] = None, roles: Optional[Sequence[str]] = None,
                     exclude_targets: Sequence[str] = (), func_ids: Optional[Sequence[str]] = None,
                     min_targets: int = 2) -> list[str]:
    """Functions to mine: by id, or by target/role; by default every function whose role at
    least ``min_targets`` targets implement (the roles another target can learn from)."""
    if func_ids:
        return list(dict.fromkeys(func_ids))
    sql = ("WITH shared AS (SELECT role FROM functions GROUP BY role HAVING count(DISTINCT target) >= ?) "
           "SELECT f.func_id FROM functions f JOIN shared USING (role) WHERE 1=1")
    params: list = [min_targets]
    if targets:
        sql += f" AND f.target IN ({', '.join('?' for _ in targets)})"
        params += list(targets)
    if exclude_targets:
        sql += f" AND f.target NOT IN ({', '.join('?' for _ in exclude_targets)})"
        params += list(exclude_targets)
    if roles:
        sql += f" AND f.role IN ({', '.join('?' for _ in roles)})"
        params += list(roles)
    sql += " ORDER BY f.target, f.path, f.start_byte"
    return [r["func_id"] for r in store.query(sql, params)]


def make_backend_gate(store, target: str):
    """The compile gate for the corpus T was indexed from (raises GateUnavailable without that
    LLVM version's clang, llvm-tblgen and headers)."""
    from mining.backend.gate import CompileGate

    root = store.scalar("SELECT root FROM targets WHERE target = ?", [target])
    if not root:
        raise BackendInputError(f"unknown target {target!r} (index its tree with `skills backend index`)")
    gate = CompileGate(Path(root).parent, store.cache_dir)
    gate.require()
    gate.tblgen_dir(target)  # TableGen once, before any walk's time budget starts
    return gate


def mine_backends(store, func_ids: Sequence[str], config: BackendMineConfig = BackendMineConfig(),
                  log: Callable[[str], None] = lambda m: None, gates: Optional[dict] = None,
                  deadline: Optional[float] = None, *, lineages: BackendLineages) -> list[BackendMineOutcome]:
    """Mine each function; one gate per corpus; the functions of one host file share their
    first clang run (``prefetch``). An error in one function does not stop the rest. After
    ``deadline`` (``time.monotonic()``), functions without a stored lineage are skipped."""
    from mining.backend.gate import GateInputError

    gates = {} if gates is None else gates
    names_cache: dict = {}
    sites: dict[str, tuple[str, str]] = {}
    for fid in func_ids:
        r = store.query("SELECT target, path FROM functions WHERE func_id = ?", [fid])
        sites[fid] = (r[0]["target"], r[0]["path"]) if r else (fid.split(":", 1)[0], "")
    groups: dict[tuple[str, str], list[str]] = {}
    for fid in func_ids:
        groups.setdefault(sites[fid], []).append(fid)
    out: list[BackendMineOutcome] = []
    n = 0
    for (target, path), fids in groups.items():
        jobs: list = []
        late = deadline is not None and time.monotonic() > deadline
        for fid in fids:
            try:
                if late:
                    job = _prepare(store, lineages, None, fid, config, names_cache)
                    if isinstance(job, _Job):
                        job = BackendMineOutcome(problem=job.site.problem, func_id=fid,
                                                 skipped="mining budget spent (not walked)")
                    jobs.append(job)
                    continue
                if target not in gates:
                    gates[target] = make_backend_gate(store, target)
                jobs.append(_prepare(store, lineages, gates[target], fid, config, names_cache))
            except (BackendInputError, GateInputError) as exc:
                jobs.append(BackendMineOutcome(problem=fid.rsplit(":", 1)[0], func_id=fid, skipped=str(exc)[:300]))
        live = [j for j in jobs if isinstance(j, _Job)]
        shared = prefetch([j.checker for j in live]) if len(live) > 1 else 0
        for j in jobs:
            n += 1
            if isinstance(j, _Job):
                try:
                    o = _walk_and_save(j)
                except (BackendInputError, GateInputError) as exc:
                    o = j.outcome
                    o.skipped = str(exc)[:300]
            else:
                o = j
            out.append(o)
            lin = o.lineage
            log(f"[{n}/{len(func_ids)}] {o.problem}: "
                + (o.skipped if o.skipped else
                   f"{len(lin.steps)} steps, {len(lin.rejections)} rejections, {len(o.skills)} skills, "
                   f"{lin.termination}{' (cached)' if o.cached else f', {o.clang_runs} clang runs, {o.wall_s:.1f}s'}"))
        if shared:
            log(f"  {target}/{path}: {len(live)} functions shared their first clang run")
    return out
