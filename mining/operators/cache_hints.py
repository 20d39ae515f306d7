"""Cache-operator hints, each removed under its own name (issue 19: hints named for what they are).

`__ldg` (read-only path) stays ldg_to_plain_load's; every other load / store intrinsic is its
own optimization with its own carrier, skill and inverse:

| intrinsic | carrier | what it asks of the memory system |
| --- | --- | --- |
| `__ldcs(p)` | streaming_load | evict-first: data read once, do not let it displace reused lines |
| `__ldcg(p)` | l2_only_load | cache in L2 only, bypass L1 (data other blocks write, or no L1 reuse) |
| `__ldca(p)` | cache_all_load | cache at every level (the default made explicit) |
| `__ldlu(p)` | last_use_load | last use: the line may be evicted after this read |
| `__ldcv(p)` | volatile_load | do not cache: fetch again on every read (data written concurrently) |
| `__stcs(p, v)` | streaming_store | evict-first store: output written once, not reread |
| `__stcg(p, v)` | l2_only_store | store to L2 only, bypass L1 |
| `__stwt(p, v)` | write_through_store | write through to system memory |
| `__stwb(p, v)` | write_back_store | write back (the default made explicit) |

The rewrite is the plain access: `__ldcs(p)` -> `*(p)`, `__stcs(p, v);` -> `*(p) = v;` (the store
only as a whole expression statement). Sound: a cache hint changes where a line is kept, never the
value read or written; `__ldcv`'s "fetch again" only matters for data another agent writes during
the kernel, which the gate's workloads would expose.

`forward` is the inverse for the streaming hints, the ones a kernel can take without knowing its
neighbours: in a kernel whose global inputs are each read once (no input pointer is read twice
in the kernel) loads become `__ldcs`, and stores to outputs that are never read become `__stcs`.

Every other hint has its own forward rewrite (`add_ldcg`, `add_ldca`, `add_ldlu`, `add_ldcv`,
`add_stcg`, `add_stwt`, `add_stwb`), made by one factory (`hint_rewrite`) from a rule that says
where the hint means something (`HINT_RULES`, read off the table above). The facts come from
`pointer_uses`: per one-level pointer parameter of a type the intrinsics are overloaded for (the
half and bfloat16 types included) or of a template type parameter of the kernel (nvcc checks the
instance's overload), its
subscript reads, its whole-statement stores `p[i] = v;`, whether it is read or written anywhere
(compound assignments read and write), whether it is `volatile`, and whether it escapes (any use
that is not `p[i]`: an offset, a call argument, a reassignment), in which case no rule claims
anything about it. The rules:

| hint | sites |
| --- | --- |
| `__ldcg` | reads of a pointer the kernel also writes (L1 is not coherent across SMs: data other threads of the launch write is read from L2), or the one read site, outside loops, of an input |
| `__ldca` | reads of an input read at several sites or in a loop (reuse in the thread or block) |
| `__ldlu` | the last read of an input, when no loop encloses it (nothing reads the line again) |
| `__ldcv` | reads of a pointer the kernel both reads and writes, or of a `volatile` one (read through a `(const T*)` cast: the intrinsic takes no volatile pointer) -- never a read-only input |
| `__stcg`, `__stwt` | stores to an output the kernel never reads |
| `__stwb` | stores to a pointer the kernel reads back |

`volatile` pointers take no hint but `__ldcv`. A load `p[i]` becomes `HINT(&p[i])` (outermost
subscripts only), a store statement `p[i] = v;` becomes `HINT(&p[i], (T)(v));`, the value converted
to the element type T as the assignment converted it (so the overload for T is the one called).
Sound for the same reason as the backward half: a cache operator changes where a line is kept,
never the value a race-free kernel reads or writes; the conditions only keep a hint off sites
where it means nothing (`__ldcv` on an input no one writes) and leave the rest to timing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from corpora.code.nodes import call_name, declarator_name
from corpora.code.parse import text
from corpora.code.source import Source
from mining.carriers_meaning import LOAD_HINTS, STORE_HINTS
from mining.operators.base import (Context, Edit, Materialization, Operator, Pair, Rewrite, per_kernel_and_all,
                                   raw_text)
from mining.operators.nodes import address_taken, in_ldg, is_lhs, kernels, param_nodes
from mining.operators.rewrite_util import splice_range

HINT_SKILLS = {
    "streaming_load": ("Streaming loads (__ldcs)", "Read data used once with the evict-first hint so it does not push reused lines out of the caches."),
    "l2_only_load": ("L2-only loads (__ldcg)", "Read through L2 only, bypassing L1, for data without L1 reuse or data other blocks produce."),
    "cache_all_load": ("Cache-at-all-levels loads (__ldca)", "Ask for caching at every level explicitly for data reread by the same SM."),
    "last_use_load": ("Last-use loads (__ldlu)", "Mark the final read of a line so the cache may drop it right away."),
    "volatile_load": ("Uncached volatile loads (__ldcv)", "Fetch again on every read: data written concurrently by other agents."),
    "streaming_store": ("Streaming stores (__stcs)", "Write output that is not reread with the evict-first hint, keeping the caches for reused data."),
    "l2_only_store": ("L2-only stores (__stcg)", "Store to L2 only, bypassing L1."),
    "write_through_store": ("Write-through stores (__stwt)", "Write through to system memory (data the host or a peer reads next)."),
    "write_back_store": ("Write-back stores (__stwb)", "Write back through the cache hierarchy (the default, made explicit)."),
}


class _LoadHint(Operator):
    intrinsic = ""

    def edits(self, src: Source):
        for call in src.nodes("call_expression"):
            if call_name(call) != self.intrinsic:
                continue
            args = call.child_by_field_name("arguments")
            if args is None or len(args.named_children) != 1:
                continue
            arg = args.named_children[0]
            yield Edit(call.start_byte, call.end_byte, f"*({raw_text(src, arg.start_byte, arg.end_byte)})")


class _StoreHint(Operator):
    intrinsic = ""

    def edits(self, src: Source):
        for call in src.nodes("call_expression"):
            if call_name(call) != self.intrinsic or call.parent is None or call.parent.type != "expression_statement":
                continue
            args = call.child_by_field_name("arguments")
            a = [c for c in (args.named_children if args is not None else []) if c.type != "comment"]
            if len(a) != 2:
                continue
            p, v = (raw_text(src, n.start_byte, n.end_byte) for n in a)
            yield Edit(call.start_byte, call.end_byte, f"*({p}) = {v}")


def _make(base, intrinsic: str, carrier: str):
    kind = "load" if base is _LoadHint else "store"
    name = f"drop_{carrier}_hint"
    cls = type("Drop" + "".join(w.title() for w in carrier.split("_")) + "Hint", (base,), {
        "name": name, "carrier": carrier, "intrinsic": intrinsic,
        "description": f"replace the {carrier.replace('_', ' ')} `{intrinsic}` by a plain {kind}"})
    return cls


HINT_OPERATORS = tuple(_make(_LoadHint, i, c) for i, c in LOAD_HINTS.items()) + \
    tuple(_make(_StoreHint, i, c) for i, c in STORE_HINTS.items())


# --------------------------------------------------------------------------- forward
def forward(source: str, ctx=None) -> list:
    """Streaming hints where each global input of a kernel is read through one subscript and each
    output is written and never read: loads `p[i]` -> `__ldcs(&p[i])`, stores `q[i] = v;` ->
    `__stcs(&q[i], v);`."""
    from mining.operators.base import Materialization

    src = Source(source)
    out = []
    for f in src.funcs:
        if not f.is_kernel:
            continue
        fn = src.func_node(f)
        if fn is None:
            continue
        code = src.code[f.start_byte:f.end_byte].decode("utf-8", "replace")
        ptrs = [p.name for p in f.params if p.is_pointer]
        loads, stores = [], []
        for sub in src.nodes("subscript_expression", within=fn):
            base = sub.child_by_field_name("argument")
            if base is None or base.type != "identifier" or base.text.decode() not in ptrs:
                continue
            name = base.text.decode()
            uses = len(re.findall(r"\b%s\s*\[" % re.escape(name), code))
            parent = sub.parent
            is_store = parent is not None and parent.type == "assignment_expression" and \
                parent.child_by_field_name("left").start_byte == sub.start_byte and parent.children[1].type == "="
            lv = raw_text(src, sub.start_byte, sub.end_byte)
            if is_store and parent.parent is not None and parent.parent.type == "expression_statement" and uses == 1:
                stores.append((parent, sub))
            elif not is_store and uses == 1 and not (parent is not None and parent.type == "pointer_expression"):
                loads.append(Edit(sub.start_byte, sub.end_byte, f"__ldcs(&{lv})"))
        edits = [e for e in loads if not any(a.start_byte <= e[0] < a.end_byte for a, _ in stores)]
        for asg, sub in stores:
            v = asg.child_by_field_name("right")
            inner = [e for e in loads if v.start_byte <= e[0] and e[1] <= v.end_byte]
            value = splice_range(src, v.start_byte, v.end_byte, inner)
            edits.append(Edit(asg.start_byte, asg.end_byte,
                          f"__stcs(&{raw_text(src, sub.start_byte, sub.end_byte)}, {value})"))
        if not edits:
            continue
        raw = bytearray(src.raw)
        for s, e, t in sorted(edits, reverse=True):
            raw[s:e] = t.encode()
        out.append(Materialization(source=raw.decode("utf-8"), rewrite="streaming_hints", carrier="streaming_load",
                                   description=f"{f.name}: evict-first loads of data read once and stores of "
                                               f"output never reread"))
    return out


# --------------------------------------------------------------------------- the other hints, forward
# The element types the cache-operator intrinsics are overloaded for (sm_32_intrinsics.h).
HINT_TYPES = {"float", "double", "int", "unsigned", "unsigned int", "long long", "unsigned long long", "char",
              "signed char", "unsigned char", "short", "unsigned short", "long", "unsigned long", "float2", "float4",
              "int2", "int4", "uint2", "uint4", "double2", "char2", "char4", "uchar2", "uchar4", "short2", "short4",
              "ushort2", "ushort4", "longlong2", "ulonglong2", "int32_t", "uint32_t", "int64_t", "uint64_t",
              # cuda_fp16.h / cuda_bf16.h overload every hint for their types too
              "__half", "__half2", "half", "half2", "__nv_bfloat16", "__nv_bfloat162", "nv_bfloat16", "nv_bfloat162"}


def template_types(fn) -> set[str]:
    """The type parameters of a templated kernel (`template <typename T>`): nvcc checks the
    instance's overload, the gate decides."""
    t = fn.parent if fn.parent is not None and fn.parent.type == "template_declaration" else None
    params = t.child_by_field_name("parameters") if t is not None else None
    return {text(c).split()[-1] for c in (params.named_children if params is not None else [])
            if c.type == "type_parameter_declaration" and text(c).split()}


