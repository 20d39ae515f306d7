"""The independent judge of what a backward walk removed from a real expert.

A human optimization step (``corpora/real/*/*/lineage.toml``: ``[[versions.steps]]`` with an
``observe`` list) counts as *undone* by the walk only when observations that the walk's own
operators and carrier detectors never produce say it is gone. Two kinds of observation:

* from the gate's static stage (nvcc + ptxas + cuobjdump), summed over the kernels of a file:
  ``sass:OPCODE`` (count of SASS instructions matching OPCODE), ``smem`` (static shared bytes from
  ptxas + the largest dynamic size a launch site passes), ``registers`` (max per thread),
  ``ffma_per_load`` (FFMA/HFMA2/DFMA instructions per LDG/LDS instruction);
* a stated structural check where SASS cannot tell: ``coalesced:ARRAY`` (the innermost global
  access to ARRAY, evaluated for lanes 0..31 of threadIdx.x with everything else fixed, moves
  by one element per lane, or by the vector width when the access sits inside a vector
  cast / macro call);
* ``loops`` (backward branches in the SASS: loops the compiler kept) and ``bits:OP:N`` (OP
  instructions, e.g. ``LDG``, that move exactly N bits per thread: ``bits:LDG:32`` counts the
  32-bit loads of half2 pairs, which ``sass:LDG.E`` cannot separate from 16-bit loads);
* ``loops:OP`` (loops whose body holds an OP instruction: ``loops:LDG`` counts the loops that read
  global memory, as a grid-stride loop does and a shared-memory tree loop does not);
* ``half2`` (two-lane half arithmetic: HADD2/HMUL2/HFMA2 on both halves of a register; scalar
  half math compiles to the same opcodes on one lane, ``R2.H0_H0``, so ``sass:HADD2`` cannot tell
  packed math from scalar) and ``launch_bounds`` (kernels compiled with a thread bound: the cubin's
  EIATTR_MAX_THREADS, which ``__launch_bounds__`` sets even where ptxas figures stay the same);
* ``X@KERNEL`` for any count X above (``fewer:`` included): the same figure over the kernels whose
  name holds KERNEL only, for a step that lives in one kernel of a file with several (a version
  without such a kernel counts 0; launch sizes stay per file);
* ``fewer:X`` for any numeric X above: the step *removes* something (an integer division, the
  naive's global atomics), so it is present when the count goes down and undone when it comes back;
* ``none:REASON``: no independent observation (the step counts as unobservable, never undone).

``sass:OPCODE`` matching: the opcode's first dot-separated token equals OPCODE's, and OPCODE's
further tokens appear in the opcode in order (``LDG.E.128`` matches ``LDG.E.128.CONSTANT``,
``SHFL`` matches ``SHFL.BFLY``, ``LDG.E.CONSTANT`` matches ``LDG.E.128.CONSTANT``): the spec's
dot-separated prefix, with modifiers the compiler inserts in between allowed.

Each step is judged where the lineage puts it: *before* = the version preceding the step's version,
*after* = the step's version. A padding column or a second shared stage shows as 128 more bytes
over the version before, not over a naive kernel that has no shared memory at all. When the step's
own version does not show an observation (a later version rewrote the code), the judge falls back
to naive vs expert for it. The observation records which pair it compared (``compared``).

Per observation, before / after / end point values are compared (fields ``naive`` / ``expert`` /
``end`` hold the compared pair's values):
``present`` (the step is visible in the expert): expert > naive (``ffma_per_load``: expert >= 1.5x
naive; ``coalesced``: the expert's access is coalesced); ``undone``: end <= naive (``ffma_per_load``:
end < 1.5x naive; ``coalesced``: the end point's access is not). An observation not present in the
expert cannot speak. A step is ``undone`` when at least one observation is present and every
present observation says undone; ``kept`` when a present observation says kept; otherwise
``unobservable`` (the reason names the observations that did not show the step in the expert).
"""
from __future__ import annotations

import re
import zlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Optional

from tree_sitter import Node

from corpora.code.source import Source, expand_macro
from corpora.real import OBSERVATION, VOCABULARY
from corpora.code.parse import parse_cuda, text, walk

FFMA_PREFIXES = ("FFMA", "HFMA2", "DFMA", "FFMA2")
LOAD_PREFIXES = ("LDG", "LDS")
FFMA_FACTOR = 1.5
_WIDTH_TOKENS = {"U8": 8, "S8": 8, "U16": 16, "S16": 16, "64": 64, "128": 128}


