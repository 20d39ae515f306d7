"""warp_atomic_to_thread_atomics: a warp sum whose only consumer is one lane's `atomicAdd` is
dropped; every lane adds its own value:

    sum = warp_sum(sum);                      atomicAdd(y, sum);
    if (lane == 0) atomicAdd(y, sum);    ->

Why it is sound: lane 0's warp sum is the sum of the lanes' values, so adding each lane's value to
the target gives the same total (in another order: the gate's tolerance judges the rounding). The
warp sum must be a device function of this file that adds up a value across the warp (its body
adds, `+=` / `+`, values obtained by warp shuffles or through a shared exchange), assigned back to
the same variable that the guarded `atomicAdd` then publishes, in two consecutive statements; the
guard must be a lane-0 test.

The warp sum may also be written inline just before the guard, as the butterfly loop that the
forward emits (`for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(m, v, o);`, `__shfl_down_sync`
too: lane 0 holds the sum either way). A whole block in the forward's shape
(`{ T v = (c) ? (T)(V) : (T)0; <butterfly>; if (lane 0) atomicAdd(P, v); }`) goes back to
`if (c) atomicAdd(P, V);`, the form it came from.

Forward, in order: `warp_aggregate_atomics` (below), `privatize_atomics`
(privatized_to_global_atomics.py) and `warp_per_row` (shuffle_to_shared.py): per-thread global
atomics are gathered per warp, or per block through a shared copy or a warp all-reduce.

`warp_aggregate_atomics`: a statement `atomicAdd(P, V);` (or the only statement of an `if (c)`
with no else) whose target P is the same for every lane of a warp becomes

    { T ks_v = (c) ? (T)(V) : (T)0;
      for (int ks_o = 16; ks_o > 0; ks_o >>= 1) ks_v += __shfl_xor_sync(0xffffffffu, ks_v, ks_o);
      if ((threadIdx.x & 31) == 0) atomicAdd(P, ks_v); }

Why it is sound: if all 32 lanes of every warp execute the block, each lane contributes its V
where c holds and 0 elsewhere (V and c are evaluated exactly where and as often as before), the
butterfly leaves the warp's sum in every lane, and lane 0 adds it to P, the one address every lane
of the warp targeted; the target receives the same total, in another order (integer addition is
associative; float reassociation is judged by the gate's tolerance). The result of the atomic
must be unused. The preconditions make "all 32 lanes reach it" (which the full-mask shuffle needs)
true:
* P is warp-uniform: built only from parameters never written, constants, `blockIdx` / `blockDim`
  / `gridDim` (one block per warp), locals initialised once from those, and induction variables of
  uniform loops; no memory reads, calls or `threadIdx` (`y`, `&p[c]`, `p + c`);
* T, P's element type, is float, double, int or unsigned (what the shuffle and atomicAdd take);
* every enclosing statement up to the kernel body is a block, an `if` / `else` whose condition is
  warp-uniform in the same sense, or a `for` whose header is (same trip count in every lane), and
  no `while` / `do` / `switch`;
* no `goto` in the kernel; no `return`, `break` or `continue` inside an enclosing loop; a `return`
  before the statement only under warp-uniform conditions (then the whole warp leaves);
* every launch of the kernel in the file has a literal 1-D block whose size is a multiple of 32
  (so warps are full and a lane is `threadIdx.x & 31`); the atomic is in the kernel itself.
A guard that passes at most one lane (`lane == 0`, `tid == 0`) is refused: nothing to aggregate.
Only `atomicAdd`: atomicSub / Max / Min are left alone.

Any other block or warp sum that only feeds one thread's `atomicAdd` (helpers, shared partials,
barriers, a folding warp) is dropped the same way by `reduce_then_publish.py`: the same
optimization, so the same skill.
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name, same
from corpora.code.parse import text, walk
from corpora.code.source import Source
from mining.carriers import atomic_per_block_sites
from mining.operators.base import Context, Edit, Materialization, Operator, Pair, Rewrite, candidate
from mining.operators.nodes import FunctionIndex, block_dims, code, indent_at, kernel_launches, kernels, raw
from mining.operators.reduce_then_publish import publish_edits
from mining.operators.rewrite_util import declaration_of, node_at, structural


_LANE0 = re.compile(r"\(\s*\(?\s*(?:\w*lane\w*|threadIdx\.x\s*(?:&\s*31|%\s*32)|tid\s*(?:&\s*31|%\s*32))\s*\)?\s*==\s*0\s*\)")


def _warp_sums(src: Source) -> set[str]:
    out = set()
    for f in src.funcs:
        if f.is_kernel or len(f.params) != 1:
            continue
        code = src.func_code(f).decode("utf-8", "replace")
        if re.search(r"\+=|\+", code) and re.search(r"__shfl_(xor|down)(_sync)?\s*\(|\bks_xchg_\w+\s*\[", code) and \
                not re.search(r"\b(max|min)\w*\s*\(", code):
            out.add(f.name)
    return out


class WarpAtomicToThreadAtomics(Operator):
    name = "warp_atomic_to_thread_atomics"
    carrier = "atomic_per_block"
    description = "every lane publishes its own value instead of one atomic per warp after a warp sum"

    def edits(self, src: Source):
        sums = _warp_sums(src)
        st = structural(src)
        own = []
        calls = [node_at(st, s.start_byte, s.end_byte, "call_expression") for s in atomic_per_block_sites(src)]
        # the forward's lane-0 test, `(threadIdx.x & 31) == 0`, is no carrier site: its blocks are found here
        calls += [c for c in st.nodes("call_expression") if call_name(c) == "atomicAdd" and
                  not any(d is not None and same(c, d) for d in calls)]
        for call in calls:
            e = self.rewrite(st, call, sums) if call is not None else None
            if e is not None and not any(o.start < e.end and e.start < o.end for o in own):
                own.append(e)
                yield e
        # any block or warp sum feeding one thread's atomic, however it is computed (issue 19)
        for e in publish_edits(src):
            if not any(o.start < e.end and e.start < o.end for o in own):
                yield e

    def rewrite(self, src: Source, call, sums) -> Optional[Edit]:
        stmt = call.parent  # expression_statement
        guard = stmt.parent if stmt is not None else None
        if guard is None or guard.type != "if_statement" or guard.child_by_field_name("alternative") is not None:
            return None
        if not _LANE0.fullmatch(" ".join(text(guard.child_by_field_name("condition")).split())):
            return None
        args = call.child_by_field_name("arguments").named_children
        if len(args) != 2 or args[1].type != "identifier":
            return None
        v = text(args[1])
        parent = guard.parent
        if parent is None or parent.type != "compound_statement":
            return None
        sibs = list(parent.named_children)
        k = next(i for i, c in enumerate(sibs) if same(c, guard))
        if k == 0:
            return None
        prev = sibs[k - 1]
        bf = _BUTTERFLY.fullmatch(" ".join(text(prev).split()))
        if bf is not None and bf.group(2) == v and bf.group(3) == v:
            back = _undo_aggregate(sibs, parent, v, call) if k == 2 else None
            return back if back is not None else Edit(prev.start_byte, guard.end_byte, text(stmt))
        m = re.fullmatch(r"%s\s*=\s*(\w+)\s*\(\s*%s\s*\)\s*;" % (re.escape(v), re.escape(v)),
                         " ".join(text(prev).split()))
        if m is None or m.group(1) not in sums:
            return None
        return Edit(prev.start_byte, guard.end_byte, text(stmt))


# the inline warp sum: a butterfly (or tree) over offsets 16, 8, 4, 2, 1 adding shuffled copies of v
_BUTTERFLY = re.compile(r"for\s*\(\s*(?:unsigned\s+)?int\s+(\w+)\s*=\s*16\s*;\s*\1\s*(?:>\s*0|>=\s*1)\s*;\s*"
                        r"\1\s*(?:>>=\s*1|/=\s*2)\s*\)\s*\{?\s*(\w+)\s*\+=\s*__shfl_(?:xor|down)_sync\s*\(\s*"
                        r"[^,()]+,\s*(\w+)\s*,\s*\1\s*(?:,\s*32\s*)?\)\s*;\s*\}?")


def _undo_aggregate(sibs: list[Node], block: Node, v: str, call: Node) -> Optional[Edit]:
    """The forward's whole block `{ T v = (c) ? (T)(V) : (T)0; <butterfly>; if (lane 0) atomicAdd(P, v); }`
    -> `if (c) atomicAdd(P, V);` (or `atomicAdd(P, V);` for `T v = (T)(V);`)."""
    if len(sibs) != 3 or sibs[0].type != "declaration" or block.parent is None or \
            block.parent.type in ("function_definition", "lambda_expression"):
        return None
    inits = [c for c in sibs[0].named_children if c.type == "init_declarator"]
    if len(inits) != 1 or text(inits[0].child_by_field_name("declarator")) != v:
        return None
    ty = text(sibs[0].child_by_field_name("type"))
    value = inits[0].child_by_field_name("value")
    cond = None
    if value.type == "conditional_expression":
        cond, value, zero = (value.child_by_field_name(f) for f in ("condition", "consequence", "alternative"))
        if cond.type != "parenthesized_expression" or \
                " ".join(text(zero).split()) not in (f"({ty})0", f"({ty}) 0"):
            return None
    if value.type != "cast_expression" or " ".join(text(value.child_by_field_name("type")).split()) != ty:
        return None
    inner = value.child_by_field_name("value")
    if inner.type != "parenthesized_expression":
        return None
    target = call.child_by_field_name("arguments").named_children[0]
    add = f"atomicAdd({text(target)}, {text(inner)[1:-1]});"
    return Edit(block.start_byte, block.end_byte, f"if {text(cond)} {add}" if cond is not None else add)


# --------------------------------------------------------------------------- forward half
_WARP_TYPES = {"float", "double", "int", "unsigned", "unsigned int"}
_WARP_UNIFORM = {"blockIdx", "blockDim", "gridDim", "warpSize"}
_ONE_LANE = re.compile(r"\(\s*\(?\s*([\w.]+)\s*(?:[&%]\s*\d+\s*)?\)?\s*==\s*0\s*\)")
_LOOPS = ("for_statement", "while_statement", "do_statement")


class _Uniform:
    """Which expressions of one kernel have the same value in every lane of a warp (conservative)."""

    def __init__(self, src: Source, fn: Node):
        self.idx = FunctionIndex(src, fn)
        self.memo: dict[int, bool] = {}

    def expr(self, node: Optional[Node]) -> bool:
        if node is None:
            return True
        for n in walk(node):
            if n.type in ("call_expression", "subscript_expression", "assignment_expression", "update_expression",
                          "lambda_expression"):
                return False
            if n.type == "pointer_expression" and text(n).lstrip().startswith("*"):
                return False  # a memory read
            if n.type == "field_expression":
                base = n.child_by_field_name("argument")
                if base is None or base.type != "identifier" or text(base) not in _WARP_UNIFORM:
                    return False
            if n.type == "identifier" and not self.name(n):
                return False
        return True

    def name(self, ident: Node) -> bool:
        nm = text(ident)
        if nm in _WARP_UNIFORM:
            return True
        if nm == "threadIdx":
            return False
        p = ident.parent
        if p is not None and p.type == "field_expression" and same(p.child_by_field_name("field"), ident):
            return True  # `.x` of blockIdx.x: its base decides
        v = self.idx.visible(nm, ident.start_byte)
        if v is None:
            return True  # a macro, template parameter or enumerator: one value for the whole launch
        key = v.declarator.start_byte
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = False  # a cycle is not uniform
        if v.kind == "param":
            ok = not v.assigned and v.shape != "array"
        elif v.kind == "for":
            loop = self.idx.loop_of(v)
            ok = loop is not None and v.value is not None and self.expr(v.value) and self.header(loop, v.name)
        else:
            ok = not v.assigned and v.value is not None and v.shape == "scalar" and self.expr(v.value)
        self.memo[key] = ok
        return ok

    def header(self, loop: Node, var: str) -> bool:
        """The loop's condition and update are uniform (its own variable counted as uniform)."""
        cond, upd = loop.child_by_field_name("condition"), loop.child_by_field_name("update")
        if cond is None or upd is None:
            return False
        u = re.sub(r"\s+", "", text(upd))
        if not re.fullmatch(r"(?:\+\+|--)%s|%s(?:\+\+|--)|%s(?:\+=|-=|\*=|>>=|<<=|/=).+" % ((re.escape(var),) * 3), u):
            return False
        for part in (cond, upd):
            if any(n.type in ("call_expression", "subscript_expression", "pointer_expression", "lambda_expression") or
                   (n.type == "assignment_expression" and part is cond) for n in walk(part)):
                return False
            if not all(self.name(n) for n in walk(part) if n.type == "identifier" and text(n) != var):
                return False
        return True


