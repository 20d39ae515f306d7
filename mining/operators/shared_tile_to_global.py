"""shared_tile_to_global: a shared-memory tile that is filled from global memory by one plain
assignment and otherwise only read is removed; every read loads its element straight from global
memory instead.

    As[threadIdx.y][threadIdx.x] = (row < M && t + threadIdx.x < K) ? A[row * K + t + threadIdx.x] : 0.0f;
    ... acc += As[threadIdx.y][k] * ...
->  ... acc += ((row < M && t + k < K) ? A[row * K + t + k] : 0.0f) * ...

Each read `T[a][b]` becomes the fill expression with the fill indices replaced by the read's
(`threadIdx.y -> a`, `threadIdx.x -> b`; a summand index such as `threadIdx.y + i` is replaced as a
whole), the fill (with its now empty loop) and the declaration are deleted. The substitution is
only made when it is provably the value the read saw: see `fill_forwarding` for the conditions
(fill indices are variable terms or sums, every thread-specific variable reaches the value only
through them, the value reads no shared memory and no global memory the kernel writes, every
other variable is unchanged between fill and read, guards become `G ? E : 0`). The same edit
removes `coalesced_transpose`, `transposed_tile` and `halo_tile` when it removes their tile.
Double-buffered tiles are not sites until other operators have made them plain. A tile filled by
a loop over several rows per thread, through locals that mix the thread's coordinates, lane by
lane from registers (a vector, a prefetch array, a wide store), or by a software pipeline (before
a loop and at the end of its body) is forwarded by solving the fill's index equations
(`tile_algebra.py`).

Register budget: when the forwarded global loads land in a loop nest that `#pragma unroll` unrolls
completely and the nest would then issue more loads per thread than the kernel's block size leaves
registers for (see `unroll_budget`), the same edit also drops that nest's outermost `#pragma unroll`
(again until the nest fits): `tiled_matmul` with both tiles forwarded into its unrolled 32-step
product loop otherwise needs 80 registers per thread where its 1024-thread block allows 64, and
fails to launch on the GPU although the CPU executor runs it.

Forward, `stage_transpose_tile` (also serves coalesced_transpose skills) and `stage_matmul_tiles`
(also serves transposed_tile skills):

* a transposing copy `out[f(c) + r] = in[g(r) + c]` stages the block's patch through a padded
  shared tile, loaded with x = column and stored with consecutive threads on consecutive output
  addresses. Sound because each element is loaded once and stored once by the same block, with a
  barrier between the two phases; no launch change.
* a dot-product loop over global memory in a one-output-per-thread kernel with a square T x T
  block stages T x T tiles of both operands in shared memory per k-step (zero-filled outside the
  matrices), and a second form adds R x R outputs per thread in registers (T*R x T*R block tiles,
  R = 2 or 4, the dim3 grid divided by R). Sound because every product term `A[row][k] * B[k][col]`
  is summed once in the original k order per output; the zero fill adds nothing; the kernel's
  early return moves after the loop so every thread loads its part of the tiles and meets both
  barriers of each k-step.
"""
from __future__ import annotations

import re
from typing import Optional


from corpora.code.source import Source
from mining.operators.base import (Context, Edit, Materialization, Operator, Pair, Rewrite, apply_edits, candidate,
                                   rewrite_range, splice)
from mining.operators.fill_forwarding import forward_fill
from mining.operators.nodes import (WARP, IndexDecl, Kernel, Launch, block_dims, code, has, has_loop, indent_at,
                                    index_decls, is_lhs, kernels, launches, loop_var, mentions, pointer_params, raw,
                                    reindent, returns_or_syncs, split_top, statements, strip_parens, sub_base,
                                    sub_index, subscripts_of, unit_update)
from mining.operators.rewrite_util import pragma_before, structural
from mining.operators.tile_algebra import algebraic_forward, pipelined_forward
from mining.operators.unroll_budget import load_budget, unroll_factor, unrolled_loads
from corpora.code.parse import text, walk


class SharedTileToGlobal(Operator):
    name = "shared_tile_to_global"
    carrier = "shared_tile"
    description = "replace reads of a once-filled shared tile by the global loads that filled it"

    def edits(self, src):
        src = structural(src)
        for decl, name, dims in src.shared_decls:
            if not dims or b"extern" in src.code[decl.start_byte:decl.end_byte]:
                continue
            f = src.function_at(decl.start_byte)
            fn = src.func_node(f) if f is not None else None
            if fn is None:
                continue
            plan = forward_fill(src, fn, decl, name, len(dims), private=False)
            if plan is not None:
                yield within_register_budget(src, f.start_byte, plan.edit)
                continue
            # a fill by a multi-row loop or through locals that mix the thread's coordinates:
            # solved as index algebra (issue 19)
            edit = algebraic_forward(src, fn, decl, name)
            if edit is None:
                # filled before a software-pipelined loop and again at the end of its body
                edit = pipelined_forward(src, fn, decl, name)
            if edit is not None:
                yield within_register_budget(src, f.start_byte, edit)


