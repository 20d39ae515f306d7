"""Lifting: an accepted walk step, reversed (simpler -> optimized), becomes a Skill.

Every field is filled from what the walk measured: the exemplar and diff from the two texts,
the anchor from the optimized text's syntax tree, static deltas from the gate's static stage
(registers, shared memory, spills, SASS mix), a time ratio only from GPU profiles, and
preconditions from probing (`mining/probe.py`) or from the guard the expert wrote around the
site. What is the same optimization is decided by `mining.records.skill_identity`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from corpora.code.source import Source
from mining.exemplar import exemplar, strip_carrier_marks
from mining.probe import Hypothesis, ProbeOutcome, code_guard_text
from mining.records import (TOOL_VERSION, Anchor, Effect, Evidence, Precondition, Risk, Skill, skill_identity)

# carrier -> (skill name, intent in the optimizing direction)
CARRIER_SKILLS: dict[str, tuple[str, str]] = {
    "vector_load": ("Vectorize global loads", "Load 16 bytes per instruction (float4/int4) so a warp issues a quarter of the load instructions and each transaction is fully used."),
    "vector_store": ("Vectorize global stores", "Store 16 bytes per instruction (float4/int4): fewer store instructions, full-width transactions."),
    "grid_stride": ("Grid-stride loop over a fixed grid", "Launch a grid sized to the machine and let each thread walk the problem with a grid-stride loop: launch cost and tail effects stop scaling with N, and per-thread setup is amortized."),
    "ldg": ("Read-only loads through __ldg", "Route loads of data that is never written during the kernel through the non-coherent read-only path."),
    "restrict": ("Promise no aliasing with __restrict__", "Mark pointers __restrict__ so the compiler may reorder, batch and cache loads across stores."),
    "launch_bounds": ("Fix the block size with __launch_bounds__", "Tell the register allocator the maximum block size (and blocks per SM) so it budgets registers for the occupancy actually used."),
    "unroll_pragma": ("Unroll the loop with #pragma unroll", "Unroll a loop with a compile-time trip count: independent iterations overlap (ILP), indices become constants, loop overhead disappears."),
    "fast_math": ("Use fast hardware intrinsics", "Replace precise transcendental/division calls by the hardware approximations (__expf, __fdividef, rsqrtf) where the tolerance allows."),
    "warp_shuffle_reduce": ("Reduce within a warp with shuffles", "Combine values across a warp in registers with __shfl_*_sync instead of a round trip through shared memory and barriers."),
    "block_reduce_shared": ("Two-level block reduction", "Reduce each warp in registers, meet the per-warp partials in a small shared array, and fold them once more."),
    "atomic_per_block": ("One atomic per block", "Publish a block's reduced result with a single global atomic instead of one per element."),
    "shared_tile": ("Stage a reused tile in shared memory", "Load a tile of global data cooperatively into shared memory once and let many threads reuse it, cutting global traffic by the reuse factor."),
    "shared_padding": ("Pad shared arrays against bank conflicts", "Add a column of padding to a shared array so strided (column) accesses fall in distinct banks."),
    "transposed_tile": ("Store an operand tile transposed", "Keep an operand tile k-major in shared memory so each thread's fragment is contiguous and loads vectorize."),
    "register_tile": ("Register tiling (several outputs per thread)", "Compute a small block of outputs per thread held in registers, reusing each loaded operand across the block."),
    "register_cache": ("Cache reused data in registers", "Load data once into per-thread registers and reuse it instead of reloading from memory."),
    "double_buffer": ("Double-buffer the shared tiles", "Prefetch the next tile while computing on the current one, using two shared stages."),
    "multi_stage_pipeline": ("Multi-stage async pipeline", "Keep several shared stages in flight with asynchronous copies to hide global latency."),
    "async_copy": ("Asynchronous global-to-shared copies", "Copy global data into shared memory with cp.async, bypassing registers."),
    "tensor_core_wmma": ("Tensor-core MMA with wmma", "Do the matrix multiply-accumulate on tensor cores through the wmma API."),
    "online_softmax": ("Online softmax", "Compute max and sum in one pass with rescaling, saving a pass over the data."),
    "single_pass_stats": ("Single-pass mean and variance", "Compute mean and variance in one sweep (Welford/Chan merge)."),
    "fused_epilogue": ("Fuse the element-wise epilogue", "Apply the element-wise tail (bias, activation, affine) before the store instead of in another pass."),
    "fused_residual": ("Fuse the residual add", "Add the residual in registers on load and store it once, feeding the following reduction."),
    "warp_scan": ("Warp-level scan with shuffles", "Compute a warp's inclusive prefix sum in registers with __shfl_up_sync."),
    "block_scan": ("Block scan over warp totals", "Extend a warp scan to a block by scanning the warp totals through shared memory."),
    "decoupled_lookback": ("Single-pass scan with decoupled look-back", "Publish tile aggregates and prefixes so successors look back instead of running a second pass."),
    "dynamic_tile_id": ("Dynamic tile numbering", "Number tiles in block start order with an atomic ticket so every awaited predecessor is running."),
    "privatized_atomics": ("Privatize atomics in shared memory", "Accumulate into a per-block shared copy with fast shared atomics and merge once to global."),
    "halo_tile": ("Stage a halo tile for a stencil", "Load the tile plus its halo into shared memory once per block."),
    "coalesced_transpose": ("Coalesced transpose through shared memory", "Reorder in shared memory so both the global reads and the global writes are coalesced."),
    # carriers of the generic simplifications found by meaning (issue 19)
    "specialized_dispatch": ("Dispatch to a specialized kernel instance at run time", "Check at run time what a faster instance of the kernel needs (16-byte aligned pointers, a size divisible by its vector width) and launch that instance, keeping the general one as the fallback."),
    "block_per_row": ("One block per row", "Give each row a whole block: its threads sweep the row together in block-stride steps (coalesced) and combine their partial results with a block reduction, instead of one thread walking the row alone."),
    "warp_per_row": ("One warp per row", "Give each row a warp (or a group of 2-32 lanes) with no barriers: its lanes take interleaved columns (coalesced, i * W + lane), combine their partials with a register shuffle reduction, and one lane writes the result; for rows too short to fill a block, instead of one thread walking the row alone."),
    "packed_half2_math": ("Packed half2 arithmetic", "Compute two half (or bfloat16) values per instruction with the half2 intrinsics (__hadd2, __hmul2, __hfma2) instead of one lane at a time."),
    "block_swizzle": ("Swizzle the order of the blocks", "Map the launch's block index to the tile a block works on through a permutation (diagonal order against partition camping, raster swizzles for cache reuse) instead of the natural order."),
    "coalesced_access": ("Coalesce global accesses across a warp", "Map the thread index that varies fastest within a warp (threadIdx.x) to the contiguous dimension of the global arrays, so a warp's accesses fall on consecutive addresses (one transaction per 128 bytes) instead of one per thread."),
    # the shared-memory tree reduction ladder (mining/operators/reduction_tree.py)
    "compile_time_unroll": ("Unroll the reduction tree at compile time", "Make the block size a template parameter and write the shared-memory tree out per stride, each level guarded by the block size and followed by its barrier: no loop counter, no loop branch, dead levels removed by the compiler."),
    "unrolled_last_warp": ("Unroll the last warp of a tree reduction", "Once 32 or fewer threads are active, finish the last six levels of the shared-memory tree in one warp without block barriers (with __syncwarp between each level's reads and writes)."),
    "sequential_addressing": ("Sequential addressing in a tree reduction", "Halve the stride from blockDim.x / 2 and let thread t add slot t + s into slot t: the active threads stay contiguous and consecutive threads read consecutive words (no shared-memory bank conflicts)."),
    "divergence_free_indexing": ("Contiguous active threads in a tree reduction", "Select each level's active threads by a strided index (index = 2 * s * tid) instead of the divergent tid % (2 * s) test: whole warps retire together and the modulo goes away."),
    "thread_coarsening": ("Coarsen the per-thread work", "Give each thread several elements (a pack, a tile, several rows) sized by a compile-time constant: more independent work per thread, wider accesses, fewer threads and less index arithmetic."),
}

from mining.operators.cache_hints import HINT_SKILLS  # noqa: E402  (cache hints, each its own skill)

CARRIER_SKILLS.update(HINT_SKILLS)

# operators whose skill is not the carrier's main one
OPERATOR_SKILLS: dict[str, tuple[str, str]] = {
    "drop_grid_clamp": ("Clamp the grid to the resident capacity", "Launch only as many blocks as the GPU keeps resident (SMs x blocks per SM) and let a grid-stride loop cover the rest: no tail wave, per-block setup amortized."),
    "block_stride_to_chunks": ("Block-stride loop for coalesced sweeps", "Let the threads of a block walk a range with stride blockDim.x, so that in every iteration a warp touches consecutive addresses (coalesced), instead of each thread sweeping its own contiguous chunk."),
    "lookback_to_chained": ("Decoupled look-back instead of a chained scan", "Let a tile sum the aggregates its predecessors publish as soon as they know them, a warp-wide window at a time, up to the first published inclusive prefix, instead of waiting for its immediate predecessor's inclusive prefix: tiles stop serializing on each other's completion."),
    "block_scan_to_thread_totals": ("Block scan over warp totals", "Let the last lane publish its warp's inclusive scan value (the warp total) and fold one value per warp in the block step, instead of publishing and folding every thread's total."),
    "block_tree_to_thread_sum": ("Block tree reduction in shared memory", "Split a sum that one thread computes over a whole range among the block's threads: each adds a strided slice, parks its partial in a shared array, and a halving tree with a barrier per level folds the slots; thread 0 reads slot 0."),
    "register_tile_to_dot": ("Outer-product register tile (fragment reuse)", "Accumulate a small block of outputs per thread as an outer product of fragments loaded once per reduction step, instead of running one dot product per output that reloads both operands."),
}

# requires / conflicts between carriers, in the optimizing direction
REQUIRES = {"shared_padding": ["shared_tile"], "double_buffer": ["shared_tile"], "transposed_tile": ["shared_tile"],
            "multi_stage_pipeline": ["async_copy", "shared_tile"], "block_reduce_shared": ["warp_shuffle_reduce"],
            "block_scan": ["warp_scan"], "decoupled_lookback": ["dynamic_tile_id"], "halo_tile": ["shared_tile"],
            "coalesced_transpose": ["shared_tile"],
            # the reduction ladder: each forward rewrite reads the tree the rung before leaves
            "sequential_addressing": ["divergence_free_indexing"], "unrolled_last_warp": ["sequential_addressing"],
            "compile_time_unroll": ["sequential_addressing"]}
CONFLICTS = {"double_buffer": ["multi_stage_pipeline"], "multi_stage_pipeline": ["double_buffer"]}


@dataclass
class StepContext:
    """Everything lifting needs about one accepted step (optimized = the step's input)."""
    index: int
    operator: str
    carrier: str
    proposer: str
    description: str
    variant: str
    optimized: str
    simpler: str
    site_start: int
    site_end: int
    static_optimized: dict[str, Any]
    static_simpler: dict[str, Any]
    profile_optimized: Optional[dict[str, Any]] = None
    profile_simpler: Optional[dict[str, Any]] = None
    probes_optimized: list[ProbeOutcome] = field(default_factory=list)
    probes_simpler: list[ProbeOutcome] = field(default_factory=list)
    induced: Optional[Hypothesis] = None
    # where the simpler form alone fails: the bound the step (the simplification) holds under
    step_bound: Optional[Hypothesis] = None
    guard: Optional[dict[str, Any]] = None  # {"text", "outcomes", "induced"} when a guard was forced
    function: str = ""
    axes: list[str] = field(default_factory=list)  # the definition's axis names (guards use kernel parameter names)
    expert: str = ""  # the lineage's start (the expert kernel as written): the card's example comes from it
    problem_dir: str = ""  # the problem folder: its hand-written naive.cu is the example's "before"


# What each optimization needs of the code by construction, whatever the sizes: probing sizes cannot
# find these, and retrieval checks them against query code (retrieval/applicability.py)
STRUCTURAL: dict[str, list[tuple[str, int, str]]] = {
    "vector_load": [
        ("contiguous", 0, "each thread reads 4 consecutive elements: unit stride in the fastest-varying index "
                          "(an index that moves by a row pitch per iteration, like B[k * N + col], does not qualify)"),
        ("alignment", 16, "every vector access starts 16-byte aligned (cudaMalloc bases are; offsets must be "
                          "multiples of 4 floats), and the count is a multiple of 4 or a scalar tail does the rest")],
    "vector_store": [
        ("contiguous", 0, "each thread writes 4 consecutive elements: unit stride in the fastest-varying index"),
        ("alignment", 16, "every vector access starts 16-byte aligned, and the count is a multiple of 4 or a "
                          "scalar tail does the rest")],
    "warp_shuffle_reduce": [
        ("structure", 0, "values held by different threads of a warp are combined into one (a reduction across "
                         "threads); a loop that computes a whole output in one thread has nothing to combine")],
    "block_reduce_shared": [("structure", 0, "values from several warps of a block are combined into one")],
    "atomic_per_block": [("structure", 0, "many threads of a block add into the same global location")],
    "warp_scan": [("structure", 0, "a prefix sum across the threads of a warp")],
    "shared_tile": [("structure", 0, "several threads of a block read the same global elements (reuse)")],
    "ldg": [("structure", 0, "the data is not written by any thread while the kernel runs")],
    "restrict": [("structure", 0, "no element is reachable through two of the pointers (no aliasing)")],
}

_ARTEFACT_SHARED = re.compile(r"__shared__\s+(?:volatile\s+)?(\w+)\s+(ks_\w+)\s*\[\s*(\d+)\s*\]")
_SIZES = {"float": 4, "int": 4, "unsigned": 4, "double": 8, "long": 8, "half": 2, "__half": 2, "short": 2,
          "char": 1, "__nv_bfloat16": 2, "int64_t": 8, "uint64_t": 8, "int32_t": 4, "uint32_t": 4}


def artefact_smem(source: str, function: str = "", names: Optional[set] = None) -> int:
    """Shared bytes of arrays the simplification operators introduced (``ks_*``, e.g. the
    ``ks_xchg_float[1024]`` exchange of shuffle_to_shared) in use by ``function`` and the device
    functions it calls (or the whole file); ``names``: count only these arrays."""
    src = Source(source)
    texts = {g.name: src.raw[g.start_byte:g.end_byte].decode("utf-8", "replace") for g in src.funcs}
    if function in texts:  # the function and the device functions it calls (inlined into its kernel)
        reach, todo = {function}, [function]
        while todo:
            body = texts[todo.pop()]
            for name in texts:
                if name not in reach and re.search(rf"\b{re.escape(name)}\s*\(", body):
                    reach.add(name)
                    todo.append(name)
        code = "\n".join(texts[n] for n in sorted(reach))
    else:
        code = source
    total = 0
    for m in _ARTEFACT_SHARED.finditer(code):
        if names is not None and m.group(2) not in names:
            continue
        if len(re.findall(rf"\b{m.group(2)}\b", code)) > 1:  # declared and used (unused ones are dropped)
            total += _SIZES.get(m.group(1), 4) * int(m.group(3))
    return total


def _function_text(source: str, name: str) -> tuple[str, int, int]:
    src = Source(source)
    f = next((g for g in src.funcs if g.name == name), None)
    if f is None:
        return "", 0, 0
    return src.raw[f.start_byte:f.end_byte].decode("utf-8", "replace"), f.line, src.line_of(max(f.start_byte, f.end_byte - 1))


def site_region(source: str, start: int, end: int, max_lines: int = 60) -> tuple[str, int, int]:
    """(text, first line, last line) of the code around a site that shows an optimization whole: its
    function when that is short, else the outermost statement of the function body holding it, with
    two lines either side (a vector load's cast, its n/4 bound and its scalar tail are there)."""
    src = Source(source)
    f = src.function_at(start)
    if f is not None:
        text_, a, b = _function_text(source, f.name)
        if text_ and b - a < max_lines:
            return text_, a, b
    node = src.tree.root_node.descendant_for_byte_range(start, max(start, end - 1))
    while node is not None and node.parent is not None and not (
            node.parent.type == "compound_statement" and node.parent.parent is not None
            and node.parent.parent.type == "function_definition"):
        node = node.parent
    if node is None or node.parent is None:
        return src.excerpt(start, end), src.line_of(start), src.line_of(max(start, end - 1))
    lines = source.splitlines()
    a, b = max(1, src.line_of(node.start_byte) - 2), min(len(lines), src.line_of(max(node.start_byte, node.end_byte - 1)) + 2)
    b = min(b, a + max_lines - 1)
    return "\n".join(lines[a - 1:b]) + "\n", a, b


def real_example(ctx: StepContext) -> dict[str, str]:
    """The card's example from code people wrote: "after" is the expert's code at the site (the
    function holding it, as written), "before" the problem's hand-written naive kernel when it lacks
    this optimization. Empty halves when there is no such code (the mechanical diff remains)."""
    from mining.carriers import DETECTORS

    out: dict[str, str] = {}
    expert = ctx.expert or ""
    if expert and ctx.function:
        text_, a, b = _function_text(expert, ctx.function)
        if text_ and b - a < 60:
            out["after"] = strip_carrier_marks(text_)
            out["after_from"] = f"the expert kernel, `{ctx.function}` (lines {a}-{b}), as written"
    if "after" not in out and "ks_" not in ctx.optimized:
        text_, a, b = site_region(ctx.optimized, ctx.site_start, ctx.site_end)
        if "ks_" not in text_:
            out["after"] = strip_carrier_marks(text_)
            out["after_from"] = ("the expert kernel" if ctx.index == 1 else
                                 f"the expert kernel after {ctx.index - 1} earlier simplification step(s)") + f", lines {a}-{b}"
    naive = Path(ctx.problem_dir) / "naive.cu" if ctx.problem_dir else None
    if naive is not None and naive.is_file():
        code = naive.read_text(errors="replace")
        src = Source(code)
        detect = DETECTORS.get(ctx.carrier)
        try:
            has = bool(detect(src)) if detect else False
        except Exception:  # a detector bug must not lose the skill
            has = True
        kernels = [f for f in src.funcs if f.is_kernel]
        if kernels and not has:
            parts = [src.raw[f.start_byte:f.end_byte].decode("utf-8", "replace") for f in kernels]
            body = strip_carrier_marks("\n\n".join(parts))
            if body.count("\n") < 60:
                out["before"] = body
                out["before_from"] = f"naive.cu of the same problem (written by hand, without {ctx.carrier})"
    return out


def anchor_of(source: str, start: int, end: int) -> Anchor:
    src = Source(source)
    node = src.tree.root_node.descendant_for_byte_range(start, max(start, end - 1))
    path, loop = [], ""
    n = node
    while n is not None and n.type != "translation_unit":
        path.append(n.type)
        if not loop and n.type in ("for_statement", "while_statement", "do_statement"):
            header = src.raw[n.start_byte:n.end_byte].decode("utf-8", "replace").split("\n", 1)[0]
            loop = " ".join(header.split())[:120]
        if n.type == "function_definition":
            break
        n = n.parent
    f = src.function_at(start)
    return Anchor(function=f.name if f else "", ast_path=list(reversed(path))[:24], enclosing_loop=loop,
                  line=src.line_of(start), excerpt=src.excerpt(start, end))


def _kernel_stats(static: dict[str, Any], arch: str, function: str) -> Optional[dict[str, Any]]:
    kernels = static.get("archs", {}).get(arch, {}).get("kernels", {})
    if not kernels:
        return None
    for name, stats in kernels.items():
        if name.split("(")[0].split("<")[0].split("::")[-1].strip() == function:
            return stats
    # the site is in a device function or host code: use the whole module
    agg = {"registers": max(s.get("registers", 0) for s in kernels.values()),
           "smem_static": sum(s.get("smem_static", 0) for s in kernels.values()),
           "spill_stores": sum(s.get("spill_stores", 0) for s in kernels.values()),
           "spill_loads": sum(s.get("spill_loads", 0) for s in kernels.values()), "sass": {}}
    for s in kernels.values():
        for op, c in s.get("sass", {}).items():
            agg["sass"][op] = agg["sass"].get(op, 0) + c
    return agg


def static_effects(ctx: StepContext) -> list[Effect]:
    """Static deltas per arch, shared memory net of artefacts an earlier step left (``artefact_smem``
    over the arrays already in the step's input): a step that retires an exchange array an earlier
    simplification introduced does not own its bytes. An array this step's own simplification adds
    (shuffles -> a shared exchange) is the step's real contrast and stays."""
    out = []
    left = set(re.findall(r"\b(ks_\w+)\s*\[", ctx.optimized))
    art = artefact_smem(ctx.optimized, ctx.function) - artefact_smem(ctx.simpler, ctx.function, left) if left else 0
    for arch in sorted(ctx.static_optimized.get("archs", {})):
        a = _kernel_stats(ctx.static_optimized, arch, ctx.function)
        b = _kernel_stats(ctx.static_simpler, arch, ctx.function)
        if a is None or b is None:
            continue
        ops = set(a.get("sass", {})) | set(b.get("sass", {}))
        sass = {op: a.get("sass", {}).get(op, 0) - b.get("sass", {}).get(op, 0) for op in ops}
        sass = {k: v for k, v in sorted(sass.items(), key=lambda kv: (-abs(kv[1]), kv[0]))[:8] if v}
        out.append(Effect(device=f"static:{arch}", method="static",
                          registers_delta=a.get("registers", 0) - b.get("registers", 0),
                          smem_delta=a.get("smem_static", 0) - b.get("smem_static", 0) - art,
                          spill_delta=(a.get("spill_stores", 0) + a.get("spill_loads", 0))
                          - (b.get("spill_stores", 0) + b.get("spill_loads", 0)),
                          sass_delta=sass))
    return out


def timing_effect(ctx: StepContext) -> Optional[Effect]:
    """simpler time / optimized time on the largest workload, with a spread from the IQRs."""
    if not ctx.profile_optimized or not ctx.profile_simpler:
        return None
    po, ps = ctx.profile_optimized.get("workloads", {}), ctx.profile_simpler.get("workloads", {})
    common = [w for w in po if w in ps]
    if not common:
        return None
    def volume(w: str) -> int:
        v = 1
        for x in po[w].get("axes", {}).values():
            v *= max(1, int(x))
        return v
    w = max(common, key=volume)
    o, s = po[w], ps[w]
    dev = ctx.profile_optimized.get("device", {})
    name = dev.get("name", "GPU")
    cc = dev.get("compute_capability") or dev.get("cc") or ""
    ratios = [ps[x]["median_ms"] / po[x]["median_ms"] for x in common if po[x]["median_ms"] > 0]
    return Effect(device=f"{name}" + (f" (sm_{str(cc).replace('.', '')})" if cc else ""), method="gpu_timing",
                  time_ratio=round(s["median_ms"] / o["median_ms"], 4),
                  time_ratio_q1=round(s["q1_ms"] / o["q3_ms"], 4) if o["q3_ms"] else None,
                  time_ratio_q3=round(s["q3_ms"] / o["q1_ms"], 4) if o["q1_ms"] else None,
                  workload=w,
                  timings_ms={"optimized": {k: o[k] for k in ("median_ms", "q1_ms", "q3_ms", "repeats")},
                              "simpler": {k: s[k] for k in ("median_ms", "q1_ms", "q3_ms", "repeats")},
                              "geomean_ratio_all_workloads": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 4)
                              if ratios else None})


