"""What a skill is expected to buy on the query kernel: the value ranking of `skills query`.

Similarity says which skills look like the query; it does not say which of them would move this
kernel. Qualifiers (`__restrict__`, `#pragma unroll`, `__ldg`, ...) are in every expert, so the
skills that look most like any kernel, and that most kernels' walks produced, are the ones that
buy least. Here each applicable skill gets an *expected time ratio on this kernel*:

    gain   = the skill's effect: its measured GPU time ratio (store evidence: geometric mean and
             spread, of the query's op type and size regime where such evidence exists, else of
             any), or, with no GPU evidence, the stated static prior PRIOR[carrier][regime] below;
    here   = 1 / ((1 - c) + c / gain)   (Amdahl: only the work its sites cover, c, gets faster);
    value  = ln(here) x confidence      (a detector found the site: 1; it builds on a step the
             plan puts first: 0.9; only a similar-looking window: 0.35-0.85 by token overlap).

The kernel's *regime* (what bounds it) comes from the static stage: the query's syntax tree read
for data reuse across threads, serial per-thread loops, global atomics and transposing copies
(``KernelShape``); with a gate's static stage (SASS) or a GPU profile of the kernel, those refine
it (``refine_with_static`` / ``refine_with_profile``). Similarity (the fused rank) only breaks
ties between skills of equal value, and popularity (how many experts carried a skill) is one of
the fused modalities, so it never decides alone.

``Valuer`` (one per query) values skills; ``rank_entries`` groups them into the answer's entries
(one per carrier, the other skills of that carrier as ``variants``; qualifier carriers in one
"also" entry unless nothing structural applies), ordered by value and then by
retrieval/plan.py's order constraints (a shared tile before a register tile, ...).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from corpora.code.nodes import enclosing
from corpora.code.parse import text, walk
from mining.carriers import vector_accesses
from retrieval.applicability import (THREAD_INDEX, device_funcs, expand_index, global_accesses, int_const, local_definitions,
                                     loop_var, runtime_bound, serial_loops, thread_coords, x_stride)
from retrieval.plan import order as plan_order, predecessors

# Declarative qualifiers: a keyword, a pragma or an intrinsic in place of a plain operation, no
# restructuring. Grouped into one "also" entry. The cache hints (mining/operators/cache_hints.py:
# __ldcs, __ldcg, __stcs ...) are qualifiers of the same kind as __ldg.
CACHE_HINTS = ("streaming_load", "l2_only_load", "cache_all_load", "last_use_load", "volatile_load", "streaming_store",
               "l2_only_store", "write_through_store", "write_back_store")
QUALIFIERS = ("restrict", "unroll_pragma", "ldg", "launch_bounds", "fast_math") + CACHE_HINTS

REGIMES = {
    "reuse": "every global operand of the hot loop is re-read by other threads (a GEMM / attention shape): "
             "the problem's work grows faster than its data, so it is compute-bound once the reuse is captured "
             "and bound by redundant global traffic as written",
    "serial": "one thread walks a whole row or array in an accumulating loop: too little parallelism, latency-bound",
    "atomic": "per-element atomics on global memory into one address (a reduction): every update serializes",
    "atomic_bins": "per-element atomics into bins chosen by the data (a histogram): updates to a popular bin "
                   "serialize, and every one is a global round trip",
    "transpose": "a copy that reads rows and writes columns: one side of the traffic is strided (uncoalesced)",
    "bank": "a 2-D shared array read down a column (neighbouring lanes in its first index): the accesses of a warp "
            "fall into one bank and serialize",
    "uncoalesced": "threadIdx.x walks the strided dimension of a 2-D array while threadIdx.y walks the contiguous one: "
                   "a warp's accesses are a row apart, one transaction each",
    "memory": "each element is read O(1) times: bound by memory bandwidth",
}

# The static prior: expected time ratio (simpler / optimized) of a carrier introduced where a
# kernel in that regime lacks it, when the store holds no GPU measurement of the skill. Orders of
# magnitude, not measurements: the project's H200 corpus (eval/results/corpus_h200.json) shows
# what a whole expert buys over naive per op type (gemm 8x, layernorm 11x, softmax 13x, reduce_sum
# 29x, transpose 6.5x, elementwise 1.2-1.6x), and the structural step that removes a regime's
# bottleneck (the tile for reuse, the warp reduction for a serial row, the privatized counter for
# contended atomics, the staged tile for a transpose) carries most of it; access width and pass
# count buy tens of percent on bandwidth-bound kernels; qualifiers a few percent. "*" is every
# regime not listed; a carrier not in the table gets UNKNOWN_PRIOR.
PRIOR: dict[str, dict[str, float]] = {
    # data reuse
    "shared_tile": {"reuse": 3.0, "transpose": 3.0, "*": 1.1},
    "register_tile": {"reuse": 2.5, "*": 1.0},
    "transposed_tile": {"reuse": 1.15, "*": 1.0},
    "double_buffer": {"reuse": 1.1, "*": 1.0},
    "multi_stage_pipeline": {"reuse": 1.15, "*": 1.0},
    "async_copy": {"reuse": 1.1, "*": 1.0},
    "tensor_core_wmma": {"reuse": 4.0, "*": 1.0},
    "halo_tile": {"reuse": 1.5, "*": 1.2},
    "vector_shared_load": {"reuse": 1.1, "*": 1.0},
    "shared_vector_load": {"reuse": 1.1, "*": 1.0},
    "shared_padding": {"bank": 1.4, "reuse": 1.1, "transpose": 1.3, "*": 1.02},
    "coalesced_transpose": {"transpose": 3.0, "*": 1.0},
    "coalesced_access": {"uncoalesced": 4.0, "*": 1.0},
    # work mapped onto threads
    "warp_shuffle_reduce": {"serial": 4.0, "atomic": 3.0, "*": 1.3},
    "block_reduce_shared": {"serial": 1.5, "atomic": 2.0, "*": 1.1},
    "atomic_per_block": {"atomic": 4.0, "atomic_bins": 1.5, "*": 1.05},
    "privatized_atomics": {"atomic_bins": 5.0, "atomic": 1.5, "*": 1.0},
    "warp_per_row": {"serial": 4.0, "*": 1.1},
    "block_per_row": {"serial": 4.0, "*": 1.1},
    "warp_scan": {"serial": 5.0, "*": 1.2},
    "block_scan": {"serial": 1.5, "*": 1.1},
    "decoupled_lookback": {"*": 1.3},
    "dynamic_tile_id": {"*": 1.02},
    # fewer passes, fewer bytes
    "online_softmax": {"*": 1.3},
    "single_pass_stats": {"*": 1.25},
    "register_cache": {"*": 1.2},
    # per-thread running state in registers instead of the thread's own shared slots (issue 20): no shared
    # load / store per update, no dynamic shared memory limiting resident blocks
    "register_state": {"*": 1.5},
    "fused_epilogue": {"*": 1.3},
    "fused_residual": {"*": 1.3},
    # the shared-memory tree reduction ladder: Harris, "Optimizing Parallel Reduction in CUDA" (NVIDIA,
    # 2007), step speedups measured on a G80 (4M ints): interleaved addressing with a strided index
    # instead of the divergent modulo 2.33x, sequential addressing 2.01x, first add during load 1.78x,
    # unrolled last warp 1.80x, completely unrolled (template block size) 1.41x. Chosen before this
    # project measured any of them; a G80 ratio is an upper bound for a recent GPU.
    "divergence_free_indexing": {"*": 2.33},
    "sequential_addressing": {"*": 2.01},
    "first_add_during_load": {"*": 1.78},
    "unrolled_last_warp": {"*": 1.8},
    "compile_time_unroll": {"*": 1.41},
    # access width, work per thread and launch shape
    "thread_coarsening": {"memory": 1.15, "*": 1.05},
    "specialized_dispatch": {"*": 1.05},
    # the order blocks run in only matters where blocks re-read each other's data through L2 (the
    # operand panels of a GEMM / attention): where every element is read once there is nothing to share
    "block_swizzle": {"reuse": 1.1, "*": 1.0},
    "vector_load": {"memory": 1.3, "transpose": 1.2, "*": 1.1},
    "vector_store": {"memory": 1.15, "transpose": 1.1, "*": 1.05},
    "grid_stride": {"*": 1.05},
    # qualifiers
    "restrict": {"*": 1.03},
    "ldg": {"*": 1.03},
    "unroll_pragma": {"*": 1.05},
    "launch_bounds": {"*": 1.02},
    "fast_math": {"*": 1.05},
    **{h: {"*": 1.02} for h in CACHE_HINTS},
}
UNKNOWN_PRIOR = 1.05
# a prior is an order of magnitude: its spread is the gain halved and doubled
PRIOR_SPREAD = (0.5, 2.0)
# at the memory roofline (a GPU profile shows the kernel moving its bytes near the copy bandwidth)
# only carriers that move fewer bytes keep their gain
BYTE_SAVING = {"shared_tile", "register_tile", "online_softmax", "single_pass_stats", "register_cache",
               "fused_epilogue", "fused_residual", "halo_tile", "privatized_atomics", "atomic_per_block"}

LOOP_TRIPS = 16  # a loop over a runtime bound (or a large constant) counts as this many iterations
SMALL_TRIP = 64  # constant trip counts up to this are taken as written
SIZE_LARGE = 1 << 20  # elements: a workload this large or larger is the "large" size regime


# --------------------------------------------------------------------------- the kernel
@dataclass
class KernelShape:
    """What bounds the query kernel, read statically (and refined by SASS or a GPU profile)."""
    regimes: list[str]  # most specific first; always ends with "memory" when nothing else holds
    op_type: str  # a guess from the code's shape (reported; a caller's op type wins)
    boundness: str  # compute | memory | latency
    reasons: dict[str, str] = field(default_factory=dict)  # regime -> the line that shows it
    flops_per_load: Optional[float] = None  # float operations per global load in the hot loop (static count)
    reuse_fraction: Optional[float] = None  # of the hot loop's global loads, the share other threads re-read
    source: str = "static"  # static | static+sass | static+profile
    notes: list[str] = field(default_factory=list)
    work: dict = field(default_factory=dict)  # internal: per function, line -> work weight
    loops: list = field(default_factory=list)  # internal: (first line, last line, function) of every loop
    work_memory: dict = field(default_factory=dict)  # internal: the work of the lines that touch global memory
    _coverage: dict = field(default_factory=dict)  # internal: sites -> coverage (memo)

    def to_dict(self) -> dict:
        return {"regimes": self.regimes, "boundness": self.boundness, "op_type_guess": self.op_type,
                "reasons": self.reasons, "flops_per_load": self.flops_per_load,
                "reuse_fraction": self.reuse_fraction, "source": self.source, "notes": self.notes,
                "regime_meaning": {r: REGIMES[r] for r in self.regimes}}

    def refine_with_static(self, static: dict) -> "KernelShape":
        """Use a gate static stage (``archs -> kernels -> {sass: {opcode: n}}``): FFMA per global
        load of the kernel as compiled. Many FMAs per load with no reuse detected means the code
        already reuses operands (registers): compute-bound."""
        best = None
        for arch in (static.get("archs") or {}).values():
            for k in (arch.get("kernels") or {}).values():
                sass = k.get("sass") or {}
                fma = sum(n for op, n in sass.items() if op.split(".")[0] in ("FFMA", "HFMA2", "DFMA", "HMMA"))
                ldg = sum(n for op, n in sass.items() if op.split(".")[0] in ("LDG", "LD"))
                if ldg:
                    r = fma / ldg
                    best = r if best is None else max(best, r)
        if best is None:
            return self
        self.source = "static+sass"
        self.notes.append(f"SASS: {best:.1f} FMA per global load instruction")
        if best >= 8 and self.boundness != "compute":
            self.boundness = "compute"
            self.notes.append("compute-bound by the SASS mix (>= 8 FMA per global load)")
        return self

    def refine_with_profile(self, time_ms: float, bytes_moved: float, peak_gbs: float) -> "KernelShape":
        """A GPU profile of the kernel: achieved bandwidth over the copy bandwidth. Near the roofline
        (>= 60%), only skills that move fewer bytes can help."""
        if not time_ms or not bytes_moved or not peak_gbs:
            return self
        gbs = bytes_moved / (time_ms * 1e-3) / 1e9
        frac = gbs / peak_gbs
        self.source = "static+profile"
        self.notes.append(f"profile: {gbs:.0f} GB/s = {frac:.0%} of the copy bandwidth")
        if frac >= 0.6 and "roofline" not in self.regimes:
            self.regimes.insert(0, "roofline")
            self.boundness = "memory"
            self.reasons["roofline"] = f"moves its bytes at {frac:.0%} of the copy bandwidth"
        return self


def _trip(src, loop) -> float:
    """How many iterations a loop stands for in the work estimate."""

    upd = loop.child_by_field_name("update")
    cond = loop.child_by_field_name("condition")
    u = " ".join(text(upd).split()) if upd is not None else ""
    if re.search(r">>=|/=\s*2|<<=|\*=\s*2", u):
        return 5.0  # a halving / doubling loop: log2 of a block
    if cond is not None:
        m = re.search(r"(<=?|>=?|!=)\s*(.+)$", " ".join(text(cond).split()))
        if m:
            v = int_const(src, m.group(2))
            if v is not None and 0 < v <= SMALL_TRIP:
                return float(max(1, v))
    return float(LOOP_TRIPS)


_WORK = re.compile(r"\[|[-+*/]=|[^=!<>]=[^=]|\b(atomic\w*|__shfl\w*|expf?|__expf|sqrtf?|rsqrtf?)\s*\(")


def work_weights(src) -> dict[str, dict[int, float]]:
    """Per device function: 1-based line -> work weight (the product of the trip counts of the loops
    around it, for lines that load, store or compute)."""

    lines = src.code.decode("utf-8", "replace").splitlines()
    out: dict[str, dict[int, float]] = {}
    for f, fn, _ in device_funcs(src):
        body = fn.child_by_field_name("body")
        if body is None:
            continue
        a, b = src.line_of(body.start_byte), src.line_of(max(body.start_byte, body.end_byte - 1))
        mult = {ln: 1.0 for ln in range(a, b + 1)}
        for loop in src.nodes("for_statement", "while_statement", "do_statement", within=fn):
            t = _trip(src, loop) if loop.type == "for_statement" else float(LOOP_TRIPS)
            la = src.line_of(loop.start_byte)
            lb = src.line_of(max(loop.start_byte, loop.end_byte - 1))
            for ln in range(la + (1 if lb > la else 0), lb + 1):
                if ln in mult:
                    mult[ln] *= t
        out[f.name] = {ln: m for ln, m in mult.items() if 0 < ln <= len(lines) and _WORK.search(lines[ln - 1])}
    return out


_LAUNCH = re.compile(r"<<<\s*([^,;]+?)\s*,")
_LAUNCHED = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^;{}]*>)?\s*$")  # the name before `<<<`, template arguments skipped


def launch_grids(src, names: set[str]) -> dict[str, float]:
    """Kernel name -> the blocks its launches in this file run, a constant grid as written (at most
    LOOP_TRIPS), a grid computed from the problem as LOOP_TRIPS (memoized on the source)."""
    grids = src.memo("launch_grids", lambda: _all_launch_grids(src))
    return {k: v for k, v in grids.items() if k in names}


def _all_launch_grids(src) -> dict[str, float]:
    out: dict[str, float] = {}
    code = src.code.decode("utf-8", "replace")
    for m in _LAUNCH.finditer(code):
        k = _LAUNCHED.search(code[max(0, m.start() - 300):m.start()])
        if k is None:
            continue
        g = int_const(src, m.group(1))
        w = float(min(max(g, 1), LOOP_TRIPS)) if g is not None else float(LOOP_TRIPS)
        out[k.group(1)] = max(out.get(k.group(1), 0.0), w)
    return out


def minor_kernels(src) -> set[str]:
    """Kernels launched with a constant grid smaller than the problem-sized grid of another kernel of
    the file (a one-block pass over per-block partials): they do a vanishing share of the work, so
    what bounds them does not bound the kernel."""
    grids = launch_grids(src, {f.name for f, _, _ in device_funcs(src)})
    top = max(grids.values(), default=0.0)
    return {k for k, v in grids.items() if v < top}


def launch_weighted(src, work: dict[str, dict[int, float]]) -> dict[str, dict[int, float]]:
    """Per-thread work scaled by how many blocks run it, where the file's launches say: a kernel
    launched with a constant grid (`finish<<<1, 1024>>>`: a second pass over per-block partials)
    runs that many blocks whatever the problem, one launched with a grid computed from the problem
    runs a number that grows with it, counted like a runtime loop bound (LOOP_TRIPS). Unchanged
    when no launch is seen or every launched kernel runs the same kind of grid."""
    grids = launch_grids(src, set(work))
    if len(set(grids.values())) < 2:
        return work
    return {f: ({ln: v * grids[f] / LOOP_TRIPS for ln, v in lines.items()} if f in grids else lines)
            for f, lines in work.items()}


def _global_lines(src) -> set[tuple[str, int]]:
    """(function, line) of every global memory access: scalar subscripts and vector casts."""

    out = {(f.name, src.line_of(node.start_byte)) for f, node, *_ in global_accesses(src)}
    try:
        for v in vector_accesses(src):
            f = src.function_at(v.node.start_byte)
            if f is not None:
                out.add((f.name, src.line_of(v.node.start_byte)))
    except Exception:  # noqa: BLE001 - a detector bug must not fail a query
        pass
    return out


def loop_spans(src) -> list[tuple[int, int, str]]:
    """(first line, last line, function) of every loop of the device functions."""

    out = []
    for f, fn, _ in device_funcs(src):
        for loop in src.nodes("for_statement", "while_statement", "do_statement", within=fn):
            out.append((src.line_of(loop.start_byte), src.line_of(max(loop.start_byte, loop.end_byte - 1)), f.name))
    return out


def _loop_region(loops: list, line: int) -> Optional[tuple[int, int, str]]:
    """(first line, last line, function) of the innermost loop enclosing ``line``, else None."""
    best = None
    for la, lb, fname in loops:
        if la <= line <= lb and (best is None or lb - la < best[1] - best[0]):
            best = (la, lb, fname)
    return best


MEMORY_REGIMES = ("roofline", "memory", "transpose", "uncoalesced")


def coverage(shape: KernelShape, src, sites: Sequence[Any]) -> tuple[float, str]:
    """The share of the kernels' work (``work_weights``) the sites' regions hold: a site's region
    is its innermost enclosing loop; a site outside loops covers its own lines, or the whole
    function when the function has no loops (one element per thread: the body is the work) or
    the site is the function's signature / a declaration that serves all of it. For a kernel whose
    regime is bandwidth (memory, transpose, roofline), the work is its global memory traffic: only
    the lines that load or store global memory count."""
    memory = shape.regimes[0] in MEMORY_REGIMES and any(shape.work_memory.values())
    work = shape.work_memory if memory else shape.work
    total = sum(sum(w.values()) for w in work.values())
    if not sites or total <= 0:
        return 1.0, "no work estimate: whole kernel assumed"
    memo_key = tuple((getattr(s, "function", ""), getattr(s, "line", 0), getattr(s, "end_line", 0)) if not
                     isinstance(s, dict) else (s.get("function", ""), s.get("line", 0), s.get("end_line", 0)) for s in sites)
    hit = shape._coverage.get(memo_key)
    if hit is not None:
        return hit
    out = _coverage(shape, src, sites, work, total, "global memory traffic (loop trips x lines that load or store "
                    "global memory)" if memory else "work (loop trips x lines that load, store or compute)")
    shape._coverage[memo_key] = out
    return out


def _coverage(shape: KernelShape, src, sites, work, total, what: str) -> tuple[float, str]:
    lines_of: dict[str, set[int]] = {}
    for s in sites:
        fname = getattr(s, "function", "") or (s.get("function", "") if isinstance(s, dict) else "")
        line = int(getattr(s, "line", 0) or (s.get("line", 0) if isinstance(s, dict) else 0))
        end = int(getattr(s, "end_line", 0) or (s.get("end_line", 0) if isinstance(s, dict) else 0) or line)
        w = work.get(fname)
        if w is None:
            continue
        f_lines = set(w)
        loops = [ln for ln, m in w.items() if m > 1.0]
        region = _loop_region(shape.loops, line)
        if region is not None and region[2] == fname:
            picked = {ln for ln in f_lines if region[0] <= ln <= region[1]}
        elif not loops or line <= min(f_lines, default=line) or _declares_for_all(src, line):
            picked = f_lines
        else:
            picked = {ln for ln in f_lines if line <= ln <= max(end, line)}
        lines_of.setdefault(fname, set()).update(picked)
    covered = sum(work[f][ln] for f, lns in lines_of.items() for ln in lns)
    if not lines_of:
        return 1.0, "site outside the device functions: whole kernel assumed"
    c = max(0.0, min(1.0, covered / total))
    return c, f"the site(s) hold {c:.0%} of the kernels' estimated {what}"


def _declares_for_all(src, line: int) -> bool:
    """A line that serves the whole function: a declaration, a qualifier, or the mapping of threads
    to elements (`i = blockIdx.x * blockDim.x + threadIdx.x`: coarsening or a grid-stride loop
    changes what every line after it does per thread)."""
    lines = src.code.decode("utf-8", "replace").splitlines()
    t = lines[line - 1] if 0 < line <= len(lines) else ""
    return bool(re.search(r"__shared__|__launch_bounds__|__global__|__restrict__|#\s*pragma", t) or THREAD_INDEX.search(t))


def kernel_shape(checker) -> KernelShape:
    """The query kernel's regimes from its syntax tree (memoized on the checker)."""
    shape = getattr(checker, "_value_shape", None)
    if shape is not None:
        return shape
    src = checker.src
    reasons: dict[str, str] = {}
    regimes: list[str] = []
    reuse_frac, fpl = _reuse(src)
    gemm = _shared_dot_loops(src)
    from retrieval.applicability import mma_loops

    mma = mma_loops(src)
    if reuse_frac is not None and reuse_frac >= 0.99:
        regimes.append("reuse")
        reasons["reuse"] = "every global load of the hot loop is re-read by other threads"
    elif gemm:
        regimes.append("reuse")
        reasons["reuse"] = f"line {gemm[0]}: a dot-product loop over staged (shared) operands"
    elif mma:
        regimes.append("reuse")
        reasons["reuse"] = f"line {src.line_of(mma[0][1].start_byte)}: tensor-core fragments multiplied in a loop"
    minor = minor_kernels(src)
    major = {f.name for f, _, _ in device_funcs(src)} - minor
    serial = serial_loops(src, reuse_frac or 0.0, functions=major if minor else None)
    if serial:
        regimes.append("serial")
        reasons["serial"] = f"line {serial[0][0]}: {serial[0][1]}"
    atom = [s for s in _per_element_atomics(checker) if s.function not in minor]
    if atom:
        bins = [s for s in atom if _binned(src, s)]
        kind = "atomic_bins" if bins else "atomic"
        regimes.append(kind)
        s0 = (bins or atom)[0]
        reasons[kind] = f"line {s0.line}: {s0.reason}"
    tr = [s for s in (checker.opportunities("coalesced_transpose") or [])]
    if tr:
        regimes.append("transpose")
        reasons["transpose"] = f"line {tr[0].line}: {tr[0].reason}"
    unco = checker.opportunities("coalesced_access") or []
    if unco:
        regimes.append("uncoalesced")
        reasons["uncoalesced"] = f"line {unco[0].line}: {unco[0].reason}"
    bank = _column_reads(src)
    if bank:
        regimes.append("bank")
        reasons["bank"] = f"line {bank[0][0]}: `{bank[0][1]}` reads a shared tile down a column"
    if not regimes:
        regimes.append("memory")
    boundness = "compute" if "reuse" in regimes else ("latency" if "serial" in regimes else "memory")
    shape = KernelShape(regimes, _op_guess(src, regimes), boundness, reasons,
                        round(fpl, 2) if fpl is not None else None,
                        round(reuse_frac, 2) if reuse_frac is not None else None)
    shape.work = launch_weighted(src, work_weights(src))
    if minor:
        shape.notes.append(f"{', '.join(sorted(minor))}: launched with a constant grid beside a problem-sized one; "
                           "its loops and atomics do not decide the regime, its work counts per block launched")
    shape.loops = loop_spans(src)
    mem = _global_lines(src)
    shape.work_memory = {f: {ln: w for ln, w in ws.items() if (f, ln) in mem} for f, ws in shape.work.items()}
    checker._value_shape = shape
    return shape


