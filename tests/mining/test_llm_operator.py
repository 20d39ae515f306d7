"""The LLM-proposed deoptimization operator (mining/llm_operator.py) against mocked endpoints:
litellm's own `mock_response` and a registered CustomLLM that answers from a script. No network,
no keys. A good reply becomes a candidate that passes the real CPU gate; bad replies become
reasons, never exceptions; without a model nothing is called."""
import os
from pathlib import Path

import pytest

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

from mining.carriers import detect_carriers  # noqa: E402
from mining.llm_operator import (  # noqa: E402
    OPERATOR_NAME, build_prompt, candidate_from_reply, enabled, parse_reply, propose, resolve_model,
    summarize_problem, vocabulary, ReplyError,
)
from mining.records import Step  # noqa: E402

KERNELS = Path(__file__).resolve().parents[2] / "corpora" / "kernels"
VADD = KERNELS / "vector_add"
SOURCE = (VADD / "kernel.cu").read_text()

GOOD = """CARRIER: restrict
DESCRIPTION: drop `__restrict__` from add_vec4's three pointer parameters
<<<<<<< SEARCH
__global__ void __launch_bounds__(256) add_vec4(const float* __restrict__ a, const float* __restrict__ b,
                                                float* __restrict__ y, int n) {
=======
__global__ void __launch_bounds__(256) add_vec4(const float* a, const float* b,
                                                float* y, int n) {
>>>>>>> REPLACE
"""
MALFORMED = """I would remove the restrict qualifiers, they are not needed.
CARRIER: restrict
<<<<<<< SEARCH
float* __restrict__ y, int n) {
"""
NOT_FOUND = """CARRIER: unroll_pragma
DESCRIPTION: drop the unroll pragma before the main loop
<<<<<<< SEARCH
    #pragma unroll 4
    for (int i = 0; i < n; ++i) {
=======
    for (int i = 0; i < n; ++i) {
>>>>>>> REPLACE
"""
LAUNCH_BOUNDS = """```
CARRIER: launch_bounds
DESCRIPTION: remove __launch_bounds__(256) from add_vec4
<<<<<<< SEARCH
  5| __global__ void __launch_bounds__(256) add_vec4(const float* __restrict__ a, const float* __restrict__ b,
=======
  5| __global__ void add_vec4(const float* __restrict__ a, const float* __restrict__ b,
>>>>>>> REPLACE
```"""


def _summary() -> str:
    return summarize_problem(VADD)


def _splice(old: str, start: int, end: int, replacement: str) -> str:
    b = old.encode()
    return (b[:start] + replacement.encode() + b[end:]).decode()


# --------------------------------------------------------------------------- configuration
def test_disabled_without_model(monkeypatch):
    monkeypatch.delenv("SKILLS_MODEL", raising=False)
    import mining.llm

    def boom(*a, **k):  # pragma: no cover - must not run
        raise AssertionError("the LLM was called with no model configured")

    monkeypatch.setattr(mining.llm, "complete", boom)
    assert not enabled()
    assert resolve_model(None) is None and resolve_model("  ") is None
    res = propose(SOURCE, problem_summary="x", carriers_present=["restrict"], rejected=[], model=None)
    assert res.candidates == [] and res.calls == 0 and res.tokens == 0
    assert [f.kind for f in res.failures] == ["disabled"]


def test_model_from_environment(monkeypatch):
    monkeypatch.setenv("SKILLS_MODEL", "openai/gpt-4o")
    assert enabled() and resolve_model(None) == "openai/gpt-4o"
    assert resolve_model("ollama/qwen2.5-coder") == "ollama/qwen2.5-coder"  # the argument wins
    res = propose(SOURCE, problem_summary=_summary(), carriers_present=detect_carriers(SOURCE), rejected=[],
                  mock_response=GOOD)
    assert res.model == "openai/gpt-4o" and len(res.candidates) == 1