def preconditions_of(ctx: StepContext) -> tuple[list[Precondition], list[Risk], list[str]]:
    pre, risks, log = [], [], []
    n = len(ctx.probes_optimized)
    if n:
        ok_o = sum(o.passed for o in ctx.probes_optimized)
        ok_s = sum(o.passed for o in ctx.probes_simpler)
        log.append(f"probes: {n} adversarial workloads; optimized form passes {ok_o}, simpler form passes {ok_s}")
    probes_record = [{"axes": o.axes, "optimized": o.passed, "simpler": s.passed}
                     for o, s in zip(ctx.probes_optimized, ctx.probes_simpler)]
    if ctx.induced is not None:
        h = ctx.induced
        pre.append(Precondition(kind=h.kind, axis=h.axis, value=h.value, text=h.text, source="probe",
                                probes=probes_record, status="discovered"))
        for o, s in zip(ctx.probes_optimized, ctx.probes_simpler):
            if not o.passed and s.passed:
                risks.append(Risk(text=f"violating {h.text}: the optimized form fails", probe=o.axes, failure=o.reason[:300]))
                break
    if ctx.guard:
        g = ctx.guard
        for kind, name, value in code_guard_text(g["text"]):
            axis = next((a for a in ctx.axes if a == name), None) or next(
                (a for a in ctx.axes if a.lower() == name.lower()), name)
            pre.append(Precondition(kind=kind, axis=axis, value=value, text=f"{axis} % {value} == 0",
                                    source="code_guard", status="guarded_in_code",
                                    probes=[{"guard": g["text"]}]))
        outs: list[ProbeOutcome] = g.get("outcomes", [])
        if outs:
            log.append(f"guard `{g['text']}` forced true: {sum(o.passed for o in outs)}/{len(outs)} probes pass")
        ih: Optional[Hypothesis] = g.get("induced")
        if ih is not None:
            pre.append(Precondition(kind=ih.kind, axis=ih.axis, value=ih.value, text=ih.text, source="probe",
                                    probes=[{"axes": o.axes, "optimized_unguarded": o.passed} for o in outs],
                                    status="discovered"))
            bad = next((o for o in outs if not o.passed), None)
            if bad is not None:
                risks.append(Risk(text=f"without the guard `{g['text']}` ({ih.text} violated) the optimized path fails",
                                  probe=bad.axes, failure=bad.reason[:300]))
    if ctx.step_bound is not None:
        h = ctx.step_bound
        pre.append(Precondition(kind=h.kind, axis=h.axis, value=h.value, text=h.text, source="probe",
                                probes=probes_record, status="discovered"))
        for o, s in zip(ctx.probes_optimized, ctx.probes_simpler):
            if o.passed and not s.passed:
                risks.append(Risk(text=f"the step holds only while {h.text}: beyond it the simpler form is wrong, so "
                                       "the optimized form is needed for correctness there, not only for speed",
                                  probe=s.axes, failure=s.reason[:300]))
                break
        log.append(f"step valid only while {h.text} (the simpler form fails beyond it)")
    if not pre:
        pre.append(Precondition(kind="none_found", text="no probe made the optimized form fail: valid for every size "
                                f"tried ({_sizes_tried(ctx.probes_optimized)})",
                                probes=probes_record, status="not_needed"))
    for kind, value, text_ in STRUCTURAL.get(ctx.carrier, []):
        pre.append(Precondition(kind=kind, value=value, text=text_, source="optimization", status="required"))
    return pre, risks, log