def _reuse(src) -> tuple[Optional[float], Optional[float]]:
    """(share of the global loads in runtime-bound loops whose index leaves out one of the thread's
    coordinates (so other threads read the same element), float operations per such load)."""

    shared = total = 0
    flops = 0
    coords_of: dict[str, tuple] = {}
    seen_loops = set()
    for f, node, name, is_const, elem, write in global_accesses(src):
        if write:
            continue
        loop = enclosing(node, "for_statement")
        if loop is None or not runtime_bound(src, loop):
            continue
        var = loop_var(loop)
        idx = text(node.child_by_field_name("indices") or node)
        if not var or not re.search(r"\b%s\b" % re.escape(var), idx):
            continue
        if f.name not in coords_of:
            coords_of[f.name] = thread_coords(src, f)
        coords, dep = coords_of[f.name]
        used: set[str] = set()
        for v in re.findall(r"\b[A-Za-z_]\w*\b", idx + " " + name):  # a row pointer carries its row
            used |= dep.get(v, set())
        if "threadIdx" in idx or "blockIdx" in idx:
            used |= {"<direct>"}
        total += 1
        if coords and not used >= coords and "<direct>" not in used:
            shared += 1
        if loop.start_byte not in seen_loops:
            seen_loops.add(loop.start_byte)
            body = text(loop.child_by_field_name("body") or loop)
            flops += len(re.findall(r"[^+\-*/=<>!&|][*+\-/](?![=+\-])|fmaf?\s*\(|__fmaf", body))
    if not total:
        return None, None
    return shared / total, flops / total


