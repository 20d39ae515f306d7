"""Skill-guided generation of a backend function: the role's skeleton plus skills instantiated for T.

    instantiate(store, target="RISCV", role="ELFObjectWriter::getRelocType", source_func_id=...)

Where fork-and-adapt carries a whole function over (one decision per function), this works per
*statement family*: the source implementation S (the one fork-and-adapt would pick) was walked
backward under the compile gate (mining/backend/mine.py) into its skeleton and a sequence of
compile-validated steps, each a skill; the function for T is the skeleton with each step's
skill decided for T:

* **expand** -- a skill whose slots range over (most of) S's attributes of a kind ("for each
  fixup of the target, add ``case TGT::<fixup>: return ELF::<relocation>;``"): S's instances
  are replaced by one instance per attribute of T of that kind, in T's declaration order;
  each goes where S's most similar instance was (so PC-relative fixups land in the
  PC-relative switch), its other slots bound to T's attribute whose name matches it best
  (``fixup_riscv_pcrel_hi20`` -> ``R_RISCV_PCREL_HI20``), by target-neutral name tokens;
* **keep** -- otherwise: the code is added, its names mapped as fork-and-adapt maps them;
* **drop** -- the step's code needs a target attribute T lacks (its precondition fails): a
  qualified fixup, relocation, register, register class, feature, instruction, calling
  convention or processor name that neither renames nor matches onto T, at the step's own level
  (a case arm's labels and its own statements, a branch's header and its own statements, a
  statement's text; code nested one construct deeper is carried along, as a fork would).
  The step stays applied, i.e. the code is left out; the gate showed the function compiles
  without it.

Steps are replayed forward on S's text in the lineage's order; a step that no longer applies
(it simplified code a kept step still needs, e.g. the switch around kept arms) is skipped, so
the result is S's expert minus the dropped families, plus T's expansions, mapped onto T.
Without a stored lineage for S the result is fork-and-adapt's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional, Sequence

from corpora.backends.profile import TargetProfile
from corpora.backends.tree import normalize_code
from mining.backend.operators import BackendEdit, TargetNames, propose_edits
from mining.records import Lineage
from retrieval.backend.adapt import (
    MATCH_KINDS, MATCH_THRESHOLD, adapt, kind_tokens, name_similarity, rename_target, token_similarity,
)

COVERAGE = 0.5  # share of S's attributes of a kind a skill must range over to be "for each"
_MARK = "@@ksfam{}@@"


@dataclass
class StepPlan:
    index: int
    skill_id: str
    operator: str
    variant: str
    fragment: str
    enclosing: tuple
    slots: list  # [(kind, name)]
    target_identifiers: list
    indent: str = ""  # the fragment's first line's indentation in S
    header: str = ""  # the construct's own header (``if ( c )``, ``switch ( x )``)
    decision: str = "keep"  # keep | drop | expand
    reason: str = ""
    family: int = -1


@dataclass
class SkillResult:
    code: str
    source_func: str
    lineage_id: Optional[str]
    skeleton: str = ""
    plans: list = field(default_factory=list)  # StepPlan dicts
    expansions: list = field(default_factory=list)  # {family, skill_id, kind, instances: [...]}
    fallback: str = ""  # why the result is plain fork-and-adapt
    mappings: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"source": self.source_func, "lineage": self.lineage_id, "fallback": self.fallback,
                "skeleton": self.skeleton, "steps": self.plans, "expansions": self.expansions}


# --------------------------------------------------------------------------- lineage access
def lineage_for(store, func_id: str) -> Optional[Lineage]:
    """The stored backend lineage that starts from ``func_id`` (latest), or None."""
    try:
        rows = store.query("SELECT record FROM lineages WHERE kind = 'backend' AND problem = ? "
                           "ORDER BY created_at DESC",
                           [func_id.split(":", 1)[0] + ":" + _role_of(store, func_id)])
    except Exception:  # no kernel tables yet
        return None
    for r in rows:
        lin = Lineage.model_validate_json(r["record"])
        if lin.config.get("func_id") == func_id:
            return lin
    return None


def _role_of(store, func_id: str) -> str:
    return store.scalar("SELECT role FROM functions WHERE func_id = ?", [func_id]) or ""


def lineage_states(store, lin: Lineage) -> Optional[list[str]]:
    """states[0] = the expert, states[k] = after accepted step k (texts from the store)."""
    if not lin.steps:
        src = store.scalar("SELECT source FROM kernels WHERE kernel_hash = ?", [lin.kernel_hash])
        return [src] if src is not None else None
    hashes = [lin.steps[0].before_hash] + [s.after_hash for s in lin.steps]
    rows = {r["kernel_hash"]: r["source"] for r in store.query(
        f"SELECT kernel_hash, source FROM kernels WHERE kernel_hash IN ({', '.join('?' for _ in hashes)})", hashes)}
    if any(h not in rows for h in hashes):
        return None
    return [rows[h] for h in hashes]


def step_edits(states: list[str], names: TargetNames, operators: Sequence[str],
               steps: Sequence = ()) -> Optional[list[BackendEdit]]:
    """The operator edit behind each accepted step (re-proposed, matched by its result)."""
    out = []
    for k, (before, after) in enumerate(zip(states, states[1:])):
        st = steps[k] if k < len(steps) else None
        e = next((e for e in propose_edits(before, names, operators)
                  if (st is None or (e.operator == st.operator and e.site_start == st.site_start))
                  and e.apply(before) == after), None)
        if e is None:
            return None
        out.append(e)
    return out


# --------------------------------------------------------------------------- decisions
def _key(e: BackendEdit) -> tuple:
    return (e.operator, e.variant, " ".join(e.fragment.split()))


def _slots_of(e: BackendEdit, names: TargetNames) -> list[tuple[str, str]]:
    from mining.backend.mine import abstract_code

    return abstract_code(e.fragment, names)[1]


def _profile_order(store, target: str, kind: str) -> list[str]:
    rows = store.query("SELECT name FROM target_attributes WHERE target = ? AND kind = ? ORDER BY path, line, name",
                       [target, kind])
    return list(dict.fromkeys(r["name"] for r in rows))


def _same_target_similarity(prof: TargetProfile, a: str, ka: str, b: str, kb: str) -> float:
    ta, ja = kind_tokens(prof, a, ka)
    tb, jb = kind_tokens(prof, b, kb)
    return token_similarity(ta, ja, tb, jb)


def _render(fragment: str, slots: list[tuple[str, str]], values: dict[str, str], src: TargetProfile,
            dst: TargetProfile) -> str:
    """S's instance text with its slot names replaced by T's, then S's remaining target names renamed."""
    out = fragment
    for _, name in slots:
        if name in values:
            out = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", "\0" + values[name] + "\0", out)
    pieces = out.split("\0")
    return "".join(p if i % 2 else rename_target(p, src, dst) for i, p in enumerate(pieces))