def _target_uniform(u: _Uniform, target: Node) -> bool:
    t = target
    while t.type == "parenthesized_expression" and t.named_children:
        t = t.named_children[0]
    if t.type == "pointer_expression" and text(t).lstrip().startswith("&"):
        sub = t.child_by_field_name("argument")
        while sub is not None and sub.type == "parenthesized_expression" and sub.named_children:
            sub = sub.named_children[0]
        if sub is None or sub.type != "subscript_expression":
            return False
        base, ind = sub.child_by_field_name("argument"), sub.child_by_field_name("indices")
        return base is not None and base.type == "identifier" and u.expr(base) and ind is not None and \
            all(u.expr(c) for c in ind.named_children)
    return u.expr(t)


def _element_type(src: Source, target: Node) -> Optional[str]:
    """float / int / ... when the target is `p`, `p + c` or `&p[c]` for a pointer or array p of that type."""
    names = [n for n in walk(target) if n.type == "identifier"]
    bases = [n for n in names if declaration_of(src, text(n), n) is not None and
             declaration_of(src, text(n), n)[1] in ("pointer", "array")]
    if len(bases) != 1:
        return None
    ty, kind, dims = declaration_of(src, text(bases[0]), bases[0])
    if dims > 1:
        return None
    ty = " ".join(w for w in ty.split() if w not in ("const", "volatile", "__restrict__", "__restrict"))
    return ty if ty in _WARP_TYPES else None


