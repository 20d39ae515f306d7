"""Gate-guided repair without an LLM: rename the identifiers a target lacks to its closest names.

A forked function often fails the compile gate only because it names things the new target does
not have: another target's register (``XCore::X5`` after renaming RISCV's), a helper the donor
declared in its own headers, a namespace (``MipsISD``). When *every* error clang reports inside
the function is of that kind (``use of undeclared identifier``, ``no member named .. in
namespace``/``in 'Class'``, ``unknown type name``, ``no type named``), each such name is replaced
by clang's own suggestion (``did you mean 'X'?``) when it makes one, else by the closest name
that exists in the target: in its own source files, its TableGen attributes (registers,
instructions, register classes with their generated ``RegClass`` names, fixups, relocations) and
its header declarations, looked up in the scope the error names. Then the function is gated
again, at most ``rounds`` times. Any other error stops the repair; a repair that does not end in
a passing function is discarded (the function stays as it was), so repair changes a function
only by making it compile.

    result = repair(code, check, NamePool.for_target(profile, target_dir), rounds=3)
    result.code, result.rounds, result.passed, result.replacements
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from corpora.backends.profile import CSR_SUFFIXES, GENERATED_SUFFIXES, TargetProfile

DEFAULT_ROUNDS = 3
CUTOFF = 0.6  # difflib ratio a replacement must reach: below it the name is left (and the repair stops)
_HINT = r"(?:; did you mean '(?P<hint>[\w:]+)'\?)?$"
_UNDECLARED = [
    re.compile(r"^use of undeclared identifier '(?P<name>\w+)'" + _HINT),
    re.compile(r"^no member named '(?P<name>\w+)' in namespace '(?P<scope>[\w:]+)'" + _HINT),
    re.compile(r"^no member named '(?P<name>\w+)' in '(?P<scope>[\w:]+)'" + _HINT),
    re.compile(r"^unknown type name '(?P<name>\w+)'" + _HINT),
    re.compile(r"^no type named '(?P<name>\w+)' in namespace '(?P<scope>[\w:]+)'" + _HINT),
    re.compile(r"^use of undeclared identifier '(?P<scope>\w+)::(?P<name>\w+)'" + _HINT),
]
_QUALIFIED = re.compile(r"\b(\w+)\s*::\s*(\w+)\b")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
SOURCE_SUFFIXES = (".h", ".cpp", ".def", ".inc")


@dataclass
class NamePool:
    """The names a target has: ``plain`` (every identifier of its own files, attributes,
    declarations) and ``scoped`` (namespace or class -> names qualified by it)."""
    plain: set = field(default_factory=set)
    scoped: dict = field(default_factory=dict)

    @classmethod
    def for_target(cls, prof: TargetProfile, target_dir: Optional[Path] = None,
                   extra_dirs: Sequence[Path] = (), exclude: Optional[dict] = None) -> "NamePool":
        """``exclude``: {path relative to ``target_dir``: [(start_byte, end_byte)]} left out of
        the files read: the functions being generated, so a name only T's real version of one of
        them uses is no candidate (the benchmark's reference must not pick its own names)."""
        pool = cls()
        namespaces = {prof.primary, *prof.aliases, *prof.namespaces}
        for kind, names in prof.by_kind.items():
            for n in names:
                pool.plain.add(n)
                if kind == "relocation":
                    pool.add("ELF", n)
                elif kind in ("register", "instruction", "fixup", "register_class"):
                    for ns in namespaces:
                        pool.add(ns, n)
                        if kind == "register_class":
                            for suf in GENERATED_SUFFIXES:
                                pool.add(ns, n + suf)
                elif kind == "calling_convention":  # TableGen's CSR_X_SaveList / CSR_X_RegMask
                    pool.plain.update(n + suf for suf in CSR_SUFFIXES)
        for d in prof.declared:
            parts = d.split("::")
            pool.plain.add(parts[-1])
            if len(parts) > 1:
                pool.add(parts[-2], parts[-1])
        for folder in [target_dir, *extra_dirs]:
            if folder is None or not Path(folder).is_dir():
                continue
            for f in sorted(Path(folder).rglob("*")):
                if f.suffix in SOURCE_SUFFIXES and f.is_file():
                    data = f.read_bytes()
                    spans = (exclude or {}).get(f.relative_to(folder).as_posix()) if folder == target_dir else None
                    for start, end in sorted(spans or (), reverse=True):
                        data = data[:start] + b" " * (end - start) + data[end:]
                    text = data.decode(errors="replace")
                    pool.plain.update(_IDENT.findall(text))
                    for scope, name in _QUALIFIED.findall(text):
                        pool.add(scope, name)
        return pool

    def add(self, scope: str, name: str) -> None:
        self.scoped.setdefault(scope, set()).add(name)
        self.plain.add(name)

    def closest(self, name: str, scope: Optional[str] = None, avoid: frozenset = frozenset()) -> Optional[str]:
        """The most similar existing name (in ``scope`` when the error names one and the target
        has names there), never one in ``avoid``."""
        pool = self.scoped.get(scope.split("::")[-1]) if scope else None
        cands = sorted((pool or self.plain) - avoid - {name})
        got = difflib.get_close_matches(name, cands, n=1, cutoff=CUTOFF)
        return got[0] if got else None

    def closest_scope(self, name: str, avoid: frozenset = frozenset()) -> Optional[str]:
        cands = sorted(set(self.scoped) - avoid - {name})
        got = difflib.get_close_matches(name, cands, n=1, cutoff=CUTOFF)
        return got[0] if got else None


def undeclared(diagnostics: Sequence[dict]) -> Optional[list[dict]]:
    """{"name", "scope", "hint"} for each diagnostic when every one is an undeclared-identifier
    error, else None (something else is wrong: repair does not apply)."""
    out = []
    for d in diagnostics:
        msg = d["message"] if isinstance(d, dict) else str(d)
        m = next((m for p in _UNDECLARED for m in [p.match(msg.strip())] if m), None)
        if m is None:
            return None
        g = m.groupdict()
        out.append({"name": g["name"], "scope": g.get("scope"), "hint": g.get("hint")})
    return out or None


def plan(code: str, diagnostics: Sequence[dict], pool: NamePool, tried: dict) -> tuple[str, list[dict]]:
    """One round: ``code`` with each undeclared name replaced, and the replacements made (empty
    when the diagnostics are not all undeclared identifiers, or no name has a close match).
    ``tried`` (name -> names already used for it) keeps later rounds from repeating a choice."""
    errs = undeclared(diagnostics)
    if not errs:
        return code, []
    reps = []
    done = set()
    for e in errs:
        name, scope = e["name"], e["scope"]
        if (name, scope) in done:
            continue
        done.add((name, scope))
        avoid = frozenset(tried.get(name, ()))
        as_qualifier = scope is None and re.search(rf"\b{re.escape(name)}\s*::", code) is not None \
            and re.search(rf"\b{re.escape(name)}\b(?!\s*::)", code) is None
        hint = (e["hint"] or "").split("::")[-1] or None
        if hint and hint not in avoid:
            new, why = hint, "clang"
        elif as_qualifier:
            new, why = pool.closest_scope(name, avoid), "closest namespace"
        else:
            new, why = pool.closest(name, scope, avoid), "closest name"
        if not new:
            continue
        if scope:
            pat = re.compile(rf"\b({re.escape(scope.split('::')[-1])}\s*::\s*){re.escape(name)}\b")
            changed = pat.sub(lambda m: m.group(1) + new, code)
            if changed == code:  # spelled without the scope (a member access, a using)
                changed = re.sub(rf"\b{re.escape(name)}\b", new, code)
        else:
            changed = re.sub(rf"(?<!::)(?<!\.)(?<!->)\b{re.escape(name)}\b", new, code)
        if changed == code:
            continue
        code = changed
        tried.setdefault(name, set()).add(new)
        reps.append({"from": name, "to": new, "scope": scope, "why": why})
    return code, reps


@dataclass
class RepairResult:
    code: str  # the repaired function when it passes, else the input unchanged
    passed: bool  # the gate passes the returned code
    rounds: int  # gate re-checks spent
    replacements: list = field(default_factory=list)
    stopped: str = ""  # why the repair ended
    verdict: Optional[dict] = None  # the gate verdict of the returned code

    def to_dict(self) -> dict:
        return {"passed": self.passed, "rounds": self.rounds, "replacements": self.replacements,
                "stopped": self.stopped}


def _failed_on_function(verdict: dict) -> bool:
    """The function fails on its own code: no error outside it, or (the host file batch had
    errors elsewhere, e.g. from other spliced functions) every error inside it is an undeclared
    identifier; the re-check gates the repaired functions without the others, so it decides."""
    if verdict.get("verdict") != "fail":
        return False
    return not verdict.get("file_diagnostics") or undeclared(verdict.get("diagnostics") or []) is not None


def repair_many(codes: Sequence[str], verdicts: Sequence[dict],
                check_many: Callable[[list[tuple[int, str]]], list[dict]], pool: NamePool,
                rounds: int = DEFAULT_ROUNDS) -> list[RepairResult]:
    """Repair several functions of one host file together: each round gates every function
    still being repaired in one call (``check_many``: [(index into ``codes``, code)] -> one
    verdict each, with ``verdict``, ``diagnostics`` (the function's), ``file_diagnostics``)."""
    results = [RepairResult(c, v.get("verdict") == "pass", 0, verdict=v) for c, v in zip(codes, verdicts)]
    current = list(codes)
    last = list(verdicts)
    tried: list[dict] = [{} for _ in codes]
    live = [i for i, v in enumerate(verdicts) if _failed_on_function(v)]
    for i, v in enumerate(verdicts):
        if v.get("verdict") != "pass" and i not in live:
            results[i].stopped = "not a failure of the function's own code" if v.get("verdict") == "fail" \
                else f"gate verdict {v.get('verdict')}"
    for _ in range(rounds):
        todo = []
        for i in live:
            new, reps = plan(current[i], last[i]["diagnostics"], pool, tried[i])
            if reps:
                current[i] = new
                results[i].replacements.extend(reps)
                todo.append(i)
            else:
                results[i].stopped = ("no close name in the target" if undeclared(last[i]["diagnostics"])
                                      else "an error other than an undeclared identifier")
        if not todo:
            break
        got = check_many([(i, current[i]) for i in todo])
        live = []
        for i, v in zip(todo, got):
            last[i] = v
            results[i].rounds += 1
            if v.get("verdict") == "pass":
                results[i].code, results[i].passed, results[i].verdict = current[i], True, v
                results[i].stopped = "passes"
            elif _failed_on_function(v):
                live.append(i)
            else:
                results[i].stopped = f"gate verdict {v.get('verdict')} after a replacement"
    for i in live:
        if not results[i].passed and not results[i].stopped:
            results[i].stopped = f"still failing after {results[i].rounds} rounds"
    return results


def repair(code: str, verdict: dict, check: Callable[[str], dict], pool: NamePool,
           rounds: int = DEFAULT_ROUNDS) -> RepairResult:
    """One function: see ``repair_many``."""
    return repair_many([code], [verdict], lambda items: [check(c) for _, c in items], pool, rounds)[0]
