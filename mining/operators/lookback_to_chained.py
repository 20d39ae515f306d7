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

Forward, `decoupled_lookback`: the chained wait made a look-back again, where the kernel's status
protocol lets it be proven. A block `{ T word; do { word = LOAD(P); } while ((word >> 32) != PREFIX);
X += (int)(unsigned)word; }` (this operator's form, or the same written by hand) becomes the warp-wide
window above: lanes read the status words of tiles P - lane, P - lane - 32, ..., re-read while any
of them is neither AGG nor PREFIX, add every aggregate of a window with no prefix in it and stop at
the nearest prefix, all sums warp-wide (a `__shfl_xor_sync` butterfly), so every lane ends with the
same X. Why it is the same value: X gets the inclusive prefix of tile P, which is the prefix a tile
j <= P published plus the aggregates of tiles j+1 .. P - exactly what the window adds, provided a
status word flagged AGG holds its tile's aggregate and one flagged PREFIX its inclusive prefix, and
a word is never taken back. Checked, not assumed: every write of the status array in the kernel is
a call of one `__device__` helper whose body is `atomicExch(slot, (flag << 32) | (unsigned)value)`
(one 64-bit word: flag and value are seen together) at `status + T` with P = `T - 1` (T this block's
tile), flagged AGG with value A or PREFIX with value `X + A` (or A alone, the first tile's), with
exactly these two flags; so AGG's value is the A that the tile's own prefix adds to X, i.e. its
aggregate. LOAD is `P >= 0 ? *(volatile ...)(status + P) : (PREFIX << 32)` (before tile 0, a prefix
of 0). The whole warp runs the block: every `if` around it tests `warp == 0`-style conditions
(`tid < 32`, `threadIdx.x < 32`) or values uniform over the block (parameters, shared variables,
block indices and locals computed from them), no loop is around it, and every launch has a 1-D
block that is a multiple of 32. Deadlock freedom is the chained form's: a tile waits only on
smaller tile numbers. Not written: chained scans over separate flag and value arrays (a value
published after its flag needs fences this rewrite cannot place soundly), and kernels that publish
no aggregate (the look-back would only wait for prefixes: no gain).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name, same
from corpora.code.source import Source
from mining.carriers import decoupled_lookback_sites
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, candidate
from mining.operators.nodes import FunctionIndex, block_dims, ensure_helper, kernel_launches, kernels
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


# --------------------------------------------------------------------------- forward: decoupled_lookback
def _n(s: str) -> str:
    return re.sub(r"\s+", "", s)


def _strip(s: str) -> str:
    s = _n(s)
    while s.startswith("(") and s.endswith(")"):
        depth, ok = 0, True
        for i, ch in enumerate(s):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(s) - 1:
                ok = False
                break
        if not ok:
            break
        s = s[1:-1]
    return s


def _publisher(src: Source, name: str) -> bool:
    """A `__device__` helper `f(slot, flag, value)` whose body is `atomicExch(slot, (flag << 32) | (unsigned)value);`."""
    for f in src.funcs:
        if f.name != name:
            continue
        fn = src.func_node(f)
        body = fn.child_by_field_name("body") if fn is not None else None
        params = [text(d) for d in walk(fn) if d.type == "identifier" and d.parent is not None and
                  d.parent.type in ("parameter_declaration", "pointer_declarator")]
        if body is None or len(params) != 3:
            return False
        slot, flag, value = params
        c = _n(src.code[body.start_byte:body.end_byte].decode("utf-8", "replace"))
        return c in (f"{{atomicExch({slot},({flag}<<32)|(unsigned){value});}}",
                     f"{{atomicExch({slot},(({flag})<<32)|(unsigned)({value}));}}")
    return False


def _uniform(src: Source, idx: FunctionIndex, node: Node, depth: int = 0) -> bool:
    """Every name in `node` has one value over the block: parameters, shared variables, block
    indices and sizes, macros, and locals computed only from those."""
    if depth > 6:
        return False
    for n in walk(node):
        if n.type == "field_expression" and re.fullmatch(r"threadIdx\s*\.\s*[xyz]", text(n)):
            return False
        if n.type != "identifier" or (n.parent is not None and n.parent.type == "field_expression" and
                                      text(n) in ("blockIdx", "gridDim", "blockDim")):
            continue
        v = idx.visible(text(n), n.start_byte)
        if v is None:
            if text(n) in ("threadIdx",):
                return False
            continue  # a macro or a global constant
        if v.kind == "param" or b"__shared__" in src.code[v.decl.start_byte:v.decl.end_byte]:
            continue
        if v.value is None or v.assigned or not _uniform(src, idx, v.value, depth + 1):
            return False
    return True


def _warp_zero(src: Source, idx: FunctionIndex, cond: str, at: int) -> bool:
    """`warp == 0` (warp = tid >> 5 or / 32, tid = threadIdx.x), `tid < 32`, `threadIdx.x < 32`."""
    c = _strip(cond)
    m = re.fullmatch(r"(\w+)==0|0==(\w+)", c)
    if m:
        v = idx.visible(m.group(1) or m.group(2), at)
        if v is None or v.value is None or v.assigned:
            return False
        wm = re.fullmatch(r"\(?(\w+(?:\.x)?)(?:>>5|/32)\)?", _n(text(v.value)))
        return bool(wm) and _is_tid(idx, wm.group(1), at)
    m = re.fullmatch(r"(\w+(?:\.x)?)<32", c)
    return bool(m) and _is_tid(idx, m.group(1), at)


def _is_tid(idx: FunctionIndex, name: str, at: int) -> bool:
    if name == "threadIdx.x":
        return True
    v = idx.visible(name, at)
    return v is not None and v.value is not None and not v.assigned and _strip(text(v.value)) == "threadIdx.x"


def decoupled_lookback(source: str, ctx: Context) -> list[Materialization]:
    """A chained wait on the predecessor's inclusive prefix -> a decoupled look-back (module docstring)."""
    src = structural(Source(source))
    out = []
    for k in kernels(src):
        dims = [block_dims(src, la) for la in kernel_launches(src, k.name)]
        if not dims or any(d is None or d[1:] != (1, 1) or d[0] % 32 for d in dims):
            continue
        for do in walk(k.body):
            if do.type == "do_statement":
                m = _lookback(src, k, do)
                if m is not None:
                    out.append(m)
    return out


def _lookback(src: Source, k, do: Node) -> Optional[Materialization]:
    fn = k.node
    idx = FunctionIndex(src, fn)
    block = do.parent
    if block is None or block.type != "compound_statement":
        return None
    sts = [c for c in block.named_children if c.type != "comment"]
    i = next(j for j, c in enumerate(sts) if same(c, do))
    if i == 0 or i + 1 >= len(sts) or sts[i - 1].type != "declaration":
        return None
    wm = re.fullmatch(r"((?:unsigned\s+)?(?:long\s+long|\w+))\s+(\w+)\s*;", " ".join(text(sts[i - 1]).split()))
    if wm is None:
        return None
    wtype, word = wm.groups()
    body = do.child_by_field_name("body")
    inner = [c for c in body.named_children if c.type != "comment"] if body.type == "compound_statement" else [body]
    if len(inner) != 1 or inner[0].type != "expression_statement":
        return None
    asg = inner[0].named_children[0] if inner[0].named_children else None
    if asg is None or asg.type != "assignment_expression" or text(asg.child_by_field_name("left")) != word or \
            text(asg.child_by_field_name("operator")) != "=":
        return None
    load = asg.child_by_field_name("right")
    cond = do.child_by_field_name("condition")
    cm = re.fullmatch(r"(.+)!=(\w+)", _strip(text(cond)))
    if cm is None or _strip(cm.group(1)) != f"{word}>>32":
        return None
    prefix = cm.group(2)
    acc_stmt = sts[i + 1]
    am = re.fullmatch(r"(\w+)\+=(.+);", _n(text(acc_stmt)))
    if acc_stmt.type != "expression_statement" or am is None or \
            _strip(am.group(2)) not in (f"(int)(unsigned){word}", f"(int){word}"):
        return None
    x = am.group(1)
    if len(sts) != i + 2 or i != 1:
        return None  # the block is the chained wait and nothing else
    # LOAD: P >= 0 ? *reinterpret_cast<volatile T*>(status + P) : (PREFIX << 32)
    if load.type != "conditional_expression":
        return None
    lc, lt, lf = (load.child_by_field_name(f) for f in ("condition", "consequence", "alternative"))
    if _strip(text(lf)) != f"{prefix}<<32":
        return None
    reads = [n for n in walk(lt) if n.type == "pointer_expression" and text(n).lstrip().startswith("*")]
    if len(reads) != 1:
        return None
    lm = re.fullmatch(r"\*reinterpret_cast<volatile(?:unsigned)?(?:longlong|\w+)\*>\((\w+)\+(.+)\)", _n(text(reads[0])))
    if lm is None or _strip(text(lt)) != _n(text(reads[0])):
        return None
    status, p = lm.group(1), _strip(lm.group(2))
    if _strip(text(lc)) not in (f"{p}>=0", f"({p})>=0"):
        return None
    sv = idx.visible(status, reads[0].start_byte)
    if sv is None or sv.kind != "param":
        return None
    # every write of the status array: the packing helper at status + T, flags AGG / PREFIX
    calls = []
    for n in walk(fn):
        if n.type == "identifier" and text(n) == status and idx.visible(status, n.start_byte) is sv and \
                not (load.start_byte <= n.start_byte < load.end_byte) and not _inside_node(n, sv.decl):
            c = n.parent
            while c is not None and c.type in ("binary_expression", "parenthesized_expression"):
                c = c.parent
            if c is None or c.type != "argument_list" or c.parent is None or c.parent.type != "call_expression":
                return None
            call = c.parent
            args = [a for a in c.named_children]
            fname = text(call.child_by_field_name("function"))
            if len(args) != 3 or not _publisher(src, fname) or not _inside_node(n, args[0]):
                return None
            calls.append([_strip(text(a)) for a in args] + [call])
    tiles = {re.fullmatch(r"%s(?:\+(.+))?" % re.escape(status), a[0]).group(1) if
             re.fullmatch(r"%s(?:\+(.+))?" % re.escape(status), a[0]) else "?" for a in calls}
    flags = {a[1] for a in calls}
    if "?" in tiles or prefix not in flags or len(flags) != 2:
        return None
    agg = next(iter(flags - {prefix}))
    aggs = {a[2] for a in calls if a[1] == agg}
    if len(aggs) != 1:
        return None
    a_val = next(iter(aggs))
    if not re.fullmatch(r"\w+", a_val) or any(a[2] not in (a_val, f"{x}+{a_val}", f"{a_val}+{x}")
                                             for a in calls if a[1] == prefix):
        return None
    t = next((tt for tt in tiles if tt is not None), None)
    if t is None or len(tiles - {None}) != 1 or p not in (f"{t}-1", f"{t}-1-0", f"({t}-1-0)", f"{t}-1+0"):
        return None
    for a in calls:  # slot 0 written as `status` alone: only by tile 0
        if a[0] == status and not _under(a[3], f"{t}==0"):
            return None
    # the whole warp runs the block, once
    par = block.parent
    while par is not None and not same(par, k.body):
        if par.type in ("for_statement", "while_statement", "do_statement", "lambda_expression"):
            return None
        if par.type == "if_statement":
            c = par.child_by_field_name("condition")
            if not (_uniform(src, idx, c) or _warp_zero(src, idx, text(c), par.start_byte)):
                return None
        par = par.parent
    lane = next((v.name for v in idx.vars if v.value is not None and not v.assigned and
                 re.fullmatch(r"\(?(\w+(?:\.x)?)(?:&31|%32)\)?", _n(text(v.value))) and
                 _is_tid(idx, re.fullmatch(r"\(?(\w+(?:\.x)?)(?:&31|%32)\)?", _n(text(v.value))).group(1),
                         do.start_byte) and idx.visible(v.name, do.start_byte) is v), None)
    if lane is None:
        return None
    xv = idx.visible(x, acc_stmt.start_byte)
    xt = type_text(src, xv.decl) if xv is not None else None
    if not xt or re.search(r"\b(__shared__|volatile)\b", xt):
        return None
    xt = re.sub(r"^\s*const\s+", "", xt)
    if re.search(rb"\bks_(pred|flag|value|stop|prefix_lanes)\b", src.code):
        return None
    ind = line_indent(src, block.start_byte)
    i1, i2, i3 = ind + "    ", ind + "        ", ind + "            "
    plus = next((n for n in walk(reads[0]) if n.type == "binary_expression" and
                 _n(text(n.child_by_field_name("left"))) == status), None)
    if plus is None:
        return None
    right = plus.child_by_field_name("right")
    read = " ".join(splice_range(src, reads[0].start_byte, reads[0].end_byte,
                                 [Edit(right.start_byte, right.end_byte, "ks_pred")]).split())
    helper = f"ks_warp_sum_{re.sub(r'[^A-Za-z0-9]+', '_', xt)}"
    rep = (f"{{  // decoupled look-back: the predecessors' aggregates, a warp-wide window at a time\n"
           f"{i1}int ks_pred = ({t} - 1) - {lane};\n"
           f"{i1}while (true) {{\n"
           f"{i2}const {wtype} {word} = ks_pred >= 0 ? {read} : ({prefix} << 32);\n"
           f"{i2}const {wtype} ks_flag = {word} >> 32;\n"
           f"{i2}if (__any_sync(0xffffffffu, ks_flag != {agg} && ks_flag != {prefix})) continue;  // not ready\n"
           f"{i2}const {xt} ks_value = ({xt})(unsigned){word};\n"
           f"{i2}const unsigned ks_prefix_lanes = __ballot_sync(0xffffffffu, ks_flag == {prefix});\n"
           f"{i2}if (ks_prefix_lanes) {{\n"
           f"{i3}const int ks_stop = __ffs(ks_prefix_lanes) - 1;  // the nearest predecessor with a prefix\n"
           f"{i3}{x} += {helper}({lane} <= ks_stop ? ks_value : 0);\n"
           f"{i3}break;\n"
           f"{i2}}}\n"
           f"{i2}{x} += {helper}(ks_value);  // 32 aggregates: slide the window back\n"
           f"{i2}ks_pred -= 32;\n"
           f"{i1}}}\n"
           f"{ind}}}")
    helper_def = (f"// ks-optimize helper: {helper} (a warp-wide sum, every lane gets it)\n"
                  f"__device__ __forceinline__ {xt} {helper}({xt} v) {{\n"
                  f"    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
                  f"    return v;\n}}\n")
    edits = [Edit(block.start_byte, block.end_byte, rep)] + ensure_helper(src, helper, helper_def)
    return candidate(src, edits, "decoupled_lookback",
                     f"{k.name}: the wait on tile {t} - 1 becomes a look-back over aggregates ({agg}) and prefixes ({prefix})",
                     excerpt=" ".join(text(do).split())[:160])


def _under(node: Node, cond: str) -> bool:
    """`node` sits in the then-branch of an `if (cond)`."""
    p = node
    while p.parent is not None:
        q = p.parent
        if q.type == "if_statement" and _strip(text(q.child_by_field_name("condition"))) == cond and \
                same(q.child_by_field_name("consequence"), p):
            return True
        p = q
    return False


def _inside_node(node: Node, outer: Node) -> bool:
    return outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte


PAIR = Pair(LookbackToChained, (Rewrite("decoupled_lookback", "decoupled_lookback", decoupled_lookback, prior=2.0),))
