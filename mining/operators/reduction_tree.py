"""The shared-memory tree reduction, recognized: what the four operators of the classic reduction
ladder (Harris, "Optimizing Parallel Reduction in CUDA"; the CUDA samples' reduce0..6) read.

The ladder's forms, each over a shared array A, the thread index T (`threadIdx.x` or a local that
is only ever `threadIdx.x`) and a barrier SYNC (`__syncthreads();`, `cg::sync(g);`, `g.sync();`):

* **modulo loop** (reduce0): `for (s = 1; s < N; s *= 2) { if (T % (2 * s) == 0) BODY(T); SYNC }`
* **strided loop** (reduce1): `for (s = 1; s < N; s *= 2) { int i = 2 * s * T; if (i < N) BODY(i); SYNC }`
* **sequential loop** (reduce2): `for (s = N / 2; s > LO; s >>= 1) { if (T < s) BODY; SYNC }`
* **rungs** (reduce5): the sequential loop written out per stride, each rung guarded by the block
  size: `if ((B >= 2S) && (T < S)) BODY(S)` then SYNC, or `if (B >= 2S) { if (T < S) BODY(S) SYNC }`
* **warp tail** (reduce4 of Harris / how-to-optim v4): after a sequential loop with LO = 32, the
  last six levels run by one warp without barriers: `A[T] += A[T + K]` for K = 32 .. 1 (through a
  `volatile` pointer, an inline block or a device function, each step optionally behind
  `if (B >= 2K)`, `__syncwarp()` allowed between steps), or the race-free spelling
  `v = A[T]; v += A[T + K]; __syncwarp(); A[T] = v; __syncwarp(); ...`.

Everything here only reads code (comment-free, through `corpora.code`); the operators decide what
to rewrite. A launch's block size and a kernel's template arguments are read from the launches in
the same file (`block_x`, `template_args`): the ladder's rewrites are exact only for the block
sizes the kernel is launched with, so every launch is checked, and a kernel with no readable
launch is no site.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from tree_sitter import Node

from corpora.code.nodes import call_name, enclosing
from corpora.code.parse import FunctionSig
from corpora.code.source import Source
from mining.operators.nodes import strip_parens
from mining.operators.rewrite_util import ctext

SYNC_RE = r"(?:__syncthreads\s*\(\s*\)|(?:cg\s*::\s*)?sync\s*\(\s*\w+\s*\)|\w+\s*\.\s*sync\s*\(\s*\))\s*;"
SYNCWARP_RE = r"__syncwarp\s*\([^;]*\)\s*;"
_UINT = r"(?:unsigned\s+int|unsigned|int|uint32_t|size_t|long|unsigned\s+long)"


def split_and(cond: str) -> list[str]:
    """Top-level `&&` operands of a condition, parentheses stripped."""
    parts, depth, cur, i = [], 0, "", 0
    cond = strip_parens(cond)
    while i < len(cond):
        c = cond[i]
        depth += c == "("
        depth -= c == ")"
        if depth == 0 and cond.startswith("&&", i):
            parts.append(cur)
            cur, i = "", i + 2
            continue
        cur += c
        i += 1
    parts.append(cur)
    return [strip_parens(p) for p in parts]


def stmts(node: Optional[Node]) -> list[Node]:
    """The statements of a compound statement (comments dropped), or [node]."""
    if node is None:
        return []
    if node.type == "compound_statement":
        return [c for c in node.named_children if c.type != "comment"]
    return [node]


def is_sync(src: Source, node: Node) -> bool:
    return node.type == "expression_statement" and re.fullmatch(SYNC_RE, ctext(src, node)) is not None


def is_syncwarp(src: Source, node: Node) -> bool:
    return node.type == "expression_statement" and re.fullmatch(SYNCWARP_RE, ctext(src, node)) is not None


def pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


# --------------------------------------------------------------------------- the function's names
def thread_names(src: Source, fn: Node) -> set[str]:
    """Spellings of threadIdx.x in a kernel with a one-dimensional block: `threadIdx.x`, locals
    declared `= threadIdx.x` and never written again, `g.thread_rank()`. Empty when the kernel
    uses threadIdx.y / .z (its thread rank is then not threadIdx.x)."""
    code = src.code[fn.start_byte:fn.end_byte].decode("utf-8", "replace")
    # (the linear index shuffle_to_shared declares mentions y and z: not a use of a 2-D block)
    if re.search(r"\bthreadIdx\s*\.\s*[yz]\b", re.sub(r"const int ks_tid = [^;]*;", "", code)):
        return set()
    out = {"threadIdx.x"}
    for m in re.finditer(r"\b(?:const\s+)?" + _UINT + r"\s+(?:const\s+)?(\w+)\s*=\s*threadIdx\s*\.\s*x\s*;", code):
        name = m.group(1)
        writes = re.findall(r"(?:\b%s\s*(?:[-+*/%%&|^]|<<|>>)?=(?!=)|\+\+\s*%s\b|--\s*%s\b|\b%s\s*(?:\+\+|--))"
                            % ((re.escape(name),) * 4), code)
        if len(writes) == 1:
            out.add(name)
    for m in re.finditer(r"\b(\w+)\s*\.\s*thread_rank\s*\(\s*\)", code):
        out.add(f"{m.group(1)}.thread_rank()")
    return out


def is_thread(t: str, names: set[str]) -> bool:
    return " ".join(strip_parens(t).split()).replace(" ", "") in {n.replace(" ", "") for n in names}


def shared_arrays(src: Source) -> set[str]:
    """Shared arrays, extern shared arrays, and locals bound to one (`T *sdata = SharedMemory<T>();`,
    `float *s = smem;`, `volatile float *vs = sdata;`)."""
    out = {name for _, name, _ in src.shared_decls}
    code = src.code.decode("utf-8", "replace")
    for m in re.finditer(r"\b(\w+)\s*\*\s*(\w+)\s*=\s*SharedMemory\s*<[^;]*>\s*\(\s*\)\s*;", code):
        out.add(m.group(2))
    return _pointer_closure(code, out)


def _pointer_closure(code: str, names: set[str]) -> set[str]:
    """`names` plus every pointer local of `code` bound (`T *p = q;`, transitively) to one of them."""
    out = set(names)
    changed = True
    while changed:
        changed = False
        for m in re.finditer(r"(?:volatile\s+)?\w+\s*\*\s*(?:volatile\s+)?(\w+)\s*=\s*(\w+)\s*;", code):
            if m.group(2) in out and m.group(1) not in out:
                out.add(m.group(1))
                changed = True
    return out


def fresh(src: Source, fn: Node, want: str) -> str:
    code = src.code[fn.start_byte:fn.end_byte].decode("utf-8", "replace")
    name, k = want, 0
    while re.search(r"\b%s\b" % re.escape(name), code):
        k += 1
        name = f"{want}{k}" if k > 1 else f"ks_{want}"
    return name


# --------------------------------------------------------------------------- launches
def template_params(src: Source, fn: Node) -> list[str]:
    """Names of a function template's parameters, in order ([] for a plain function)."""
    t = fn.parent
    if t is None or t.type != "template_declaration":
        return []
    plist = t.child_by_field_name("parameters")
    if plist is None:
        return []
    out = []
    for p in plist.named_children:
        s = ctext(src, p).split("=")[0]
        ids = re.findall(r"\b[A-Za-z_]\w*\b", s)
        out.append(ids[-1] if ids else "")
    return out


