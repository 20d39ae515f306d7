"""Node helpers over a parsed CUDA `Source`, shared by both halves of the operators.

Text of a node (`raw`, comment-free `code`), lines and indentation, identifiers and top-level
splitting of expression text, compile-time integers, kernels / device functions / launches and
their literal block sizes, index declarations, pointer parameters and the subscripts through them,
loop headers (`loop_var`, trip counts), writes and declarations inside a node, the scope-aware
`FunctionIndex` of one function's variables, and token-level renaming. Nothing here rewrites
code: edits are `base.Edit`s made by the operator modules.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from tree_sitter import Node

from corpora.code.nodes import call_name, declarator_name, declarator_shape, same
from corpora.code.source import Source
from mining.carriers import LOAD_INTRINSICS, global_load_expr
from mining.operators.base import Edit
from corpora.code.parse import FunctionSig, text, walk

WARP = 32


def raw(src: Source, node: Node) -> str:
    return src.raw[node.start_byte:node.end_byte].decode("utf-8", "replace")


def code(src: Source, node: Node) -> str:
    """Comment-free text of a node, whitespace collapsed."""
    return " ".join(src.code[node.start_byte:node.end_byte].decode("utf-8", "replace").split())


def line_start(src: Source, byte: int) -> int:
    return src.raw.rfind(b"\n", 0, byte) + 1


def indent_at(src: Source, byte: int) -> str:
    a = line_start(src, byte)
    m = re.match(rb"[ \t]*", src.raw[a:])
    return m.group(0).decode() if m else ""


def at_line_start(src: Source, node: Node) -> bool:
    return not src.raw[line_start(src, node.start_byte):node.start_byte].strip()


def idents(s: str) -> set[str]:
    return set(re.findall(r"\b[A-Za-z_]\w*\b", s))


def mentions(s: str, name: str) -> bool:
    return re.search(r"\b%s\b" % re.escape(name), s) is not None


def split_top(s: str, sep: str) -> list[str]:
    """Split at `sep` outside parentheses/brackets."""
    parts, depth, cur, i = [], 0, "", 0
    while i < len(s):
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if depth == 0 and s.startswith(sep, i):
            parts.append(cur)
            cur = ""
            i += len(sep)
            continue
        cur += c
        i += 1
    parts.append(cur)
    return [p.strip() for p in parts]


def strip_parens(s: str) -> str:
    s = s.strip()
    while s.startswith("(") and s.endswith(")"):
        depth = 0
        for i, c in enumerate(s):
            depth += c == "("
            depth -= c == ")"
            if depth == 0 and i < len(s) - 1:
                return s
        s = s[1:-1].strip()
    return s


def reindent(block: str, ind: str, first: bool = False) -> str:
    """Shift a block of lines so its least-indented continuation line sits at `ind` (the first
    line, which starts mid-line in a node's text, is prefixed with `ind` only when `first`)."""
    lines = block.split("\n")
    rest = [ln for ln in lines[1:] if ln.strip()]
    cut = min((len(ln) - len(ln.lstrip(" \t")) for ln in rest), default=0)
    head = lines[0].strip()
    if rest and first:
        # the first line is at the block's base indentation (a statement that starts a line)
        cut = min(cut, min(len(ln) - len(ln.lstrip(" \t")) for ln in rest))
    out = [(ind if first else "") + head]
    for ln in lines[1:]:
        out.append(ind + ln[cut:] if ln.strip() else "")
    return "\n".join(out)


def block_body(body_text: str, ind: str) -> str:
    """A loop body's statements (braces dropped) re-indented to `ind`, one per line."""
    t = body_text.strip()
    if t.startswith("{") and t.endswith("}"):
        t = t[1:-1].strip("\n").rstrip()
        lines = [ln for ln in t.split("\n")]
        cut = min((len(ln) - len(ln.lstrip(" \t")) for ln in lines if ln.strip()), default=0)
        return "\n".join(ind + ln[cut:] if ln.strip() else "" for ln in lines)
    return reindent(t, ind, first=True)


def int_value(src: Source, expr: str) -> Optional[int]:
    """A compile-time integer (literals and object-like macros), else None."""
    e = src.expand(expr.strip())
    e = re.sub(r"(?<=\d)[uUlL]+\b", "", e)
    if not re.fullmatch(r"[\d\s()+\-*/%<>]+", e):
        return None
    try:
        v = eval(e.replace("/", "//"), {"__builtins__": {}}, {})  # digits and operators only
    except Exception:
        return None
    return int(v) if isinstance(v, int) else None


@dataclass
class Kernel:
    sig: FunctionSig
    node: Node
    body: Node

    @property
    def name(self) -> str:
        return self.sig.name


def kernels(src: Source) -> list[Kernel]:
    out = []
    for f in src.funcs:
        if not f.is_kernel:
            continue
        fn = src.func_node(f)
        body = fn.child_by_field_name("body") if fn is not None else None
        if body is not None:
            out.append(Kernel(f, fn, body))
    return out


def device_functions(src: Source) -> list[tuple[FunctionSig, Node]]:
    out = []
    for f in src.funcs:
        fn = src.func_node(f)
        if fn is None:
            continue
        body = fn.child_by_field_name("body")
        head = src.code[f.start_byte:(body.start_byte if body is not None else f.end_byte)]
        if f.is_kernel or b"__device__" in head:
            out.append((f, fn))
    return out


def param_nodes(fn: Node) -> list[Node]:
    decl = next((d for d in walk(fn) if d.type == "function_declarator"), None)
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    return [c for c in (plist.named_children if plist else []) if c.type == "parameter_declaration"]


@dataclass
class Launch:
    call: Node
    kernel: str
    grid: Node
    block: Node
    host: Optional[FunctionSig]


def launches(src: Source, kernel: Optional[str] = None) -> list[Launch]:
    out = []
    for call in src.nodes("call_expression"):
        ks = next((c for c in call.children if c.type == "kernel_call_syntax"), None)
        if ks is None:
            continue
        name = call_name(call)
        if kernel is not None and name != kernel:
            continue
        args = [c for c in ks.named_children]
        if len(args) < 2:
            continue
        out.append(Launch(call, name, args[0], args[1], src.function_at(call.start_byte)))
    return out


def kernel_launches(src: Source, kernel: str) -> list[Launch]:
    """The launches of `kernel`, templated (`k<8><<<...>>>`) and qualified (`ns::k<<<...>>>`) ones
    included."""
    return [la for la in launches(src) if la.kernel.split("<", 1)[0].split("::")[-1].strip() == kernel]


def block_dim3_args(src: Source, launch: Launch) -> Optional[str]:
    """The argument text of a launch's block when it is a dim3: `dim3(x, y)` / `dim3{x, y}` in place, or
    one declarator of the host's `dim3 a(..), b(..);` (`b(x, y)`, `b{x, y}` or `b = dim3(x, y)`)."""
    b = code(src, launch.block)
    m = re.fullmatch(r"dim3\s*[({](.*)[)}]", b, re.S)
    if m:
        return m.group(1)
    args = None
    if re.fullmatch(r"\w+", b) and launch.host is not None:
        host = src.func_code(launch.host).decode("utf-8", "replace")
        for decl in re.findall(r"\bdim3\s+([^;]*);", host):
            for d in split_top(decl, ","):
                mm = re.fullmatch(r"\s*%s\s*(?:\((.*)\)|\{(.*)\}|=\s*dim3\s*\((.*)\))\s*" % re.escape(b), d, re.S)
                if mm:
                    args = next(g for g in mm.groups() if g is not None)
    return args


def block_dims(src: Source, launch: Launch) -> Optional[tuple[int, int, int]]:
    """Literal block dimensions of a launch: `256`, `THREADS`, or a `dim3 block(16, 16)` variable."""
    v = int_value(src, code(src, launch.block))
    if v is not None:
        return (v, 1, 1)
    args = block_dim3_args(src, launch)
    if args is None:
        return None
    vals = [int_value(src, a) for a in split_top(args, ",")]
    if not vals or any(v is None for v in vals) or len(vals) > 3:
        return None
    vals = vals + [1] * (3 - len(vals))
    return (vals[0], vals[1], vals[2])


def grid_is_scalar(src: Source, launch: Launch) -> bool:
    """True when the grid argument is a scalar expression (not a dim3)."""
    g = code(src, launch.grid)
    if re.match(r"dim3\b", g):
        return False
    if re.fullmatch(r"\w+", g) and launch.host is not None:
        host = src.func_code(launch.host).decode("utf-8", "replace")
        if re.search(r"\bdim3\s+%s\b" % re.escape(g), host):
            return False
    return True


_CAST = r"\(\s*(?:long\s+long|unsigned\s+long\s+long|size_t|int64_t|uint64_t|int|unsigned(?:\s+int)?|long)\s*\)"


def global_index_axis(expr: str) -> Optional[str]:
    """'x' / 'y' / 'z' when `expr` is `blockIdx.A * blockDim.A + threadIdx.A` (casts allowed)."""
    e = re.sub(_CAST, "", expr)
    e = re.sub(r"\s+", "", e)
    e = strip_parens(e)
    for a in "xyz":
        forms = {f"blockIdx.{a}*blockDim.{a}+threadIdx.{a}", f"blockDim.{a}*blockIdx.{a}+threadIdx.{a}",
                 f"threadIdx.{a}+blockIdx.{a}*blockDim.{a}", f"threadIdx.{a}+blockDim.{a}*blockIdx.{a}"}
        if e in forms:
            return a
    return None


def type_before(decl: str, name: str) -> str:
    m = re.search(r"\b%s\b" % re.escape(name), decl)
    return decl[:m.start()].strip() if m else ""


@dataclass
class IndexDecl:
    stmt: Node  # the declaration statement
    name: str
    type: str
    value: Node
    axis: str


def index_decls(src: Source, k: Kernel) -> list[IndexDecl]:
    """Top-level `T v = blockIdx.A * blockDim.A + threadIdx.A;` declarations of a kernel body."""
    out = []
    for st in k.body.named_children:
        if st.type != "declaration":
            continue
        inits = [c for c in st.named_children if c.type == "init_declarator"]
        if len(inits) != 1:
            continue
        d = inits[0]
        name_node, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
        if name_node is None or value is None or name_node.type != "identifier":
            continue
        axis = global_index_axis(code(src, value))
        if axis is None:
            continue
        ty = type_before(code(src, st), text(name_node))
        out.append(IndexDecl(st, text(name_node), ty, value, axis))
    return out


def statements(body: Node) -> list[Node]:
    return [c for c in body.named_children if c.type != "comment"]


def has(src: Source, node: Node, pattern: str) -> bool:
    return re.search(pattern, code(src, node)) is not None


def pointer_params(sig: FunctionSig) -> dict[str, Any]:
    return {p.name: p for p in sig.params if p.is_pointer}


def local_pointers(src: Source, k: Kernel) -> dict[str, tuple[str, bool]]:
    """Local pointers initialised from pointer parameters: name -> (element type, const)."""
    params = pointer_params(k.sig)
    out: dict[str, tuple[str, bool]] = {n: (p.base_type, p.const) for n, p in params.items() if p.pointer_depth == 1}
    for decl in src.nodes("declaration", within=k.body):
        c = code(src, decl)
        if "__shared__" in c:
            continue
        for d in decl.named_children:
            if d.type != "init_declarator":
                continue
            inner, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
            if inner is None or value is None or inner.type != "pointer_declarator":
                continue
            name = declarator_name(inner)
            if not name or not (idents(text(value)) & set(out)):
                continue
            if "reinterpret_cast" in text(value):
                continue
            m = re.match(r"^(const\s+)?((?:unsigned\s+)?\w+)\s*(const\s*)?\*", c)
            if m:
                out[name] = (m.group(2), bool(m.group(1)))
    return out


def subscripts_of(src: Source, within: Node, names: Iterable[str]) -> list[Node]:
    names = set(names)
    out = []
    for sub in src.nodes("subscript_expression", within=within):
        arg = sub.child_by_field_name("argument")
        if arg is not None and arg.type == "identifier" and text(arg) in names:
            out.append(sub)
    return out


def sub_index(sub: Node) -> str:
    idx = sub.child_by_field_name("indices")
    return text(idx)[1:-1].strip() if idx is not None else ""


def sub_base(sub: Node) -> str:
    arg = sub.child_by_field_name("argument")
    return text(arg) if arg is not None else ""


def is_lhs(node: Node) -> bool:
    p = node.parent
    while p is not None and p.type == "parenthesized_expression":
        node, p = p, p.parent
    if p is None:
        return False
    if p.type == "assignment_expression":
        left = p.child_by_field_name("left")
        return left is not None and left.start_byte == node.start_byte and left.end_byte == node.end_byte
    return p.type == "update_expression"


def address_taken(node: Node) -> bool:
    p = node.parent
    return p is not None and p.type == "pointer_expression" and p.children and p.children[0].type == "&"


def in_ldg(node: Node) -> Optional[Node]:
    """The `__ldg(&p[i])` call around a subscript, if any."""
    p = node.parent
    if p is None or p.type != "pointer_expression" or not p.children or p.children[0].type != "&":
        return None
    a = p.parent
    if a is None or a.type != "argument_list":
        return None
    c = a.parent
    return c if c is not None and c.type == "call_expression" and call_name(c) in LOAD_INTRINSICS else None


def ensure_helper(src: Source, name: str, helper: str) -> list[Edit]:
    """Insert a file-scope helper after the last #include (once)."""
    if re.search(rb"\b" + name.encode() + rb"\s*\(", src.code) and (b"ks-optimize helper: " + name.encode()) in src.raw:
        return []
    pos = 0
    for m in re.finditer(rb"(?m)^[ \t]*#[ \t]*include[^\n]*\n", src.raw):
        pos = m.end()
    return [Edit(pos, pos, "\n" + helper.strip("\n") + "\n" if pos else helper.strip("\n") + "\n\n")]


def loop_var(src: Source, loop: Node) -> Optional[tuple[str, str, str]]:
    """(type, name, init value) of `for (T v = init; ...)`."""
    init = loop.child_by_field_name("initializer")
    if init is None or init.type != "declaration":
        return None
    ds = [c for c in init.named_children if c.type == "init_declarator"]
    if len(ds) != 1:
        return None
    n, v = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
    if n is None or v is None or n.type != "identifier":
        return None
    return type_before(code(src, init), text(n)), text(n), raw(src, v)


def unit_update(src: Source, loop: Node, var: str) -> bool:
    upd = loop.child_by_field_name("update")
    u = re.sub(r"\s+", "", code(src, upd)) if upd is not None else ""
    return u in (f"++{var}", f"{var}++", f"{var}+=1", f"{var}={var}+1")


def const_trip(src: Source, loop: Node) -> bool:
    """A loop with a compile-time trip count (literal start and bound, fixed step)."""
    lv = loop_var(src, loop)
    cond, upd = loop.child_by_field_name("condition"), loop.child_by_field_name("update")
    if lv is None or cond is None or upd is None or int_value(src, lv[2]) is None:
        return False
    m = re.fullmatch(r"%s\s*(<|<=|>|>=)\s*(.+)" % re.escape(lv[1]), code(src, cond))
    u = re.sub(r"\s+", "", code(src, upd))
    return bool(m) and int_value(src, m.group(2)) is not None and \
        re.fullmatch(r"(\+\+|--)%s|%s(\+\+|--)|%s(\+=|-=|>>=|<<=|\*=)\d+" % ((re.escape(lv[1]),) * 3), u) is not None


def const_stride(src: Source, loop: Node, var: str) -> bool:
    upd = loop.child_by_field_name("update")
    u = re.sub(r"\s+", "", code(src, upd)) if upd is not None else ""
    m = re.fullmatch(r"%s\+=(\w+)" % re.escape(var), u)
    return bool(m) and int_value(src, m.group(1)) is not None


def loop_init_value(loop: Node) -> Node:
    init = loop.child_by_field_name("initializer")
    d = next(c for c in init.named_children if c.type == "init_declarator")
    return d.child_by_field_name("value")


def returns_or_syncs(src: Source, node: Node) -> bool:
    c = code(src, node)
    return bool(re.search(r"\breturn\b|__syncthreads|__syncwarp|\bgoto\b", c))


def has_loop(node: Node) -> bool:
    return any(n.type in ("for_statement", "while_statement", "do_statement") for n in walk(node))


def bare_jumps(src: Source, node: Node) -> bool:
    """A break/continue that is not inside a loop or switch within `node`."""
    for n in walk(node):
        if n.type in ("break_statement", "continue_statement"):
            p = n.parent
            inner = False
            while p is not None and p is not node and not (p.start_byte == node.start_byte and p.end_byte == node.end_byte):
                if p.type in ("for_statement", "while_statement", "do_statement") or \
                        (p.type == "switch_statement" and n.type == "break_statement"):
                    inner = True
                    break
                p = p.parent
            if not inner:
                return True
    return False


def written_names(src: Source, node: Node) -> set[str]:
    out = set()
    for n in walk(node):
        if n.type == "assignment_expression":
            left = n.child_by_field_name("left")
            if left is not None:
                out.add(base_name(left))
        elif n.type == "update_expression":
            arg = n.child_by_field_name("argument")
            if arg is not None:
                out.add(base_name(arg))
        elif n.type == "init_declarator":
            d = n.child_by_field_name("declarator")
            if d is not None:
                nm = declarator_name(d)
                if nm:
                    out.add(nm)
    out.discard("")
    return out


def base_name(node: Node) -> str:
    while node is not None:
        if node.type == "identifier":
            return text(node)
        if node.type == "subscript_expression":
            node = node.child_by_field_name("argument")
        elif node.type == "field_expression":
            node = node.child_by_field_name("argument")
        elif node.type in ("parenthesized_expression", "pointer_expression"):
            node = node.named_children[-1] if node.named_children else None
        else:
            return ""
    return ""


def declared_within(src: Source, node: Node) -> set[str]:
    out = set()
    for n in walk(node):
        if n.type in ("init_declarator", "declaration", "parameter_declaration"):
            if n.type == "declaration":
                for d in n.named_children:
                    nm = declarator_name(d) if d.type not in ("primitive_type", "type_identifier", "type_qualifier",
                                                              "sized_type_specifier") else None
                    if nm:
                        out.add(nm)
            elif n.type == "init_declarator":
                d = n.child_by_field_name("declarator")
                nm = declarator_name(d) if d is not None else None
                if nm:
                    out.add(nm)
    return out


_TOKEN = re.compile(r"threadIdx\s*\.\s*[xyz]\b|blockIdx\s*\.\s*[xyz]\b|blockDim\s*\.\s*[xyz]\b|gridDim\s*\.\s*[xyz]\b|"
                    r"[A-Za-z_]\w*|\d[\w.]*|<<=|>>=|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^]=|\S")


def tokens(s: str) -> list[tuple[str, int, int]]:
    return [(re.sub(r"\s+", "", m.group(0)), m.start(), m.end()) for m in _TOKEN.finditer(s)]


def _is_name(toks: list[tuple[str, int, int]], i: int) -> bool:
    """Token i is a whole identifier (not a member after `.` / `->`, not qualified after `::`)."""
    return bool(re.fullmatch(r"[A-Za-z_]\w*", toks[i][0])) and (i == 0 or toks[i - 1][0] not in (".", "->", "::"))


def identifiers(s: str) -> set[str]:
    toks = tokens(s)
    return {toks[i][0] for i in range(len(toks)) if _is_name(toks, i)}


def rename_identifiers(s: str, names: dict[str, str]) -> str:
    """Replace whole identifiers by `names`; everything else, spacing included, stays."""
    toks = tokens(s)
    out, pos = [], 0
    for i, (t, a, b) in enumerate(toks):
        if t in names and _is_name(toks, i):
            out += [s[pos:a], names[t]]
            pos = b
    out.append(s[pos:])
    return "".join(out)


def norm(s: str) -> str:
    return " ".join(t for t, _, _ in tokens(s))


@dataclass
class Var:
    name: str
    decl: Node  # declaration / parameter_declaration
    declarator: Node
    value: Optional[Node]  # initializer expression
    container: Node  # the scope it is visible in
    kind: str  # param | local | for
    shape: str  # scalar | array | pointer
    assigned: list[Node] = field(default_factory=list)  # assignment / update expressions writing it


class FunctionIndex:
    """Declarations and assignments of one function (lambdas included), scope-aware."""

    def __init__(self, src: Source, fn: Node):
        self.src, self.fn = src, fn
        self.vars: list[Var] = []
        for n in walk(fn):
            if n.type == "parameter_declaration":
                container = n.parent.parent if n.parent is not None else None
                while container is not None and container.type not in ("function_definition", "lambda_expression"):
                    container = container.parent
                if container is None:
                    continue
                d = n.child_by_field_name("declarator")
                if d is not None:
                    nm, shape = declarator_shape(d)
                    if nm:
                        self.vars.append(Var(nm, n, d, None, container, "param", shape))
            elif n.type == "declaration":
                p = n.parent
                kind = "for" if p is not None and p.type == "for_statement" else "local"
                for d in n.named_children:
                    if d.type not in ("identifier", "init_declarator", "array_declarator", "pointer_declarator",
                                      "reference_declarator"):
                        continue
                    nm, shape = declarator_shape(d)
                    value = d.child_by_field_name("value") if d.type == "init_declarator" else None
                    if nm:
                        self.vars.append(Var(nm, n, d, value, p, kind, shape))
        for n in walk(fn):
            target = None
            if n.type == "assignment_expression":
                target = n.child_by_field_name("left")
            elif n.type == "update_expression":
                target = n.child_by_field_name("argument")
            if target is None:
                continue
            base = target
            while base.type in ("subscript_expression", "field_expression", "parenthesized_expression"):
                base = base.child_by_field_name("argument") if base.type != "parenthesized_expression" else \
                    base.named_children[0]
            if base.type == "identifier":
                v = self.visible(text(base), base.start_byte)
                if v is not None:
                    v.assigned.append(n)

    def visible(self, name: str, at: int) -> Optional[Var]:
        best = None
        for v in self.vars:
            if v.name != name or not (v.container.start_byte <= at < v.container.end_byte):
                continue
            if v.kind != "param" and v.declarator.start_byte > at:
                continue
            if best is None or v.container.start_byte >= best.container.start_byte:
                best = v
        return best

    def single_assignment(self, v: Var) -> bool:
        return not v.assigned

    def loop_of(self, v: Var) -> Optional[Node]:
        """The for loop whose induction variable `v` is (declared in the initializer, written only in
        the update clause), else None."""
        if v.kind != "for":
            return None
        loop = v.container
        upd = loop.child_by_field_name("update")
        if upd is None:
            return None
        for a in v.assigned:
            if not (upd.start_byte <= a.start_byte and a.end_byte <= upd.end_byte):
                return None
        return loop


def loops_around(node: Node, stop: Optional[Node] = None) -> list[Node]:
    out, p = [], node.parent
    while p is not None and (stop is None or not same(p, stop)):
        if p.type in ("for_statement", "while_statement", "do_statement"):
            out.append(p)
        p = p.parent
    return out


def subscript_chain(ident: Node) -> tuple[Node, list[Node]]:
    """The outermost subscript expression over an identifier and its index expressions (outer first)."""
    node, idx = ident, []
    while node.parent is not None and node.parent.type == "subscript_expression" and \
            same(node.parent.child_by_field_name("argument"), node):
        node = node.parent
        ind = node.child_by_field_name("indices")
        inner = [c for c in ind.named_children if c.type != "comment"] if ind is not None else []
        idx.append(inner[0] if len(inner) == 1 else None)
    return node, idx


def reads_global(src: Source, fn: Node, vtext: str) -> bool:
    f = src.function_at(fn.start_byte)
    if f is None:
        return False
    if re.search(r"\b(__ldca|__ldlu)\s*\(", vtext):
        return True
    return global_load_expr(src, f, vtext)