# --------------------------------------------------------------------------- a good reply, gated
def test_good_reply_becomes_candidate_that_passes_the_cpu_gate(tmp_path):
    from mining.gate import GateConfig, run_gate

    res = propose(SOURCE, problem_summary=_summary(), carriers_present=detect_carriers(SOURCE), rejected=[],
                  model="openai/gpt-4o", n=1, timeout=30, mock_response=GOOD)
    assert res.failures == [] and res.calls == 1
    # litellm's mock reports usage: the counts are taken from it, not invented
    assert res.prompt_tokens > 0 and res.completion_tokens > 0
    assert res.tokens == res.prompt_tokens + res.completion_tokens
    (c,) = res.candidates
    assert c.carrier == "restrict" and c.operator == OPERATOR_NAME and c.proposer == "llm"
    assert c.description.startswith("drop `__restrict__`")
    assert c.raw == GOOD and c.model == "openai/gpt-4o"
    assert "__restrict__" not in c.new_source
    assert c.new_source == SOURCE.replace("__restrict__ ", "")
    # the span is the changed region of the OLD source, and splicing it reproduces the new one
    assert _splice(SOURCE, c.start, c.end, c.replacement) == c.new_source
    assert SOURCE.encode()[c.start:c.end].startswith(b"__restrict__ a")
    assert c.line == 5 and (c.start_byte, c.end_byte) == (c.start, c.end)
    assert c.carrier_sites_before == 3 and c.carrier_sites_after == 0 and c.removes_carrier is True
    assert c.diff.startswith("--- a/kernel.cu") and "-__global__" in c.diff and "+__global__" in c.diff

    gate = run_gate(VADD, VADD / "kernel.cu",
                    GateConfig(executor="cpu", stages=("correctness",), seeds=(0,), store=tmp_path),
                    source=c.new_source)
    assert gate.passed, gate.reason


# --------------------------------------------------------------------------- a scripted endpoint
@pytest.fixture
def scripted(monkeypatch):
    """A CustomLLM provider `scripted/...` answering from a list, with known token counts."""
    import litellm

    class Scripted(litellm.CustomLLM):
        def __init__(self):
            super().__init__()
            self.replies: list = []
            self.prompts: list[str] = []

        def completion(self, *args, **kwargs):
            prompt = kwargs["messages"][-1]["content"]
            self.prompts.append(prompt)
            reply = self.replies.pop(0)
            if isinstance(reply, Exception):
                raise reply
            return litellm.ModelResponse(
                choices=[{"message": {"role": "assistant", "content": reply}}],
                usage=litellm.Usage(prompt_tokens=1000 + len(self.prompts), completion_tokens=50,
                                    total_tokens=1050 + len(self.prompts)))

    handler = Scripted()
    monkeypatch.setattr(litellm, "custom_provider_map", [{"provider": "scripted", "custom_handler": handler}])
    return handler


def test_n_calls_give_candidates_and_reasons_with_tokens_counted(scripted):
    from mining.llm import LEDGER

    scripted.replies = [GOOD, MALFORMED, NOT_FOUND, LAUNCH_BOUNDS, GOOD]
    calls_before = LEDGER.calls
    res = propose(SOURCE, problem_summary=_summary(), carriers_present=detect_carriers(SOURCE), rejected=[],
                  model="scripted/m", n=5, timeout=30)
    assert res.calls == 5 and LEDGER.calls == calls_before + 5
    assert res.prompt_tokens == sum(1000 + k for k in range(1, 6)) and res.completion_tokens == 250
    assert [c.carrier for c in res.candidates] == ["restrict", "launch_bounds"]
    kinds = [(f.call, f.kind) for f in res.failures]
    assert kinds == [(1, "malformed"), (2, "not_found"), (4, "duplicate")]
    assert "not closed" in res.failures[0].reason and res.failures[0].raw == MALFORMED
    assert "does not occur" in res.failures[1].reason and "#pragma unroll 4" in res.failures[1].reason
    # a fenced reply with the prompt's line numbers copied still applies, byte-exactly
    lb = res.candidates[1]
    assert lb.new_source == SOURCE.replace("__launch_bounds__(256) ", "")
    assert _splice(SOURCE, lb.start, lb.end, lb.replacement) == lb.new_source
    assert lb.removes_carrier is True
    # later calls are told what this round already proposed, so they propose something else
    assert "already proposed in this round" not in scripted.prompts[0]
    assert "already proposed in this round" in scripted.prompts[1]
    assert "restrict at line 5" in scripted.prompts[1]
    assert len(res.prompts) == 5 and res.prompts[0] == scripted.prompts[0]
    d = res.to_dict()
    assert d["tokens"] == res.tokens and len(d["candidates"]) == 2 and len(d["failures"]) == 3


