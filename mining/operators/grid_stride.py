"""grid_stride_to_single: a grid-stride loop `for (T i = start; cond; i += stride) body` becomes
one element per thread: `{ T i = start; if (cond) body }`.

The while form `while (i < n) { ...; i += gridSize; }` (the update the body's last statement and
only write of `i`) becomes `if (i < n) { ... }`, the update kept: the one iteration, final value
included. A loop spelled by a macro (`#define CUDA_1D_KERNEL_LOOP(i, n) for (int i = ..; i < (n); i += step)`
invoked as `CUDA_1D_KERNEL_LOOP(i, n) { body }`) is rewritten from its expansion, in place of the
invocation and its body.

Correct only when the launch provides a thread for every element; the operator does not try to
prove that (the host clamps grids in many kernels): the gate rejects the rewrite when the
launch does not cover the range. Where the loop's variable starts at `blockIdx.x * B + threadIdx.x` and
its bound is a kernel parameter, a second candidate carries the launch too (`covering_launch_edits`):
every launch of the kernel gets ceil(bound argument / block) blocks, at the host variable that names
the grid when there is one (`blocks = (n + 2 * threads - 1) / (2 * threads)` in a multi-pass host
loop becomes `(n + threads - 1) / threads`, and the host code counting the partial results follows). Loops whose body uses `break` / `continue` are not sites.

A loop whose variable is declared outside it (`int i = ...; for (; i + s < n; i += 2 * s)`, an
unrolled main loop followed by a remainder loop that continues from its final `i`) becomes one
guarded iteration that still advances the variable when the rest of the function reads it:
`if (cond) { body  i += stride; }`. With a covering launch the loop ran at most once, and this
is that one iteration, final value included.

Forward, `grid_stride`: a one-element-per-thread kernel (`i = blockIdx.x * blockDim.x +
threadIdx.x;` then an early return or an `if (i < n)` guard, no barriers, shuffles or shared
memory, no other use of the thread indices) becomes a grid-stride loop over `i < n`, and its
launches are clamped to the resident grid (grid_clamp.py). Sound because the loop visits every
`i` the original grid covered, each exactly once, whatever the grid size; the body has no
cross-thread communication that would depend on which thread runs which `i`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.carriers import grid_stride_loops, grid_stride_whiles, macro_grid_stride_loops
from mining.operators.base import (Context, Edit, Materialization, Operator, Pair, Rewrite, candidate, raw_text,
                                   rewrite_range)
from mining.operators.grid_clamp import GRID_PER_SM, clamp_edits
from mining.operators.grid_stride_sum import sum_sites, x_index
from mining.operators.rewrite_util import splice_range
from mining.operators.nodes import (IndexDecl, Kernel, bare_jumps, code, global_index_axis, has_loop, indent_at, int_value,
                                    index_decls, kernel_launches, kernels, loop_var, raw, reindent, returns_or_syncs, split_top,
                                    statements, strip_parens)
from corpora.code.nodes import declarator_name
from corpora.code.parse import text


class GridStrideToSingle(Operator):
    name = "grid_stride_to_single"
    carrier = "grid_stride"
    description = "replace a grid-stride loop by one guarded element per thread"

    def edits(self, src):
        for loop in grid_stride_loops(src):
            edit = self._loop_edit(src, loop)
            if edit is not None:
                yield from _alone_and_with_launch(src, loop, edit)
        for loop in grid_stride_whiles(src):
            # `while (i < n) { ...; i += stride; }` runs at most once under a covering launch: `if`
            body = loop.child_by_field_name("body")
            if src.raw[loop.start_byte:loop.start_byte + 5] == b"while" and \
                    not re.search(rb"\b(break|continue)\b", src.code[body.start_byte:body.end_byte]):
                yield from _alone_and_with_launch(src, loop, Edit(loop.start_byte, loop.start_byte + 5, "if"))
        for m in macro_grid_stride_loops(src):
            # the loop a macro spells (CUDA_1D_KERNEL_LOOP(i, n) { body }): rewrite its expansion in place
            start = m.node.start_byte
            expanded = Source((src.raw[:start] + m.loop.encode() + src.raw[m.node.end_byte:]).decode("utf-8", "replace"))
            loop = next((n for n in grid_stride_loops(expanded) if n.start_byte == start), None)
            edit = self._loop_edit(expanded, loop) if loop is not None else None
            if edit is not None and edit.start == start and edit.end == start + len(m.loop.encode()):
                yield Edit(start, m.node.end_byte, edit.replacement)

    def _loop_edit(self, src, loop) -> Optional[Edit]:
        init = loop.child_by_field_name("initializer")
        cond = loop.child_by_field_name("condition")
        body = loop.child_by_field_name("body")
        upd = loop.child_by_field_name("update")
        if cond is None or body is None or upd is None:
            return None
        if re.search(rb"\b(break|continue)\b", src.code[body.start_byte:body.end_byte]):
            return None
        guarded = f"if ({raw_text(src, cond.start_byte, cond.end_byte)}) "
        if init is not None and init.type == "declaration":
            rep = "{ " + raw_text(src, init.start_byte, init.end_byte).rstrip()
            if not rep.endswith(";"):
                rep += ";"
            rep += " " + guarded + raw_text(src, body.start_byte, body.end_byte) + " }"
            return Edit(loop.start_byte, loop.end_byte, rep)
        if init is not None and init.type not in ("assignment_expression", "comma_expression"):
            return None
        var = re.match(r"^(\w+)\s*\+=", " ".join(text(upd).split())).group(1)
        rep = guarded + self._advance(src, loop, body, " ".join(text(upd).split()), var)
        if init is not None:
            rep = "{ " + raw_text(src, init.start_byte, init.end_byte) + "; " + rep + " }"
        return Edit(loop.start_byte, loop.end_byte, rep)

    @staticmethod
    def _advance(src, loop, body, update: str, var: str) -> str:
        """The body, followed by the update when the function reads the variable after the loop."""
        f = src.function_at(loop.start_byte)
        later = src.code[loop.end_byte:f.end_byte] if f is not None else b""
        raw = raw_text(src, body.start_byte, body.end_byte)
        if not re.search(rb"\b" + re.escape(var.encode()) + rb"\b", later):
            return raw
        if body.type != "compound_statement":
            return "{ " + raw + " " + update + "; }"
        head = raw[:-1]
        stripped = head.rstrip(" \t")
        if stripped.endswith("\n"):
            closing = head[len(stripped):]
            inner = next((_indent(src, c.start_byte) for c in body.named_children if c.type != "comment"),
                         closing + "    ")
            return stripped + inner + update + ";\n" + closing + "}"
        return head.rstrip() + " " + update + "; }"


_START = re.compile(r"blockIdx\.x\*(\w+(?:\.x)?)\+threadIdx\.x|threadIdx\.x\+blockIdx\.x\*(\w+(?:\.x)?)|"
                    r"(\w+(?:\.x)?)\*blockIdx\.x\+threadIdx\.x|threadIdx\.x\+(\w+(?:\.x)?)\*blockIdx\.x")


def _loop_start(src: Source, loop: Node, var: str) -> Optional[str]:
    """The value the loop variable starts from: the loop's own initializer, else the last
    `var = ...` before the loop in its function (comment-free, whitespace dropped)."""
    init = loop.child_by_field_name("initializer")
    if init is not None:
        m = re.search(r"\b%s\s*=\s*([^;]+)" % re.escape(var), text(init))
        return re.sub(r"\s+", "", m.group(1)) if m else None
    f = src.function_at(loop.start_byte)
    if f is None:
        return None
    before = src.code[f.start_byte:loop.start_byte].decode("utf-8", "replace")
    found = re.findall(r"\b%s\s*=(?!=)\s*([^;]+);" % re.escape(var), before)
    return re.sub(r"\s+", "", found[-1]) if found else None


def _paren(s: str) -> str:
    s = " ".join(s.split())
    return s if re.fullmatch(r"[\w.]+", s) else f"({s})"


def covering_launch_edits(src: Source, loop: Node) -> Optional[list[Edit]]:
    """The launch half of a single pass: a grid-stride loop `i < n` whose variable starts at
    `blockIdx.x * B + threadIdx.x` (one element per thread per pass) needs ceil(n / block) blocks.
    Every launch of the loop's kernel gets that grid, with `n` the launch's argument at the bound
    parameter's position and `block` the launch's own (scalar) block size; a grid named by a host
    variable is changed where that variable is defined (once, never assigned again), so the host
    code reading it (how many partial results a pass leaves) follows. None when the loop is not of
    that shape or a launch cannot be carried; the gate judges whether B is the block size."""
    f = src.function_at(loop.start_byte)
    cond = loop.child_by_field_name("condition")
    if f is None or not f.is_kernel or cond is None:
        return None
    m = re.fullmatch(r"\(?\s*(\w+)\s*<\s*(\w+)\s*\)?", " ".join(text(cond).split()))
    if not m:
        return None
    var, bound = m.group(1), m.group(2)
    pos = next((i for i, p in enumerate(f.params) if p.name == bound and not p.is_pointer), None)
    start = _loop_start(src, loop, var)
    if pos is None or start is None or not _START.fullmatch(re.sub(_CAST_RE, "", start).strip("()")):
        return None
    edits: dict[tuple[int, int], Edit] = {}
    calls = kernel_launches(src, f.name)
    if not calls:
        return None
    for launch in calls:
        call, grid, block, host = launch.call, launch.grid, launch.block, launch.host
        args = call.child_by_field_name("arguments")
        argv = [c for c in (args.named_children if args is not None else []) if c.type != "comment"]
        if pos >= len(argv) or host is None:
            return None
        g, b, a = text(grid).strip(), text(block).strip(), text(argv[pos]).strip()
        hcode = src.code[host.start_byte:host.end_byte].decode("utf-8", "replace")
        if re.match(r"dim3\b", g) or re.match(r"dim3\b", b) or any(
                re.search(r"\bdim3\s+%s\b" % re.escape(x), hcode) for x in (g, b) if re.fullmatch(r"\w+", x)):
            return None  # a scalar grid and block only
        new = f"({_paren(a)} + {_paren(b)} - 1) / {_paren(b)}"
        if _covers(src, g if not re.fullmatch(r"\w+", g) else _definition(src, host, g), a, b):
            continue
        if not re.fullmatch(r"\w+", g):
            edits[(grid.start_byte, grid.end_byte)] = Edit(grid.start_byte, grid.end_byte, new)
            continue
        fn = src.func_node(host)
        decls = [d for d in src.nodes("init_declarator", within=fn) if
                 (d.child_by_field_name("declarator") is not None and text(d.child_by_field_name("declarator")) == g)]
        writes = re.findall(r"\b%s\s*(?:\+\+|--|[-+*/%%&|^<>]{0,2}=(?!=))" % re.escape(g), hcode)
        if len(decls) != 1 or len(writes) != 1 or decls[0].start_byte > call.start_byte:
            return None  # defined once, never assigned again, before the launch
        value = decls[0].child_by_field_name("value")
        between = src.code[decls[0].end_byte:call.start_byte].decode("utf-8", "replace")
        if value is None or any(re.search(r"\b%s\s*(?:\+\+|--|[-+*/%%&|^]?=(?!=))" % re.escape(x), between)
                                for x in re.findall(r"[A-Za-z_]\w*", a + " " + b)):
            return None  # the argument and the block size mean the same at the definition and the launch
        edits[(value.start_byte, value.end_byte)] = Edit(value.start_byte, value.end_byte, new)
    return sorted(edits.values())


def _definition(src: Source, host, name: str) -> str:
    m = re.findall(r"\b%s\s*=(?!=)\s*([^;]+);" % re.escape(name), src.func_code(host).decode("utf-8", "replace"))
    return m[0] if len(m) == 1 else ""


def _covers(src: Source, grid: str, a: str, b: str) -> bool:
    """The grid already is ceil(a / b): `(a + b - 1) / b`, or with the block a literal B,
    `(a + B-1) / B` (casts and parentheses aside)."""
    g = re.sub(r"\s+", "", re.sub(_CAST_RE, "", grid))
    a, b = re.sub(r"\s+", "", a), re.sub(r"\s+", "", b)
    forms = {f"({x}+{y}-1)/{y}" for x in (a, f"({a})") for y in (b, f"({b})")}
    bv = int_value(src, b)
    if bv is not None:
        forms |= {f"({x}+{bv - 1})/{bv}" for x in (a, f"({a})")}
    return g in forms or g.strip("()") in forms


def _alone_and_with_launch(src: Source, loop: Node, edit: Edit):
    """The loop's edit, then (when a launch must follow) the same edit with the launch carried."""
    yield edit
    carried = with_covering_launch(src, loop, edit)
    if carried is not None:
        yield carried