def within_register_budget(src: Source, fstart: int, edit: Edit, rounds: int = 8) -> Edit:
    """`edit`, widened to also drop the `#pragma unroll` of every fully unrolled loop nest that the
    rewrite leaves over the kernel's load budget (the nest overlaps the rewritten text)."""
    raw = src.raw
    new = splice(raw, edit).encode()
    lo, hi = edit.start, edit.start + len(edit.replacement.encode())
    for _ in range(rounds):
        nsrc = structural(Source(new))
        f = nsrc.function_at(fstart)
        fn = nsrc.func_node(f) if f is not None else None
        if fn is None:
            break
        budget = load_budget(nsrc, f.name)
        drop = None
        for loop in nsrc.nodes("for_statement", within=fn):
            if unroll_factor(nsrc, loop) <= 1 or loop.end_byte <= lo or loop.start_byte >= hi:
                continue
            if _unrolled_ancestor(nsrc, loop):
                continue  # counted with its outermost unrolled loop
            if unrolled_loads(nsrc, f, loop) > budget:
                drop = pragma_before(nsrc, loop.start_byte)
                break
        if drop is None:
            break
        end = new.find(b"\n", drop)
        end = len(new) if end < 0 else end + 1
        new = new[:drop] + new[end:]
        if drop < lo:
            lo -= end - drop
        hi -= end - drop if drop < hi else 0
    if new == splice(raw, edit).encode():
        return edit
    # the smallest byte range of the original that covers every change (and the original edit)
    p = 0
    limit = min(edit.start, len(new))
    while p < limit and raw[p] == new[p]:
        p += 1
    s = 0
    limit = min(len(raw) - edit.end, len(new) - p)
    while s < limit and raw[len(raw) - 1 - s] == new[len(new) - 1 - s]:
        s += 1
    return Edit(p, len(raw) - s, new[p:len(new) - s].decode("utf-8"))


def _unrolled_ancestor(src: Source, loop) -> bool:
    p = loop.parent
    while p is not None and p.type not in ("function_definition", "lambda_expression"):
        if p.type == "for_statement" and unroll_factor(src, p) > 1:
            return True
        p = p.parent
    return False


# --------------------------------------------------------------------------- forward half
def _additive_terms(expr: str) -> list[str]:
    return [strip_parens(t) for t in split_top(strip_parens(expr), "+")]


def _two_d(src: Source, k: Kernel) -> Optional[tuple[IndexDecl, IndexDecl, tuple[int, int, int]]]:
    decls = {d.axis: d for d in index_decls(src, k)}
    if set(decls) != {"x", "y"} or len(index_decls(src, k)) != 2:
        return None
    ls = launches(src, k.name)
    dims = {block_dims(src, l) for l in ls}
    if not ls or None in dims or len(dims) != 1:
        return None
    bd = dims.pop()
    if bd[2] != 1 or bd[0] * bd[1] > 1024:
        return None
    return decls["x"], decls["y"], bd


