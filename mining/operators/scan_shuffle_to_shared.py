"""scan_shuffle_to_shared: the `__shfl_up_sync` of a warp scan becomes an exchange through shared
memory, exactly as shuffle_to_shared rewrites other shuffles (see that module for the rewrite and
why it is sound): `const int t = __shfl_up_sync(m, incl, off);` becomes

    ks_xchg_int[ks_tid] = incl;
    __syncwarp(m);
    const int t = ks_xchg_int[(ks_tid & 31) >= off ? ks_tid - off : ks_tid];
    __syncwarp(m);

Lanes below the offset read their own slot (their own value), as `__shfl_up_sync` returns it; the
scan's `lane >= off` guard then ignores it. Sites are the calls the warp_scan detector reports.

Forward, `warp_scan` (also serves block_scan skills): warp_per_row that also splits serial
running-sum loops across the warp (shuffle_to_shared.py holds the machinery): each pass takes 32
consecutive elements, an inclusive `__shfl_up_sync` scan gives every lane its prefix, reads of the
running value before its update see the exclusive prefix and later ones the inclusive one, and
lane 31's total carries into the next pass. Sound because a prefix sum over consecutive chunks
with a carried total is the serial running sum, element by element.

A kernel that recomputes each element's prefix (`i = gidx; if (i >= n) return; T s = 0;
for (j = 0; j < i; ++j) s += E(j); y[i] = s;`, O(n^2) work; `j <= i` inclusive) is the same
running sum written per element: it is read as that serial loop in one thread
(`for (i = 0; i < n; ++i) { y[i] = s; s += E(i); }` launched `<<<1, 1>>>`, the per-element
statements before the update for `<`, after it for `<=`) and turned into one warp's scan in the
same step; a second candidate scans it with one block of 1024 threads (`<<<1, 1024>>>`: warp
scans, the 32 warp totals scanned through shared memory, the pass total carried). Sound when E
reads only what the kernel does not write and has no side effects, and the element's statements
only read the prefix: every element then gets the sum of the same terms (regrouped: floating-point
sums may round differently, which the gate's tolerance judges).
"""
from __future__ import annotations

import re
from typing import Optional

from corpora.code.parse import text, walk
from corpora.code.source import Source
from mining.carriers import warp_scan_sites
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, apply_edits, candidate
from mining.operators.grid_stride import one_element
from mining.operators.nodes import (code, has_loop, indent_at, kernels, launches, loop_var, raw, reindent,
                                    returns_or_syncs, statements, strip_parens, unit_update)
from mining.operators.rewrite_util import node_at, structural
from mining.operators.shuffle_to_shared import all_kernels_too, first_hoist_per_scope


class ScanShuffleToShared(Operator):
    name = "scan_shuffle_to_shared"
    carrier = "warp_scan"
    description = "exchange a warp scan's shuffle-up through a shared-memory slot per thread with __syncwarp"

    def edits(self, src):
        st = structural(src)
        calls = [node_at(st, s.start_byte, s.end_byte, "call_expression") for s in warp_scan_sites(src)]
        yield from first_hoist_per_scope(st, [c for c in calls if c is not None])


# --------------------------------------------------------------------------- forward half
def warp_scan(source: str, ctx: Context) -> list[Materialization]:
    """warp_per_row that also splits running-sum (scan) loops across the warp: each pass takes 32
    consecutive elements, an inclusive `__shfl_up_sync` scan gives every lane its prefix, reads
    of the running value before its update see the exclusive prefix and later ones the
    inclusive one, and lane 31's total carries to the next pass."""
    out = [m for m in all_kernels_too(source, ctx, True) if "scan" in m.description]
    staged = _prefix_to_running_sum(source)
    if staged is not None:
        for m in all_kernels_too(staged[0], ctx, True):
            if "scan" in m.description and m.description.startswith(staged[1] + ":"):
                m.description += " (its per-element prefix sums read as one running sum)"
                out.append(m)
        if staged[2]:
            src = Source(source)
            out.append(candidate(src, staged[2], "warp_scan",
                                 f"{staged[1]}: per-element prefix sums -> one block of 1024 threads scans the array "
                                 f"(warp scans with __shfl_up_sync, warp totals scanned through shared memory, "
                                 f"the running total carried between passes)", excerpt=staged[1]))
    return out