def _sizes_tried(outcomes: list[ProbeOutcome]) -> str:
    """'N up to 16385' per axis: what "every size tried" covered."""
    top: dict[str, int] = {}
    for o in outcomes:
        for axis, v in o.axes.items():
            top[axis] = max(top.get(axis, 0), int(v))
    return ", ".join(f"{a} up to {v}" for a, v in top.items()) or "no probes"


def lift_step(ctx: StepContext, *, problem: str, op_type: str, lineage_id: str, kernel_hash: str, executor: str,
              workloads: list[str], seeds: list[int], tolerances: dict[str, list[float]], dtypes: list[str],
              gate_log: list[str]) -> Skill:
    variant = ctx.variant
    from mining.operators.registry import skill_operator

    operator = skill_operator(ctx.operator) if ctx.proposer == "deterministic" else "llm"
    key, skill_id = skill_identity(ctx.carrier, operator, variant)
    name, intent = OPERATOR_SKILLS.get(operator) or CARRIER_SKILLS.get(
        ctx.carrier, (ctx.carrier.replace("_", " "), ctx.description))
    if ctx.proposer == "llm" and ctx.description:
        intent = f"{intent} (LLM-proposed step: {ctx.description})"
    before, after, diff = exemplar(ctx.optimized, ctx.simpler)
    anchor = anchor_of(ctx.optimized, ctx.site_start, ctx.site_end)
    effects = static_effects(ctx)
    timed = timing_effect(ctx)
    if timed is not None:
        effects.insert(0, timed)
    pre, risks, probe_log = preconditions_of(ctx)
    archs = sorted(ctx.static_optimized.get("archs", {}))
    evidence = Evidence(problem=problem, op_type=op_type, lineage_id=lineage_id, step=ctx.index,
                        kernel_hash=kernel_hash, executor=executor, workloads=workloads, seeds=seeds,
                        tolerances=tolerances, before=before, after=after, diff=diff, effect=effects)
    verification = [f"{problem} step {ctx.index}: " + line for line in gate_log + probe_log]
    return Skill(
        skill_id=skill_id, key=key, name=name, intent=intent, carrier=ctx.carrier, operator=operator, variant=variant,
        anchor=anchor, before=before, after=after, example=real_example(ctx), diff=diff, preconditions=pre, effect=effects,
        evidence=[evidence], risks=risks,
        scope={"op_types": [op_type], "problems": [problem], "dtypes": dtypes, "archs": archs},
        requires=REQUIRES.get(ctx.carrier, []), provides=[ctx.carrier], conflicts=CONFLICTS.get(ctx.carrier, []),
        verification=verification,
        provenance={"tool_version": TOOL_VERSION, "per_lineage": {lineage_id: {
            "preconditions": [p.model_dump(mode="json") for p in pre],
            "risks": [r.model_dump(mode="json") for r in risks],
            "verification": verification, "dtypes": dtypes, "archs": archs}}},
    )