def _const_local(src: Source, host: Optional[FunctionSig], name: str) -> Optional[int]:
    """The value of `const int name = <constant>;` in the host function, when it is never written again."""
    from mining.operators.nodes import int_value

    if host is None:
        return None
    code = src.func_code(host).decode("utf-8", "replace")
    m = re.search(r"\b(?:const|constexpr)\s+(?:static\s+)?" + _UINT + r"\s+%s\s*=\s*([^;,]+);" % re.escape(name), code)
    if m is None or len(re.findall(r"\b%s\s*(?:[-+*/]|<<|>>)?=(?!=)" % re.escape(name), code)) != 1:
        return None
    return int_value(src, m.group(1))


def value_at(src: Source, launch, expr: str) -> Optional[int]:
    from mining.operators.nodes import int_value

    v = int_value(src, expr)
    if v is None and re.fullmatch(r"\w+", expr.strip()):
        v = _const_local(src, launch.host, expr.strip())
    return v


def block_x(src: Source, launch) -> Optional[int]:
    """The launch's block size when it is one-dimensional and a compile-time constant."""
    from mining.operators.nodes import block_dims, code

    d = block_dims(src, launch)
    if d is None:
        v = value_at(src, launch, code(src, launch.block))
        d = (v, 1, 1) if v is not None else None
    if d is None or d[1] != 1 or d[2] != 1:
        return None
    return d[0]


def template_args(src: Source, launch) -> list[str]:
    fnode = launch.call.child_by_field_name("function")
    if fnode is None or fnode.type != "template_function":
        return []
    args = fnode.child_by_field_name("arguments")
    return [ctext(src, a) for a in args.named_children] if args is not None else []


@dataclass
class LaunchValues:
    block: int  # blockDim.x
    names: dict[str, int] = field(default_factory=dict)  # template parameters / macros -> value