def _shared_dot_loops(src) -> list[int]:
    """Lines of loops accumulating products of two staged operands (shared arrays, or register
    fragments filled from them): a GEMM shape after its first tiling step."""

    shared = set(src.shared_names)
    out = []
    if not shared:
        return out
    for f, fn, _ in device_funcs(src):
        for loop in src.nodes("for_statement", within=fn):
            var = loop_var(loop)
            if not var:
                continue
            arrays = set()
            for node in walk(loop):
                if node.type == "subscript_expression" and re.search(r"\b%s\b" % re.escape(var), text(node)):
                    base = node
                    while base.type == "subscript_expression" and base.child_by_field_name("argument") is not None:
                        base = base.child_by_field_name("argument")
                    arrays.add(text(base))
            body = " ".join(text(loop.child_by_field_name("body") or loop).split())
            if len(arrays & shared) >= 2 and re.search(r"\+=|fmaf?\s*\(|__hfma|__fmaf", body) and "*" in body + "fma":
                out.append(src.line_of(loop.start_byte))
                break
    return out


def _column_reads(src) -> list[tuple[int, str]]:
    """Accesses ``tile[a][b]`` of 2-D shared arrays without a padding column whose first index moves
    one per lane (threadIdx.x in ``a``): a warp reads one column, 32 addresses a row apart."""

    padded = set()
    for decl, name, dims in src.shared_decls:
        if len(dims) < 2 or re.search(r"\+\s*(\d+|\w*PAD\w*)\s*$", " ".join(text(dims[-1]).split())):
            padded.add(name)
    two_d = {name for _, name, dims in src.shared_decls if len(dims) >= 2} - padded
    out = []
    if not two_d:
        return out
    for f, fn, _ in device_funcs(src):
        defs = None
        for node in src.nodes("subscript_expression", within=fn):
            inner = node.child_by_field_name("argument")
            if inner is None or inner.type != "subscript_expression":
                continue
            base = inner.child_by_field_name("argument")
            if base is None or text(base) not in two_d:
                continue
            idx = inner.child_by_field_name("indices") or inner.child_by_field_name("index")
            if idx is None:
                args = [c for c in inner.named_children if c.type == "subscript_argument_list"]
                idx = args[0] if args else None
            if idx is None:
                continue
            if defs is None:
                defs = local_definitions(src, f)
            if x_stride(expand_index(text(idx).strip("[] "), defs, src)) == "unit":
                out.append((src.line_of(node.start_byte), " ".join(text(node).split())[:60]))
                break
    return out