def _transpose_tiles(source: str, ctx: Context) -> list[Materialization]:
    """`out[f(c) + r] = in[g(r) + c]` (a transposing copy: the load coalesced along x, the store
    along y) -> the block's BY x BX patch goes through a shared tile: loaded with x = column,
    stored with consecutive threads on consecutive output addresses. Padded so the transposed
    reads fall in distinct banks. No launch change."""
    src = Source(source)
    out = []
    for k in kernels(src):
        two = _two_d(src, k)
        if two is None or has(src, k.body, r"__shared__|__syncthreads|\breturn\b"):
            continue
        dx, dy, (bx, by, _) = two
        sts = statements(k.body)
        last = sts[-1]
        if last.type != "if_statement" or last.child_by_field_name("alternative") is not None:
            continue
        if any(s.type != "declaration" for s in sts[:-1]):
            continue
        cons = last.child_by_field_name("consequence")
        if cons.type == "compound_statement":
            inner = statements(cons)
            if len(inner) != 1:
                continue
            cons = inner[0]
        if cons.type != "expression_statement" or not cons.named_children or \
                cons.named_children[0].type != "assignment_expression":
            continue
        asg = cons.named_children[0]
        left, right = asg.child_by_field_name("left"), asg.child_by_field_name("right")
        if asg.children[1].type != "=" or left.type != "subscript_expression" or right.type != "subscript_expression":
            continue
        c, r = dx.name, dy.name
        ptrs = pointer_params(k.sig)
        lp, sp = ptrs.get(sub_base(right)), ptrs.get(sub_base(left))
        if lp is None or sp is None:
            continue
        load_terms, store_terms = _additive_terms(sub_index(right)), _additive_terms(sub_index(left))
        if c not in load_terms or r not in store_terms:
            continue
        if sum(mentions(t, c) for t in load_terms) != 1 or sum(mentions(t, r) for t in store_terms) != 1:
            continue
        elem = lp.base_type
        pitch = bx + (WARP // by if by < WARP and WARP % by == 0 else 1)
        ind = indent_at(src, last.start_byte)
        cond = raw(src, last.child_by_field_name("condition"))
        ct = " ".join(dx.type.replace("const", "").split()) or "int"
        rt = " ".join(dy.type.replace("const", "").split()) or "int"
        rep = (f"// ks-optimize: the {by} x {bx} patch goes through a shared tile so the stores are coalesced too\n"
               f"{ind}__shared__ {elem} ks_tile[{by}][{pitch}];\n"
               f"{ind}if {cond} ks_tile[threadIdx.y][threadIdx.x] = {raw(src, right)};\n"
               f"{ind}__syncthreads();\n"
               f"{ind}{{\n"
               f"{ind}    const int ks_l = threadIdx.y * {bx} + threadIdx.x;\n"
               f"{ind}    const {ct} {c} = blockIdx.x * {bx} + ks_l / {by};\n"
               f"{ind}    const {rt} {r} = blockIdx.y * {by} + ks_l % {by};\n"
               f"{ind}    if {cond} {raw(src, left)} = ks_tile[ks_l % {by}][ks_l / {by}];\n"
               f"{ind}}}")
        out.append(candidate(src, [Edit(last.start_byte, last.end_byte, rep)], "stage_transpose_tile",
                        f"{k.name}: transposing copy staged through a shared {by} x {pitch} tile (reads and writes coalesced)",
                        excerpt=code(src, last)))
    return out


def stage_transpose_tile(source: str, ctx: Context) -> list[Materialization]:
    """The transposing copy of `_transpose_tiles`; a kernel that walks the matrix through one
    flattened index (`r = i / C; c = i % C; if (i < R * C) out[c * R + r] = in[i];`) is first read
    as the 2-D kernel it spells (`_unflatten`: x = column, y = row, a 32 x 32 block), in the same step."""
    out = _transpose_tiles(source, ctx)
    if not out:
        staged = _unflatten(source)
        if staged is not None:
            for m in _transpose_tiles(staged, ctx):
                m.description += " (its flattened index read as 2-D: a 32 x 32 block over columns and rows)"
                out.append(m)
    return out


_FLAT_BLOCK = (32, 32)  # a warp per tile row: the transposed stores are whole 128-byte rows too


def _unflatten(source: str) -> Optional[str]:
    """`I i = gidx; I r = i / C; I c = i % C; if (i < R * C) { out[..c..r..] = in[i]; }` with R and C
    integer parameters -> `I c = x index; I r = y index; if (r < R && c < C) { out[..] = in[r * C + c]; }`,
    every launch of the kernel over ceil(C / 32) x ceil(R / 32) blocks of 32 x 32. Sound: (r, c) with
    r < R, c < C is a bijection with i = r * C + c < R * C, so the same element pairs are copied."""
    src = Source(source)
    edits: list[Edit] = []
    for k in kernels(src):
        d = [x for x in index_decls(src, k) if x.axis == "x"]
        sts = statements(k.body)
        if len(d) != 1 or len(index_decls(src, k)) != 1 or len(sts) != 4 or has(src, k.body, r"__shared__|__syncthreads|\breturn\b"):
            continue
        i = d[0].name
        iw = re.escape(i)
        rc: dict[str, tuple[str, str, str]] = {}  # "/" or "%" -> (name, type, C)
        for st in sts[1:3]:
            m = re.fullmatch(r"((?:const\s+)?(?:unsigned\s+)?\w+)\s+(\w+)\s*=\s*%s\s*([/%%])\s*(\w+)\s*;" % iw, code(src, st).strip())
            if m is None:
                break
            rc[m.group(3)] = (m.group(2), " ".join(m.group(1).replace("const", "").split()), m.group(4))
        if set(rc) != {"/", "%"} or rc["/"][2] != rc["%"][2] or sts[0].start_byte != d[0].stmt.start_byte:
            continue
        r, rt, C = rc["/"]
        c, ct, _ = rc["%"]
        last = sts[3]
        if last.type != "if_statement" or last.child_by_field_name("alternative") is not None:
            continue
        cond = strip_parens(code(src, last.child_by_field_name("condition")))
        m = re.fullmatch(r"%s\s*<\s*(\w+)\s*\*\s*(\w+)" % iw, cond)
        if m is None or C not in (m.group(1), m.group(2)):
            continue
        R = m.group(2) if m.group(1) == C else m.group(1)
        params = [p.name for p in k.sig.params]
        if R not in params or C not in params or R == C:
            continue
        cons = last.child_by_field_name("consequence")
        inner = statements(cons) if cons.type == "compound_statement" else [cons]
        if len(inner) != 1 or inner[0].type != "expression_statement" or not inner[0].named_children:
            continue
        asg = inner[0].named_children[0]
        if asg.type != "assignment_expression" or asg.children[1].type != "=":
            continue
        left, right = asg.child_by_field_name("left"), asg.child_by_field_name("right")
        if right.type != "subscript_expression" or strip_parens(sub_index(right)).strip() != i or \
                left.type != "subscript_expression" or mentions(code(src, left), i):
            continue
        ls = [la for la in launches(src) if la.kernel.split("<", 1)[0].split("::")[-1].strip() == k.name]
        if not ls:
            continue
        launch_edits = []
        for la in ls:
            args = la.call.child_by_field_name("arguments")
            av = [x for x in args.named_children if x.type != "comment"] if args is not None else []
            if len(av) != len(params) or block_dims(src, la) is None or block_dims(src, la)[1:] != (1, 1):
                launch_edits = None
                break
            ra, ca = raw(src, av[params.index(R)]), raw(src, av[params.index(C)])
            bx, by = _FLAT_BLOCK
            launch_edits += [Edit(la.grid.start_byte, la.grid.end_byte, f"dim3((({ca}) + {bx - 1}) / {bx}, (({ra}) + {by - 1}) / {by})"),
                             Edit(la.block.start_byte, la.block.end_byte, f"dim3({bx}, {by})")]
        if not launch_edits:
            continue
        ind = indent_at(src, sts[0].start_byte)
        body = (f"const {ct} {c} = blockIdx.x * blockDim.x + threadIdx.x;\n"
                f"{ind}const {rt} {r} = blockIdx.y * blockDim.y + threadIdx.y;\n"
                f"{ind}if ({r} < {R} && {c} < {C}) {{\n"
                f"{ind}    {raw(src, left)} = {sub_base(right)}[{r} * {C} + {c}];\n"
                f"{ind}}}")
        edits += [Edit(sts[0].start_byte, last.end_byte, body)] + launch_edits
    return apply_edits(src.raw, edits) if edits else None


def _square_tiles(source: str, ctx: Context) -> list[Materialization]:
    """A dot-product loop `for (k = 0; k < K; ++k) acc += A[..row..k..] * B[..k..col..]` in a
    one-output-per-thread kernel with a square T x T block -> T x T tiles of both operands staged
    in shared memory per k-step (zero-filled outside the matrices), the loop reading them. The
    kernel's early return moves after the loop: every thread loads and meets the barriers."""
    src = Source(source)
    out = []
    for k in kernels(src):
        two = _two_d(src, k)
        if two is None or has(src, k.body, r"__shared__|__syncthreads"):
            continue
        dx, dy, (bx, by, _) = two
        if bx != by or bx not in (8, 16, 32):
            continue
        T = bx
        col, row = dx.name, dy.name
        sts = statements(k.body)
        ret_i = next((i for i, s in enumerate(sts) if s.type == "if_statement" and
                      re.fullmatch(r"\{?\s*return\s*;\s*\}?", code(src, s.child_by_field_name("consequence")))), None)
        if ret_i is None:
            continue
        ret = sts[ret_i]
        cond = strip_parens(code(src, ret.child_by_field_name("condition")))
        parts = split_top(cond, "||")
        rowbad = [p for p in parts if mentions(p, row) and not mentions(p, col)]
        colbad = [p for p in parts if mentions(p, col) and not mentions(p, row)]
        if len(rowbad) + len(colbad) != len(parts):
            continue
        loop = next((s for s in sts[ret_i + 1:] if s.type == "for_statement"), None)
        if loop is None or any(returns_or_syncs(src, s) for s in sts[ret_i + 1:]):
            continue
        lv = loop_var(src, loop)
        lcond = loop.child_by_field_name("condition")
        if lv is None or lcond is None or not unit_update(src, loop, lv[1]) or lv[2].strip() != "0":
            continue
        kv = lv[1]
        m = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(kv), code(src, lcond))
        if not m:
            continue
        kb = m.group(1)
        body = loop.child_by_field_name("body")
        ptrs = pointer_params(k.sig)
        subs = [s for s in subscripts_of(src, body, ptrs)]
        if len(subs) != 2 or any(is_lhs(s) for s in subs) or has_loop(body):
            continue
        a = next((s for s in subs if mentions(sub_index(s), row) and mentions(sub_index(s), kv) and
                  not mentions(sub_index(s), col)), None)
        b = next((s for s in subs if mentions(sub_index(s), col) and mentions(sub_index(s), kv) and
                  not mentions(sub_index(s), row)), None)
        if a is None or b is None or a is b:
            continue
        ta, tb = ptrs[sub_base(a)].base_type, ptrs[sub_base(b)].base_type
        inner = rewrite_range(src, body.start_byte, body.end_byte,
                              [Edit(a.start_byte, a.end_byte, "ks_As[threadIdx.y][ks_kk]"),
                               Edit(b.start_byte, b.end_byte, "ks_Bs[ks_kk][threadIdx.x]")])
        kdecl = f"const int {kv} = ks_k0 + ks_kk; " if mentions(inner, kv) else ""
        ind = indent_at(src, ret.start_byte)
        i2 = ind + "    "
        rb = " || ".join(rowbad) or "false"
        cb = " || ".join(colbad) or "false"
        between = rewrite_range(src, ret.end_byte, loop.start_byte, [])
        tiles = (f"const bool ks_live = !({cond});  // ks-optimize: every thread loads tiles and meets the barriers"
                 f"{between}"
                 f"__shared__ {ta} ks_As[{T}][{T + 1}];\n"
                 f"{ind}__shared__ {tb} ks_Bs[{T}][{T + 1}];\n"
                 f"{ind}for (int ks_k0 = 0; ks_k0 < {kb}; ks_k0 += {T}) {{\n"
                 f"{i2}{{ const int {kv} = ks_k0 + threadIdx.x; ks_As[threadIdx.y][threadIdx.x] = "
                 f"(!({rb}) && {kv} < {kb}) ? {raw(src, a)} : {ta}(); }}\n"
                 f"{i2}{{ const int {kv} = ks_k0 + threadIdx.y; ks_Bs[threadIdx.y][threadIdx.x] = "
                 f"(!({cb}) && {kv} < {kb}) ? {raw(src, b)} : {tb}(); }}\n"
                 f"{i2}__syncthreads();\n"
                 f"{i2}#pragma unroll\n"
                 f"{i2}for (int ks_kk = 0; ks_kk < {T}; ++ks_kk) {{ {kdecl}{inner} }}\n"
                 f"{i2}__syncthreads();\n"
                 f"{ind}}}\n"
                 f"{ind}if (!ks_live) return;")
        out.append(candidate(src, [Edit(ret.start_byte, loop.end_byte, tiles)], "stage_matmul_tiles",
                        f"{k.name}: {T} x {T} shared tiles of {sub_base(a)} and {sub_base(b)} per k-step",
                        excerpt=code(src, loop)[:160]))
    return out