def kernel_launches(src: Source, fn: Node) -> Optional[list[LaunchValues]]:
    """Every launch of the kernel `fn` with its block size and template arguments; None when
    there is none, or one whose block size (or a template argument) is not a constant."""
    from mining.operators.nodes import launches

    f = src.function_at(fn.start_byte)
    if f is None or not f.is_kernel:
        return None
    tparams = template_params(src, fn)
    out = []
    for launch in launches(src):
        if re.sub(r"\s*<.*$", "", launch.kernel, flags=re.S).split("::")[-1].strip() != f.name:
            continue
        b = block_x(src, launch)
        if b is None:
            return None
        names: dict[str, int] = {}
        args = template_args(src, launch)
        if tparams and len(args) != len(tparams):
            return None
        for p, a in zip(tparams, args):
            v = value_at(src, launch, a)
            if v is not None:
                names[p] = v
        out.append(LaunchValues(b, names))
    return out or None


def value_of(src: Source, expr: str, at: LaunchValues) -> Optional[int]:
    """An integer expression over blockDim.x, template parameters and macros at one launch."""
    from mining.operators.nodes import int_value

    e = re.sub(r"\bblockDim\s*\.\s*x\b", str(at.block), expr)
    for k, v in at.names.items():
        e = re.sub(r"\b%s\b" % re.escape(k), str(v), e)
    return int_value(src, e)


def enclosing_function(src: Source, node: Node) -> Optional[Node]:
    f = src.function_at(node.start_byte)
    return src.func_node(f) if f is not None else None


def after(node: Node) -> list[Node]:
    """The statements following `node` in its compound statement."""
    p = node.parent
    if p is None or p.type != "compound_statement":
        return []
    sibs = [c for c in p.named_children if c.type != "comment"]
    k = next((i for i, c in enumerate(sibs) if c.start_byte == node.start_byte and c.end_byte == node.end_byte), None)
    return sibs[k + 1:] if k is not None else []


def before(node: Node) -> list[Node]:
    p = node.parent
    if p is None or p.type != "compound_statement":
        return []
    sibs = [c for c in p.named_children if c.type != "comment"]
    k = next((i for i, c in enumerate(sibs) if c.start_byte == node.start_byte and c.end_byte == node.end_byte), None)
    return sibs[:k] if k is not None else []


def rest_of_function(src: Source, node: Node, fn: Node) -> str:
    """The comment-free code of `fn` after `node`."""
    body = fn.child_by_field_name("body")
    return src.code[node.end_byte:body.end_byte].decode("utf-8", "replace") if body is not None else ""


def only_slot_zero_after(src: Source, node: Node, fn: Node, arrays: set[str]) -> bool:
    """After `node`, the function reads the arrays (and their aliases) only at `[0]` and writes none."""
    rest = rest_of_function(src, node, fn)
    for a in arrays:
        for m in re.finditer(r"\b%s\b" % re.escape(a), rest):
            tail = rest[m.end():]
            mm = re.match(r"\s*\[\s*0\s*\]", tail)
            if mm is None or re.match(r"\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)", tail[mm.end():]):
                return False
    return True


def aliases(src: Source, fn: Node, array: str) -> set[str]:
    """The array and the locals of `fn` bound to it."""
    return _pointer_closure(src.code[fn.start_byte:fn.end_byte].decode("utf-8", "replace"), {array})


# --------------------------------------------------------------------------- the combining step
@dataclass
class Combine:
    """`A[X] += A[X + S];` (or `A[X] = A[X] + A[X + S];`, `A[X] = max(A[X], A[X + S]);` ...)."""
    array: str
    at: str  # X
    stride: str  # S
    op: str  # "+", "max", "min", ...
    form: str  # the statement with X and S as {at} / {stride} placeholders
    value: str = ""  # V of the register-carrying step `A[X] = V = V + A[X + S];`


_OPS = ("max", "min", "fmaxf", "fminf", "fmax", "fmin")


