"""Source rewrite for the CPU executor: CUDA C++ -> C++ that g++ compiles against ks_cpu.h.

Only two constructs need more than the macros in ks_cpu.h, and both are rewritten in place with
tree-sitter-cuda, keeping every other byte and every line break, so g++ diagnostics and runtime
reports (``__LINE__``, DWARF line info) point at the original lines:

* kernel launches ``k<<<g, b[, smem[, stream]]>>>(args)`` become
  ``::ks::launch("k", __FILE__, __LINE__, g, b, smem, stream, [&](auto... ks_a) { k(ks_a...); }, args)``
  (the arguments are evaluated once; every CUDA thread receives its own copy; template kernels
  ``k<T, 4>`` work because the lambda spells the callee exactly as written);
* casts to pointers of CUDA vector types (``reinterpret_cast<const float4*>(p)``, ``(float2*)p``)
  become ``::ks::vcast<...>(__FILE__, __LINE__, p)``, which reports a misaligned vector pointer;
* ``__shared__`` declarations at block scope become references into the block's shared arena,
  ``auto& tile = ::ks::shared_var<float [32][33], __COUNTER__>(__FILE__, __LINE__, "tile");``,
  one per declarator; ``extern __shared__ T s[];`` becomes ``auto s = ::ks::dynamic_shared<T>();``
  and, at namespace scope, a per-OS-thread pointer that the runtime points at the dynamic region.

Other namespace-scope ``__shared__`` variables are left to ks_cpu.h's fallback macro
(``thread_local``: correct values, but not poisoned or race-checked).
"""
from __future__ import annotations

import re
from typing import Optional

from corpora.code.edit import Edit
from corpora.code.parse import cuda_parser

_ALIGN = re.compile(rb"__align__\s*\(")

# CUDA vector types whose pointers carry an alignment requirement (checked by ::ks::vcast)
_VEC = (r"(?:float[24]|double[24]|u?int[24]|u?long[24]|u?longlong[24]|u?short[24]|u?char[24]|"
        r"__half2|half2|__nv_bfloat162|nv_bfloat162)")
_VEC_PTR = re.compile(r"^(?:(?:const|volatile)\s+)*" + _VEC + r"(?:\s+(?:const|volatile))*\s*\*\s*(?:const\s*)?$")
_REINTERPRET = re.compile(r"\breinterpret_cast[ \t]*<[ \t]*((?:(?:const|volatile)[ \t]+)*" + _VEC +
                          r"(?:[ \t]+(?:const|volatile))*[ \t]*\*[ \t]*(?:const[ \t]*)?)>[ \t]*\(")


def _mask_for_parse(src: bytes) -> bytes:
    """Blank out ``__align__(...)`` (the grammar does not know it) without moving any byte."""
    out = bytearray(src)
    for m in _ALIGN.finditer(src):
        i, depth = m.end(), 1
        while i < len(src) and depth:
            depth += {ord("("): 1, ord(")"): -1}.get(src[i], 0)
            i += 1
        for j in range(m.start(), i):
            if out[j] not in (0x0A, 0x0D):
                out[j] = 0x20
    return bytes(out)


def _text(src: bytes, node) -> str:
    return src[node.start_byte:node.end_byte].decode("utf-8", errors="replace")


def _c_string(s: str) -> str:
    return '"' + " ".join(s.split()).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _innermost_identifier(node):
    """The declared name inside a declarator (array/pointer/parenthesized/reference nesting)."""
    if node.type in ("identifier", "field_identifier"):
        return node
    inner = node.child_by_field_name("declarator")
    if inner is not None:
        return _innermost_identifier(inner)
    for c in node.named_children:
        found = _innermost_identifier(c)
        if found is not None:
            return found
    return None


def _launch_edit(src: bytes, call, ksyn) -> Optional[Edit]:
    fn = call.child_by_field_name("function")
    args = call.child_by_field_name("arguments")
    if fn is None or args is None:
        return None
    lt = next((c for c in ksyn.children if c.type == "<<<"), None)
    gt = next((c for c in ksyn.children if c.type == ">>>"), None)
    if lt is None or gt is None:
        return None
    config = [c for c in ksyn.named_children if c.type != "comment"]
    if not 2 <= len(config) <= 4:
        return None
    interior = src[lt.end_byte:gt.start_byte].decode("utf-8", errors="replace")
    defaults = ", 0" * (4 - len(config))
    fn_text = _text(src, fn)
    arg_interior = src[args.start_byte + 1:args.end_byte - 1].decode("utf-8", errors="replace")
    has_args = any(c.type != "comment" for c in args.named_children)
    repl = (f"::ks::launch({_c_string(fn_text)}, __FILE__, __LINE__, {interior}{defaults}, "
            f"[&](auto... ks_a) {{ {fn_text}(ks_a...); }}"
            f"{', ' if has_args else ''}{arg_interior})")
    original = src[call.start_byte:call.end_byte].decode("utf-8", errors="replace")
    missing = original.count("\n") - repl.count("\n")
    if missing > 0:
        repl += "\n" * missing
    return Edit(call.start_byte, call.end_byte, repl)


