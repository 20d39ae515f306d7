"""The real model server for the LLM-path tests (issue 21): llama-cpp-python serving
SmolLM2-135M-Instruct on loopback (eval/local_llm.py), started once per test session.

`llm_server` skips, with the install command, when the `llm-test` extra is not installed;
`llm_env` points every LLM path at it through the environment, with small answers."""
from __future__ import annotations

import os

import pytest

from eval.local_llm import missing, start, stop

TEST_N_CTX = 2048


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory):
    """The running server (eval.local_llm.LocalServer), one per test session."""
    why = missing()
    if why:
        pytest.skip(why)
    # the paths' real prompts (~1,000-1,900 tokens) fit 2048 after their cuttable sections are cut; a
    # 1024-token window left mine/optimize nothing to send (measured), so the window stays at 2048
    proc, server = start(tmp_path_factory.mktemp("llm_server") / "server.log", n_ctx=TEST_N_CTX)
    try:
        yield server
    finally:
        stop(proc)


@pytest.fixture
def llm_env(llm_server, monkeypatch):
    monkeypatch.setenv("SKILLS_LLM_API_BASE", llm_server.api_base)
    monkeypatch.setenv("SKILLS_LLM_MAX_TOKENS", os.environ.get("SKILLS_TEST_LLM_MAX_TOKENS", "96"))
    monkeypatch.setenv("SKILLS_LLM_TIMEOUT", "60")
    monkeypatch.delenv("SKILLS_LLM_CONTEXT", raising=False)
    monkeypatch.delenv("SKILLS_MODEL", raising=False)
    return llm_server