def _grid_dim3_edits(src: Source, launch: Launch, factor: int) -> Optional[list[Edit]]:
    """Edits dividing a launch's dim3 grid (x and y) by `factor` (rounded up), or None."""
    g = code(src, launch.grid)
    m = re.fullmatch(r"dim3\s*\((.*)\)", g)
    if m:
        node = launch.grid
        args = next((c for c in walk(node) if c.type == "argument_list"), None)
    elif re.fullmatch(r"\w+", g) and launch.host is not None:
        args = None
        for decl in src.nodes("declaration"):
            if not (launch.host.start_byte <= decl.start_byte < launch.call.start_byte):
                continue
            if not re.match(r"dim3\b", code(src, decl)):
                continue
            # the declarator named g, also in `dim3 threads(32, 32), grid(..);`
            for d in decl.children_by_field_name("declarator"):
                name = d.child_by_field_name("declarator")
                if name is not None and text(name) == g:
                    args = next((n for n in walk(d) if n.type in ("argument_list", "initializer_list")), None)
    else:
        return None
    if args is None or len(args.named_children) < 2:
        return None
    edits = []
    for a in args.named_children[:2]:
        edits.append(Edit(a.start_byte, a.end_byte, f"(({raw(src, a)}) + {factor - 1}) / {factor}"))
    return edits