def _lanes_all_reach(src: Source, u: _Uniform, body: Node, top: Node) -> bool:
    """Every lane of a warp that starts the kernel reaches `top` (see the module docstring)."""
    loops = []
    node = top
    while not same(node, body):
        p = node.parent
        if p is None:
            return False
        if p.type == "if_statement":
            if not u.expr(p.child_by_field_name("condition")):
                return False
        elif p.type == "for_statement":
            init = p.child_by_field_name("initializer")
            decl = [c for c in init.named_children if c.type == "init_declarator"] \
                if init is not None and init.type == "declaration" else []
            var = decl[0].child_by_field_name("declarator") if len(decl) == 1 else None
            if var is None or var.type != "identifier" or not u.expr(decl[0].child_by_field_name("value")) or \
                    not u.header(p, text(var)):
                return False
            loops.append(p)
        elif p.type not in ("compound_statement", "else_clause"):
            return False
        node = p
    for n in walk(body):
        if n.type == "goto_statement":
            return False
        if n.type in ("return_statement", "break_statement", "continue_statement") and \
                any(lp.start_byte <= n.start_byte < lp.end_byte for lp in loops):
            return False
        if n.type == "return_statement" and n.start_byte < top.start_byte:
            q = n.parent
            while q is not None and not same(q, body):
                if q.type in _LOOPS or q.type == "switch_statement" or \
                        (q.type == "if_statement" and not u.expr(q.child_by_field_name("condition"))):
                    return False
                q = q.parent
    return True