def combine(stmt: str, arrays: set[str]) -> Optional[Combine]:
    """The combining step of a tree level in one statement (comment-free, whitespace collapsed)."""
    s = " ".join(stmt.split())
    idx = r"\[\s*([^\[\]]+?)\s*\]"
    for pat, op in ((r"(\w+)\s*" + idx + r"\s*\+=\s*(\w+)\s*" + idx + r"\s*;", "+"),
                    (r"(\w+)\s*" + idx + r"\s*=\s*(\w+)\s*" + idx + r"\s*\+\s*(\w+)\s*" + idx + r"\s*;", "+2"),
                    (r"(\w+)\s*" + idx + r"\s*=\s*(\w+)\s*\(\s*(\w+)\s*" + idx + r"\s*,\s*(\w+)\s*" + idx + r"\s*\)\s*;",
                     "call"),
                    (r"(\w+)\s*" + idx + r"\s*=\s*(\w+)\s*=\s*(\w+)\s*\+\s*(\w+)\s*" + idx + r"\s*;", "chain")):
        m = re.fullmatch(pat, s)
        if m is None:
            continue
        g = m.groups()
        if op == "+":
            a, x, b, y = g
            if a != b:
                return None
            form = "{a}[{at}] += {a}[{at} + {stride}];"
        elif op == "+2":
            a, x, a2, x2, b, y = g
            if not (a == a2 == b) or norm_expr(x2) != norm_expr(x):
                return None
            form = "{a}[{at}] = {a}[{at}] + {a}[{at} + {stride}];"
        elif op == "chain":
            # `A[X] = v = v + A[X + S];`: the thread's running value kept in a register beside its slot
            a, x, v, v2, b, y = g
            if v != v2 or a != b:
                return None
            form = "{a}[{at}] = " + v + " = " + v + " + {a}[{at} + {stride}];"
        else:
            a, x, fname, a2, x2, b, y = g
            if fname not in _OPS or not (a == a2 == b) or norm_expr(x2) != norm_expr(x):
                return None
            op = fname
            form = "{a}[{at}] = " + fname + "({a}[{at}], {a}[{at} + {stride}]);"
        if a not in arrays:
            return None
        ym = re.fullmatch(r"(.+?)\s*\+\s*(.+)", strip_parens(y))
        if ym is None or norm_expr(ym.group(1)) != norm_expr(x):
            return None
        return Combine(a, strip_parens(x), strip_parens(ym.group(2)), "+" if op in ("+", "+2") else op,
                       form.replace("{a}", a), g[2] if op == "chain" else "")
    return None


def norm_expr(s: str) -> str:
    return re.sub(r"\s+", "", strip_parens(s))


def body_statements(src: Source, node: Node) -> Optional[list[str]]:
    """Statements of a loop / if body as comment-free texts (one level of braces)."""
    out = []
    for st in stmts(node):
        if st.type == "compound_statement":
            return None
        out.append(ctext(src, st))
    return out


# --------------------------------------------------------------------------- the loops
@dataclass
class TreeLoop:
    """A tree-reduction loop over a shared array (all three loop forms)."""
    kind: str  # "sequential" | "strided" | "modulo"
    loop: Node
    var: str  # s
    decl: str  # the loop variable's declared type ("unsigned int") or "" when declared outside
    bound: str  # N (blockDim.x, a template parameter, a macro)
    low: int  # sequential: s > low
    thread: str  # T as written
    guard: Node  # the if statement
    step: Combine  # the combining statement (its at / stride as written)
    index: str = ""  # strided: the index variable
    index_decl: Optional[Node] = None
    sync: Optional[Node] = None
    fn: Optional[Node] = None


def _loop_header(src: Source, loop: Node) -> Optional[tuple[str, str, str, str, str]]:
    """(decl type, var, init, condition, update) of a for loop's header, comment-free."""
    init = loop.child_by_field_name("initializer")
    cond = loop.child_by_field_name("condition")
    upd = loop.child_by_field_name("update")
    if init is None or cond is None or upd is None:
        return None
    it = ctext(src, init).rstrip(";").strip()
    m = re.fullmatch(r"(?:(" + _UINT + r")\s+)?(\w+)\s*=\s*(.+)", it)
    if m is None:
        return None
    return (m.group(1) or "", m.group(2), m.group(3), ctext(src, cond), ctext(src, upd))


def tree_loops(src: Source) -> list[TreeLoop]:
    out = []
    arrays = shared_arrays(src)
    for loop in src.nodes("for_statement"):
        fn = enclosing_function(src, loop)
        if fn is None:
            continue
        t = tree_loop(src, loop, fn, arrays)
        if t is not None:
            out.append(t)
    return out


