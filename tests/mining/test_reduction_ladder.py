"""The classic shared-memory reduction ladder walked down and back up (mining/operators/reduction_tree.py
and its four pairs): the tree written out per stride, the unrolled last warp, sequential addressing,
the strided index. On the project's own fixtures in two spellings (tests/fixtures/cuda/ladder_tree_sum*.cu,
the reduce_sum problem's entry), every state gated on the CPU executor, each pair's forward rewrite
undoing its step, and the sites each operator must refuse."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from _operator_support import cpu_gate, to_fixpoint
from corpora.code.source import Source
from mining.carriers import carrier_names
from mining.operators import get_operator
from mining.operators.forward import run_rewrite

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cuda"
TREE = (FIXTURES / "ladder_tree_sum.cu").read_text()
VOLATILE = (FIXTURES / "ladder_tree_sum_volatile.cu").read_text()
SHUFFLE = (FIXTURES / "ladder_tree_sum_shuffle.cu").read_text()

LADDER = [  # (operator, carrier it removes, forward rewrite that puts it back)
    ("unrolled_tree_to_loop", "compile_time_unroll", "unroll_tree"),
    ("warp_tail_to_loop", "unrolled_last_warp", "unroll_last_warp"),
    ("sequential_to_interleaved", "sequential_addressing", "sequential_addressing"),
    ("strided_to_modulo", "divergence_free_indexing", "divergence_free_indexing"),
]
LADDER_CARRIERS = {c for _, c, _ in LADDER}


def _walk(source: str) -> list[str]:
    """The fixture and each state after one more rung of the ladder."""
    states = [source]
    for name, _, _ in LADDER:
        op = get_operator(name)
        sites = op.find_sites(states[-1])
        assert len(sites) == 1, (name, sites)
        states.append(op.apply(states[-1], sites[0]))
    return states


def _flat(s: str) -> str:
    return " ".join(s.split())


def test_the_ladder_walks_down_to_the_modulo_test_and_every_state_passes_the_gate(tmp_path):
    states = _walk(TREE)
    assert LADDER_CARRIERS <= carrier_names(TREE)
    for k, (name, carrier, _) in enumerate(LADDER, start=1):
        assert carrier not in carrier_names(states[k]), name
        assert cpu_gate("reduce_sum", states[k], tmp_path).passed, name
    end = _flat(Source(states[-1]).code.decode())  # comments blanked
    assert "for (unsigned int s = 1; s < blockDim.x; s *= 2) { if ((tid % (2 * s)) == 0) " in end
    assert "__syncwarp" not in end and "blockSize >=" not in end
    assert not LADDER_CARRIERS & carrier_names(states[-1])
    # the first rung: a runtime loop down to the last warp (nvcc cannot unroll it back)
    assert "for (unsigned int s = blockDim.x / 2; s > 32; s >>= 1) { if (tid < s) { sdata[tid] += sdata[tid + s]; }" \
        in _flat(states[1])


@pytest.mark.parametrize("k", range(len(LADDER)))
def test_each_pair_round_trips_through_its_forward_rewrite(k, tmp_path):
    states = _walk(TREE)
    name, carrier, rewrite = LADDER[k]
    mats = run_rewrite(rewrite, states[k + 1])
    assert len(mats) == 1 and mats[0].carrier == carrier
    back = mats[0].source
    assert carrier in carrier_names(back)
    assert cpu_gate("reduce_sum", back, tmp_path).passed
    # the step is undone again by its operator, back to the simplified state
    again, n = to_fixpoint(get_operator(name), back)
    assert n == 1 and _flat(again) == _flat(states[k + 1])


def test_older_spellings_guarded_rungs_a_local_block_size_and_a_volatile_helper(tmp_path):
    assert {"compile_time_unroll", "unrolled_last_warp"} <= carrier_names(VOLATILE)
    loop, n = to_fixpoint(get_operator("unrolled_tree_to_loop"), VOLATILE)
    assert n == 1 and "for (unsigned int s = blockDim.x / 2; s > 32; s >>= 1) { if (tid < s) { sdata[tid] = " \
        "sdata[tid] + sdata[tid + s]; } __syncthreads(); }" in _flat(loop)
    folded, n = to_fixpoint(get_operator("warp_tail_to_loop"), loop)
    # the tail and its helper (called nowhere else) are gone; the racy idiom became the synchronized loop
    assert n == 1 and "warpReduce" not in folded and "s > 0; s >>= 1" in folded
    assert cpu_gate("reduce_sum", folded, tmp_path).passed
    end, n = to_fixpoint(get_operator("sequential_to_interleaved"), folded)
    assert n == 1 and "unsigned int index = 2 * s * tid;" in end
    assert cpu_gate("reduce_sum", end, tmp_path).passed


@pytest.mark.parametrize("exchange", [False, True])
def test_a_running_value_and_a_shuffle_tail_walk_down(exchange, tmp_path):
    """The reduce-sample spelling: `sdata[tid] = sum = sum + sdata[tid + s]` and the last warp on `sum`
    with shuffles (or, after shuffle_to_shared, through its shared exchange): thread 0's sum is slot 0."""
    src = SHUFFLE
    if exchange:
        src, n = to_fixpoint(get_operator("shuffle_to_shared"), src)
        assert n == 1 and "ks_xchg_" in src
    states = _walk(src)
    assert "warp.shfl_down" not in states[2] and "tiled_partition" not in states[2]
    assert "s > 0; s >>= 1) { if (tid < s) { sdata[tid] = sum = sum + sdata[tid + s]; }" in _flat(states[2])
    # interleaved, slot 0 is read instead of thread 0's running value
    assert "if (block.thread_rank() == 0) atomicAdd(y, sdata[0]);" in states[3]
    assert "sdata[index] += sdata[index + s];" in states[3]
    for k in (2, 4):
        assert cpu_gate("reduce_sum", states[k], tmp_path).passed, k


