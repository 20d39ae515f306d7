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
"""
from __future__ import annotations

import re

from corpora.code.nodes import call_name
from corpora.code.source import Source
from mining.carriers_meaning import LOAD_HINTS, STORE_HINTS
from mining.operators.base import Edit, Operator, Pair, Rewrite, raw_text
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


# One pair per hint: each is its own optimization (its own carrier and skill); only the streaming
# load/store hints have a forward rewrite (the others need knowledge of reuse the code does not show).
PAIRS = tuple(Pair(op, (Rewrite("streaming_hints", op.carrier, forward, prior=1.02),) if op.carrier == "streaming_load"
                   else (), inverted_by=("streaming_hints",) if op.carrier == "streaming_store" else None)
              for op in HINT_OPERATORS)