def test_endpoint_failure_is_a_reason_not_an_exception(scripted):
    scripted.replies = [RuntimeError("connection refused")]
    res = propose(SOURCE, problem_summary="x", carriers_present=None, rejected=[], model="scripted/m", n=3)
    assert res.candidates == [] and res.calls == 0
    assert [f.kind for f in res.failures] == ["call_error"]
    assert "connection refused" in res.failures[0].reason


def test_mock_exception_is_a_call_error():
    res = propose(SOURCE, problem_summary="x", carriers_present=None, rejected=[], model="openai/gpt-4o",
                  mock_response=Exception("rate limited"))
    assert [f.kind for f in res.failures] == ["call_error"] and "rate limited" in res.failures[0].reason


# --------------------------------------------------------------------------- the prompt
def test_prompt_holds_source_problem_carriers_and_rejections():
    rej = [Step(lineage_id="ln-1", index=1, accepted=False, operator="drop_grid_clamp", carrier="grid_stride",
                site_line=22, site_excerpt="if (blocks > 132 * 8) blocks = 132 * 8;", before_hash="a", after_hash="b",
                reason="correctness: w1[N=100003] y: 12 wrong elements"),
           {"operator": OPERATOR_NAME, "proposer": "llm", "carrier": "vector_load", "site_line": 13,
            "reason": "correctness: unwritten elements", "diff": "--- a\n+++ b\n-    float4 x = a4[i];\n+    float x;\n"},
           "grid_stride_to_single at line 12: time limit"]
    p = build_prompt(SOURCE, problem_summary=_summary(), carriers_present=detect_carriers(SOURCE), rejected=rej)
    assert " 12|     for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride)" in p
    assert "name: vector_add (op_type elementwise)" in p and "N=100003 (odd)" in p and "entry" in p
    assert "- restrict (3 sites): line 5:" in p and "- grid_stride (2 sites)" in p
    assert "drop_grid_clamp removing grid_stride at line 22" in p and "12 wrong elements" in p
    assert "-    float4 x = a4[i];" in p  # an LLM step's rejected change is shown
    assert "- grid_stride_to_single at line 12: time limit" in p
    assert "`warp_shuffle_reduce`" in p and "CARRIER: <one name from the vocabulary>" in p
    assert "{{" not in p


# --------------------------------------------------------------------------- parsing and applying
def test_unroll_pragma_removal_on_a_corpus_kernel():
    src = (KERNELS / "tiled_matmul" / "kernel.cu").read_text()
    pragma = next(line for line in src.splitlines() if "#pragma unroll" in line)
    loop = src.splitlines()[src.splitlines().index(pragma) + 1]
    reply = (f"CARRIER: unroll_pragma\nDESCRIPTION: let the compiler choose the unrolling of the k loop\n"
             f"<<<<<<< SEARCH\n{pragma.strip()}\n{loop.strip()}\n=======\n{loop.strip()}\n>>>>>>> REPLACE\n")
    c = candidate_from_reply(src, reply)  # indentation-insensitive match, re-indented to the file
    assert c.new_source == src.replace(pragma + "\n", "")
    assert _splice(src, c.start, c.end, c.replacement) == c.new_source
    assert src.encode()[c.start:c.end].decode().strip() == pragma.strip() and c.replacement.strip() == ""
    assert c.removes_carrier is True


