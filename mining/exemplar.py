"""A step's exemplar: the changed region of both sides and the diff between them, without the
corpus's annotations. Lifting uses it for kernel steps (mining/lift.py) and backend steps
(mining/backend/mine.py) alike."""
from __future__ import annotations

import difflib
import re

_CARRIER_MARK = re.compile(r"[ \t]*//[ \t]*carrier:[^\n]*")


def strip_carrier_marks(code: str) -> str:
    """The code without the corpus's `// carrier: NAME` annotations (recall's ground truth, not
    part of the optimization), dropping lines that held nothing else."""
    out = []
    for line in code.splitlines(keepends=True):
        new = _CARRIER_MARK.sub("", line)
        if new.strip() or not line.strip():
            out.append(new)
    return "".join(out)


def exemplar(optimized: str, simpler: str, context: int = 2) -> tuple[str, str, str]:
    """(simpler excerpt, optimized excerpt, unified diff simpler -> optimized), annotation-free."""
    optimized, simpler = strip_carrier_marks(optimized), strip_carrier_marks(simpler)
    a, b = simpler.splitlines(keepends=True), optimized.splitlines(keepends=True)
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    ops = [op for op in sm.get_opcodes() if op[0] != "equal"]
    if not ops:
        return "", "", ""
    i1, i2 = max(0, ops[0][1] - context), min(len(a), ops[-1][2] + context)
    j1, j2 = max(0, ops[0][3] - context), min(len(b), ops[-1][4] + context)
    diff = "".join(difflib.unified_diff(a, b, "simpler.cu", "optimized.cu", n=context))
    return "".join(a[i1:i2])[:4000], "".join(b[j1:j2])[:4000], diff[:8000]