# --------------------------------------------------------------------------- the generator
def instantiate(store, target: str, source_func_id: str, src: TargetProfile, dst: TargetProfile,
                identifiers: Sequence[str], source_text: str, lineage: Optional[Lineage] = None,
                lookup: bool = True) -> SkillResult:
    """T's version of S's function (``source_func_id``), skill by skill (see the module doc).
    ``lineage``: S's lineage when the caller has it (else looked up unless ``lookup`` is False)."""
    lin = lineage if lineage is not None or not lookup else lineage_for(store, source_func_id)
    base = adapt(source_text, identifiers, src, dst, source_func_id)
    if lin is None:
        return SkillResult(base.text, source_func_id, None, fallback="no lineage mined for the source",
                           mappings=base.mappings)
    states = lineage_states(store, lin)
    names_src = TargetNames.from_profile(src)
    operators = lin.config.get("operators") or None
    edits = step_edits(states, names_src, operators, lin.steps) if states else None
    if not states or edits is None or states[0] != source_text:
        return SkillResult(base.text, source_func_id, lin.lineage_id, fallback="lineage does not replay",
                           mappings=base.mappings)
    how = {m.source: m for m in base.mappings}

    plans = []
    for k, (e, st) in enumerate(zip(edits, lin.steps), start=1):
        data = states[k - 1].encode()
        ls = data.rfind(b"\n", 0, e.site_start) + 1
        indent = data[ls:e.site_start].decode("utf-8", "replace")
        plans.append(StepPlan(k, st.skill_id, e.operator, e.variant, e.fragment, tuple(e.anchor.get("enclosing", [])),
                              _slots_of(e, names_src), list(e.target_identifiers),
                              indent=indent if not indent.strip() else "", header=e.anchor.get("header", "")))

    # skills that range over most of S's attributes of a kind become "for each" expansions
    by_skill: dict[str, list[StepPlan]] = {}
    for p in plans:
        by_skill.setdefault(p.skill_id, []).append(p)
    expand_kind: dict[str, str] = {}
    for sid, ps in by_skill.items():
        kinds = list(dict.fromkeys(k for p in ps for k, _ in p.slots))
        for kind in kinds:
            used = {n for p in ps for k, n in p.slots if k == kind}
            total = len(src.by_kind.get(kind, []))
            # every instance must carry the kind once, or the pattern is not per-attribute
            if total and len(used) >= 2 and len(used) / total >= COVERAGE \
                    and all(sum(1 for k, _ in p.slots if k == kind) == 1 for p in ps):
                expand_kind[sid] = kind
                break
    families: dict[tuple, int] = {}
    for p in plans:
        if p.skill_id in expand_kind:
            p.decision = "expand"
            p.family = families.setdefault((p.skill_id, p.enclosing), len(families))
        else:
            missing = missing_attributes(guard_identifiers(p.operator, p.variant, p.fragment, p.target_identifiers),
                                          how)
            if missing:
                p.decision, p.reason = "drop", f"{target} has no counterpart of {', '.join(missing[:3])}"

    # T's instances of each family, in T's declaration order (before the replay: an empty family is a drop)
    fam_lines = {fam: [] for fam in families.values()}
    fam_keys: dict[int, set] = {fam: set() for fam in families.values()}
    general: dict[str, int] = {}  # skill -> its most general family (fewest enclosing constructs, most instances)
    for (sid, enclosing), fam in families.items():
        size = sum(1 for p in by_skill[sid] if p.family == fam)
        cur = general.get(sid)
        if cur is None:
            general[sid] = fam
        else:
            cur_enc = next(e for (s2, e), f in families.items() if f == cur)
            cur_size = sum(1 for p in by_skill[sid] if p.family == cur)
            if (len(enclosing), -size) < (len(cur_enc), -cur_size):
                general[sid] = fam
    for sid, kind in expand_kind.items():
        own = by_skill[sid]
        for a in _profile_order(store, target, kind):
            scored = sorted(((name_similarity(a, dst, next(n for k, n in p.slots if k == kind), src, kind), p.index, p)
                             for p in own), key=lambda x: (-x[0], x[1]))
            if scored[0][0] >= MATCH_THRESHOLD:
                best = scored[0][2]
            else:  # no similar instance: the family of the general case, with its first instance as the model
                best = next(p for p in own if p.family == general[sid])
            values = {next(n for k, n in best.slots if k == kind): a}
            ok = True
            for k2, n2 in best.slots:
                if k2 == kind or n2 in values:
                    continue
                cand = sorted(((_same_target_similarity(dst, a, kind, b, k2) + 0.5 * name_similarity(n2, src, b, dst, k2),
                                b) for b in dst.by_kind.get(k2, [])), key=lambda x: (-x[0], x[1]))
                if not cand or cand[0][0] < MATCH_THRESHOLD:
                    ok = False
                    break
                values[n2] = cand[0][1]
            if not ok:
                continue
            text = best.indent + _render(best.fragment, best.slots, values, src, dst)
            label = re.match(r"\s*(case\s.*?[^:]):(?!:)", text, re.S) if best.operator.startswith("drop_case") else None
            key = normalize_code(label.group(1) if label else text)
            if key in fam_keys[best.family]:
                continue
            fam_keys[best.family].add(key)
            fam_lines[best.family].append(text)

    # a branch or switch that held only families T has no instance of is vestigial for T: S's own
    # lineage removed it once they were gone, and so does T's
    for p in plans:
        if p.decision != "keep" or p.operator not in ("drop_if_branch", "switch_to_default"):
            continue
        inside = [f for (sid, enc), f in families.items() if list(enc[:len(p.enclosing) + 1]) == [*p.enclosing, p.header]]
        if inside and not any(fam_lines[f] for f in inside):
            p.decision, p.reason = "drop", f"holds only families {target} has no instance of"

    # replay forward on S's text: drop what T cannot have, leave a marker where each non-empty family goes
    doc = source_text
    marked: set[int] = set()
    for p, e in zip(plans, edits):
        if p.decision == "keep":
            continue
        cands = [c for c in propose_edits(doc, names_src, operators) if _key(c) == _key(e)]
        cands = [c for c in cands if not any(_MARK.format(f) in doc.encode()[c.start:c.end].decode("utf-8", "replace")
                                             for f in marked)]
        if not cands:
            p.reason = (p.reason + "; " if p.reason else "") + "no longer applies (code it simplified is kept)"
            p.decision = "keep" if p.decision == "drop" else p.decision
            continue
        c = next((c for c in cands if tuple(c.anchor.get("enclosing", [])) == p.enclosing), cands[0])
        repl = c.replacement
        if p.decision == "expand" and p.family not in marked and fam_lines[p.family]:
            data = doc.encode()
            ls = data.rfind(b"\n", 0, c.site_start) + 1
            indent = re.match(rb"[ \t]*", data[ls:c.site_start]).group(0).decode()
            mark = f"{indent}/*{_MARK.format(p.family)}*/\n"
            repl = mark + repl if c.start == ls else repl + "\n" + mark
            marked.add(p.family)
        doc = (doc.encode()[:c.start] + repl.encode() + doc.encode()[c.end:]).decode("utf-8", "replace")

    adapted = adapt(doc, identifiers, src, dst, source_func_id)
    code = adapted.text
    skeleton = adapt(states[-1], identifiers, src, dst, source_func_id).text
    expansions = []
    for (sid, enclosing), fam in sorted(families.items(), key=lambda kv: kv[1]):
        expansions.append({"family": fam, "skill_id": sid, "kind": expand_kind[sid], "enclosing": list(enclosing),
                           "source_instances": sum(1 for p in by_skill[sid] if p.family == fam),
                           "instances": len(fam_lines[fam]) if fam in marked else 0})
        if fam in marked:
            code = _fill(code, fam, fam_lines[fam])
    plan_dicts = [{"step": p.index, "skill_id": p.skill_id, "operator": p.operator, "decision": p.decision,
                   "reason": p.reason, "family": p.family, "fragment": " ".join(p.fragment.split())[:160]}
                  for p in plans]
    return SkillResult(code, source_func_id, lin.lineage_id, skeleton, plan_dicts, expansions,
                       mappings=adapted.mappings)


