"""Several elements per thread for a sum: the forward form of `grid_stride` on a reduction.

A kernel whose thread reads one element and hands it to a sum (a warp shuffle, a shared-memory
tree, an atomicAdd) does the reduction's fixed cost (shuffles, barriers, one atomic) once per
element. Summing a grid-stride loop's elements in a register first and clamping the launch to the
resident grid pays that cost once per resident thread instead (Harris's "multiple adds per thread";
LeetCUDA's and how-to-optim's reductions take this step right after the block reduction).

Two sites, found by data flow, not by names:
- the element as a value: `T v = (i < n) ? E(i) : 0;` (anywhere in plain blocks of the kernel)
  becomes `T v = 0; for (I j = i; j < n; j += gridDim.x * B) v += E(j);`;
- the element as an atomic: `if (i < n) atomicAdd(P, E(i));` becomes the same loop into a register
  and one `atomicAdd(P, acc)` per thread.
`i` is the kernel's one x index, `blockIdx.x * B + t` with `t` threadIdx.x or a copy of it, used
nowhere but in the site. Sound when the total is the same for any split of the index range over
threads: every later use of `v` must be a sum (`checks_sum`): `+`/`+=` of values derived from `v`,
shuffle exchanges, copies through shared memory, selects against a zero, device functions that
do only that, and atomicAdd as the one global write; `v` never steers control flow or an index.
The kernel may write global memory only through those atomics and may not read blockIdx/gridDim
elsewhere (a per-block partial output would change meaning with a smaller grid). Refused
otherwise. The launch is clamped as for `grid_stride` (grid_clamp.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from tree_sitter import Node

from corpora.code.source import Source
from mining.operators.base import Edit, Materialization, candidate
from mining.operators.grid_clamp import GRID_PER_SM, clamp_edits
from mining.operators.nodes import (Kernel, code, declared_within, identifiers, indent_at, kernels, raw, rename_identifiers,
                                    statements, strip_parens)

_LIT0 = r"(?:0+(?:\.0*)?|\.0+)(?:[eE][+-]?\d+)?[fFuUlL]*"
_SHUFFLES = {"__shfl_xor_sync": 1, "__shfl_down_sync": 1, "__shfl_sync": 1, "__reduce_add_sync": 1}
_ATOMIC_ADD = {"atomicAdd", "atomicAdd_block", "atomicAdd_system"}
_PASS = ("parenthesized_expression", "cast_expression")


def is_zero(s: str) -> bool:
    """A zero of any arithmetic type: `0`, `0.0f`, `(float)0`, `T(0)`, `__float2half(0.f)`, `T()`."""
    e = re.sub(r"\s+", "", s)
    while True:
        e2 = strip_parens(e)
        e2 = re.sub(r"^\((?:const)?\w+\)", "", e2)  # a C cast
        if e2 == e:
            break
        e = e2
    return re.fullmatch(r"%s|\w+\((?:%s)?\)|\w+\{(?:%s)?\}" % (_LIT0, _LIT0, _LIT0), e) is not None


def _unwrap(n: Node) -> Node:
    while n.type in _PASS:
        inner = n.child_by_field_name("value") if n.type == "cast_expression" else n.named_children[-1]
        if inner is None:
            break
        n = inner
    return n


def _ident_texts(src: Source, n: Node) -> set[str]:
    return {code(src, x) for x in src.nodes("identifier", within=n)} | ({code(src, n)} if n.type == "identifier" else set())


def _callee(src: Source, call: Node) -> str:
    f = call.child_by_field_name("function")
    if f is None:
        return ""
    if f.type == "template_function":
        f = f.child_by_field_name("name") or f
    return code(src, f).strip()


def _args(call: Node) -> list[Node]:
    a = call.child_by_field_name("arguments")
    return [c for c in a.named_children if c.type != "comment"] if a is not None else []


class _SumFlow:
    """Taint from one value: every use must be a sum (see the module docstring)."""

    def __init__(self, src: Source, shared: set[str], depth: int = 0):
        self.src, self.shared, self.depth = src, shared, depth
        self.reducers: dict[str, bool] = {}

    def tainted_in(self, n: Node, t: set[str]) -> bool:
        return bool(_ident_texts(self.src, n) & t)

    def sum_expr(self, n: Node, t: set[str]) -> bool:
        n = _unwrap(n)
        src = self.src
        if n.type == "identifier":
            return code(src, n) in t
        if n.type == "subscript_expression":
            arr = n.child_by_field_name("argument")
            idx = [c for c in n.named_children if c != arr]
            return arr is not None and code(src, arr) in t and not any(self.tainted_in(i, t) for i in idx)
        if n.type == "binary_expression" and code(src, n.child_by_field_name("operator")) == "+":
            return all(self.sum_expr(n.child_by_field_name(s), t) for s in ("left", "right"))
        if n.type == "conditional_expression":
            c, a, b = (n.child_by_field_name(s) for s in ("condition", "consequence", "alternative"))
            if c is None or a is None or b is None or self.tainted_in(c, t):
                return False
            sides = [self.sum_expr(x, t) for x in (a, b)]
            return any(sides) and all(s or is_zero(code(src, x)) for s, x in zip(sides, (a, b)))
        if n.type == "call_expression":
            name, args = _callee(src, n), _args(n)
            if name in _SHUFFLES:
                k = _SHUFFLES[name]
                return len(args) > k and self.sum_expr(args[k], t) and not any(
                    self.tainted_in(a, t) for i, a in enumerate(args) if i != k)
            tainted = [i for i, a in enumerate(args) if self.tainted_in(a, t)]
            return len(tainted) == 1 and self.sum_expr(args[tainted[0]], t) and self._reducer(name, tainted[0])
        return False

    def _reducer(self, name: str, arg: int) -> bool:
        """A device function that returns a sum of its `arg`-th parameter (a warp-sum helper)."""
        key = f"{name}#{arg}"
        if key in self.reducers:
            return self.reducers[key]
        self.reducers[key] = False
        if self.depth > 3:
            return False
        src = self.src
        fns = [f for f in src.funcs if f.name == name and not f.is_kernel]
        if len(fns) != 1 or len(fns[0].params) <= arg or fns[0].params[arg].is_pointer:
            return False
        fn = src.func_node(fns[0])
        body = fn.child_by_field_name("body") if fn is not None else None
        if body is None:
            return False
        sub = _SumFlow(src, self.shared, self.depth + 1)
        t = sub.flow(body, body.start_byte, {fns[0].params[arg].name}, returns=True)
        self.reducers[key] = t is not None
        return t is not None

    def flow(self, scope: Node, start: int, t: set[str], returns: bool = False,
             accepted_atomics: Optional[list[Node]] = None) -> Optional[set[str]]:
        """The tainted names after checking every use in `scope` from byte `start` (None: refused)."""
        src = self.src
        t = set(t)
        for _ in range(3):  # loops carry taint backwards: iterate to a fixed point
            before = set(t)
            ok_spans: list[tuple[int, int]] = []
            for n in src.nodes("init_declarator", "assignment_expression", "call_expression", "return_statement",
                               "update_expression", within=scope):
                if n.start_byte < start:
                    continue
                if n.type == "init_declarator":
                    v = n.child_by_field_name("value")
                    name = n.child_by_field_name("declarator")
                    if v is None or not self.tainted_in(v, t):
                        continue
                    if name is None or name.type != "identifier" or not self.sum_expr(v, t):
                        return None
                    t.add(code(src, name))
                    ok_spans.append((n.start_byte, n.end_byte))
                elif n.type == "assignment_expression":
                    left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
                    op = code(src, n.child_by_field_name("operator"))
                    if left is None or right is None:
                        return None
                    if left.type == "identifier":
                        target = code(src, left)
                    elif left.type == "subscript_expression":
                        arr = left.child_by_field_name("argument")
                        target = code(src, arr) if arr is not None and arr.type == "identifier" else ""
                        if target not in self.shared:
                            if self.tainted_in(right, t):
                                return None  # a partial stored to global memory: its meaning is per block
                            continue
                        if any(self.tainted_in(c, t) for c in left.named_children if c != arr):
                            return None
                    else:
                        if self.tainted_in(n, t):
                            return None
                        continue
                    if self.tainted_in(right, t):
                        if op not in ("=", "+=") or not self.sum_expr(right, t) or (op == "+=" and target not in t):
                            return None
                        t.add(target)
                    elif target in t:
                        if not (op == "=" and is_zero(code(src, right))):
                            return None
                    else:
                        continue
                    ok_spans.append((n.start_byte, n.end_byte))
                elif n.type == "call_expression":
                    name = _callee(src, n)
                    if name in _ATOMIC_ADD:
                        args = _args(n)
                        if len(args) == 2 and self.tainted_in(args[1], t):
                            if self.tainted_in(args[0], t) or not self.sum_expr(args[1], t):
                                return None
                            ok_spans.append((n.start_byte, n.end_byte))
                            if accepted_atomics is not None and n not in accepted_atomics:
                                accepted_atomics.append(n)
                elif n.type == "return_statement":
                    e = next((c for c in n.named_children if c.type != "comment"), None)
                    if e is not None and self.tainted_in(e, t):
                        if not returns or not self.sum_expr(e, t):
                            return None
                        ok_spans.append((n.start_byte, n.end_byte))
                elif n.type == "update_expression" and self.tainted_in(n, t):
                    return None
            # every other mention of a tainted name (a condition, an index, a store, a call) refuses
            for idn in src.nodes("identifier", within=scope):
                if idn.start_byte < start or code(src, idn) not in t:
                    continue
                if not any(a <= idn.start_byte < b for a, b in ok_spans):
                    if idn.parent is not None and idn.parent.type in ("init_declarator", "declaration") and \
                            idn.parent.child_by_field_name("declarator") == idn:
                        continue
                    return None
            if t == before:
                return t
        return None


@dataclass
class SumSite:
    kernel: Kernel
    index: str  # the x index's name
    index_type: str
    stride: str  # gridDim.x * B
    bound: str  # n
    node: Node  # the declaration or the if statement
    value: Node  # E(i)
    var: str  # v, or "" for the atomic form
    var_type: str
    zero: str
    target: Optional[Node] = None  # P of the atomic form


def _decl_type(src: Source, decl: Node, name: str) -> str:
    """The declared type of `name` in a one-name declaration, `const` dropped."""
    m = re.match(r"(.*?)\b%s\s*=" % re.escape(name), code(src, decl), re.S)
    return " ".join(re.sub(r"\bconst\b", "", m.group(1)).split()) if m else ""


def x_index(src: Source, k: Kernel) -> Optional[tuple[Node, str, str, str]]:
    """The kernel's one x index `I i = blockIdx.x * B + t` (t threadIdx.x or a copy): (stmt, name, type, B)."""
    sts = statements(k.body)
    copies = {"threadIdx.x"}
    found = []
    for st in sts:
        if st.type != "declaration":
            continue
        inits = [c for c in st.named_children if c.type == "init_declarator"]
        if len(inits) != 1:
            continue
        name, value = inits[0].child_by_field_name("declarator"), inits[0].child_by_field_name("value")
        if name is None or value is None or name.type != "identifier":
            continue
        e = re.sub(r"\s+", "", strip_parens(code(src, value)))
        e = re.sub(r"\((?:unsigned|int|long|size_t|int64_t|\s)+\)", "", e)
        if e == "threadIdx.x":
            copies.add(code(src, name))
            continue
        t = "|".join(re.escape(c) for c in copies)
        m = (re.fullmatch(r"blockIdx\.x\*(.+?)\+(%s)" % t, e) or re.fullmatch(r"(?:%s)\+blockIdx\.x\*(.+)" % t, e)
             or re.fullmatch(r"\(?blockIdx\.x\*(.+?)\)?\+(?:%s)" % t, e))
        if m is None:
            m2 = re.fullmatch(r"(.+?)\*blockIdx\.x\+(?:%s)" % t, e)
            if m2 is None:
                continue
            m = m2
        b = m.group(1)
        if re.search(r"threadIdx|blockIdx", b):
            continue
        found.append((st, code(src, name), _decl_type(src, st, code(src, name)) or "int", b))
    return found[0] if len(found) == 1 else None


