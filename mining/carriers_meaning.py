"""Detection by meaning: what a piece of kernel code does, read from declared types and data flow
rather than from one spelling (issue 19 item 1).

The house detectors in `mining/carriers.py` match the spellings the house corpus uses. Outside
kernels reach the same optimizations through other syntax: a 16-byte access is written
`reinterpret_cast<float4 *>(&(a[i]))[0]`, hidden in a function-like macro (`FLOAT4(a[i])`,
`LDST128BITS(x[i])`), made through a pointer variable bound once (`auto* p = reinterpret_cast<
const Pack*>(src)`), through a C cast, through a parameter typed `uint4 *`, or through a struct
type with an array member (`Packed<float, 4>`, `_f16Vec<T, 8>`). This module answers, for an
expression, *what memory it touches, through which type*:

* `element_type(src, expr)`: the declared element type of an lvalue (`a[i]` -> `float` for a
  `float *a`), followed through locals, parameters, shared arrays, struct members and casts;
* `pointee_type(src, ptr)`: the type a pointer expression points at;
* `memory_space(src, root, at)`: global, shared or local (registers) for the variable an access
  starts from;
* `wide_access(src, node)`: a *wide* access (a value type of 8 or more bytes, or a struct type,
  read or written through a pointer to a narrower scalar type's memory): its wide type, the scalar
  type of the memory under it, the address of its first byte, the root variable and its space;
* `view_macros(src)`: function-like macros whose body is such a reinterpretation of their
  argument's address, so `FLOAT4(a[i])` is read as what it expands to.

`extend_detectors` (called by mining/carriers.py on its detector table) extends `vector_load` / `vector_store` with every global
wide access found this way (the house spellings stay found by their own detectors).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name, enclosing
from corpora.code.source import Site, Source
from corpora.code.parse import parse_cuda, text, walk

# the cache-operator load / store intrinsics (an access through one is still a global access)
LOAD_INTRINSICS = {"__ldg", "__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv"}
STORE_INTRINSICS = {"__stcg", "__stcs", "__stwt", "__stwb"}

# bytes of the scalar types kernels are written over
SCALAR_BYTES = {
    **{t: 1 for t in ("char", "signed char", "unsigned char", "int8_t", "uint8_t", "bool", "__nv_fp8_e4m3",
                      "__nv_fp8_e5m2")},
    **{t: 2 for t in ("short", "unsigned short", "int16_t", "uint16_t", "half", "__half", "__nv_bfloat16",
                      "nv_bfloat16", "c10::Half", "c10::BFloat16", "at::Half", "at::BFloat16")},
    **{t: 4 for t in ("int", "unsigned", "unsigned int", "signed int", "uint", "int32_t", "uint32_t", "float",
                      "half2", "__half2", "__nv_bfloat162", "nv_bfloat162")},
    **{t: 8 for t in ("double", "long long", "unsigned long long", "int64_t", "uint64_t", "long long int",
                      "size_t")},
}
# CUDA vector types: component type and count
VECTOR_TYPES: dict[str, tuple[str, int]] = {
    **{f"float{n}": ("float", n) for n in (1, 2, 3, 4)},
    **{f"int{n}": ("int", n) for n in (1, 2, 3, 4)},
    **{f"uint{n}": ("unsigned int", n) for n in (1, 2, 3, 4)},
    **{f"double{n}": ("double", n) for n in (1, 2, 3, 4)},
    **{f"short{n}": ("short", n) for n in (1, 2, 3, 4)},
    **{f"ushort{n}": ("unsigned short", n) for n in (1, 2, 3, 4)},
    **{f"char{n}": ("char", n) for n in (1, 2, 3, 4)},
    **{f"uchar{n}": ("unsigned char", n) for n in (1, 2, 3, 4)},
    **{f"longlong{n}": ("long long", n) for n in (1, 2, 3, 4)},
    **{f"ulonglong{n}": ("unsigned long long", n) for n in (1, 2, 3, 4)},
    "half2": ("half", 2), "__half2": ("__half", 2), "__nv_bfloat162": ("__nv_bfloat16", 2),
    "nv_bfloat162": ("nv_bfloat16", 2),
}
_ALIGN3 = {"float3": 12, "int3": 12, "uint3": 12, "double3": 24, "short3": 6, "ushort3": 6, "char3": 3, "uchar3": 3,
           "longlong3": 24, "ulonglong3": 24}


def norm_type(t: str) -> str:
    """A type's text without cv-qualifiers, `__restrict__`, `struct`, and with spacing collapsed."""
    t = re.sub(r"\b(const|volatile|__restrict__|__restrict|struct|class|typename)\b", " ", t)
    t = re.sub(r"\s*([<>,*&:])\s*", r"\1", " ".join(t.split()))
    return t.replace(",", ", ").strip()


