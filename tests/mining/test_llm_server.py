"""Every LLM path against a real OpenAI-compatible server (issue 21): llama-cpp-python serving
SmolLM2-135M-Instruct on loopback (tests/_llm_support.py, started once per session), reached
through litellm exactly as a user's `--model openai/<name>` with `SKILLS_LLM_API_BASE` would.

The model is tiny: its CUDA is poor and most answers do not follow the format. What is tested is
the path: the prompt sized against the server's 2048-token window, the answer parsed or rejected
with a recorded reason, a parsed answer judged by the gate, and the server's usage in the
lineage / attempt log. Answers are capped at 96 tokens so the whole file takes seconds per test.
"""
from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner


ROOT = Path(__file__).resolve().parents[2]
VECTOR_ADD = ROOT / "corpora" / "kernels" / "vector_add"
needs_gpp = pytest.mark.skipif(shutil.which("g++") is None, reason="the cpu executor needs g++")


def cli(*args: str):
    from cli import app

    return CliRunner().invoke(app, list(args))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- skills llm check
def test_llm_check_reports_window_latency_and_format(llm_env):
    r = cli("llm", "check", "--model", llm_env.model, "--json")
    rep = json.loads(r.stdout)
    assert rep["answers"] is True and rep["error"] is None, r.output
    assert rep["context_window"] == llm_env.n_ctx and "overflow" in rep["context_source"]
    assert rep["latency_s"] > 0 and rep["usage"]["prompt_tokens"] > 50 and rep["usage"]["completion_tokens"] > 0
    assert r.exit_code == (0 if rep["format"]["follows"] else 1)
    assert rep["format"]["reason"]  # parsed, or the parser's reason it was not
    text = cli("llm", "check", "--model", llm_env.model)
    assert f"context window: {llm_env.n_ctx}" in text.stdout and "answer format:" in text.stdout


def test_llm_check_broken_setups(llm_env, monkeypatch):
    # a name the server does not list: llama-cpp-python answers anyway, and the check says so
    r = cli("llm", "check", "--model", "openai/no-such-model", "--json")
    assert json.loads(r.stdout)["warning"].startswith("the server lists smollm2")
    # nothing listening: one line, exit 3
    monkeypatch.setenv("SKILLS_LLM_API_BASE", f"http://127.0.0.1:{_free_port()}/v1")
    r = cli("llm", "check", "--model", llm_env.model)
    assert r.exit_code == 3 and r.stderr.count("\n") == 1 and "(connection)" in r.stderr, r.output
    # no model at all: bad input
    r = cli("llm", "check")
    assert r.exit_code == 2 and "no model given" in r.stderr


# --------------------------------------------------------------------------- the client on real answers
def test_prompt_cut_to_the_window_and_reported(llm_env, monkeypatch):
    from mining.llm import LEDGER, LLMError, complete

    window = 640  # a small window (as $SKILLS_LLM_CONTEXT would say) keeps the call cheap on a CPU
    monkeypatch.setenv("SKILLS_LLM_CONTEXT", str(window))
    history = "\n".join(f"- attempt {i}: unrolled the loop by {i} and it was slower" for i in range(400))
    prompt = ("Answer with one word.\n\n## Earlier steps on this kernel\n" + history +
              "\n\n## Answer format\nOne word.\n")
    c = complete(prompt, llm_env.model, max_tokens=8, cuttable=("Earlier steps",))
    assert c.context_window == window and c.cut is not None
    sec = c.cut["sections"][0]
    assert sec["section"] == "Earlier steps on this kernel" and 0 < sec["lines_kept"] < sec["lines"]
    assert "cut here to fit the model's context window" in c.prompt_sent and "## Answer format" in c.prompt_sent
    # the server's own count of what was sent: within the window with room for the answer
    assert c.usage_reported and c.prompt_tokens + c.max_tokens <= window and c.prompt_tokens > window // 2
    assert c.finish_reason in ("stop", "length") and c.completion_tokens <= 8
    calls = LEDGER.calls
    with pytest.raises(LLMError) as err:  # nothing cuttable: not sent rather than truncated by the server
        complete("word " * 3000, llm_env.model, max_tokens=8)
    assert err.value.kind == "context" and LEDGER.calls == calls