@dataclass
class PointerUse:
    """How one pointer parameter of a kernel is used in its body (subscripts only, else `escaped`)."""
    name: str
    type: str
    volatile: bool
    reads: list = field(default_factory=list)  # `p[i]` read as a value (not inside a hint, not address-taken)
    stores: list = field(default_factory=list)  # `p[i] = v` as a whole statement
    read: bool = False  # read at any site (hint calls and compound assignments included)
    written: bool = False  # written at any site (compound assignments and increments included)
    escaped: bool = False  # used other than as `p[i]`: offset, passed on, reassigned, address taken

    @property
    def read_only(self) -> bool:
        return not self.written and not self.escaped

    @property
    def shared_rw(self) -> bool:
        """Read and written by the kernel: data other threads of the launch may write while it runs."""
        return self.read and self.written and not self.escaped


def _in_loop(node, body) -> bool:
    p = node.parent
    while p is not None and p.start_byte > body.start_byte:
        if p.type in ("for_statement", "while_statement", "do_statement", "for_range_loop"):
            return True
        p = p.parent
    return False


def pointer_uses(src: Source, k) -> dict[str, PointerUse]:
    """Every one-level pointer parameter of an element type the hints take, with its uses."""
    volatile = {}
    for pn in param_nodes(k.node):
        d = pn.child_by_field_name("declarator")
        if d is not None and declarator_name(d):
            volatile[declarator_name(d)] = re.search(rb"\bvolatile\b", pn.text) is not None
    types = HINT_TYPES | template_types(k.node)
    uses = {p.name: PointerUse(p.name, " ".join(p.base_type.split()), volatile.get(p.name, False))
            for p in k.sig.params if p.pointer_depth == 1 and " ".join(p.base_type.split()) in types}
    for ident in src.nodes("identifier", within=k.body):
        u = uses.get(ident.text.decode())
        if u is None:
            continue
        sub = ident.parent
        if sub is None or sub.type != "subscript_expression" or \
                sub.child_by_field_name("argument").start_byte != ident.start_byte:
            u.escaped = True
            continue
        parent = sub.parent
        while parent is not None and parent.type == "parenthesized_expression":
            parent = parent.parent
        if is_lhs(sub):
            u.written = True
            plain = parent.type == "assignment_expression" and parent.children[1].type == "="
            if not plain:
                u.read = True  # `p[i] += v`, `p[i]++` read the element too
            elif parent.parent is not None and parent.parent.type == "expression_statement":
                u.stores.append(parent)
        elif address_taken(sub):
            if in_ldg(sub) is not None:
                u.read = True  # already loaded through a hint: not a site, but a read
            else:
                u.escaped = True
        else:
            u.read = True
            u.reads.append(sub)
    return uses