def _fresh(src: Source, base: str) -> str:
    used = set(re.findall(rb"\b\w+\b", src.code))
    name, i = base, 1
    while name.encode() in used:
        name, i = f"{base}{i}", i + 1
    return name


def _aggregate(src: Source, u: _Uniform, body: Node, call: Node) -> Optional[tuple[Edit, str]]:
    stmt = call.parent
    if stmt is None or stmt.type != "expression_statement":
        return None  # the atomic's old value is used: no sum to aggregate
    args = [a for a in call.child_by_field_name("arguments").named_children if a.type != "comment"]
    if len(args) != 2:
        return None
    top, cond = stmt, None
    p = stmt.parent
    if p is not None and p.type == "compound_statement" and len([c for c in p.named_children if c.type != "comment"]) == 1 \
            and p.parent is not None and p.parent.type == "if_statement" and same(p.parent.child_by_field_name("consequence"), p):
        p = p.parent
    if p is not None and p.type == "if_statement" and not same(p.child_by_field_name("condition"), stmt):
        if p.child_by_field_name("alternative") is not None:
            return None
        c = p.child_by_field_name("condition")
        if c.type != "condition_clause" or c.child_by_field_name("initializer") is not None or \
                any(n.type == "declaration" for n in c.named_children):
            return None
        m = _ONE_LANE.fullmatch(code(src, c))
        if m and (m.group(1) == "threadIdx.x" or not u.expr(c)):
            return None  # at most one lane passes: already aggregated
        top, cond = p, "(" + raw(src, c.named_children[0]).strip() + ")"
    if not _target_uniform(u, args[0]) or not _lanes_all_reach(src, u, body, top):
        return None
    ty = _element_type(src, args[0])
    if ty is None:
        return None
    v, o = _fresh(src, "ks_v"), _fresh(src, "ks_o")
    ind = indent_at(src, top.start_byte)
    val = f"({ty})({raw(src, args[1]).strip()})"
    lines = [f"{ty} {v} = {cond} ? {val} : ({ty})0;" if cond else f"{ty} {v} = {val};",
             f"for (int {o} = 16; {o} > 0; {o} >>= 1) {v} += __shfl_xor_sync(0xffffffffu, {v}, {o});",
             f"if ((threadIdx.x & 31) == 0) atomicAdd({raw(src, args[0]).strip()}, {v});"]
    rep = "{\n" + "".join(f"{ind}    {ln}\n" for ln in lines) + ind + "}"
    return Edit(top.start_byte, top.end_byte, rep), code(src, top)