def type_bytes(t: Optional[str]) -> Optional[int]:
    if t is None:
        return None
    t = norm_type(t)
    if t in SCALAR_BYTES:
        return SCALAR_BYTES[t]
    if t in _ALIGN3:
        return _ALIGN3[t]
    if t in VECTOR_TYPES:
        comp, n = VECTOR_TYPES[t]
        b = SCALAR_BYTES.get(comp)
        return b * n if b else None
    return None


def is_scalar_type(t: Optional[str]) -> bool:
    return t is not None and norm_type(t) in SCALAR_BYTES and norm_type(t) not in VECTOR_TYPES


def is_wide_type(t: Optional[str]) -> bool:
    """A value type that one access moves 8+ bytes of: vector types of 8/16 bytes and every
    struct / template / aggregate type that is not a known scalar (its size is the compiler's)."""
    if t is None:
        return False
    t = norm_type(t)
    if t in VECTOR_TYPES:
        return (type_bytes(t) or 0) >= 8
    if t in SCALAR_BYTES or t in ("void", "auto", "char", "T") or t in _ALIGN3:
        return False
    return bool(re.match(r"[A-Za-z_][\w:]*(<.*>)?$", t)) and not re.fullmatch(r"[A-Z]\w{0,2}", t) and \
        ("<" in t or t[0].isupper() or "::" in t or t.startswith("_"))


def strip_parens(node: Node) -> Node:
    while node is not None and node.type == "parenthesized_expression" and node.named_children:
        node = node.named_children[0]
    return node


def _ctext(src: Source, node: Node) -> str:
    return " ".join(src.code[node.start_byte:node.end_byte].decode("utf-8", "replace").split())


# --------------------------------------------------------------------------- declarations
@dataclass(frozen=True)
class Decl:
    name: str
    type: Optional[str]  # declared type text without qualifiers (None for `auto`)
    kind: str  # scalar | pointer | array
    dims: int  # array dimensions
    value: Optional[Node]  # the initializer
    node: Node  # the declaration / parameter / field node
    where: str  # local | param | field | file


def _shape(d: Node) -> tuple[Optional[str], str, int, Optional[Node]]:
    value = None
    if d.type == "init_declarator":
        value = d.child_by_field_name("value")
        d = d.child_by_field_name("declarator")
    dims, kind = 0, "scalar"
    while d is not None and d.type not in ("identifier", "field_identifier"):
        if d.type == "array_declarator":
            dims += 1
            kind = "array"
        elif d.type == "pointer_declarator" and kind == "scalar":
            kind = "pointer"
        inner = d.child_by_field_name("declarator")
        if inner is None:
            inner = next((c for c in d.named_children if c.type.endswith("declarator") or
                          c.type in ("identifier", "field_identifier")), None)
        d = inner
    return (text(d) if d is not None else None), kind, dims, value


def _type_of(src: Source, decl: Node) -> Optional[str]:
    t = decl.child_by_field_name("type")
    if t is None:
        return None
    s = norm_type(_ctext(src, t))
    return None if s in ("auto", "decltype(auto)") or s.startswith("decltype") else s


_DECLARATOR_TYPES = ("identifier", "init_declarator", "array_declarator", "pointer_declarator",
                     "reference_declarator", "field_identifier")


