"""The records mining produces and everything downstream reads: Lineage, Step, Skill.

A *lineage* is one backward walk: from an expert kernel, one accepted simplification per step,
until nothing more passes the gate. A *step* is one candidate the walk evaluated, accepted or
rejected, with the gate's reason. A *skill* is an accepted step reversed (simpler -> expert):
what to do, where it applies, when it is valid, what it buys, what goes wrong without its
precondition. The same optimization found in several kernels is one skill with several
pieces of evidence.

These are pydantic models so that SKILL.md import and the store validate what they read;
`model_dump(mode="json")` is their on-disk form (duckdb JSON columns, --json output).
"""
from __future__ import annotations

import hashlib
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from mining.axes_check import precondition_verdict

TOOL_VERSION = "kernel-skills-mining-1"

Termination = Literal["complete", "step_limit", "rejection_limit", "time_limit", "start_failed"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Anchor(_Record):
    """Where a skill applies in code."""
    function: str = ""  # enclosing kernel / device function
    ast_path: list[str] = Field(default_factory=list)  # node types from the function down to the site
    enclosing_loop: str = ""  # header of the innermost enclosing loop, if any
    line: int = 0  # 1-based line of the site in the optimized (expert-side) kernel
    excerpt: str = ""  # the site's code in the optimized form


class Precondition(_Record):
    """A condition under which the optimized form is valid."""
    # contiguous / structure: what the optimization needs of the code by construction (unit-stride
    # per-thread access, values combined across threads...), checked against query code at retrieval
    kind: Literal["divisible", "minimum", "maximum", "alignment", "power_of_two", "guarded", "none_found", "contiguous",
                  "structure"]
    axis: str = ""  # the definition axis it constrains ('' for alignment of a pointer)
    value: int = 0  # divisor, minimum, maximum, alignment bytes
    text: str = ""  # human form, e.g. "N % 4 == 0"
    source: Literal["probe", "code_guard", "optimization"] = "probe"
    probes: list[dict[str, Any]] = Field(default_factory=list)  # workload axes tried and their verdicts
    status: Literal["discovered", "guarded_in_code", "not_needed", "required"] = "discovered"

    def check(self, axes: Optional[dict[str, int]]) -> tuple[str, str]:
        """This precondition against one workload's axes: (satisfied | violated | unknown | not_needed, why)."""
        return precondition_verdict(self.kind, self.axis, self.value, self.status, axes)


class Risk(_Record):
    """A failure observed (or ruled out) when a precondition is violated."""
    text: str
    probe: dict[str, Any] = Field(default_factory=dict)  # the axes that showed it
    failure: str = ""  # the gate's reason for the optimized form on that probe


class Effect(_Record):
    """What the optimization bought, per device/method. Static deltas are after - before in the
    *optimizing* direction (expert-side minus simpler-side)."""
    device: str  # "H200 (sm_90)" or "static:sm_90"
    method: Literal["gpu_timing", "static"]
    time_ratio: Optional[float] = None  # simpler time / optimized time (>1: the optimization helps)
    time_ratio_q1: Optional[float] = None
    time_ratio_q3: Optional[float] = None
    workload: str = ""
    registers_delta: Optional[int] = None
    smem_delta: Optional[int] = None
    spill_delta: Optional[int] = None
    sass_delta: dict[str, int] = Field(default_factory=dict)  # opcode -> count change (top changes)
    timings_ms: dict[str, Any] = Field(default_factory=dict)  # raw medians/iqr of both sides


class Evidence(_Record):
    """One mining of this skill: which lineage step showed it, under which checks."""
    problem: str
    op_type: str = ""
    lineage_id: str
    step: int
    kernel_hash: str  # sha256 of the expert kernel the lineage started from
    executor: str
    workloads: list[str] = Field(default_factory=list)
    seeds: list[int] = Field(default_factory=list)
    tolerances: dict[str, list[float]] = Field(default_factory=dict)  # output -> [rtol, atol]
    before: str = ""  # simpler form (excerpt around the site)
    after: str = ""  # optimized form
    diff: str = ""  # unified diff simpler -> optimized
    effect: list[Effect] = Field(default_factory=list)


class Skill(_Record):
    skill_id: str  # stable: hash of the identity key
    key: str  # identity: carrier + operator (+ variant)
    name: str
    intent: str
    carrier: str
    operator: str  # the deoptimization operator whose inverse this is
    variant: str = ""
    anchor: Anchor = Field(default_factory=Anchor)
    before: str = ""  # exemplar: simpler form
    after: str = ""  # exemplar: optimized form
    # the card's example from real code: "after" = the expert's site as written (its function, or the
    # statement around the site), "before" = the problem's hand-written naive kernel when it lacks the
    # optimization; *_from say where each came from. before/after above are the mechanical step.
    example: dict[str, str] = Field(default_factory=dict)
    diff: str = ""
    preconditions: list[Precondition] = Field(default_factory=list)
    effect: list[Effect] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)
    risks: list[Risk] = Field(default_factory=list)
    scope: dict[str, list[str]] = Field(default_factory=dict)  # op_types, dtypes, archs
    requires: list[str] = Field(default_factory=list)
    provides: list[str] = Field(default_factory=list)
    conflicts: list[str] = Field(default_factory=list)
    verification: list[str] = Field(default_factory=list)  # log lines: what was checked, with verdicts
    provenance: dict[str, Any] = Field(default_factory=dict)  # kernel hashes, lineage ids, tool version
    kind: Literal["kernel", "backend"] = "kernel"