def with_covering_launch(src: Source, loop: Node, edit: Edit) -> Optional[Edit]:
    """The loop's edit and its launches' grids as one edit (None when nothing needs carrying)."""
    launch = covering_launch_edits(src, loop)
    if not launch or any(e.start < edit.end and edit.start < e.end for e in launch) or \
            all(e.replacement == raw_text(src, e.start, e.end) for e in launch):
        return None
    subs = sorted([edit] + launch)
    lo, hi = subs[0].start, max(e.end for e in subs)
    return Edit(lo, hi, splice_range(src, lo, hi, subs))


_CAST_RE = r"\((?:unsigned|int|long|size_t|int64_t|uint64_t|\s)+\)"


def _indent(src, byte: int) -> str:
    a = src.raw.rfind(b"\n", 0, byte) + 1
    m = re.match(rb"[ \t]*", src.raw[a:byte])
    return m.group(0).decode() if m else ""


# --------------------------------------------------------------------------- forward half
@dataclass
class OneElement:
    """`T i = gidx; if (i >= n) return; REST` or `T i = gidx; ... if (i < n ...) STMT` in a kernel."""
    kernel: Kernel
    decl: IndexDecl
    bound: str  # n
    rest_start: int  # byte range of the statements that become the loop body
    rest_end: int
    drop_guard: Optional[Node]  # the early-return guard to delete
    unwrap: Optional[Node] = None  # `if (i < n) S` whose only condition is the bound: the loop body is S
    hoist: tuple = ()  # declarations between the index and its early-return guard (the bound's terms): before the loop


