"""SKILL.md export and import: skills as agent-skills folders (docs/skillmd.md).

    <out>/<slug>/SKILL.md     YAML front matter (name, description, metadata) + a Markdown body
                              a coding agent can act on (intent, where/when it applies, how to
                              apply it with before/after/diff, measured effect, risks, evidence,
                              provenance)
    <out>/<slug>/skill.json   the whole Skill record (import is lossless when it is present)

`export_skills(skills, out_dir)` writes the folders; `import_skills(dir)` reads every
`*/SKILL.md` back (with its skill.json, or, without one, the record the front matter and body
allow) and raises SkillMdError, a one-line message naming the file and the problem, on bad
input; `save_skills(store, skills)` writes a batch in one transaction.

The front matter follows the Agent Skills convention: `name` is lowercase letters, digits and
single hyphens, at most 64 characters, and equals the folder name; `description` (at most 1024
characters) says what the skill does and when to use it, since that is all an agent reads before
deciding to load it; `metadata` maps strings to strings.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Optional

from mining.records import Anchor, Skill, skill_identity
from skills.slugs import NAME_MAX, skill_slugs, slugify

DESCRIPTION_MAX = 1024
FRONT_KEYS = ("name", "description", "license", "compatibility", "allowed-tools", "metadata")
META_KEYS = ("skill_id", "key", "carrier", "operator", "variant", "kind", "scope")
_NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
RECORD_FILE = "skill.json"
SKILL_FILE = "SKILL.md"


class SkillMdError(ValueError):
    """Bad SKILL.md input: one line, naming the file and the problem."""

    def __init__(self, path: Any, problem: str):
        self.path = str(path)
        self.problem = " ".join(str(problem).split())
        super().__init__(f"{self.path}: {self.problem}")


def _scope_text(scope: dict[str, list[str]]) -> str:
    return "; ".join(f"{k}={','.join(v)}" for k, v in scope.items())


def _scope_parse(value: Any, where: str) -> dict[str, list[str]]:
    if value in (None, ""):
        return {}
    if isinstance(value, dict):
        if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in value.values()):
            raise ValueError(f"{where}: a mapping of lists of strings was expected")
        return {str(k): list(v) for k, v in value.items()}
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected 'key=a,b; key2=c' or a mapping")
    out: dict[str, list[str]] = {}
    for part in value.split(";"):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise ValueError(f"{where}: {part!r} is not 'key=a,b'")
        k, v = part.split("=", 1)
        out[k.strip()] = [x.strip() for x in v.split(",") if x.strip()]
    return out


# --------------------------------------------------------------------------- rendering
def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if not text or text[-1] in ".!?" else text + "."


def _ratio_text(e) -> str:
    if e.time_ratio is None:
        return ""
    spread = ""
    if e.time_ratio_q1 is not None and e.time_ratio_q3 is not None:
        spread = f" ({e.time_ratio_q1:.2f}-{e.time_ratio_q3:.2f})"
    return f"{e.time_ratio:.2f}x{spread}"


def _effect_summary(skill: Skill) -> str:
    """What the skill buys, with the device: GPU timings when there are any, else the static deltas
    (and that no GPU timed it)."""
    timed = [e for e in skill.effect if e.method == "gpu_timing" and e.time_ratio is not None]
    if timed:
        return "; ".join(f"{_ratio_text(e)} faster on {e.device}" + (f" ({e.workload})" if e.workload else "")
                         for e in timed[:2])
    parts = []
    for e in skill.effect[:1]:
        bits = [f"{label} {v:+d}" for label, v in (("registers", e.registers_delta), ("shared bytes", e.smem_delta),
                                                   ("spills", e.spill_delta)) if v]
        bits += [f"{op} {d:+d}" for op, d in list(e.sass_delta.items())[:3]]
        where = e.device.removeprefix("static:")
        parts.append(f"not timed on a GPU; compiled for {where}: " + (", ".join(bits) if bits else "no static change"))
    return "; ".join(parts) or "not measured (no GPU timing or compile statistics recorded)"


def describe(skill: Skill) -> str:
    """The front-matter description: what the skill does, when to apply it (the conditions the code
    must meet) and what it buys (measured, with the device), since that is all an agent reads
    before loading it."""
    scope = skill.scope
    kinds = "; ".join(x for x in (", ".join(scope.get("op_types", [])), ", ".join(scope.get("dtypes", []))) if x)
    parts = []
    code_conds = [p.text for p in skill.preconditions if p.status == "required" and p.text]
    size_conds = [p.text for p in skill.preconditions
                  if p.kind != "none_found" and p.status != "required" and p.text]
    when = "Use when optimizing a CUDA kernel" + (f" ({kinds})" if kinds else "") + " that lacks it"
    if code_conds:
        when += " where " + "; and ".join(c.rstrip(".") for c in code_conds[:2])
    parts.append(when + ".")
    if size_conds:
        parts.append("Valid only when " + "; ".join(size_conds[:4]) + " (probed).")
    eff = _effect_summary(skill)
    if eff:
        parts.append(f"Buys: {eff}.")
    n = len({e.problem for e in skill.evidence})
    if n:
        parts.append(f"Mined from {n} expert kernel{'s' if n != 1 else ''}.")
    # the "when" half is what lets an agent decide: the intent gives way to it when space runs out
    tail = _clip(" ".join(" ".join(parts).split()), 760)
    intent = _clip(_sentence(skill.intent or skill.name), DESCRIPTION_MAX - len(tail) - 1)
    return f"{intent} {tail}"


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit - 3]
    cut = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return cut + "..."


def _fence(code: str, lang: str) -> str:
    longest = max((len(m.group(0)) for m in re.finditer(r"`+", code)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{code.rstrip(chr(10))}\n{ticks}"


def _cell(v: Any) -> str:
    s = "" if v is None else str(v)
    return s.replace("|", "\\|").replace("\n", " ") or "-"


def _signed(v: Optional[int]) -> str:
    return "-" if v is None else f"{v:+d}"


def _probe_text(probes: list[dict[str, Any]]) -> str:
    out = []
    for p in probes[:6]:
        axes = p.get("axes", p.get("workload", {}))
        where = ", ".join(f"{k}={v}" for k, v in axes.items()) if isinstance(axes, dict) else str(axes)
        verdicts = ", ".join(f"{k} {v}" for k, v in p.items() if k not in ("axes", "workload"))
        out.append(f"{where}: {verdicts}" if verdicts else where)
    more = f"; {len(probes) - 6} more" if len(probes) > 6 else ""
    return "; ".join(out) + more


def render_skill_md(skill: Skill, slug: str) -> str:
    """The SKILL.md text of one skill (front matter + body)."""
    import yaml

    meta = {"skill_id": skill.skill_id, "key": skill.key, "carrier": skill.carrier, "operator": skill.operator,
            "variant": skill.variant, "kind": skill.kind, "scope": _scope_text(skill.scope)}
    front = {"name": slug, "description": describe(skill), "metadata": meta}
    head = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=1 << 16, default_flow_style=False)
    a = skill.anchor
    L: list[str] = ["---", head.rstrip("\n"), "---", "", f"# {' '.join(skill.name.split())}", "", _sentence(skill.intent or skill.name), ""]
    problems = sorted({e.problem for e in skill.evidence})
    L += [f"Mined by kernel-skills from validated backward walks over expert kernels: the inverse of the "
          f"`{skill.operator}` deoptimization, which removes the `{skill.carrier}` carrier"
          + (f" (seen in {', '.join(problems)})" if problems else "") + ".", ""]

    L += ["## When it applies", ""]
    L.append(f"- Carrier: `{skill.carrier}`")
    L.append(f"- Deoptimization operator it reverses: `{skill.operator}`" + (f" (variant `{skill.variant}`)" if skill.variant else ""))
    for k, label in (("op_types", "Op types"), ("dtypes", "Dtypes"), ("archs", "Architectures"), ("problems", "Problems")):
        if skill.scope.get(k):
            L.append(f"- {label}: {', '.join(skill.scope[k])}")
    for k, v in skill.scope.items():
        if k not in ("op_types", "dtypes", "archs", "problems") and v:
            L.append(f"- Scope {k}: {', '.join(v)}")
    if a.function:
        L.append(f"- Kernel function: `{a.function}`")
    if a.line:
        L.append(f"- Line: {a.line} (in the expert kernel)")
    if a.enclosing_loop:
        L.append(f"- Enclosing loop: `{a.enclosing_loop}`")
    if a.ast_path:
        L.append(f"- AST path: `{' > '.join(a.ast_path)}`")
    for label, items in (("Requires", skill.requires), ("Provides", skill.provides), ("Conflicts with", skill.conflicts)):
        if items:
            L.append(f"- {label}: {', '.join(items)}")
    if a.excerpt and not skill.example.get("after"):
        L += ["", "Site in the expert kernel:", "", _fence(a.excerpt, "cuda")]
    L += ["", "### Preconditions", ""]
    if not skill.preconditions:
        L.append("- None recorded.")
    for p in skill.preconditions:
        if p.kind == "none_found":
            L.append(f"- None found: {p.text or 'the optimized form passed every adversarial size probed'}"
                     + (f" (probes: {_probe_text(p.probes)})" if p.probes else ""))
            continue
        if p.source == "optimization":
            L.append(f"- {_sentence(p.text)} ({p.kind}" + (f", {p.value} bytes" if p.kind == "alignment" and p.value else "")
                     + "; what the optimization needs of the code, checked against query code by `skills query`)")
            continue
        what = f"`{p.text}`" if p.text else p.kind
        detail = ", ".join(x for x in (p.kind, f"axis {p.axis}" if p.axis else "", f"value {p.value}" if p.value else "") if x)
        how = {"probe": "discovered by probing both versions on adversarial sizes",
               "code_guard": "guarded in the code: the optimized form checks it and falls back"}[p.source]
        status = {"discovered": "", "guarded_in_code": " The expert already guards it.",
                  "not_needed": " Not needed after all.", "required": ""}[p.status]
        L.append(f"- {what} ({detail}): {how}" + (f" ({_probe_text(p.probes)})" if p.probes else "") + "." + status)

    ex = skill.example
    L += ["", "## How to apply", "",
          "1. Find code like the \"before\" below that meets the preconditions above (the optimization is "
          "missing there).",
          "2. Rewrite it the way the \"after\" does, adapting names and sizes; where a precondition cannot be "
          "guaranteed, guard the optimized path and keep the simple one as the fallback.",
          "3. Check correctness on sizes that violate the preconditions (odd, tiny, misaligned), then time it.", ""]
    if ex.get("before") or ex.get("after"):
        L += ["### Example from real code", ""]
        if ex.get("before"):
            L += [f"Before: {ex.get('before_from') or 'hand-written code without the optimization'}.", "",
                  _fence(ex["before"], "cuda"), ""]
        if ex.get("after"):
            L += [f"After: {ex.get('after_from') or 'the expert kernel'}.", "", _fence(ex["after"], "cuda"), ""]
        if skill.diff:
            L += ["### The mined step (diff simpler -> optimized)", "",
                  f"What the gate checked: the walk's `{skill.operator}` simplification at this site, reversed.", "",
                  _fence(skill.diff, "diff"), ""]
    else:
        if skill.before:
            L += ["### Simpler form (before)", "", _fence(skill.before, "cuda"), ""]
        if skill.after:
            L += ["### Optimized form (after)", "", _fence(skill.after, "cuda"), ""]
        if skill.diff:
            L += ["### Diff (simpler -> optimized)", "", _fence(skill.diff, "diff"), ""]

    L += ["## Measured effect", ""]
    if skill.effect:
        L += ["| device | method | time ratio (simpler/optimized) | workload | registers | smem bytes | spills | SASS |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for e in skill.effect:
            sass = ", ".join(f"{op} {d:+d}" for op, d in e.sass_delta.items())
            L.append(f"| {_cell(e.device)} | {e.method} | {_cell(_ratio_text(e))} | {_cell(e.workload)} | "
                     f"{_signed(e.registers_delta)} | {_signed(e.smem_delta)} | {_signed(e.spill_delta)} | {_cell(sass)} |")
        L += ["", "Time ratio above 1: the optimized form is faster (median, with the spread over evidence); "
                  "static columns are optimized minus simpler. CPU runs never make speed claims."]
    else:
        L.append("No measurement recorded.")

    L += ["", "## Risks", ""]
    if not skill.risks:
        L.append("- None observed.")
    for r in skill.risks:
        extra = []
        if r.probe:
            extra.append("probe " + (_probe_text([r.probe]) if "axes" in r.probe or "workload" in r.probe
                                     else ", ".join(f"{k}={v}" for k, v in r.probe.items())))
        if r.failure:
            extra.append(f"gate: {' '.join(r.failure.split())}")
        L.append(f"- {' '.join(r.text.split())}" + (f" ({'; '.join(extra)})" if extra else ""))

    L += ["", "## Evidence", ""]
    if not skill.evidence:
        L.append("- None recorded.")
    for ev in skill.evidence:
        tol = ", ".join(f"{k} rtol {v[0]:g} atol {v[1]:g}" if len(v) == 2 else f"{k} {v}" for k, v in ev.tolerances.items())
        bits = [f"`{ev.problem}`" + (f" ({ev.op_type})" if ev.op_type else ""),
                f"lineage `{ev.lineage_id}` step {ev.step}", f"expert `{ev.kernel_hash[:12]}`", f"executor {ev.executor}"]
        if ev.workloads:
            bits.append("workloads " + ", ".join(ev.workloads))
        if ev.seeds:
            bits.append("seeds " + ", ".join(str(s) for s in ev.seeds))
        if tol:
            bits.append("tolerances " + tol)
        timed = [_ratio_text(e) + f" on {e.device}" for e in ev.effect if e.time_ratio is not None]
        if timed:
            bits.append("measured " + "; ".join(timed))
        L.append("- " + "; ".join(bits))

    if skill.verification:
        L += ["", "## Verification", ""] + [f"- {' '.join(v.split())}" for v in skill.verification]

    L += ["", "## Provenance", ""]
    prov = dict(skill.provenance)
    per = prov.pop("per_lineage", None)
    for k, v in prov.items():
        L.append(f"- {k}: {', '.join(map(str, v)) if isinstance(v, list) else json.dumps(v) if isinstance(v, dict) else v}")
    if per:
        L.append(f"- per-lineage findings: {len(per)} lineage(s) (in {RECORD_FILE})")
    L.append(f"- full record: `{RECORD_FILE}` beside this file")
    return "\n".join(L).rstrip("\n") + "\n"


# --------------------------------------------------------------------------- export
def export_skills(skills: Iterable[Skill], out_dir: Path) -> list[Path]:
    """One folder per skill under out_dir (SKILL.md + skill.json); returns the SKILL.md paths in the
    order of `skills`. Existing files of the same folders are overwritten; other folders are left."""
    skills = list(skills)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise SkillMdError(out_dir, "exists and is not a folder")
    slugs = skill_slugs(skills)
    written = []
    for s in skills:
        folder = out_dir / slugs[s.skill_id]
        folder.mkdir(parents=True, exist_ok=True)
        _write(folder / RECORD_FILE, s.model_dump_json(indent=2) + "\n")
        _write(folder / SKILL_FILE, render_skill_md(s, slugs[s.skill_id]))
        written.append(folder / SKILL_FILE)
    return written


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# --------------------------------------------------------------------------- import
def split_front_matter(text: str, path: Any) -> tuple[dict[str, Any], str]:
    """(front matter mapping, body); SkillMdError when it is missing or not YAML."""
    import yaml

    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        raise SkillMdError(path, "missing YAML front matter (the file must start with a '---' line)")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
    if end is None:
        raise SkillMdError(path, "front matter is not closed by a '---' line")
    try:
        front = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 2}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SkillMdError(path, f"invalid YAML in front matter: {where}{problem}") from None
    if not isinstance(front, dict):
        raise SkillMdError(path, "front matter must be a YAML mapping (name, description, metadata)")
    return front, "\n".join(lines[end + 1:])


def _check_front(front: dict[str, Any], path: Path) -> dict[str, str]:
    unknown = [k for k in front if k not in FRONT_KEYS]
    if unknown:
        raise SkillMdError(path, f"unknown front matter field {str(unknown[0])!r} (allowed: {', '.join(FRONT_KEYS)})")
    name = front.get("name")
    if not isinstance(name, str) or not name:
        raise SkillMdError(path, "front matter needs 'name' (a string)")
    if len(name) > NAME_MAX or not _NAME_RE.match(name):
        raise SkillMdError(path, f"name {name!r} must be lowercase letters, digits and single hyphens, "
                                 f"at most {NAME_MAX} characters")
    if name != path.parent.name:
        raise SkillMdError(path, f"name {name!r} does not match its folder {path.parent.name!r}")
    desc = front.get("description")
    if not isinstance(desc, str) or not desc.strip():
        raise SkillMdError(path, "front matter needs 'description' (a non-empty string)")
    if len(desc) > DESCRIPTION_MAX:
        raise SkillMdError(path, f"description is {len(desc)} characters (at most {DESCRIPTION_MAX})")
    meta = front.get("metadata", {}) or {}
    if not isinstance(meta, dict):
        raise SkillMdError(path, "metadata must be a mapping")
    unknown = [k for k in meta if k not in META_KEYS]
    if unknown:
        raise SkillMdError(path, f"unknown metadata field {str(unknown[0])!r} (allowed: {', '.join(META_KEYS)})")
    out = {}
    for k, v in meta.items():
        if k == "scope" and isinstance(v, dict):
            out[k] = v
        elif isinstance(v, (str, int, float)) and not isinstance(v, bool):
            out[k] = str(v)
        elif v is None:
            out[k] = ""
        else:
            raise SkillMdError(path, f"metadata.{k}: expected a string")
    return out


def _validation_message(exc) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(top level)"
    return f"{where}: {err['msg']}"


def _sections(body: str) -> tuple[str, str, dict[str, str]]:
    """(title, intent, {heading: text}) of a SKILL.md body; fenced blocks never split sections."""
    title, intent_lines, sections = "", [], {}
    current: Optional[str] = None
    buf: list[str] = []
    fence: Optional[str] = None
    seen_title = False
    for line in body.split("\n"):
        m = re.match(r"^(`{3,})", line)
        if m and (fence is None or (line.strip() == fence)):
            fence = m.group(1) if fence is None else None
        elif fence is None and (h := re.match(r"^(#{1,6})\s+(.*?)\s*$", line)):
            if len(h.group(1)) == 1 and not seen_title:
                title, seen_title = h.group(2), True
                continue
            if current is not None:
                sections[current] = "\n".join(buf)
            current, buf = h.group(2), []
            continue
        if current is None:
            if seen_title:
                intent_lines.append(line)
        else:
            buf.append(line)
    if current is not None:
        sections[current] = "\n".join(buf)
    paragraphs = "\n".join(intent_lines).strip().split("\n\n")
    intent = " ".join(paragraphs[0].split()) if paragraphs and paragraphs[0].strip() else ""
    return title, intent, sections


def _first_fence(text: str) -> str:
    m = re.search(r"^(`{3,})[^\n`]*\n(.*?)\n\1[ \t]*$", text, re.S | re.M)
    return m.group(2) + "\n" if m else ""


def _bullet(text: str, label: str) -> str:
    m = re.search(rf"^- {re.escape(label)}: (.*)$", text, re.M)
    return m.group(1).strip() if m else ""


def _from_markdown(front: dict[str, Any], meta: dict[str, Any], body: str, path: Path) -> Skill:
    carrier, operator = meta.get("carrier", ""), meta.get("operator", "")
    if not carrier or not operator:
        raise SkillMdError(path, f"no {RECORD_FILE} beside it, and metadata lacks 'carrier' and 'operator' "
                                 "(needed to rebuild the record)")
    variant = meta.get("variant", "")
    key, skill_id = skill_identity(carrier, operator, variant)
    title, intent, sec = _sections(body)
    when = sec.get("When it applies", "")
    unquote = lambda s: s[1:-1] if len(s) >= 2 and s[0] == s[-1] == "`" else s  # noqa: E731
    line_txt = _bullet(when, "Line")
    anchor = Anchor(function=unquote(_bullet(when, "Kernel function")),
                    ast_path=[p for p in unquote(_bullet(when, "AST path")).split(" > ") if p],
                    enclosing_loop=unquote(_bullet(when, "Enclosing loop")),
                    line=int(m.group(0)) if (m := re.match(r"\d+", line_txt)) else 0,
                    excerpt=_first_fence(when).rstrip("\n"))
    lists = {label: [x.strip() for x in _bullet(when, label).split(",") if x.strip()]
             for label in ("Requires", "Provides", "Conflicts with")}
    try:
        scope = _scope_parse(meta.get("scope"), "metadata.scope")
    except ValueError as exc:
        raise SkillMdError(path, str(exc)) from None
    data = {
        "skill_id": meta.get("skill_id") or skill_id, "key": meta.get("key") or key,
        "name": title or front["name"], "intent": intent or front["description"],
        "carrier": carrier, "operator": operator, "variant": variant, "anchor": anchor,
        "before": _first_fence(sec.get("Simpler form (before)", "")),
        "after": _first_fence(sec.get("Optimized form (after)", "")),
        "diff": _first_fence(sec.get("Diff (simpler -> optimized)", "") or sec.get("The mined step (diff simpler -> optimized)", "")),
        "scope": scope, "requires": lists["Requires"], "provides": lists["Provides"],
        "conflicts": lists["Conflicts with"],
        "provenance": {"imported_from": f"{SKILL_FILE} without {RECORD_FILE}: preconditions, effects, evidence "
                                        "and risks are in its text only",
                       "folder": path.parent.name},  # `skills show <folder>` finds it
    }
    if meta.get("kind"):
        data["kind"] = meta["kind"]
    from pydantic import ValidationError

    try:
        return Skill.model_validate(data)
    except ValidationError as exc:
        raise SkillMdError(path, _validation_message(exc)) from None


def read_skill(folder: Path) -> Skill:
    """One skill folder -> its Skill (SkillMdError on bad input)."""
    from pydantic import ValidationError

    path = Path(folder) / SKILL_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SkillMdError(path, "missing") from None
    except UnicodeDecodeError:
        raise SkillMdError(path, "not UTF-8 text") from None
    front, body = split_front_matter(text, path)
    meta = _check_front(front, path)
    record = path.parent / RECORD_FILE
    if not record.is_file():
        return _from_markdown(front, meta, body, path)
    try:
        raw = json.loads(record.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise SkillMdError(record, "not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise SkillMdError(record, f"invalid JSON: line {exc.lineno}: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise SkillMdError(record, "expected a JSON object (a Skill record)")
    try:
        skill = Skill.model_validate(raw)
    except ValidationError as exc:
        raise SkillMdError(record, _validation_message(exc)) from None
    for k in ("skill_id", "key", "carrier", "operator", "variant", "kind"):
        if k in meta and meta[k] != getattr(skill, k):
            raise SkillMdError(path, f"metadata.{k} {meta[k]!r} disagrees with {RECORD_FILE} ({getattr(skill, k)!r})")
    if "scope" in meta:
        try:
            scope = _scope_parse(meta["scope"], "metadata.scope")
        except ValueError as exc:
            raise SkillMdError(path, str(exc)) from None
        if scope != {k: v for k, v in skill.scope.items()}:
            raise SkillMdError(path, f"metadata.scope disagrees with {RECORD_FILE}")
    return skill


def import_skills(directory: Path) -> list[Skill]:
    """Every `*/SKILL.md` under `directory` (or `directory/SKILL.md` itself) -> Skills, sorted by
    folder. All are read before anything is returned: one bad file fails the whole import."""
    directory = Path(directory)
    if not directory.is_dir():
        raise SkillMdError(directory, "no such folder")
    if (directory / SKILL_FILE).is_file():
        folders = [directory]
    else:
        folders = sorted(p.parent for p in directory.glob(f"*/{SKILL_FILE}"))
    if not folders:
        raise SkillMdError(directory, f"no */{SKILL_FILE} found")
    out: list[Skill] = []
    where: dict[str, Path] = {}
    for folder in folders:
        skill = read_skill(folder)
        if skill.skill_id in where:
            raise SkillMdError(folder / SKILL_FILE, f"skill {skill.skill_id} is also in {where[skill.skill_id] / SKILL_FILE}")
        where[skill.skill_id] = folder
        out.append(skill)
    return out


def save_skills(store, skills: Iterable[Skill]) -> int:
    """Insert or replace the skills in the store, all in one transaction. Returns the count."""
    from skills.kernel_store import KernelStore

    return KernelStore(store).put_skills(skills)


__all__ = ["SkillMdError", "describe", "export_skills", "import_skills", "read_skill", "render_skill_md",
           "save_skills", "skill_slugs", "slugify", "split_front_matter"]