class JudgeError(Exception):
    """An observation string outside the vocabulary, or a source the judge cannot read."""


def check_observation(obs: str) -> None:
    """The lineage files' grammar (corpora/real.py), one definition for the loader and the judge."""
    if not OBSERVATION.match(obs):
        raise JudgeError(f"observation {obs!r} is not in the judge's vocabulary ({VOCABULARY})")


# --------------------------------------------------------------------------- static facts
@dataclass
class Facts:
    """What the static stage and the source say about one kernel file."""
    arch: str = ""
    sass: dict[str, int] = field(default_factory=dict)
    registers: int = 0
    smem_static: int = 0
    smem_dynamic: int = 0
    loops: Optional[int] = None  # None: a static result recorded before loops were counted
    loop_ops: Optional[dict[str, int]] = None  # opcode family -> loops holding one (static-5)
    half2: Optional[int] = None  # None: recorded before two-lane half math was counted (static-3)
    launch_bounds: Optional[int] = None  # kernels compiled with a thread bound (static-3)
    sass_available: bool = False
    static_ok: bool = False
    reason: str = ""
    source: str = ""
    static: dict[str, Any] = field(default_factory=dict, repr=False)  # the stage result, for scoped figures

    @property
    def smem(self) -> int:
        return self.smem_static + self.smem_dynamic

    def sass_count(self, pattern: str) -> int:
        return sum(n for op, n in self.sass.items() if opcode_matches(op, pattern))

    def bits_count(self, family: str, bits: int) -> int:
        """Instructions of ``family`` (first opcode token) that move exactly ``bits`` per thread."""
        return sum(n for op, n in self.sass.items() if op.split(".")[0] == family and access_bits(op) == bits)

    @property
    def ffma_per_load(self) -> float:
        ffma = sum(n for op, n in self.sass.items() if op.split(".")[0] in FFMA_PREFIXES)
        loads = sum(n for op, n in self.sass.items() if op.split(".")[0] in LOAD_PREFIXES)
        return ffma / loads if loads else float(ffma)

    def summary(self) -> dict[str, Any]:
        return {"arch": self.arch, "registers": self.registers, "smem": self.smem, "smem_static": self.smem_static,
                "smem_dynamic": self.smem_dynamic, "ffma_per_load": round(self.ffma_per_load, 3),
                "sass_total": sum(self.sass.values()), "loops": self.loops, "half2": self.half2,
                "launch_bounds": self.launch_bounds, "static_ok": self.static_ok, "reason": self.reason}


def opcode_matches(opcode: str, pattern: str) -> bool:
    have, want = opcode.split("."), pattern.split(".")
    if have[0] != want[0]:
        return False
    it = iter(have[1:])
    return all(any(tok == w for tok in it) for w in want[1:])


def access_bits(opcode: str) -> int:
    """Width of a memory instruction from its modifiers: .U8/.S8, .U16/.S16, .64, .128; none = 32."""
    for tok in opcode.split(".")[1:]:
        if tok in _WIDTH_TOKENS:
            return _WIDTH_TOKENS[tok]
    return 32


def facts_from_static(static: dict[str, Any], source: str, arch: Optional[str] = None,
                      kernel: Optional[str] = None) -> Facts:
    """Aggregate the static stage's per-kernel figures of one file (sum of SASS counts, max of
    registers and static shared memory) and add the dynamic shared memory its launches pass;
    with `kernel`, over the kernels whose (demangled) name holds that identifier only."""
    facts = Facts(source=source, smem_dynamic=dynamic_smem(source), static=static or {})
    archs = static.get("archs", {}) if static else {}
    if not archs:
        facts.reason = (static or {}).get("reason", "no static stage result")
        return facts
    arch = arch if arch in archs else sorted(archs)[-1]
    r = archs[arch]
    facts.arch = arch
    if not r.get("ok", False):
        facts.reason = r.get("reason", "static stage failed")
        return facts
    facts.static_ok = True
    facts.sass_available = bool(r.get("sass_available"))
    total: Counter = Counter()
    kernels = [k for name, k in r.get("kernels", {}).items()
               if kernel is None or re.search(r"\b%s\b" % re.escape(kernel), name)]
    def counted(key: str) -> bool:  # a result recorded before the static stage counted `key` has none
        return facts.sass_available and bool(kernels or kernel) and all(key in k for k in kernels if "sass" in k)

    if counted("loops"):
        facts.loops = sum(int(k.get("loops", 0)) for k in kernels)
    if counted("loop_ops"):
        facts.loop_ops = dict(sum((Counter(k.get("loop_ops", {})) for k in kernels), Counter()))
    if counted("half2"):
        facts.half2 = sum(int(k.get("half2", 0)) for k in kernels)
        facts.launch_bounds = sum(1 for k in kernels if int(k.get("max_threads", 0)) > 0)
    for k in kernels:
        total.update(k.get("sass", {}))
        facts.registers = max(facts.registers, int(k.get("registers", 0)))
        facts.smem_static = max(facts.smem_static, int(k.get("smem_static", 0)))
    facts.sass = dict(total)
    return facts


