"""Asynchronous copies written in inline PTX, found by meaning (issue 19: detection whatever the
spelling): `cp.async.{ca,cg}.shared.global [dst], [src], N;` issued by an `asm` statement, by a
function-like macro around one (`CP_ASYNC_CG(dst, src, bytes)`), or by a device function around
one, and the group calls that order them (`cp.async.commit_group`, `cp.async.wait_group N`,
`cp.async.wait_all`) in the same three spellings.

The PTX destination is a 32-bit shared-window address. A copy is a site only where that address
is `__cvta_generic_to_shared(P)` (possibly cast), directly or through a local initialised so and
never assigned again, and nothing P reads is assigned between that local's declaration and the
copy: then P, a generic pointer to the same bytes, can replace it. Forms with a source-size
operand (zero fill) are not copies this module reports. async_copy_to_sync rewrites the copies;
drop_pipeline_sync deletes the group calls once no copy is left.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Optional

from tree_sitter import Node

from corpora.code.nodes import call_name
from corpora.code.parse import text, walk
from corpora.code.source import Source, expand_macro
from mining.operators.nodes import split_top

# `cp.async.cg.shared.global.L2::128B [%0], [%1], 16;` -- no fourth (src-size) operand
_COPY = re.compile(r"cp\.async\.c[ag]\.shared\.global(?:\.L2::\d+B)?\s*\[\s*%(\d+)\s*\]\s*,\s*"
                   r"\[\s*%(\d+)\s*\]\s*,\s*(%\d+|\d+)\s*;")
_ANY_COPY = re.compile(r"cp\.async\.c[ag]\.shared")
_GROUP = re.compile(r"^\s*cp\.async\.(commit_group|wait_group\s+(%\d+|\d+)|wait_all)\s*;\s*$")
_OPERAND = re.compile(r'^\s*"[^"]*"\s*\((.*)\)\s*$', re.S)
_CVTA = re.compile(r"^__cvta_generic_to_shared\s*\((.*)\)$", re.S)


@dataclass(frozen=True)
class PtxCopy:
    """One copy as PTX operands: destination (32-bit shared address), source pointer, byte count."""
    dst: str
    src: str
    size: str


@dataclass(frozen=True)
class CopySite:
    stmt: Node  # the expression statement to replace
    dst: str  # generic pointer to the shared destination
    src: str  # generic pointer to the global source
    size: int


def _sections(asm: str) -> list[str]:
    """An `asm(...)` text split at its top-level colons outside string literals: template, outputs,
    inputs, clobbers."""
    body = asm[asm.index("(") + 1:asm.rindex(")")]
    parts, cur = [], []
    depth, quote = 0, False
    for i, ch in enumerate(body):
        if ch == '"' and (i == 0 or body[i - 1] != "\\"):
            quote = not quote
        elif not quote and ch in "([{":
            depth += 1
        elif not quote and ch in ")]}":
            depth -= 1
        if ch == ":" and not quote and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _strings(asm: str) -> str:
    """The concatenated template of an `asm(...)` text (adjacent string literals, escapes read)."""
    return "".join(bytes(x, "utf-8").decode("unicode_escape")
                   for x in re.findall(r'"((?:[^"\\]|\\.)*)"', _sections(asm)[0]))


def _operands(asm: str) -> Optional[list[str]]:
    """Operand expressions in %-number order (outputs, then inputs) of an `asm(...)` text."""
    parts = _sections(asm)
    ops = []
    for section in parts[1:3]:
        for o in (x for x in split_top(section, ",") if x):
            m = _OPERAND.match(o)
            if m is None:
                return None
            ops.append(m.group(1).strip())
    return ops


def asm_copy(asm: str) -> Optional[PtxCopy]:
    """The copy an `asm` text issues, or None (not exactly one plain cp.async copy)."""
    tmpl = _strings(asm)
    copies = _COPY.findall(tmpl)
    if len(copies) != 1 or len(_ANY_COPY.findall(tmpl)) != 1:
        return None
    ops = _operands(asm)
    if ops is None:
        return None
    d, s, n = copies[0]
    if int(d) >= len(ops) or int(s) >= len(ops):
        return None
    if n.startswith("%"):
        if int(n[1:]) >= len(ops):
            return None
        n = ops[int(n[1:])]
    return PtxCopy(ops[int(d)], ops[int(s)], n)


def is_group_asm(asm: str) -> bool:
    """Only group bookkeeping (commit / wait), nothing else, in this `asm` text."""
    lines = [x for x in re.split(r"[\n]", _strings(asm)) if x.strip()]
    return bool(lines) and all(_GROUP.match(x) for x in lines)


def _strip_casts(e: str) -> str:
    e = e.strip()
    while True:
        m = re.fullmatch(r"\(\s*(?:unsigned(?:\s+int)?|uint32_t|int|unsigned\s+long(?:\s+long)?|size_t)\s*\)\s*(.*)", e, re.S) \
            or re.fullmatch(r"static_cast\s*<[^<>]*>\s*\((.*)\)", e, re.S) or re.fullmatch(r"\((.*)\)", e, re.S)
        if m is None or m.group(1).count("(") != m.group(1).count(")"):
            return e
        e = m.group(1).strip()


def macro_forms(src: Source) -> tuple[dict[str, tuple[list[str], PtxCopy]], set[str]]:
    """Function-like macros around one copy (NAME -> (params, copy)) and around group calls."""
    copies, groups = {}, set()
    for name, (params, body) in src.function_macros.items():
        m = re.search(r"\basm\b", body)
        if m is None:
            continue
        asm = body[m.start():].rstrip("; ")
        c = asm_copy(asm)
        if c is not None:
            copies[name] = (params, c)
        elif is_group_asm(asm):
            groups.add(name)
    return copies, groups


def _definition(src: Source, f) -> Optional[Node]:
    node = src.tree.root_node.descendant_for_byte_range(f.start_byte, f.start_byte)
    while node is not None and node.type != "function_definition":
        node = node.parent
    return node


def _asm_nodes(node: Node) -> list[Node]:
    return [n for n in walk(node) if n.type == "gnu_asm_expression"]


def function_forms(src: Source) -> tuple[dict[str, tuple[list[str], PtxCopy, Node]], set[str]]:
    """Device functions whose body is one copy (NAME -> (params, copy, definition)) or group calls only."""
    copies, groups = {}, set()
    for f in src.funcs:
        if f.is_kernel or not f.name:
            continue
        node = _definition(src, f)
        if node is None:
            continue
        asms = [text(n) for n in _asm_nodes(node)]
        if len(asms) == 1:
            c = asm_copy(asms[0])
            if c is not None:
                copies[f.name] = ([p.name for p in f.params], c, node)
        if asms and all(is_group_asm(a) for a in asms):
            groups.add(f.name)
    return copies, groups


def _writes(scope: Node, names: set[str], lo: int, hi: int) -> bool:
    """Is any of `names` assigned or incremented in `scope` between bytes lo and hi?"""
    for n in walk(scope):
        if lo <= n.start_byte < hi and n.type in ("assignment_expression", "update_expression"):
            target = n.child_by_field_name("left") or n.child_by_field_name("argument")
            if target is not None and text(target).strip() in names:
                return True
    return False


def _generic_pointer(dst: str, func: Node, stmt: Node) -> Optional[str]:
    """The generic pointer P behind a shared address `dst` used by `stmt` in function `func`:
    `__cvta_generic_to_shared(P)`, or a local initialised so, never assigned in its block, with
    nothing P reads assigned between its declaration and `stmt`."""
    e = _strip_casts(dst)
    m = _CVTA.match(e)
    if m is not None:
        return m.group(1).strip()
    if not re.fullmatch(r"[A-Za-z_]\w*", e):
        return None
    best = None  # the innermost visible declaration of e before stmt
    for d in walk(func):
        if d.type != "init_declarator" or d.start_byte >= stmt.start_byte:
            continue
        name = d.child_by_field_name("declarator")
        block = d.parent.parent if d.parent is not None else None
        if name is None or text(name).strip() != e or block is None or \
                not (block.start_byte <= stmt.start_byte < block.end_byte):
            continue
        if best is None or d.start_byte > best[0].start_byte:
            best = (d, block)
    if best is None:
        return None
    d, block = best
    m = _CVTA.match(_strip_casts(text(d.child_by_field_name("value"))))
    if m is None or _writes(block, {e}, block.start_byte, block.end_byte):
        return None
    p = m.group(1).strip()
    if _writes(func, set(re.findall(r"\b[A-Za-z_]\w*\b", p)), d.end_byte, stmt.start_byte):
        return None
    return p


def _literal_size(e: str) -> Optional[int]:
    e = _strip_casts(e)
    return int(e) if re.fullmatch(r"4|8|16", e) else None


def copy_sites(src: Source) -> Iterator[CopySite]:
    """Every statement that issues one plain cp.async copy whose shared destination has a generic
    pointer (see the module docstring), with its byte count (4, 8 or 16)."""
    macros, _ = macro_forms(src)
    funcs, _ = function_forms(src)
    for f in src.funcs:
        node = _definition(src, f)
        if f.name in funcs or node is None:
            continue
        for stmt in walk(node):
            if stmt.type != "expression_statement" or not stmt.named_children:
                continue
            e = stmt.named_children[0]
            args = [text(a) for a in e.child_by_field_name("arguments").named_children] \
                if e.type == "call_expression" else []
            if e.type == "gnu_asm_expression":
                c = asm_copy(text(e))
                p = _generic_pointer(c.dst, node, stmt) if c is not None else None
                site = _site(stmt, p, c.src, c.size) if p is not None else None
            elif e.type == "call_expression" and call_name(e) in macros and len(args) == len(macros[call_name(e)][0]):
                params, c = macros[call_name(e)]
                dst, srcp, size = (expand_macro(x, params, args) for x in (c.dst, c.src, c.size))
                p = _generic_pointer(dst, node, stmt)
                site = _site(stmt, p, srcp, size) if p is not None else None
            elif e.type == "call_expression" and call_name(e) in funcs and len(args) == len(funcs[call_name(e)][0]):
                site = _function_site(src, funcs[call_name(e)], stmt, args)
            else:
                continue
            if site is not None:
                yield site


def _function_site(src: Source, form, stmt: Node, args: list[str]) -> Optional[CopySite]:
    """A call of a device function around one copy: its shared address must come from one of its
    pointer parameters (never assigned in it), its source be a parameter, its size a literal."""
    params, c, node = form
    asm = next(iter(_asm_nodes(node)), None)
    if asm is None:
        return None
    inner = _generic_pointer(c.dst, node, asm.parent)
    value = dict(zip(params, args))
    s = _strip_casts(c.src)
    if inner is None or inner not in value or s not in value or _writes(node, {inner}, node.start_byte, node.end_byte):
        return None
    return _site(stmt, value[inner], value[s], value.get(c.size, c.size))


def _site(stmt: Node, dst: str, srcp: str, size: str) -> Optional[CopySite]:
    n = _literal_size(size)
    if n is None:
        return None
    return CopySite(stmt, " ".join(_strip_casts(dst).split()), " ".join(_strip_casts(srcp).split()), n)


def issues_copies(src: Source) -> bool:
    """Does any function body (not a macro definition) still issue an asynchronous copy?"""
    if re.search(rb"\b(__pipeline_memcpy_async|memcpy_async)\s*\(", src.code):
        return True
    macros, _ = macro_forms(src)
    funcs, _ = function_forms(src)
    for f in src.funcs:
        if f.name in funcs:
            continue
        body = src.func_code(f).decode("utf-8", "replace")
        if _ANY_COPY.search(body) or any(re.search(r"\b%s\s*\(" % re.escape(n), body) for n in (*macros, *funcs)):
            return True
    return False


def group_statements(src: Source) -> Iterator[Node]:
    """Statements that only commit or wait on copy groups: an asm of group instructions, or a call
    of a macro or device function that is one."""
    _, gmacros = macro_forms(src)
    _, gfuncs = function_forms(src)
    names = gmacros | gfuncs
    for f in src.funcs:
        if f.name in gfuncs:
            continue
        node = _definition(src, f)
        if node is None:
            continue
        for stmt in walk(node):
            if stmt.type != "expression_statement" or not stmt.named_children:
                continue
            e = stmt.named_children[0]
            if (e.type == "gnu_asm_expression" and is_group_asm(text(e))) or \
                    (e.type == "call_expression" and call_name(e) in names):
                yield stmt