@pytest.mark.parametrize("reply,kind,words", [
    ("CARRIER: none", "no_proposal", "nothing left"),
    ("Sure! Here is a simpler kernel.", "malformed", "no 'CARRIER"),
    ("CARRIER: restrict\nDESCRIPTION: x\n", "malformed", "no SEARCH/REPLACE block"),
    ("CARRIER: restrict\nCARRIER: ldg\n<<<<<<< SEARCH\nint n4 = n / 4;\n=======\nint n4 = n >> 2;\n>>>>>>> REPLACE",
     "malformed", "more than one CARRIER"),
    ("CARRIER: restrict\n=======\n", "malformed", "without a preceding SEARCH"),
    ("CARRIER: vectorization\n<<<<<<< SEARCH\nint n4 = n / 4;\n=======\nint n4 = n >> 2;\n>>>>>>> REPLACE",
     "unknown_carrier", "not in the vocabulary"),
    ("CARRIER: restrict\n<<<<<<< SEARCH\n__restrict__\n=======\n\n>>>>>>> REPLACE", "ambiguous", "3 times"),
    ("CARRIER: restrict\n<<<<<<< SEARCH\n\n=======\nint x;\n>>>>>>> REPLACE", "malformed", "SEARCH part is empty"),
    ("CARRIER: restrict\n<<<<<<< SEARCH\nint n4 = n / 4;\n=======\nint n4 = n / 4;  // four at a time\n>>>>>>> REPLACE",
     "no_change", "only comments"),
    ("CARRIER: restrict\n<<<<<<< SEARCH\nint n4 = n / 4;\n=======\nint n4 = n / 4;\n>>>>>>> REPLACE",
     "no_change", "changes nothing"),
    ("CARRIER: restrict\n<<<<<<< SEARCH\nint n4 = n / 4;\n=======\n#include <cstdio>\nint n4 = n / 4;\n>>>>>>> REPLACE",
     "forbidden", "#include"),
    ("CARRIER: restrict\n<<<<<<< SEARCH\nint n4 = n / 4;\n=======\nint n4 = (n / 4;\n>>>>>>> REPLACE",
     "syntax", "does not parse"),
    ("CARRIER: restrict\n<<<<<<< SEARCH\nint n4 = n / 4;\n=======\nint n4 = n >> 2;\n>>>>>>> REPLACE\n"
     "<<<<<<< SEARCH\n    int n4 = n / 4;\n    const float4* a4\n=======\n>>>>>>> REPLACE", "overlap", "overlapping"),
])
def test_bad_replies_give_reasons(reply, kind, words):
    with pytest.raises(ReplyError) as info:
        candidate_from_reply(SOURCE, reply)
    assert info.value.kind == kind, info.value.reason
    assert words in info.value.reason
    assert "\n" not in info.value.reason


def test_bad_replies_through_propose_never_raise():
    for reply in ["", "CARRIER: none", "<<<<<<< SEARCH\n", "CARRIER: restrict\n>>>>>>> REPLACE\n", "\x00\xff" * 50]:
        res = propose(SOURCE, problem_summary="x", carriers_present=None, rejected=[], model="openai/gpt-4o",
                      mock_response=reply or " ")
        assert res.candidates == [] and len(res.failures) == 1 and res.failures[0].reason, reply


def test_parse_tolerates_markdown_decoration():
    p = parse_reply("**CARRIER:** `launch_bounds`\n**DESCRIPTION:** remove `__launch_bounds__`\n"
                    "```cuda\n<<<<<<< SEARCH\n__launch_bounds__(256) \n=======\n\n>>>>>>> REPLACE\n```\n")
    assert p.carrier == "launch_bounds" and p.description == "remove `__launch_bounds__`" and len(p.blocks) == 1
    assert "unknown carrier 'restricted'" in _reason("CARRIER: restricted\n<<<<<<< SEARCH\nint n4 = n / 4;\n"
                                                     "=======\nint n4 = n >> 2;\n>>>>>>> REPLACE")
    assert set(vocabulary()) >= {"restrict", "unroll_pragma", "vector_load", "shared_tile"}


def test_fragment_and_multi_block_edits():
    # a fragment inside a line, and two blocks that belong to one simplification
    reply = ("CARRIER: vector_store\nDESCRIPTION: store four scalars instead of one float4\n"
             "<<<<<<< SEARCH\n    float4* y4 = reinterpret_cast<float4*>(y);               // carrier: vector_store — 16-byte stores\n"
             "=======\n>>>>>>> REPLACE\n"
             "<<<<<<< SEARCH\ny4[i] = make_float4(x.x + z.x, x.y + z.y, x.z + z.z, x.w + z.w);\n=======\n"
             "y[4 * i] = x.x + z.x; y[4 * i + 1] = x.y + z.y; y[4 * i + 2] = x.z + z.z; y[4 * i + 3] = x.w + z.w;\n"
             ">>>>>>> REPLACE\n")
    c = candidate_from_reply(SOURCE, reply)
    assert c.blocks == 2 and "float4* y4" not in c.new_source and "y[4 * i + 3] = x.w + z.w;" in c.new_source
    assert _splice(SOURCE, c.start, c.end, c.replacement) == c.new_source
    assert c.carrier_sites_before == 1 and c.carrier_sites_after == 0


def _reason(reply: str) -> str:
    try:
        candidate_from_reply(SOURCE, reply)
    except ReplyError as exc:
        return exc.reason
    return ""