def _dot_loop(src: Source, k: Kernel, loop, row: str, col: str):
    """`for (kv = 0; kv < KB; ++kv) acc += A[..row..kv..] * B[..col..kv..];` read as (kv, KB, body,
    A subscript, B subscript, acc), or None: one unit-step loop from 0 with no loop inside, exactly
    two pointer-parameter reads (one indexed by row and kv, one by col and kv), and one `+=` into a
    plain variable (stage_matmul_tiles and register_tile_to_dot's forward read the same loop)."""
    lv = loop_var(src, loop)
    lcond = loop.child_by_field_name("condition")
    if lv is None or lcond is None or not unit_update(src, loop, lv[1]) or lv[2].strip() != "0":
        return None
    kv = lv[1]
    m = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(kv), code(src, lcond))
    body = loop.child_by_field_name("body")
    if not m or body is None or has_loop(body):
        return None
    subs = subscripts_of(src, body, pointer_params(k.sig))
    if len(subs) != 2 or any(is_lhs(s) for s in subs):
        return None
    a = next((s for s in subs if mentions(sub_index(s), row) and mentions(sub_index(s), kv) and
              not mentions(sub_index(s), col)), None)
    b = next((s for s in subs if mentions(sub_index(s), col) and mentions(sub_index(s), kv) and
              not mentions(sub_index(s), row)), None)
    if a is None or b is None:
        return None
    asg = [n for n in walk(body) if n.type == "assignment_expression"]
    if len(asg) != 1 or asg[0].children[1].type != "+=" or asg[0].child_by_field_name("left").type != "identifier":
        return None
    return kv, m.group(1), body, a, b, text(asg[0].child_by_field_name("left"))


