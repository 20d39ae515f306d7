"""Static stage: nvcc -cubin per target arch with ptxas statistics, and the SASS opcode mix.

Facts recorded per kernel and arch: registers, spill stores/loads, stack frame (local memory),
static shared memory, constant memory, barriers, and (where cuobjdump exists) a histogram of
SASS opcodes, which shows what the compiler really generated (LDG.E.128 = 16-byte loads,
SHFL.BFLY = warp shuffles, LDL/STL = local memory), the loops the compiler kept (backward
branches), the two-lane half-precision arithmetic (HADD2/HMUL2/HFMA2 on both halves of a
register: scalar half math is the same opcodes on one lane, `R2.H0_H0`), and the thread bound a
kernel was compiled for (`__launch_bounds__`: EIATTR_MAX_THREADS in the cubin's .nv.info).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Optional

from mining.gate.sandbox import run_limited

_FUNC = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS = re.compile(r"ptxas info\s*: Function properties for (\S+)")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"ptxas info\s*: Used (\d+) registers(.*)")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")
_BARRIERS = re.compile(r"used (\d+) barriers")
_DIAG = re.compile(r"^(?P<file>[^\s:(]+)\((?P<line>\d+)\): (?P<kind>error|warning)[^:]*: (?P<msg>.*)$")


@lru_cache(maxsize=1)
def nvcc_path() -> Optional[str]:
    return shutil.which("nvcc")


@lru_cache(maxsize=1)
def cuobjdump_path() -> Optional[str]:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:  # PyPI nvidia-cuda-cuobjdump installs it inside the nvidia namespace package
        import nvidia  # type: ignore

        for base in getattr(nvidia, "__path__", []):
            for candidate in Path(base).glob("cu*/bin/cuobjdump"):
                if os.access(candidate, os.X_OK):
                    return str(candidate)
    except ImportError:
        pass
    return None


@lru_cache(maxsize=1)
def nvcc_version() -> str:
    exe = nvcc_path()
    if not exe:
        return "none"
    from mining.gate.cache import tool_output

    out = tool_output([exe, "--version"])
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def demangle(names: list[str]) -> dict[str, str]:
    exe = shutil.which("c++filt")
    if not exe or not names:
        return {n: n for n in names}
    out = subprocess.run([exe], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def parse_ptxas(text: str) -> dict[str, dict[str, Any]]:
    """ptxas -v output -> {mangled kernel name: stats}."""
    kernels: dict[str, dict[str, Any]] = {}
    current: Optional[str] = None
    for line in text.splitlines():
        if m := _FUNC.search(line):
            current = m.group(1)
            kernels.setdefault(current, {"registers": 0, "spill_stores": 0, "spill_loads": 0,
                                         "stack_frame": 0, "smem_static": 0, "cmem": 0, "barriers": 0})
        elif m := _PROPS.search(line):
            current = m.group(1)
            kernels.setdefault(current, {"registers": 0, "spill_stores": 0, "spill_loads": 0,
                                         "stack_frame": 0, "smem_static": 0, "cmem": 0, "barriers": 0})
        elif current and (m := _STACK.search(line)):
            kernels[current].update(stack_frame=int(m.group(1)), spill_stores=int(m.group(2)),
                                    spill_loads=int(m.group(3)))
        elif current and (m := _USED.search(line)):
            rest = m.group(2)
            kernels[current]["registers"] = int(m.group(1))
            if s := _SMEM.search(rest):
                kernels[current]["smem_static"] = int(s.group(1))
            if c := _CMEM.search(rest):
                kernels[current]["cmem"] = int(c.group(1))
            if b := _BARRIERS.search(rest):
                kernels[current]["barriers"] = int(b.group(1))
    return kernels


def _sass_lines(text: str) -> Iterator[tuple[str, Optional[str]]]:
    """(mangled function, stripped line) for every line of a SASS dump inside a function, and
    (function, None) at each function's header."""
    current: Optional[str] = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Function : "):
            current = stripped[len("Function : "):].strip()
            yield current, None
        elif current is not None:
            yield current, stripped