_CONTROL_BODIES = {"if_statement": ("consequence", "alternative"), "for_statement": ("body",),
                   "for_range_loop": ("body",), "while_statement": ("body",), "do_statement": ("body",),
                   "switch_statement": ("body",)}


def _own_level(node, out: list) -> None:
    """Collect the identifiers of ``node``'s own level: a compound's statements one by one, a
    nested control statement's header only (its bodies are statement families of their own)."""
    from corpora.backends.tree import identifiers_in

    if node.type == "compound_statement":
        for c in node.named_children:
            _own_level(c, out)
        return
    bodies = _CONTROL_BODIES.get(node.type)
    if bodies is None:
        out.extend(identifiers_in(node))
        return
    skip = {node.child_by_field_name(f) for f in bodies} - {None}
    for c in node.named_children:
        if c not in skip:
            out.extend(identifiers_in(c))


def guard_identifiers(operator: str, variant: str, fragment: str, target_identifiers: Sequence[str]) -> list[str]:
    """The target names a step's skill needs at its own level: a case arm's labels and the arm's
    own statements, a branch's header and its own statements, a loop's header and body
    statements, a simple statement's text. Code nested one construct deeper does not decide the
    skill: a fork keeps it (renamed), and so does the skill (``case FK_Data_4: return
    ELF::R_MIPS_32;`` needs the relocation; ``if (IsPCRel) { switch (Kind) { case ...`` does not
    need the fixups of its inner arms)."""
    from corpora.backends.tree import prepare_cpp
    from corpora.code.parse import cpp_parser, walk

    if operator == "drop_case_label":
        wrapped, want = "void __ks() { switch (0) {\n" + fragment + " ;\n} }", "case_statement"
    elif operator == "drop_case_arm":
        wrapped, want = "void __ks() { switch (0) {\n" + fragment + "\n} }", "case_statement"
    elif operator == "drop_if_branch" and variant == "else":
        wrapped, want = "void __ks() { if (0) {}\n" + fragment + "\n}", "else_clause"
    else:
        wrapped, want = "void __ks() {\n" + fragment + "\n}", None
    tree = cpp_parser().parse(prepare_cpp(wrapped.encode()))
    body = next((n for n in walk(tree.root_node) if n.type == "compound_statement"), None)
    if body is None:
        return list(target_identifiers)
    found: list = []
    if want == "case_statement":
        sw = next((n for n in walk(body) if n.type == "switch_statement"), None)
        sbody = sw.child_by_field_name("body") if sw is not None else None
        for case in (sbody.named_children if sbody is not None else []):
            if case.type != "case_statement":
                continue
            value = case.child_by_field_name("value")
            for c in case.named_children:
                if operator == "drop_case_label" and c != value:
                    continue  # a label's skill adds the label, not the body it shares
                _own_level(c, found)
    elif want == "else_clause":
        clause = next((n for n in walk(body) if n.type == "else_clause"), None)
        for c in (clause.named_children if clause is not None else []):
            _own_level(c, found)
    else:
        for c in body.named_children:
            if operator == "switch_to_default" and c.type == "switch_statement":
                cond = c.child_by_field_name("condition")
                if cond is not None:
                    _own_level(cond, found)  # its arms are steps of their own
                continue
            if operator == "drop_if_branch" and c.type == "if_statement":
                for f in ("condition", "consequence"):  # the else branch is a step of its own
                    x = c.child_by_field_name(f)
                    if x is not None:
                        _own_level(x, found)
                continue
            _own_level(c, found)
    own = {re.sub(r"\s+", "", x) for x in found}
    return [i for i in target_identifiers if i in own]