def tree_loop(src: Source, loop: Node, fn: Node, arrays: set[str]) -> Optional[TreeLoop]:
    h = _loop_header(src, loop)
    if h is None:
        return None
    decl, var, init, cond, upd = h
    names = thread_names(src, fn)
    if not names:
        return None
    body = stmts(loop.child_by_field_name("body"))
    if len(body) not in (2, 3) or not is_sync(src, body[-1]):
        return None
    guard = body[-2]
    if guard.type != "if_statement" or guard.child_by_field_name("alternative") is not None:
        return None
    gcond = strip_parens(ctext(src, guard.child_by_field_name("condition")))
    inner = body_statements(src, guard.child_by_field_name("consequence"))
    if inner is None or len(inner) != 1:
        return None
    step = combine(inner[0], arrays)
    if step is None or norm_expr(step.stride) != var:
        return None
    v = re.escape(var)
    halving = re.fullmatch(r"(?:%s\s*>>=\s*1|%s\s*/=\s*2|%s\s*=\s*%s\s*(?:>>\s*1|/\s*2))" % (v, v, v, v), upd)
    doubling = re.fullmatch(r"(?:%s\s*<<=\s*1|%s\s*\*=\s*2|%s\s*=\s*%s\s*(?:<<\s*1|\*\s*2)|%s\s*=\s*2\s*\*\s*%s)"
                            % (v, v, v, v, v, v), upd)
    if halving and len(body) == 2:
        mi = re.fullmatch(r"(.+?)\s*(?:/\s*2|>>\s*1)", strip_parens(init))
        mc = re.fullmatch(r"%s\s*>\s*(\d+)" % v, cond) or re.fullmatch(r"%s\s*>=\s*(\d+)" % v, cond)
        mg = re.fullmatch(r"(.+?)\s*<\s*%s" % v, gcond)
        if mi is None or mc is None or mg is None or not is_thread(mg.group(1), names):
            return None
        low = int(mc.group(1)) - (1 if ">=" in cond else 0)
        if norm_expr(step.at) != norm_expr(mg.group(1)):
            return None
        return TreeLoop("sequential", loop, var, decl, strip_parens(mi.group(1)), low, mg.group(1), guard, step,
                        sync=body[-1], fn=fn)
    if doubling and strip_parens(init) == "1":
        mc = re.fullmatch(r"%s\s*<\s*(.+)" % v, cond)
        if mc is None:
            return None
        bound = strip_parens(mc.group(1))
        if len(body) == 2:
            mg = re.fullmatch(r"\(?\s*(.+?)\s*%%\s*\(\s*2\s*\*\s*%s\s*\)\s*\)?\s*==\s*0" % v, gcond) or \
                re.fullmatch(r"\(?\s*(.+?)\s*&\s*\(\s*2\s*\*\s*%s\s*-\s*1\s*\)\s*\)?\s*==\s*0" % v, gcond)
            if mg is None or not is_thread(mg.group(1), names) or norm_expr(step.at) != norm_expr(mg.group(1)):
                return None
            return TreeLoop("modulo", loop, var, decl, bound, 0, mg.group(1), guard, step, sync=body[-1], fn=fn)
        idecl = body[0]
        md = re.fullmatch(r"(?:const\s+)?" + _UINT + r"\s+(\w+)\s*=\s*(?:2\s*\*\s*%s\s*\*\s*(.+?)|(.+?)\s*\*\s*2\s*\*\s*%s)\s*;"
                          % (v, v), ctext(src, idecl))
        if idecl.type != "declaration" or md is None:
            return None
        index, th = md.group(1), md.group(2) or md.group(3)
        if not is_thread(th, names) or norm_expr(step.at) != index:
            return None
        mg = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(index), gcond)
        if mg is None or norm_expr(mg.group(1)) != norm_expr(bound):
            return None
        rest = rest_of_function(src, loop, fn)
        if re.search(r"\b%s\b" % re.escape(index), rest):
            return None
        return TreeLoop("strided", loop, var, decl, bound, 0, th, guard, step, index=index, index_decl=idecl,
                        sync=body[-1], fn=fn)
    return None


# --------------------------------------------------------------------------- the rungs
@dataclass
class Rung:
    stride: int
    guard: Optional[str]  # B in `B >= 2S`, or None (unguarded)
    thread: str
    step: Combine
    first: Node  # the rung's first statement
    last: Node  # its last statement (the barrier)
    body_if: Node  # the `if (T < S)` (or combined) statement


def _rung_at(src: Source, sibs: list[Node], i: int, names: set[str], arrays: set[str]) -> Optional[tuple[Rung, int]]:
    """The rung starting at sibling i and the index after it."""
    n = sibs[i]
    if n.type != "if_statement" or n.child_by_field_name("alternative") is not None:
        return None
    parts = split_and(ctext(src, n.child_by_field_name("condition")))
    cons = n.child_by_field_name("consequence")
    guard, stride, thread = None, None, None
    for p in parts:
        mb = re.fullmatch(r"(\w+(?:\s*\.\s*x)?)\s*>=\s*(\d+)", p)
        mt = re.fullmatch(r"(.+?)\s*<\s*(\d+)", p)
        if mb and guard is None:
            guard, gval = mb.group(1), int(mb.group(2))
        elif mt and thread is None and is_thread(mt.group(1), names):
            thread, stride = mt.group(1), int(mt.group(2))
        else:
            return None
    if thread is None:
        # form B: `if (B >= 2S) { if (T < S) STEP; SYNC }`
        inner = stmts(cons)
        if guard is None or len(inner) != 2 or inner[0].type != "if_statement" or not is_sync(src, inner[1]):
            return None
        r = _rung_at(src, inner, 0, names, arrays)
        if r is None or r[0].guard is not None or r[0].stride * 2 != gval:
            return None
        rung = r[0]
        return Rung(rung.stride, guard, rung.thread, rung.step, n, n, rung.body_if), i + 1
    if guard is not None and gval != 2 * stride:
        return None
    body = body_statements(src, cons)
    if body is None or len(body) != 1:
        return None
    step = combine(body[0], arrays)
    if step is None or norm_expr(step.at) != norm_expr(thread) or norm_expr(step.stride) != str(stride):
        return None
    if i + 1 >= len(sibs) or not is_sync(src, sibs[i + 1]):
        return None
    return Rung(stride, guard, thread, step, n, sibs[i + 1], n), i + 2