def static_facts(problem_dir: Path, source: str, store: Optional[Path] = None, arch: str = "sm_90",
                 timeout_s: float = 180.0) -> Facts:
    """Run (or read from the gate cache) the static stage of ``source`` in a problem folder."""
    from mining.gate import BadInput, GateConfig, run_gate

    cfg = GateConfig(executor="cpu", stages=("static",), archs=(arch,), store=store, timeout_s=timeout_s)
    try:
        res = run_gate(Path(problem_dir), None, cfg, source=source).to_dict()
    except BadInput as exc:
        return Facts(source=source, reason=str(exc), smem_dynamic=dynamic_smem(source))
    return facts_from_static(res.get("stages", {}).get("static", {}), source, arch)


# --------------------------------------------------------------------------- integer evaluator
class _Unknown(Exception):
    pass


_TYPE_SIZES = {"float": 4, "int": 4, "unsigned": 4, "uint32_t": 4, "int32_t": 4, "double": 8, "half": 2,
               "__half": 2, "__nv_bfloat16": 2, "float4": 16, "float2": 8, "int4": 16, "half2": 4, "__half2": 4,
               "long": 8, "int64_t": 8, "size_t": 8, "char": 1, "int8_t": 1, "uint8_t": 1, "short": 2}
_BUILTINS = {"threadIdx.y": 1, "threadIdx.z": 0, "blockIdx.x": 3, "blockIdx.y": 2, "blockIdx.z": 1,
             "blockDim.x": 256, "blockDim.y": 1, "blockDim.z": 1, "gridDim.x": 64, "gridDim.y": 64, "gridDim.z": 1,
             "warpSize": 32}


@lru_cache(maxsize=4096)
def _parse_expr(expr: str) -> Optional[Node]:
    tree = parse_cuda(f"long __ks_v = ({expr});\n".encode())
    for n in walk(tree.root_node):
        if n.type == "init_declarator":
            return n.child_by_field_name("value")
    return None


