"""lookback_to_chained: a decoupled look-back becomes a chained scan, each tile waiting for its
immediate predecessor's inclusive prefix.

    int pred = tile - 1 - lane;
    while (true) {
        const unsigned long long word = pred >= 0 ? *reinterpret_cast<volatile unsigned long long*>(status + pred)
                                                  : (FLAG_PREFIX << 32);
        const unsigned long long flag = word >> 32;
        if (__any_sync(0xffffffffu, flag == 0ull)) continue;
        const int value = (int)(unsigned)word;
        const unsigned prefix_lanes = __ballot_sync(0xffffffffu, flag == FLAG_PREFIX);
        if (prefix_lanes) { ...; exclusive += warp_sum(lane <= stop ? value : 0); break; }
        exclusive += warp_sum(value);
        pred -= 32;
    }
->  {  // chained: wait for the immediate predecessor's inclusive prefix
        unsigned long long word;
        do {
            word = (tile - 1 - 0) >= 0 ? *reinterpret_cast<volatile unsigned long long*>(status + (tile - 1 - 0))
                                       : (FLAG_PREFIX << 32);
        } while ((word >> 32) != FLAG_PREFIX);
        exclusive += (int)(unsigned)word;
    }

With decoupled look-back a tile does not wait for its predecessor's full prefix: it sums the
aggregates predecessors published as soon as they knew them, a warp-wide window at a time, and
stops at the first inclusive prefix. The chained form serializes the tiles: each one waits until
the tile before it has published its inclusive prefix and adds that value alone. Every lane reads
the same status word, so every lane ends with the same total, as the warp reduction left it before.

What is recognised (and checked): a `while (true)` / `for (;;)` loop whose body declares the
status word from a `volatile` load indexed by a window variable `pred` (declared right before the
loop from an expression of the lane index, and changed only inside the loop), a flag and a value
computed from the word, a `__ballot_sync(mask, flag == PREFIX)` whose result decides the final
`X += ...; break;`. The predecessor the chained loop polls is the window variable's initial value
at lane 0. Deadlock freedom is the same argument as before: the tile a block waits for has a
smaller number, so (with tiles numbered in start order) it is already running.

Forward: none yet. No deterministic rewrite introduces this carrier; `skills optimize` applies
this operator's skills through the LLM materializer only (the pair's forward half is empty).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name
from corpora.code.source import Source
from mining.carriers import decoupled_lookback_sites
from mining.operators.base import Edit, Operator, Pair
from mining.operators.nodes import FunctionIndex
from mining.operators.rewrite_util import line_indent, splice_range, structural, type_text
from corpora.code.parse import text, walk


def _decls(body: Node) -> dict[str, tuple[Node, Node]]:
    """name -> (declaration, initializer) for the single-declarator declarations directly in `body`."""
    out = {}
    for c in body.named_children:
        if c.type != "declaration":
            continue
        ds = [d for d in c.named_children if d.type == "init_declarator"]
        if len(ds) == 1 and ds[0].child_by_field_name("value") is not None:
            d = ds[0].child_by_field_name("declarator")
            if d is not None and d.type == "identifier":
                out[text(d)] = (c, ds[0].child_by_field_name("value"))
    return out


def _idents(node: Node) -> set[str]:
    return {text(n) for n in walk(node) if n.type == "identifier"}


def _subst(src: Source, node: Node, names: dict[str, str]) -> str:
    subs = [Edit(n.start_byte, n.end_byte, names[text(n)]) for n in walk(node)
            if n.type == "identifier" and text(n) in names]
    return " ".join(splice_range(src, node.start_byte, node.end_byte, subs).split())


class LookbackToChained(Operator):
    name = "lookback_to_chained"
    carrier = "decoupled_lookback"
    description = "replace a decoupled look-back by a chained wait on the predecessor's inclusive prefix"

    def edits(self, src: Source):
        flagged = {s.function for s in decoupled_lookback_sites(src)}
        if not flagged:
            return
        src = structural(src)
        for f in src.funcs:
            if f.name not in flagged:
                continue
            fn = src.func_node(f)
            if fn is None:
                continue
            for loop in walk(fn):
                if loop.type not in ("while_statement", "for_statement"):
                    continue
                e = self.rewrite(src, fn, loop)
                if e is not None:
                    yield e

    def rewrite(self, src: Source, fn: Node, loop: Node) -> Optional[Edit]:
        if loop.type == "while_statement":
            cond = loop.child_by_field_name("condition")
            if cond is None or not re.fullmatch(r"\(\s*(true|1)\s*\)", text(cond)):
                return None
        elif any(loop.child_by_field_name(k) is not None for k in ("initializer", "condition", "update")):
            return None
        body = loop.child_by_field_name("body")
        if body is None or body.type != "compound_statement":
            return None
        ballots = [c for c in walk(body) if c.type == "call_expression" and call_name(c) == "__ballot_sync"]
        if len(ballots) != 1:
            return None
        args = ballots[0].child_by_field_name("arguments").named_children
        if len(args) != 2 or args[1].type != "binary_expression" or text(args[1].children[1]) != "==":
            return None
        decls = _decls(body)
        # `flag == PREFIX` (either order): the flag is declared in the loop body, PREFIX is not
        flag, prefix = args[1].child_by_field_name("left"), args[1].child_by_field_name("right")
        if not (flag.type == "identifier" and text(flag) in decls):
            flag, prefix = prefix, flag
        if not (flag.type == "identifier" and text(flag) in decls) or _idents(prefix) & set(decls):
            return None
        # the status word: the declaration that reads through a volatile pointer
        words = [n for n, (d, v) in decls.items() if re.search(r"\bvolatile\b", text(v))]
        if len(words) != 1:
            return None
        word = words[0]
        wdecl, wval = decls[word]
        fdecl, fval = decls[text(flag)]
        if _idents(fval) - {word}:
            return None  # the flag is not a function of the word alone
        # the final accumulation: `X += ...; break;` under the ballot's verdict
        idx = FunctionIndex(src, fn)
        acc = None
        for n in walk(body):
            if n.type == "assignment_expression" and text(n.child_by_field_name("operator")) == "+=":
                stmt = n.parent
                nxt = stmt.next_named_sibling if stmt is not None else None
                if nxt is not None and nxt.type == "break_statement":
                    acc = n
        if acc is None or acc.child_by_field_name("left").type != "identifier":
            return None
        target = text(acc.child_by_field_name("left"))
        tv = idx.visible(target, acc.start_byte)
        if tv is None or tv.decl.start_byte >= loop.start_byte:
            return None
        # the value added: a declaration of the body computed from the word alone
        values = [n for n, (d, v) in decls.items() if n not in (word, text(flag)) and _idents(v) <= {word}
                  and re.search(r"\b%s\b" % re.escape(n), text(acc))]
        if len(values) != 1:
            return None
        vval = decls[values[0]][1]
        # the window variable: read by the word, declared right before the loop, changed only inside
        block = loop.parent
        if block is None or block.type != "compound_statement":
            return None
        sibs = [c for c in block.named_children if c.type != "comment"]
        k = next(i for i, c in enumerate(sibs) if c.start_byte == loop.start_byte)
        if k == 0 or sibs[k - 1].type != "declaration":
            return None
        pdecls = _decls(block)
        pred = next((n for n, (d, v) in pdecls.items() if d.start_byte == sibs[k - 1].start_byte), None)
        if pred is None or pred not in _idents(wval):
            return None
        pv = idx.visible(pred, loop.start_byte)
        if pv is None or any(not (loop.start_byte <= a.start_byte < loop.end_byte) for a in pv.assigned):
            return None
        if any(n.type == "identifier" and text(n) == pred and not (sibs[k - 1].start_byte <= n.start_byte < loop.end_byte)
               for n in walk(fn)):
            return None  # the window variable outlives the loop
        pinit = pdecls[pred][1]
        lanes = {n for n in _idents(pinit) if _is_lane(src, idx, n, loop.start_byte)}
        first = _subst(src, pinit, {n: "0" for n in lanes})
        wtype = type_text(src, wdecl)
        if not wtype:
            return None
        wtype = re.sub(r"^\s*const\s+", "", wtype)
        load = _subst(src, wval, {pred: f"({first})"})
        done = _subst(src, fval, {word: word})
        ind = line_indent(src, loop.start_byte)
        rep = (f"{{  // chained: wait for the immediate predecessor's inclusive prefix\n"
               f"{ind}    {wtype} {word};\n"
               f"{ind}    do {{\n"
               f"{ind}        {word} = {load};\n"
               f"{ind}    }} while (({done}) != {' '.join(text(prefix).split())});\n"
               f"{ind}    {target} += {' '.join(text(vval).split())};\n"
               f"{ind}}}")
        # drop the window variable's declaration line
        d = sibs[k - 1]
        a = src.raw.rfind(b"\n", 0, d.start_byte) + 1
        b = src.raw.find(b"\n", d.end_byte)
        if src.code[a:d.start_byte].strip() or src.code[d.end_byte:b].strip():
            return None
        return Edit(a, loop.end_byte, splice_range(src, a, loop.end_byte, [Edit(a, b + 1, ""),
                                                                           Edit(loop.start_byte, loop.end_byte, rep)]))


def _is_lane(src: Source, idx: FunctionIndex, name: str, at: int) -> bool:
    """A lane index: declared from `x & 31`, `x % 32` / `% warpSize`, or named like one."""
    v = idx.visible(name, at)
    if v is None or v.value is None:
        return False
    val = " ".join(text(v.value).split())
    return bool(re.search(r"&\s*31\b|&\s*\(\s*32\s*-\s*1\s*\)|%\s*(32|warpSize)\b|\blane", val)) or \
        bool(re.fullmatch(r"\w*lane\w*", name) and re.search(r"threadIdx|tid", val))


PAIR = Pair(LookbackToChained)