def _split_at_index(src: Source, k: Kernel):
    """The kernel's one x index declaration, its top-level statements and those after the
    declaration, or None when it has no single x index."""
    decls = [d for d in index_decls(src, k) if d.axis == "x"]
    if len(decls) != 1:
        return None
    d = decls[0]
    sts = statements(k.body)
    pos = next(i for i, s in enumerate(sts) if s.start_byte == d.stmt.start_byte)
    return d, sts, sts[pos + 1:]


def one_element(src: Source, k: Kernel, loops: bool = False) -> Optional[OneElement]:
    """`loops`: the element's work may hold a loop of its own (a word's bytes, a row's entries); the
    grid-stride loop wraps it unchanged. Off for grid_stride itself, whose gain is in a flat body."""
    c = code(src, k.body)
    if re.search(r"\b(threadIdx|blockIdx)\s*\.\s*[yz]\b|__syncthreads|__shared__|__shfl", c):
        return None
    split = _split_at_index(src, k)
    if split is None:
        return None
    d, sts, rest = split
    if not rest:
        return None
    # threadIdx/blockIdx only in the index declaration
    others = [s for s in sts if s.start_byte != d.stmt.start_byte]
    if any(re.search(r"\b(threadIdx|blockIdx|blockDim|gridDim)\b", code(src, s)) for s in others):
        return None
    i = re.escape(d.name)
    # `T i = gidx; const long long total = n * c; if (i >= total) return;`: declarations of loop-invariant
    # values (no index, no side effect) before the guard move before the loop
    hoist = []
    while len(rest) > 1 and rest[0].type == "declaration" and not re.search(
            r"\b%s\b|\+\+|--|\w\s*\(" % i, code(src, rest[0])) and rest[1].type in ("declaration", "if_statement"):
        hoist.append(rest[0])
        rest = rest[1:]
    first = rest[0]
    # only before an early-return guard, and only values never written again (one per thread, not per element)
    names = [declarator_name(x) for h in hoist for x in h.named_children if x.type == "init_declarator"]
    later = code(src, k.body)[rest[0].start_byte - k.body.start_byte:] if hoist else ""
    if hoist and (not (first.type == "if_statement" and first.child_by_field_name("alternative") is None and
                       re.fullmatch(r"\{?\s*return\s*;\s*\}?", code(src, first.child_by_field_name("consequence"))))
                  or None in names or len(names) != sum(len([x for x in h.named_children if x.type in (
                      "init_declarator", "identifier")]) for h in hoist)
                  or any(re.search(r"(\+\+|--)\s*%s\b|\b%s\s*(\+\+|--|[-+*/%%&|^]?=(?!=)|\[)" % (n, n), later)
                         for n in names)):
        return None
    if first.type == "if_statement" and first.child_by_field_name("alternative") is None:
        cond = strip_parens(code(src, first.child_by_field_name("condition")))
        cons = first.child_by_field_name("consequence")
        if cons is not None and re.fullmatch(r"\{?\s*return\s*;\s*\}?", code(src, cons)):
            m = re.fullmatch(r"%s\s*>=\s*(.+)" % i, cond) or re.fullmatch(r"(.+?)\s*<=\s*%s" % i, cond)
            if not m:
                return None
            body = rest[1:]
            if not body or any(returns_or_syncs(src, s) or bare_jumps(src, s) or (has_loop(s) and not loops) for s in body):
                return None
            return OneElement(k, d, m.group(1), body[0].start_byte, body[-1].end_byte, first, hoist=tuple(hoist))
    # guard form: the last statement is `if (i < n && ...) ...` and everything is inside the loop
    last = rest[-1]
    if last.type != "if_statement" or last.child_by_field_name("alternative") is not None:
        return None
    cond = strip_parens(code(src, last.child_by_field_name("condition")))
    bound = None
    for part in split_top(cond, "&&"):
        m = re.fullmatch(r"%s\s*<\s*(.+)" % i, strip_parens(part))
        if m:
            bound = m.group(1)
            break
    if bound is None or any(returns_or_syncs(src, s) or bare_jumps(src, s) or (has_loop(s) and not loops)
                                for s in rest):
        return None
    unwrap = last if len(split_top(cond, "&&")) == 1 else None
    return OneElement(k, d, bound, rest[0].start_byte, rest[-1].end_byte, None, unwrap)


