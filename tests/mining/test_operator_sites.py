"""The one property every deoptimization operator owes the walk, checked on the corpus: it finds at
least one site, and every site it finds is rewritten by a byte-local edit (the bytes outside the
site identical, the site itself changed) that parses no worse than its input, the same way twice.

"The corpus" is what the walk meets: each shipped expert kernel, and the kernel as it stands when
the operator's turn comes in registry order (every earlier operator applied to its fixpoint);
some operators only have sites there (drop_pipeline_sync after async_copy_to_sync, the two-pass
rewrites after drop_unroll_pragma or block_reduce_to_serial). An operator that finds no site on
any of them fails here: a property test over zero sites proves nothing."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest

from mining.operators import all_operators, get_operator
from corpora.code.parse import parse_cuda, syntax_issues

from _operator_support import KERNELS, assert_outside_identical, to_fixpoint

OPERATORS = [op.name for op in all_operators()]
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cuda"
PROBLEMS = sorted(p.name for p in KERNELS.iterdir() if (p / "kernel.cu").is_file())

# Operators written for outside idioms (issue 19) have no site in the shipped house corpus: their
# corpus here is the project's own kernels in those spellings (the ones their tests gate), walked the
# same way as the experts.
HINTS = """
__global__ void hinted(const float* a, float* y, float* z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = __ldcs(a + i) + __ldcg(a + i) + __ldca(a + i) + __ldlu(a + i) + __ldcv(a + i);
        __stcs(y + i, v);
        __stcg(z + i, v);
        __stwt(y + i, v);
        __stwb(z + i, v);
    }
}
"""
HALF2 = """#include <cuda_fp16.h>
__global__ void k(const __half2* a, const __half2* b, __half2* c) {
  int i = threadIdx.x;
  c[i] = __hfma2(a[i], b[i], c[i]);
}
"""


def _outside_idioms() -> list[str]:
    from test_generic_simplifications import ROW_SOFTMAX, SWIZZLED, TILED_T
    from test_warp_per_row import AND_HELPER, HALF_WARP, MOD_INLINE, TEMPLATE_WIDTH, WARP_BLOCK

    # the shared-memory reduction ladder (mining/operators/reduction_tree.py) in two spellings
    ladder = [(FIXTURES / name).read_text() for name in ("ladder_tree_sum.cu", "ladder_tree_sum_volatile.cu",
                                                               "ladder_tree_sum_shuffle.cu")]
    # private count tables merged into global memory, block tree sums read by thread 0
    from test_privatized_counts import ONE_BLOCK, PER_WARP, rows_variant
    # register-tiled GEMMs in two outside spellings (one output per pass, fragments read from shared)
    from test_operators_register_tile_passes import CONTIG, STRIDED
    return [HINTS, HALF2, ROW_SOFTMAX, SWIZZLED, TILED_T, *ladder, PER_WARP % "", rows_variant(), ONE_BLOCK,
            MOD_INLINE, AND_HELPER, HALF_WARP, TEMPLATE_WIDTH, WARP_BLOCK, STRIDED, CONTIG]


@functools.lru_cache(maxsize=None)
def _states() -> dict[str, list[str]]:
    """operator -> the distinct kernels it is checked on (experts, and each expert at its turn)."""
    out: dict[str, list[str]] = {name: [] for name in OPERATORS}
    experts = [(KERNELS / problem / "kernel.cu").read_text() for problem in PROBLEMS] + _outside_idioms()
    for expert in experts:
        source = expert
        for op in all_operators():
            out[op.name] += list(dict.fromkeys((expert, source)))
            source, _ = to_fixpoint(op, source, limit=60)
    return out


@functools.lru_cache(maxsize=None)
def _issues(source: str) -> int:
    return len(syntax_issues(parse_cuda(source)))


@pytest.mark.parametrize("name", OPERATORS)
def test_operator_has_sites_on_the_corpus_and_each_rewrite_is_byte_local(name):
    op = get_operator(name)
    n_sites = 0
    for source in _states()[name]:
        for site in op.find_sites(source):
            n_sites += 1
            new = op.apply(source, site)
            assert_outside_identical(source, new, site)
            assert op.apply(source, site) == new  # deterministic
            assert _issues(new) <= _issues(source), (name, site.line, site.excerpt)
    assert n_sites >= 1, f"{name} finds no site on the corpus (experts and outside idioms, or the walk's state at its turn)"