def missing_attributes(identifiers: Sequence[str], mappings: dict) -> list[str]:
    """The step's target *attributes* (fixups, relocations, registers, features, instructions...)
    that have no counterpart in T: the skill's precondition fails. Other target names that did
    not map (file-local helpers, TableGen-generated functions) are not evidence that T lacks
    them: renamed, they are usually right, so they do not drop a skill. Only qualified names
    count (``Mips::ZERO``, ``ELF::R_MIPS_32``): a bare ``DL`` or ``VA`` that happens to spell
    a register of some target is a local variable. ``mappings``: source name -> Mapping."""
    out = []
    for i in identifiers:
        m = mappings.get(i)
        if m is not None and m.how == "unmapped" and m.kind in MATCH_KINDS and "::" in i:
            out.append(i)
    return out


def _fill(code: str, fam: int, instances: list[str]) -> str:
    """Replace family ``fam``'s marker line by its instances, re-indented to the marker."""
    pat = re.compile(r"^([ \t]*)/\*" + re.escape(_MARK.format(fam)) + r"\*/[ \t]*\n?", re.M)
    m = pat.search(code)
    if m is None:
        return code
    indent = m.group(1)
    out = []
    for text in instances:
        lines = text.splitlines()
        common = min((len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()), default=0)
        out.append("".join((indent + ln[common:] if ln.strip() else "") + "\n" for ln in lines))
    return code[:m.start()] + "".join(out) + code[m.end():]


