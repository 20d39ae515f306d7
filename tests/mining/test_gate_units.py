"""Pure pieces of the gate: binding by name, inputs, comparison, sandbox limits, ptxas parsing."""
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from corpora.problem import load_problem
from mining.gate.binding import bind_entry
from mining.gate.data import bf16_round, bf16_to_f32, compare, make_inputs
from mining.gate.errors import BadInput
from mining.gate.sandbox import run_limited
from mining.gate.static import count_loops, loop_contents, parse_ptxas, parse_sass
from tests.conftest import KERNELS


def _defn():
    return load_problem(KERNELS / "vector_add").definition


def test_binding_by_name_any_order():
    src = "void vector_add(int N, float* y, const float* __restrict__ b, const float* a) {}"
    eb = bind_entry(src, Path("k.cu"), "vector_add", _defn())
    assert [(b.param.name, b.role) for b in eb.bindings] == [("N", "axis"), ("y", "output"), ("b", "input"), ("a", "input")]


@pytest.mark.parametrize("src, needle", [
    ("void vector_add(const float* a, const float* b, float* y, int n) {}", "parameter 'n' of vector_add binds to no input"),
    ("void vector_add(const float* a, const float* b, int N) {}", "no parameter for y"),
    ("void vector_add(const double* a, const float* b, float* y) {}", "element type double does not match dtype float32"),
    ("void vector_add(float* a, const float* b, float* y) {}", "input must be 'const float*'"),
    ("void vector_add(const float* a, const float* b, const float* y) {}", "output must not be const"),
    ("void other(const float* a) {}", "entry function 'vector_add' (solution.toml) not found; host functions here: other"),
    ("__global__ void vector_add(const float* a, const float* b, float* y) {}", "is a __global__ kernel"),
    ("void vector_add(const float* a, const float* b float* y) {}", "could not parse"),
])
def test_binding_errors(src, needle):
    with pytest.raises(BadInput) as exc:
        bind_entry(src, Path("/x/k.cu"), "vector_add", _defn())
    assert needle in str(exc.value)
    assert str(exc.value).startswith("/x/k.cu")


def test_inputs_fresh_per_seed_and_never_zero():
    p = load_problem(KERNELS / "vector_add")
    w = p.workloads[1]
    a0, a1 = make_inputs(p.definition, w, 0), make_inputs(p.definition, w, 1)
    assert not np.array_equal(a0["a"], a1["a"])
    assert np.array_equal(a0["a"], make_inputs(p.definition, w, 0)["a"])  # seeded
    assert np.count_nonzero(a0["a"]) == a0["a"].size
    assert not np.array_equal(a0["a"], a0["b"])


def test_compare_catches_wrong_unwritten_and_nan():
    ref = np.arange(8, dtype=np.float32)
    good = compare(ref.tobytes(), ref, "float32", 1e-4, 1e-5)
    assert good.ok and good.wrong == 0
    out = ref.copy()
    out[3] += 1.0
    raw = bytearray(out.tobytes())
    raw[20:24] = b"\xff\xff\xff\xff"  # element 5 never written (poison)
    bad = compare(bytes(raw), ref, "float32", 1e-4, 1e-5)
    assert not bad.ok and bad.wrong == 1 and bad.unwritten == 1 and bad.nan == 1
    nan_ref = np.full(2, np.nan, np.float32)
    assert not compare(nan_ref.tobytes(), nan_ref, "float32", 1e-4, 1e-5).ok  # NaN never passes
    ints = np.array([1, -1, 5], np.int32)
    assert compare(ints.tobytes(), ints, "int32", 0, 0).ok  # -1 written on purpose is fine
    assert compare(np.array([1, -1, 6], np.int32).tobytes(), ints, "int32", 0, 0).wrong == 1


def test_bf16_round_trip():
    x = np.array([1.0, -2.5, 3.14159, 1e-3], np.float32)
    back = bf16_to_f32(bf16_round(x))
    assert np.allclose(back, x, rtol=1e-2)
    assert back[0] == 1.0 and back[1] == -2.5


def test_sandbox_timeout_kills_group():
    t = time.perf_counter()
    res = run_limited([sys.executable, "-c", "import subprocess,time; subprocess.Popen(['sleep','30']); time.sleep(30)"],
                      timeout_s=1.0)
    assert res.timed_out and not res.ok
    assert time.perf_counter() - t < 5


def test_sandbox_memory_limit():
    res = run_limited([sys.executable, "-c", "import time; x = bytearray(600 << 20); x[::4096] = b'1' * len(x[::4096]); time.sleep(20)"],
                      timeout_s=15, mem_mb=200)
    assert res.mem_exceeded and not res.ok


