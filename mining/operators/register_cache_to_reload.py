"""register_cache_to_reload: data loaded once into registers and reused is loaded again at every
use instead.

Two forms, both the sites the register_cache detector reports:

* a per-thread array filled by one assignment, `for (k...) wr[k] = __ldg(w + c * 9 + k);`: every
  read `wr[a]` becomes the fill's load with the fill index replaced (`__ldg(w + c * 9 + a)`), the
  fill (with its loop, when nothing else is in it) and the declaration are deleted;
* a scalar (or vector) local initialised from a global load and never assigned again,
  `const float4 b = __ldg(bias4 + c);`: every use becomes `(__ldg(bias4 + c))`, the declaration is
  deleted.

Why it is sound: the value is a pure function of the load's address variables and of global
memory the kernel never writes (checked through the pointer parameters it derives from); those
variables are unchanged between the fill and each use (see `fill_forwarding`: fill-loop variables
reach the value only through the fill index, locals are inlined where they would be out of scope
or different, loop variables must be those of a loop enclosing both). So every reload returns
the value the register held.

Forward: none yet. No deterministic rewrite introduces this carrier; `skills optimize` applies
this operator's skills through the LLM materializer only (the pair's forward half is empty).
"""
from __future__ import annotations

from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.carriers import register_cache_sites
from mining.operators.base import Edit, Operator, Pair
from mining.operators.fill_forwarding import Renderer, forward_fill, reads_written_memory
from corpora.code.nodes import same
from mining.operators.nodes import FunctionIndex, loops_around, reads_global
from mining.operators.rewrite_util import has_side_effects, node_at, splice_range, structural
from corpora.code.parse import text, walk


_DECLARATORS = ("identifier", "init_declarator", "array_declarator", "pointer_declarator", "reference_declarator")


class RegisterCacheToReload(Operator):
    name = "register_cache_to_reload"
    carrier = "register_cache"
    description = "reload a register-cached global value at every use"

    def edits(self, src: Source):
        sites = register_cache_sites(src)
        st = structural(src)
        seen = set()
        for site in sites:
            if (site.start_byte, site.end_byte) in seen:
                continue
            seen.add((site.start_byte, site.end_byte))
            decl = node_at(st, site.start_byte, site.end_byte, "declaration")
            f = st.function_at(site.start_byte)
            fn = st.func_node(f) if f is not None else None
            if decl is None or fn is None:
                continue
            decls = [d for d in decl.named_children if d.type in _DECLARATORS]
            if len(decls) != 1:
                continue
            d = decls[0]
            inner = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            dims, node = 0, inner
            while node is not None and node.type == "array_declarator":
                dims += 1
                node = node.child_by_field_name("declarator")
            if node is None or node.type != "identifier":
                continue
            if dims:
                if d.type == "init_declarator":
                    continue
                plan = forward_fill(st, fn, decl, text(node), dims, private=True, require_global_load=True)
                if plan is not None:
                    yield plan.edit
            elif d.type == "init_declarator" and inner.type == "identifier":
                e = self.scalar(st, fn, decl, d, text(node))
                if e is not None:
                    yield e

    def scalar(self, src: Source, fn: Node, decl: Node, d: Node, name: str) -> Optional[Edit]:
        value = d.child_by_field_name("value")
        if value is None or has_side_effects(value):
            return None
        vtext = src.code[value.start_byte:value.end_byte].decode("utf-8", "replace")
        f = src.function_at(fn.start_byte)
        if f is None or not reads_global(src, fn, vtext) or reads_written_memory(src, f, fn, value):
            return None
        idx = FunctionIndex(src, fn)
        var = next((v for v in idx.vars if v.name == name and same(v.decl, decl)), None)
        if var is None or var.assigned:
            return None
        uses = [n for n in walk(fn) if n.type == "identifier" and text(n) == name and
                not (d.start_byte <= n.start_byte < d.end_byte) and idx.visible(name, n.start_byte) is var]
        if not uses:
            return None
        subs = []
        for u in uses:
            p = u.parent
            if p is not None and p.type == "pointer_expression" and p.children[0].type == "&":
                return None  # its address is taken
            writer_loops = [lp for lp in loops_around(decl) if not (lp.start_byte <= u.start_byte < lp.end_byte)]
            r = Renderer(idx, decl, u, {}, [], True, writer_loops)
            body = r.render(value)
            if body is None:
                return None
            subs.append(Edit(u.start_byte, u.end_byte, "(" + body + ")"))
        ds, de = src.line_span(decl.start_byte, decl.end_byte)
        subs.append(Edit(ds, de, ""))
        subs.sort()
        lo, hi = subs[0][0], max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))


PAIR = Pair(RegisterCacheToReload)
