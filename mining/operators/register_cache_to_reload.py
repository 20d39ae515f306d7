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

Forward, `cache_operands_in_registers`: the operand cache itself (the `regM` / `regN` of a
register-tiled GEMM, an array of weights). In a nest of constant-trip loops (`for (int i = 0; i <
T; ++i)`, T a literal, macro or template parameter) an element read `S[..i..]` - of a `__shared__`
array, or of global memory the kernel never writes - whose indices depend on exactly one of the
nest's loop variables, inside a loop of the nest that does not change them (so it is read again
on every trip of that loop), is read once per element before the nest: `T ks_r_S[T]; for (int i
= 0; i < T; ++i) ks_r_S[i] = S[..i..];` (the nest loop's own header), and every such read becomes
`ks_r_S[i]`. The nest is the outermost run of such loops around the read in which the rest of
the index (`k`, `ty`) stays fixed. Why it is sound: element i of the cache is the value the read
returned at i, because from the fill to the last read nothing assigns a variable of the index
(checked: declared before the nest, never assigned inside it), nothing writes the array (no
assignment to it, no barrier or atomic inside the nest; global memory: never written by the
kernel); and every value of i the nest reads is filled (same header); the read is under no condition between it
and its loop (an `if`, `?:`, `&&` may be what keeps it in bounds). Its backward halves:
this operator for global memory (a fill loop it forwards), fragment_to_shared_reads for a shared
tile (a contiguous fill `S[..][B + i]` read back as `(&S[..][B])[x]`).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.carriers import register_cache_sites
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, candidate
from mining.operators.fill_forwarding import Renderer, forward_fill, reads_written_memory
from corpora.code.nodes import same
from mining.operators.nodes import FunctionIndex, int_value, kernels, loops_around, norm, reads_global
from mining.operators.reduction_tree import fresh, template_params
from mining.operators.rewrite_util import (declaration_of, has_side_effects, line_indent, node_at, pragma_before, splice_range,
                                          structural)
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


# --------------------------------------------------------------------------- forward
MAX_SLOTS = 32  # one cache's registers


def _const_loop(src: Source, fn: Node, loop: Node) -> Optional[tuple[str, str]]:
    """(variable, bound) of `for (int i = 0; i < T; ++i)` with T a constant or template parameter <= MAX_SLOTS."""
    if loop.type != "for_statement":
        return None
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or cond is None or upd is None:
        return None
    m = re.fullmatch(r"(?:const\s+)?(?:unsigned\s+)?int\s+(\w+)\s*=\s*0\s*;?", " ".join(text(init).split()))
    if m is None:
        return None
    i = m.group(1)
    c = re.fullmatch(r"%s\s*<\s*(\w+)" % i, " ".join(text(cond).split()))
    if c is None or norm(text(upd)) not in (f"++ {i}", f"{i} ++", f"{i} += 1"):
        return None
    v = int_value(src, c.group(1))
    if (v is not None and 1 <= v <= MAX_SLOTS) or (v is None and c.group(1) in template_params(src, fn)):
        return i, c.group(1)
    return None


def _element_type(src: Source, read: Node, base: Node, shared: bool) -> Optional[str]:
    d = declaration_of(src, text(base), read)
    if d is None:
        return None
    t = re.sub(r"\b(const|volatile|__restrict__|__shared__|static)\b", "", d[0])
    t = " ".join(t.replace("*", " ").split())
    return t or None


def _operand_site(src: Source, fn: Node, idx: FunctionIndex, read: Node, f) -> Optional[tuple[Node, str, Node, str]]:
    """(nest top, the loop variable the read depends on, that loop, element type) for a repeated read."""
    base, depth = read, 0
    while base.type == "subscript_expression":
        base = base.child_by_field_name("argument")
        depth += 1
    if base.type != "identifier":
        return None
    name = text(base)
    shared = name in src.shared_names
    if shared:
        dims = [d for d_, n_, d in src.shared_decls if n_ == name and same(d_, src.shared_names[name])]
        if len(dims) != 1 or len(dims[0]) != depth:
            return None
    elif depth != 1 or not reads_global(src, fn, text(read)) or reads_written_memory(src, f, fn, read):
        return None
    p = read.parent
    if p is not None and (p.type in ("pointer_expression", "update_expression") or
                          (p.type == "assignment_expression" and same(p.child_by_field_name("left"), read))):
        return None
    if has_side_effects(read, allow_calls=False):
        return None
    q = read.parent  # a read under a condition may be out of bounds where the condition is false
    while q is not None and q.type not in ("for_statement", "while_statement", "do_statement", "function_definition"):
        if q.type in ("if_statement", "conditional_expression", "switch_statement", "case_statement") or \
                (q.type == "binary_expression" and text(q.child_by_field_name("operator")) in ("&&", "||")):
            return None
        q = q.parent
    chain = []  # the constant-trip loops around the read, innermost first
    q = read.parent
    while q is not None and not same(q, fn):
        if q.type in ("for_statement", "while_statement", "do_statement"):
            lv = _const_loop(src, fn, q)
            if lv is None:
                break
            chain.append((q, lv[0]))
        q = q.parent
    names = {text(n) for n in walk(read) if n.type == "identifier"} - {name}
    for top in range(len(chain) - 1, -1, -1):
        top_loop = chain[top][0]
        nest_vars = [v for _, v in chain[:top + 1]]
        deps = [v for v in nest_vars if v in names]
        if len(deps) != 1 or len(set(nest_vars)) == 1:
            continue
        d = deps[0]
        dep_loop = next(lp for lp, v in chain[:top + 1] if v == d)
        ok = True
        for nm in names - {d}:
            v = idx.visible(nm, read.start_byte)
            if v is None:
                continue  # a macro or a function
            if v.decl.start_byte >= top_loop.start_byte or \
                    any(top_loop.start_byte <= a.start_byte < top_loop.end_byte for a in v.assigned):
                ok = False
                break
        tl = src.code[top_loop.start_byte:top_loop.end_byte]
        if not ok or re.search(rb"\b(__syncthreads\w*|__syncwarp|atomic\w*|__threadfence\w*|asm)\b", tl):
            continue
        if shared and any(n.type in ("assignment_expression", "update_expression") and
                          re.match(r"\s*%s\b" % re.escape(name), text(n.child_by_field_name("left") or
                                                                       n.child_by_field_name("argument") or n))
                          for n in walk(top_loop)):
            continue
        t = _element_type(src, read, base, shared)
        if t is None:
            return None
        return top_loop, d, dep_loop, t
    return None


def cache_operands_in_registers(source: str, ctx: Context) -> list[Materialization]:
    """Operands a loop nest reads again on every trip of an inner loop -> one register array each,
    filled before the nest (see the module docstring)."""
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        f = src.function_at(k.node.start_byte)
        idx = FunctionIndex(src, k.node)
        caches: dict[tuple[int, str], list] = {}
        for n in walk(k.body):
            if n.type != "subscript_expression" or (n.parent is not None and n.parent.type == "subscript_expression"
                                                    and same(n.parent.child_by_field_name("argument"), n)):
                continue
            site = _operand_site(src, k.node, idx, n, f)
            if site is not None:
                caches.setdefault((site[0].start_byte, norm(text(n))), []).append((n, site))
        per, taken = [], set()
        for (_, key), reads in caches.items():
            read, (top, d, dep, typ) = reads[0]
            base = read
            while base.type == "subscript_expression":
                base = base.child_by_field_name("argument")
            name = fresh(src, k.node, f"ks_r_{text(base)}")
            while name in taken:
                name = f"{name}_"
            taken.add(name)
            bound = re.fullmatch(r"%s\s*<\s*(\w+)" % d, " ".join(text(dep.child_by_field_name("condition")).split())).group(1)
            header = " ".join(src.code[dep.start_byte:dep.child_by_field_name("body").start_byte].decode().split())
            rt = " ".join(text(read).split())
            fill = [f"{typ} {name}[{bound}];  // {rt} for every {d}, read once", f"{header} {name}[{d}] = {rt};"]
            per.append((top, fill, [Edit(r.start_byte, r.end_byte, f"{name}[{d}]") for r, _ in reads],
                        f"{rt} read once per {d} into {name}[{bound}] ({len(reads)} read(s) in the nest)", rt))
        if len(per) > 1:
            es = _placed(src, per)
            if es is not None:
                out.append(candidate(src, es, "cache_operands_in_registers", f"{k.name}: {len(per)} operands cached in registers"))
        for entry in per:
            es = _placed(src, [entry])
            if es is not None:
                out.append(candidate(src, es, "cache_operands_in_registers", f"{k.name}: {entry[3]}", excerpt=entry[4]))
    return out


def _placed(src: Source, entries: list) -> Optional[list[Edit]]:
    """The edits of some caches: each nest top gets its fills on the lines before it (a nest that is
    the body of a loop or an `if` without braces gets braces around the fills and itself)."""
    edits: list[Edit] = []
    tops: dict[int, tuple[Node, list[str]]] = {}
    for top, fill, reads, _, _ in entries:
        tops.setdefault(top.start_byte, (top, []))[1].extend(fill)
        edits += reads
    for top, fills in tops.values():
        at = pragma_before(src, top.start_byte) or top.start_byte
        a = src.raw.rfind(b"\n", 0, at) + 1
        if src.code[a:at].strip():
            return None
        ind = line_indent(src, top.start_byte)
        if top.parent is not None and top.parent.type == "compound_statement":
            edits.append(Edit(a, a, "".join(f"{ind}{ln}\n" for ln in fills)))
        else:  # `for (k...) for (i...)`: the fills join the nest in a block
            outer = line_indent(src, top.parent.start_byte) if top.parent is not None else ind
            edits.append(Edit(a, a, f"{outer}{{\n" + "".join(f"{ind}{ln}\n" for ln in fills)))
            edits.append(Edit(top.end_byte, top.end_byte, f"\n{outer}}}"))
    return edits


PAIR = Pair(RegisterCacheToReload, (Rewrite("cache_operands_in_registers", "register_cache", cache_operands_in_registers,
                                            prior=1.5),))