class _Evaluator:
    """Integer values of index expressions inside one function: locals resolved through their
    nearest preceding declaration (loop variables start at their initial value), macros expanded,
    kernel parameters and other unknown names fixed per name (the same for every lane)."""

    def __init__(self, src: Source, fn: Optional[Node]):
        self.src = src
        self.decls: dict[str, list[tuple[int, Node]]] = {}
        if fn is not None:
            for n in walk(fn):
                if n.type == "init_declarator":
                    d, v = n.child_by_field_name("declarator"), n.child_by_field_name("value")
                    while d is not None and d.type not in ("identifier",):
                        d = d.child_by_field_name("declarator")
                    if d is not None and v is not None:
                        self.decls.setdefault(text(d), []).append((n.start_byte, v))
        self.macros = dict(src.defines)
        self.fmacros = src.function_macros

    def value(self, node: Node, env: dict[str, int], pos: int, depth: int = 0) -> int:
        if depth > 60:
            raise _Unknown("too deep")
        t = node.type
        if t == "number_literal":
            s = text(node).lower().rstrip("ul")
            if re.fullmatch(r"0x[0-9a-f]+", s):
                return int(s, 16)
            if re.fullmatch(r"\d+", s):
                return int(s)
            raise _Unknown(f"non-integer literal {s}")
        if t in ("parenthesized_expression", "cast_expression"):
            inner = node.child_by_field_name("value") or next((c for c in node.named_children
                                                               if c.type not in ("type_descriptor", "comment")), None)
            if inner is None:
                raise _Unknown("empty")
            return self.value(inner, env, pos, depth + 1)
        if t == "field_expression":
            key = "".join(text(node).split())
            if key in env:
                return env[key]
            if key in _BUILTINS:
                return _BUILTINS[key]
            raise _Unknown(f"field {key}")
        if t == "identifier":
            name = text(node)
            if name in env:
                return env[name]
            cands = [v for start, v in self.decls.get(name, []) if start < pos]
            if cands:
                return self.value(cands[-1], env, pos, depth + 1)
            if name in self.macros:
                sub = _parse_expr(self.macros[name])
                if sub is None:
                    raise _Unknown(f"macro {name}")
                return self.value(sub, env, pos, depth + 1)
            if name in _BUILTINS:
                return _BUILTINS[name]
            # a kernel parameter or other runtime value: the same for every lane
            return 2048 + 256 * (zlib.crc32(name.encode()) % 8)
        if t == "binary_expression":
            op = text(node.child_by_field_name("operator"))
            a = self.value(node.child_by_field_name("left"), env, pos, depth + 1)
            b = self.value(node.child_by_field_name("right"), env, pos, depth + 1)
            return _binop(op, a, b)
        if t == "unary_expression":
            op = text(node.child_by_field_name("operator"))
            a = self.value(node.child_by_field_name("argument"), env, pos, depth + 1)
            return {"-": -a, "+": a, "~": ~a, "!": int(not a)}.get(op, a)
        if t == "conditional_expression":
            c = self.value(node.child_by_field_name("condition"), env, pos, depth + 1)
            branch = node.child_by_field_name("consequence" if c else "alternative")
            return self.value(branch, env, pos, depth + 1)
        if t == "sizeof_expression":
            ty = text(node.child_by_field_name("type") or node).replace("sizeof", "").strip("() ")
            if ty in _TYPE_SIZES:
                return _TYPE_SIZES[ty]
            raise _Unknown(f"sizeof {ty}")
        if t == "call_expression":
            fn = text(node.child_by_field_name("function"))
            args = [c for c in node.child_by_field_name("arguments").named_children if c.type != "comment"]
            if fn in ("min", "max", "std::min", "std::max", "umin", "umax") and len(args) == 2:
                a, b = (self.value(x, env, pos, depth + 1) for x in args)
                return min(a, b) if "min" in fn else max(a, b)
            if fn in self.fmacros:
                params, body = self.fmacros[fn]
                if len(params) == len(args):
                    sub = _parse_expr(expand_macro(body, params, [text(a) for a in args]))
                    if sub is not None:
                        return self.value(sub, env, pos, depth + 1)
            raise _Unknown(f"call {fn}")
        raise _Unknown(t)


