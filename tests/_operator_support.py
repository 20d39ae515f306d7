"""Helpers shared by the operator test files: corpus kernels, applying an operator to a fixpoint,
the byte-identical-outside-the-edit check, and a CPU gate run."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from corpora.code.source import Site
from mining.gate import GateConfig, run_gate
from mining.operators import Operator

KERNELS = Path(__file__).resolve().parent.parent / "corpora" / "kernels"


def read_kernel(problem: str, kernel: str = "kernel.cu") -> str:
    return (KERNELS / problem / kernel).read_text()


def to_fixpoint(op: Operator, source: str, limit: int = 200) -> tuple[str, int]:
    """Apply the operator's first site until none is left: (source, rewrites applied)."""
    n = 0
    while n < limit:
        sites = op.find_sites(source)
        if not sites:
            break
        source = op.apply(source, sites[0])
        n += 1
    return source, n


def assert_outside_identical(old: str, new: str, site: Site) -> None:
    a, b = old.encode(), new.encode()
    tail = len(a) - site.end_byte
    assert b[:site.start_byte] == a[:site.start_byte]
    assert b[len(b) - tail:] == a[site.end_byte:]
    assert b[site.start_byte:len(b) - tail] != a[site.start_byte:site.end_byte]


def edited(old: str, new: str, site: Site) -> str:
    """The replacement text of an edit at `site`."""
    b = new.encode()
    return b[site.start_byte:len(b) - (len(old.encode()) - site.end_byte)].decode()


def cpu_gate(problem: str, source: str, store: Path, seeds: Optional[tuple[int, ...]] = (0,)):
    cfg = GateConfig(executor="cpu", stages=("correctness",), store=store,
                     **({"seeds": seeds} if seeds is not None else {}))
    return run_gate(KERNELS / problem, kernel=Path("kernel.cu"), config=cfg, source=source)