_SIDE_EFFECT = re.compile(r"\+\+|--|(?<![=!<>])=(?!=)")


def _prefix_to_running_sum(source: str) -> Optional[tuple[str, str, list[Edit]]]:
    """(the source with one per-element prefix-sum kernel as a single-thread running-sum loop, its
    name, the edits that make it one block's scan instead), or None. See the module docstring."""
    src = Source(source)
    for k in kernels(src):
        oe = one_element(src, k, loops=True)
        if oe is None or oe.hoist:  # declarations before the guard: not read here
            continue
        i = oe.decl.name
        if oe.drop_guard is not None:  # `if (i >= n) return; ...`
            sts = [st for st in statements(k.body) if oe.rest_start <= st.start_byte and st.end_byte <= oe.rest_end]
        elif oe.unwrap is not None and oe.unwrap.start_byte == oe.rest_start:  # `if (i < n) { ... }`
            cons = oe.unwrap.child_by_field_name("consequence")
            sts = statements(cons) if cons.type == "compound_statement" else [cons]
        else:
            continue
        li = next((n for n, st in enumerate(sts) if st.type == "for_statement"), None)
        if li is None or li < 1 or any(has_loop(st) or returns_or_syncs(src, st) for st in sts[li + 1:]):
            continue
        acc_decl, loop, after = sts[li - 1], sts[li], sts[li + 1:]
        m = re.fullmatch(r"((?:const\s+)?(?:unsigned\s+)?[\w:]+)\s+(\w+)\s*=\s*0[\.0]*[fFuUlL]*\s*;", code(src, acc_decl))
        if acc_decl.type != "declaration" or not m or sts[:li - 1] or not after:
            continue
        acc = m.group(2)
        lv = loop_var(src, loop)
        cond = loop.child_by_field_name("condition")
        body = loop.child_by_field_name("body")
        if lv is None or cond is None or body is None or lv[2].strip() != "0" or not unit_update(src, loop, lv[1]):
            continue
        j = lv[1]
        cm = re.fullmatch(r"%s\s*(<=?)\s*%s" % (re.escape(j), re.escape(i)), strip_parens(code(src, cond)))
        inner = statements(body) if body.type == "compound_statement" else [body]
        if cm is None or len(inner) != 1 or inner[0].type != "expression_statement":
            continue
        e = inner[0].named_children[0] if inner[0].named_children else None
        if e is None or e.type != "assignment_expression" or e.children[1].type != "+=" or \
                text(e.child_by_field_name("left")) != acc:
            continue
        term = e.child_by_field_name("right")
        t = code(src, term)
        if _SIDE_EFFECT.search(t) or re.search(r"\w\s*\(", t) or re.search(r"\b%s\b" % re.escape(i), t):
            continue
        # the term reads nothing the element's statements write
        written = {text(w.child_by_field_name("left")).split("[")[0].strip("*( ")
                   for st in after for w in walk(st) if w.type in ("assignment_expression", "update_expression")
                   and w.child_by_field_name("left") is not None}
        # ... and the element's statements only read the prefix (a write would be carried to the next element)
        if any(re.search(r"\b%s\b" % re.escape(w), t) for w in written if w) or acc in written:
            continue
        ls = launches(src, k.name)
        if not ls:
            continue
        # E(j) -> E(i): the term's identifiers named j
        term_i = apply_edits(src.raw[term.start_byte:term.end_byte], [
            Edit(n.start_byte - term.start_byte, n.end_byte - term.start_byte, i)
            for n in walk(term) if n.type == "identifier" and text(n) == j])
        ind = indent_at(src, oe.decl.stmt.start_byte)
        i2 = ind + "    "
        per_elem = "\n".join(i2 + reindent(raw(src, st), i2).strip() for st in after)
        update = f"{i2}{acc} += {term_i};"
        ty = " ".join(oe.decl.type.replace("const", "").split()) or "int"
        loop_txt = (f"{raw(src, acc_decl).strip()}\n{ind}for ({ty} {i} = 0; {i} < {oe.bound}; ++{i}) {{\n"
                    + (f"{per_elem}\n{update}" if cm.group(1) == "<" else f"{update}\n{per_elem}") + f"\n{ind}}}")
        edits = [Edit(oe.decl.stmt.start_byte, oe.rest_end, loop_txt)]
        for launch in ls:
            edits += [Edit(launch.grid.start_byte, launch.grid.end_byte, "1"),
                      Edit(launch.block.start_byte, launch.block.end_byte, "1")]
        acc_t = " ".join(m.group(1).replace("const", "").split())
        block = [Edit(oe.decl.stmt.start_byte, oe.rest_end,
                      _block_scan(acc_t, acc, ty, i, oe.bound, term_i, [raw(src, st) for st in after],
                                  cm.group(1) == "<=", ind))]
        for launch in ls:
            block += [Edit(launch.grid.start_byte, launch.grid.end_byte, "1"),
                      Edit(launch.block.start_byte, launch.block.end_byte, "1024")]
        return apply_edits(src.raw, edits), k.name, block
    return None