def may_differ(source_text: str, src: TargetProfile, dst: TargetProfile, identifiers: Sequence[str]) -> str:
    """Why skill-guided generation from this source can differ from fork-and-adapt for T, or ''.

    It differs only where a step's code names something T lacks (the skill is dropped) or a
    skill could range over S's attributes of a kind (expanded with T's). Checked on the
    expert's own candidate steps, before any mining: the benchmark mines just these sources."""
    from mining.backend.mine import abstract_code

    names = TargetNames.from_profile(src)
    edits = propose_edits(source_text, names)
    if not edits:
        return ""
    how = {m.source: m for m in adapt(source_text, identifiers, src, dst).mappings}
    for e in edits:
        missing = missing_attributes(guard_identifiers(e.operator, e.variant, e.fragment, e.target_identifiers),
                                      how)
        if missing:
            return f"drop: {missing[0]}"
    shapes: dict[tuple, set] = {}
    for e in edits:
        pattern, slots = abstract_code(e.fragment, names)
        for kind, name in slots:
            shapes.setdefault((e.operator, pattern, kind), set()).add(name)
    for (op, pattern, kind), used in shapes.items():
        total = len(src.by_kind.get(kind, []))
        if total and len(used) >= 2 and len(used) / total >= COVERAGE:
            return f"expand: {kind}"
    return ""
