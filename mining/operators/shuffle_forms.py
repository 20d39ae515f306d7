"""Warp shuffles written in other forms than the intrinsic call, read as the intrinsic they are
(issue 19: detection by meaning), so the shuffle operators can rewrite them:

* a function-like macro whose body is a shuffle of its parameters
  (`#define SHFL_XOR(v, m) __shfl_xor_sync(uint32_t(-1), v, m)`): the call is the expanded shuffle;
* a cooperative-groups tile's method (`tile32.shfl_down(v, o)` on a `thread_block_tile<W>`):
  `__shfl_down_sync(0xffffffffu, v, o, W)`, the tile's lanes being the shuffle's segment;
* a shuffle returned from a wrapper (`return __shfl_sync(m, v, src, w);`): the returned value is
  first held in a local of the value's type, so the exchange has a statement of its own.

`normalized_edits(src, rewrite)` writes each such site in its intrinsic form into a copy of the
source, lets `rewrite(copy, call)` (the operator's own rewrite of one shuffle call) produce its
edit there, and maps that edit back onto the original text: the rewritten range covers the site,
and everything before it has the same offsets in both texts, so the result is one byte-range edit
of the original whose meaning is the operator's rewrite of the equivalent intrinsic.
"""
from __future__ import annotations

import re
from typing import Callable, Iterator, Optional

from tree_sitter import Node

from corpora.code.nodes import call_name
from corpora.code.source import Source, expand_macro
from mining.operators.base import Edit
from mining.operators.rewrite_util import expression_type, structural
from corpora.code.parse import parse_cuda, text, walk

SHUFFLE_NAMES = ("__shfl_sync", "__shfl_xor_sync", "__shfl_down_sync", "__shfl_up_sync", "__shfl", "__shfl_xor",
                 "__shfl_down", "__shfl_up")
_CG_METHODS = {"shfl": "__shfl_sync", "shfl_xor": "__shfl_xor_sync", "shfl_down": "__shfl_down_sync",
               "shfl_up": "__shfl_up_sync"}


def shuffle_macros(src: Source) -> dict[str, tuple[list[str], str]]:
    """NAME -> (parameters, body) for function-like macros whose body is one shuffle call."""
    call = re.compile(r"\(?\s*(%s)\s*\((.*)\)\s*\)?" % "|".join(SHUFFLE_NAMES))
    return {name: m for name, m in src.function_macros.items() if call.fullmatch(m[1])}


def _tile_width(src: Source, obj: Node) -> Optional[str]:
    """W of a `thread_block_tile<W>` variable (declared in the enclosing function)."""
    if obj.type != "identifier":
        return None
    name = re.escape(text(obj))
    f = src.function_at(obj.start_byte)
    if f is None:
        return None
    code = src.func_code(f).decode("utf-8", "replace")
    m = re.search(r"thread_block_tile\s*<\s*(\w+)\s*>\s+%s\b" % name, code) or \
        re.search(r"\bauto\s+%s\s*=\s*(?:\w+::)*tiled_partition\s*<\s*(\w+)\s*>" % name, code)
    return m.group(1) if m else None


def equivalent_forms(src: Source) -> Iterator[Edit]:
    """(start, end, intrinsic text) for every non-intrinsic shuffle site of the file."""
    macros = shuffle_macros(src)
    for call in src.nodes("call_expression"):
        fn = call.child_by_field_name("function")
        args = call.child_by_field_name("arguments")
        if fn is None or args is None:
            continue
        arg_texts = [" ".join(text(a).split()) for a in args.named_children if a.type != "comment"]
        if fn.type == "identifier" and text(fn) in macros:
            params, body = macros[text(fn)]
            if len(params) == len(arg_texts):
                yield call.start_byte, call.end_byte, expand_macro(body, params, arg_texts)
        elif fn.type == "field_expression":
            method = fn.child_by_field_name("field")
            obj = fn.child_by_field_name("argument")
            if method is None or obj is None or text(method) not in _CG_METHODS or len(arg_texts) != 2:
                continue
            width = _tile_width(src, obj)
            if width is None:
                continue
            w = "" if width == "32" else f", {width}"
            yield call.start_byte, call.end_byte, f"{_CG_METHODS[text(method)]}(0xffffffffu, {arg_texts[0]}, {arg_texts[1]}{w})"
    for ret in src.nodes("return_statement"):
        val = next((c for c in ret.named_children if c.type != "comment"), None)
        if val is None or val.type != "call_expression" or call_name(val) not in SHUFFLE_NAMES:
            continue
        args = val.child_by_field_name("arguments")
        a = [c for c in (args.named_children if args is not None else []) if c.type != "comment"]
        value = a[1] if call_name(val).endswith("_sync") and len(a) >= 3 else (a[0] if a else None)
        vtype = expression_type(src, value) if value is not None else None
        if vtype is None:
            continue
        yield ret.start_byte, ret.end_byte, f"{{ {vtype} ks_shfl = {' '.join(text(val).split())}; return ks_shfl; }}"


def normalized_edits(src: Source, rewrite: Callable[[Source, Node], Optional[Edit]],
                     names: tuple[str, ...] = SHUFFLE_NAMES) -> list[Edit]:
    """The operator's rewrite of each non-intrinsic shuffle, as an edit of the original text."""
    out = []
    raw = src.raw
    for start, end, intrinsic in equivalent_forms(src):
        new_raw = raw[:start] + intrinsic.encode() + raw[end:]
        delta = len(new_raw) - len(raw)
        copy = structural(Source(new_raw))
        hit = [n for n in walk(copy.tree.root_node) if n.type == "call_expression" and call_name(n) in names and
               start <= n.start_byte and n.end_byte <= start + len(intrinsic.encode())]
        if len(hit) != 1:
            continue
        e = rewrite(copy, hit[0])
        if e is None:
            continue
        site_end = start + len(intrinsic.encode())
        lo, hi = min(e.start, start), max(e.end, site_end)
        body = (copy.raw[lo:e.start].decode("utf-8", "replace") + e.replacement +
                copy.raw[e.end:hi].decode("utf-8", "replace"))
        out.append(Edit(lo, hi - delta, body))
    return out


def parses(text_: str) -> bool:
    return not any(n.type == "ERROR" for n in walk(parse_cuda(text_.encode()).root_node))