def rung_sequences(src: Source) -> list[tuple[Node, list[Rung]]]:
    """Maximal runs of at least two rungs with halving strides: (function node, rungs)."""
    arrays = shared_arrays(src)
    out = []
    seen: set[int] = set()
    for block in src.nodes("compound_statement"):
        fn = enclosing_function(src, block)
        if fn is None:
            continue
        names = thread_names(src, fn)
        if not names:
            continue
        sibs = [c for c in block.named_children if c.type != "comment"]
        i = 0
        while i < len(sibs):
            run: list[Rung] = []
            j = i
            while j < len(sibs):
                r = _rung_at(src, sibs, j, names, arrays)
                if r is None or (run and (r[0].stride * 2 != run[-1].stride or r[0].step.form != run[-1].step.form
                                          or norm_expr(r[0].thread) != norm_expr(run[-1].thread))):
                    break
                run.append(r[0])
                j = r[1]
            if len(run) >= 2 and run[0].first.start_byte not in seen:
                seen.add(run[0].first.start_byte)
                out.append((fn, run))
                i = j
            else:
                i += 1
    return out


# --------------------------------------------------------------------------- the warp tail
@dataclass
class Tail:
    """The last warp's levels after a sequential loop: K = top .. 1."""
    stmt: Node  # the `if (T < 32) ...` statement
    array: str
    strides: list[int]
    guards: list[Optional[str]]  # B of `if (B >= 2K)` per step
    step: Combine
    form: str  # "unrolled" (A[T] += A[T + K] per step) | "register" (v += A[T + K]; sync; A[T] = v; sync)
    helper: Optional[Node] = None  # the device function holding the steps, when called


def _tail_steps(src: Source, body: list[Node], arrays: set[str], thread: str,
                rename: dict[str, str]) -> Optional[tuple[list[int], list[Optional[str]], Combine, str]]:
    """The steps of a warp tail's statements: unrolled self-adds (syncwarps between allowed) or
    the register form."""
    from mining.operators.nodes import rename_identifiers

    texts = [rename_identifiers(ctext(src, b), rename) for b in body]
    strides: list[int] = []
    guards: list[Optional[str]] = []
    step: Optional[Combine] = None
    # the register form: [T v = A[T];] (v += A[T + K]; __syncwarp(); A[T] = v; __syncwarp();)*
    m0 = re.fullmatch(r"(?:volatile\s+)?(?:const\s+)?[\w:]+\s+(\w+)\s*=\s*(\w+)\s*\[\s*(.+?)\s*\]\s*;", texts[0]) \
        if texts else None
    if m0 and m0.group(2) in arrays and norm_expr(m0.group(3)) == norm_expr(thread):
        v, a = m0.group(1), m0.group(2)
        k = 1
        while k < len(texts):
            if k + 4 > len(texts):
                return None
            ma = re.fullmatch(r"%s\s*\+=\s*%s\s*\[\s*(.+?)\s*\+\s*(\d+)\s*\]\s*;" % (re.escape(v), re.escape(a)), texts[k])
            if ma is None or norm_expr(ma.group(1)) != norm_expr(thread) or \
                    re.fullmatch(SYNCWARP_RE, texts[k + 1]) is None or \
                    re.fullmatch(r"%s\s*\[\s*(.+?)\s*\]\s*=\s*%s\s*;" % (re.escape(a), re.escape(v)), texts[k + 2]) is None \
                    or re.fullmatch(SYNCWARP_RE, texts[k + 3]) is None:
                return None
            strides.append(int(ma.group(2)))
            guards.append(None)
            k += 4
        if not strides:
            return None
        step = Combine(a, thread, str(strides[0]), "+", a + "[{at}] += " + a + "[{at} + {stride}];")
        return strides, guards, step, "register"
    for t in texts:
        if re.fullmatch(SYNCWARP_RE, t):
            continue
        g = None
        mg = re.fullmatch(r"if\s*\(\s*\(?\s*(\w+)\s*>=\s*(\d+)\s*\)?\s*\)\s*\{?\s*(.+?;)\s*\}?", t)
        if mg:
            g, gval, t = mg.group(1), int(mg.group(2)), mg.group(3)
        c = combine(t, arrays)
        if c is None or norm_expr(c.at) != norm_expr(thread) or not re.fullmatch(r"\d+", norm_expr(c.stride)):
            return None
        if g is not None and gval != 2 * int(norm_expr(c.stride)):
            return None
        if step is not None and (c.form != step.form or c.array != step.array):
            return None
        step = step or c
        strides.append(int(norm_expr(c.stride)))
        guards.append(g)
    if step is None:
        return None
    return strides, guards, step, "unrolled"