def test_max_tokens_cap_and_finish_reason(llm_env, monkeypatch):
    from mining.llm import complete

    monkeypatch.setenv("SKILLS_LLM_MAX_TOKENS", "5")
    c = complete("Write a long story about a GPU.", llm_env.model, max_tokens=500)
    assert c.max_tokens == 5 and c.completion_tokens <= 5 and c.finish_reason == "length" and c.truncated


# --------------------------------------------------------------------------- skills mine --model
@needs_gpp
def test_mine_with_the_real_model(llm_env, tmp_path):
    from skills.kernel_store import KernelStore
    from skills.store import Store

    store = tmp_path / "s"
    r = cli("mine", str(VECTOR_ADD), "--executor", "cpu", "--model", llm_env.model, "--operators", "drop_restrict",
            "--seeds", "0", "-j", "1", "--no-probe", "--no-index", "--max-steps", "1", "--store", str(store), "--json")
    assert r.exit_code == 0, r.output
    (lin,) = KernelStore(Store(store)).lineages()
    usage = lin.config["llm_usage"]
    assert usage["calls"] >= 1 and usage["prompt_tokens"] > 200 and usage["completion_tokens"] > 0
    assert lin.llm_tokens == usage["prompt_tokens"] + usage["completion_tokens"]
    # every answer became a candidate for the gate or a rejection with its reason
    rejected = sum(usage.get("rejected", {}).values())
    assert usage["candidates"] + rejected == usage["calls"]
    assert len(lin.config["llm_failures"]) == rejected and all(f["reason"] for f in lin.config["llm_failures"])
    judged = [s for s in list(lin.steps) + list(lin.rejections) if s.proposer == "llm"]
    assert len(judged) <= usage["candidates"]  # a parsed answer has the gate's verdict in the lineage
    if usage["candidates"]:  # (unless the walk had already judged the same source)
        assert judged


# --------------------------------------------------------------------------- skills optimize --model
def _skill(carrier: str, operator: str) -> dict:
    ev = [{"problem": "reduce_sum", "op_type": "", "lineage_id": "ln-x", "step": 1, "kernel_hash": "h",
           "executor": "cpu", "before": "y[i] = a[i] + b[i];", "after": "y[i] = __ldg(&a[i]) + __ldg(&b[i]);",
           "diff": "--- s\n+++ o\n-    y[i] = a[i] + b[i];\n+    y[i] = __ldg(&a[i]) + __ldg(&b[i]);\n"}]
    return {"skill_id": f"sk-{carrier}", "key": f"{carrier}:{operator}", "name": f"{carrier} skill",
            "intent": f"introduce {carrier}", "carrier": carrier, "operator": operator, "variant": "",
            "anchor": {"function": "", "ast_path": [], "enclosing_loop": "", "line": 0, "excerpt": ""},
            "before": ev[0]["before"], "after": ev[0]["after"], "diff": ev[0]["diff"], "preconditions": [],
            "effect": [], "evidence": ev, "risks": [], "scope": {"problems": ["reduce_sum"]}, "requires": [],
            "provides": [], "conflicts": [], "verification": [], "provenance": {}, "kind": "kernel"}