@dataclass(frozen=True)
class HintRule:
    """Where one hint is applicable, as data: `select(use, body)` -> the sites of that pointer."""
    intrinsic: str
    carrier: str
    rewrite: str
    select: Callable[[PointerUse, Any], list]
    what: str


def _loads_of_rw(u, body):
    return u.reads if u.shared_rw and not u.volatile else []


def _ldcg(u, body):
    # L1 is not coherent across SMs: data other threads of the launch write is read from L2;
    # and a read-only input read at one site outside any loop has no L1 reuse in its thread
    if u.volatile or u.escaped:
        return []
    if u.shared_rw:
        return u.reads
    return u.reads if not u.written and len(u.reads) == 1 and not _in_loop(u.reads[0], body) else []


def _ldca(u, body):
    # cache at every level: read-only data the thread reads at several sites or in a loop
    if u.volatile or not u.read_only:
        return []
    return u.reads if len(u.reads) > 1 or any(_in_loop(r, body) for r in u.reads) else []


def _ldlu(u, body):
    # the last read of a read-only input in the kernel (outside any loop: nothing rereads it)
    if u.volatile or not u.read_only or not u.reads:
        return []
    last = max(u.reads, key=lambda r: r.start_byte)
    return [last] if not _in_loop(last, body) else []