def warp_tail(src: Source, stmt: Node, fn: Node, arrays: set[str]) -> Optional[Tail]:
    """`if (T < W) { steps }` or `if (T < W) helper(A, T);` right after a sequential loop."""
    if stmt.type != "if_statement" or stmt.child_by_field_name("alternative") is not None:
        return None
    names = thread_names(src, fn)
    mc = re.fullmatch(r"(.+?)\s*<\s*(\d+)", strip_parens(ctext(src, stmt.child_by_field_name("condition"))))
    if mc is None or not is_thread(mc.group(1), names):
        return None
    thread = mc.group(1)
    body = stmts(stmt.child_by_field_name("consequence"))
    helper = None
    rename: dict[str, str] = {}
    local_arrays = set(arrays)
    if len(body) == 1 and body[0].type == "expression_statement" and body[0].named_children and \
            body[0].named_children[0].type == "call_expression":
        call = body[0].named_children[0]
        name = re.sub(r"\s*<.*$", "", call_name(call) or "", flags=re.S)
        g = next((g for g in src.funcs if g.name == name and not g.is_kernel), None)
        gnode = src.func_node(g) if g is not None else None
        if gnode is None or len([g2 for g2 in src.funcs if g2.name == name]) != 1:
            return None
        args = [ctext(src, a) for a in call.child_by_field_name("arguments").named_children]
        params = [p.name for p in g.params]
        if len(args) != len(params) or not all(params):
            return None
        # template arguments of the call become the helper's template parameters' values
        fnode = call.child_by_field_name("function")
        targs = []
        if fnode is not None and fnode.type == "template_function":
            targs = [ctext(src, a) for a in fnode.child_by_field_name("arguments").named_children]
        tparams = template_params(src, gnode)
        if len(targs) != len(tparams):
            return None
        rename = dict(zip(params, args)) | dict(zip(tparams, targs))
        gbody = gnode.child_by_field_name("body")
        if gbody is None:
            return None
        body = stmts(gbody)
        helper = gnode
    elif len(body) >= 2:
        # an inline tail may bind a volatile alias first: `volatile float *vs = sdata;`
        ma = re.fullmatch(r"volatile\s+[\w:]+\s*\*\s*(\w+)\s*=\s*(\w+)\s*;", ctext(src, body[0]))
        if ma and ma.group(2) in arrays:
            rename = {ma.group(1): ma.group(2)}
            body = body[1:]
    if not body:
        return None
    got = _tail_steps(src, body, local_arrays, thread, rename)
    if got is None:
        return None
    strides, guards, step, form = got
    if strides != [strides[0] >> k for k in range(len(strides))] or strides[-1] != 1 or not pow2(strides[0]):
        return None
    if int(mc.group(2)) != strides[0]:
        return None  # threads T < W run levels K = W .. 1: W is the first level
    return Tail(stmt, step.array, strides, guards, step, form, helper)


# --------------------------------------------------------------------------- the shuffle tail
@dataclass
class ShuffleTail:
    """The last warp finished with shuffles on the thread's running value V (the CUDA samples'
    reduce4..6): `if (T < 32) { [if (B >= 64)] V += A[T + 32]; for (o = 16; o > 0; o /= 2) V += shfl_down(V, o); }`
    (the exchange through shared slots that shuffle_to_shared leaves counts as the shuffle)."""
    stmt: Node
    value: str  # V
    array: str  # A
    guard: Optional[str]  # B of `if (B >= 64)` on the first level
    decls: list[Node]  # tile declarations between the loop and the tail (`cg::thread_block_tile<32> t = ...;`)


_SHFL_DOWN = (r"(?:__shfl_down_sync\s*\(\s*[^,]+,\s*{v}\s*,\s*{o}\s*(?:,\s*\w+\s*)?\)|"
              r"\w+\s*\.\s*shfl_down\s*\(\s*{v}\s*,\s*{o}\s*\))")