_ELEM_BYTES = {"float": 4, "int": 4, "unsigned": 4, "unsigned int": 4, "half": 2, "__half": 2, "__nv_bfloat16": 2,
               "double": 8, "long long": 8}
STATIC_SHARED_BYTES = 48 * 1024  # the most a kernel may declare statically


def _tiles_fit(ta: str, tb: str, T: int, R: int) -> bool:
    """The two operand tiles (T*R x T+1 of A, T x T*R of B) fit the static shared-memory limit: a
    32 x 32 block takes 4 x 4 outputs per thread (128 x 128 tiles) for float or half, not for double;
    an element type of unknown size keeps the tile at 64 x 64."""
    sa, sb = _ELEM_BYTES.get(" ".join(ta.split())), _ELEM_BYTES.get(" ".join(tb.split()))
    if sa is None or sb is None:
        return T * R <= 64
    return T * R * (T + 1) * sa + T * T * R * sb <= STATIC_SHARED_BYTES


def _matmul_register_tiles(src: Source, k: Kernel, T: int, R: int) -> Optional[Materialization]:
    two = _two_d(src, k)
    if two is None:
        return None
    dx, dy, _ = two
    col, row = dx.name, dy.name
    sts = statements(k.body)
    ret_i = next((i for i, s in enumerate(sts) if s.type == "if_statement" and
                  re.fullmatch(r"\{?\s*return\s*;\s*\}?", code(src, s.child_by_field_name("consequence")))), None)
    if ret_i is None:
        return None
    ret = sts[ret_i]
    cond = strip_parens(code(src, ret.child_by_field_name("condition")))
    parts = split_top(cond, "||")
    rowbad = [p for p in parts if mentions(p, row) and not mentions(p, col)]
    colbad = [p for p in parts if mentions(p, col) and not mentions(p, row)]
    if len(rowbad) + len(colbad) != len(parts):
        return None
    li = next((i for i in range(ret_i + 1, len(sts)) if sts[i].type == "for_statement"), None)
    if li is None:
        return None
    loop, between, epilogue = sts[li], sts[ret_i + 1:li], sts[li + 1:]
    if not epilogue or any(returns_or_syncs(src, s) or has_loop(s) for s in epilogue + between):
        return None
    dot = _dot_loop(src, k, loop, row, col)
    if dot is None:
        return None
    kv, kb, body, a, b, acc = dot
    # the accumulator is declared `T acc = 0` between the return and the loop
    acc_t = None
    for st in between:
        c = code(src, st)
        mm = re.fullmatch(r"((?:unsigned\s+)?\w+)\s+%s\s*=\s*0(\.0*)?[fF]?\s*;" % re.escape(acc), c)
        if mm:
            acc_t = mm.group(1)
    if acc_t is None or any(mentions(code(src, s), acc) and not re.match(r"^\w+\s+%s\s*=" % re.escape(acc), code(src, s))
                            for s in between):
        return None
    ls = launches(src, k.name)
    grid_edits = []
    for l in ls:
        e = _grid_dim3_edits(src, l, R)
        if e is None:
            return None
        grid_edits += e
    ptrs = pointer_params(k.sig)
    ta, tb = ptrs[sub_base(a)].base_type, ptrs[sub_base(b)].base_type
    if not _tiles_fit(ta, tb, T, R):
        return None
    inner = rewrite_range(src, body.start_byte, body.end_byte,
                          [Edit(a.start_byte, a.end_byte, f"ks_As[threadIdx.y + {T} * ks_a][ks_kk]"),
                           Edit(b.start_byte, b.end_byte, f"ks_Bs[ks_kk][threadIdx.x + {T} * ks_b]")] +
                          [Edit(n.start_byte, n.end_byte, "ks_acc[ks_a][ks_b]") for n in walk(body)
                           if n.type == "identifier" and text(n) == acc])
    if mentions(inner, kv):
        inner = f"{{ const int {kv} = ks_k0 + ks_kk; {inner} }}"
    ind = indent_at(src, ret.start_byte)
    i2, i3 = ind + "    ", ind + "        "
    rt = " ".join(dy.type.replace("const", "").split()) or "int"
    ct = " ".join(dx.type.replace("const", "").split()) or "int"
    rb = " || ".join(rowbad) or "false"
    cb = " || ".join(colbad) or "false"
    TR = T * R
    epi = "\n".join(reindent(raw(src, s), i3, first=True) for s in epilogue)
    text_ = (f"// ks-optimize: a {TR} x {TR} block tile, {R} x {R} outputs per thread in registers, "
             f"operand tiles in shared memory\n"
             f"{ind}const {rt} ks_row0 = blockIdx.y * {TR};\n"
             f"{ind}const {ct} ks_col0 = blockIdx.x * {TR};\n"
             f"{ind}{acc_t} ks_acc[{R}][{R}] = {{}};\n"
             f"{ind}__shared__ {ta} ks_As[{TR}][{T + 1}];\n"
             f"{ind}__shared__ {tb} ks_Bs[{T}][{TR}];\n"
             f"{ind}for (int ks_k0 = 0; ks_k0 < {kb}; ks_k0 += {T}) {{\n"
             f"{i2}#pragma unroll\n"
             f"{i2}for (int ks_a = 0; ks_a < {R}; ++ks_a) {{\n"
             f"{i3}const {rt} {row} = ks_row0 + threadIdx.y + {T} * ks_a;\n"
             f"{i3}const int {kv} = ks_k0 + threadIdx.x;\n"
             f"{i3}ks_As[threadIdx.y + {T} * ks_a][threadIdx.x] = (!({rb}) && {kv} < {kb}) ? {raw(src, a)} : {ta}();\n"
             f"{i2}}}\n"
             f"{i2}#pragma unroll\n"
             f"{i2}for (int ks_b = 0; ks_b < {R}; ++ks_b) {{\n"
             f"{i3}const {ct} {col} = ks_col0 + threadIdx.x + {T} * ks_b;\n"
             f"{i3}const int {kv} = ks_k0 + threadIdx.y;\n"
             f"{i3}ks_Bs[threadIdx.y][threadIdx.x + {T} * ks_b] = (!({cb}) && {kv} < {kb}) ? {raw(src, b)} : {tb}();\n"
             f"{i2}}}\n"
             f"{i2}__syncthreads();\n"
             f"{i2}#pragma unroll\n"
             f"{i2}for (int ks_kk = 0; ks_kk < {T}; ++ks_kk) {{\n"
             f"{i3}#pragma unroll\n"
             f"{i3}for (int ks_a = 0; ks_a < {R}; ++ks_a) {{\n"
             f"{i3}    #pragma unroll\n"
             f"{i3}    for (int ks_b = 0; ks_b < {R}; ++ks_b) {inner}\n"
             f"{i3}}}\n"
             f"{i2}}}\n"
             f"{i2}__syncthreads();\n"
             f"{ind}}}\n"
             f"{ind}#pragma unroll\n"
             f"{ind}for (int ks_a = 0; ks_a < {R}; ++ks_a) {{\n"
             f"{i2}#pragma unroll\n"
             f"{i2}for (int ks_b = 0; ks_b < {R}; ++ks_b) {{\n"
             f"{i3}const {rt} {row} = ks_row0 + threadIdx.y + {T} * ks_a;\n"
             f"{i3}const {ct} {col} = ks_col0 + threadIdx.x + {T} * ks_b;\n"
             f"{i3}const {acc_t} {acc} = ks_acc[ks_a][ks_b];\n"
             f"{i3}if ({cond}) continue;\n"
             f"{epi}\n"
             f"{i2}}}\n"
             f"{ind}}}")
    # the statements between the return and the loop (the accumulator's declaration) are dropped
    edits = [Edit(ret.start_byte, sts[-1].end_byte, text_)] + grid_edits
    return candidate(src, edits, "stage_matmul_tiles",
                f"{k.name}: {TR} x {TR} block tile with {R} x {R} register outputs per thread, "
                f"{sub_base(a)}/{sub_base(b)} tiles in shared memory (grid divided by {R})",
                excerpt=code(src, loop)[:160])