@pytest.mark.parametrize("change", [
    # another thread's running value is read after the tail: only thread 0's is the block's sum
    ("if (block.thread_rank() == 0) atomicAdd(y, sum);", "if (block.thread_rank() < 2) atomicAdd(y, sum);"),
    # the running value written again after the tail
    ("if (block.thread_rank() == 0) atomicAdd(y, sum);", "sum *= 2.0f;\n    if (block.thread_rank() == 0) atomicAdd(y, sum);"),
    # a shuffle that is not a reduction down the warp
    ("sum += warp.shfl_down(sum, offset);", "sum += warp.shfl_xor(sum, offset);"),
    # a block of 32 threads: the tail's first level reads past the block
    ("const int threads = 256;", "const int threads = 32;"),
])
def test_shuffle_tail_refusals(change):
    loop, n = to_fixpoint(get_operator("unrolled_tree_to_loop"), SHUFFLE.replace(*change))
    if change[1].startswith("const int threads = 32"):
        loop = _walk(SHUFFLE)[1].replace(*change)
    assert get_operator("warp_tail_to_loop").find_sites(loop) == []


def test_a_max_tree_walks_down_too():
    src = TREE.replace("sdata[tid] += sdata[tid + 256];", "sdata[tid] = fmaxf(sdata[tid], sdata[tid + 256]);") \
        .replace("sdata[tid] += sdata[tid + 128];", "sdata[tid] = fmaxf(sdata[tid], sdata[tid + 128]);") \
        .replace("sdata[tid] += sdata[tid + 64];", "sdata[tid] = fmaxf(sdata[tid], sdata[tid + 64]);")
    loop, n = to_fixpoint(get_operator("unrolled_tree_to_loop"), src)
    assert n == 1 and "sdata[tid] = fmaxf(sdata[tid], sdata[tid + s]);" in loop
    # the tail adds: another operator than the loop's, so it is not folded into it
    assert to_fixpoint(get_operator("warp_tail_to_loop"), loop)[1] == 0