def test_sandbox_reports_signal():
    res = run_limited([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"], timeout_s=10)
    assert res.signal_name == "SIGSEGV"


def test_parse_ptxas_and_sass():
    log = """ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90'
ptxas info    : Function properties for _Z3fooPf
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 360 bytes cmem[0]
"""
    k = parse_ptxas(log)["_Z3fooPf"]
    assert k == {"registers": 40, "spill_stores": 4, "spill_loads": 4, "stack_frame": 8, "smem_static": 4096,
                 "cmem": 360, "barriers": 1}
    sass = parse_sass("""\t\tFunction : _Z3fooPf
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;   /* 0x0 */
        /*0010*/              @P0   SHFL.BFLY PT, R5, R4, 0x1, 0x1f ;   /* 0x0 */
        /*0020*/                   EXIT ;  /* 0x0 */
""")
    assert sass["_Z3fooPf"] == {"LDG.E.128": 1, "SHFL.BFLY": 1, "EXIT": 1}


def test_count_loops_sees_backward_branches_only():
    dump = """\t\tFunction : _Z4loopPf
        /*0070*/               @P0 EXIT ;   /* 0x0 */
        /*00d0*/                   LDG.E R4, desc[UR4][R2.64] ;   /* 0x0 */
        /*0140*/              @!P0 BRA 0xd0 ;   /* 0x0 */
        /*0150*/                   BRA 0x1a0 ;   /* 0x0 */
        /*0160*/                   EXIT ;  /* 0x0 */
        /*0170*/                   BRA 0x170;  /* 0x0 */
\t\tFunction : _Z4flatPf
        /*0070*/               @P0 BRA 0x90 ;   /* 0x0 */
        /*0080*/                   EXIT ;  /* 0x0 */
        /*0090*/                   BRA 0x90;  /* 0x0 */
"""
    # one loop (0x140 -> 0xd0); a forward branch and the end's self-branch padding are not loops
    assert count_loops(dump) == {"_Z4loopPf": 1, "_Z4flatPf": 0}


def test_the_rejoin_of_a_divergent_warp_sync_path_is_not_a_loop():
    """__syncwarp / shuffles compile to a BRA.DIV into an out-of-line path laid out after the code,
    which branches back to the rejoin point: backward, but not a loop. A loop inside that path is."""
    dump = """		Function : _Z4syncPf
        /*0070*/                   BRA.DIV UR4, 0x200 ;   /* 0x0 */
        /*0080*/                   WARPSYNC.ALL ;   /* 0x0 */
        /*0090*/                   LDG.E R4, desc[UR4][R2.64] ;   /* 0x0 */
        /*00a0*/              @!P0 BRA 0x90 ;   /* a real loop */
        /*00b0*/                   EXIT ;  /* 0x0 */
        /*0200*/                   WARPSYNC R5 ;   /* 0x0 */
        /*0210*/              @!P1 BRA 0x200 ;   /* retries inside the divergent path: a loop */
        /*0220*/                   BRA 0x80 ;   /* the rejoin */
        /*0230*/                   BRA 0x230;  /* 0x0 */
"""
    assert count_loops(dump) == {"_Z4syncPf": 2}
    # what each loop's body holds: the real loop reads global memory, the retry loop does not
    assert loop_contents(dump) == {"_Z4syncPf": {"BRA": 2, "LDG": 1, "WARPSYNC": 1}}


def test_two_lane_half_math_and_thread_bounds_from_the_cubin():
    from mining.gate.static import count_half2, max_threads
    dump = """\t\tFunction : _Z3mulP6__half
        /*0100*/                   HMUL2 R5, R2.H0_H0, R4.H0_H0 ;   /* scalar: one lane */
        /*0110*/                   HADD2.F32 R6, -RZ, R2.H1_H1 ;   /* a conversion to float */
        /*0120*/                   HFMA2.MMA R7, -RZ, RZ, 0, 0 ;   /* a constant */
        /*0130*/                   HMUL2 R8, R2, R4 ;   /* both lanes */
        /*0140*/              @P0  HFMA2.MMA R9, R2.reuse, R4, -RZ ;   /* both lanes, predicated */
        /*0150*/                   HADD2 R10, R2, R4.H0_H0 ;   /* a pair plus a broadcast half: both lanes */
\t\tFunction : _Z4flatPf
        /*0070*/                   FADD R1, R2, R3 ;
"""
    assert count_half2(dump) == {"_Z3mulP6__half": 3, "_Z4flatPf": 0}
    elf = """.nv.info._Z3mulP6__half
\t<0x1>
\tAttribute:\tEIATTR_CUDA_API_VERSION
\tFormat:\tEIFMT_SVAL
\tValue:\t0x82
\t<0x2>
\tAttribute:\tEIATTR_MAX_THREADS
\tFormat:\tEIFMT_SVAL
\tValue:\t0x100 0x1 0x1

.nv.info._Z4flatPf
\t<0x1>
\tAttribute:\tEIATTR_CUDA_API_VERSION
\tFormat:\tEIFMT_SVAL
\tValue:\t0x82
"""
    assert max_threads(elf) == {"_Z3mulP6__half": 256}