def _binned(src, site) -> bool:
    """An atomic whose address is picked by data (``atomicAdd(&hist[x[i]], 1)``, or a bin computed from
    a loaded word): a histogram, not a reduction into one place. The index is expanded through the
    function's single-assignment locals and read for a memory access."""
    from retrieval.applicability import expand_index, local_definitions

    m = re.search(r"\batomic\w*\s*\(\s*&?\s*\(?\s*\w+\s*(?:\[(.*?)\]\s*\)?\s*,|\+\s*([^,]+),)", site.code)
    if not m:
        return False
    idx = m.group(1) or m.group(2) or ""
    f = next((g for g in src.funcs if g.name == site.function), None)
    defs = local_definitions(src, f) if f is not None else {}
    return bool(re.search(r"\w\s*\[", expand_index(idx, defs, src)))


def _per_element_atomics(checker) -> list:
    """Global atomics every thread issues (the finder leaves out those behind a single-thread guard)."""
    return list(checker.opportunities("atomic_per_block") or [])


def _op_guess(src, regimes: list[str]) -> str:
    code = src.code.decode("utf-8", "replace")
    if re.search(r"__shfl_up|\bscan\b|prefix", code, re.I):
        return "scan"
    if "reuse" in regimes:
        return "attention" if re.search(r"\bexpf?\s*\(|__expf", code) else "gemm"
    if "transpose" in regimes:
        return "transpose"
    if "atomic" in regimes and re.search(r"atomicAdd\s*\(\s*&?\s*\w+\s*\[\s*\w+\s*\[", code):
        return "histogram"
    has_exp = bool(re.search(r"\b(__)?expf?\s*\(", code))
    has_sqrt = bool(re.search(r"\b(r)?sqrtf?\s*\(|__frsqrt|rsqrt", code))
    if has_exp and re.search(r"max", code):
        return "softmax"
    if has_sqrt and re.search(r"mean|var|eps|rms|norm", code, re.I):
        return "norm"
    if "serial" in regimes or re.search(r"__shfl_(xor|down)_sync|atomicAdd", code):
        return "reduction"
    return "elementwise"