def _block_scan(acc_t: str, acc: str, ty: str, i: str, bound: str, term: str, stmts: list[str], inclusive: bool,
                ind: str) -> str:
    """One block of 1024 threads walks the array in passes of 1024 elements: each warp scans its 32
    (inclusive, `__shfl_up_sync`), warp 0 scans the 32 warp totals in shared memory, each element's
    prefix is the carried total + the warps before it + its warp's prefix (exclusive: minus itself);
    the pass total carries on. `acc` is the prefix each element's statements read."""
    i2, i3 = ind + "    ", ind + "        "
    scan = ("for (int ks_o = 1; ks_o < 32; ks_o <<= 1) {{\n"
            "{i}    const " + acc_t + " ks_up = __shfl_up_sync(0xffffffffu, {v}, ks_o);\n"
            "{i}    if (ks_lane >= ks_o) {v} += ks_up;\n"
            "{i}}}")
    own = "ks_inc" if inclusive else "(ks_inc - ks_e)"
    elem = "\n".join(i3 + reindent(st, i3).strip() for st in stmts)
    return (f"// ks-optimize: one block scans the array, 1024 elements per pass (launched <<<1, 1024>>>)\n"
            f"{ind}__shared__ {acc_t} ks_wsum[32];\n"
            f"{ind}const int ks_lane = threadIdx.x & 31, ks_warp = threadIdx.x >> 5;\n"
            f"{ind}{acc_t} ks_carry = 0;\n"
            f"{ind}for (long long ks_b = 0; ks_b < (long long)({bound}); ks_b += 1024) {{\n"
            f"{i2}const bool ks_in = ks_b + threadIdx.x < (long long)({bound});\n"
            f"{i2}const {ty} {i} = ({ty})(ks_b + threadIdx.x);\n"
            f"{i2}const {acc_t} ks_e = ks_in ? ({acc_t})({term}) : ({acc_t})0;\n"
            f"{i2}{acc_t} ks_inc = ks_e;\n"
            f"{i2}" + scan.format(i=i2, v="ks_inc") + "\n"
            f"{i2}if (ks_lane == 31) ks_wsum[ks_warp] = ks_inc;\n"
            f"{i2}__syncthreads();\n"
            f"{i2}if (ks_warp == 0) {{\n"
            f"{i3}{acc_t} ks_w = ks_wsum[ks_lane];\n"
            f"{i3}" + scan.format(i=i3, v="ks_w") + "\n"
            f"{i3}ks_wsum[ks_lane] = ks_w;\n"
            f"{i2}}}\n"
            f"{i2}__syncthreads();\n"
            f"{i2}if (ks_in) {{\n"
            f"{i3}const {acc_t} {acc} = ks_carry + (ks_warp ? ks_wsum[ks_warp - 1] : ({acc_t})0) + {own};\n"
            f"{elem}\n"
            f"{i2}}}\n"
            f"{i2}ks_carry += ks_wsum[31];\n"
            f"{i2}__syncthreads();\n"
            f"{ind}}}")


PAIR = Pair(ScanShuffleToShared, (Rewrite("warp_scan", "warp_scan", warp_scan, prior=9.0, serves=("block_scan",)),))