def warp_aggregate_atomics(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    found: list[tuple[str, Edit, str]] = []
    for k in kernels(src):
        las = kernel_launches(src, k.name)
        dims = [block_dims(src, la) for la in las]
        if not las or any(d is None or d[1:] != (1, 1) or d[0] <= 0 or d[0] % 32 for d in dims):
            continue  # unknown, 2-D or partial-warp blocks: `threadIdx.x & 31` would not be the lane
        u = _Uniform(src, k.node)
        for call in walk(k.body):
            if call.type == "call_expression" and call_name(call) == "atomicAdd":
                r = _aggregate(src, u, k.body, call)
                if r is not None:
                    found.append((k.name, r[0], r[1]))
    out = []
    what = "per-thread atomicAdd into one address -> a warp sum (__shfl_xor_sync) and one atomic per warp"
    if len(found) > 1:
        out.append(candidate(src, [e for _, e, _ in found], "warp_aggregate_atomics",
                             f"{what}: every site ({len(found)})", excerpt=found[0][2]))
    for kname, e, excerpt in found:
        out.append(candidate(src, [e], "warp_aggregate_atomics", f"{what} in {kname}", excerpt=excerpt))
    return out


PAIR = Pair(WarpAtomicToThreadAtomics, (Rewrite("warp_aggregate_atomics", "atomic_per_block", warp_aggregate_atomics,
                                                prior=8.0),),
            inverted_by=("warp_aggregate_atomics", "privatize_atomics", "warp_per_row"))