def _negate(cond: str) -> str:
    m = re.fullmatch(r"(.+?)\s*(<=|>=|<|>)\s*(.+)", cond)
    if m and not re.search(r"[<>=!&|?]", m.group(1) + m.group(3)):
        return f"{m.group(1)} {dict(zip(['<', '>', '<=', '>='], ['>=', '<=', '>', '<']))[m.group(2)]} {m.group(3)}"
    return f"!({cond})"


def _guard_to_return(source: str) -> str:
    """`decls; if (r < M && c < N) { BODY }` as a kernel's last statement (the guard form of one
    output per thread) -> `decls; if (r >= M || c >= N) return; BODY`: the same threads do the same
    work, in the early-return form the tile rewrites read. The source unchanged when no kernel has it."""
    src = Source(source)
    edits = []
    for k in kernels(src):
        sts = statements(k.body)
        if not sts or has(src, k.body, r"\breturn\b|__syncthreads"):
            continue
        last = sts[-1]
        if last.type != "if_statement" or last.child_by_field_name("alternative") is not None or \
                any(s.type not in ("declaration", "preproc_call") for s in sts[:-1]):
            continue
        cons = last.child_by_field_name("consequence")
        # every child of the block, `#pragma` lines and comments included (a loop keeps its pragma)
        inner = list(cons.named_children) if cons.type == "compound_statement" else [cons]
        cond = strip_parens(code(src, last.child_by_field_name("condition")))
        parts = [strip_parens(p) for p in split_top(cond, "&&")]
        if not inner or any(split_top(p, "||")[1:] for p in parts):
            continue
        ind = indent_at(src, last.start_byte)
        body = ""
        for i, x in enumerate(inner):
            same_line = i > 0 and x.type == "comment" and x.start_point[0] == inner[i - 1].end_point[0]
            body += (" " if same_line else f"\n{ind}" if body else "") + reindent(raw(src, x).strip(), ind).strip()
        edits.append(Edit(last.start_byte, last.end_byte,
                          f"if ({' || '.join(_negate(p) for p in parts)}) return;\n{ind}{body}"))
    return apply_edits(src.raw, edits) if edits else source