# --------------------------------------------------------------------------- a skill's effect
def _regime_of_label(label: str) -> str:
    """"small" or "large" from a workload label's axes (``w4[M=4096,N=4096]``)."""
    vals = [int(v) for v in re.findall(r"=(\d+)", label or "")]
    if not vals:
        return "large"
    n = 1
    for v in vals:
        n *= v
    return "large" if n >= SIZE_LARGE else "small"


def measured_effect(rec: dict, op_type: str, size_regime: str = "large",
                    exclude_problems: Sequence[str] = ()) -> Optional[dict]:
    """The skill's GPU time ratios from its evidence (geometric mean, min-max spread): of the query's
    op type and size regime if there are any, else of its op type, else of any. None without GPU
    evidence."""
    ex = set(exclude_problems)
    rows = []
    for e in rec.get("evidence") or []:
        if e.get("problem") in ex:
            continue
        for x in e.get("effect") or []:
            if x.get("method") == "gpu_timing" and x.get("time_ratio"):
                rows.append((e.get("op_type", ""), _regime_of_label(x.get("workload", "")), float(x["time_ratio"]),
                             x.get("device", ""), e.get("problem", "")))
    if not rows and not ex:  # a record whose evidence lost its effects (merged): the skill-level list
        for x in rec.get("effect") or []:
            if x.get("method") == "gpu_timing" and x.get("time_ratio"):
                rows.append(("", _regime_of_label(x.get("workload", "")), float(x["time_ratio"]), x.get("device", ""), ""))
    if not rows:
        return None
    tiers = [("op type and size regime", [r for r in rows if r[0] == op_type and r[1] == size_regime]),
             ("op type", [r for r in rows if r[0] == op_type]),
             ("size regime, other op types", [r for r in rows if r[1] == size_regime]),
             ("other op types and sizes", rows)]
    matched, sel = next((name, rs) for name, rs in tiers if rs)
    logs = [math.log(max(1e-6, r[2])) for r in sel]
    gm = math.exp(sum(logs) / len(logs))
    return {"time_ratio": round(gm, 3), "spread": [round(min(r[2] for r in sel), 3), round(max(r[2] for r in sel), 3)],
            "n": len(sel), "matched": matched, "op_types": sorted({r[0] for r in sel if r[0]}),
            "devices": sorted({r[3] for r in sel if r[3]}), "problems": sorted({r[4] for r in sel if r[4]})}


