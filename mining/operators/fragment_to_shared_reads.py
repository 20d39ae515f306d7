"""fragment_to_shared_reads: a register fragment copied from a shared tile is read from the tile.

    T frag[TM];                                                   // a per-thread operand cache
    for (k ...) {
        FLOAT4(frag[0]) = FLOAT4(s_a[k][ty * TM / 2]);           // wide copies shared -> registers,
        FLOAT4(frag[4]) = FLOAT4(s_a[k][ty * TM / 2 + BM / 2]);  // contiguous from element 0
        ... acc = fmaf(frag[m], b, acc) ...                       // reads by any index
    }
->  for (k ...) {
        ... acc = fmaf((m < 4 ? (&s_a[k][ty * TM / 2])[m] : (&s_a[k][ty * TM / 2 + BM / 2])[m - 4]), b, acc) ...
    }

The fragment (the `regM` / `regN` operand cache of a register-tiled GEMM, usually filled with
LDS.128) lets a thread reuse each shared value from registers; without it every read is a shared
load again, of the memory's own scalar type, where the value is used.

Why it is sound (checked): every write of the array is one of the group's copy statements, which
sit one after another in a block and copy memory of the array's own element type (the view's
scalar type is the array's), so element `c + j` of the array is element `j` of the copy's source;
the groups fill elements 0 .. n-1 without gaps, so a read of any other element read an
unwritten value before. Every read of the array is a plain `frag[x]` after a group in the same
block; from that group to the end of the block nothing writes the shared array, synchronizes, or
assigns a variable of the copies' address expressions, so the source still holds what was copied.
The declaration, the copies and every read are rewritten, nothing else. A fill loop `for (int i =
0; i < n; ++i) frag[i] = sh[..i..];` (scalar, any index, what `cache_operands_in_registers`
writes) is a group of its own: a read `frag[x]` becomes the loop's source element at i = x.

Forward: `cache_operands_in_registers` (register_cache_to_reload.py) caches operands a loop nest
reads again on every trip of an inner loop; the tile rewrites of shared_tile_to_global.py also load
fragments when they stage tiles.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import same
from corpora.code.parse import text, walk
from corpora.code.source import Source
from mining.carriers import local_arrays
from mining.carriers_meaning import norm_type, type_bytes, wide_access
from mining.operators.base import Edit, Operator, Pair
from mining.operators.nodes import FunctionIndex, int_value, rename_identifiers, subscript_chain
from mining.operators.rewrite_util import has_side_effects, splice_range, structural, type_text

_SYNC = re.compile(r"\b(__syncthreads\w*|__syncwarp|__threadfence\w*|__pipeline\w*|asm|atomic\w+|cp\.async)\b")


def _inside(node: Node, outer: Node) -> bool:
    return outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte


def _base(node: Optional[Node]) -> Optional[Node]:
    while node is not None and node.type in ("subscript_expression", "field_expression", "parenthesized_expression",
                                              "pointer_expression", "cast_expression"):
        if node.type == "parenthesized_expression":
            node = node.named_children[0] if node.named_children else None
        elif node.type == "cast_expression":
            node = node.child_by_field_name("value")
        else:
            node = node.child_by_field_name("argument")
    return node


class FragmentToSharedReads(Operator):
    name = "fragment_to_shared_reads"
    skill_of = "register_cache_to_reload"  # the same optimization, another spelling: one skill
    carrier = "register_cache"
    description = "read a register fragment's values from the shared tile it was copied from"

    def edits(self, src: Source):
        src = structural(src)
        for f in src.funcs:
            fn = src.func_node(f)
            if fn is None or not f.is_kernel:
                continue
            for decl, name, ndims in local_arrays(src, f, 1):
                if ndims != 1:
                    continue
                e = self._rewrite(src, fn, decl, name)
                if e is not None:
                    yield from e

    def _copy(self, src: Source, st: Node, name: str) -> Optional[tuple[int, int, Node]]:
        """(first element, element count, source view `sh[..]`) of `WIDE(name[c]) = WIDE(sh[..]);`."""
        if st.type != "expression_statement" or not st.named_children:
            return None
        a = st.named_children[0]
        if a.type != "assignment_expression" or text(a.child_by_field_name("operator")) != "=":
            return None
        lw, rw = wide_access(src, a.child_by_field_name("left")), wide_access(src, a.child_by_field_name("right"))
        if lw is None or rw is None or lw.view_arg is None or rw.view_arg is None or lw.space != "local" or \
                rw.space != "shared" or norm_type(lw.wide_type or "") != norm_type(rw.wide_type or ""):
            return None
        if norm_type(lw.scalar_type or "") != norm_type(rw.scalar_type or "") or lw.scalar_type is None:
            return None
        w, s = type_bytes(lw.wide_type), type_bytes(lw.scalar_type)
        if not w or not s or w % s:
            return None
        sub, ind = subscript_chain(lw.view_arg) if lw.view_arg.type == "identifier" else (None, [])
        if lw.view_arg.type == "subscript_expression":
            arg = lw.view_arg.child_by_field_name("argument")
            if arg is None or arg.type != "identifier" or text(arg) != name:
                return None
            ind = [c for c in lw.view_arg.child_by_field_name("indices").named_children if c.type != "comment"]
        if len(ind) != 1:
            return None
        c = int_value(src, text(ind[0]))
        if c is None:
            return None
        if has_side_effects(rw.view_arg, allow_calls=False):
            return None
        return c, w // s, rw.view_arg

    def _loop_copy(self, src: Source, st: Node, name: str) -> Optional[tuple[Node, int, Node, str]]:
        """(the fill loop, element count, source element, loop variable) of `for (int i = 0; i < n; ++i)
        name[i] = sh[..i..];` with sh a shared array of the array's element type."""
        loop = st.parent
        if loop is not None and loop.type == "compound_statement" and \
                len([c for c in loop.named_children if c.type != "comment"]) == 1:
            loop = loop.parent
        if loop is None or loop.type != "for_statement" or not st.named_children:
            return None
        init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
        m = re.fullmatch(r"(?:const\s+)?(?:unsigned\s+)?int\s+(\w+)\s*=\s*0\s*;?", " ".join(text(init).split())) \
            if init is not None else None
        if m is None or cond is None or upd is None:
            return None
        i = m.group(1)
        c = re.fullmatch(r"%s\s*<\s*(\w+)" % i, " ".join(text(cond).split()))
        n = int_value(src, c.group(1)) if c else None
        if n is None or n < 1 or " ".join(text(upd).split()).replace(" ", "") not in (f"++{i}", f"{i}++", f"{i}+=1"):
            return None
        a = st.named_children[0]
        if a.type != "assignment_expression" or text(a.child_by_field_name("operator")) != "=":
            return None
        left, right = a.child_by_field_name("left"), a.child_by_field_name("right")
        if left.type != "subscript_expression" or text(left.child_by_field_name("argument")) != name or \
                " ".join(text(left.child_by_field_name("indices")).split()) != f"[{i}]" or \
                right.type != "subscript_expression" or has_side_effects(right, allow_calls=False):
            return None
        base = _base(right)
        if base is None or text(base) not in src.shared_names or \
                not any(n_.type == "identifier" and text(n_) == i for n_ in walk(right)):
            return None
        return loop, n, right, i

    def _rewrite(self, src: Source, fn: Node, decl: Node, name: str) -> Optional[list[Edit]]:
        idx = FunctionIndex(src, fn)
        var = next((v for v in idx.vars if v.name == name and same(v.decl, decl)), None)
        if var is None or var.value is not None or var.kind != "local":
            return None
        ds = [d for d in decl.named_children if d.type.endswith("declarator") or d.type == "identifier"]
        k = next((i for i, d in enumerate(ds) if _inside(var.declarator, d)), None)
        if k is None:
            return None
        elem = type_text(src, decl)
        if not elem or type_bytes(elem) is None:
            return None
        uses = [u for u in walk(fn) if u.type == "identifier" and text(u) == name and not _inside(u, var.declarator)
                and idx.visible(name, u.start_byte) is var]
        if not uses:
            return None
        # the copy groups: runs of consecutive copy statements in one block
        groups: list[tuple[Node, int, list[tuple[Node, int, int, Node]]]] = []
        copy_uses: set[int] = set()
        for u in uses:
            st = u
            while st is not None and st.type != "expression_statement":
                st = st.parent
            if st is None:
                continue
            cp, fill_var = self._copy(src, st, name), None
            if cp is None and (lc := self._loop_copy(src, st, name)) is not None:
                st, cp, fill_var = lc[0], (0, lc[1], lc[2]), lc[3]  # a fill loop: one group of its own
                elem_t = type_text(src, decl)
                if norm_type(elem_t or "") != norm_type(type_text(src, src.shared_names[text(_base(lc[2]))]) or "-"):
                    return None
            if cp is None:
                continue
            copy_uses.add(u.start_byte)
            blk = st.parent
            if blk is None or blk.type != "compound_statement":
                return None
            kids = [k for k in blk.named_children if k.type != "comment"]
            i = next(j for j, k in enumerate(kids) if same(k, st))
            g = next((g for g in groups if same(g[0], blk) and g[1] == i - len(g[2])), None)
            if any(same(g2[0], blk) and any(same(x[0], st) for x in g2[2]) for g2 in groups):
                continue
            if g is None or fill_var is not None or any(c[4] is not None for c in g[2]):
                groups.append((blk, i, [(st, cp[0], cp[1], cp[2], fill_var)]))
            else:
                groups[groups.index(g)] = (blk, g[1], g[2] + [(st, cp[0], cp[1], cp[2], fill_var)])
        if not groups:
            return None
        # every group fills elements 0 .. n-1 contiguously; its block stays quiet after it
        plans = []
        for blk, i0, copies in groups:
            copies = sorted(copies, key=lambda c: c[1])
            at = 0
            for _, c, n, _, _ in copies:
                if c != at:
                    return None
                at += n
            last = max(c[0].end_byte for c in copies)
            # (a fill loop's own variable is not an address variable after the loop)
            names = {text(n) for _, _, _, v, fv in copies for n in walk(v) if n.type == "identifier" and text(n) != fv}
            roots = {text(_base(v)) for _, _, _, v, _ in copies if _base(v) is not None}
            tail = src.code[last:blk.end_byte].decode("utf-8", "replace")
            if _SYNC.search(tail):
                return None
            for n in walk(blk):
                if n.start_byte < last:
                    continue
                target = n.child_by_field_name("left") if n.type == "assignment_expression" else \
                    n.child_by_field_name("argument") if n.type == "update_expression" else None
                if target is None:
                    continue
                b = _base(target)
                if b is None or text(b) in names or text(b) in roots:
                    return None
            plans.append((blk, last, copies))
        # every other use: a plain read after exactly one group of its block
        reads: list[Edit] = []
        for u in uses:
            if u.start_byte in copy_uses:
                continue
            sub, ind = subscript_chain(u)
            if len(ind) != 1 or ind[0] is None or has_side_effects(ind[0], allow_calls=False):
                return None
            p = sub.parent
            if p is not None and (p.type in ("pointer_expression", "update_expression") or
                                  (p.type == "assignment_expression" and same(p.child_by_field_name("left"), sub))):
                return None
            if p is not None and p.type == "argument_list" and p.parent is not None and \
                    wide_access(src, p.parent) is not None:
                return None
            owner = [pl for pl in plans if _inside(u, pl[0]) and u.start_byte >= pl[1]]
            if not owner:
                return None
            blk, _, copies = max(owner, key=lambda pl: pl[0].start_byte)
            x = text(ind[0]).strip()
            xa = x if re.fullmatch(r"[\w.]+", x) else f"({x})"
            parts = []
            for k, (_, c, n, view, fv) in enumerate(copies):
                off = xa if c == 0 else f"{xa} - {c}"
                if fv is not None:  # the fill loop's element at x
                    parts.append((c + n, rename_identifiers(" ".join(text(view).split()), {fv: xa})))
                else:
                    parts.append((c + n, f"(&{text(view)})[{off}]"))
            expr = parts[-1][1]
            for end_, item in reversed(parts[:-1]):
                expr = f"{xa} < {end_} ? {item} : {expr}"
            reads.append(Edit(sub.start_byte, sub.end_byte, expr if len(parts) == 1 else f"({expr})"))
        # delete the copies and the declaration, a whole line each where they stand alone
        dels = [Edit(*self._line(src, st), "") for _, _, copies in plans for st, _, _, _, _ in copies]
        if len(ds) == 1:
            dels.append(Edit(*self._line(src, decl), ""))
        elif k + 1 < len(ds):  # `float r[8], q[8];`: this declarator and its comma
            dels.append(Edit(ds[k].start_byte, ds[k + 1].start_byte, ""))
        else:
            dels.append(Edit(ds[k - 1].end_byte, ds[k].end_byte, ""))
        edits = sorted(set(reads + dels))
        for (s1, e1, _), (s2, e2, _) in zip(edits, edits[1:]):
            if s2 < e1:
                return None
        return [Edit(edits[0].start, edits[-1].end, splice_range(src, edits[0].start, edits[-1].end, edits))]

    @staticmethod
    def _line(src: Source, node: Node) -> tuple[int, int]:
        a = src.raw.rfind(b"\n", 0, node.start_byte) + 1
        b = src.raw.find(b"\n", node.end_byte)
        b = len(src.raw) if b < 0 else b
        if src.code[a:node.start_byte].strip() or src.code[node.end_byte:b].strip() and \
                not src.code[node.end_byte:b].strip().startswith(b"//"):
            return node.start_byte, node.end_byte
        return a, min(b + 1, len(src.raw))


PAIR = Pair(FragmentToSharedReads, inverted_by=("cache_operands_in_registers",))
