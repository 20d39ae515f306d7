"""Asynchronous copies in inline PTX (mining/operators/ptx_async.py, issue 19: detection by meaning):
a macro, a bare asm statement and a device-function wrapper around `cp.async` are made synchronous
by async_copy_to_sync and their group calls deleted by drop_pipeline_sync; sites refused where the
shared address cannot be traced to the pointer it came from; the result gated on the CPU (the
original cannot run there: no PTX on the CPU) and its SASS checked for LDGSTS being gone."""
from __future__ import annotations

import re
from pathlib import Path

from _operator_support import KERNELS, cpu_gate, to_fixpoint
from corpora.code.source import Source
from mining.operators import get_operator
from mining.operators.ptx_async import asm_copy, copy_sites, group_statements, is_group_asm, issues_copies

ASYNC, DROP = get_operator("async_copy_to_sync"), get_operator("drop_pipeline_sync")
PTX_ADD = (Path(__file__).resolve().parents[1] / "fixtures" / "cuda" / "async_add_ptx.cu").read_text()

HEAD = """#include <stdint.h>
#define CPA(d, s) asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" :: "r"(d), "l"(s))
"""


def _sites(code: str) -> list:
    return list(copy_sites(Source(code)))


def test_asm_text_is_read_as_ptx_operands():
    c = asm_copy('asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], %2;\\n" :: "r"(d), "l"(s), "n"(16))')
    assert (c.dst, c.src, c.size) == ("d", "s", "16")
    # operands swapped in the template: %1 is the destination
    c = asm_copy('asm volatile("cp.async.ca.shared.global [%1], [%0], 4;" :: "l"(g), "r"(sh))')
    assert (c.dst, c.src, c.size) == ("sh", "g", "4")
    # zero fill (a source-size operand) and two copies in one statement are not plain copies
    assert asm_copy('asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(d), "l"(s), "r"(n))') is None
    assert asm_copy('asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\\ncp.async.ca.shared.global [%2], [%3], 4;"'
                    ' :: "r"(d), "l"(s), "r"(d2), "l"(s2))') is None
    assert is_group_asm('asm volatile("cp.async.commit_group;\\n" ::)')
    assert is_group_asm('asm volatile("cp.async.wait_group %0;\\n" :: "n"(1))')
    assert not is_group_asm('asm volatile("cp.async.commit_group;\\nbar.sync 0;" ::)')


def test_three_spellings_become_plain_copies_and_their_group_calls_go():
    assert DROP.find_sites(PTX_ADD) == []  # copies are still issued: nothing to drop yet
    out, n = to_fixpoint(ASYNC, PTX_ADD)
    assert n == 3
    assert ("for (int ks_e = 0; ks_e < 16 / (int)sizeof(*(&sa[i / 128][i % 128])); ++ks_e) "
            "(&sa[i / 128][i % 128])[ks_e] = (&a[base + i])[ks_e];") in out
    assert "(sb + i)[ks_e] = (b + base + i)[ks_e];" in out
    assert "(&sc[i])[ks_e] = (c + base + i)[ks_e];" in out
    assert not issues_copies(Source(out))
    out, m = to_fixpoint(DROP, out)
    assert m == 3 and not list(group_statements(Source(out)))
    assert "COMMIT_ASYNC();" not in out and "wait_group" not in out.split("add_staged_ptx", 1)[1]


def test_sites_it_must_refuse():
    body = """
__global__ void k(const float* g, int n) {
    __shared__ __align__(16) float s[2][64];
    int j = threadIdx.x * 2;
    uint32_t p = __cvta_generic_to_shared(&s[0][j]);
    %s
    CPA(p, g + j);
}"""
    assert len(_sites(HEAD + body % "")) == 1
    # an index the address was computed from changes before the copy
    assert _sites(HEAD + body % "j += 2;") == []
    # the address itself is advanced (p no longer names &s[0][j])
    assert _sites(HEAD + body % "p += 8;") == []
    # an address that is not a converted generic pointer
    assert _sites(HEAD + body.replace("__cvta_generic_to_shared(&s[0][j])", "smem_base + 8 * j")) == []
    # a row pointer (not every dimension indexed): element k of it would be a row
    src = HEAD + body.replace("&s[0][j]", "&s[j]") % ""
    assert ASYNC.find_sites(src) == []
    # element types differ (double source into float shared memory)
    assert ASYNC.find_sites(HEAD + body.replace("const float* g", "const double* g") % "") == []


def test_ptx_copies_made_synchronous_pass_the_gate_and_ldgsts_is_gone(tmp_path):
    from mining.gate import GateConfig, run_gate

    out, _ = to_fixpoint(ASYNC, PTX_ADD)
    out, _ = to_fixpoint(DROP, out)
    # the CPU executor refuses any asm text and has no __cvta_generic_to_shared (only PTX can use
    # its result); the wrappers and the converted address are dead now, so the CPU run goes without
    # them (the static stage below builds the whole file with nvcc)
    src = Source(out)
    dead = sorted((f.start_byte, f.end_byte) for f in src.funcs if f.name in ("copy16_async", "wait_async_all"))
    raw = src.raw
    for a, b in reversed(dead):
        raw = raw[:a] + raw[b:]
    cpu = re.sub(r"(?m)^#define (ASYNC16|COMMIT_ASYNC)\b(.*\\\n)*.*\n", "", raw.decode())
    cpu = cpu.replace("uint32_t pa = __cvta_generic_to_shared(&sa[i / 128][i % 128]);", "")
    assert "asm" not in cpu.split("#include <stdint.h>", 1)[1] and "__cvta" not in cpu
    res = cpu_gate("vector_add", cpu, tmp_path)
    assert res.passed, res.reason
    cfg = GateConfig(executor="cpu", stages=("static",), store=tmp_path)
    counts = {}
    for label, text_ in (("expert", PTX_ADD), ("end", out)):
        r = run_gate(KERNELS / "vector_add", kernel=Path("kernel.cu"), config=cfg, source=text_).to_dict()
        kernels = r["stages"]["static"]["archs"]["sm_90"]["kernels"]
        counts[label] = sum(c for k in kernels.values() for op, c in k.get("sass", {}).items()
                            if op.startswith("LDGSTS"))
    assert counts["expert"] == 3 and counts["end"] == 0