@pytest.mark.parametrize("change,refused", [
    # a block size that is not a power of two: the loop would visit other strides than the rungs
    (("#define THREADS 256", "#define THREADS 96"), "unrolled_tree_to_loop"),
    # a block size only known at run time
    (("tree_sum<THREADS><<<(N + THREADS - 1) / THREADS, THREADS>>>", "tree_sum<THREADS><<<(N + 255) / 256, N % 7 + 250>>>"),
     "unrolled_tree_to_loop"),
    # a template argument that disagrees with the launch's block (the rungs run for 512 threads)
    (("tree_sum<THREADS><<<(N + THREADS - 1) / THREADS, THREADS>>>", "tree_sum<512><<<(N + THREADS - 1) / THREADS, THREADS>>>"),
     "unrolled_tree_to_loop"),
    # a rung whose guard and stride disagree
    (("if (blockSize >= 256) {", "if (blockSize >= 512) {"), "unrolled_tree_to_loop"),
    # no barrier before the first rung
    (("sdata[tid] = i < n ? x[i] : 0.0f;\n    __syncthreads();", "sdata[tid] = i < n ? x[i] : 0.0f;"),
     "unrolled_tree_to_loop"),
    # a product is not the tree's sum: no combining step the ladder knows
    (("{ sdata[tid] += sdata[tid + 128]; }", "{ sdata[tid] *= sdata[tid + 128]; }"), "unrolled_tree_to_loop"),
])
def test_rung_refusals(change, refused):
    src = TREE.replace(*change)
    assert src != TREE
    assert get_operator(refused).find_sites(src) == []


def _at(k: int) -> str:
    return _walk(TREE)[k]


@pytest.mark.parametrize("state,change,refused", [
    # another slot than 0 read after the tree: the folded loop leaves other values there
    (1, ("if (tid == 0) atomicAdd(y, sdata[0]);", "if (tid == 0) atomicAdd(y, sdata[0] + sdata[1]);"),
     "warp_tail_to_loop"),
    (2, ("if (tid == 0) atomicAdd(y, sdata[0]);", "if (tid == 0) atomicAdd(y, sdata[0] + sdata[1]);"),
     "sequential_to_interleaved"),
    # the tail does not start where the loop stops
    (1, ("s > 32; s >>= 1", "s > 64; s >>= 1"), "warp_tail_to_loop"),
    # a tail missing a level
    (1, ("        v += sdata[tid + 4]; __syncwarp(); sdata[tid] = v; __syncwarp();\n", ""), "warp_tail_to_loop"),
    # blocks of 96 threads: the two trees drop different elements
    (2, ("#define THREADS 256", "#define THREADS 96"), "sequential_to_interleaved"),
    # the strided index tested against another bound than the thread count
    (3, ("if (index < blockDim.x)", "if (index < n)"), "strided_to_modulo"),
    # the index used after the loop
    (3, ("if (tid == 0) atomicAdd(y, sdata[0]);", "unsigned int index = 0;\n    if (tid == 0) atomicAdd(y, sdata[index]);"),
     "strided_to_modulo"),
])
def test_loop_refusals(state, change, refused):
    base = _at(state)
    assert get_operator(refused).find_sites(base)
    src = base.replace(*change)
    assert src != base
    assert get_operator(refused).find_sites(src) == []


def test_the_register_carrying_step_is_not_made_interleaved():
    # `sdata[tid] = v = v + sdata[tid + s]`: interleaved, the writer of a slot is not its owner
    src = _at(3 - 1).replace("sdata[tid] += sdata[tid + s];", "sdata[tid] = acc = acc + sdata[tid + s];") \
        .replace("__syncthreads();\n\n    for", "float acc = sdata[tid];\n    __syncthreads();\n\n    for")
    assert re.search(r"acc = acc \+", src)
    assert get_operator("sequential_to_interleaved").find_sites(src) == []
