"""shrink_work_constant: a compile-time constant that sizes the work of one thread (a pack or vector
width, a register tile extent, a coarsening factor, an unrolled per-thread loop) becomes 1, at the
one place that defines it; everything that uses the constant follows, the launch geometry
included (issue 19: generic shrink of per-thread work).

    #define PackSize 4                       ->  #define PackSize 1
    ks_launch<8>(x, y, n);                   ->  ks_launch<1>(x, y, n);
    Kernel<float, 2, cols, 32><<<g, b>>>()   ->  Kernel<float, 1, cols, 32><<<g, b>>>()

Detection by meaning: the constant is an integer literal >= 2 that defines a name - an
object-like macro, a `constexpr` / `const` integer, or a non-type template parameter given by a
literal template argument at a call or launch in this file - and that name (followed through
template arguments into the templates it instantiates, types included) sizes per-thread work in
device code: the extent of a thread-local array or of an array member of a struct, the bound of a
loop, or a factor of the global thread index. Names that stride global data directly
(`K[j * HEAD_DIM + d]`: a dimension of the problem) and names that size block-level resources are
not sites: a `__shared__` extent, a launch's block size, `__launch_bounds__`, a shuffle's width (the
block shape does not change the work of one thread, it changes how many threads share it).

A factor written as a literal where it is used (`idx = 8 * gidx`, `half pack[8]`, `i < 8`,
`256 / 8` at the launch) has no one definition: `literal_work_factor.py` finds it by what it
does and carries every use in one edit.

Why 1 and not half: 1 is the unvectorized, uncoarsened form every such kernel reduces to; a
kernel whose index arithmetic only holds for the original width (hard-coded offsets) fails the
gate at 1 as it would at any other value, and the walk moves on. Correctness is the gate's call.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.operators.base import Edit, Operator, Pair, Rewrite
from mining.operators.literal_work_factor import literal_factor_edits
from corpora.code.parse import text, walk

_DEVICE = re.compile(rb"\b(__global__|__device__)\b")
_BLOCK_USE = re.compile(r"__launch_bounds__\s*\(\s*{X}\b|<<<[^,>]*,\s*{X}\s*(?:>>>|,)|\bdim3\s+\w*block\w*\s*\(\s*{X}\s*[,)]|"
                        r"__shfl\w*\s*\([^;]*,\s*{X}\s*\)|\b__shared__\b[^;]*\[[^\];]*\b{X}\b")


@dataclass(frozen=True)
class WorkConstant:
    name: str
    value: int
    start: int  # the literal's bytes
    end: int
    how: str  # macro | constexpr | template_arg


def _templates(src: Source) -> dict[str, list[tuple[list[str], Node]]]:
    """Template name -> [(parameter names in order, the templated entity)]."""
    out: dict[str, list[tuple[list[str], Node]]] = {}
    for t in src.nodes("template_declaration"):
        plist = t.child_by_field_name("parameters")
        params = []
        for p in (plist.named_children if plist is not None else []):
            names = [c for c in walk(p) if c.type in ("identifier", "type_identifier") and
                     p.child_by_field_name("declarator") is not None or c.type == "identifier"]
            decl = p.child_by_field_name("declarator") if hasattr(p, "child_by_field_name") else None
            name = None
            if decl is not None:
                ids = [c for c in walk(decl) if c.type == "identifier"]
                name = text(ids[0]) if ids else None
            elif names:
                name = text(names[-1])
            params.append(name or "")
        entity = next((c for c in t.named_children if c.type in ("function_definition", "struct_specifier",
                                                                  "class_specifier", "union_specifier",
                                                                  "alias_declaration", "declaration")), None)
        if entity is None:
            continue
        name = _entity_name(entity)
        if name:
            out.setdefault(name, []).append((params, entity))
    return out


def _entity_name(entity: Node) -> Optional[str]:
    if entity.type in ("struct_specifier", "class_specifier", "union_specifier", "alias_declaration"):
        n = entity.child_by_field_name("name")
        return text(n) if n is not None else None
    fd = next((d for d in walk(entity) if d.type == "function_declarator"), None)
    if fd is None:
        return None
    n = fd.child_by_field_name("declarator")
    while n is not None and n.type in ("qualified_identifier", "template_function"):
        n = n.child_by_field_name("name")
    return text(n) if n is not None else None


def _in_device(src: Source, node: Node) -> bool:
    p = node
    while p is not None and p.type != "function_definition":
        p = p.parent
    if p is None:
        return True  # struct members and aliases: judged where they are instantiated
    body = p.child_by_field_name("body")
    head = src.code[p.start_byte:body.start_byte if body is not None else p.end_byte]
    return bool(_DEVICE.search(head))


def _mentions(node: Node, name: str) -> bool:
    return any(n.type in ("identifier", "type_identifier") and text(n) == name for n in walk(node))


def _per_thread(src: Source, scope: Node, name: str, templates, depth: int = 0, seen=None) -> bool:
    """`name` sizes per-thread work inside `scope` (followed through template arguments)."""
    seen = set() if seen is None else seen
    if depth > 4 or (scope.start_byte, name) in seen:
        return False
    seen.add((scope.start_byte, name))
    scope_text = src.code[scope.start_byte:scope.end_byte].decode("utf-8", "replace")
    if _blocky(scope_text, name):
        return False
    for n in walk(scope):
        if n.type == "array_declarator":
            size = n.child_by_field_name("size")
            decl = n.parent
            while decl is not None and decl.type not in ("declaration", "field_declaration", "parameter_declaration"):
                decl = decl.parent
            if size is not None and _mentions(size, name) and decl is not None and decl.type != "parameter_declaration" \
                    and not re.search(rb"\b__shared__\b", src.code[decl.start_byte:decl.end_byte]) and \
                    (decl.type == "field_declaration" or _in_device(src, n)):
                return True
        elif n.type == "for_statement":
            cond, init = n.child_by_field_name("condition"), n.child_by_field_name("initializer")
            # a per-thread loop: it starts at a constant, not at the thread's place in the grid
            if cond is not None and _mentions(cond, name) and _in_device(src, n) and init is not None and \
                    not re.search(r"\b(threadIdx|blockIdx|blockDim|gridDim)\b", text(init)) and \
                    not re.search(r"\b(tid|lane|warp\w*|idx|gid)\b", text(init)):
                return True
        elif n.type == "binary_expression" and text(n.child_by_field_name("operator") or n.children[1]) == "*":
            a, b = n.child_by_field_name("left"), n.child_by_field_name("right")
            if a is not None and b is not None and _in_device(src, n):
                for x, y in ((a, b), (b, a)):
                    if text(x).strip("() ") == name and re.search(r"threadIdx\.x", text(y)) and \
                            re.search(r"blockIdx\.x", text(y)):
                        return True
        elif n.type == "template_argument_list":
            owner = n.parent
            tname = None
            if owner is not None and owner.type in ("template_type", "template_function"):
                nm = owner.child_by_field_name("name")
                tname = text(nm).split("::")[-1] if nm is not None else None
            args = [c for c in n.named_children if c.type != "comment"]
            for i, a in enumerate(args):
                if not _mentions(a, name) or tname not in templates:
                    continue
                for params, entity in templates[tname]:
                    if i < len(params) and params[i] and \
                            _per_thread(src, entity, params[i], templates, depth + 1, seen):
                        return True
    return False


def _chain_siblings(call: Node, tname: str) -> list[list[Node]]:
    """Template arguments of calls of the same template in the other branches of the if-else chain
    the call is a branch of (a dispatch on the problem's size)."""
    stmt = call.parent
    if stmt is None or stmt.type != "expression_statement":
        return []
    top = stmt.parent
    while top is not None and top.type in ("if_statement", "else_clause", "compound_statement") and \
            top.parent is not None and top.parent.type in ("if_statement", "else_clause"):
        top = top.parent
    if top is None or top.type != "if_statement":
        return []
    out = []
    for c in walk(top):
        if c.type == "call_expression" and not (c.start_byte == call.start_byte and c.end_byte == call.end_byte):
            fn = c.child_by_field_name("function")
            while fn is not None and fn.type == "qualified_identifier":
                fn = fn.child_by_field_name("name")
            if fn is not None and fn.type == "template_function" and text(fn.child_by_field_name("name")) == tname:
                targs = fn.child_by_field_name("arguments")
                out.append([x for x in (targs.named_children if targs is not None else []) if x.type != "comment"])
    return out


def _data_shape(src: Source, name: str) -> bool:
    """`name` strides global data directly (`K[j * HEAD_DIM + d]`, `Q + row * HEAD_DIM`): it is a
    dimension of the problem's arrays, not a choice of how much work a thread takes."""
    for f in src.funcs:
        fn = src.func_node(f)
        if fn is None or not re.search(rb"\b(__global__|__device__)\b", src.code[f.start_byte:f.end_byte][:400]):
            continue
        ptrs = {p.name for p in f.params if p.is_pointer}
        for n in walk(fn):
            if n.type == "subscript_expression":
                base = n.child_by_field_name("argument")
                idx = n.child_by_field_name("indices")
                if base is not None and base.type == "identifier" and text(base) in ptrs and idx is not None and \
                        _mentions(idx, name):
                    return True
            elif n.type == "binary_expression" and text(n.child_by_field_name("operator") or n.children[1]) == "+":
                a, b = n.child_by_field_name("left"), n.child_by_field_name("right")
                for x, y in ((a, b), (b, a)):
                    if x is not None and y is not None and x.type == "identifier" and text(x) in ptrs and \
                            _mentions(y, name):
                        return True
    return False


def _blocky(scope_text: str, name: str) -> bool:
    x = re.escape(name)
    return bool(re.search(_BLOCK_USE.pattern.replace("{X}", x), scope_text))


MAX_WORK = 64  # a thread's pack / tile / coarsening factor; larger constants size the problem or the grid


def work_constants(src: Source, wanted=lambda v: 2 <= v <= MAX_WORK) -> list[WorkConstant]:
    """Every per-thread work constant whose value `wanted` accepts (>= 2: what can shrink)."""
    templates = _templates(src)
    root = src.tree.root_node
    out: list[WorkConstant] = []
    # object-like macros and constexpr / const integers
    for m in re.finditer(rb"(?m)^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+\(?\s*(\d+)\s*\)?[ \t]*$", src.code):
        name, value = m.group(1).decode(), int(m.group(2))
        if wanted(value) and not re.search(r"warp|WARP", name) and _per_thread(src, root, name, templates) and \
                not _data_shape(src, name):
            out.append(WorkConstant(name, value, m.start(2), m.end(2), "macro"))
    for d in src.nodes("declaration"):
        if not re.search(rb"\b(constexpr|const)\b", src.code[d.start_byte:d.end_byte]):
            continue
        for c in d.named_children:
            if c.type != "init_declarator":
                continue
            nm, val = c.child_by_field_name("declarator"), c.child_by_field_name("value")
            if nm is None or val is None or nm.type != "identifier" or val.type != "number_literal":
                continue
            try:
                value = int(text(val).rstrip("uUlL"), 0)
            except ValueError:
                continue
            scope = d.parent if d.parent is not None and d.parent.type == "compound_statement" else root
            if wanted(value) and not re.search(r"warp|WARP", text(nm)) and _per_thread(src, scope, text(nm), templates) \
                    and not _data_shape(src, text(nm)):
                out.append(WorkConstant(text(nm), value, val.start_byte, val.end_byte, "constexpr"))
    # literal template arguments at calls and launches
    for call in src.nodes("call_expression"):
        fn = call.child_by_field_name("function")
        while fn is not None and fn.type == "qualified_identifier":
            fn = fn.child_by_field_name("name")
        if fn is None or fn.type != "template_function":
            continue
        tname = text(fn.child_by_field_name("name"))
        targs = fn.child_by_field_name("arguments")
        args = [c for c in (targs.named_children if targs is not None else []) if c.type != "comment"]
        case = call.parent
        while case is not None and case.type not in ("case_statement", "function_definition"):
            case = case.parent
        label = case.child_by_field_name("value") if case is not None and case.type == "case_statement" else None
        picked = _chain_siblings(call, tname)
        for i, a in enumerate(args):
            if a.type != "number_literal" or (label is not None and text(label).strip() == text(a).strip()):
                continue  # a size the dispatch picks from the problem (`case 8: f<8>()`), not a tunable
            if any(i < len(o) and text(o[i]) != text(a) for o in picked):
                continue  # `if (N <= 128) f<1>(); else if (N <= 256) f<2>(); ...`: picked by the problem
            try:
                value = int(text(a).rstrip("uUlL"), 0)
            except ValueError:
                continue
            if not wanted(value):
                continue
            for params, entity in templates.get(tname, []):
                if i < len(params) and params[i] and not re.search(r"warp|WARP", params[i]) and \
                        _per_thread(src, entity, params[i], templates):
                    out.append(WorkConstant(params[i], value, a.start_byte, a.end_byte, "template_arg"))
                    break
    uniq = {(w.start, w.end): w for w in out}
    return sorted(uniq.values(), key=lambda w: w.start)


class ShrinkWorkConstant(Operator):
    name = "shrink_work_constant"
    carrier = "thread_coarsening"
    description = "set a compile-time constant that sizes one thread's work (pack width, tile extent, coarsening) to 1"

    def edits(self, src: Source):
        for w in work_constants(src):
            yield Edit(w.start, w.end, "1")
        yield from literal_factor_edits(src)  # the same factor written as a literal where it is used


# --------------------------------------------------------------------------- forward
def forward(source: str, ctx=None) -> list:
    """The inverse: a per-thread work constant defined as 1 (macro, constexpr or literal template
    argument) is widened to 4, then 2 (two candidates; the gate keeps what is correct)."""
    from mining.operators.base import Materialization

    src = Source(source)
    out = []
    for w in work_constants(src, wanted=lambda v: v == 1):
        for width in (4, 2):
            new = (src.raw[:w.start] + str(width).encode() + src.raw[w.end:]).decode("utf-8")
            out.append(Materialization(source=new, rewrite="coarsen_work", carrier="thread_coarsening",
                                       description=f"{w.name} = {width}: {width} elements of work per thread"))
    return out


PAIR = Pair(ShrinkWorkConstant, (Rewrite("coarsen_work", "thread_coarsening", forward, prior=1.2),))