def prior_effect(carrier: str, regimes: Sequence[str]) -> dict:
    """The stated static prior for a carrier in the kernel's regimes (the best regime that names it)."""
    table = PRIOR.get(carrier)
    if table is None:
        r, regime = UNKNOWN_PRIOR, "*"
    else:
        named = [(table[g], g) for g in regimes if g in table]
        r, regime = max(named) if named else (table.get("*", UNKNOWN_PRIOR), "*")
    if "roofline" in regimes and carrier not in BYTE_SAVING:
        r, regime = 1.0 + (r - 1.0) * 0.25, "roofline"
    lo, hi = PRIOR_SPREAD
    return {"time_ratio": round(r, 3), "spread": [round(1 + (r - 1) * lo, 3), round(1 + (r - 1) * hi, 3)],
            "regime": regime if regime != "*" else (regimes[0] if regimes else "memory"),
            "table_regime": regime}


def addresses(carrier: str, regimes: Sequence[str]) -> bool:
    """Whether introducing ``carrier`` attacks what bounds the kernel: PRIOR names one of the kernel's
    regimes for it with more gain than its default ("*"): a warp reduction or scan for a serial
    (latency-bound) loop, a tile for reuse, a privatized counter for binned atomics, a wider access
    for a bandwidth-bound one; at the memory roofline (or in a plain bandwidth-bound kernel) also
    a carrier that moves fewer bytes (BYTE_SAVING). Vectorizing the loads of one thread's serial
    loop does not make the loop parallel: in a serial kernel vector_load is not the bottleneck's step."""
    if "roofline" in regimes:  # moving its bytes near the copy bandwidth: only fewer bytes help
        return carrier in BYTE_SAVING
    table = PRIOR.get(carrier) or {}
    base = table.get("*", UNKNOWN_PRIOR)
    return any(table.get(g, 0.0) > base or (g == "memory" and carrier in BYTE_SAVING) for g in regimes)


def size_regime(axes: Optional[dict]) -> str:
    if not axes:
        return "large"
    n = 1
    for v in axes.values():
        try:
            n *= max(1, int(v))
        except (TypeError, ValueError):
            continue
    return "large" if n >= SIZE_LARGE else "small"


# --------------------------------------------------------------------------- per query
class Valuer:
    """Values skills for one code query."""

    def __init__(self, checker, axes: Optional[dict] = None, op_type: Optional[str] = None,
                 exclude_problems: Sequence[str] = ()):
        self.checker = checker
        self.shape = kernel_shape(checker)
        self.op_type = op_type or self.shape.op_type
        self.op_type_from = "given" if op_type else "guessed from the code"
        self.size = size_regime(axes)
        self.exclude = tuple(exclude_problems)

    def value(self, rec: dict, app, similarity: float = 0.0) -> dict:
        """The value record of one applicable skill (docs/query.md, ``value``)."""
        carrier = rec.get("carrier", "")
        gpu = measured_effect(rec, self.op_type, self.size, self.exclude)
        if gpu is not None:
            eff = {"source": "gpu_evidence", **gpu,
                   "note": f"measured on a GPU: {gpu['n']} step(s) of {gpu['matched']}"}
        else:
            p = prior_effect(carrier, self.shape.regimes)
            eff = {"source": "static_prior", "time_ratio": p["time_ratio"], "spread": p["spread"], "n": 0,
                   "regime": p["regime"],
                   "note": f"no GPU evidence in the store: static prior for {carrier} in a {p['regime']} "
                           f"kernel (retrieval/value.py PRIOR)"}
        gain = max(1e-3, float(eff["time_ratio"]))
        sites = list(app.sites)
        how = sites[0].how if sites else "none"
        c, c_note = coverage(self.shape, self.checker.src, sites) if sites else (1.0, "no site: whole kernel assumed")
        if how == "detector":
            conf = 1.0
        elif how == "requires":
            conf = 0.9
        elif not sites:
            conf = 0.2  # no detector and nothing in the code looks like where it was applied
        else:
            m = re.search(r"token overlap ([\d.]+)", sites[0].reason)
            ov = float(m.group(1)) if m else 0.0
            conf = round(0.35 + 0.5 * min(1.0, ov / 0.5), 3)
        if any(f.startswith("requires:") for f in app.flags):
            conf = round(conf * 0.5, 3)  # builds on a carrier the code lacks and no site of it was found
        here = 1.0 / ((1.0 - c) + c / gain)
        score = math.log(here) * conf
        return {"score": round(score, 5), "expected_time_ratio": round(here, 3),
                "effect": eff, "coverage": round(c, 3), "coverage_note": c_note,
                "applicability": {"confidence": conf, "how": how},
                "similarity": round(float(similarity), 6)}


# --------------------------------------------------------------------------- entries
@dataclass
class Entry:
    carrier: str
    best: tuple  # (skill index, Applicability, value dict)
    variants: list = field(default_factory=list)  # other applicable skills of the carrier, same shape

    @property
    def score(self) -> float:
        return self.best[2]["score"]


def rank_entries(valued: list[tuple[int, Any, dict, dict]], group_qualifiers: bool = True
                 ) -> tuple[list[Entry], list[Entry]]:
    """``valued``: (skill index, Applicability, value, record) of applicable skills, in similarity
    order. Returns (structural entries, qualifier entries), each best first: one entry per carrier
    (its highest-valued skill; ties: the more similar), the others as variants. With
    ``group_qualifiers`` False, qualifiers come back among the structural entries."""
    by_carrier: dict[str, Entry] = {}
    for i, app, val, rec in valued:
        c = rec.get("carrier", "") or rec.get("key", "")
        e = by_carrier.get(c)
        if e is None:
            by_carrier[c] = Entry(c, (i, app, val))
        elif val["score"] > e.best[2]["score"] + 1e-9:
            e.variants.insert(0, e.best)
            e.best = (i, app, val)
        else:
            e.variants.append((i, app, val))
    key = lambda e: (-e.score, -e.best[2]["similarity"], e.best[0])  # noqa: E731
    entries = sorted(by_carrier.values(), key=key)
    if not group_qualifiers:
        return entries, []
    structural = [e for e in entries if e.carrier not in QUALIFIERS]
    quals = [e for e in entries if e.carrier in QUALIFIERS]
    if not structural:  # nothing structural applies: the qualifiers are the answer, one entry each
        return quals, []
    return structural, quals