def _bound(src: Source, cond: Node, i: str) -> Optional[str]:
    c = strip_parens(code(src, cond))
    m = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(i), c) or re.fullmatch(r"(.+?)\s*>\s*%s" % re.escape(i), c)
    if m is None or re.search(r"\b%s\b" % re.escape(i), m.group(1)) or "?" in m.group(1):
        return None
    return m.group(1).strip()


def _plain_blocks_up_to(n: Node, body: Node) -> bool:
    p = n.parent
    while p is not None and p != body:
        if p.type != "compound_statement":
            return False
        p = p.parent
    return p == body


def _site(src: Source, k: Kernel) -> Optional[SumSite]:
    body_code = code(src, k.body)
    if re.search(r"\b(threadIdx|blockIdx)\s*\.\s*[yz]\b|\bgridDim\b|\bgoto\b", body_code):
        return None
    ix = x_index(src, k)
    if ix is None:
        return None
    stmt, i, ity, b = ix
    if len(re.findall(r"\bblockIdx\b", body_code)) != 1:
        return None  # a block-indexed output: its count follows the grid
    uses = [n for n in src.nodes("identifier", within=k.body) if code(src, n) == i and n.start_byte >= stmt.end_byte]
    if not uses:
        return None
    site = None
    for decl in src.nodes("declaration", within=k.body):
        inits = [c for c in decl.named_children if c.type == "init_declarator"]
        if len(inits) != 1 or not (decl.start_byte <= uses[0].start_byte < decl.end_byte):
            continue
        v = _unwrap(inits[0].child_by_field_name("value")) if inits[0].child_by_field_name("value") else None
        name = inits[0].child_by_field_name("declarator")
        if v is None or v.type != "conditional_expression" or name is None or name.type != "identifier":
            continue
        c, a, z = (v.child_by_field_name(s) for s in ("condition", "consequence", "alternative"))
        bound = _bound(src, c, i)
        if bound is None or not is_zero(code(src, z)):
            continue
        site = SumSite(k, i, ity, "", bound, decl, a, code(src, name), _decl_type(src, decl, code(src, name)),
                       code(src, z).strip())
    if site is None:
        for st in src.nodes("if_statement", within=k.body):
            if not (st.start_byte <= uses[0].start_byte < st.end_byte) or st.child_by_field_name("alternative"):
                continue
            cons = st.child_by_field_name("consequence")
            inner = statements(cons) if cons is not None and cons.type == "compound_statement" else [cons]
            if len(inner) != 1 or inner[0] is None or inner[0].type != "expression_statement":
                continue
            call = _unwrap(inner[0].named_children[0]) if inner[0].named_children else None
            if call is None or call.type != "call_expression" or _callee(src, call) not in _ATOMIC_ADD:
                continue
            args = _args(call)
            bound = _bound(src, st.child_by_field_name("condition"), i)
            params = {p.name: p for p in k.sig.params if p.pointer_depth == 1}
            if bound is None or len(args) != 2 or code(src, args[0]).strip() not in params:
                continue
            site = SumSite(k, i, ity, "", bound, st, args[1], "", params[code(src, args[0]).strip()].base_type,
                           "0", target=args[0])
            break
    if site is None or not _plain_blocks_up_to(site.node, k.body):
        return None
    if any(not (site.value.start_byte <= u.start_byte < site.value.end_byte) and
           not (site.var == "" and site.node.start_byte <= u.start_byte < site.node.child_by_field_name(
               "consequence").start_byte) and
           not (site.var and site.node.start_byte <= u.start_byte < site.value.start_byte) for u in uses):
        return None
    if site.target is not None and _ident_texts(src, site.target) & {i}:
        return None
    # the element and the bound are functions of i alone (parameters, constants): another thread
    # computes element j after the rewrite, so nothing of the thread's own may enter them
    own = declared_within(src, k.body) - {i}
    for t in (code(src, site.value), site.bound):
        if identifiers(t) & own or re.search(r"\b(threadIdx|blockIdx|__shfl\w*|__syncthreads|__syncwarp)\b", t):
            return None
    # global writes: only the sum's atomics; the element's own loads are free to be anything
    shared = set(src.shared_names)
    atomics: list[Node] = []
    if site.var:
        flow = _SumFlow(src, shared).flow(k.body, site.node.end_byte, {site.var}, accepted_atomics=atomics)
        if flow is None:
            return None
    else:
        atomics.append(_unwrap(statements(site.node.child_by_field_name("consequence"))[0].named_children[0])
                       if site.node.child_by_field_name("consequence").type == "compound_statement"
                       else _unwrap(site.node.child_by_field_name("consequence").named_children[0]))
    for n in src.nodes("assignment_expression", "update_expression", "call_expression", within=k.body):
        if n.type == "call_expression":
            name = _callee(src, n)
            if name.startswith("atomic") and not any(n.start_byte == a.start_byte for a in atomics):
                return None
            continue
        left = n.child_by_field_name("left") if n.type == "assignment_expression" else n.child_by_field_name("argument")
        if left is None:
            continue
        if left.type in ("subscript_expression", "pointer_expression", "field_expression"):
            base = left
            while base.type in ("subscript_expression", "field_expression", "pointer_expression", "parenthesized_expression"):
                nxt = base.child_by_field_name("argument") or (base.named_children[0] if base.named_children else None)
                if nxt is None:
                    break
                base = nxt
            if code(src, base).strip() not in shared:
                return None
    site.stride = f"gridDim.x * {b}" if re.fullmatch(r"[\w.]+", b) else f"gridDim.x * ({b})"
    return site