def unguarded_element(src: Source, k: Kernel) -> Optional[OneElement]:
    """`T i = gidx; S1; S2; ...` with no bound at all (the launch sizes the data: every thread of the
    grid has an element): straight-line statements (declarations and expressions, no control flow),
    no thread or block index outside the declaration, no cooperation. Its bound is the grid's
    thread count, `(long long)gridDim.x * blockDim.x`: valid as long as the launch stays as it is
    (the caller must not clamp the grid)."""
    c = code(src, k.body)
    if re.search(r"\b(threadIdx|blockIdx)\s*\.\s*[yz]\b|__syncthreads|__shared__|__shfl|\breturn\b", c):
        return None
    split = _split_at_index(src, k)
    if split is None:
        return None
    d, sts, rest = split
    if not rest or any(s.type not in ("expression_statement", "declaration") for s in sts):
        return None
    if any(re.search(r"\b(threadIdx|blockIdx|blockDim|gridDim)\b|[?]", code(src, s)) for s in sts if s is not d.stmt):
        return None
    return OneElement(k, d, "(long long)gridDim.x * blockDim.x", rest[0].start_byte, rest[-1].end_byte, None)


def counted_unguarded_edits(src: Source) -> Optional[tuple[list[Edit], list[str]]]:
    """Every kernel of unguarded elements (`unguarded_element`) as a grid-stride loop to a new last
    parameter `long long ks_total`, which each launch passes as its own thread count
    (`(long long)(grid) * (block)`, a 1-D scalar launch) while its grid is clamped to the resident
    grid: each thread count the launch covered is still the bound, so the same elements are visited,
    each once, by fewer threads. Every kernel of a name must have this form (specializations share
    their launches). None when no kernel does or a launch cannot be carried."""
    ks = kernels(src)
    names = sorted({k.name for k in ks if unguarded_element(src, k) is not None})
    edits: list[Edit] = []
    for name in names:
        same = [k for k in ks if k.name == name]
        if any(unguarded_element(src, k) is None for k in same) or re.search(rb"\bks_total\b", src.code):
            continue
        ls = kernel_launches(src, name)
        if not ls or any(re.match(r"\s*dim3\b", code(src, la.grid)) or re.match(r"\s*dim3\b", code(src, la.block))
                         for la in ls):
            continue
        clamp = clamp_edits(src, name, every_definition=True)
        if clamp is None:
            continue
        mine: list[Edit] = []
        for k in same:
            oe = unguarded_element(src, k)
            oe.bound = "ks_total"
            mine += grid_stride_edits(src, oe)
            plist = k.node.child_by_field_name("declarator")
            plist = plist.child_by_field_name("parameters") if plist is not None else None
            if plist is None:
                mine = []
                break
            mine.append(Edit(plist.end_byte - 1, plist.end_byte - 1, ", long long ks_total" if plist.named_children
                             else "long long ks_total"))
        if not mine:
            continue
        for la in ls:
            args = la.call.child_by_field_name("arguments")
            if args is None:
                mine = []
                break
            total = f"(long long)({raw(src, la.grid)}) * ({raw(src, la.block)})"
            mine.append(Edit(args.end_byte - 1, args.end_byte - 1, (", " if args.named_children else "") + total))
        if mine:
            edits += mine + clamp
    # one helper insertion even when several kernels are carried
    seen, out = set(), []
    for e in edits:
        key = (e.start, e.end, e.replacement)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return (out, names) if out else None