def find_decl(src: Source, name: str, at: Node) -> Optional[Decl]:
    """The declaration of `name` visible at `at`: the innermost enclosing local declaration before
    it, else a parameter of an enclosing function or lambda, else a member of the enclosing
    struct/class, else a file-scope declaration."""
    scope = enclosing(at, "function_definition", "lambda_expression")
    while scope is not None:
        best = None
        for d in src.nodes("declaration", within=scope):  # the pre-order list's slice, not a walk per question
            if d.start_byte >= at.start_byte:
                continue
            container = d.parent
            if container is None or not (container.start_byte <= at.start_byte < container.end_byte):
                continue
            for dec in d.named_children:
                if dec.type in _DECLARATOR_TYPES:
                    n, kind, dims, value = _shape(dec)
                    if n == name:
                        best = Decl(name, _type_of(src, d), kind, dims, value, d, "local")
            # a for-loop's init declaration is visible in its body only
        if best is not None:
            return best
        decl = scope.child_by_field_name("declarator")
        while decl is not None and decl.type not in ("function_declarator", "lambda_declarator",
                                                     "abstract_function_declarator"):
            decl = decl.child_by_field_name("declarator")
        plist = decl.child_by_field_name("parameters") if decl is not None else None
        for p in (plist.named_children if plist is not None else []):
            if p.type not in ("parameter_declaration", "optional_parameter_declaration"):
                continue
            dec = p.child_by_field_name("declarator")
            if dec is None:
                continue
            n, kind, dims, _ = _shape(dec)
            if n == name:
                return Decl(name, _type_of(src, p), kind, dims, None, p, "param")
        scope = enclosing(scope, "function_definition", "lambda_expression")
    cls = enclosing(at, "struct_specifier", "class_specifier", "union_specifier")
    while cls is not None:
        body = cls.child_by_field_name("body")
        for fd in (body.named_children if body is not None else []):
            if fd.type != "field_declaration":
                continue
            for dec in fd.named_children:
                if dec.type in _DECLARATOR_TYPES:
                    n, kind, dims, _ = _shape(dec)
                    if n == name:
                        return Decl(name, _type_of(src, fd), kind, dims, None, fd, "field")
        cls = enclosing(cls, "struct_specifier", "class_specifier", "union_specifier")
    for d in src.tree.root_node.named_children:
        if d.type == "declaration":
            for dec in d.named_children:
                if dec.type in _DECLARATOR_TYPES:
                    n, kind, dims, value = _shape(dec)
                    if n == name:
                        return Decl(name, _type_of(src, d), kind, dims, value, d, "file")
    return None


def _is_shared_decl(src: Source, d: Decl) -> bool:
    return d.where in ("local", "file") and bool(re.search(rb"\b__shared__\b",
                                                           src.code[d.node.start_byte:d.node.end_byte]))


# --------------------------------------------------------------------------- types of expressions
def _cast_target(src: Optional[Source], node: Node) -> Optional[tuple[str, Node]]:
    """(pointee type, operand) of `reinterpret_cast<T *>(x)`, `static_cast` / `const_cast` alike,
    or a C cast `(T *)x`; one pointer level only. `src` None: a tree without a Source (macro bodies)."""
    node = strip_parens(node)
    if node.type == "call_expression":
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments")
        if fn is None or fn.type != "template_function" or args is None or len(args.named_children) != 1:
            return None
        name = fn.child_by_field_name("name")
        if name is None or text(name) not in ("reinterpret_cast", "static_cast", "const_cast"):
            return None
        targs = fn.child_by_field_name("arguments")
        desc = targs.named_children[0] if targs is not None and targs.named_children else None
        operand = args.named_children[0]
    elif node.type == "cast_expression":
        desc = node.child_by_field_name("type")
        operand = node.child_by_field_name("value")
    else:
        return None
    if desc is None or desc.type != "type_descriptor" or operand is None:
        return None
    ptrs = [c for c in desc.named_children if c.type == "abstract_pointer_declarator"]
    if len(ptrs) != 1 or any(c.type == "abstract_pointer_declarator" for c in ptrs[0].named_children):
        return None
    base = desc.child_by_field_name("type")
    if base is None:
        return None
    return norm_type(_ctext(src, base) if src is not None else text(base)), operand