def parse_sass(text: str) -> dict[str, Counter]:
    """cuobjdump --dump-sass -> {mangled function: Counter(opcode with modifiers)}."""
    out: dict[str, Counter] = {}
    for fn, line in _sass_lines(text):
        if line is None:
            out[fn] = Counter()
            continue
        if not line.startswith("/*"):
            continue
        # "/*0080*/                   LDG.E.128 R4, desc[UR4][R2.64] ;"
        body = line.split("*/", 1)[1].strip() if "*/" in line else ""
        if not body or body.startswith("/*"):
            continue
        tokens = body.replace(";", " ").split()
        if tokens and tokens[0].startswith("@"):
            tokens = tokens[1:]
        if tokens and re.match(r"^[A-Z][A-Z0-9_.]*$", tokens[0]):
            out[fn][tokens[0]] += 1
    return out


_BRANCH = re.compile(r"^/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?BRA(?:\.\w+)*\s+(?:`?\(?)?(0x[0-9a-f]+)", re.I)
_DIVERGENT = re.compile(r"^/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?BRA\.DIV\s+\w+\s*,\s*(0x[0-9a-f]+)", re.I)
_INSTRUCTION = re.compile(r"^/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def _loops(text: str) -> dict[str, tuple[list[tuple[int, int]], list[tuple[int, str]]]]:
    """{mangled function: (loops as (first, last) addresses, instructions as (address, opcode
    family))}. A loop the compiler kept (not fully unrolled) ends in a branch to a lower address.
    Not loops: the self-branch that pads a function's end (``BRA 0x110`` at 0x110), and the branch
    that leaves the out-of-line divergent path of a warp-synchronous instruction (entered by
    ``BRA.DIV``, laid out after the code, ending in a branch back to the rejoin point before it)."""
    branches: dict[str, list[tuple[int, int]]] = {}
    divergent: dict[str, list[int]] = {}
    ops: dict[str, list[tuple[int, str]]] = {}
    for fn, line in _sass_lines(text):
        if line is None:
            branches[fn], divergent[fn], ops[fn] = [], [], []
            continue
        if m := _INSTRUCTION.match(line):
            ops[fn].append((int(m.group(1), 16), m.group(2)))
        if m := _DIVERGENT.match(line):
            divergent[fn].append(int(m.group(1), 16))
        elif (m := _BRANCH.match(line)) and int(m.group(2), 16) < int(m.group(1), 16):
            branches[fn].append((int(m.group(1), 16), int(m.group(2), 16)))
    out = {}
    for fn, found in branches.items():
        loops = []
        for at, to in found:
            region = max((t for t in divergent[fn] if t <= at), default=None)
            if region is None or to >= region:  # a branch inside a divergent path may still loop there
                loops.append((to, at))
        out[fn] = (loops, ops[fn])
    return out


def count_loops(text: str) -> dict[str, int]:
    """cuobjdump --dump-sass -> {mangled function: loops the compiler kept} (see `_loops`)."""
    return {fn: len(loops) for fn, (loops, _) in _loops(text).items()}


def loop_contents(text: str) -> dict[str, dict[str, int]]:
    """cuobjdump --dump-sass -> {mangled function: {opcode family: loops whose body holds one}}:
    `LDG` counts the loops that read global memory (a grid-stride loop does; a shared-memory tree
    loop does not)."""
    return {fn: _held(loops, ops) for fn, (loops, ops) in _loops(text).items()}


def _held(loops: list[tuple[int, int]], ops: list[tuple[int, str]]) -> dict[str, int]:
    held: Counter = Counter()
    for first, last in loops:
        held.update({family for addr, family in ops if first <= addr <= last})
    return dict(sorted(held.items()))


_HALF_OPS = ("HADD2", "HMUL2", "HFMA2")
_REG = re.compile(r"^-?\|?(R\d+|RZ)\b")
_ONE_LANE = re.compile(r"\.H0_H0\b|\.H1_H1\b")


def _two_lane(body: str) -> bool:
    """One SASS instruction: half arithmetic on both lanes of a register pair? `.F32` forms convert
    to float; an operand selecting one lane (`.H0_H0`, `.H1_H1`) is scalar math; only RZ sources
    (`HFMA2.MMA R5, -RZ, RZ, 0, 0`) materialize a constant."""
    tokens = body.replace(";", " ").replace(",", " ").split()
    if tokens and tokens[0].startswith("@"):
        tokens = tokens[1:]
    if not tokens or tokens[0].split(".")[0] not in _HALF_OPS or ".F32" in tokens[0]:
        return False
    regs = [t for t in tokens[2:] if (m := _REG.match(t)) and m.group(1) != "RZ"]
    return any(not _ONE_LANE.search(t) for t in regs)


def count_half2(text: str) -> dict[str, int]:
    """cuobjdump --dump-sass -> {mangled function: two-lane half arithmetic instructions}."""
    out: dict[str, int] = {}
    for fn, line in _sass_lines(text):
        if line is None:
            out[fn] = 0
        elif line.startswith("/*") and "*/" in line and _two_lane(line.split("*/", 1)[1].strip()):
            out[fn] += 1
    return out


_NV_INFO = re.compile(r"^\.nv\.info\.(\S+)")
_MAX_THREADS = re.compile(r"Attribute:\s*EIATTR_MAX_THREADS\s*\n\s*Format:[^\n]*\n\s*Value:\s*((?:0x[0-9a-f]+\s*)+)", re.I)


def max_threads(elf: str) -> dict[str, int]:
    """cuobjdump -elf -> {mangled function: the thread bound it was compiled for (x*y*z)}; a
    function without `__launch_bounds__` (or `.maxntid`) has no EIATTR_MAX_THREADS."""
    out: dict[str, int] = {}
    for block in re.split(r"\n(?=\.nv\.info\.)", elf):
        head = _NV_INFO.match(block.strip())
        if head and (m := _MAX_THREADS.search(block)):
            n = 1
            for v in m.group(1).split():
                n *= int(v, 16)
            out[head.group(1)] = n
    return out


def compile_diagnostics(stderr: str, kernel_name: str) -> list[dict[str, Any]]:
    diags = []
    for line in stderr.splitlines():
        m = _DIAG.match(line.strip())
        if m and m.group("kind") == "error":
            diags.append({"file": Path(m.group("file")).name, "line": int(m.group("line")), "message": m.group("msg")})
    return diags


# Failures of the machine, not of the kernel: a missing header or library, a compiler that crashed
# or was killed, a full disk, no usable GPU. Their results are never cached (issue 22): the fix is
# to the environment, and the kernel's verdict must be recomputed once it is made.
_ENVIRONMENT = re.compile(
    r"fatal error: [^\n]*: No such file or directory|No such file or directory[^\n]*#include|"
    r"cannot open source file|cannot find -l|error while loading shared libraries|"
    r"internal compiler error|Killed signal terminated program|g\+\+: fatal error: Killed|"
    r"No space left on device|Could not open output file|"
    r"KS_ERROR harness|no CUDA-capable device|CUDA driver version is insufficient|"
    r"busy or unavailable|cudaMalloc: out of memory|initialization error")


def environment_failure(stderr: str, timed_out: bool = False, mem_exceeded: bool = False,
                        returncode: Optional[int] = None) -> bool:
    """Did a build or run fail because of the machine (not a fact about the kernel)?"""
    return timed_out or mem_exceeded or returncode == 127 or bool(_ENVIRONMENT.search(stderr or ""))


def first_error_line(stderr: str, kernel_path: Path) -> str:
    """One line naming the kernel file and line for an nvcc/g++ failure."""
    for d in compile_diagnostics(stderr, kernel_path.name):
        return f"{kernel_path}:{d['line']}: {d['message']}"
    for line in stderr.splitlines():  # g++ style "file:line:col: error: msg"
        m = re.match(r"^(?P<file>[^:\s]+):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.*)$", line.strip())
        if m:
            name = Path(m.group("file")).name
            where = kernel_path if name == kernel_path.name else Path(m.group("file"))
            return f"{where}:{m.group('line')}: {m.group('msg')}"
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return f"{kernel_path}: {lines[-1] if lines else 'compilation failed'}"


def _compile_arch(src: Path, workdir: Path, arch: str, flags: list[str], timeout_s: float) -> dict[str, Any]:
    cubin = workdir / f"{arch}.cubin"
    cmd = [nvcc_path() or "nvcc", "-cubin", f"-arch={arch}", "-Xptxas", "-v,-warn-spills,-warn-lmem-usage",
           "-std=c++17", *flags, "-o", str(cubin), str(src)]
    res = run_limited(cmd, cwd=workdir, timeout_s=timeout_s, mem_mb=8192, writable=[workdir])
    if not res.ok:
        reason = "nvcc timed out" if res.timed_out else first_error_line(res.stderr, src)
        return {"arch": arch, "ok": False, "reason": reason, "log": res.stderr[-4000:],
                "environment": environment_failure(res.stderr, res.timed_out, res.mem_exceeded, res.returncode)}
    kernels = parse_ptxas(res.stderr)
    sass: dict[str, Counter] = {}
    loops: dict[str, int] = {}
    half2: dict[str, int] = {}
    held: dict[str, dict[str, int]] = {}
    bounds: dict[str, int] = {}
    tool = cuobjdump_path()
    if tool:
        # cuobjdump delegates to nvdisasm; the PyPI wheels put both in the same bin folder.
        env = {"NVDISASM_PATH": str(Path(tool).parent), "PATH": f"{Path(tool).parent}:{os.environ.get('PATH', '')}"}
        dump = run_limited([tool, "--dump-sass", str(cubin)], cwd=workdir, timeout_s=timeout_s, mem_mb=4096, env=env,
                           readable=[Path(tool).parent], writable=[workdir])
        if dump.ok:
            sass, half2, found = parse_sass(dump.stdout), count_half2(dump.stdout), _loops(dump.stdout)
            loops = {fn: len(fn_loops) for fn, (fn_loops, _) in found.items()}
            held = {fn: _held(fn_loops, ops) for fn, (fn_loops, ops) in found.items()}
            elf = run_limited([tool, "-elf", str(cubin)], cwd=workdir, timeout_s=timeout_s, mem_mb=4096, env=env,
                              readable=[Path(tool).parent], writable=[workdir])
            bounds = max_threads(elf.stdout) if elf.ok else {}
    names = demangle(sorted(set(kernels) | set(sass)))
    result_kernels = {}
    for mangled, stats in kernels.items():
        entry = dict(stats)
        entry["mangled"] = mangled
        if mangled in sass:
            entry["sass"] = dict(sorted(sass[mangled].items()))
            entry["sass_total"] = sum(sass[mangled].values())
            entry["loops"] = loops.get(mangled, 0)
            entry["loop_ops"] = held.get(mangled, {})
            entry["half2"] = half2.get(mangled, 0)
            entry["max_threads"] = bounds.get(mangled, 0)
        result_kernels[names.get(mangled, mangled)] = entry
    return {"arch": arch, "ok": True, "kernels": result_kernels, "sass_available": bool(sass),
            "warnings": [ln for ln in res.stderr.splitlines() if "warning" in ln.lower()][:20]}


def static_stage(src: Path, workdir: Path, archs: tuple[str, ...], flags: list[str],
                 timeout_s: float = 120.0) -> dict[str, Any]:
    """Compile src for each arch in parallel; status 'pass' when every arch compiles."""
    if nvcc_path() is None:
        from mining.gate.errors import BadInput

        raise BadInput(f"{src.name}: nvcc not found on PATH: install the CUDA toolkit, "
                       "or skip the static stage with --stages correctness")
    with ThreadPoolExecutor(max_workers=max(1, len(archs))) as pool:
        per_arch = list(pool.map(lambda a: _compile_arch(src, workdir, a, flags, timeout_s), archs))
    failed = [r for r in per_arch if not r["ok"]]
    result: dict[str, Any] = {"status": "fail" if failed else "pass", "nvcc": nvcc_version(),
                              "archs": {r["arch"]: r for r in per_arch}}
    if failed:
        result["reason"] = failed[0]["reason"]
        if any(r.get("environment") for r in failed):
            result["transient"] = True  # a toolchain/environment failure is not cached
    else:
        spills = [(a, k) for a, r in result["archs"].items() for k, s in r["kernels"].items()
                  if s["spill_stores"] or s["spill_loads"]]
        if spills:
            result["notes"] = [f"register spills in {k} on {a}" for a, k in spills]
    return result