def _stride_expr(ty: str) -> str:
    t = " ".join(ty.replace("const", "").split())
    if t in ("int", "unsigned", "unsigned int", ""):
        return "gridDim.x * blockDim.x"
    return f"({t})gridDim.x * blockDim.x"


def grid_stride_edits(src: Source, oe: OneElement) -> list[Edit]:
    d = oe.decl
    ty = " ".join(d.type.replace("const", "").split())
    ind = indent_at(src, d.stmt.start_byte)
    if oe.unwrap is not None:
        cons = oe.unwrap.child_by_field_name("consequence")
        inner = statements(cons) if cons.type == "compound_statement" else [cons]
        edits = [Edit(oe.unwrap.start_byte, oe.unwrap.end_byte,
                          "\n".join(reindent(raw(src, x), ind + "    ").strip() for x in inner) if inner else ";")]
        body = rewrite_range(src, oe.rest_start, oe.rest_end, edits)
    else:
        body = rewrite_range(src, oe.rest_start, oe.rest_end, [])
    loop = "".join(f"{raw(src, h).strip()}\n{ind}" for h in oe.hoist)
    loop += (f"for ({ty} {d.name} = {raw(src, d.value)}; {d.name} < {oe.bound}; {d.name} += {_stride_expr(ty)}) {{\n"
             f"{reindent(body, ind + '    ', first=True)}\n{ind}}}")
    return [Edit(d.stmt.start_byte, oe.rest_end, loop)]