def pointee_type(src: Source, ptr: Node, depth: int = 0) -> Optional[str]:
    """The element type a pointer expression points at (qualifiers dropped), or None."""
    if depth > 8 or ptr is None:
        return None
    ptr = strip_parens(ptr)
    cast = _cast_target(src, ptr)
    if cast is not None:
        return cast[0]
    if ptr.type == "identifier":
        d = find_decl(src, text(ptr), ptr)
        if d is None:
            return None
        if d.kind in ("pointer", "array"):
            if d.type is not None:
                return d.type
            return pointee_type(src, d.value, depth + 1) if d.value is not None else None
        return None
    if ptr.type == "pointer_expression" and ptr.children and ptr.children[0].type == "&":
        return element_type(src, ptr.child_by_field_name("argument"), depth + 1)
    if ptr.type == "binary_expression":
        op = ptr.child_by_field_name("operator")
        if op is not None and text(op) in ("+", "-"):
            left = pointee_type(src, ptr.child_by_field_name("left"), depth + 1)
            if left is not None or text(op) == "-":
                return left
            return pointee_type(src, ptr.child_by_field_name("right"), depth + 1)
    if ptr.type == "field_expression":
        field = ptr.child_by_field_name("field")
        if field is not None and ptr.child_by_field_name("argument") is not None and \
                text(ptr.child_by_field_name("argument")) == "this":
            d = find_decl(src, text(field), ptr)
            if d is not None and d.kind == "pointer":
                return d.type
        return None
    if ptr.type == "subscript_expression":  # a row of a 2-D array: buf[r]
        base, depth_ = _subscript_base(ptr)
        if base is not None and base.type == "identifier":
            d = find_decl(src, text(base), ptr)
            if d is not None and d.kind == "array" and d.dims > depth_:
                return d.type
    return None


def _subscript_base(node: Node) -> tuple[Optional[Node], int]:
    depth = 0
    while node is not None and node.type == "subscript_expression":
        depth += 1
        node = strip_parens(node.child_by_field_name("argument"))
    return node, depth


def element_type(src: Source, expr: Node, depth: int = 0) -> Optional[str]:
    """The type of an lvalue expression: `a[i]`, `s[r][c]`, `x`, `v.f`, `*p`."""
    if depth > 8 or expr is None:
        return None
    expr = strip_parens(expr)
    if expr.type == "identifier":
        d = find_decl(src, text(expr), expr)
        return d.type if d is not None and d.kind == "scalar" else None
    if expr.type == "subscript_expression":
        base, n = _subscript_base(expr)
        if base is None:
            return None
        if base.type == "identifier":
            d = find_decl(src, text(base), expr)
            if d is None:
                return None
            if d.kind == "array" and d.dims == n:
                return d.type
            if d.kind == "pointer" and n == 1:
                return d.type if d.type is not None else (
                    pointee_type(src, d.value, depth + 1) if d.value is not None else None)
            return None
        if n == 1:
            return pointee_type(src, base, depth + 1)
        return None
    if expr.type == "pointer_expression" and expr.children and expr.children[0].type == "*":
        return pointee_type(src, expr.child_by_field_name("argument"), depth + 1)
    if expr.type == "field_expression":
        op = expr.child_by_field_name("operator")
        base_t = element_type(src, expr.child_by_field_name("argument"), depth + 1) if op is not None and \
            text(op) == "." else None
        field = expr.child_by_field_name("field")
        if base_t is not None and field is not None and base_t in VECTOR_TYPES and text(field) in ("x", "y", "z", "w"):
            return VECTOR_TYPES[base_t][0]
        return None
    return None


def root_of(node: Node) -> Optional[Node]:
    """The variable an address or lvalue expression starts from: `a` of `&(a[i + 1])`, `p` of `p + 4`."""
    node = strip_parens(node)
    for _ in range(16):
        if node is None:
            return None
        if node.type == "identifier":
            return node
        if node.type == "subscript_expression":
            node = strip_parens(node.child_by_field_name("argument"))
        elif node.type == "pointer_expression":
            node = strip_parens(node.child_by_field_name("argument"))
        elif node.type == "binary_expression":
            left = strip_parens(node.child_by_field_name("left"))
            node = left if left is not None and left.type != "number_literal" else \
                strip_parens(node.child_by_field_name("right"))
        elif node.type == "field_expression":
            arg = node.child_by_field_name("argument")
            if arg is not None and text(arg) == "this":
                f = node.child_by_field_name("field")
                return f
            node = strip_parens(arg)
        elif node.type in ("call_expression", "cast_expression"):
            cast = node.child_by_field_name("value") if node.type == "cast_expression" else None
            if cast is None:
                args = node.child_by_field_name("arguments")
                if args is None or len(args.named_children) != 1:
                    return None
                cast = args.named_children[0]
            node = strip_parens(cast)
        else:
            return None
    return None