def _ldcv(u, body):
    # fetch again on every read: only data another agent may write while the kernel runs
    # (a pointer the kernel both reads and writes, or a volatile one)
    if u.escaped:
        return []
    return u.reads if u.shared_rw or (u.volatile and u.reads) else []


def _output_stores(u, body):
    # outputs the kernel never reads back
    return u.stores if not u.read and not u.escaped and not u.volatile else []


def _reread_stores(u, body):
    # write back explicitly where the kernel reads what it writes (the line stays cached)
    return u.stores if u.shared_rw and not u.volatile else []


HINT_RULES = {r.carrier: r for r in (
    HintRule("__ldcg", "l2_only_load", "add_ldcg", _ldcg,
             "L2-only loads of data other threads write or of inputs read once"),
    HintRule("__ldca", "cache_all_load", "add_ldca", _ldca, "cache-at-all-levels loads of reread inputs"),
    HintRule("__ldlu", "last_use_load", "add_ldlu", _ldlu, "last-use loads of each input's final read"),
    HintRule("__ldcv", "volatile_load", "add_ldcv", _ldcv, "uncached loads of data written during the kernel"),
    HintRule("__stcg", "l2_only_store", "add_stcg", _output_stores, "L2-only stores of output never reread"),
    HintRule("__stwt", "write_through_store", "add_stwt", _output_stores,
             "write-through stores of output never reread"),
    HintRule("__stwb", "write_back_store", "add_stwb", _reread_stores,
             "write-back stores of data the kernel rereads"),
)}


def _hint_edits(src: Source, rule: HintRule, uses: dict[str, PointerUse], body) -> list[Edit]:
    sites = [(u, s) for u in uses.values() for s in rule.select(u, body)]
    if rule.intrinsic.startswith("__ld"):
        sites = [(u, s) for u, s in sites
                 if not any((o.start_byte, o.end_byte) != (s.start_byte, s.end_byte) and o.start_byte <= s.start_byte
                            and s.end_byte <= o.end_byte for _, o in sites)]
        out = []
        for u, s in sites:
            # the intrinsics take `const T*`; a volatile element is read through a cast that drops the qualifier
            ptr = f"(const {u.type}*)&{raw_text(src, s.start_byte, s.end_byte)}" if u.volatile else \
                f"&{raw_text(src, s.start_byte, s.end_byte)}"
            out.append(Edit(s.start_byte, s.end_byte, f"{rule.intrinsic}({ptr})"))
        return out
    out = []
    for u, asg in sites:
        left, right = asg.child_by_field_name("left"), asg.child_by_field_name("right")
        # the value converted to the element type as the assignment did, so the overload is exact
        out.append(Edit(asg.start_byte, asg.end_byte, f"{rule.intrinsic}(&{raw_text(src, left.start_byte, left.end_byte)}, "
                                                      f"({u.type})({raw_text(src, right.start_byte, right.end_byte)}))"))
    return out


def hint_rewrite(carrier: str):
    """The forward rewrite of one hint: its rule's sites in each kernel become hinted accesses."""
    rule = HINT_RULES[carrier]

    def fn(source: str, ctx: Context) -> list[Materialization]:
        src = Source(source)
        per = []
        for k in kernels(src):
            edits = _hint_edits(src, rule, pointer_uses(src, k), k.body)
            per.append((k.name, edits, raw_text(src, edits[0].start, edits[0].end) if edits else ""))
        return per_kernel_and_all(src, rule.rewrite, per, rule.what)

    fn.__name__ = rule.rewrite
    return fn


def _rewrites(op) -> tuple[Rewrite, ...]:
    if op.carrier == "streaming_load":
        return (Rewrite("streaming_hints", op.carrier, forward, prior=1.02),)
    if op.carrier in HINT_RULES:
        return (Rewrite(HINT_RULES[op.carrier].rewrite, op.carrier, hint_rewrite(op.carrier)),)
    return ()


# One pair per hint: each is its own optimization (its own carrier, skill and forward rewrite);
# the streaming load and store hints share one rewrite.
PAIRS = tuple(Pair(op, _rewrites(op), inverted_by=("streaming_hints",) if op.carrier == "streaming_store" else None)
              for op in HINT_OPERATORS)