class Step(_Record):
    lineage_id: str
    index: int  # position in the walk (accepted steps 1..n; rejections carry the step they were tried at)
    accepted: bool
    operator: str
    carrier: str
    proposer: Literal["deterministic", "llm"] = "deterministic"
    site_line: int = 0
    site_excerpt: str = ""
    site_start: int = 0
    site_end: int = 0
    before_hash: str
    after_hash: str
    diff: str = ""  # unified diff from the step's input (more optimized) to its output (simpler)
    reason: str = ""  # gate reason for a rejection; '' when accepted
    verdict: str = ""  # pass | fail | unsupported | error | too_slow | unexercised
    gate: dict[str, Any] = Field(default_factory=dict)  # compact gate summary (stages' status, cases)
    static: dict[str, Any] = Field(default_factory=dict)  # per-arch registers/smem/spills/sass of the output
    effect: list[Effect] = Field(default_factory=list)  # filled when lifted
    skill_id: str = ""  # the skill this step became (accepted steps)
    wall_s: float = 0.0


class Lineage(_Record):
    lineage_id: str
    problem: str
    problem_dir: str
    op_type: str = ""
    kernel: str  # file name of the expert
    kernel_hash: str
    executor: str
    strategy: str
    termination: Termination
    steps: list[Step] = Field(default_factory=list)  # accepted, in order
    rejections: list[Step] = Field(default_factory=list)
    sources: dict[str, str] = Field(default_factory=dict)  # sha256 -> kernel text, every accepted state
    start_static: dict[str, Any] = Field(default_factory=dict)
    final_hash: str = ""
    wall_s: float = 0.0
    llm_tokens: int = 0
    tool_version: str = TOOL_VERSION
    config: dict[str, Any] = Field(default_factory=dict)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def skill_identity(carrier: str, operator: str, variant: str = "") -> tuple[str, str]:
    """(key, skill_id) for an optimization: the same carrier removed by the same operator is the
    same skill whichever kernel it came from."""
    key = f"{carrier}:{operator}" + (f":{variant}" if variant else "")
    return key, "sk-" + hashlib.sha256(key.encode()).hexdigest()[:12]


def lineage_identity(problem: str, kernel_hash: str, executor: str, strategy: str) -> str:
    return "ln-" + hashlib.sha256(f"{problem}|{kernel_hash}|{executor}|{strategy}".encode()).hexdigest()[:12]