def memory_space(src: Source, root: Optional[Node], depth: int = 0) -> str:
    """global | shared | local | unknown for the variable an access starts from."""
    if root is None or depth > 6:
        return "unknown"
    name = text(root)
    d = find_decl(src, name, root)
    if d is None:
        return "shared" if name in src.shared_names else "unknown"
    if _is_shared_decl(src, d):
        return "shared"
    if d.where == "param":
        return "global" if d.kind == "pointer" else "local"
    if d.where == "field":
        return "global" if d.kind == "pointer" else "local"
    if d.kind in ("array", "scalar"):
        return "local"
    if d.kind == "pointer" and d.value is not None:
        return memory_space(src, root_of(d.value), depth + 1)
    return "unknown"


# --------------------------------------------------------------------------- view macros
@dataclass(frozen=True)
class ViewMacro:
    name: str
    param: str
    wide_type: str


@lru_cache(maxsize=64)
def _parse_expr(expr: str):
    return parse_cuda(("void ks_f() { (" + expr + "); }").encode())


def view_macros(src: Source) -> dict[str, ViewMacro]:
    """Function-like macros whose body reinterprets the address of their one argument as a wide
    type and dereferences it: `#define FLOAT4(v) (reinterpret_cast<float4 *>(&(v))[0])`."""
    return {k: v for k, v in all_view_macros(src).items() if is_wide_type(v.wide_type)}


def all_view_macros(src: Source) -> dict[str, ViewMacro]:
    """`view_macros` of any width, the 4-byte ones too (`HALF2(v)`: a pack a wider access could take)."""
    out: dict[str, ViewMacro] = {}
    for m in re.finditer(rb"(?m)^[ \t]*#[ \t]*define[ \t]+(\w+)\(\s*(\w+)\s*\)[ \t]*((?:[^\n\\]|\\\n)*)$", src.code):
        name, param = m.group(1).decode(), m.group(2).decode()
        body = " ".join(m.group(3).decode("utf-8", "replace").replace("\\\n", " ").split())
        if not body:
            continue
        tree = _parse_expr(body)
        if any(n.type == "ERROR" for n in walk(tree.root_node)):
            continue
        stmt = next((n for n in walk(tree.root_node) if n.type == "expression_statement"), None)
        if stmt is None or not stmt.named_children:
            continue
        expr = strip_parens(stmt.named_children[0])
        wide = _view_shape(expr, param)
        if wide is not None:
            out[name] = ViewMacro(name, param, wide)
    return out


def _view_shape(expr: Node, param: str) -> Optional[str]:
    """W when `expr` is `CAST<W*>(&(param))[0]` or `*CAST<W*>(&(param))` (any cast spelling)."""
    if expr.type == "subscript_expression":
        idx = expr.child_by_field_name("indices")
        if idx is None or text(idx).strip("[] ") != "0":
            return None
        ptr = expr.child_by_field_name("argument")
    elif expr.type == "pointer_expression" and expr.children and expr.children[0].type == "*":
        ptr = expr.child_by_field_name("argument")
    else:
        return None
    cast = _cast_target(None, strip_parens(ptr))
    if cast is None:
        return None
    wide, operand = cast
    operand = strip_parens(operand)
    if operand.type != "pointer_expression" or not operand.children or operand.children[0].type != "&":
        return None
    if text(strip_parens(operand.child_by_field_name("argument"))) != param:
        return None
    return wide


# --------------------------------------------------------------------------- wide accesses
@dataclass(frozen=True)
class WideAccess:
    node: Node  # the wide lvalue: macro call, subscript or dereference
    wide_type: Optional[str]  # W (None: unknown)
    scalar_type: Optional[str]  # S: the element type of the memory under it
    addr: str  # an expression pointing at its first byte (any pointer type)
    view_arg: Optional[Node]  # `a[i]` of FLOAT4(a[i]) / &(a[i]): an S lvalue at the same address
    root: Optional[Node]
    space: str  # global | shared | local | unknown
    via: str  # macro | cast | pointer | typed


def _paren(s: str) -> str:
    s = s.strip()
    return s if re.fullmatch(r"[\w.]+|\w+\s*\[[^][]*\]|\([^()]*\)", s) else f"({s})"


