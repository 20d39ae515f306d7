"""A block (or warp) sum whose only consumer is one thread's `atomicAdd` is dropped, whatever
machinery computes it; every thread publishes its own value (issue 19: detection by meaning).

    float sum = ...;                                   float sum = ...;
    int warp = tid / 32, lane = tid % 32;
    sum = warp_sum(sum);                          ->   atomicAdd(y, sum);
    if (lane == 0) partials[warp] = sum;
    __syncthreads();
    sum = lane < NW ? partials[lane] : 0.0f;
    if (warp == 0) sum = warp_sum(sum);
    if (tid == 0) atomicAdd(y, sum);

The statements before the guarded atomic are taken back to front while each one *belongs to the
reduction of v* (the published variable): it only assigns v, shared arrays used nowhere else in
the kernel, or locals computed from the thread index that nothing after the atomic reads; it reads
only those, constants and the thread / block indices; and the calls it makes are device functions
of this file that add (`+`, `+=`) values exchanged across threads (shuffles, or shared memory with
barriers) and never take a minimum or maximum. The run must contain at least one such exchange.
The run, the guard and the shared arrays' declarations are replaced by an unguarded
`atomicAdd(target, v);`.

Why it is sound: the run computes, in the guarded thread, the sum of v over the threads that
reach it (what makes it a sum is read from the helpers' bodies: only additions of exchanged
values), and that thread adds it to the target; adding every thread's v to the target directly
adds the same total (in another order: float rounding differs, the gate's tolerance judges it).
Nothing else observed the run's intermediate state (its arrays and locals are used nowhere else).
"""
from __future__ import annotations

import re
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name
from corpora.code.source import Source
from mining.operators.base import Edit
from mining.operators.rewrite_util import splice_range, structural
from corpora.code.parse import text, walk

_EXCHANGE = re.compile(r"\b(__shfl\w*|__syncthreads|__syncwarp|\w+\s*\.\s*shfl\w*)\s*\(")
_THREAD = re.compile(r"\b(threadIdx\.[xyz]|blockDim\.[xyz]|warpSize)\b")
_SINGLE = re.compile(r"^\(\s*\(?\s*(\w+|threadIdx\.x)\s*\)?\s*==\s*0\s*\)$")


def _stmts(block: Node) -> list[Node]:
    return [c for c in block.named_children if c.type != "comment" and not c.type.startswith("preproc")]


def _adding_helpers(src: Source) -> dict[str, bool]:
    """Device function name -> it adds values exchanged across threads (and never takes min/max)."""
    out = {}
    for f in src.funcs:
        if f.is_kernel or not f.name:
            continue
        code = src.func_code(f).decode("utf-8", "replace")
        body = code.split("{", 1)[1] if "{" in code else ""
        exchanges = bool(_EXCHANGE.search(body)) or "ks_xchg_" in body
        adds = bool(re.search(r"\+=|[^+]\+[^+=]", body))
        minmax = bool(re.search(r"\b(f?max|f?min|fmaxf|fminf|__hmax\w*|__hmin\w*)\s*\(|[<>]\s*\w+\s*\?", body))
        out[f.name] = exchanges and adds and not minmax
    return out


def _idents(node: Node) -> set[str]:
    return {text(n) for n in walk(node) if n.type == "identifier"}


def _callee(call: Node) -> str:
    fn = call.child_by_field_name("function")
    if fn is not None and fn.type == "template_function":
        fn = fn.child_by_field_name("name")
    return text(fn) if fn is not None else ""


def _guard_single(cond: str, thread_locals: set[str]) -> bool:
    c = " ".join(cond.split())
    m = _SINGLE.match(c)
    if m:
        return m.group(1) in thread_locals or m.group(1) == "threadIdx.x"
    parts = re.fullmatch(r"\(\s*(\w+)\s*==\s*0\s*&&\s*(\w+)\s*==\s*0\s*\)", c)
    return bool(parts) and parts.group(1) in thread_locals and parts.group(2) in thread_locals


def publish_edits(source: Source) -> list[Edit]:
    src = structural(source)
    helpers = _adding_helpers(src)
    out = []
    for f in src.funcs:
        if not f.is_kernel:
            continue
        fn = src.func_node(f)
        body = fn.child_by_field_name("body") if fn is not None else None
        if body is None:
            continue
        e = _rewrite_kernel(src, body, helpers)
        if e is not None:
            out.append(e)
    return out


def _thread_locals(src: Source, body: Node) -> dict[str, Node]:
    """Locals initialised from the thread index only (tid, lane, warp): name -> declaration."""
    out: dict[str, Node] = {}
    for d in _stmts(body):
        if d.type != "declaration":
            continue
        decls = [c for c in d.named_children if c.type == "init_declarator"]
        if not decls:
            continue
        ok = True
        names = []
        for c in decls:
            name = c.child_by_field_name("declarator")
            value = c.child_by_field_name("value")
            if name is None or name.type != "identifier" or value is None:
                ok = False
                break
            v = " ".join(text(value).split())
            rest = _THREAD.sub("", v)
            ids = set(re.findall(r"\b[A-Za-z_]\w*\b", rest))
            if not _THREAD.search(v) and not (ids & set(out)):
                ok = False
                break
            if ids - set(out) - {k for k in ids if k.isupper() or k.startswith("k")}:
                ok = False
                break
            names.append(text(name))
        if ok:
            for n in names:
                out[n] = d
    return out


