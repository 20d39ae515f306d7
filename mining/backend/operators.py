"""Simplification operators over C++ backend functions (the backend side of the backward walk).

Each operator finds sites in one function definition (tree-sitter-cpp) and rewrites one site
by a byte-range edit; everything outside the edit stays byte-identical (formatting and
comments kept). The compile gate (mining/backend/gate.py) decides whether the result still
compiles in the target's real file; the walk (mining/walk.py) accepts one edit per step.

Operators, in the walk's priority order (finest first, so every accepted step is one
statement family and the lineage ends in the role's skeleton):

* ``drop_case_label``: in a group of labels sharing one body (``case A: case B: return X;``),
  drop one non-default label; the body stays with the others.
* ``drop_case_arm``: drop one whole ``case`` arm (its labels and body). Fall-through is
  respected: an arm that the previous arm falls into (its body does not end in
  ``break``/``return``/``continue``/``goto``/``throw``/``llvm_unreachable``/
  ``report_fatal_error``) is not dropped (only its labels may go), and the ``default`` arm is
  never dropped (``switch_to_default`` consumes it).
* ``drop_target_statement``: drop one statement (expression, declaration, return, loop) that
  references a target-specific identifier (``corpora.backends.tree.is_target_identifier``: T's
  namespaces, fixups, relocations, registers, TableGen records, names carrying T's name). Not
  proposed where the result cannot compile or silently changes control flow: a declaration
  whose names are used later, the last statement of the function, the terminator of a
  ``case`` arm, an unbraced body of a control statement.
* ``drop_if_branch``: an ``if`` without ``else`` is dropped whole (``variant=whole``); with an
  ``else``, either the guarded branch goes and the ``else`` branch takes the ``if``'s place
  (``variant=then``) or the ``else`` branch goes (``variant=else``). Inner ``if``s first.
* ``switch_to_default``: a ``switch`` becomes its default path: the ``default`` arm's
  statements (its final ``break`` dropped; braced when they declare names), or nothing when
  there is no ``default``. Not proposed when the default arm breaks out of the switch from
  the middle or falls through.

Where a dropped construct is the unbraced body of a control statement it becomes ``{}``.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from corpora.backends.tree import (
    identifiers_in, is_target_identifier, norm, prepare_cpp, reloc_prefixes as _reloc_prefixes,
)
from corpora.code.edit import Edit
from corpora.code.parse import cpp_parser
from corpora.code.source import line_span

OPERATORS = ("drop_case_label", "drop_case_arm", "drop_target_statement", "drop_if_branch", "switch_to_default")
# operator -> the statement family its inverse adds back (the skill's carrier)
CARRIERS = {"drop_case_label": "case_label", "drop_case_arm": "case_arm", "drop_target_statement": "target_statement",
            "drop_if_branch": "guarded_branch", "switch_to_default": "switch"}
_TERMINATOR_CALLS = re.compile(r"^\s*(?:llvm::)?(?:llvm_unreachable|report_fatal_error|abort|exit|_Exit)\s*\(")
_STATEMENT_TYPES = {"expression_statement", "declaration", "return_statement", "for_statement", "for_range_loop",
                    "while_statement", "do_statement"}
_CONTROL = {"if_statement", "switch_statement", "for_statement", "for_range_loop", "while_statement", "do_statement",
            "case_statement"}
_LOOPS = {"for_statement", "for_range_loop", "while_statement", "do_statement", "switch_statement"}


# --------------------------------------------------------------------------- target names
@dataclass
class TargetNames:
    """What makes an identifier target-specific, and what kind of target attribute it is."""
    target: str
    aliases: list[str]
    kind_of: dict[str, str] = field(default_factory=dict)  # attribute name -> kind
    declared: set[str] = field(default_factory=set)  # names T's headers declare
    reloc_prefixes: list[str] = field(default_factory=list)

    @classmethod
    def from_profile(cls, prof) -> "TargetNames":
        """From a ``corpora.backends.profile.TargetProfile``."""
        from corpora.backends.tree import Attribute

        relocs = [Attribute(prof.target, "relocation", n) for n in prof.by_kind.get("relocation", [])]
        return cls(prof.target, list(prof.aliases), dict(prof.kind_of), set(prof.declared), _reloc_prefixes(relocs))

    @classmethod
    def from_tree(cls, tree) -> "TargetNames":
        """From a ``corpora.backends.tree.TargetTree`` (no store needed)."""
        kind_of, declared = {}, set()
        for a in tree.attributes:
            if a.kind == "declaration":
                declared.add(a.name)
            elif a.kind != "class":
                kind_of.setdefault(a.name, a.kind)
        relocs = [a for a in tree.attributes if a.kind == "relocation"]
        return cls(tree.target, list(tree.aliases), kind_of, declared, _reloc_prefixes(relocs))

    @property
    def attribute_names(self) -> set[str]:
        names = self.__dict__.get("_attr_names")
        if names is None:
            names = {n for n, k in self.kind_of.items() if k not in ("instruction_format", "declaration")}
            self.__dict__["_attr_names"] = names
        return names

    def is_target(self, ident: str) -> bool:
        memo = self.__dict__.setdefault("_memo", {})
        got = memo.get(ident)
        if got is None:
            got = is_target_identifier(ident, self.aliases, self.attribute_names, self.reloc_prefixes)
            memo[ident] = got
        return got

    def kind(self, ident: str) -> Optional[str]:
        """The attribute kind of an identifier (``fixup``, ``relocation``, ``register``, ...), or
        None. TableGen-generated names (``GPRRegClass``, ``GPRRegClassID``) count as their record's."""
        base = ident.split("::")[-1]
        if base in self.kind_of:
            return self.kind_of[base]
        for suf in ("RegClassID", "RegClass", "RegisterClass"):
            if base.endswith(suf) and base[: -len(suf)] in self.kind_of:
                return self.kind_of[base[: -len(suf)]]
        return None