def _binop(op: str, a: int, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        if b == 0:
            raise _Unknown("division by zero")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    if op == "%":
        if b == 0:
            raise _Unknown("modulo by zero")
        return a - b * _binop("/", a, b)
    if op == "<<":
        return a << b
    if op == ">>":
        return a >> b
    if op == "&":
        return a & b
    if op == "|":
        return a | b
    if op == "^":
        return a ^ b
    if op in ("<", ">", "<=", ">=", "==", "!=", "&&", "||"):
        return int({"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b, "==": a == b, "!=": a != b,
                    "&&": bool(a and b), "||": bool(a or b)}[op])
    raise _Unknown(f"operator {op}")


def dynamic_smem(source: str) -> int:
    """The largest dynamic shared-memory size a launch site passes (third launch argument),
    where it evaluates to a constant; 0 otherwise."""
    try:
        src = Source(source)
    except Exception:
        return 0
    ev = _Evaluator(src, None)
    best = 0
    for m in re.finditer(rb"<<<(.*?)>>>", src.code, re.S):
        args = _split_top(m.group(1).decode("utf-8", "replace"))
        if len(args) >= 3:
            node = _parse_expr(args[2])
            if node is None:
                continue
            try:
                best = max(best, ev.value(node, {}, m.start()))
            except (_Unknown, RecursionError):
                continue
    return best


def _split_top(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


# --------------------------------------------------------------------------- coalescing
_LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")


@dataclass
class Access:
    function: str
    line: int
    depth: int
    index: str
    strides: Optional[list[int]]  # lane-to-lane differences for lanes 0..31, None when not evaluable
    vector: bool
    coalesced: Optional[bool]
    why: str = ""


def global_accesses(source: str, array: str) -> list[Access]:
    """Every subscript ``array[...]`` inside a function where ``array`` is a pointer parameter."""
    src = Source(source)
    out = []
    for f in src.funcs:
        if array not in {p.name for p in f.params if p.is_pointer}:
            continue
        fn = src.func_node(f)
        if fn is None:
            continue
        ev = _Evaluator(src, fn)
        for n in walk(fn):
            if n.type != "subscript_expression":
                continue
            arr = n.child_by_field_name("argument")
            if arr is None or text(arr) != array:
                continue
            ind = n.child_by_field_name("indices")
            named = [c for c in (ind.named_children if ind is not None else []) if c.type != "comment"]
            if len(named) != 1:
                continue
            idx = named[0]
            depth, vector, p = 0, False, n.parent
            while p is not None and p.id != fn.id:
                if p.type in _LOOPS:
                    depth += 1
                if p.type in ("call_expression", "cast_expression") and re.search(
                        r"float[248]|u?int[248]|half2|bfloat162|LDST|FLOAT[248]|HALF2|INT[248]|128|64BITS|vec|pack",
                        text(p.child_by_field_name("function") or p.child_by_field_name("type") or p)[:120]):
                    vector = True
                p = p.parent
            try:
                vals = [ev.value(idx, {"threadIdx.x": lane}, n.start_byte) for lane in range(32)]
                strides = [b - a for a, b in zip(vals, vals[1:])]
                ok = all(s == 1 for s in strides) or (vector and len(set(strides)) == 1 and strides[0] in (2, 4, 8))
                out.append(Access(f.name, src.line_of(n.start_byte), depth, text(idx)[:160], strides, vector, ok))
            except (_Unknown, RecursionError) as exc:
                out.append(Access(f.name, src.line_of(n.start_byte), depth, text(idx)[:160], None, vector, None,
                                  why=str(exc)))
    return out


def coalesced(source: str, array: str) -> tuple[Optional[bool], str]:
    """(is the innermost global access to ``array`` unit-stride in threadIdx.x?, explanation);
    None when the array is not accessed or its index cannot be evaluated."""
    try:
        accs = global_accesses(source, array)
    except Exception as exc:  # a source tree-sitter cannot read: no verdict
        return None, f"cannot read the source ({exc.__class__.__name__})"
    if not accs:
        return None, f"no subscript of a pointer parameter named {array}"
    deepest = max(a.depth for a in accs)
    inner = [a for a in accs if a.depth == deepest]
    if any(a.coalesced is None for a in inner):
        bad = next(a for a in inner if a.coalesced is None)
        return None, f"line {bad.line}: index `{bad.index}` not evaluable ({bad.why})"
    worst = next((a for a in inner if not a.coalesced), None)
    if worst is not None:
        s = sorted(set(worst.strides or []))
        return False, f"line {worst.line}: `{array}[{worst.index}]` lane strides {s[:4]}"
    a = inner[0]
    return True, f"line {a.line}: `{array}[{a.index}]` unit stride across a warp"


# --------------------------------------------------------------------------- verdicts
@dataclass
class Observation:
    observe: str
    naive: Any = None  # the compared pair's earlier value (the version before the step, or the naive kernel)
    expert: Any = None  # ... and its later value (the step's version, or the expert)
    end: Any = None
    present: Optional[bool] = None
    undone: Optional[bool] = None
    note: str = ""
    compared: str = "naive -> expert"


@dataclass
class StepVerdict:
    carrier: str
    version: str
    note: str
    verdict: str  # undone | kept | unobservable
    reason: str
    observations: list[Observation]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StepPair:
    """The two versions around a step: the one before it and the step's own."""
    before_name: str
    before: Facts
    after_name: str
    after: Facts


def _numeric(obs: str, f: Facts) -> Optional[float]:
    if "@" in obs:  # scoped to some kernels of the file
        obs, kernel = obs.split("@", 1)
        f = facts_from_static(f.static, f.source, f.arch or None, kernel)
    if obs.startswith("sass:"):
        return f.sass_count(obs[5:]) if f.sass_available else None
    if obs.startswith("bits:"):
        _, family, bits = obs.split(":")
        return f.bits_count(family, int(bits)) if f.sass_available else None
    if obs.startswith("loops:"):
        return None if f.loop_ops is None else f.loop_ops.get(obs[6:], 0)
    # smem, registers, loops, half2, launch_bounds (None: no SASS, or recorded before it was counted)
    return getattr(f, obs)


def observe(obs: str, naive: Facts, expert: Facts, end: Facts) -> Observation:
    """One observation over (earlier, later, end point): ``naive``/``expert`` are the compared pair."""
    check_observation(obs)
    o = Observation(obs)
    if obs.startswith("none:"):
        o.note = obs[5:]
        return o
    if obs.startswith("coalesced:"):
        arr = obs.split(":", 1)[1]
        (o.naive, nn), (o.expert, ne), (o.end, nd) = (coalesced(f.source, arr) for f in (naive, expert, end))
        if o.expert is None:
            o.note = f"expert: {ne}"
            return o
        o.present = bool(o.expert)
        if not o.present:
            o.note = f"expert not coalesced: {ne}"
            return o
        if o.end is None:
            o.note = f"end point: {nd}"
            o.present = None
            return o
        o.undone = not o.end
        o.note = f"end point: {nd}"
        return o
    missing = [n for n, f in (("naive", naive), ("expert", expert), ("end point", end)) if not f.static_ok]
    if missing:
        o.note = f"no static stage for the {missing[0]}: {({'naive': naive, 'expert': expert, 'end point': end})[missing[0]].reason}"
        return o
    if obs == "ffma_per_load":
        o.naive, o.expert, o.end = (round(f.ffma_per_load, 3) for f in (naive, expert, end))
        o.present = o.expert >= FFMA_FACTOR * o.naive and o.expert > 0
        o.undone = o.end < FFMA_FACTOR * o.naive or (o.naive == 0 and o.end <= 0)
    else:
        fewer = obs.startswith("fewer:")
        inner = obs[len("fewer:"):] if fewer else obs
        o.naive, o.expert, o.end = (_numeric(inner, f) for f in (naive, expert, end))
        if None in (o.naive, o.expert, o.end):
            o.note = "no SASS (cuobjdump missing)" if inner.startswith(("sass:", "bits:")) else f"no {inner} figure"
            return o
        if fewer:  # the step removes something: present when it goes down, undone when it comes back
            o.present, o.undone = o.expert < o.naive, o.end >= o.naive
        else:
            o.present, o.undone = o.expert > o.naive, o.end <= o.naive
    if not o.present:
        o.undone = None
        o.note = "not visible in the expert (expert <= naive)" if not obs.startswith("fewer:") else \
            "not visible in the expert (expert >= naive)"
    return o


def observe_step(obs: str, naive: Facts, expert: Facts, end: Facts, pair: Optional[StepPair] = None) -> Observation:
    """An observation where the lineage puts the step (``pair``), else naive vs expert."""
    if pair is None or (pair.before is naive and pair.after is expert):
        return observe(obs, naive, expert, end)
    o = observe(obs, pair.before, pair.after, end)
    o.compared = f"{pair.before_name} -> {pair.after_name}"
    if o.present or obs.startswith("none:"):
        return o
    fallback = observe(obs, naive, expert, end)
    fallback.note = (f"{fallback.note}; " if fallback.note else "") + \
        f"{o.compared} does not show it ({o.note or 'no change'}), so naive -> expert"
    return fallback


def judge_step(carrier: str, version: str, note: str, observe_list: Iterable[str], naive: Facts, expert: Facts,
               end: Facts, pair: Optional[StepPair] = None) -> StepVerdict:
    obs = [observe_step(x, naive, expert, end, pair) for x in observe_list]
    present = [o for o in obs if o.present]
    if not present:
        why = "; ".join(f"{o.observe}: {o.note}" for o in obs) or "no observation listed"
        return StepVerdict(carrier, version, note, "unobservable", why, obs)

    def base(o: Observation) -> str:
        return o.compared.split(" -> ")[0]

    if all(o.undone for o in present):
        return StepVerdict(carrier, version, note, "undone",
                           "; ".join(f"{o.observe}: end {o.end} vs {base(o)} {o.naive}" for o in present), obs)
    kept = [o for o in present if not o.undone]
    return StepVerdict(carrier, version, note, "kept",
                       "; ".join(f"{o.observe}: end {o.end} vs {base(o)} {o.naive} (after {o.expert})"
                                 for o in kept), obs)
