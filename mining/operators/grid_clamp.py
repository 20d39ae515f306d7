"""drop_grid_clamp: the launch half of removing a grid-stride loop. A host-side clamp of a grid
size, `if (blocks > CAP) blocks = CAP;`, where `blocks` later configures a launch's grid (the first
`<<<...>>>` argument, directly or through a `dim3`), is deleted so the grid covers the whole range
(one element per thread after grid_stride_to_single). Removing it alone never breaks a grid-stride
kernel (more blocks, same loop); the pair (loop removed, clamp removed) is what the gate judges for
the one-element form. A clamp of a block size (the second launch argument) is a hardware limit
(1024 threads per block), not a tuning choice, and is never a site: the CPU executor would accept
a larger block where a GPU refuses the launch.

Forward: the clamp is the launch half of the `grid_stride` rewrite (grid_stride.py) and is
applied with it: `clamp_edits` wraps every launch's scalar grid in `ks_clamp_grid(g, 8)` (at most
8 resident blocks per SM, a helper inserted once after the includes). Sound only for a grid-stride
kernel, which covers any range with any grid; that is why it is never applied alone.
"""
from __future__ import annotations

import re
from typing import Optional


from corpora.code.source import Source
from mining.operators.base import (Edit, Operator, Pair)
from mining.operators.nodes import ensure_helper, grid_is_scalar, kernel_launches, kernels, raw


_LAUNCH = re.compile(rb"<<<(.*?)>>>", re.S)


def _split_args(config: bytes) -> list[bytes]:
    """Top-level comma-separated arguments of a launch configuration."""
    out, depth, cur = [], 0, bytearray()
    for ch in config:
        c = bytes([ch])
        if c in b"([{":
            depth += 1
        elif c in b")]}":
            depth -= 1
        if c == b"," and depth == 0:
            out.append(bytes(cur).strip())
            cur = bytearray()
        else:
            cur += c
    out.append(bytes(cur).strip())
    return out


def _mentions(expr: bytes, var: bytes) -> bool:
    return re.search(rb"\b" + re.escape(var) + rb"\b", expr) is not None


def launch_roles(code: bytes, var: bytes) -> tuple[bool, bool]:
    """(configures a grid, configures a block) for `var` in the launches of `code`, following
    `dim3 name(...)` / `dim3 name = ...` declarations that mention it."""
    dims = {}
    for m in re.finditer(rb"\bdim3\s+(\w+)\s*(\(([^;]*)\)|=\s*([^;]*)|\{([^;]*)\})\s*;", code):
        dims[m.group(1)] = m.group(2)
    # several dim3 declared in one statement: dim3 grid(a), block(b);
    for m in re.finditer(rb"\bdim3\s+([^;]*);", code):
        for d in re.finditer(rb"(\w+)\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)", m.group(1)):
            dims.setdefault(d.group(1), d.group(2))
    grid = block = False
    for m in _LAUNCH.finditer(code):
        args = _split_args(m.group(1))
        for pos, a in enumerate(args[:2]):
            hit = _mentions(a, var) or any(_mentions(a, name) and _mentions(init, var) for name, init in dims.items())
            if hit and pos == 0:
                grid = True
            elif hit and pos == 1:
                block = True
    return grid, block


class DropGridClamp(Operator):
    name = "drop_grid_clamp"
    carrier = "grid_stride"
    description = "delete the host-side cap on a launch's block count"

    def edits(self, src):
        for f in src.funcs:
            if f.is_kernel:
                continue
            code = src.func_code(f)
            for m in re.finditer(rb"[ \t]*\bif\s*\(\s*(\w+)\s*>\s*([^();]+?)\s*\)\s*\1\s*=\s*\2\s*;[^\n]*\n?", code):
                cap = m.group(2).strip()
                if re.fullmatch(rb"\d+", cap) and int(cap) >= 65535:
                    continue  # a hardware limit (grid y / z), not a tuning choice
                grid, block = launch_roles(code[m.end():], m.group(1))
                if grid and not block:
                    # the whole line (a trailing comment explains the clamp and goes with it)
                    start = f.start_byte + m.start()
                    end = f.start_byte + m.end()
                    yield Edit(start, end, "")


# --------------------------------------------------------------------------- forward half
GRID_PER_SM = 8  # resident blocks per SM a clamped grid asks for


CLAMP_HELPER = """// ks-optimize helper: ks_clamp_grid -- a grid-stride kernel needs only the resident grid
static inline unsigned ks_clamp_grid(long long blocks, int per_sm) {
    static int sms = 0;
    if (sms <= 0 && (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || sms <= 0))
        sms = 132;
    long long cap = (long long)sms * per_sm;
    return (unsigned)(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}"""


def clamp_edits(src: Source, kernel: str, every_definition: bool = False) -> Optional[list[Edit]]:
    """Every launch of `kernel` clamped. Templated launches (`k<256><<<...>>>`) are launches of k too,
    so where several definitions share the name (overloads, specializations) a launch may run another
    one: refused unless the caller rewrites every definition of the name (`every_definition`)."""
    if not every_definition and sum(1 for k in kernels(src) if k.name == kernel) > 1:
        return None
    ls = kernel_launches(src, kernel)
    if not ls or not all(grid_is_scalar(src, l) for l in ls):
        return None
    edits = []
    for l in ls:
        g = raw(src, l.grid)
        if "ks_clamp_grid" in g:
            continue
        edits.append(Edit(l.grid.start_byte, l.grid.end_byte, f"ks_clamp_grid({g}, {GRID_PER_SM})"))
    return edits + ensure_helper(src, "ks_clamp_grid", CLAMP_HELPER)


PAIR = Pair(DropGridClamp, inverted_by=("grid_stride",))  # the clamp goes back with its loop