# --------------------------------------------------------------------------- edits
@dataclass
class BackendEdit:
    """One backend simplification: the `Edit` of the function text, and what it removed and where."""
    operator: str
    carrier: str
    variant: str
    edit: Edit  # the byte range of the function text replaced, and what replaces it
    site_start: int  # the construct's own range (the fragment the inverse adds back)
    site_end: int
    fragment: str  # the construct as written (expert side)
    description: str
    depth: int = 0
    _tids: Optional[list] = field(default=None, repr=False)
    retry_key: str = ""
    _anchor: Optional[dict] = field(default=None, repr=False)
    _anchor_fn: Optional[Callable[[], dict]] = field(default=None, repr=False, compare=False)
    _tids_fn: Optional[Callable[[], list]] = field(default=None, repr=False, compare=False)

    @property
    def start(self) -> int:
        return self.edit.start

    @property
    def end(self) -> int:
        return self.edit.end

    @property
    def replacement(self) -> str:
        return self.edit.replacement

    @property
    def target_identifiers(self) -> list[str]:
        """The target-specific identifiers the construct references (computed on first use)."""
        if self._tids is None:
            self._tids = self._tids_fn() if self._tids_fn is not None else []
            self._tids_fn = None
        return self._tids

    @target_identifiers.setter
    def target_identifiers(self, value: list[str]) -> None:
        self._tids, self._tids_fn = list(value), None

    @property
    def anchor(self) -> dict:
        """enclosing: [control headers, outermost first], header: the site's own header,
        before / after: the neighbouring statements, path: node types from the function down."""
        if self._anchor is None:
            self._anchor = self._anchor_fn() if self._anchor_fn is not None else {}
            self._anchor_fn = None
        return self._anchor

    def apply(self, text: str) -> str:
        data = text.encode()
        e = self.edit
        return (data[:e.start] + e.replacement.encode() + data[e.end:]).decode("utf-8", errors="replace")