def grid_stride(source: str, ctx: Context) -> list[Materialization]:
    """One element per thread -> a grid-stride loop; and an element handed to a sum -> a
    register sum over a grid-stride loop (grid_stride_sum.py)."""
    src = Source(source)
    out = sum_sites(source)
    for k in kernels(src):
        oe = one_element(src, k)
        if oe is None:
            continue
        edits = grid_stride_edits(src, oe)
        clamp = clamp_edits(src, k.name)
        if clamp is None:
            continue
        out.append(candidate(src, edits + clamp, "grid_stride",
                        f"{k.name}: one element per thread -> grid-stride loop over `{oe.decl.name} < {oe.bound}`, "
                        f"launch clamped to {GRID_PER_SM} blocks per SM", excerpt=code(src, oe.decl.stmt)))
    return out


def grid_stride_x_loops(src: Source, k: Kernel) -> list[tuple[Node, str, str, str, str]]:
    """Grid-stride loops over x: (loop, type, var, bound, stride text) with an index-start init."""
    out = []
    for loop in grid_stride_loops(src):
        if not (k.body.start_byte <= loop.start_byte < k.body.end_byte):
            continue
        lv = loop_var(src, loop)
        cond = loop.child_by_field_name("condition")
        upd = loop.child_by_field_name("update")
        if lv is None or cond is None or upd is None:
            continue
        m = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(lv[1]), code(src, cond))
        mu = re.fullmatch(r"%s\s*\+=\s*(.+)" % re.escape(lv[1]), code(src, upd))
        if not m or not mu or x_loop_block(src, k, loop, lv[2], mu.group(1)) is None:
            continue
        out.append((loop, lv[0], lv[1], m.group(1), mu.group(1)))
    return out