def _loop(src: Source, s: SumSite, acc: str) -> str:
    j = "ks_j"
    e = rename_identifiers(raw(src, s.value), {s.index: j})
    return f"for ({s.index_type} {j} = {s.index}; {j} < {s.bound}; {j} += {s.stride}) {acc} += {e};"


def sum_sites(source: str) -> list[Materialization]:
    """The `grid_stride` candidates of the sum forms (module docstring), one per kernel."""
    src = Source(source)
    out = []
    for k in kernels(src):
        s = _site(src, k)
        if s is None:
            continue
        clamp = clamp_edits(src, k.name)
        if clamp is None:
            continue
        ind = indent_at(src, s.node.start_byte)
        if s.var:
            text = f"{s.var_type} {s.var} = {s.zero};\n{ind}{_loop(src, s, s.var)}"
            what = f"`{s.var}` summed over a grid-stride loop"
        else:
            text = (f"{{\n{ind}    {s.var_type} ks_acc = ({s.var_type})0;\n{ind}    {_loop(src, s, 'ks_acc')}\n"
                    f"{ind}    atomicAdd({raw(src, s.target)}, ks_acc);\n{ind}}}")
            what = f"per-element atomicAdd into {raw(src, s.target)} -> a register sum over a grid-stride loop, one atomic per thread"
        out.append(candidate(src, [Edit(s.node.start_byte, s.node.end_byte, text)] + clamp, "grid_stride",
                             f"{k.name}: several elements per thread: {what} over `{s.index} < {s.bound}`, "
                             f"launch clamped to {GRID_PER_SM} blocks per SM", excerpt=code(src, s.node)))
    return out