def _t(node) -> str:
    return node.text.decode("utf-8", errors="replace") if node.text is not None else ""


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _named_statements(node) -> list:
    return [c for c in node.named_children if c.type != "comment"]


def _case_value(case):
    return case.child_by_field_name("value")


def _case_body(case) -> list:
    value = _case_value(case)
    return [c for c in case.named_children if c != value and c.type != "comment"]


def _is_default(case) -> bool:
    return _case_value(case) is None


def terminates(stmts: list) -> bool:
    """Does control leave after these statements (no fall-through)?"""
    if not stmts:
        return False
    last = stmts[-1]
    t = last.type
    if t in ("break_statement", "return_statement", "continue_statement", "goto_statement", "throw_statement"):
        return True
    if t == "expression_statement":
        txt = _t(last)
        if _TERMINATOR_CALLS.match(txt):
            return True
        return False
    if t == "compound_statement":
        return terminates(_named_statements(last))
    if t == "if_statement":
        cons = last.child_by_field_name("consequence")
        alt = last.child_by_field_name("alternative")
        if cons is None or alt is None:
            return False
        alt_stmts = _named_statements(alt)
        return terminates([cons]) and terminates(alt_stmts)
    return False


def case_groups(switch_body) -> list[list]:
    """Consecutive case statements sharing one body: [[case A:, case B: body], [default: body], ...]."""
    groups, cur = [], []
    for c in switch_body.named_children:
        if c.type != "case_statement":
            continue
        cur.append(c)
        if _case_body(c):
            groups.append(cur)
            cur = []
    if cur:
        groups.append(cur)
    return groups


def _is_unbraced_body(node) -> bool:
    p = node.parent
    if p is None:
        return False
    if p.type == "else_clause":
        return True
    if p.type in ("if_statement", "for_statement", "for_range_loop", "while_statement", "do_statement"):
        return node != p.child_by_field_name("condition")
    return False


def _enclosing(node, func) -> list[str]:
    """Headers of the control constructs around ``node``, outermost first."""
    out = []
    p = node.parent
    while p is not None and p != func:
        t = p.type
        if t == "if_statement":
            c = p.child_by_field_name("condition")
            out.append("if " + (norm(c) if c is not None else ""))
        elif t == "else_clause":
            out.append("else")
        elif t == "switch_statement":
            c = p.child_by_field_name("condition")
            out.append("switch " + (norm(c) if c is not None else ""))
        elif t == "case_statement" and p != node:
            v = _case_value(p)
            out.append(("case " + norm(v) + " :") if v is not None else "default :")
        elif t in ("for_statement", "for_range_loop", "while_statement", "do_statement"):
            body = p.child_by_field_name("body")
            head = _t(p)[: (body.start_byte - p.start_byte) if body is not None else 60]
            out.append(" ".join(head.split())[:120])
        p = p.parent
    return list(reversed(out))


def _siblings(node) -> tuple[str, str]:
    """Normalized text of the statements just before and after ``node`` in its block."""
    p = node.parent
    if p is None:
        return "", ""
    sibs = [c for c in p.named_children if c.type != "comment" and c != (_case_value(p) if p.type == "case_statement" else None)]
    try:
        i = sibs.index(node)
    except ValueError:
        return "", ""
    before = _head(sibs[i - 1]) if i > 0 else ""
    after = _head(sibs[i + 1]) if i + 1 < len(sibs) else ""
    return before, after


def _head(node) -> str:
    """One-line identity of a statement: simple ones whole, control ones by their header."""
    t = node.type
    if t == "case_statement":
        v = _case_value(node)
        return ("case " + norm(v) + " :") if v is not None else "default :"
    if t in ("if_statement", "switch_statement", "while_statement"):
        c = node.child_by_field_name("condition")
        return t.split("_")[0] + " " + (norm(c) if c is not None else "")
    if t in ("for_statement", "for_range_loop", "do_statement"):
        body = node.child_by_field_name("body")
        head = _t(node)[: (body.start_byte - node.start_byte) if body is not None else 60]
        return " ".join(head.split())[:160]
    return norm(node)[:300]