def _shared_edit(src: bytes, decl, counter: list[int]) -> Optional[Edit]:
    is_extern = False
    base: list[str] = []
    declarators = []
    for i, c in enumerate(decl.children):
        field = decl.field_name_for_child(i)
        if field == "declarator":
            declarators.append(c)
        elif c.type == "storage_class_specifier":
            word = _text(src, c).strip()
            if word == "extern":
                is_extern = True
            elif word != "static":
                return None  # e.g. thread_local: leave it alone
        elif c.type == "type_qualifier":
            word = _text(src, c).strip()
            if word == "__shared__" or word.startswith("alignas"):
                continue
            base.append(word)
        elif c.type in (";", ","):
            continue
        elif c.type in ("attribute_specifier", "attribute_declaration", "ms_declspec_modifier", "comment"):
            continue
        else:
            base.append(_text(src, c))
    if not declarators or not base:
        return None
    if any(d.type == "init_declarator" for d in declarators):
        return None  # __shared__ variables cannot have initializers in CUDA; leave it to g++
    base_text = " ".join(base)
    block_scope = _in_function(decl)
    pieces = []
    for d in declarators:
        ident = _innermost_identifier(d)
        if ident is None:
            return None
        name = _text(src, ident)
        abstract = (src[d.start_byte:ident.start_byte] + src[ident.end_byte:d.end_byte]).decode("utf-8", errors="replace")
        if is_extern:
            elem = re.sub(r"^\s*\[[^\]]*\]", "", abstract, count=1)
            elem_type = f"{base_text} {elem}".rstrip()
            if block_scope:
                pieces.append(f"auto {name} = ::ks::dynamic_shared<{elem_type}>();")
            else:
                pieces.append(
                    f"static __thread ::std::add_pointer_t<{elem_type}> {name}; "
                    f"static const int ks_dyn_reg_{decl.start_byte}_{len(pieces)} = "
                    f"::ks::register_dynamic_shared_setter(+[](void* ks_p) {{ {name} = "
                    f"static_cast<decltype({name})>(ks_p); }});")
        else:
            if not block_scope:
                return None  # namespace-scope static __shared__: the thread_local fallback macro
            counter[0] += 1
            type_text = f"{base_text} {abstract}".rstrip()
            pieces.append(f"auto& {name} = ::ks::shared_var<{type_text}, __COUNTER__>"
                          f"(__FILE__, __LINE__, {_c_string(name)});")
    repl = " ".join(pieces)
    original = src[decl.start_byte:decl.end_byte].decode("utf-8", errors="replace")
    missing = original.count("\n") - repl.count("\n")
    if missing > 0:
        repl += "\n" * missing
    elif missing < 0:
        return None
    return Edit(decl.start_byte, decl.end_byte, repl)


def _cast_edit(src: bytes, node) -> Optional[Edit]:
    """``(float4*)expr`` -> ``::ks::vcast<float4*>(__FILE__, __LINE__, expr)`` (alignment check)."""
    typ = node.child_by_field_name("type")
    val = node.child_by_field_name("value")
    if typ is None or val is None:
        return None
    type_text = _text(src, typ)
    if "\n" in type_text or not _VEC_PTR.match(type_text.strip()):
        return None
    repl = f"::ks::vcast<{type_text.strip()}>(__FILE__, __LINE__, {_text(src, val)})"
    original = _text(src, node)
    missing = original.count("\n") - repl.count("\n")
    return Edit(node.start_byte, node.end_byte, repl + "\n" * max(0, missing))


def _code_mask(text: str) -> str:
    """Comments and string/char literals blanked (same length, newlines kept)."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            i += 1
            continue
        for k in range(i, j):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


def _rewrite_reinterpret_casts(text: str) -> str:
    """``reinterpret_cast<const float4*>(`` -> ``::ks::vcast<const float4*>(__FILE__, __LINE__, ``,
    in code and in macro bodies alike (only the prefix changes, so no parenthesis matching)."""
    masked = _code_mask(text)
    out, pos = [], 0
    for m in _REINTERPRET.finditer(masked):
        out.append(text[pos:m.start()])
        out.append(f"::ks::vcast<{m.group(1).strip()}>(__FILE__, __LINE__, ")
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def _in_function(node) -> bool:
    p = node.parent
    while p is not None:
        if p.type in ("compound_statement", "function_definition", "lambda_expression"):
            return True
        p = p.parent
    return False


def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def rewrite(source: str) -> str:
    """CUDA source -> the source the CPU executor compiles. Same number of lines, same line of
    every construct that is not rewritten."""
    src = source.encode("utf-8")
    masked = _mask_for_parse(src)
    tree = cuda_parser().parse(masked)
    edits: list[Edit] = []
    counter = [0]
    for node in _walk(tree.root_node):
        if node.type == "call_expression":
            ksyn = next((c for c in node.children if c.type == "kernel_call_syntax"), None)
            if ksyn is not None:
                e = _launch_edit(masked, node, ksyn)
                if e:
                    # launch text comes from the masked copy: identical except __align__(...)
                    edits.append(e)
        elif node.type == "cast_expression":
            e = _cast_edit(masked, node)
            if e:
                edits.append(e)
        elif node.type == "declaration" and any(
                c.type == "type_qualifier" and _text(masked, c).strip() == "__shared__" for c in node.children):
            e = _shared_edit(masked, node, counter)
            if e:
                edits.append(e)
    edits.sort(key=lambda e: e[0])
    kept: list[Edit] = []
    end = -1
    for e in edits:  # outermost first; drop edits nested in an earlier one (a launch inside a launch's args)
        if e[0] >= end:
            kept.append(e)
            end = e[1]
    out = bytearray()
    pos = 0
    for start, stop, repl in kept:
        out += src[pos:start]
        out += repl.encode("utf-8")
        pos = stop
    out += src[pos:]
    result = _rewrite_reinterpret_casts(out.decode("utf-8", errors="replace"))
    if result.count("\n") != source.count("\n"):  # never expected; keep the line contract anyway
        raise AssertionError("cpu_rewrite changed the number of lines")
    return result