# --------------------------------------------------------------------------- the query's selection
ALSO_AFTER = 1.02  # the "also" entry comes after the structural entries expected to buy at least this
POOL_TOP = 16  # skills examined in similarity order ...
POOL_PER_CARRIER = 2  # ... plus the most similar few of every carrier, however low they rank


def carrier_codes(index):
    """Per skill, a small int naming its carrier (cached on the index)."""
    import numpy as np

    codes = getattr(index, "_carrier_codes", None)
    if codes is None:
        names: dict[str, int] = {}
        codes = np.array([names.setdefault(c or k, len(names)) for c, k in
                          zip(index.table["carrier"], index.table["key"])], dtype=np.int32)
        index._carrier_codes = codes
        index._carrier_names = {v: k for k, v in names.items()}
    return codes


def candidate_pool(index, order, top: int = POOL_TOP, per_carrier: int = POOL_PER_CARRIER):
    """Skill indices in similarity order: the first ``top`` and the first ``per_carrier`` of each
    carrier (what similarity alone ranks low is still valued)."""
    import numpy as np

    order = np.asarray(order)
    if len(order) == 0:
        return order
    codes = carrier_codes(index)[order]
    by_code = np.argsort(codes, kind="stable")  # positions in `order`, grouped by carrier, in order
    grouped = codes[by_code]
    starts = np.flatnonzero(np.concatenate(([True], grouped[1:] != grouped[:-1])))
    ends = np.concatenate((starts[1:], [len(by_code)]))
    keep = np.zeros(len(order), dtype=bool)
    keep[:top] = True
    for a, b in zip(starts, ends):
        keep[by_code[a:min(b, a + per_carrier)]] = True
    return order[np.flatnonzero(keep)]


def prewarm(checker, index) -> None:
    """Run, once, what valuing a query will ask of its code: the kernel's regime and every carrier's
    detector and site finder over the index (memoized on the checker). Called beside the embedding
    (retrieval/skill_search.py ``scores``): this Python work overlaps the encoders' native work."""
    try:
        kernel_shape(checker)
        pairs = getattr(index, "_carrier_operator_pairs", None)
        if pairs is None:
            pairs = index._carrier_operator_pairs = sorted(set(zip(index.table["carrier"], index.table["operator"])))
        for carrier, operator in pairs:
            checker.present(carrier)
            if checker.opportunities(operator) is None:
                checker.opportunities(carrier)
    except Exception:  # noqa: BLE001 - a finder bug surfaces where the skill is checked, not here
        pass


def upper_bound(rec: dict, valuer: "Valuer") -> float:
    """The most a skill can be worth here: ln of its gain (the top of its measured spread, else its
    prior in the kernel's regimes)."""
    gpu = measured_effect(rec, valuer.op_type, valuer.size, valuer.exclude)
    gain = max(gpu["spread"]) if gpu is not None else prior_effect(rec.get("carrier", ""), valuer.shape.regimes)["time_ratio"]
    return math.log(max(1.0, gain))