def _path(node, func) -> list[str]:
    out = []
    n = node
    while n is not None and n != func:
        out.append(n.type)
        n = n.parent
    return list(reversed(out))[:24]


def _depth(node, func) -> int:
    d = 0
    n = node.parent
    while n is not None and n != func:
        if n.type in _CONTROL:
            d += 1
        n = n.parent
    return d


def _descendants(node) -> list:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.children)
    return out


def _declared_names(decl) -> set[str]:
    """Names a declaration introduces (``const X &A = ..., *B;`` -> {A, B}; ``auto [x, y] = ...`` -> {x, y})."""
    out = set()
    for d in decl.children_by_field_name("declarator"):
        n = d
        while n is not None and n.type not in ("identifier", "structured_binding_declarator"):
            n = n.child_by_field_name("declarator") or next(
                (c for c in n.named_children if c.type in ("identifier", "structured_binding_declarator")), None)
        if n is None:
            continue
        if n.type == "identifier":
            out.add(_t(n))
        else:
            out.update(_t(x) for x in n.named_children if x.type == "identifier")
    return out


def _breaks_out(stmts: list) -> list:
    """break statements in ``stmts`` that would leave the enclosing switch (not inside a nested loop/switch)."""
    out = []
    stack = list(stmts)
    while stack:
        n = stack.pop()
        if n.type == "break_statement":
            out.append(n)
            continue
        if n.type in _LOOPS or n.type == "lambda_expression":
            continue
        stack.extend(n.named_children)
    return out


# --------------------------------------------------------------------------- proposals
def find_function(tree):
    stack = [tree.root_node]
    while stack:
        n = stack.pop()
        if n.type == "function_definition" and n.child_by_field_name("body") is not None:
            return n
        stack.extend(reversed(n.children))
    return None


