"""warp_per_row_to_thread: a kernel in which a warp (or a group of W <= 32 lanes) owns a row - its
lanes stride the row's columns by W, combine their partials with group reductions and one lane
writes the result - runs with one thread per row (issue 19: warp-per-row -> thread per row):

    const int warp_size = 32;                          const int warp_size = 1;
    int lane = threadIdx.x % warp_size;                int lane = 0;
    int row = blockIdx.x * blockDim.y + threadIdx.y;   int row = blockIdx.x * blockDim.y + threadIdx.y;
    for (int i = 0; i < N / warp_size; i++)     ->     for (int i = 0; i < N / warp_size; i++)
        s += A[row * N + i * warp_size + lane];            s += A[row * N + i * warp_size + lane];
    s = warpReduceSum<warp_size>(s);                   s = (s);
    if (lane == 0) y[row] = s;                         if (lane == 0) y[row] = s;
    ...
    dim3 block(32, 4);                                 dim3 block(1, 4);

Detection by meaning. The group width W is read from the lane: a local defined as the thread index
`% W`, `& (W - 1)`, or the thread index itself where every launch's block has W <= 32 threads in x
(a 2-D block: rows from `threadIdx.y`; or a 1-D block of one group, its row from `blockIdx`); a
1-D block of several groups takes its row from `threadIdx.x / W` (or `>> log2 W`). W is a
literal, a macro or constant, a constant of the kernel, or a non-type template parameter of the
kernel given at the launch. Then, in the kernel:
- every use of the thread index goes through the lane (or the group index `threadIdx.x / W`);
- the lane and what is computed from it reach neither a shared-memory index nor a shuffle's
  lane or offset arguments (no exchange of data through lanes), nor a sum with the block index (a
  lane that is a coordinate of a 2-D tile of the grid is not a place in a row), and a global store
  that depends on the lane sits in a loop over the row's columns (lanes do not write outputs of
  their own);
- the lanes sweep the row: a loop whose index is `i * W + lane`, a loop started at the lane and
  striding by W, or a group reduction;
- every exchange between lanes is a group reduction: a shuffle down / xor of a value combined
  with that same value (`v += shfl_xor(v, o)`, `v = max(v, shfl_down(v, o))`), inline or in a
  one-value helper (whose shuffles, or the shared-memory exchange `shuffle_to_shared` leaves in
  their place, have that shape); broadcasts (`__shfl_sync`), scans (`__shfl_up_sync`, reads of a
  lower lane), votes and block barriers inside helpers are not reductions, and such kernels are not
  sites;
- a loop over the row's columns whose index is `i * W + lane` counts to a bound that either
  follows W (`N / W`, carried with it) or is a template parameter of the kernel (OneFlow's
  `cols_per_thread`), which is then multiplied by W at the launch; a lane-started loop strides by W
  or `blockDim.x`.

The rewrite: W becomes 1 (the kernel's constant, its uses of a macro or global constant, literal W
in index arithmetic, or the template argument at the launch, with the per-lane work constants
multiplied by the old W), the lane becomes 0, each group reduction of one lane returns its input
(a helper call becomes its argument, an inline shuffle step and the loop or `if` around it are
deleted, as are the steps, the array and the slot of a shared exchange array `shuffle_to_shared`
made of them; a `__syncwarp` goes), and the launch block's x extent W becomes 1 ((32, R) -> (1, R); a
1-D block of B threads -> B / W): every block keeps its rows, the grid is unchanged.

Why it is sound: with one lane per group, the lane is 0 and the group width is 1, so the column
index `i * W + lane` becomes `i` and a loop whose trip count was the row length over W (or whose
per-lane count is multiplied by W) visits every column of the row in that one thread; lane-started
loops start at 0 and step by 1. A reduction over a group of one thread returns its one input, so
dropping the shuffle steps or the helper call is exact. The row of a group comes from
`threadIdx.y` / `blockIdx` (or `threadIdx.x / W`, which with W = 1 and the block divided by W is
the same group number), and neither the grid nor the rows per block change. `lane == 0` guards
now hold for the one thread that owns the row. The gate decides the rest (a constant W that also
meant something else fails it, and the walk moves on).

`forward` is the inverse the optimizer applies: a kernel launched with blocks of (1, R) threads,
each thread owning a row (picked by `threadIdx.y` and `blockIdx`), gets 32 lanes per row: its
serial loops over the row become lane-strided (`j = start + lane; j += 32`), each accumulator they
carry is all-reduced with `__shfl_xor_sync` after its loop (every lane then holds the row's value,
so the code after the loop is unchanged) and the block becomes (32, R). Sum accumulators must
start at zero. `warp_per_row` (shuffle_to_shared.py: one row per thread of a 1-D grid -> one per
warp) is the second inverse.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name
from corpora.code.parse import text, walk
from corpora.code.source import Source
from mining.operators.base import Edit, Operator, Pair, Rewrite
from mining.operators.nodes import Kernel, Launch, idents, int_value, kernel_launches, kernels, strip_parens
from mining.operators.rewrite_util import splice_range, structural

WARP = 32
_TID = re.compile(r"threadIdx\s*\.\s*x")
_REDUCE_SHFL = re.compile(r"^(__shfl_xor_sync|__shfl_down_sync|__shfl_xor|__shfl_down|\w+\s*\.\s*shfl_xor|"
                          r"\w+\s*\.\s*shfl_down)$")
_EXCHANGE = re.compile(r"\b(__shfl\w*|__syncwarp|__ballot\w*|__any_sync|__all_sync|__any|__all|__match\w*|"
                       r"__activemask|__reduce_\w+_sync|\w+\s*\.\s*shfl\w*)\s*\(")
_COMBINE_OPS = ("+=", "*=", "|=", "&=", "^=", "=")


# --------------------------------------------------------------------------- group reductions
def _callee(call: Node) -> str:
    fn = call.child_by_field_name("function")
    while fn is not None and fn.type in ("qualified_identifier", "template_function"):
        fn = fn.child_by_field_name("name")
    return " ".join(text(fn).split()) if fn is not None else ""


def _combined_into(node: Node, stop: Node) -> Optional[Node]:
    """The assignment `v op= ...node...` / `v = f(v, ...node...)` the exchanged value `node` is
    combined into (climbing through calls, arithmetic and parentheses), else None."""
    p = node.parent
    while p is not None and p.type in ("argument_list", "call_expression", "binary_expression",
                                       "parenthesized_expression", "conditional_expression", "cast_expression"):
        if p.start_byte == stop.start_byte and p.end_byte == stop.end_byte:
            return None
        p = p.parent
    if p is None or p.type != "assignment_expression":
        return None
    lhs, op, rhs = p.child_by_field_name("left"), text(p.children[1]), p.child_by_field_name("right")
    if lhs is None or lhs.type != "identifier" or op not in _COMBINE_OPS:
        return None
    if op == "=":
        # the value itself is an operand next to the exchanged one: v = max(v, other lane's v)
        others = [n for n in walk(rhs) if n.type == "identifier" and text(n) == text(lhs)
                  and not (node.start_byte <= n.start_byte < node.end_byte)]
        if not others:
            return None
    return p


def _reduction_step(src: Source, node: Node, fn: Node, shared: set[str]) -> Optional[Node]:
    """`node` (a shuffle call or a read of an exchange array) is one step of a group reduction:
    the assignment it is combined into, else None."""
    a = _combined_into(node, fn)
    if a is None:
        return None
    v = text(a.child_by_field_name("left"))
    if node.type == "call_expression":
        args = [c for c in node.child_by_field_name("arguments").named_children if c.type != "comment"]
        value = args[0] if "." in _callee(node) else (args[1] if len(args) >= 2 else None)
        return a if value is not None and text(value).strip() == v else None
    idx = node.child_by_field_name("indices") or node.child_by_field_name("index")
    if idx is None or re.search(r"-", text(idx)):
        return None  # reading a lower lane: a scan, not a reduction
    return a


def _exchange_nodes(fn: Node, shared: set[str]) -> tuple[list[Node], list[Node], list[Node]]:
    """(reduction-direction shuffles, other exchange calls, reads of exchange arrays) in `fn`."""
    shfl, other, reads = [], [], []
    for n in walk(fn):
        if n.type == "call_expression":
            name = _callee(n)
            if _REDUCE_SHFL.match(name):
                shfl.append(n)
            elif _EXCHANGE.match(name + "("):
                other.append(n)
        elif n.type == "subscript_expression":
            base = n.child_by_field_name("argument")
            written = n.parent is not None and n.parent.type == "assignment_expression" and \
                n.parent.child_by_field_name("left") == n
            if base is not None and base.type == "identifier" and text(base) in shared and not written:
                reads.append(n)
    return shfl, other, reads


def _local_shared(fn: Node) -> set[str]:
    out = set()
    for d in walk(fn):
        if d.type == "declaration" and re.search(r"\b__shared__\b", text(d)):
            for n in walk(d):
                if n.type == "array_declarator":
                    nm = n.child_by_field_name("declarator")
                    if nm is not None and nm.type == "identifier":
                        out.add(text(nm))
    return out


def _helpers(src: Source) -> tuple[set[str], set[str]]:
    """(group reductions, functions that exchange data between threads): a group reduction is a
    device function of one value whose every exchange is a reduction step on that value."""
    defs: dict[str, list[tuple]] = {}
    for f in src.funcs:
        fn = src.func_node(f)
        if f.is_kernel or not f.name or fn is None:
            continue
        defs.setdefault(f.name, []).append((f, fn))
    exchanging, reductions = set(), set()
    for _ in range(3):
        for name, ds in defs.items():
            for f, fn in ds:
                body = fn.child_by_field_name("body")
                if body is None:
                    continue
                code = text(body)
                calls = {call_name(c).split("<")[0].split("::")[-1].strip() for c in walk(body)
                         if c.type == "call_expression"}
                shared = _local_shared(body)
                if _EXCHANGE.search(code) or shared or calls & exchanging:
                    exchanging.add(name)
                if len(f.params) != 1 or f.params[0].is_pointer or re.search(r"\b__syncthreads\b|\bsync\s*\(", code):
                    continue
                shfl, other, reads = _exchange_nodes(body, shared)
                other = [o for o in other if not re.match(r"__syncwarp", _callee(o))]
                if other or not (shfl or reads or calls & reductions):
                    continue
                if calls & (exchanging - reductions - {name}):
                    continue
                if all(_reduction_step(src, n, body, shared) is not None for n in shfl + reads) and \
                        _shared_writes_ok(body, shared):
                    reductions.add(name)
    return reductions, exchanging


def _shared_writes_ok(body: Node, shared: set[str]) -> bool:
    """An exchange array is only written with the value being reduced: `xchg[slot] = v;`."""
    for n in walk(body):
        if n.type == "assignment_expression":
            lhs = n.child_by_field_name("left")
            if lhs is not None and lhs.type == "subscript_expression":
                base = lhs.child_by_field_name("argument")
                if base is not None and text(base) in shared and \
                        (text(n.children[1]) != "=" or n.child_by_field_name("right").type != "identifier"):
                    return False
    return True


# --------------------------------------------------------------------------- the group width
@dataclass
class Width:
    value: Optional[int]  # W when known
    names: set[str] = field(default_factory=set)  # macro / global constant names meaning W
    local: Optional[Node] = None  # the kernel's own `const int W = 32;` initializer
    tparam: Optional[int] = None  # index of the kernel's template parameter that is W
    literal: bool = False  # W written as a literal in the lane


def _strip(e: str) -> str:
    e = re.sub(r"\((?:const\s+)?(?:unsigned\s+)?(?:int|long|size_t|int64_t|uint32_t|unsigned)\)", "", e)
    e = re.sub(r"static_cast<[^<>]+>", "", e)
    return strip_parens(" ".join(e.split()))


def _template_params(src: Source, k: Kernel) -> list[str]:
    t = k.node.parent
    if t is None or t.type != "template_declaration":
        return []
    out = []
    for p in t.child_by_field_name("parameters").named_children:
        ids = [c for c in walk(p) if c.type in ("identifier", "type_identifier")]
        decl = p.child_by_field_name("declarator")
        if decl is not None:
            ids = [c for c in walk(decl) if c.type == "identifier"] or ids
        out.append(text(ids[0]) if ids and p.type != "template_template_parameter_declaration" else
                   (text(ids[-1]) if ids else ""))
    return out


def _local_consts(body: Node) -> dict[str, Node]:
    """`const int NAME = <literal or expression>;` declared in the kernel: name -> value node."""
    out = {}
    for d in walk(body):
        if d.type != "declaration" or not re.search(r"\b(const|constexpr)\b", text(d)):
            continue
        for c in d.named_children:
            if c.type == "init_declarator" and c.child_by_field_name("declarator").type == "identifier" and \
                    c.child_by_field_name("value") is not None:
                out[text(c.child_by_field_name("declarator"))] = c.child_by_field_name("value")
    return out


def _global_value(src: Source, name: str) -> Optional[int]:
    v = int_value(src, name)
    if v is not None:
        return v
    m = re.search(rb"\b(?:constexpr|const)\s+(?:static\s+)?(?:unsigned\s+)?(?:int|size_t|int32_t|unsigned)\s+"
                  rb"%s\s*=\s*([^;,]+)[;,]" % re.escape(name.encode()), src.code)
    return int_value(src, m.group(1).decode()) if m else None


def _width_of(src: Source, k: Kernel, expr: str, consts: dict[str, Node], tparams: list[str]) -> Optional[Width]:
    e = _strip(expr)
    if re.fullmatch(r"\d+[uU]?", e):
        return Width(int(e.rstrip("uU")), literal=True)
    if not re.fullmatch(r"[A-Za-z_]\w*", e):
        return None
    if e in consts:
        return Width(int_value(src, text(consts[e])) or _global_value(src, text(consts[e])),
                     local=consts[e])
    if e in tparams:
        return Width(None, tparam=tparams.index(e), names={e})
    v = _global_value(src, e)
    return Width(v, names={e}) if v is not None else None


@dataclass
class Lane:
    decls: list[Node]  # init_declarators of lane locals
    names: set[str]
    width: Width
    direct: bool  # the thread index itself is the lane (a block of W threads in x)


def _aliases(body: Node) -> dict[str, Node]:
    """Locals initialised to the thread index: `int tx = threadIdx.x;` -> {tx: init_declarator}."""
    out = {}
    for d in walk(body):
        if d.type != "declaration" or (d.parent is not None and d.parent.type == "for_statement"):
            continue
        for c in d.named_children:
            if c.type == "init_declarator" and c.child_by_field_name("value") is not None and \
                    _TID.fullmatch(_strip(text(c.child_by_field_name("value")))) and \
                    c.child_by_field_name("declarator").type == "identifier":
                out[text(c.child_by_field_name("declarator"))] = c
    return out


def _is_thread(e: str, aliases: dict[str, Node]) -> bool:
    e = _strip(e)
    return bool(_TID.fullmatch(e)) or e in aliases


# --------------------------------------------------------------------------- the operator
class WarpPerRowToThread(Operator):
    name = "warp_per_row_to_thread"
    carrier = "warp_per_row"
    description = "run a warp-per-row kernel with one thread per row: the group width becomes 1, its reductions identities"

    def edits(self, source: Source):
        src = structural(source)
        reductions, exchanging = _helpers(src)
        for k in kernels(src):
            e = _Rewrite(src, k, reductions, exchanging).edit()
            if e is not None:
                yield e


class _Refuse(Exception):
    pass


class _Rewrite:
    def __init__(self, src: Source, k: Kernel, reductions: set[str], exchanging: set[str]):
        self.src, self.k, self.body = src, k, k.body
        self.reductions, self.exchanging = reductions, exchanging
        self.subs: list[Edit] = []
        self.evidence = False  # a group reduction or a sweep of the row by the lanes was seen

    def edit(self) -> Optional[Edit]:
        try:
            return self._edit()
        except _Refuse:
            return None

    def _edit(self) -> Optional[Edit]:
        src, body = self.src, self.body
        self.dead: list[tuple[int, int]] = []
        self.xchg: set[str] = set()
        self._exchange_arrays()
        code = " ".join(text(n) for n in self._nodes(body, top=True))
        if not _TID.search(code) or re.search(r"\b(threadIdx|blockDim)\s*\.\s*z\b", code):
            return None
        launches = kernel_launches(src, self.k.name)
        if not launches or any(la.call.start_byte < body.end_byte and la.call.end_byte > self.k.node.start_byte
                               for la in launches):
            return None
        self.two_d = bool(re.search(r"\bthreadIdx\s*\.\s*y\b", code))
        self.aliases = _aliases(body)
        self.consts = _local_consts(body)
        self.tparams = _template_params(src, self.k)
        lane = self._lane(launches)
        if lane is None:
            return None
        self.lane = lane
        w = lane.width
        # launches first: they say whether the block's x extent is the group (2-D) or holds groups (1-D)
        for la in launches:
            self._launch(la)
        tainted = self._tainted()
        self._thread_uses(tainted)
        self._stores(tainted)
        self._exchanges()
        self._column_loops(tainted)
        # the lane becomes 0 (and a copy of the thread index that only defined it, in a 2-D block)
        decls = list(lane.decls)
        if self.two_d and not lane.direct:
            decls += list(self.aliases.values())
        for d in decls:
            v = d.child_by_field_name("value")
            self.subs.append(Edit(v.start_byte, v.end_byte, "0"))
        # W becomes 1 in the kernel
        if w.local is not None:
            self.subs.append(Edit(w.local.start_byte, w.local.end_byte, "1"))
        for n in walk(body):
            if n.type == "identifier" and text(n) in w.names and w.tparam is None and not self._declares(n):
                self.subs.append(Edit(n.start_byte, n.end_byte, "1"))
            elif n.type == "number_literal" and w.value is not None and self._width_literal(n, w.value):
                self.subs.append(Edit(n.start_byte, n.end_byte, "1" if _int(n) == w.value else "0"))
        if not self.evidence:
            return None  # no reduction across the group and no sweep of a row by its lanes
        subs = _outermost(self.subs)
        if not subs:
            return None
        lo, hi = min(s.start for s in subs), max(s.end for s in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))

    # ------------------------------------------------------------------ exchange arrays
    def _nodes(self, root: Node, top: bool = False):
        """The nodes of `root` outside the code this rewrite deletes (with `top`: the top-level
        statements only, for their text)."""
        if top:
            for c in root.named_children:
                if not any(a <= c.start_byte and c.end_byte <= b for a, b in self.dead):
                    yield c
            return
        stack = [root]
        while stack:
            n = stack.pop()
            if any(a <= n.start_byte and n.end_byte <= b for a, b in self.dead):
                continue
            yield n
            stack.extend(reversed(n.children))

    def _exchange_arrays(self) -> None:
        """Shared arrays of the kernel used only to reduce a value across the group (what
        `shuffle_to_shared` leaves of inline shuffles: `X[slot] = v; __syncwarp(); v += X[slot ^ o];`),
        with the locals that only index them: their steps, declarations and slot locals go."""
        body = self.body
        for name in _local_shared(body):
            uses = [n for n in walk(body) if n.type == "identifier" and text(n) == name]
            steps, slots, ok = [], set(), True
            for u in uses:
                sub = u.parent
                if sub is not None and sub.type in ("array_declarator", "init_declarator"):
                    continue
                if sub is None or sub.type != "subscript_expression":
                    ok = False
                    break
                idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
                slots |= {text(i) for i in walk(idx) if i.type == "identifier"}
                parent = sub.parent
                if parent is not None and parent.type == "assignment_expression" and \
                        parent.child_by_field_name("left") == sub:
                    if text(parent.children[1]) != "=" or parent.child_by_field_name("right").type != "identifier":
                        ok = False
                    continue
                a = _reduction_step(self.src, sub, body, {name})
                if a is None:
                    ok = False
                    break
                steps.append(a)
            if not ok or not steps:
                continue
            slot_decls = []
            for d in walk(body):
                if d.type == "declaration" and any(
                        c.type == "init_declarator" and text(c.child_by_field_name("declarator")) in slots
                        for c in d.named_children):
                    names = {text(c.child_by_field_name("declarator")) for c in d.named_children
                             if c.type == "init_declarator"}
                    used = [n for n in walk(body) if n.type == "identifier" and text(n) in names and
                            not (d.start_byte <= n.start_byte < d.end_byte)]
                    if all(any(x.type == "subscript_expression" and
                               text(x.child_by_field_name("argument")) == name for x in _ancestors(n, body))
                           for n in used):
                        slot_decls.append(d)
            self.xchg.add(name)
            for a in steps:
                e = self._delete(a.parent)
                self.subs.append(e)
                self.dead.append((e.start, e.end))
            for d in [n for n in walk(body) if n.type == "declaration" and
                      re.search(r"\b__shared__\b", text(n)) and name in {text(i) for i in walk(n)
                                                                        if i.type == "identifier"}] + slot_decls:
                e = self._delete(d)
                self.subs.append(e)
                self.dead.append((e.start, e.end))
            self.evidence = True

    # ------------------------------------------------------------------ the lane and W
    def _lane(self, launches: list[Launch]) -> Optional[Lane]:
        decls, width = [], None
        for d in walk(self.body):
            if d.type != "init_declarator" or d.child_by_field_name("value") is None or \
                    d.child_by_field_name("declarator").type != "identifier":
                continue
            if d.parent is not None and d.parent.parent is not None and d.parent.parent.type == "for_statement":
                continue
            v = d.child_by_field_name("value")
            if v.type == "parenthesized_expression":
                v = v.named_children[0] if v.named_children else v
            if v.type != "binary_expression":
                continue
            op = text(v.child_by_field_name("operator"))
            a, b = v.child_by_field_name("left"), v.child_by_field_name("right")
            if not _is_thread(text(a), self.aliases):
                continue
            w = None
            if op == "%":
                w = _width_of(self.src, self.k, text(b), self.consts, self.tparams)
            elif op == "&":
                m = re.fullmatch(r"\(?\s*(\w+)\s*-\s*1\s*\)?", _strip(text(b)))
                if m:
                    w = _width_of(self.src, self.k, m.group(1), self.consts, self.tparams)
                else:
                    mask = int_value(self.src, text(b))
                    if mask is not None and mask + 1 in (2, 4, 8, 16, 32):
                        w = Width(mask + 1, literal=True)
            if w is None or (w.value is not None and not 2 <= w.value <= WARP):
                continue
            if width is not None and (width.value, width.names, width.tparam) != (w.value, w.names, w.tparam):
                return None  # two different group widths
            width = w
            decls.append(d)
        if width is not None:
            return Lane(decls, {text(d.child_by_field_name("declarator")) for d in decls}, width, direct=False)
        # the thread index itself is the lane: a block whose x extent is the group, W <= 32 (a 2-D
        # block of rows, or a 1-D block of one warp whose row is its block)
        w = None
        for la in launches:
            x = self._block_x(la)
            if x is None:
                return None
            expr, value = x
            targs = self._template_args(la)
            ww = None
            if targs is not None:
                for i, a in enumerate(targs):
                    if " ".join(a.split()) == " ".join(expr.split()) and i < len(self.tparams):
                        ww = Width(value, tparam=i, names={self.tparams[i]})
            if ww is None:
                # a macro naming the block's x extent means W in the kernel too
                ww = Width(value, literal=value is not None,
                           names={expr} if re.fullmatch(r"[A-Za-z_]\w*", expr) and expr in self.src.defines else set())
            if ww.value is None and ww.tparam is None or ww.value is not None and not 2 <= ww.value <= WARP:
                return None
            if w is not None and (w.value, w.tparam) != (ww.value, ww.tparam):
                return None
            w = ww
        decls = [d for d in self.aliases.values()]
        return Lane(decls, set(self.aliases), w, direct=True)

    def _declares(self, n: Node) -> bool:
        p = n.parent
        return p is not None and p.type == "init_declarator" and p.child_by_field_name("declarator") == n

    def _width_literal(self, n: Node, w: int) -> bool:
        """A literal W (or W - 1) in the kernel's index arithmetic: `i * 32`, `n / 32`, `% 32`,
        `j += 32`, `& 31`, `(n + 31) / 32`; not an array extent, a shuffle argument or a constant of
        something else."""
        v = _int(n)
        if v not in (w, w - 1, w.bit_length() - 1) or not self.lane.width.literal:
            return False
        p = n.parent
        while p is not None and p.type == "parenthesized_expression":
            p = p.parent
        if p is None or any(a.type in ("array_declarator", "call_expression") for a in _ancestors(n, self.body)):
            return False
        if v == w.bit_length() - 1 and p.type == "binary_expression" and \
                text(p.child_by_field_name("operator")) == ">>" and p.child_by_field_name("right") == n:
            return _is_thread(text(p.child_by_field_name("left")), self.aliases)  # the group number
        if v == w:
            if p.type == "binary_expression" and text(p.child_by_field_name("operator")) in ("*", "/", "%"):
                return True
            return p.type == "assignment_expression" and text(p.children[1]) == "+="
        if p.type == "binary_expression" and text(p.child_by_field_name("operator")) == "&":
            return _is_thread(text(p.child_by_field_name("left")), self.aliases)
        if p.type == "binary_expression" and text(p.child_by_field_name("operator")) == "+":
            q = p.parent
            while q is not None and q.type == "parenthesized_expression":
                q = q.parent
            return q is not None and q.type == "binary_expression" and \
                text(q.child_by_field_name("operator")) == "/" and _int(q.child_by_field_name("right")) == w
        return False

    # ------------------------------------------------------------------ launches
    def _block_x(self, la: Launch) -> Optional[tuple[str, Optional[int]]]:
        """The block's x extent at a launch: (expression text, value when known)."""
        args = self._block_args(la)
        if args is None:
            return None
        node = args[0]
        return text(node), self._value(node, la)

    def _block_args(self, la: Launch) -> Optional[list[Node]]:
        return block_args(self.src, la)

    def _value(self, node: Node, la: Launch) -> Optional[int]:
        v = int_value(self.src, text(node))
        if v is not None:
            return v
        if node.type == "identifier":
            host = self.src.func_node(la.host) if la.host is not None else None
            if host is not None:
                for d in walk(host):
                    if d.type == "init_declarator" and text(d.child_by_field_name("declarator")) == text(node):
                        val = d.child_by_field_name("value")
                        if val is not None:
                            return int_value(self.src, text(val)) or _global_value(self.src, text(val))
            return _global_value(self.src, text(node))
        return None

    def _template_args(self, la: Launch) -> Optional[list[str]]:
        fn = la.call.child_by_field_name("function")
        while fn is not None and fn.type == "qualified_identifier":
            fn = fn.child_by_field_name("name")
        if fn is None or fn.type != "template_function":
            return None
        targs = fn.child_by_field_name("arguments")
        return [text(c) for c in targs.named_children if c.type != "comment"]

    def _template_arg_nodes(self, la: Launch) -> list[Node]:
        fn = la.call.child_by_field_name("function")
        while fn is not None and fn.type == "qualified_identifier":
            fn = fn.child_by_field_name("name")
        if fn is None or fn.type != "template_function":
            return []
        return [c for c in fn.child_by_field_name("arguments").named_children if c.type != "comment"]

    def _launch(self, la: Launch) -> None:
        w = self.lane.width
        args = self._block_args(la)
        if args is None:
            raise _Refuse()
        x = args[0]
        xv = self._value(x, la)
        targs = self._template_arg_nodes(la)
        wexpr = None
        if w.tparam is not None:
            if w.tparam >= len(targs):
                raise _Refuse()  # W given by a default or deduced: nothing to carry it through
            wnode = targs[w.tparam]
            wexpr = text(wnode)
            self.subs.append(Edit(wnode.start_byte, wnode.end_byte, "1"))
        wv = w.value if w.value is not None else self._value(targs[w.tparam], la) if w.tparam is not None else None
        same = (wexpr is not None and " ".join(text(x).split()) == " ".join(wexpr.split())) or \
            (xv is not None and wv is not None and xv == wv)
        if self.two_d and len(args) >= 2:
            if not same:
                raise _Refuse()  # the block's x extent is not one group
            self.subs.append(Edit(x.start_byte, x.end_byte, "1"))
            return
        if self.two_d:
            raise _Refuse()
        if self.lane.direct:
            if not same or any(int_value(self.src, text(a)) != 1 for a in args[1:]):
                raise _Refuse()
            self.subs.append(Edit(x.start_byte, x.end_byte, "1"))  # a block of one group: one thread
            return
        # a 1-D block of B threads holds B / W groups (rows from threadIdx.x / W)
        if xv is None or wv is None or xv % wv or xv == wv or \
                not re.search(r"\bthreadIdx\s*\.\s*x\s*(/|>>)|\b(%s)\s*(/|>>)" % "|".join(map(re.escape, self.aliases) or ["$^"]),
                              text(self.body)):
            raise _Refuse()
        if x.type == "binary_expression" and text(x.child_by_field_name("operator")) == "*":
            for f in (x.child_by_field_name("left"), x.child_by_field_name("right")):
                if self._value(f, la) == wv:  # `GROUPS * 32`: the factor W becomes 1
                    self.subs.append(Edit(f.start_byte, f.end_byte, "1"))
                    return
        self.subs.append(Edit(x.start_byte, x.end_byte, str(xv // wv)))

    # ------------------------------------------------------------------ data flow of the lane
    def _definitions(self):
        """(target, value) of every initialised declaration and assignment in the kernel body."""
        for n in self._nodes(self.body):
            if n.type == "init_declarator" and n.child_by_field_name("value") is not None:
                yield n.child_by_field_name("declarator"), n.child_by_field_name("value")
            elif n.type == "assignment_expression":
                yield n.child_by_field_name("left"), n.child_by_field_name("right")

    def _tainted(self) -> set[str]:
        """Locals computed from the lane (the column index and what follows from it)."""
        out = set(self.lane.names) | (set(self.aliases) if self.lane.direct else set())
        for _ in range(4):
            for tgt, val in self._definitions():
                if tgt is None or tgt.type != "identifier" or text(tgt) in out:
                    continue
                if self._lane_in(val, out, values=True):
                    if re.search(r"\bblockIdx\b", text(val)) or idents(text(val)) & self._block_derived():
                        raise _Refuse()  # the lane is a coordinate of the grid (a tile), not a place in a row
                    out.add(text(tgt))
        return out

    def _block_derived(self) -> set[str]:
        """Locals computed from the block index (`bx = blockIdx.x`, `blockIdx_y = ...`)."""
        if getattr(self, "_blocks", None) is None:
            out: set[str] = set()
            for _ in range(3):
                for tgt, val in self._definitions():
                    if tgt is not None and tgt.type == "identifier" and \
                            (re.search(r"\bblockIdx\b", text(val)) or idents(text(val)) & out):
                        out.add(text(tgt))
            self._blocks = out
        return self._blocks

    def _lane_in(self, node: Node, tainted: set[str], values: bool = False) -> bool:
        """The lane (or a local computed from it) is in `node`; with `values`, only where it is
        computed with, not where it picks an element to load (`A[col]` is data, not the lane)."""
        for n in walk(node):
            if values and any(a.type in ("subscript_expression", "argument_list")
                              for a in _ancestors(n, node) + [node] if a != n):
                continue
            if n.type == "identifier" and text(n) in tainted:
                return True
            if self.lane.direct and n.type == "field_expression" and _TID.fullmatch(text(n)):
                return True
        return False

    def _thread_uses(self, tainted: set[str]) -> None:
        """The thread index only defines the lane (or the group number); the lane reaches no shared
        memory index and no exchange."""
        lane_decls = {(d.start_byte, d.end_byte) for d in self.lane.decls}
        shared = _local_shared(self.body) | set(self.src.shared_names)
        for n in self._nodes(self.body):
            is_tid = n.type == "field_expression" and _TID.fullmatch(text(n))
            is_alias = n.type == "identifier" and text(n) in self.aliases and not self._declares(n)
            if (is_tid or is_alias) and not self.lane.direct:
                anc = _ancestors(n, self.body)
                if any((a.start_byte, a.end_byte) in lane_decls for a in anc):
                    continue
                if is_tid and n.parent is not None and n.parent.type == "init_declarator" and \
                        text(n.parent.child_by_field_name("declarator")) in self.aliases:
                    continue
                p = n.parent
                while p is not None and p.type == "parenthesized_expression":
                    p = p.parent
                if p is not None and p.type == "binary_expression" and \
                        text(p.child_by_field_name("operator")) in ("/", ">>") and not self.two_d:
                    continue  # the group number in a 1-D block
                raise _Refuse()
            if is_tid and self.lane.direct:
                self.subs.append(Edit(n.start_byte, n.end_byte, "0"))
            if n.type == "subscript_expression":
                base = n.child_by_field_name("argument")
                idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
                if base is not None and text(base).split("[")[0] in shared and idx is not None and \
                        self._lane_in(idx, tainted):
                    raise _Refuse()  # lanes meet in shared memory
            if n.type == "call_expression" and _EXCHANGE.match(_callee(n) + "("):
                args = [a for a in n.child_by_field_name("arguments").named_children if a.type != "comment"]
                if any(self._lane_in(a, tainted) for a in args[2:]):
                    raise _Refuse()  # the lane chooses whose value moves: not a reduction

    def _stores(self, tainted: set[str]) -> None:
        """A global store that depends on the lane is part of a sweep over the row's columns."""
        locals_ = _thread_locals(self.body)
        for n in self._nodes(self.body):
            if n.type != "assignment_expression":
                continue
            lhs = n.child_by_field_name("left")
            if lhs is None or lhs.type not in ("subscript_expression", "pointer_expression"):
                continue
            root = lhs
            while root.type in ("subscript_expression", "pointer_expression", "parenthesized_expression",
                                "field_expression"):
                nxt = root.child_by_field_name("argument")
                if nxt is None:
                    break
                root = nxt
            if root.type == "identifier" and text(root) in locals_:
                continue
            if not self._lane_in(lhs, tainted):
                continue
            loops = [a for a in _ancestors(n, self.body) if a.type in ("for_statement", "while_statement")]
            if not any(self._sweeps(loop, lhs, tainted) for loop in loops):
                raise _Refuse()  # each lane writes an output of its own

    def _sweeps(self, loop: Node, lhs: Node, tainted: set[str]) -> bool:
        var = _loop_var(loop)
        if var is None:
            return False
        if var in tainted:
            return True
        idents = {text(i) for i in walk(lhs) if i.type == "identifier"}
        if var in idents:
            return True
        # a column index computed from the loop variable inside the loop
        for n in walk(loop):
            if n.type == "init_declarator" and text(n.child_by_field_name("declarator")) in idents & tainted and \
                    n.child_by_field_name("value") is not None and \
                    any(i.type == "identifier" and text(i) == var for i in walk(n.child_by_field_name("value"))):
                return True
        return False

    def _exchanges(self) -> None:
        """Group reductions become identities; any other exchange refuses the kernel."""
        for n in self._nodes(self.body):
            if n.type != "call_expression":
                continue
            name = _callee(n)
            base = name.split("<")[0].split("::")[-1].strip()
            if base in self.reductions:
                args = [a for a in n.child_by_field_name("arguments").named_children if a.type != "comment"]
                if len(args) != 1:
                    raise _Refuse()
                self.subs.append(Edit(n.start_byte, n.end_byte, "(" + self.src.raw[args[0].start_byte:
                                                                                   args[0].end_byte].decode() + ")"))
                self.evidence = True
            elif _REDUCE_SHFL.match(name):
                a = _reduction_step(self.src, n, self.body, set())
                if a is None:
                    raise _Refuse()
                self.subs.append(self._delete(a.parent))
                self.evidence = True
            elif re.match(r"__syncwarp$", name) and n.parent is not None and n.parent.type == "expression_statement":
                self.subs.append(self._delete(n.parent))
            elif _EXCHANGE.match(name + "(") or base in self.exchanging:
                raise _Refuse()

    def _delete(self, stmt: Node) -> Edit:
        """Delete a reduction step, with the loop / `if` / braces around it that hold nothing else."""
        while stmt.parent is not None and stmt.parent != self.body:
            p = stmt.parent
            if p.type == "compound_statement":
                stmts = [c for c in p.named_children if c.type != "comment"]
                if all(self._is_step(c) for c in stmts):
                    stmt = p
                    continue
                break
            if p.type == "for_statement" and p.child_by_field_name("body") == stmt:
                stmt = p
                continue
            if p.type == "if_statement" and p.child_by_field_name("consequence") == stmt and \
                    p.child_by_field_name("alternative") is None:
                stmt = p
                continue
            break
        if stmt.parent is not None and stmt.parent.type != "compound_statement":
            return Edit(stmt.start_byte, stmt.end_byte, ";")
        a = self.src.raw.rfind(b"\n", 0, stmt.start_byte) + 1
        b = self.src.raw.find(b"\n", stmt.end_byte)
        if b >= 0 and not self.src.code[a:stmt.start_byte].strip() and not self.src.code[stmt.end_byte:b].strip():
            return Edit(a, b + 1, "")  # the statement's own lines go
        return Edit(stmt.start_byte, stmt.end_byte, "")

    def _is_step(self, stmt: Node) -> bool:
        if stmt.type == "expression_statement" and self.xchg and \
                any(n.type == "identifier" and text(n) in self.xchg for n in walk(stmt)):
            return True  # a write to or a reduction step through an exchange array
        if stmt.type == "expression_statement":
            calls = [c for c in walk(stmt) if c.type == "call_expression"]
            return bool(calls) and all(_REDUCE_SHFL.match(_callee(c)) or re.match(r"__syncwarp$", _callee(c))
                                       for c in calls if _EXCHANGE.match(_callee(c) + "("))
        if stmt.type == "compound_statement":
            return all(self._is_step(c) for c in stmt.named_children if c.type != "comment")
        if stmt.type == "for_statement":
            return self._is_step(stmt.child_by_field_name("body"))
        if stmt.type == "if_statement" and stmt.child_by_field_name("alternative") is None:
            return self._is_step(stmt.child_by_field_name("consequence"))
        return False

    # ------------------------------------------------------------------ column loops
    def _column_loops(self, tainted: set[str]) -> None:
        """Every loop over the row's columns (`i * W + lane`) counts a trip that follows W, or a
        template parameter of the kernel that is carried: multiplied by W at the launch."""
        w = self.lane.width
        carry: set[int] = set()
        wnames = set(w.names) | ({text(w.local.parent.child_by_field_name("declarator"))} if w.local is not None else set())
        for loop in walk(self.body):
            if loop.type != "for_statement":
                continue
            var = _loop_var(loop)
            init = loop.child_by_field_name("initializer")
            if var is None:
                continue
            if init is not None and self._lane_in(init, tainted):
                upd = text(loop.child_by_field_name("update") or loop)
                if not (re.search(r"\bblockDim\s*\.\s*x\b", upd) or any(re.search(r"\b%s\b" % re.escape(x), upd)
                                                                        for x in wnames) or
                        (w.literal and w.value is not None and re.search(r"\+=\s*%d\b" % w.value, upd))):
                    raise _Refuse()  # a lane-started loop that does not stride by the group
                self.evidence = True
                continue
            if not self._column_loop(loop, var, tainted):
                continue
            self.evidence = True
            cond = loop.child_by_field_name("condition")
            names = self._expand(cond)
            if names & wnames or (w.literal and w.value is not None and
                                  re.search(r"\b%d\b" % w.value, self._expanded_text(cond))):
                continue  # the trip count follows W
            p = self._numerator(cond.child_by_field_name("right") if cond.type == "binary_expression" else None)
            if p is None or w.tparam is None:
                raise _Refuse()  # a per-lane count that does not follow the group width
            carry.add(p)
        if carry:
            # the launches were rewritten before the loops were read: carry the counts now
            for la in kernel_launches(self.src, self.k.name):
                targs = self._template_arg_nodes(la)
                for i in sorted(carry):
                    if i >= len(targs):
                        raise _Refuse()
                    a = targs[i]
                    self.subs.append(Edit(a.start_byte, a.end_byte,
                                          f"({text(a)}) * ({text(targs[w.tparam])})"))

    def _column_loop(self, loop: Node, var: str, tainted: set[str]) -> bool:
        """The loop's variable times W and the lane meet in one index: `i * W + lane`."""
        w = self.lane.width
        ws = set(w.names) | {"blockDim.x"}
        if w.local is not None:
            ws.add(text(w.local.parent.child_by_field_name("declarator")))
        if w.value is not None:
            ws.add(str(w.value))
        alt = "|".join(re.escape(x) for x in sorted(ws))
        times = re.compile(r"\b%s\s*\*\s*(%s)\b|\b(%s)\s*\*\s*%s\b" % (re.escape(var), alt, alt, re.escape(var)))
        for n in walk(loop.child_by_field_name("body") or loop):
            if n.type in ("init_declarator", "assignment_expression"):
                val = n.child_by_field_name("value") or n.child_by_field_name("right")
                if val is None:
                    continue
                ids = {text(i) for i in walk(val) if i.type == "identifier"}
                if times.search(" ".join(text(val).split())) and \
                        (ids & set(self.lane.names) or
                         (self.lane.direct and (_TID.search(text(val)) or ids & set(self.aliases)))):
                    return True
        return False

    def _numerator(self, node: Optional[Node], depth: int = 0) -> Optional[int]:
        """The template parameter a count is proportional to: `P`, `P / Q`, `P * k`, through the
        kernel's constants (`num_packs = cols_per_thread / pack_size` -> cols_per_thread)."""
        while node is not None and node.type == "parenthesized_expression" and node.named_children:
            node = node.named_children[0]
        if node is None or depth > 4:
            return None
        if node.type == "identifier":
            name = text(node)
            if name in self.tparams and self.tparams.index(name) != self.lane.width.tparam:
                return self.tparams.index(name)
            return self._numerator(self.consts.get(name), depth + 1)
        if node.type == "binary_expression":
            op = text(node.child_by_field_name("operator"))
            if op == "/":
                return self._numerator(node.child_by_field_name("left"), depth + 1)
            if op == "*":
                return self._numerator(node.child_by_field_name("left"), depth + 1) if \
                    self._numerator(node.child_by_field_name("left"), depth + 1) is not None else \
                    self._numerator(node.child_by_field_name("right"), depth + 1)
        return None

    def _expand(self, node: Optional[Node], depth: int = 0) -> set[str]:
        if node is None:
            return set()
        out = set()
        for n in walk(node):
            if n.type == "identifier":
                out.add(text(n))
                if text(n) in self.consts and depth < 4:
                    out |= self._expand(self.consts[text(n)], depth + 1)
                    out |= self._assigned(text(n), depth)
            elif n.type == "type_identifier":
                out.add(text(n))
        for name in list(out):
            out |= self._assigned(name, depth)
        return out

    def _assigned(self, name: str, depth: int) -> set[str]:
        """Names in the values a local is declared with or assigned."""
        if depth >= 4:
            return set()
        out = set()
        for n in walk(self.body):
            if n.type == "init_declarator" and text(n.child_by_field_name("declarator")) == name and \
                    n.child_by_field_name("value") is not None and name not in self.consts:
                out |= self._expand(n.child_by_field_name("value"), depth + 1)
            elif n.type == "assignment_expression" and text(n.child_by_field_name("left")) == name:
                out |= self._expand(n.child_by_field_name("right"), depth + 1)
        return out

    def _expanded_text(self, node: Node) -> str:
        parts = [text(node)]
        for name in self._expand(node):
            for n in walk(self.body):
                if n.type == "init_declarator" and text(n.child_by_field_name("declarator")) == name and \
                        n.child_by_field_name("value") is not None:
                    parts.append(text(n.child_by_field_name("value")))
                elif n.type == "assignment_expression" and text(n.child_by_field_name("left")) == name:
                    parts.append(text(n.child_by_field_name("right")))
        return " ".join(parts)


def block_args(src: Source, la: Launch) -> Optional[list[Node]]:
    """The block argument of a launch as its dimensions' nodes: `dim3(32, 4)`, a `dim3 block(32, 4)`
    variable of the host function, or a scalar."""
    b = la.block
    if b.type == "call_expression" and call_name(b) == "dim3":
        return [c for c in b.child_by_field_name("arguments").named_children if c.type != "comment"]
    if b.type != "identifier":
        return [b]
    host = src.func_node(la.host) if la.host is not None else None
    if host is None:
        return None
    found = None
    for d in walk(host):
        if d.type == "function_declarator" and d.parent is not None and d.parent.type == "declaration" and \
                text(d.parent.child_by_field_name("type")) == "dim3" and \
                text(d.child_by_field_name("declarator")) == text(b) and d.start_byte < la.call.start_byte:
            # `dim3 block(W, R);` with names only parses as a function declaration
            found = [c for c in d.child_by_field_name("parameters").named_children if c.type != "comment"]
        elif d.type == "init_declarator" and text(d.child_by_field_name("declarator")) == text(b) and \
                d.start_byte < la.call.start_byte:
            v = d.child_by_field_name("value")
            if v is not None and v.type == "call_expression" and call_name(v) == "dim3":
                v = v.child_by_field_name("arguments")
            if v is not None and v.type in ("argument_list", "initializer_list"):
                found = [c for c in v.named_children if c.type != "comment"]
            elif v is not None and text(d.parent.child_by_field_name("type")) != "dim3":
                found = [v]
    return found


def _int(n: Optional[Node]) -> Optional[int]:
    if n is None or n.type != "number_literal":
        return None
    try:
        return int(text(n).rstrip("uUlL"), 0)
    except ValueError:
        return None


def _loop_var(loop: Node) -> Optional[str]:
    init = loop.child_by_field_name("initializer")
    if init is None:
        return None
    for n in walk(init):
        if n.type == "init_declarator":
            return text(n.child_by_field_name("declarator"))
        if n.type == "assignment_expression" and n.child_by_field_name("left").type == "identifier":
            return text(n.child_by_field_name("left"))
    return None


def _thread_locals(body: Node) -> set[str]:
    """Arrays and scalars declared in the kernel without `__shared__` (registers of one thread)."""
    out = set()
    for d in walk(body):
        if d.type == "declaration" and not re.search(r"\b__shared__\b|\*", text(d).split("=")[0]):
            for n in walk(d):
                if n.type in ("array_declarator", "init_declarator"):
                    nm = n.child_by_field_name("declarator")
                    while nm is not None and nm.type != "identifier":
                        nm = nm.child_by_field_name("declarator")
                    if nm is not None:
                        out.add(text(nm))
                elif n.type == "identifier" and n.parent == d:
                    out.add(text(n))
    return out


def _ancestors(node: Node, stop: Node) -> list[Node]:
    out, p = [], node.parent
    while p is not None and not (p.start_byte == stop.start_byte and p.end_byte == stop.end_byte):
        out.append(p)
        p = p.parent
    return out


def _outermost(subs: list[Edit]) -> list[Edit]:
    """Drop sub-edits nested in another; identical ones once."""
    out: list[Edit] = []
    for s in sorted(set(subs), key=lambda x: (x[0], -x[1])):
        if out and s[0] < out[-1][1]:
            if s[1] <= out[-1][1]:
                continue
            return []  # partly overlapping edits: not a site this operator can write
        out.append(s)
    return out


# --------------------------------------------------------------------------- forward
def forward(source: str, ctx=None) -> list:
    """One thread per row in a (1, R) block -> one warp per row in a (32, R) block."""
    from mining.operators.base import candidate
    from mining.operators.nodes import indent_at, loop_init_value, loop_var, local_pointers, raw, statements
    from mining.operators.shuffle_to_shared import _allreduce, _array_size, _classify_loop, _top_loops, \
        _zero_init_before

    src = Source(source)
    out = []
    for k in kernels(src):
        c = text(k.body)
        if re.search(r"__syncthreads|__shared__|__shfl|\bks_lane\b|\bthreadIdx\s*\.\s*[xz]\b", c) or \
                not re.search(r"\bthreadIdx\s*\.\s*y\b", c):
            continue
        ls = kernel_launches(src, k.name)
        xs = [block_args(src, la) for la in ls]
        if not ls or any(x is None or len(x) < 2 or int_value(src, text(x[0])) != 1 for x in xs):
            continue
        globals_ = set(local_pointers(src, k)) | {p.name for p in k.sig.params if p.is_pointer}
        edits: list[Edit] = []
        for loop in _top_loops(src, k.body):
            cl = _classify_loop(src, loop, globals_)
            if cl is None:
                continue
            accs, writes_global = cl
            for a in accs:
                a.size = (_array_size(src, k, a.name) or "") if a.array else ""
            if any(a.array and not a.size for a in accs) or \
                    any(not a.array and a.op == "+" and not _zero_init_before(src, k, a.name, loop.start_byte)
                        for a in accs):
                continue
            init, upd = loop_init_value(loop), loop.child_by_field_name("update")
            edits.append(Edit(init.start_byte, init.end_byte, f"({raw(src, init)}) + ks_lane"))
            edits.append(Edit(upd.start_byte, upd.end_byte, f"{loop_var(src, loop)[1]} += {WARP}"))
            ind = indent_at(src, loop.start_byte)
            after = [_allreduce(a, ind) for a in accs] + ([f"{ind}__syncwarp();"] if writes_global else [])
            if after:
                edits.append(Edit(loop.end_byte, loop.end_byte, "\n" + "\n".join(after)))
        if not edits:
            continue
        first = statements(k.body)
        pos = k.body.start_byte + 1
        edits.append(Edit(pos, pos, f"\n{indent_at(src, first[0].start_byte) if first else '    '}"
                                    "const int ks_lane = threadIdx.x & 31;  // ks-optimize: a warp per row"))
        for x in {(x[0].start_byte, x[0].end_byte) for x in xs}:
            edits.append(Edit(x[0], x[1], str(WARP)))
        out.append(candidate(src, edits, "warp_per_row_2d",
                             f"{k.name}: one row per thread -> one row per warp of a (32, R) block; its row loops "
                             f"lane-strided, accumulators all-reduced with __shfl_xor_sync", excerpt=k.name))
    return out


PAIR = Pair(WarpPerRowToThread, (Rewrite("warp_per_row_2d", "warp_per_row", forward, prior=4.0),),
            inverted_by=("warp_per_row_2d", "warp_per_row"))
