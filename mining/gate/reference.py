"""Reference outputs from the problem's Python reference, computed in a sandboxed worker process
(reference_worker.py) with its own timeout and memory limit: a reference is code that came
with the problem, as untrusted as the kernel.

One worker per gate computes every (workload, seed) case that is not cached yet; it starts
while the harness builds (`ReferenceRun.start`), so its interpreter start-up costs no wall time.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from corpora.problem import Definition, Workload
from mining.gate.data import reference_view, shape_of
from mining.gate.errors import BadInput
from mining.gate.sandbox import RunResult, open_output, python_roots, run_limited

WORKER = Path(__file__).resolve().parent / "reference_worker.py"


@dataclass
class RefCase:
    cid: int
    workload: Workload
    seed: int


def write_case(ref_dir: Path, cid: int, definition: Definition, workload: Workload, seed: int,
               inputs: dict[str, Any]) -> tuple[RefCase, dict[str, Any]]:
    """Write what the reference sees for one case (bf16 as float32 values) as .npy files."""
    view = reference_view(definition, inputs)
    files, scalars = {}, {}
    for name, value in view.items():
        if definition.inputs[name].is_scalar:
            scalars[name] = value
        else:
            path = ref_dir / f"in_c{cid}_{name}.npy"
            np.save(path, np.ascontiguousarray(value), allow_pickle=False)
            files[name] = str(path)
    return RefCase(cid, workload, seed), {"id": cid, "label": workload.label, "inputs": files, "scalars": scalars,
                                          "axes": dict(workload.axes), "out_dir": str(ref_dir)}


class ReferenceRun:
    """The worker in a background thread; `result()` joins it, `cancel()` kills it."""

    def __init__(self, definition: Definition, reference_source: str, origin: str, ref_dir: Path,
                 cases: list[tuple[RefCase, dict[str, Any]]], timeout_s: float, mem_mb: float):
        self.definition, self.origin, self.ref_dir = definition, origin, ref_dir
        self.cases = [c for c, _ in cases]
        self.timeout_s = timeout_s
        self.cancelled = threading.Event()
        (ref_dir / "reference.py").write_text(reference_source)
        job = {"reference": str(ref_dir / "reference.py"), "origin": origin, "outputs": list(definition.outputs),
               "cases": [j for _, j in cases]}
        (ref_dir / "job.json").write_text(json.dumps(job))
        self._res: Optional[RunResult] = None
        self._thread = threading.Thread(target=self._run, args=(mem_mb,), daemon=True)
        self._thread.start()

    def _run(self, mem_mb: float) -> None:
        import sys

        self._res = run_limited([sys.executable, "-I", "-B", str(WORKER), str(self.ref_dir / "job.json")],
                                cwd=self.ref_dir, timeout_s=self.timeout_s, mem_mb=mem_mb, writable=[self.ref_dir],
                                readable=[*python_roots(), WORKER], env={"OMP_NUM_THREADS": "1",
                                                                          "OPENBLAS_NUM_THREADS": "1"},
                                cancel=self.cancelled)

    def cancel(self) -> None:
        self.cancelled.set()
        self._thread.join()

    def result(self) -> dict[int, dict[str, np.ndarray]]:
        """{case id: {output: array}}; BadInput naming the definition when the reference misbehaves."""
        self._thread.join()
        res = self._res
        assert res is not None
        if res.timed_out:
            raise BadInput(f"{self.origin}: reference timed out after {self.timeout_s:g}s "
                           f"(on {len(self.cases)} case(s); an endless loop or a workload too big for it)")
        if res.mem_exceeded:
            raise BadInput(f"{self.origin}: reference exceeded the memory limit ({res.peak_rss_mb:.0f} MB resident)")
        if res.returncode != 0:
            for line in res.stdout.splitlines():
                try:
                    msg = json.loads(line).get("error")
                except (ValueError, AttributeError):
                    continue
                if msg:
                    raise BadInput(msg.replace("\n", " ")[:1000])
            tail = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
            why = f"signal {res.signal_name}" if res.signal_name else f"exit code {res.returncode}"
            raise BadInput(f"{self.origin}: reference worker failed ({why})" + (f": {tail[-1][:300]}" if tail else ""))
        return {c.cid: self._load(c) for c in self.cases}

    def _load(self, case: RefCase) -> dict[str, np.ndarray]:
        out = {}
        for name, spec in self.definition.outputs.items():
            path = self.ref_dir / f"ref_c{case.cid}_{name}.npy"
            expected = shape_of(spec, case.workload.axes)
            want = int(np.prod(expected, dtype=np.int64))
            try:  # no symlinks (the worker wrote this folder); the header first: size before reading
                with open_output(path) as fh:
                    version = np.lib.format.read_magic(fh)
                    fmt = np.lib.format
                    shape, _, _ = (fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0)(fh)
                    size = int(np.prod(shape, dtype=np.int64))
                    if size != want:
                        raise BadInput(f"{self.origin}: reference output {name!r} has {size} elements, "
                                       f"expected shape {expected} on {case.workload.label}")
                    fh.seek(0)
                    arr = np.load(fh, allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise BadInput(f"{self.origin}: reference output {name!r} unreadable: {exc}") from None
            out[name] = np.asarray(arr).reshape(expected)
        return out