def propose_edits(text: str, names: TargetNames, operators: Iterable[str] = OPERATORS) -> list[BackendEdit]:
    """Every site of every operator in ``text`` (one function definition), in the walk's
    priority order: operator order, then (inner ``if``s first) source order."""
    ops = [o for o in OPERATORS if o in set(operators)]
    data = text.encode()
    tree = cpp_parser().parse(prepare_cpp(data))
    func = find_function(tree)
    if func is None:
        return []
    body = func.child_by_field_name("body")
    if body is None or body.type != "compound_statement":
        return []
    out: dict[str, list[BackendEdit]] = {o: [] for o in ops}
    top = _named_statements(body)
    last_top = top[-1] if top else None

    idents_at: list = []

    def used_after(node, names_: set[str]) -> bool:
        if not idents_at:
            idents_at.extend((n.start_byte, _t(n)) for n in _descendants(body)
                             if n.type in ("identifier", "field_identifier", "type_identifier"))
        return any(pos >= node.end_byte and name in names_ for pos, name in idents_at)

    def mk(op, variant, start, end, repl, site, description) -> BackendEdit:
        frag = data[site.start_byte:site.end_byte].decode("utf-8", errors="replace")
        block = site.parent
        while block is not None and block.type not in ("compound_statement", "case_statement"):
            block = block.parent
        raw_block = data[block.start_byte:block.end_byte] if block is not None else b""
        key = "|".join([op, variant, _h(" ".join(frag.split())), hashlib.sha256(raw_block).hexdigest()[:12]])

        def anchor() -> dict:
            before, after = _siblings(site)
            return {"enclosing": _enclosing(site, func), "header": _head(site), "before": before, "after": after,
                    "path": _path(site, func)}

        return BackendEdit(op, CARRIERS[op], variant, Edit(start, end, repl), site.start_byte, site.end_byte, frag,
                           description, _depth(site, func), None, key, _anchor_fn=anchor,
                           _tids_fn=lambda: [i for i in identifiers_in(site) if names.is_target(i)])

    stack = [body]
    nodes = []
    while stack:
        n = stack.pop()
        nodes.append(n)
        stack.extend(reversed(n.named_children))
    nodes.sort(key=lambda n: n.start_byte)

    for n in nodes:
        t = n.type
        if t == "switch_statement":
            sbody = n.child_by_field_name("body")
            if sbody is None:
                continue
            groups = case_groups(sbody)
            for gi, group in enumerate(groups):
                prev_falls = gi > 0 and not terminates(_case_body(groups[gi - 1][-1]))
                if "drop_case_label" in out and len(group) > 1:
                    for c in group:
                        if _is_default(c):
                            continue
                        colon = next((x for x in c.children if x.type == ":"), None)
                        if colon is None:
                            continue
                        s, e = (line_span(data, c.start_byte, colon.end_byte) if c != group[-1]
                                else (c.start_byte, colon.end_byte))
                        if c == group[-1]:
                            # the body moves to the previous label: drop the label and the blank after it
                            while e < len(data) and data[e:e + 1] in (b" ", b"\t"):
                                e += 1
                            if data[e:e + 1] == b"\n":
                                ls = data.rfind(b"\n", 0, s) + 1
                                if data[ls:s].strip() == b"":
                                    s, e = ls, e + 1
                        edit = mk("drop_case_label", "label", s, e, "", c,
                                  f"drop the label `{' '.join(_t(c).split())[:60].split(':')[0]}:` (its body stays with the other labels)")
                        edit.site_end = colon.end_byte
                        edit.fragment = data[c.start_byte:colon.end_byte].decode("utf-8", errors="replace")
                        out["drop_case_label"].append(edit)
                if "drop_case_arm" in out and not any(_is_default(c) for c in group) and not prev_falls \
                        and _case_body(group[-1]):
                    s, e = line_span(data, group[0].start_byte, group[-1].end_byte)
                    site = group[0] if len(group) == 1 else None
                    edit = mk("drop_case_arm", "arm", s, e, "", group[0],
                              f"drop the arm `{' '.join(_t(group[0]).split())[:60]}`")
                    edit.site_start, edit.site_end = group[0].start_byte, group[-1].end_byte
                    edit.fragment = data[group[0].start_byte:group[-1].end_byte].decode("utf-8", errors="replace")
                    if site is None:
                        edit._tids_fn = (lambda group=group: list(dict.fromkeys(
                            i for c in group for i in identifiers_in(c) if names.is_target(i))))
                    out["drop_case_arm"].append(edit)
            if "switch_to_default" in out:
                e = _switch_to_default(n, groups, data, mk)
                if e is not None:
                    out["switch_to_default"].append(e)
        elif t == "if_statement" and "drop_if_branch" in out:
            out["drop_if_branch"].extend(_if_edits(n, data, mk))
        elif t in _STATEMENT_TYPES and "drop_target_statement" in out:
            p = n.parent
            if p is None or p.type not in ("compound_statement", "case_statement"):
                continue
            if p.type == "case_statement" and n == _case_value(p):
                continue
            if n == last_top:
                continue
            if p.type == "case_statement":
                stmts = _case_body(p)
                if stmts and n == stmts[-1] and terminates([n]):
                    continue
            if not any(names.is_target(i) for i in identifiers_in(n)):
                continue
            if t == "declaration" and used_after(n, _declared_names(n)):
                continue
            s, e = line_span(data, n.start_byte, n.end_byte)
            out["drop_target_statement"].append(mk("drop_target_statement", "", s, e, "", n,
                                                   f"drop `{' '.join(_t(n).split())[:70]}`"))
    if "drop_if_branch" in out:
        out["drop_if_branch"].sort(key=lambda e: (-e.depth, e.site_start))
    result = []
    for o in ops:
        result.extend(out[o])
    return result


