"""A CUDA source prepared for reading: raw bytes, the same bytes with comments blanked (offsets
kept), the tree-sitter tree, its functions, and the lookups every reader asks for (positions,
nodes by type, shared arrays, macros, global pointers). Carrier detectors, operators, probes,
lifting, retrieval and the judge all read kernels through it.

All offsets are UTF-8 byte offsets into the original source.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Hashable, Iterator, Optional, TypeVar

from tree_sitter import Node

from corpora.code.nodes import declarator_name
from corpora.code.parse import FunctionSig, functions, parse_cuda, text, walk

T = TypeVar("T")


@dataclass(frozen=True)
class Site:
    carrier: str
    line: int  # 1-based line of start_byte
    start_byte: int
    end_byte: int
    function: str  # enclosing function name ("" at file scope)
    excerpt: str  # the source line(s) of the site, stripped, at most 160 characters


def line_span(data: bytes, start: int, end: int, blanked: Optional[bytes] = None) -> tuple[int, int]:
    """Widen [start, end) to whole lines (indentation and the trailing newline) when nothing else
    shares them; ``blanked`` (the same bytes with comments blanked) lets comments count as nothing."""
    check = data if blanked is None else blanked
    a = data.rfind(b"\n", 0, start) + 1
    b = data.find(b"\n", end)
    b = len(data) if b < 0 else b
    if check[a:start].strip() or check[end:b].strip():
        return start, end
    return a, min(b + 1, len(data))


def expand_macro(body: str, params: list[str], args: list[str]) -> str:
    """A function-like macro's body with each parameter replaced by its argument (parenthesized
    unless atomic)."""
    if not params:
        return body
    value = {p: (a.strip() if re.fullmatch(r"[\w.]+", a.strip()) else f"({a.strip()})") for p, a in zip(params, args)}
    return re.sub(r"\b(%s)\b" % "|".join(map(re.escape, params)), lambda m: value[m.group(1)], body)


def blank_comments(raw: bytes) -> bytes:
    """The source with every comment replaced by spaces (newlines kept): same length, same offsets."""
    tree = parse_cuda(raw)
    out = bytearray(raw)
    for node in walk(tree.root_node):
        if node.type == "comment":
            for i in range(node.start_byte, node.end_byte):
                if out[i] not in (0x0A, 0x0D):
                    out[i] = 0x20
        elif node.type == "preproc_arg":
            # tree-sitter keeps a trailing comment inside a macro's replacement text
            arg = raw[node.start_byte:node.end_byte]
            for m in re.finditer(rb'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/', arg, re.S):
                if not m.group(0).startswith(b'"'):
                    for i in range(node.start_byte + m.start(), node.start_byte + m.end()):
                        if out[i] not in (0x0A, 0x0D):
                            out[i] = 0x20
    return bytes(out)


def normalize_for_parse(code: bytes) -> bytes:
    """Blank `__align__(N)` (same length): tree-sitter-cuda does not know it and mis-parses the declaration."""
    return re.sub(rb"\b__align__\s*\([^()]*\)", lambda m: b" " * len(m.group(0)), code)


class Source:
    """One kernel file prepared for detection: raw bytes, comment-free bytes, tree, functions."""

    def __init__(self, source: str | bytes):
        self.raw = source.encode() if isinstance(source, str) else bytes(source)
        self.code = normalize_for_parse(blank_comments(self.raw))
        self.tree = parse_cuda(self.code)
        self.funcs: list[FunctionSig] = functions(self.tree)
        self._line_starts = [0] + [m.end() for m in re.finditer(rb"\n", self.raw)]

    # ---- positions
    def line_of(self, byte: int) -> int:
        lo, hi = 0, len(self._line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._line_starts[mid] <= byte:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def function_at(self, byte: int) -> Optional[FunctionSig]:
        best = None
        for f in self.funcs:
            if f.start_byte <= byte < f.end_byte and (best is None or f.start_byte >= best.start_byte):
                best = f
        return best

    def line_span(self, start: int, end: int) -> tuple[int, int]:
        """[start, end) widened to whole lines when nothing but blanks and comments shares them."""
        return line_span(self.raw, start, end, self.code)

    def excerpt(self, start: int, end: int) -> str:
        a = self.raw.rfind(b"\n", 0, start) + 1
        b = self.raw.find(b"\n", max(end - 1, start))
        b = len(self.raw) if b < 0 else b
        code = self.code[a:b].decode("utf-8", errors="replace")
        return " ".join(code.split())[:160]

    def site(self, carrier: str, start: int, end: int) -> Site:
        f = self.function_at(start)
        return Site(carrier=carrier, line=self.line_of(start), start_byte=start, end_byte=end,
                    function=f.name if f else "", excerpt=self.excerpt(start, end))

    # ---- tree helpers
    def nodes(self, *types: str, within: Optional[Node] = None) -> Iterator[Node]:
        """Nodes of these types in pre-order, in the whole tree or in ``within``'s subtree (a node of
        this tree: its subtree is the byte range it spans in the pre-order list, found by bisection,
        not walked again for every question)."""
        if within is not None:
            a, b = within.start_byte, within.end_byte
            pool = self._by_type.get(types[0], ()) if len(types) == 1 else self._preorder
            starts = self._starts_by_type.get(types[0]) if len(types) == 1 else self._preorder_starts
            if starts is None:
                starts = []
            i = bisect.bisect_left(starts, a)
            j = bisect.bisect_right(starts, b)
            return (n for n in pool[i:j] if n.end_byte <= b and (n.start_byte < b or n.start_byte == a)
                    and n.type in types)
        if len(types) == 1:
            return iter(self._by_type.get(types[0], ()))
        return (n for n in self._preorder if n.type in types)

    @cached_property
    def _preorder(self) -> list[Node]:
        # detectors ask for one node type after another: walk the tree once, not once per question
        return list(walk(self.tree.root_node))

    @cached_property
    def _by_type(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self._preorder:
            out.setdefault(n.type, []).append(n)
        return out

    @cached_property
    def _preorder_starts(self) -> list[int]:
        return [n.start_byte for n in self._preorder]  # non-decreasing: pre-order visits by position

    @cached_property
    def _starts_by_type(self) -> dict[str, list[int]]:
        return {t: [n.start_byte for n in ns] for t, ns in self._by_type.items()}

    def func_node(self, f: FunctionSig) -> Optional[Node]:
        for n in self.nodes("function_definition"):
            if n.start_byte == f.start_byte and n.end_byte == f.end_byte:
                return n
        return None

    def func_code(self, f: FunctionSig) -> bytes:
        return self.code[f.start_byte:f.end_byte]

    @cached_property
    def shared_names(self) -> dict[str, Node]:
        """Names declared `__shared__` (static or extern) -> their declaration node."""
        out: dict[str, Node] = {}
        for decl in self.nodes("declaration"):
            if not re.search(rb"\b__shared__\b", self.code[decl.start_byte:decl.end_byte]):
                continue
            for d in decl.named_children:
                name = declarator_name(d)
                if name:
                    out[name] = decl
        return out

    @cached_property
    def shared_decls(self) -> list[tuple[Node, str, list[Node]]]:
        """(declaration, name, [dimension expressions]) for every `__shared__` array."""
        out = []
        for decl in self.nodes("declaration"):
            if not re.search(rb"\b__shared__\b", self.code[decl.start_byte:decl.end_byte]):
                continue
            for d in decl.named_children:
                if d.type not in ("array_declarator", "init_declarator"):
                    continue
                name = declarator_name(d)
                dims: list[Node] = []
                node = d
                while node is not None and node.type == "array_declarator":
                    size = node.child_by_field_name("size")
                    if size is not None:
                        dims.insert(0, size)
                    node = node.child_by_field_name("declarator")
                if name:
                    out.append((decl, name, dims))
        return out

    @cached_property
    def defines(self) -> dict[str, str]:
        """Object-like macros: NAME -> replacement text (comments blanked)."""
        out = {}
        for m in re.finditer(rb"(?m)^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+([^\n]*)$", self.code):
            out[m.group(1).decode()] = " ".join(m.group(2).decode("utf-8", "replace").split())
        return out

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        """A fact derived from this source, computed once whoever asks (detectors, site finders and
        the query's value model ask for the same accesses, loops and functions)."""
        memos = self.__dict__.setdefault("_memos", {})
        if key not in memos:
            memos[key] = compute()
        return memos[key]

    @cached_property
    def function_macros(self) -> dict[str, tuple[list[str], str]]:
        """Function-like macros: NAME -> (parameters, body on one line, continuations joined; a
        backslash escape inside the body, such as a string's `\\n`, is part of it)."""
        out = {}
        for m in re.finditer(rb"(?m)^[ \t]*#[ \t]*define[ \t]+(\w+)\(([^()]*)\)[ \t]*((?:[^\n\\]|\\\n|\\.)*)$", self.code):
            body = " ".join(m.group(3).decode("utf-8", "replace").replace("\\\n", " ").split())
            out[m.group(1).decode()] = ([p.strip() for p in m.group(2).decode().split(",") if p.strip()], body)
        return out

    def expand(self, expr: str, depth: int = 3) -> str:
        for _ in range(depth):
            new = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: "(" + self.defines[m.group(0)] + ")"
                         if m.group(0) in self.defines else m.group(0), expr)
            if new == expr:
                break
            expr = new
        return expr

    def global_names(self, f: FunctionSig) -> set[str]:
        """Pointer parameters of `f` and local pointers initialised from them (to a fixpoint).
        Kept per function: detectors ask once per memory access."""
        key = (f.start_byte, f.end_byte)
        if key not in self._global_names_memo:
            self._global_names_memo[key] = frozenset(self._global_names(f))
        return set(self._global_names_memo[key])

    @cached_property
    def _global_names_memo(self) -> dict[tuple[int, int], frozenset]:
        return {}

    def _global_names(self, f: FunctionSig) -> set[str]:
        names = {p.name for p in f.params if p.is_pointer}
        fn = self.func_node(f)
        if fn is None:
            return names
        decls = []
        for decl in self.nodes("declaration", within=fn):
            if re.search(rb"\b__shared__\b", self.code[decl.start_byte:decl.end_byte]):
                continue
            for d in decl.named_children:
                if d.type == "init_declarator":
                    inner = d.child_by_field_name("declarator")
                    value = d.child_by_field_name("value")
                    if inner is not None and value is not None and inner.type == "pointer_declarator":
                        decls.append((declarator_name(inner), text(value)))
        changed = True
        while changed:
            changed = False
            for name, value in decls:
                if name and name not in names and any(re.search(r"\b%s\b" % re.escape(g), value) for g in names):
                    if not any(re.search(r"\b%s\b" % re.escape(s), value) for s in self.shared_names):
                        names.add(name)
                        changed = True
        return names

    def regex(self, pattern: bytes, start: int = 0, end: Optional[int] = None, flags: int = 0):
        return re.compile(pattern, flags).finditer(self.code, start, len(self.code) if end is None else end)
