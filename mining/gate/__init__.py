"""The validation gate: does a kernel compile, compute the right answer, and how fast is it?

    from mining.gate import GateConfig, run_gate
    result = run_gate(Path("corpora/kernels/vector_add"), config=GateConfig(executor="cpu"))
    result.passed, result.stages["correctness"]["status"]
"""
from mining.gate.errors import BadInput
from mining.gate.gate import ALL_STAGES, GateConfig, GateResult, run_gate

__all__ = ["ALL_STAGES", "BadInput", "GateConfig", "GateResult", "run_gate"]