def _wide_pointer(src: Source, node: Node, depth: int = 0
                  ) -> Optional[tuple[Optional[str], Optional[str], Optional[Node], Optional[Node], str]]:
    """(W, S, scalar pointer operand, root, via) when `node` is a pointer to a wide type viewing
    narrower memory: a cast to W*, a variable bound to one, or a variable declared W* itself."""
    node = strip_parens(node)
    if node is None or depth > 6:
        return None
    cast = _cast_target(src, node)
    if cast is not None:
        wide, operand = cast
        if not is_wide_type(wide):
            return None
        scalar = pointee_type(src, operand)
        if scalar is not None and norm_type(scalar) == norm_type(wide):
            return None  # a cast to its own type
        return wide, scalar, operand, root_of(operand), "cast"
    if node.type == "identifier":
        d = find_decl(src, text(node), node)
        if d is None or d.kind != "pointer":
            return None
        if d.value is not None:
            inner = _wide_pointer(src, d.value, depth + 1)
            if inner is not None:
                wide = d.type if d.type is not None and is_wide_type(d.type) else inner[0]
                return wide, inner[1], inner[2], inner[3], "pointer"
        if d.type is not None and norm_type(d.type) in VECTOR_TYPES and is_wide_type(d.type):
            return norm_type(d.type), VECTOR_TYPES[norm_type(d.type)][0], None, node, "typed"
    return None


def wide_access(src: Source, node: Node, macros: Optional[dict[str, ViewMacro]] = None) -> Optional[WideAccess]:
    """The wide access `node` is, if it is one (see the module docstring)."""
    if node.type == "call_expression":
        macros = view_macros(src) if macros is None else macros
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments")
        if fn is None or fn.type != "identifier" or text(fn) not in macros or args is None or \
                len(args.named_children) != 1:
            return None
        arg = args.named_children[0]
        root = root_of(arg)
        scalar = element_type(src, arg)
        if scalar is not None and norm_type(scalar) == norm_type(macros[text(fn)].wide_type):
            return None  # a view of a value of the wide type itself: no reinterpretation
        return WideAccess(node, macros[text(fn)].wide_type, element_type(src, arg), f"&({_ctext(src, arg)})", arg,
                          root, memory_space(src, root), "macro")
    if node.type == "subscript_expression":
        ptr = node.child_by_field_name("argument")
        idx = node.child_by_field_name("indices")
        wp = _wide_pointer(src, ptr) if ptr is not None else None
        if wp is None or idx is None:
            return None
        i = _ctext(src, idx)[1:-1].strip()
        p = _ctext(src, strip_parens(ptr))
        addr = _paren(p) if i == "0" else f"{_paren(p)} + {_paren(i)}"
        return WideAccess(node, wp[0], wp[1], addr, None, wp[3], memory_space(src, wp[3]), wp[4])
    if node.type == "pointer_expression" and node.children and node.children[0].type == "*":
        arg = strip_parens(node.child_by_field_name("argument"))
        if arg is None:
            return None
        base = arg
        if arg.type == "binary_expression" and text(arg.child_by_field_name("operator")) in ("+", "-"):
            base = arg.child_by_field_name("left")
        wp = _wide_pointer(src, base)
        if wp is None:
            return None
        view = None
        if wp[2] is not None and base is arg:
            operand = strip_parens(wp[2])
            if operand.type == "pointer_expression" and operand.children[0].type == "&":
                view = operand.child_by_field_name("argument")
        return WideAccess(node, wp[0], wp[1], _paren(_ctext(src, arg)), view, wp[3], memory_space(src, wp[3]), wp[4])
    return None


def _inside_intrinsic(node: Node) -> bool:
    p = node.parent
    while p is not None and p.type in ("parenthesized_expression", "binary_expression", "argument_list"):
        if p.type == "argument_list" and p.parent is not None and p.parent.type == "call_expression" and \
                call_name(p.parent) in LOAD_INTRINSICS | STORE_INTRINSICS:
            return True
        p = p.parent
    return False


def _member_of(node: Node) -> bool:
    """`v[i].x`: the member access reads or writes only the member, not the wide value."""
    p = node.parent
    while p is not None and p.type == "parenthesized_expression":
        node, p = p, p.parent
    return p is not None and p.type == "field_expression" and p.child_by_field_name("argument") is not None and \
        p.child_by_field_name("argument").start_byte == node.start_byte


