"""tree-sitter parsing, the one place a parser is made: CUDA (syntax errors, function definitions,
entry signatures), C++ (LLVM backend sources) and TableGen (.td files).

One cached parser per language and process; everything here is a pure function of the source text.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator, Optional

from tree_sitter import Language, Node, Parser, Tree


@lru_cache(maxsize=1)
def cuda_language() -> Language:
    import tree_sitter_cuda

    return Language(tree_sitter_cuda.language())


@lru_cache(maxsize=1)
def cuda_parser() -> Parser:
    return Parser(cuda_language())


def parse_cuda(source: str | bytes) -> Tree:
    data = source.encode() if isinstance(source, str) else source
    return cuda_parser().parse(data)


@lru_cache(maxsize=1)
def cpp_language() -> Language:
    import tree_sitter_cpp

    return Language(tree_sitter_cpp.language())


@lru_cache(maxsize=1)
def cpp_parser() -> Parser:
    """Plain C++ (tree-sitter-cpp errors on CUDA qualifiers and launches: CUDA goes through cuda_parser)."""
    return Parser(cpp_language())


@lru_cache(maxsize=1)
def tablegen_parser() -> Parser:
    from tree_sitter_language_pack import get_parser

    return get_parser("tablegen")


def text(node: Node) -> str:
    return node.text.decode("utf-8", errors="replace") if node.text is not None else ""


def walk(node: Node) -> Iterator[Node]:
    """Pre-order traversal without recursion (deep ASTs exist)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


@dataclass(frozen=True)
class SyntaxIssue:
    line: int  # 1-based
    column: int  # 1-based
    kind: str  # "error" | "missing"
    snippet: str


def syntax_issues(tree: Tree, limit: int = 10) -> list[SyntaxIssue]:
    issues: list[SyntaxIssue] = []
    for node in walk(tree.root_node):
        if node.type == "ERROR" or node.is_missing:
            row, col = node.start_point
            issues.append(SyntaxIssue(row + 1, col + 1, "missing" if node.is_missing else "error",
                                      text(node)[:60] if not node.is_missing else node.type))
            if len(issues) >= limit:
                break
    return issues


@dataclass(frozen=True)
class Param:
    name: str
    base_type: str  # e.g. "float", "__half", "int64_t", "unsigned long long"
    pointer_depth: int
    const: bool  # const-qualified pointee (or value)
    line: int

    @property
    def is_pointer(self) -> bool:
        return self.pointer_depth > 0


@dataclass(frozen=True)
class FunctionSig:
    name: str
    params: tuple[Param, ...]
    is_kernel: bool  # __global__
    line: int
    start_byte: int
    end_byte: int
    body_line: int = 0  # line where the body starts: the signature spans [line, body_line]


_TYPE_NODES = {"primitive_type", "type_identifier", "sized_type_specifier", "qualified_identifier",
               "template_type"}


def _declarator_name(node: Node) -> tuple[Optional[str], int]:
    """Follow pointer/reference/array declarators down to the identifier; count pointer levels."""
    depth = 0
    while node is not None:
        if node.type == "identifier":
            return text(node), depth
        if node.type == "pointer_declarator":
            depth += 1
        inner = node.child_by_field_name("declarator")
        if inner is None:
            inner = next((c for c in node.named_children if c.type.endswith("declarator") or c.type == "identifier"), None)
        node = inner
    return None, depth


def _param(node: Node) -> Optional[Param]:
    base = None
    const = False
    declarator = None
    for child in node.children:
        if child.type in _TYPE_NODES and base is None:
            base = " ".join(text(child).split())
        elif child.type == "type_qualifier" and text(child) == "const":
            const = True
        elif child.type.endswith("declarator") or child.type == "identifier":
            declarator = child
    if base is None or declarator is None:
        return None
    name, depth = _declarator_name(declarator)
    if name is None:
        return None
    return Param(name=name, base_type=base, pointer_depth=depth, const=const, line=node.start_point[0] + 1)


def _function_name(declarator: Node) -> Optional[str]:
    ident = declarator.child_by_field_name("declarator")
    if ident is None:
        ident = next((c for c in declarator.named_children if c.type in ("identifier", "field_identifier", "qualified_identifier")), None)
    return text(ident) if ident is not None else None


def functions(tree: Tree) -> list[FunctionSig]:
    """Every function definition in the file (templates included), in source order."""
    out: list[FunctionSig] = []
    for node in walk(tree.root_node):
        if node.type != "function_definition":
            continue
        declarator = next((c for c in node.children if c.type == "function_declarator"), None)
        if declarator is None:
            # pointer-returning functions wrap the function_declarator
            declarator = next((d for d in walk(node) if d.type == "function_declarator"), None)
        if declarator is None:
            continue
        name = _function_name(declarator)
        plist = declarator.child_by_field_name("parameters") or next(
            (c for c in declarator.children if c.type == "parameter_list"), None)
        params = tuple(p for p in (_param(c) for c in (plist.named_children if plist else [])
                                   if c.type == "parameter_declaration") if p is not None)
        head = source_head(node)
        body = node.child_by_field_name("body")
        out.append(FunctionSig(name=name or "", params=params, is_kernel="__global__" in head,
                               line=node.start_point[0] + 1, start_byte=node.start_byte, end_byte=node.end_byte,
                               body_line=(body.start_point[0] if body is not None else node.end_point[0]) + 1))
    return out


def source_head(fn: Node) -> str:
    """The text of a function definition before its body (qualifiers, return type, declarator)."""
    body = fn.child_by_field_name("body")
    raw = fn.text or b""
    cut = (body.start_byte - fn.start_byte) if body is not None else len(raw)
    return raw[:cut].decode("utf-8", errors="replace")


def find_function(tree: Tree, name: str) -> Optional[FunctionSig]:
    matches = [f for f in functions(tree) if f.name == name]
    return matches[-1] if matches else None