def _is_shuffle_loop(src: Source, loop: Node, v: str) -> bool:
    """`for (int o = 16 | warpSize / 2 | t.size() / 2; o > 0; o /= 2) V += shfl_down(V, o);`, or its exchange."""
    h = _loop_header(src, loop)
    if h is None:
        return False
    _, o, init, cond, upd = h
    if not re.fullmatch(r"(?:16|32\s*/\s*2|warpSize\s*/\s*2|\w+\s*\.\s*size\s*\(\s*\)\s*/\s*2)", strip_parens(init)) or \
            not re.fullmatch(r"%s\s*>\s*0" % re.escape(o), cond) or \
            not re.fullmatch(r"(?:{o}\s*/=\s*2|{o}\s*>>=\s*1|{o}\s*=\s*{o}\s*(?:/\s*2|>>\s*1))".format(o=re.escape(o)), upd):
        return False
    body = [ctext(src, b) for b in stmts(loop.child_by_field_name("body"))]
    ve, oe = re.escape(v), re.escape(o)
    if len(body) == 1:
        return re.fullmatch(r"%s\s*\+=\s*" % ve + _SHFL_DOWN.format(v=ve, o=oe) + r"\s*;", body[0]) is not None
    # shuffle_to_shared's exchange: park V, __syncwarp, add the slot of lane + o (own slot past the warp), __syncwarp
    if len(body) != 4:
        return False
    mp = re.fullmatch(r"(ks_xchg_\w+)\s*\[\s*ks_tid\s*\]\s*=\s*%s\s*;" % ve, body[0])
    if mp is None or not re.fullmatch(SYNCWARP_RE, body[1]) or not re.fullmatch(SYNCWARP_RE, body[3]):
        return False
    buf = re.escape(mp.group(1))
    want = (r"%s\s*\+=\s*%s\s*\[\s*\(\s*ks_tid\s*&\s*31\s*\)\s*\+\s*\(\s*%s\s*&\s*31\s*\)\s*<\s*32\s*\?\s*"
            r"ks_tid\s*\+\s*\(\s*%s\s*&\s*31\s*\)\s*:\s*ks_tid\s*\]\s*;") % (ve, buf, oe, oe)
    return re.fullmatch(want, body[2]) is not None


def shuffle_tail(src: Source, nxt: list[Node], fn: Node, arrays: set[str], value: str) -> Optional[ShuffleTail]:
    """The shuffle tail among the statements after a sequential loop whose step carries `value`."""
    names = thread_names(src, fn)
    decls = []
    k = 0
    # (tree-sitter reads `cg::thread_block_tile<32> t = ...;` as an expression statement)
    while k < len(nxt) and nxt[k].type in ("declaration", "expression_statement") and \
            re.fullmatch(r"(?:\w+\s*::\s*)*thread_block_tile\s*<\s*32\s*>\s*\w+\s*=[^;]*;", ctext(src, nxt[k])):
        decls.append(nxt[k])
        k += 1
    if k >= len(nxt):
        return None
    stmt = nxt[k]
    if stmt.type != "if_statement" or stmt.child_by_field_name("alternative") is not None:
        return None
    mc = re.fullmatch(r"(.+?)\s*<\s*32", strip_parens(ctext(src, stmt.child_by_field_name("condition"))))
    if mc is None or not is_thread(mc.group(1), names):
        return None
    body = stmts(stmt.child_by_field_name("consequence"))
    if len(body) != 2 or body[1].type != "for_statement" or not _is_shuffle_loop(src, body[1], value):
        return None
    first = ctext(src, body[0])
    mg = re.fullmatch(r"if\s*\(\s*\(?\s*(\w+)\s*>=\s*64\s*\)?\s*\)\s*\{?\s*(.+?;)\s*\}?", first)
    guard = None
    if mg:
        guard, first = mg.group(1), mg.group(2)
    ma = re.fullmatch(r"%s\s*\+=\s*(\w+)\s*\[\s*(.+?)\s*\+\s*32\s*\]\s*;" % re.escape(value), first)
    if ma is None or ma.group(1) not in arrays or not is_thread(ma.group(2), names):
        return None
    return ShuffleTail(stmt, value, ma.group(1), guard, decls)


def thread_zero_reads_only(src: Source, start: Node, fn: Node, value: str, arrays: set[str]) -> Optional[list[Node]]:
    """After `start`: `value` is written nowhere and read only inside `if (T == 0)` statements (T a
    spelling of threadIdx.x), the arrays are not touched; those if statements, else None."""
    names = thread_names(src, fn)
    rest = rest_of_function(src, start, fn)
    if any(re.search(r"\b%s\b" % re.escape(a), rest) for a in arrays):
        return None
    if re.search(r"(?:\b%s\s*(?:[-+*/%%&|^]|<<|>>)?=(?!=)|\+\+\s*%s\b|--\s*%s\b|\b%s\s*(?:\+\+|--))"
                 % ((re.escape(value),) * 4), rest):
        return None
    body = fn.child_by_field_name("body")
    guards = []
    for n in src.nodes("identifier", within=body):
        if n.start_byte < start.end_byte or src.code[n.start_byte:n.end_byte].decode() != value:
            continue
        g = enclosing(n, "if_statement")
        while g is not None:
            c = strip_parens(ctext(src, g.child_by_field_name("condition")))
            m = re.fullmatch(r"(.+?)\s*==\s*0", c)
            if m and is_thread(m.group(1), names):
                break
            g = enclosing(g.parent, "if_statement") if g.parent is not None else None
        if g is None:
            return None
        if all(x.start_byte != g.start_byte for x in guards):
            guards.append(g)
    return guards