def select_by_value(searcher, order, fused_scores, checker, k: int, axes=None, include_filtered: bool = True,
                    drop=None, op_type: Optional[str] = None, exclude_problems: Sequence[str] = (),
                    group_qualifiers: bool = True, hints: Optional[dict] = None) -> dict:
    """The value ranking of one code query: {"entries": [...], "filtered": [...], "ranking": {...}}.
    An entry is {"kind": "skill", "best": (i, app, value), "variants": [...]} or {"kind": "also",
    "members": [entry, ...], "value": {...}}; entries are in applicable order (retrieval/plan.py)."""

    index = searcher.index
    tab = index.table
    valuer = Valuer(checker, axes, op_type, exclude_problems)
    if hints:
        if hints.get("static"):
            valuer.shape.refine_with_static(hints["static"])
        p = hints.get("profile") or {}
        if p:
            valuer.shape.refine_with_profile(p.get("time_ms"), p.get("bytes"), p.get("peak_gbs"))
    pool = candidate_pool(index, order)
    import numpy as np

    finite = fused_scores[np.isfinite(fused_scores)] if len(fused_scores) else fused_scores
    fmax = float(max(finite.max(), 1e-12)) if len(finite) else 1.0
    valued, filtered, memo, same = [], [], {}, {}
    rank_of = {int(i): pos for pos, i in enumerate(pool.tolist())}
    # branch and bound: a skill's value can never exceed ln(its gain) (coverage and confidence are at
    # most 1), so the pool is valued in order of that bound, and valuing stops once k entries are
    # worth at least the bound of everything left (the qualifiers count as one entry: their bounds
    # summed). The answer is the one valuing the whole pool would give; fewer sites are looked for.
    bounds = {}
    for i in rank_of:
        bounds[i] = upper_bound(index.record(i), valuer)
    qual_ids = [i for i in rank_of if tab["carrier"][i] in QUALIFIERS] if group_qualifiers else []
    qual_bound = sum(bounds[i] for i in {tab["carrier"][i]: i for i in qual_ids}.values())
    todo = sorted((i for i in rank_of if i not in set(qual_ids)), key=lambda i: (-bounds[i], rank_of[i]))
    quals_done = not qual_ids
    best_of: dict[str, float] = {}

    def enough(next_bound: float) -> bool:
        worth = sorted(best_of.values(), reverse=True)
        return len(worth) >= k and worth[k - 1] >= next_bound

    queue = []
    for i in todo:
        if not quals_done and qual_bound >= bounds[i]:
            queue.extend(sorted(qual_ids, key=lambda j: rank_of[j]))
            quals_done = True
        queue.append(i)
    if not quals_done:
        queue.extend(sorted(qual_ids, key=lambda j: rank_of[j]))
    qual_set = set(qual_ids)
    in_quals = False
    for i in queue:
        if i in qual_set and not in_quals:
            in_quals = True
            if enough(qual_bound):
                break
        elif i not in qual_set:
            in_quals = False
            if enough(bounds[i]):
                break
        pos = rank_of[i]
        if drop is not None and drop(i):
            continue
        key = (tab["carrier"][i], tab["operator"][i], tuple(tab["requires"][i]), tuple(tab["conflicts"][i]))
        quick = memo.get(key)
        if quick is not None:
            if include_filtered:
                filtered.append({"skill_id": tab["skill_id"][i], "name": tab["name"][i], "carrier": key[0],
                                 "reason": quick.status, "detail": quick.detail, "rank": pos + 1,
                                 "present_at": [p["line"] for p in quick.present][:12]})
            continue
        rec = index.record(i)
        # a detector's verdict depends on the carrier, operator, requires, conflicts and preconditions
        # only: skills that share them (variants) share the check
        full = key + (repr(rec.get("preconditions") or []),) if checker.has_detector(rec) else None
        app = same.get(full) if full is not None else None
        if app is None:
            app = checker.check(rec, (), axes=axes, refs=index.excerpt_refs(i))
            if full is not None:
                same[full] = app
        if app.status != "applicable":
            if app.status in ("already_applied", "no_site") and checker.has_detector(rec):
                memo[key] = app
            if include_filtered:
                filtered.append({"skill_id": rec["skill_id"], "name": rec.get("name", ""),
                                 "carrier": rec.get("carrier", ""), "reason": app.status, "detail": app.detail,
                                 "rank": pos + 1, "present_at": [p["line"] for p in app.present][:12]})
            continue
        sim = float(fused_scores[i]) / fmax
        val = valuer.value(rec, app, sim if math.isfinite(sim) else 0.0)
        valued.append((i, app, val, rec))
        c = "also" if i in qual_set else (rec.get("carrier", "") or rec.get("key", ""))
        best_of[c] = best_of.get(c, 0.0) + val["score"] if c == "also" else max(best_of.get(c, -1e9), val["score"])
    valued.sort(key=lambda t: rank_of[t[0]])  # similarity order (ties between equal values)
    structural, quals = rank_entries(valued, group_qualifiers)
    items: list[dict] = [{"kind": "skill", "entry": e, "score": e.score} for e in structural]
    if quals:
        members = [{"kind": "skill", "entry": e, "score": e.score} for e in quals]
        logs = sum(math.log(max(1e-6, e.best[2]["expected_time_ratio"])) for e in quals)
        total = sum(e.score for e in quals)
        # "also": after every structural step expected to buy at least x1.02 here, whatever the
        # qualifiers add up to (they come with the structural work, not instead of it); among the
        # structural steps below that, by the qualifiers' summed value
        worth = [it["score"] for it in items if it["entry"].best[2]["expected_time_ratio"] >= ALSO_AFTER]
        place = min(min(worth) - 1e-9, total) if worth else total
        items.append({"kind": "also", "members": members, "score": place, "value_sum": total,
                      "expected_time_ratio": round(math.exp(logs), 3), "after_structural": bool(worth)})
    items.sort(key=lambda it: -it["score"])
    carrier = lambda it: it["entry"].carrier if it["kind"] == "skill" else "also"  # noqa: E731
    requires = lambda it: (index.record(it["entry"].best[0]).get("requires") or []) if it["kind"] == "skill" else ()  # noqa: E731
    gain = lambda it: it["entry"].best[2]["expected_time_ratio"] if it["kind"] == "skill" else it["expected_time_ratio"]  # noqa: E731
    items = plan_order(items, carrier, lambda it: it["score"], requires, gain)
    # conflicts: a skill that cannot go with a better-placed entry is filtered
    taken: set[str] = set()
    kept = []
    for it in items:
        if it["kind"] == "skill":
            i = it["entry"].best[0]
            conf = set(tab["conflicts"][i]) & taken
            if conf:
                if include_filtered:
                    filtered.append({"skill_id": tab["skill_id"][i], "name": tab["name"][i], "carrier": tab["carrier"][i],
                                     "reason": "conflict", "detail": "conflicts with " + ", ".join(sorted(conf)) +
                                     " (a higher-ranked entry)", "rank": 0, "present_at": []})
                continue
            rec = index.record(i)
            taken.add(rec.get("carrier", ""))
            taken.update(rec.get("provides") or [])
        kept.append(it)
    kept = kept[:k]
    _explain(kept)
    return {"entries": kept, "filtered": filtered,
            "ranking": {"method": "value", "kernel": valuer.shape.to_dict(), "op_type": valuer.op_type,
                        "op_type_from": valuer.op_type_from, "size_regime": valuer.size,
                        "pool": int(len(pool)), "valued": len(valued),
                        "qualifiers_grouped": bool(quals),
                        "formula": "value = ln(1 / ((1 - coverage) + coverage / gain)) x confidence; gain = measured "
                                   "GPU time ratio of the skill (op type, size regime) else the static prior of its "
                                   "carrier in the kernel's regime; entries then ordered so that a step comes after "
                                   "the steps it builds on (retrieval/plan.py); similarity breaks ties"}}


def _explain(items: list[dict]) -> None:
    """One sentence per entry on why it ranks where it does (``why_rank``)."""

    placed: list[str] = []
    for n, it in enumerate(items):
        if it["kind"] == "also":
            names = ", ".join(m["entry"].carrier for m in it["members"])
            it["why_rank"] = (f"declarative qualifiers ({names}) grouped: together expected x{it['expected_time_ratio']} "
                              "here; " + ("placed after the structural steps expected to buy at least "
                                          f"x{ALSO_AFTER}" if it.get("after_structural") else
                                          "no structural step is expected to buy as much: placed by their summed value"))
            placed.append("also")
            continue
        e = it["entry"]
        v = e.best[2]
        eff = v["effect"]
        src = ("measured x%s on a GPU (%s, spread %s-%s)" % (eff["time_ratio"], eff.get("matched", ""), *eff["spread"])
               if eff["source"] == "gpu_evidence" else
               "prior x%s for %s in a %s kernel (no GPU evidence)" % (eff["time_ratio"], e.carrier, eff.get("regime", "")))
        s = (f"expected x{v['expected_time_ratio']} on this kernel: {src}; its site(s) cover {v['coverage']:.0%} of the "
             f"work; {v['applicability']['how']} site (confidence {v['applicability']['confidence']})")
        before = [c for c in placed if c in predecessors(e.carrier)]
        if before:
            s += f"; placed after {', '.join(before)}, which it builds on"
        later = [x["entry"].carrier for x in items[n + 1:] if x["kind"] == "skill" and
                 x["score"] > it["score"] and e.carrier in predecessors(x["entry"].carrier)]
        if later:
            s += f"; ahead of the more valuable {', '.join(later)}, which builds on it"
        it["why_rank"] = s
        placed.append(e.carrier)
