"""mining/llm.py on the answers a real endpoint gives, deterministically (no server): prompt
cutting, the window read from an overflow error, retries, empty and non-UTF-8 answers, the
completion cap. The same paths against a real server: tests/mining/test_llm_server.py."""
from __future__ import annotations

import pytest

from mining.llm import LLMError, clean_text, fit_prompt, window_from_error


def words(text: str) -> int:  # a deterministic token counter for the cutting tests
    return len(text.split())


PROMPT = ("Intro line.\n\n## The problem\n" + "\n".join(f"axis a{i} = {i}" for i in range(50)) +
          "\n\n## The kernel\n```cuda\n__global__ void k() {}\n```\n\n## Earlier steps on this kernel\n" +
          "\n".join(f"- step {i}: tried thing number {i} and dropped" for i in range(100)) +
          "\n\n## Answer format (strict)\nCARRIER: ...\n")


def test_fit_prompt_cuts_sections_in_order_and_reports():
    whole = words(PROMPT)
    same, cut = fit_prompt(PROMPT, whole, words, ("Earlier steps", "The problem"))
    assert same == PROMPT and cut is None
    out, cut = fit_prompt(PROMPT, whole - 200, words, ("Earlier steps", "The problem"))
    assert words(out) <= whole - 200 and cut["prompt_tokens_after"] == words(out)
    (sec,) = cut["sections"]  # the history alone was enough
    assert sec["section"] == "Earlier steps on this kernel" and 0 < sec["lines_kept"] < sec["lines"]
    assert "axis a49 = 49" in out and "__global__ void k() {}" in out and "## Answer format (strict)" in out
    assert "lines cut here to fit the model's context window" in out
    # more than the history holds: the history empties, then the problem is cut
    out, cut = fit_prompt(PROMPT, words(PROMPT) - 950, words, ("Earlier steps", "The problem"))
    assert [s["section"] for s in cut["sections"]] == ["Earlier steps on this kernel", "The problem"]
    assert cut["sections"][0]["lines_kept"] == 0 and "CARRIER: ..." in out
    # the kernel and the format are never cut: a prompt that cannot fit is not sent
    with pytest.raises(LLMError) as err:
        fit_prompt(PROMPT, 20, words, ("Earlier steps", "The problem"))
    assert err.value.kind == "context" and "after cutting" in str(err.value)


def test_fit_prompt_never_leaves_a_fence_open():
    p = "## How the most similar existing targets implement this role\n```cpp\n" + "\n".join(
        f"  case {i}: return {i};" for i in range(60)) + "\n```\n## Output\nThe function.\n"
    out, cut = fit_prompt(p, words(p) - 60, words, ("How the most similar",))
    body = out.split("## Output")[0]
    assert body.count("```") % 2 == 0 and cut["sections"][0]["lines_kept"] > 0


def test_window_from_overflow_errors():
    assert window_from_error("Requested tokens (3000) exceed context window of 2048") == 2048
    assert window_from_error("This model's maximum context length is 8192 tokens. However, you requested") == 8192
    assert window_from_error("the request exceeds the available context size (4096 tokens)") == 4096
    assert window_from_error("invalid api key") is None


def test_answers_are_text_whatever_the_server_sends():
    assert clean_text(None) == ""
    assert clean_text(b"ok \xff\xfe bytes") == "ok \ufffd\ufffd bytes"
    s = clean_text("lone \ud800 surrogate")  # a JSON-escaped invalid byte reaches Python as a surrogate
    s.encode("utf-8")  # writable to a file
    assert s.startswith("lone ") and "\ud800" not in s


def test_empty_and_garbage_answers_become_rejections():
    """The LLM operator and the optimize materializer record an empty or non-UTF-8 reply as a
    rejection with its reason, never a crash."""
    from mining.llm_operator import propose
    from prompts.optimize import llm_materialize

    src = "__global__ void k(float* __restrict__ y) { y[0] = 1.f; }\n"
    res = propose(src, problem_summary="- name: k", model="openai/mock", mock_response="")
    assert res.calls == 1 and res.failures[0].kind == "empty" and not res.candidates
    assert res.call_log[0]["outcome"] == "rejected: empty answer"
    res = propose(src, problem_summary="- name: k", model="openai/mock", mock_response="\udcff\udcfe garbage \x00")
    assert res.failures[0].kind == "malformed" and res.failures[0].raw.encode("utf-8")
    usage: dict = {}
    new, *_ = llm_materialize(src, guidance="## Guidance\n(none)", problem_summary="- name: k", model="openai/mock",
                              history=[], entry="", timeout_s=5, llm_kwargs={"mock_response": ""}, usage=usage)
    assert new is None and usage["rejected"] == "empty"


def test_completion_cap_from_the_environment(monkeypatch):
    from mining.llm import complete

    monkeypatch.setenv("SKILLS_LLM_MAX_TOKENS", "7")
    c = complete("hi", "openai/mock", max_tokens=4096, mock_response="hello")
    assert c.max_tokens == 7 and c.text == "hello"
    monkeypatch.setenv("SKILLS_LLM_MAX_TOKENS", "lots")
    with pytest.raises(LLMError, match="SKILLS_LLM_MAX_TOKENS"):
        complete("hi", "openai/mock", mock_response="hello")


def test_bounded_retries_on_timeouts(monkeypatch):
    """A timeout is retried (at most SKILLS_LLM_RETRIES times); an auth error is not."""
    import litellm

    import mining.llm as llm

    calls = []

    class Flaky(litellm.CustomLLM):
        def completion(self, *args, **kwargs):
            calls.append(kwargs.get("timeout"))
            if len(calls) < 3:
                raise litellm.Timeout(message="read timed out", model="flaky", llm_provider="flaky")
            return litellm.completion(model="openai/x", messages=kwargs["messages"], mock_response="done")

    class Denied(litellm.CustomLLM):
        def completion(self, *args, **kwargs):
            calls.append("denied")
            raise litellm.AuthenticationError(message="bad key", model="denied", llm_provider="denied")

    monkeypatch.setattr(litellm, "custom_provider_map", [{"provider": "flaky", "custom_handler": Flaky()},
                                                         {"provider": "denied", "custom_handler": Denied()}])
    monkeypatch.setattr(llm.time, "sleep", lambda s: None)
    c = llm.complete("hi", "flaky/any", timeout=3.0, retries=2)
    assert c.text == "done" and c.attempts == 3 and len(calls) == 3
    calls.clear()
    with pytest.raises(LLMError) as err:
        llm.complete("hi", "flaky/any", retries=1)
    assert err.value.kind == "timeout" and err.value.attempts == 2 and "after 2 attempts" in str(err.value)
    calls.clear()
    with pytest.raises(LLMError) as err:
        llm.complete("hi", "denied/any", retries=3)
    assert err.value.kind == "auth" and calls == ["denied"]