def _rewrite_kernel(src: Source, body: Node, helpers: dict[str, bool]) -> Optional[Edit]:
    stmts = _stmts(body)
    thread_locals = _thread_locals(src, body)
    shared = {name: decl for decl, name, dims in src.shared_decls if body.start_byte <= decl.start_byte < body.end_byte}
    for k, st in enumerate(stmts):
        if st.type != "if_statement" or st.child_by_field_name("alternative") is not None:
            continue
        cons = st.child_by_field_name("consequence")
        inner = _stmts(cons) if cons.type == "compound_statement" else [cons]
        if len(inner) != 1 or inner[0].type != "expression_statement":
            continue
        call = inner[0].named_children[0] if inner[0].named_children else None
        if call is None or call.type != "call_expression" or call_name(call) != "atomicAdd":
            continue
        args = [a for a in call.child_by_field_name("arguments").named_children if a.type != "comment"]
        if len(args) != 2 or args[1].type != "identifier":
            continue
        v = text(args[1])
        if not _guard_single(text(st.child_by_field_name("condition")), set(thread_locals)):
            continue
        run = _reduction_run(src, stmts[:k], v, thread_locals, shared, helpers)
        if not run:
            continue
        used_after = set().union(*[_idents(s) for s in stmts[k + 1:]]) if stmts[k + 1:] else set()
        arrays = {n for s in run for n in _idents(s) if n in shared}
        locs = {n for s in run for n in _idents(s) if n in thread_locals}
        if (arrays | locs | {v}) & used_after:
            continue  # the block total (or the run's state) is read after the atomic
        # every other use of the arrays is inside the run (or their declarations)
        others = [n for n in walk(body) if n.type == "identifier" and text(n) in arrays and
                  not any(s.start_byte <= n.start_byte < s.end_byte for s in run) and
                  not any(shared[a].start_byte <= n.start_byte < shared[a].end_byte for a in arrays)]
        if others:
            continue
        exchange = any(_EXCHANGE.search(text(s)) or arrays or
                       any(helpers.get(_callee(c)) for c in walk(s) if c.type == "call_expression") for s in run)
        if not exchange:
            continue
        target = " ".join(text(args[0]).split())
        subs = [Edit(run[0].start_byte, st.end_byte, f"atomicAdd({target}, {v});")]
        for a in sorted(arrays):
            d = shared[a]
            if len([c for c in d.named_children if c.type in ("array_declarator", "identifier", "init_declarator")]) == 1 \
                    and d.end_byte <= run[0].start_byte:
                subs.append(Edit(d.start_byte, d.end_byte, ""))
        for name in sorted(locs):
            d = thread_locals[name]
            uses = [n for n in walk(body) if n.type == "identifier" and text(n) == name and
                    not (d.start_byte <= n.start_byte < d.end_byte)]
            if d.end_byte <= run[0].start_byte and all(run[0].start_byte <= n.start_byte < st.end_byte for n in uses) \
                    and all(_idents(d) & {name} for _ in [0]) and \
                    len([c for c in d.named_children if c.type == "init_declarator"]) == 1:
                subs.append(Edit(d.start_byte, d.end_byte, ""))
        subs.sort()
        if any(b[0] < a[1] for a, b in zip(subs, subs[1:])):
            continue
        lo, hi = subs[0][0], max(e for _, e, _ in subs)
        return Edit(lo, hi, splice_range(src, lo, hi, subs))
    return None


def _reduction_run(src: Source, before: list[Node], v: str, thread_locals: dict[str, Node],
                   shared: dict[str, Node], helpers: dict[str, bool]) -> list[Node]:
    """The longest run of statements just before the atomic that belongs to the reduction of v."""
    run: list[Node] = []
    for st in reversed(before):
        if not _belongs(src, st, v, thread_locals, shared, helpers):
            break
        run.insert(0, st)
    # the run starts where v is first exchanged: leading statements that only compute v are kept
    while run and not (_EXCHANGE.search(text(run[0])) or
                       any(text(n) in shared for n in walk(run[0]) if n.type == "identifier") or
                       any(helpers.get(_callee(c)) for c in walk(run[0]) if c.type == "call_expression")):
        run.pop(0)
    return run


def _belongs(src: Source, st: Node, v: str, thread_locals: dict[str, Node], shared: dict[str, Node],
             helpers: dict[str, bool]) -> bool:
    if st.type == "declaration":
        return False
    t = " ".join(text(st).split())
    if re.fullmatch(r"(__syncthreads|__syncwarp)\s*\(\s*\)\s*;|\w+\s*\.\s*sync\s*\(\s*\)\s*;|(\w+::)?sync\s*\(\s*\w+\s*\)\s*;", t):
        return True
    if st.type not in ("expression_statement", "if_statement"):
        return False
    if st.type == "if_statement" and st.child_by_field_name("alternative") is not None:
        return False
    allowed_reads = {v} | set(thread_locals) | set(shared)
    for n in walk(st):
        if n.type == "assignment_expression":
            left = n.child_by_field_name("left")
            base = left
            while base is not None and base.type == "subscript_expression":
                base = base.child_by_field_name("argument")
            if base is None or base.type != "identifier" or (text(base) != v and text(base) not in shared):
                return False
        elif n.type == "update_expression":
            return False
        elif n.type == "call_expression":
            name = _callee(n)
            if not helpers.get(name):
                return False
        elif n.type == "identifier":
            name = text(n)
            p = n.parent
            if p is not None and p.type in ("template_function", "call_expression") and \
                    p.child_by_field_name("function") is not None and \
                    p.child_by_field_name("function").start_byte == n.start_byte:
                continue
            if p is not None and p.type == "template_function":
                continue
            if name not in allowed_reads and not (name.isupper() or re.fullmatch(r"k[A-Z]\w*", name)) and \
                    name not in ("threadIdx", "blockDim", "blockIdx", "warpSize"):
                return False
    return True