def _if_edits(n, data: bytes, mk) -> list[BackendEdit]:
    out = []
    cond = n.child_by_field_name("condition")
    alt = n.child_by_field_name("alternative")
    cons = n.child_by_field_name("consequence")
    if cons is None:
        return out
    header = "if " + (norm(cond) if cond is not None else "")
    parent_else = n.parent if n.parent is not None and n.parent.type == "else_clause" else None
    if alt is None:
        if parent_else is not None:
            # `... else if (c) S` with nothing after: the whole else clause goes
            owner = parent_else.parent
            prev = owner.child_by_field_name("consequence") if owner is not None else None
            s = prev.end_byte if prev is not None else parent_else.start_byte
            out.append(mk("drop_if_branch", "whole", s, parent_else.end_byte, "", n,
                          f"drop the branch `else {header}`"))
        elif _is_unbraced_body(n):
            out.append(mk("drop_if_branch", "whole", n.start_byte, n.end_byte, "{}", n, f"drop `{header}` and its branch"))
        else:
            s, e = line_span(data, n.start_byte, n.end_byte)
            out.append(mk("drop_if_branch", "whole", s, e, "", n, f"drop `{header}` and its branch"))
        return out
    alt_stmts = [c for c in alt.named_children if c.type != "comment"]
    if len(alt_stmts) == 1:
        repl = data[alt_stmts[0].start_byte:alt.end_byte].decode("utf-8", errors="replace")
        edit = mk("drop_if_branch", "then", n.start_byte, n.end_byte, repl, n,
                  f"drop the guarded branch of `{header}`, keep its else branch")
        out.append(edit)
    out.append(mk("drop_if_branch", "else", cons.end_byte, alt.end_byte, "", n,
                  f"drop the else branch of `{header}`"))
    out[-1].site_start, out[-1].site_end = alt.start_byte, alt.end_byte
    out[-1].fragment = data[alt.start_byte:alt.end_byte].decode("utf-8", errors="replace")
    return out


def _dedent_tail(data: bytes, outer: int, inner: int, text: str) -> str:
    """``text`` (starting at byte ``inner``) moved to byte ``outer``'s line: its following lines lose
    the extra indentation the inner position had."""
    def indent(pos: int) -> int:
        ls = data.rfind(b"\n", 0, pos) + 1
        return len(data[ls:pos]) - len(data[ls:pos].lstrip())
    delta = indent(inner) - indent(outer)
    if delta <= 0 or "\n" not in text:
        return text
    lines = text.split("\n")
    return "\n".join([lines[0]] + [ln[delta:] if ln[:delta].strip() == "" else ln.lstrip() for ln in lines[1:]])


def _switch_to_default(n, groups, data: bytes, mk) -> Optional[BackendEdit]:
    dgroup = next((g for g in groups if any(_is_default(c) for c in g)), None)
    header = "switch " + (norm(n.child_by_field_name("condition")) if n.child_by_field_name("condition") is not None else "")
    unbraced = _is_unbraced_body(n)
    if dgroup is None:
        repl = ""
        desc = f"drop `{header}` (no default path)"
    else:
        stmts = _case_body(dgroup[-1])
        if stmts and dgroup is not groups[-1] and not terminates(stmts):
            return None  # the default path falls through into another arm
        keep = list(stmts)
        if keep and keep[-1].type == "break_statement":
            keep = keep[:-1]
        if _breaks_out(keep):
            return None
        if not keep:
            repl = ""
        else:
            repl = _dedent_tail(data, n.start_byte, keep[0].start_byte,
                                data[keep[0].start_byte:keep[-1].end_byte].decode("utf-8", errors="replace"))
            if any(k.type == "declaration" for k in keep) or unbraced or len(keep) > 1 and n.parent is not None \
                    and n.parent.type not in ("compound_statement", "case_statement"):
                repl = "{\n" + repl + "\n}"
        desc = f"replace `{header}` by its default path"
    if unbraced and not repl:
        repl = "{}"
    if repl:
        s, e = n.start_byte, n.end_byte
    else:
        s, e = line_span(data, n.start_byte, n.end_byte)
    return mk("switch_to_default", "default" if dgroup is not None else "no_default", s, e, repl, n, desc)