def stage_matmul_tiles(source: str, ctx: Context) -> list[Materialization]:
    """Shared-memory tiles for a one-output-per-thread dot-product kernel: the T x T form (one
    output per thread), and T*R x T*R block tiles with R x R outputs per thread in registers
    (R = 2, 4; the dim3 grid divided by R). A kernel in the guard form (`if (r < M && c < N) {..}`)
    is read in the early-return form (`_guard_to_return`) in the same step."""
    out = _matmul_tiles(source, ctx)
    staged = _guard_to_return(source) if not out else source
    if staged != source:
        for m in _matmul_tiles(staged, ctx):
            m.description += " (its bounds guard read as an early return)"
            out.append(m)
    return out


def _matmul_tiles(source: str, ctx: Context) -> list[Materialization]:
    out = _square_tiles(source, ctx)
    src = Source(source)
    for k in kernels(src):
        if has(src, k.body, r"__shared__|__syncthreads"):
            continue
        two = _two_d(src, k)
        if two is None or two[2][0] != two[2][1] or two[2][0] not in (8, 16, 32):
            continue
        for R in (4, 2):
            m = _matmul_register_tiles(src, k, two[2][0], R)
            if m is not None:
                out.append(m)
    return out


PAIR = Pair(SharedTileToGlobal, (Rewrite("stage_transpose_tile", "coalesced_transpose", stage_transpose_tile, prior=5.0,
                                        serves=("coalesced_transpose",)),
                                Rewrite("stage_matmul_tiles", "shared_tile", stage_matmul_tiles, prior=6.0,
                                        serves=("transposed_tile",))))