def wide_accesses(src: Source) -> list[WideAccess]:
    """Every wide access inside a function body, outermost first (a macro call's own expansion is
    not visible: the call is the access). Kept on the source: several detectors (and every skill a
    query values) ask for them."""
    return list(src.memo("wide_accesses", lambda: _wide_accesses(src)))


def _wide_accesses(src: Source) -> list[WideAccess]:
    macros = view_macros(src)
    out = []
    for f in src.funcs:
        fn = src.func_node(f)
        body = fn.child_by_field_name("body") if fn is not None else None
        if body is None:
            continue
        for n in walk(body):
            if n.type not in ("call_expression", "subscript_expression", "pointer_expression"):
                continue
            if _inside_intrinsic(n) or _member_of(n):
                continue
            acc = wide_access(src, n, macros)
            if acc is not None and acc.wide_type is not None and norm_type(acc.scalar_type or "") != "void":
                out.append(acc)
    seen, uniq = set(), []
    for a in sorted(out, key=lambda a: (a.node.start_byte, a.node.end_byte)):
        if (a.node.start_byte, a.node.end_byte) not in seen:  # nested function nodes walk a body twice
            seen.add((a.node.start_byte, a.node.end_byte))
            uniq.append(a)
    return uniq


def is_store_target(node: Node) -> bool:
    p = node.parent
    while p is not None and p.type == "parenthesized_expression":
        node, p = p, p.parent
    return p is not None and p.type == "assignment_expression" and \
        p.child_by_field_name("left") is not None and p.child_by_field_name("left").start_byte == node.start_byte


def _wide_sites(src: Source, kind: str) -> list[Site]:
    out = []
    for a in wide_accesses(src):
        if a.space not in ("global", "unknown"):
            continue
        if (kind == "store") == is_store_target(a.node):
            out.append(src.site(f"vector_{kind}", a.node.start_byte, a.node.end_byte))
    return out


# --------------------------------------------------------------------------- cache hints
LOAD_HINTS = {"__ldcs": "streaming_load", "__ldcg": "l2_only_load", "__ldca": "cache_all_load",
              "__ldlu": "last_use_load", "__ldcv": "volatile_load"}
STORE_HINTS = {"__stcs": "streaming_store", "__stcg": "l2_only_store", "__stwt": "write_through_store",
               "__stwb": "write_back_store"}


def hint_sites(src: Source, intrinsic: str) -> list[Site]:
    """Calls of one cache-operator intrinsic, as sites of the carrier it stands for."""
    return [src.site((LOAD_HINTS | STORE_HINTS)[intrinsic], c.start_byte, c.end_byte)
            for c in src.nodes("call_expression") if call_name(c) == intrinsic]


def _extended(base, extra, name: str):
    def combined(src: Source) -> list[Site]:
        sites = base(src)
        have = [(s.start_byte, s.end_byte) for s in sites]
        for s in extra(src):
            if not any(a <= s.start_byte < b or s.start_byte <= a < s.end_byte for a, b in have):
                sites.append(s)
        return sites
    combined.__name__ = f"_{name}_by_meaning"
    return combined


def extend_detectors(detectors: dict) -> None:
    """Extend the house detectors (mining/carriers.py's table, passed in: this module sits below it)
    with what this module finds."""
    detectors["vector_load"] = _extended(detectors["vector_load"], lambda src: _wide_sites(src, "load"), "vector_load")
    detectors["vector_store"] = _extended(detectors["vector_store"], lambda src: _wide_sites(src, "store"),
                                          "vector_store")
    # each cache hint under its own name: `ldg` is the read-only path only
    detectors["ldg"] = lambda src: [src.site("ldg", c.start_byte, c.end_byte) for c in src.nodes("call_expression")
                                    if call_name(c) == "__ldg"]
    for intrinsic, carrier in (LOAD_HINTS | STORE_HINTS).items():
        detectors[carrier] = (lambda i: lambda src: hint_sites(src, i))(intrinsic)


__all__ = ["Decl", "LOAD_INTRINSICS", "STORE_INTRINSICS", "ViewMacro", "WideAccess", "element_type", "extend_detectors",
           "find_decl", "is_wide_type", "memory_space", "pointee_type", "root_of", "type_bytes", "view_macros", "all_view_macros",
           "wide_access", "wide_accesses"]
