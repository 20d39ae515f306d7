"""vector_load_to_scalar: one 16-byte (or 8-byte) global load through a vector reinterpretation
becomes per-component scalar loads assembled with `make_<vec>`:

    const float4* p4 = reinterpret_cast<const float4*>(p);   v = p4[i];
    ->  v = make_float4((p)[4 * (i)], (p)[4 * (i) + 1], (p)[4 * (i) + 2], (p)[4 * (i) + 3]);

`__ldg(p4 + i)` keeps the read-only path per component (`__ldg((p) + 4 * (i) + k)`); removing
`__ldg` is ldg_to_plain_load's job. Only casts of a pointer to the vector's own scalar type.

Forward, `vectorize_elementwise` and `vectorize_loop` (the inverse of vector_load_to_scalar and
vector_store_to_scalar alike): the `p[i]` accesses of a 1-D grid-stride loop, or the unit-stride
`p[base + j]` accesses of a row loop, move four elements per 16-byte access, followed by a scalar
tail. Only pointers whose every access in the loop has the same base, that are not both read and
written, and whose stores are unconditional statements. Precondition: 16-byte alignment of every
pointer (row start), generated as a runtime check with the original loop as the fallback, so the
rewrite is sound for any alignment: each element is still read and written once, in the same
iteration order within a thread.

Block- and lane-stride loops (issue 20): `for (j = S + threadIdx.x; j < E; j += blockDim.x)` (the
thread index and block size directly or through locals bound once), the warp's `j = S + lane; j +=
32` and `for (i = i0; i < i1; ++i) { int c = i * 32 + lane; ... }` give each thread W consecutive
elements per pass, one 16-, 8- or 4-byte access per pointer (W = 16 bytes of the widest element;
any element type of known size, template parameters through the file's launches and type aliases),
the pass's stride unchanged in vectors (W times the elements), the rest in the original strided
order. Sound where the loop's iterations only meet through per-thread accumulations (each still
sees every element once; floats reassociate, the gate judges): every access of a pointer has one
index `base + j` (a pointer may be read and written at it), the element index feeds only those
accesses, the body writes only its own locals, those elements and `x op= e` / `x = max(x, e)`
accumulators, reads nothing that depends on the thread beyond its index (S, E and the bases one
value for the group: threadIdx.x / 32 counts as one per warp), has no barrier, shuffle, atomic or
jump; elements move between threads, so every other use of a written pointer (and every write of
a read one) in the kernel must lie across a barrier from the loop, outside any loop around both.

Every other wide global load, however spelled (view macros, pointers bound to a cast, parameters
typed `uint4 *`, struct types, copies into registers or shared memory), is narrowed by the
type-directed rewrite of `devectorize.py`: the same optimization, so the same skill.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

from tree_sitter import Node

from corpora.code.nodes import call_name, enclosing
from corpora.code.source import Source
from mining.carriers import vector_accesses
from mining.operators.base import (Context, Edit, Materialization, Operator, Pair, Rewrite, apply_edits, candidate,
                                   rewrite_range)
from mining.operators.grid_clamp import clamp_edits
from mining.operators.grid_stride import (counted_unguarded_edits, unguarded_element, grid_stride_edits, grid_stride_x_loops,
                                         one_element, x_loop_block)
from mining.operators.nodes import (WARP, Kernel, address_taken, bare_jumps, block_body, code, has_loop, idents, in_ldg,
                                    indent_at, is_lhs, kernels, local_pointers, loop_init_value, loop_var, mentions,
                                    raw, returns_or_syncs, split_top, strip_parens, sub_base, sub_index, subscripts_of,
                                    unit_update, written_names, int_value, declarator_name, line_start, declared_within, base_name, type_before,
                                    device_functions)
from mining.operators.rewrite_util import pragma_before
from mining.operators.devectorize import devectorize_edits
from mining.operators.vector_access import VECTORS, element, scalar_base_ok
from corpora.code.parse import text, walk


class VectorLoadToScalar(Operator):
    name = "vector_load_to_scalar"
    carrier = "vector_load"
    description = "split one vector global load into scalar loads"

    def edits(self, src):
        own = list(self._house_edits(src))
        yield from own
        yield from devectorize_edits(src, "load", skip=[(e.start, e.end) for e in own])

    def _house_edits(self, src):
        for a in vector_accesses(src):
            if a.kind != "load" or a.via not in ("subscript", "deref", "ldg") or not scalar_base_ok(src, a):
                continue
            parent = a.node.parent
            if parent is not None and parent.type == "pointer_expression" and parent.children[0].type == "&":
                continue  # its address is taken: not a value
            n = VECTORS[a.vec_type][1]
            parts = ", ".join(element(a, k, a.via == "ldg") for k in range(n))
            yield Edit(a.node.start_byte, a.node.end_byte, f"make_{a.vec_type}({parts})")


# --------------------------------------------------------------------------- forward half
VEC_OF = {"float": "float4", "int": "int4", "unsigned int": "uint4", "unsigned": "uint4", "int32_t": "int4",
          "uint32_t": "uint4"}
# element types moved 16 bytes at a time as raw uint4 into an aligned register array (elements per access)
WIDE_OF = {"half": 8, "__half": 8, "__nv_bfloat16": 8, "nv_bfloat16": 8, "short": 8, "unsigned short": 8,
           "int16_t": 8, "uint16_t": 8, "double": 2, "long long": 2, "unsigned long long": 2, "int64_t": 2,
           "uint64_t": 2}


def lanes_of(t: str) -> Optional[int]:
    """Elements of type t in one 16-byte access (None: not vectorized)."""
    t = " ".join(t.split())
    return 4 if t in VEC_OF else WIDE_OF.get(t)


@dataclass
class VecPlan:
    loads: dict[str, list[Node]]  # pointer -> subscripts (or __ldg calls) read
    stores: dict[str, list[Node]]  # pointer -> assignment expressions `p[i] = e`
    types: dict[str, tuple[str, bool]]


def _vector_plan(src: Source, k: Kernel, body: Node, var: str, index_ok: Callable[[str], Optional[str]],
                 top_level: Callable[[Node], bool], wide: bool = False,
                 rmw: bool = False) -> Optional[tuple[VecPlan, dict[str, str]]]:
    """Which pointers of `body` can move 4 elements at a time: every access of the pointer has an
    index accepted by `index_ok` (returns its base text), loads and stores do not mix on one
    pointer, and stores are unconditional statements. Returns the plan and pointer -> base.
    `wide`: 2- and 8-byte element types too (WIDE_OF; the caller checks one width for all).
    `rmw`: any element type (the caller sizes it), and a pointer may be read and written where
    every access has the same index (each element read, then written, by its own iteration)."""
    ptrs = {n: t for n, t in local_pointers(src, k).items()
            if rmw or " ".join(t[0].split()) in VEC_OF or (wide and " ".join(t[0].split()) in WIDE_OF)}
    subs = subscripts_of(src, body, ptrs)
    bases: dict[str, str] = {}
    bad: set[str] = set()
    loads: dict[str, list[Node]] = {}
    stores: dict[str, list[Node]] = {}
    for s in subs:
        p = sub_base(s)
        b = index_ok(sub_index(s))
        if b is None or (p in bases and bases[p] != b):
            bad.add(p)
            continue
        bases[p] = b
        if is_lhs(s):
            asg = s.parent
            while asg is not None and asg.type == "parenthesized_expression":
                asg = asg.parent
            if asg is None or asg.type != "assignment_expression" or asg.children[1].type != "=" or \
                    asg.parent is None or asg.parent.type != "expression_statement" or not top_level(asg.parent):
                bad.add(p)
                continue
            stores.setdefault(p, []).append(asg)
        elif address_taken(s):
            call = in_ldg(s)
            if call is None:
                bad.add(p)
                continue
            loads.setdefault(p, []).append(call)
        else:
            loads.setdefault(p, []).append(s)
    for p in set(loads) & set(stores):
        if not rmw:
            bad.add(p)
    for p in bad:
        loads.pop(p, None)
        stores.pop(p, None)
    if not loads and not stores:
        return None
    # a store pointer written by a later statement's read? (stores are not read back: checked above)
    return VecPlan(loads, stores, {p: ptrs[p] for p in set(loads) | set(stores)}), bases


def _vector_body(src: Source, body: Node, plan: VecPlan, kvar: str) -> str:
    edits = []
    for p, nodes in plan.loads.items():
        for n in nodes:
            edits.append(Edit(n.start_byte, n.end_byte, f"ks_{p}[{kvar}]"))
    for p, asgs in plan.stores.items():
        for a in asgs:
            left = a.child_by_field_name("left")
            edits.append(Edit(left.start_byte, left.end_byte, f"ks_{p}[{kvar}]"))
    return rewrite_range(src, body.start_byte, body.end_byte, edits)


def _vec_io(plan: VecPlan, ptr_expr: Callable[[str], str], vindex: str, ind: str) -> tuple[str, str]:
    """(loads + store arrays before the element loop, vector stores after it)."""
    pre, post = [], []
    for p in sorted(plan.loads):
        t, const = plan.types[p]
        vt = VEC_OF[" ".join(t.split())]
        cast = f"reinterpret_cast<const {vt}*>({ptr_expr(p)})"
        load = f"__ldg({cast} + {vindex})" if const else f"{cast}[{vindex}]"
        pre.append(f"{ind}const {vt} ks_{p}4 = {load};")
        pre.append(f"{ind}const {t} ks_{p}[4] = {{ks_{p}4.x, ks_{p}4.y, ks_{p}4.z, ks_{p}4.w}};")
    for p in sorted(plan.stores):
        t, _ = plan.types[p]
        vt = VEC_OF[" ".join(t.split())]
        pre.append(f"{ind}{t} ks_{p}[4];")
        post.append(f"{ind}reinterpret_cast<{vt}*>({ptr_expr(p)})[{vindex}] = make_{vt}(ks_{p}[0], ks_{p}[1], ks_{p}[2], ks_{p}[3]);")
    return "\n".join(pre), "\n".join(post)


def _wide_io(plan: VecPlan, lanes: int, vindex: str, ind: str) -> tuple[str, str]:
    """`_vec_io` for any element type: each pointer's 16 bytes as one uint4 copied into (or out of)
    an aligned array of `lanes` elements."""
    pre, post = [], []
    for p in sorted(plan.loads):
        t, _ = plan.types[p]
        pre.append(f"{ind}alignas(16) {t} ks_{p}[{lanes}];")
        pre.append(f"{ind}*reinterpret_cast<uint4*>(ks_{p}) = reinterpret_cast<const uint4*>({p})[{vindex}];")
    for p in sorted(plan.stores):
        t, _ = plan.types[p]
        pre.append(f"{ind}alignas(16) {t} ks_{p}[{lanes}];")
        post.append(f"{ind}reinterpret_cast<uint4*>({p})[{vindex}] = *reinterpret_cast<const uint4*>(ks_{p});")
    return "\n".join(pre), "\n".join(post)


def _align_check(ptrs: list[str]) -> str:
    return "((" + " | ".join(f"(size_t)({p})" for p in ptrs) + ") & 15) == 0"


def _top_of(body):
    """Whether a statement sits directly in `body` (its block, or `body` itself when it is one statement)."""
    def top(st):
        if st.parent is None:
            return False
        if body.type == "compound_statement":
            return st.parent.start_byte == body.start_byte
        return st.start_byte == body.start_byte
    return top


def vectorize_elementwise(source: str, ctx: Context) -> list[Materialization]:
    """A 1-D grid-stride loop whose body reads/writes `p[i]` -> 16-byte accesses of four elements
    per iteration plus a scalar tail (2-byte types such as half: eight, 8-byte types: two, moved
    as one uint4 into an aligned register array; every pointer of one width). A one-element-per-thread kernel is turned into the
    grid-stride form first (same step). Precondition: the pointers are 16-byte aligned -- checked
    at run time (the scalar loop runs everything otherwise)."""
    src = Source(source)
    out = []
    for k in kernels(src):
        loops = grid_stride_x_loops(src, k)
        if not loops:
            oe = one_element(src, k)
            clamp = clamp_edits(src, k.name) if oe is not None else None
            if oe is None or clamp is None:
                continue
            staged = apply_edits(src.raw, grid_stride_edits(src, oe) + clamp)
            for m in vectorize_elementwise(staged, ctx):
                if m.description.startswith(k.name + ":"):
                    m.source, m.description = m.source, m.description + " (after turning it into a grid-stride loop)"
                    out.append(m)
            continue
        for loop, ty, var, bound, stride in loops:
            body = loop.child_by_field_name("body")
            if body is None or returns_or_syncs(src, body) or bare_jumps(src, body) or has_loop(body):
                continue
            if re.search(r"\bks_nv\b", code(src, loop)):
                continue  # already the 16-byte loop's scalar tail
            # the vector index: ks_v unless the kernel already names something so (an accumulator)
            vi = next(n for n in ("ks_v", "ks_vi", "ks_v16") if not re.search(r"\b%s\b" % n, code(src, k.body)))
            top = _top_of(body)
            res = _vector_plan(src, k, body, var, lambda idx, var=var: "" if idx == var else None, top, wide=True)
            if res is None:
                continue
            plan, _ = res
            widths = {lanes_of(t) for t, _ in plan.types.values()}
            if len(widths) != 1:
                continue  # mixed element widths: one access per iteration cannot cover them all
            W = widths.pop()
            blk = x_loop_block(src, k, loop, raw(src, loop_init_value(loop)), stride)
            blk = blk if re.fullmatch(r"[\w.]+", blk or "") else f"({blk})"  # the loop's own B (its start and stride)
            ind = indent_at(src, loop.start_byte)
            i2, i3 = ind + "    ", ind + "        "
            if all(" ".join(t.split()) in VEC_OF for t, _ in plan.types.values()):
                pre, post = _vec_io(plan, lambda p: p, vi, i3)
            else:
                pre, post = _wide_io(plan, W, vi, i3)
            inner = _vector_body(src, body, plan, "ks_k")
            t = " ".join(ty.replace("const", "").split()) or "int"
            ptrs = sorted(set(plan.loads) | set(plan.stores))
            t_el = " ".join(next(iter(plan.types.values()))[0].split())
            text_ = (f"{{\n{i2}// ks-optimize: 16-byte accesses when {', '.join(ptrs)} are 16-byte aligned (checked here), "
                     f"scalar tail\n"
                     f"{i2}const long long ks_n = (long long)({bound});\n"
                     f"{i2}const long long ks_nv = ({_align_check(ptrs)}) ? ks_n / {W} : 0;\n"
                     f"{i2}for (long long {vi} = (long long)blockIdx.x * {blk} + threadIdx.x; {vi} < ks_nv; "
                     f"{vi} += (long long)gridDim.x * {blk}) {{\n"
                     f"{pre}\n"
                     f"{i3}#pragma unroll\n"
                     f"{i3}for (int ks_k = 0; ks_k < {W}; ++ks_k) {{\n"
                     f"{i3}    const {t} {var} = ({t})({vi} * {W} + ks_k);\n"
                     f"{block_body(inner, i3 + '    ')}\n"
                     f"{i3}}}\n"
                     + (f"{post}\n" if post else "") +
                     f"{i2}}}\n"
                     f"{i2}for ({t} {var} = ({t})(ks_nv * {W}) + {raw(src, loop_init_value(loop))}; {var} < {bound}; "
                     f"{var} += {stride}) {{\n{block_body(raw(src, body), i3)}\n{i2}}}\n"
                     f"{ind}}}")
            out.append(candidate(src, [Edit(loop.start_byte, loop.end_byte, text_)], "vectorize_elementwise",
                            f"{k.name}: " + ("float4/int4" if W == 4 else f"16-byte ({W} x {t_el})") +
                            f" accesses of {', '.join(ptrs)} in the grid-stride loop, scalar tail",
                            guards=[f"16-byte alignment of {', '.join(ptrs)} (runtime check; scalar loop otherwise)"],
                            excerpt=code(src, loop)[:160]))
    if not out:
        # kernels with no bound (the launch's every thread has an element): grid-stride loops over the
        # same grid first, all of them in one staging (so the recursion sees no unguarded kernel)
        edits = [e for k in kernels(src) if not grid_stride_x_loops(src, k) and one_element(src, k) is None
                 for ue in [unguarded_element(src, k)] if ue is not None for e in grid_stride_edits(src, ue)]
        if edits:
            for m in vectorize_elementwise(apply_edits(src.raw, edits), ctx):
                m.description += " (an unguarded element per thread first read as a grid-stride loop over the same grid)"
                m.guards.append("the launch's grid is the element count (unchanged)")
                out.append(m)
        # the same loops bounded by each launch's thread count, passed in, over a clamped grid: the
        # wide accesses then also take 1/W of the threads
        counted = counted_unguarded_edits(src)
        if counted is not None:
            for m in vectorize_elementwise(apply_edits(src.raw, counted[0]), ctx):
                m.description += (" (an unguarded element per thread first read as a grid-stride loop to the launch's "
                                  "thread count, passed as ks_total; the grid clamped)")
                out.append(m)
    return out


_LANE_INIT = re.compile(r"^\((.*)\)\s*\+\s*ks_lane$", re.S)


def vectorize_loop(source: str, ctx: Context) -> list[Materialization]:
    """A unit-stride loop over a row (`for (j = s; j < e; ++j)`, or the lane-strided form
    warp_per_row writes) whose accesses are `p[j]` / `p[base + j]` -> four elements per 16-byte
    access. Precondition: each `p + base + s` is 16-byte aligned (e.g. the row length N % 4 == 0):
    generated as a runtime check; rows that fail it take the original loop."""
    src = Source(source)
    out = []
    all_edits, all_ptrs, all_guards = [], [], []
    wide_loops = []  # the strided form's sites (their widths are not always float4)
    for k in kernels(src):
        for loop in src.nodes("for_statement", within=k.body):
            outer = enclosing(loop, "for_statement", "while_statement", "do_statement")
            body = loop.child_by_field_name("body")
            if outer is not None and body is not None and has_loop(body):
                continue  # outermost or innermost loops
            if outer is not None and re.search(r"\bks_(v|k|nv)\b", code(src, outer.child_by_field_name("initializer")
                                                                       or outer)):
                continue  # the element loop of an earlier vectorization
            lv = loop_var(src, loop)
            cond = loop.child_by_field_name("condition")
            if lv is None or cond is None or body is None or re.search(r"\bks_(?!lane\b)\w+", code(src, cond) + " " + lv[2]):
                continue
            ty, var, init = lv
            ends = []
            for part in split_top(strip_parens(code(src, cond)), "&&"):
                m = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(var), strip_parens(part))
                if not m:
                    break
                ends.append(m.group(1))
            else:
                m = True
            if not ends or m is not True:
                continue
            end = ends[0]
            for e in ends[1:]:  # j < a && j < b: the loop ends at min(a, b)
                end = f"(({end}) < ({e}) ? ({end}) : ({e}))"
            upd = re.sub(r"\s+", "", code(src, loop.child_by_field_name("update")))
            lane = _LANE_INIT.match(init.strip())

            def strided_site(k=k, loop=loop, ty=ty, var=var, init=init, end=end) -> bool:
                strided = _strided_vectorize(src, k, loop, ty, var, init, end)
                if strided is None:
                    return False
                e, ptrs, guard, what = strided
                all_edits.append(e)
                wide_loops.append(e)
                all_ptrs.extend(ptrs)
                all_guards.append(guard)
                out.append(candidate(src, [e], "vectorize_loop", f"{k.name}: {what} in loop `{code(src, loop)[:60]}`",
                                     guards=[guard], excerpt=code(src, loop)[:160]))
                return True

            if not lane and strided_site():
                continue
            if lane and upd == f"{var}+={WARP}":
                s0, step, lane_txt = lane.group(1), WARP, "ks_lane"
            elif unit_update(src, loop, var):
                s0, step, lane_txt = init, 1, "0"
            else:
                continue
            if mentions(end, var) or returns_or_syncs(src, body) or bare_jumps(src, body):
                continue
            written = written_names(src, body)
            if idents(end) & written:
                continue

            def index_ok(idx: str, var=var, written=written) -> Optional[str]:
                idx = strip_parens(idx)
                if idx == var:
                    return "0"
                parts = split_top(idx, "+")
                if len(parts) >= 2 and strip_parens(parts[-1]) == var:
                    base = " + ".join(parts[:-1])
                elif len(parts) >= 2 and strip_parens(parts[0]) == var:
                    base = " + ".join(parts[1:])
                else:
                    return None
                if mentions(base, var) or idents(base) & written or "-" in base or "[" in base:
                    return None
                return base

            top = _top_of(body)
            res = _vector_plan(src, k, body, var, index_ok, top)
            if res is None:
                if lane:  # warp_per_row's lane loop over elements with no float4 (half, double): W-wide
                    strided_site()
                continue
            plan, bases = res
            ptrs = sorted(set(plan.loads) | set(plan.stores))
            tail0 = f"({s0}) + ks_nv * 4"
            if re.fullmatch(r"\s*[123]\s*", s0) and not plan.stores and _idempotent_only(src, body):
                # max/min over [s0, e): start the 16-byte part at 0 (seeing elements before s0 again is harmless)
                tail0 = f"(ks_nv * 4 > ({s0}) ? ks_nv * 4 : ({s0}))"
                s0 = "0"
            exprs = {p: f"{p} + ({bases[p]}) + ({s0})" if bases[p] != "0" else f"{p} + ({s0})" for p in ptrs}
            ind = indent_at(src, loop.start_byte)
            i2, i3 = ind + "    ", ind + "        "
            pre, post = _vec_io(plan, lambda p: exprs[p], "ks_v", i3)
            inner = _vector_body(src, body, plan, "ks_k")
            t = " ".join(ty.replace("const", "").split()) or "int"
            vstep = "" if step == 1 else f" * {step}"
            text_ = (f"{{\n{i2}// ks-optimize: 16-byte accesses when every row start is 16-byte aligned (checked here), "
                     f"the original loop for the rest\n"
                     f"{i2}const long long ks_span = (long long)({end}) - (long long)({s0});\n"
                     f"{i2}const long long ks_nv = ({_align_check([exprs[p] for p in ptrs])} && ks_span > 0) ? ks_span / 4 : 0;\n"
                     f"{i2}for (long long ks_v = {lane_txt}; ks_v < ks_nv; ks_v += {step}) {{\n"
                     f"{pre}\n"
                     f"{i3}#pragma unroll\n"
                     f"{i3}for (int ks_k = 0; ks_k < 4; ++ks_k) {{\n"
                     f"{i3}    const {t} {var} = ({t})(({s0}) + ks_v * 4 + ks_k);\n"
                     f"{block_body(inner, i3 + '    ')}\n"
                     f"{i3}}}\n"
                     + (f"{post}\n" if post else "") +
                     f"{i2}}}\n"
                     f"{i2}for ({t} {var} = ({t})({tail0}){' + ks_lane' if step != 1 else ''}; "
                     f"{raw(src, cond)}; {raw(src, loop.child_by_field_name('update'))}) {{\n"
                     f"{block_body(raw(src, body), i3)}\n{i2}}}\n"
                     f"{ind}}}")
            del vstep
            e = Edit(loop.start_byte, loop.end_byte, text_)
            guard = f"16-byte alignment of {', '.join(exprs[p] for p in ptrs)} (runtime check; original loop otherwise)"
            all_edits.append(e)
            all_ptrs += ptrs
            all_guards.append(guard)
            out.append(candidate(src, [e], "vectorize_loop",
                            f"{k.name}: float4 accesses of {', '.join(ptrs)} in loop `{code(src, loop)[:60]}`",
                            guards=[guard], excerpt=code(src, loop)[:160]))
    if len(all_edits) > 1:
        out.insert(0, candidate(src, all_edits, "vectorize_loop",
                           ("vector" if wide_loops else "float4") +
                           f" accesses in {len(all_edits)} row loops ({', '.join(sorted(set(all_ptrs)))})",
                           guards=all_guards))
    return out


def _idempotent_only(src: Source, body: Node) -> bool:
    """Every write in the body is `x = fmaxf(x, e)` (or fminf / max / min) or a local declaration."""
    for n in walk(body):
        if n.type == "update_expression":
            return False
        if n.type == "assignment_expression":
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            if n.children[1].type != "=" or right is None or right.type != "call_expression" or \
                    call_name(right) not in ("fmaxf", "fminf", "max", "min", "fmax", "fmin"):
                return False
            args = right.child_by_field_name("arguments")
            if args is None or code(src, left) not in [code(src, a) for a in args.named_children]:
                return False
    return True


PAIR = Pair(VectorLoadToScalar, (Rewrite("vectorize_elementwise", "vector_load", vectorize_elementwise, prior=2.0),
                                Rewrite("vectorize_loop", "vector_load", vectorize_loop, prior=1.8)),
            # the type-directed narrowing's inverse lives beside it (devectorize.py's forward-only pair)
            inverted_by=("vectorize_elementwise", "vectorize_loop", "vectorize_copy_loop"))


# --------------------------------------------------------------------------- block- and lane-stride loops
# bytes of the element types a strided loop may move W at a time (a pointer's W elements are one 16-,
# 8- or 4-byte access; W is set by the widest element type of the loop's pointers)
_SIZE = {"float": 4, "int": 4, "unsigned int": 4, "unsigned": 4, "int32_t": 4, "uint32_t": 4,
         "half": 2, "__half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "short": 2, "unsigned short": 2,
         "int16_t": 2, "uint16_t": 2, "double": 8, "long long": 8, "unsigned long long": 8, "int64_t": 8,
         "uint64_t": 8}
_RAW = {16: "uint4", 8: "uint2", 4: "unsigned int"}
_COLLECTIVE = re.compile(r"\b(__syncthreads\w*|__syncwarp|__shfl\w*|__ballot\w*|__any\w*|__all\w*|__activemask|"
                         r"atomic\w*|__threadfence\w*|return|goto)\b")
_ACC_OPS = ("+=", "-=", "*=", "&=", "|=", "^=")
_MINMAX = ("fmaxf", "fminf", "max", "min", "fmax", "fmin")


def _local_value(kcode: str, name: str) -> Optional[str]:
    """The initialiser of a kernel local declared once and never assigned again (None otherwise)."""
    n = re.escape(name)
    inits = re.findall(r"\b(?:const\s+)?(?:unsigned\s+)?(?:int|long|long long|size_t|unsigned)\s+%s\s*=\s*([^;,]+)[;,]"
                       % n, kcode)
    if len(inits) != 1:
        return None
    writes = re.findall(r"(?<![=!<>])\b%s\s*(?:[-+*/%%&|^]|<<|>>)?=(?!=)|\+\+\s*%s\b|\b%s\s*(?:\+\+|--)" % (n, n, n), kcode)
    return inits[0].strip() if len(writes) == 1 else None


def _int_of(src: Source, kcode: str, e: str) -> Optional[int]:
    e = strip_parens(e)
    if e == "warpSize":
        return WARP
    v = int_value(src, e)
    if v is None and re.fullmatch(r"[A-Za-z_]\w*", e):
        m = re.search(r"\b(?:static\s+)?(?:constexpr|const)\s+(?:unsigned\s+)?int\s+%s\s*=\s*(\d+)\s*;" % re.escape(e), kcode)
        v = int(m.group(1)) if m else None
    return v


def _thread_kind(src: Source, kcode: str, e: str, depth: int = 0) -> Optional[str]:
    """'block' for threadIdx.x (or a local bound to it), 'lane' for threadIdx.x % 32 / & 31 (or a local
    bound to that), else None."""
    e = strip_parens(e)
    if re.fullmatch(r"threadIdx\s*\.\s*x", e):
        return "block"
    if depth > 4:
        return None
    m = re.fullmatch(r"(.+?)\s*(%|&)\s*([\w.()]+)", e)
    if m and _thread_kind(src, kcode, m.group(1), depth + 1) == "block":
        c = _int_of(src, kcode, m.group(3))
        if c is not None and c == (WARP if m.group(2) == "%" else WARP - 1):
            return "lane"
        return None
    if re.fullmatch(r"[A-Za-z_]\w*", e):
        v = _local_value(kcode, e)
        if v is not None:
            return _thread_kind(src, kcode, re.sub(r"^\(\s*(?:int|unsigned)\s*\)\s*", "", v), depth + 1)
    return None


def _stride_kind(src: Source, kcode: str, e: str) -> Optional[str]:
    e = strip_parens(e)
    if re.fullmatch(r"blockDim\s*\.\s*x", e) or (re.fullmatch(r"[A-Za-z_]\w*", e) and
                                                  re.fullmatch(r"blockDim\s*\.\s*x", _local_value(kcode, e) or "")):
        return "block"
    return "lane" if _int_of(src, kcode, e) == WARP else None


def _x_tainted(src: Source, k: Kernel, loop: Node, group: str) -> set[str]:
    """Kernel locals whose value depends on threadIdx.x (directly or through other such locals),
    from the code outside `loop` (its own per-element values are the element's); `__shared__`
    variables hold one value for the whole block, and for a warp's loop (`group` 'lane') the warp
    index `threadIdx.x / 32` (`>> 5`) one value for the warp."""
    kcode = code(src, k.body)
    warp_of = re.compile(r"(\([^()]*\)|\b[A-Za-z_]\w*(?:\s*\.\s*x)?)\s*(?:/|>>)\s*([\w.]+)")

    def whole_warps(x: str) -> bool:
        """x is the thread index plus terms that are whole warps (multiples of blockDim.x or of 32):
        lanes 0..31 of one warp share x / 32."""
        parts = split_top(strip_parens(x), "+")
        thr = [p for p in parts if _thread_kind(src, kcode, p) == "block"]
        return len(thr) == 1 and all(p is thr[0] or re.search(r"\bblockDim\s*\.\s*x\s*\*|\*\s*blockDim\s*\.\s*x\b", p)
                                     or (_int_of(src, kcode, p) or 1) % WARP == 0 for p in parts)

    def uniform(v: str) -> str:
        if group != "lane":
            return v
        return warp_of.sub(lambda m: "0" if whole_warps(m.group(1)) and
                           _int_of(src, kcode, m.group(2)) == (WARP if "/" in m.group(0) else 5) else m.group(0), v)
    shared = {declarator_name(d) for decl in src.nodes("declaration", within=k.body) if "__shared__" in code(src, decl)
              for d in decl.named_children if d.type not in ("primitive_type", "type_identifier", "type_qualifier",
                                                              "sized_type_specifier", "storage_class_specifier")}

    def visible(n: Node, name: str) -> bool:  # not a name of a scope that does not reach the loop
        p = n.parent
        while p is not None and not (p.start_byte <= loop.start_byte < p.end_byte):
            if p.type in ("compound_statement", "for_statement") and any(
                    c.type == "declaration" and name in declared_within(src, c) for c in p.named_children):
                return False
            p = p.parent
        return True

    pairs = []
    for n in walk(k.body):
        if loop.start_byte <= n.start_byte < loop.end_byte or (n.parent is not None and n.parent.type == "declaration"
                                                                and "__shared__" in code(src, n.parent)):
            continue
        if n.type in ("init_declarator", "assignment_expression"):
            d = n.child_by_field_name("declarator" if n.type == "init_declarator" else "left")
            if d is None or d.type != "identifier" or not visible(n, text(d)):
                continue
        if n.type == "init_declarator":
            d, v = n.child_by_field_name("declarator"), n.child_by_field_name("value")
            if d is not None and v is not None and d.type == "identifier":
                pairs.append((text(d), uniform(code(src, v))))
        elif n.type == "assignment_expression":
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            if left is not None and right is not None and left.type == "identifier":
                pairs.append((text(left), uniform(code(src, right))))
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, v in pairs:
            if name not in out and name not in shared and (re.search(r"threadIdx\s*\.\s*x", v) or idents(v) & out):
                out.add(name)
                changed = True
    return out


def _elem_size(src: Source, k: Kernel, t: str) -> Optional[int]:
    """Bytes of an element type: a known scalar, or a template parameter every launch in the file
    instantiates with types of one size (aliases `using A = B;` / `typedef B A;` followed)."""
    t = " ".join(t.split())
    if t in _SIZE:
        return _SIZE[t]
    tmpl = k.node.parent
    if tmpl is None or tmpl.type != "template_declaration":
        return None
    params = [p for p in tmpl.child_by_field_name("parameters").named_children]
    names = [text(p.child_by_field_name("name") or p.named_children[-1]) if p.named_children else "" for p in params]
    if t not in names:
        return None
    pos = names.index(t)
    sizes = set()
    for m in re.finditer(r"\b%s\s*<([^<>;]*)>\s*<<<" % re.escape(k.name), src.code.decode("utf-8", "replace")):
        args = split_top(m.group(1), ",")
        if pos >= len(args):
            return None
        sizes.add(_alias_size(src, args[pos].strip()))
    return sizes.pop() if len(sizes) == 1 and None not in sizes else None


def _alias_size(src: Source, t: str, depth: int = 0) -> Optional[int]:
    t = " ".join(t.replace("const", "").split())
    if t in _SIZE:
        return _SIZE[t]
    last = t.split("::")[-1].strip()
    if last in _SIZE:
        return _SIZE[last]
    if depth > 4 or not re.fullmatch(r"[A-Za-z_]\w*", last):
        return None
    body = src.code.decode("utf-8", "replace")
    m = re.search(r"\busing\s+%s\s*=\s*([^;]+);" % re.escape(last), body) or \
        re.search(r"\btypedef\s+([^;]+?)\s+%s\s*;" % re.escape(last), body)
    return _alias_size(src, m.group(1), depth + 1) if m else None


def _barrier_names(src: Source) -> set[str]:
    """Device functions whose body calls __syncthreads (a call to one is a block barrier)."""
    out = set()
    for sig, fn in device_functions(src):
        body = fn.child_by_field_name("body")
        if body is not None and re.search(r"\b__syncthreads\b", code(src, body)):
            out.add(sig.name)
    return out


def _separated(src: Source, k: Kernel, loop: Node, ptrs: dict[str, bool], group: str) -> bool:
    """Every use of the loop's pointers elsewhere in the kernel that could meet an element another thread
    now handles (any use of a written pointer, a write or escape of a read one) lies across a barrier
    from the loop, and no enclosing loop brings it round again."""
    barriers = _barrier_names(src)
    pat = r"\b(__syncthreads\w*%s%s)\s*(<[^;]*?>)?\s*\(" % ("|__syncwarp" if group == "lane" else "",
                                                         "".join("|" + re.escape(b) for b in barriers))
    outer = enclosing(loop, "for_statement", "while_statement", "do_statement")
    for n in walk(k.body):
        if n.type != "identifier" or text(n) not in ptrs or loop.start_byte <= n.start_byte < loop.end_byte:
            continue
        p = n.parent
        if p is not None and p.type in ("pointer_declarator", "init_declarator") and \
                p.child_by_field_name("declarator") == n:
            continue  # its declaration
        plain_read = p is not None and p.type == "subscript_expression" and \
            p.child_by_field_name("argument") == n and not is_lhs(p) and not address_taken(p)
        if not ptrs[text(n)] and plain_read:
            continue  # a read of a pointer the loop only reads
        if outer is not None and outer.start_byte <= n.start_byte < outer.end_byte:
            return False
        a, b = (n.end_byte, loop.start_byte) if n.start_byte < loop.start_byte else (loop.end_byte, n.start_byte)
        if not re.search(pat, src.code[a:b].decode("utf-8", "replace")):
            return False
    return True


def _accumulations_ok(src: Source, body: Node, plan: VecPlan, skip: Optional[Node]) -> bool:
    """Every write in the body is to a name declared in it, a vectorized element, or a thread-local
    accumulation `x op= e` / `x = max(x, e)` of a scalar the body reads nowhere else."""
    local = declared_within(src, body)
    stores = {id(a) for asgs in plan.stores.values() for a in asgs}
    btext = code(src, body)
    for n in walk(body):
        if skip is not None and skip.start_byte <= n.start_byte < skip.end_byte:
            continue
        if n.type == "update_expression":
            if base_name(n.child_by_field_name("argument")) not in local:
                return False
        elif n.type == "assignment_expression":
            if id(n) in stores or any(n.start_byte == a.start_byte and n.end_byte == a.end_byte
                                      for asgs in plan.stores.values() for a in asgs):
                continue
            left = n.child_by_field_name("left")
            name = base_name(left)
            if name in local:
                continue
            if left.type != "identifier":
                return False
            op = n.children[1].type
            right = n.child_by_field_name("right")
            uses = len(re.findall(r"\b%s\b" % re.escape(name), btext))
            if op in _ACC_OPS and uses == 1:
                continue
            if op == "=" and right is not None and right.type == "call_expression" and \
                    call_name(right) in _MINMAX and uses == 2 and \
                    name in [code(src, a) for a in right.child_by_field_name("arguments").named_children]:
                continue
            return False
    return True


def _strided_vectorize(src: Source, k: Kernel, loop: Node, ty: str, var: str, init: str,
                       end: str) -> Optional[tuple[Edit, list[str], str, str]]:
    """The block-stride (`for (j = S + threadIdx.x; j < E; j += blockDim.x)`) and lane-stride
    (`for (i = i0; i < iE; ++i) { int c = i * 32 + lane; ... }`) forms: each thread moves W consecutive
    elements per pass as one access per pointer, the pass's stride W times as many elements, the
    remainder (and rows that fail the alignment check) in the original strided order."""
    kcode = code(src, k.body)
    body = loop.child_by_field_name("body")
    upd = re.sub(r"\s+", "", code(src, loop.child_by_field_name("update")))
    decl = None
    m = re.fullmatch(r"%s(?:\+=|=%s\+)(.+)" % (re.escape(var), re.escape(var)), upd)
    if m:  # block stride: the loop variable is the element
        group = _stride_kind(src, kcode, m.group(1))
        parts = split_top(strip_parens(init), "+")
        tparts = [p for p in parts if _thread_kind(src, kcode, p) == group]
        if group is None or len(tparts) != 1:
            return None
        T, B = strip_parens(tparts[0]), strip_parens(m.group(1))
        S = " + ".join(p.strip() for p in parts if p is not tparts[0]) or "0"
        S = "0" if int_value(src, S) == 0 else S
        E, ev, ety = end, var, ty
    elif unit_update(src, loop, var) and body.type == "compound_statement":
        # lane stride: the body's first statement binds the element `c = i * B + T`
        first = next((c for c in body.named_children if c.type != "comment"), None)
        if first is None or first.type != "declaration" or len(first.named_children) < 2:
            return None
        d = [c for c in first.named_children if c.type == "init_declarator"]
        if len(d) != 1 or d[0].child_by_field_name("declarator").type != "identifier":
            return None
        ev = text(d[0].child_by_field_name("declarator"))
        ety = type_before(code(src, first), ev).replace("const", "").strip() or "int"
        parts = split_top(strip_parens(code(src, d[0].child_by_field_name("value"))), "+")
        if len(parts) != 2:
            return None
        prod = [p for p in parts if _thread_kind(src, kcode, p) is None]
        thr = [p for p in parts if _thread_kind(src, kcode, p) is not None]
        if len(prod) != 1 or len(thr) != 1:
            return None
        f = [strip_parens(x) for x in split_top(strip_parens(prod[0]), "*")]
        if len(f) != 2 or var not in f:
            return None
        B = f[1 - f.index(var)]
        group = _stride_kind(src, kcode, B)
        T = strip_parens(thr[0])
        if group is None or _thread_kind(src, kcode, T) != group:
            return None
        rest = src.code[first.end_byte:body.end_byte].decode("utf-8", "replace")
        if mentions(rest, var) or mentions(end, ev) or mentions(end, var):
            return None
        S = "0" if int_value(src, init) == 0 else f"({init}) * {B}"
        E, decl = f"({end}) * {B}", first
    else:
        return None
    tainted = _x_tainted(src, k, loop, group)
    bcode = code(src, body) if decl is None else src.code[decl.end_byte:body.end_byte].decode("utf-8", "replace")
    if idents(S + " " + E) & (tainted | {var, ev}) or re.search(r"threadIdx\s*\.\s*x", S + E) or \
            idents(bcode) & tainted or re.search(r"threadIdx\s*\.\s*x", bcode) or _COLLECTIVE.search(bcode) or \
            bare_jumps(src, body) or has_loop(body):
        return None
    written = written_names(src, body) if decl is None else \
        set().union(*(written_names(src, c) for c in body.named_children if c.start_byte >= decl.end_byte))
    if idents(E + " " + S) & written or ev in written:
        return None

    def index_ok(idx: str) -> Optional[str]:
        idx = strip_parens(idx)
        if idx == ev:
            return "0"
        parts = split_top(idx, "+")
        if len(parts) >= 2 and strip_parens(parts[-1]) == ev:
            base = " + ".join(parts[:-1])
        elif len(parts) >= 2 and strip_parens(parts[0]) == ev:
            base = " + ".join(parts[1:])
        else:
            return None
        if mentions(base, ev) or idents(re.sub(r"\b(blockIdx|blockDim|gridDim)\s*\.\s*[xyz]\b", "", base)) & \
                (written | tainted) or "[" in base or re.search(r"threadIdx\s*\.\s*x", base):
            return None
        return base

    top = _top_of(body)
    res = _vector_plan(src, k, body, ev, index_ok, top, wide=True, rmw=True)
    if res is None:
        return None
    plan, bases = res
    ptrs = sorted(set(plan.loads) | set(plan.stores))
    # the element index feeds the vectorized accesses and nothing else
    spans = [(n.start_byte, n.end_byte) for ns in plan.loads.values() for n in ns] + \
            [(a.child_by_field_name("left").start_byte, a.child_by_field_name("left").end_byte)
             for asgs in plan.stores.values() for a in asgs]
    for n in walk(body):
        if n.type == "identifier" and text(n) == ev and not (decl is not None and n.start_byte < decl.end_byte) and \
                not any(a <= n.start_byte < b for a, b in spans):
            return None
    if not _accumulations_ok(src, body, plan, decl):
        return None
    sizes = {p: _elem_size(src, k, plan.types[p][0]) for p in ptrs}
    if None in sizes.values():
        return None
    W = min(16 // s for s in sizes.values())
    if W < 2:
        return None
    if not _separated(src, k, loop, {p: p in plan.stores for p in ptrs}, group):
        return None
    exprs = {p: " + ".join([p] + [f"({x})" for x in (bases[p], S) if x != "0"]) for p in ptrs}
    ind = indent_at(src, loop.start_byte)
    i2, i3 = ind + "    ", ind + "        "
    pre, post = [], []
    for p in ptrs:
        t, _ = plan.types[p]
        nb = W * sizes[p]
        vt = _RAW[nb]
        pre.append(f"{i3}alignas(16) {t} ks_{p}[{W}];")
        if p in plan.loads:
            pre.append(f"{i3}*reinterpret_cast<{vt}*>(ks_{p}) = reinterpret_cast<const {vt}*>({exprs[p]})[ks_v];")
        if p in plan.stores:
            post.append(f"{i3}reinterpret_cast<{vt}*>({exprs[p]})[ks_v] = *reinterpret_cast<const {vt}*>(ks_{p});")
    align = " && ".join(f"((size_t)({exprs[p]}) & {W * sizes[p] - 1}) == 0" for p in ptrs)
    edits = [Edit(n.start_byte, n.end_byte, f"ks_{p}[ks_k]") for p, ns in plan.loads.items() for n in ns] + \
        [Edit(a.child_by_field_name("left").start_byte, a.child_by_field_name("left").end_byte, f"ks_{p}[ks_k]")
         for p, asgs in plan.stores.items() for a in asgs]
    if decl is not None:  # the element's binding goes (its line too, when it has one to itself)
        a, b = decl.start_byte, decl.end_byte
        nl = src.raw.find(b"\n", b)
        if not src.raw[line_start(src, a):a].strip() and nl >= 0 and not src.raw[b:nl].strip():
            a, b = line_start(src, a), nl + 1
        edits.append(Edit(a, b, ""))
    inner = rewrite_range(src, body.start_byte, body.end_byte, edits)
    tail = raw(src, body) if decl is None else rewrite_range(src, body.start_byte, body.end_byte, edits[-1:])
    t = " ".join(ety.replace("const", "").split()) or "int"
    text_ = (f"{{\n{i2}// ks-optimize: {W} consecutive elements per thread and pass as one access of "
             f"{', '.join(ptrs)} when each row start is aligned (checked here), the strided loop for the rest\n"
             f"{i2}const long long ks_span = (long long)({E}) - (long long)({S});\n"
             f"{i2}const long long ks_nv = ({align} && ks_span > 0) ? ks_span / {W} : 0;\n"
             f"{i2}for (long long ks_v = {T}; ks_v < ks_nv; ks_v += {B}) {{\n"
             + "\n".join(pre) + "\n"
             f"{i3}#pragma unroll\n"
             f"{i3}for (int ks_k = 0; ks_k < {W}; ++ks_k) {{\n"
             f"{block_body(inner, i3 + '    ')}\n"
             f"{i3}}}\n"
             + ("\n".join(post) + "\n" if post else "") +
             f"{i2}}}\n"
             f"{i2}for (long long ks_e = (long long)({S}) + ks_nv * {W} + {T}; ks_e < (long long)({E}); ks_e += {B}) {{\n"
             f"{i3}const {t} {ev} = ({t})ks_e;\n"
             f"{block_body(tail, i3)}\n{i2}}}\n"
             f"{ind}}}")
    start = pragma_before(src, loop.start_byte)  # `#pragma unroll` belongs to the loop, not to a block
    e = Edit(loop.start_byte, loop.end_byte, text_) if start is None else Edit(start, loop.end_byte, ind + text_)
    guard = f"alignment of {', '.join(exprs[p] for p in ptrs)} to its access width (runtime check; strided loop otherwise)"
    widths = sorted({f"{W * sizes[p]}-byte" for p in ptrs})
    what = f"{W} consecutive elements per thread and pass ({'/'.join(widths)} accesses of {', '.join(ptrs)})"
    return e, ptrs, guard, what