@needs_gpp
@pytest.mark.parametrize("mode", ["skills", "no_skills", "flat_memory"])
def test_optimize_with_the_real_model(llm_env, tmp_path, mode):
    skills = tmp_path / "skills.json"
    skills.write_text(json.dumps([_skill("register_cache", "register_cache_to_reload")]))
    out = tmp_path / "out"
    args = ["optimize", str(VECTOR_ADD), "--kernel", "naive.cu", "--mode", mode, "--model", llm_env.model,
            "--budget", "1", "--executor", "cpu", "--seeds", "0", "-j", "1", "--out", str(out), "--json"]
    if mode != "no_skills":
        args += ["--store", str(skills)]
    r = cli(*args)
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    llm = summary["llm"]
    assert llm["calls"] >= 1 and llm["prompt_tokens"] > 200 and llm["completion_tokens"] > 0
    assert llm["tokens"] == llm["prompt_tokens"] + llm["completion_tokens"]
    assert llm["parsed"] + sum(llm["rejected"].values()) == llm["calls"]
    attempts = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    llm_attempts = [a for a in attempts if a["materializer"] == "llm"]
    assert llm_attempts and all(a["llm"]["prompt_tokens"] > 0 for a in llm_attempts)
    for a in llm_attempts:  # judged by the gate, or rejected before it with the reason
        assert a["verdict"] in ("pass", "fail", "error") or (a["verdict"] == "not_gated" and a["why"])
        assert a["llm"]["context_window"] == llm_env.n_ctx


@needs_gpp
def test_optimize_token_budget_is_honoured(llm_env, tmp_path):
    from corpora.problem import load_problem
    from mining.llm_operator import summarize_problem
    from prompts.optimize import OptimizeConfig, build_prompt, optimize
    from mining.llm import billed_prompt_tokens

    # room for one call (its prompt and a capped answer) but not for a second prompt
    prompt = build_prompt((VECTOR_ADD / "naive.cu").read_text(), problem_summary=summarize_problem(
        load_problem(VECTOR_ADD)), guidance="## Guidance\n(none: choose the single most valuable optimization yourself)",
        kernel_name="naive.cu")
    budget = int(1.5 * billed_prompt_tokens(prompt, llm_env.model))
    cfg = OptimizeConfig(executor="cpu", mode="no_skills", budget_steps=2, llm_per_step=2, model=llm_env.model,
                         seeds=(0,), jobs=1, cache=tmp_path / "c", max_tokens=budget)
    res = optimize(VECTOR_ADD, Path("naive.cu"), cfg)
    assert res.llm["tokens"] <= budget  # the server's own count of what was spent
    refused = [a for a in res.attempts if a.llm.get("rejected") == "budget"]
    assert res.llm["calls"] >= 1 and refused and "token budget" in refused[0].why


# --------------------------------------------------------------------------- skills backend generate --model
@pytest.fixture(scope="module")
def toy_store():
    from _backend_support import indexed_toy_store

    return indexed_toy_store()


def test_backend_generate_with_the_real_model(llm_env, toy_store):
    from _backend_support import gate_skip_reason

    base = ["backend", "generate", "--target", "Kite", "--function", "getRelocType", "--store", str(toy_store)]
    r = cli(*base, "--model", llm_env.model, "--json")
    assert r.exit_code in (0, 1), r.output  # 1: the gate rejected the model's function
    res = json.loads(r.stdout)
    att = res["attempts"][0]
    assert att["prompt_tokens"] > 200 and att["context_window"] == llm_env.n_ctx and att["prompt_tokens"] < llm_env.n_ctx
    assert res["tokens"]["calls"] >= 1
    gate = res["gate"]
    if gate_skip_reason() is None:  # clang-15 present: the answer was compiled, or rejected before it
        assert gate["passed"] in (True, False) and (gate.get("host") or gate.get("skipped"))
        assert r.exit_code == (0 if gate["passed"] else 1)
    # --prompt-only prints the prompt the model path sends (before any cut to the window)
    p = cli(*base, "--strategy", "llm", "--prompt-only")
    assert p.exit_code == 0 and "**Kite**" in p.stdout
    if att["cut"] is None:
        assert p.stdout.strip() == res["prompt"].strip()
    else:  # cut to the window: a marked cut inside a section, or whole sections dropped from the end
        full = p.stdout.strip()
        assert len(res["prompt"].strip()) < len(full) and res["prompt"][:200] == full[:200]
        assert "cut here to fit" in res["prompt"] or len(full) > len(res["prompt"]) // 2