def x_loop_block(src: Source, k: Kernel, loop: Node, init: str, stride: str) -> Optional[str]:
    """The B of a grid-stride loop over x whose threads start at `blockIdx.x * B + threadIdx.x` and
    step by `gridDim.x * B`: "blockDim.x" for the usual spelling (any stride text: the callers
    gate it), else B when the start is the kernel's x index (`int i = blockIdx.x * NUM_THREADS + tid`,
    grid_stride_sum.x_index) and the stride is gridDim.x times the same B. Such a loop visits
    each index once for any grid, so a wider loop with the same start and stride does too."""
    if global_index_axis(init) == "x" or _index_copy_axis(src, loop, init) == "x":
        return "blockDim.x"
    ix = x_index(src, k)
    if ix is None or ix[1] != init.strip() or _index_copy_axis(src, loop, init, any_form=True) is None:
        return None
    b = re.sub(r"\s+", "", strip_parens(ix[3]))
    st = re.sub(r"\s+", "", strip_parens(stride))
    if st not in (f"gridDim.x*{b}", f"{b}*gridDim.x", f"gridDim.x*({b})", f"({b})*gridDim.x"):
        return None
    return ix[3]


def _index_copy_axis(src: Source, loop: Node, init: str, any_form: bool = False) -> Optional[str]:
    """The axis of a loop start that names a variable holding the global index (`int i = gidx;
    for (int j = i; ...)`, as grid_stride_sum writes): assigned once in the function, before the loop."""
    name = init.strip()
    f = src.function_at(loop.start_byte)
    if f is None or not re.fullmatch(r"[A-Za-z_]\w*", name):
        return None
    body = src.code[f.start_byte:f.end_byte].decode("utf-8", "replace")
    writes = re.findall(r"\b%s\s*(?:[-+*/%%&|^]?=(?!=)|\+\+|--)|(?:\+\+|--)\s*%s\b" % (re.escape(name), re.escape(name)), body)
    before = src.code[f.start_byte:loop.start_byte].decode("utf-8", "replace")
    found = re.findall(r"\b%s\s*=(?!=)\s*([^;]+);" % re.escape(name), before)
    if len(writes) != 1 or len(found) != 1:
        return None
    return "x" if any_form else global_index_axis(found[0])


PAIR = Pair(GridStrideToSingle, (Rewrite("grid_stride", "grid_stride", grid_stride, prior=1.5),))
