"""`skills llm check`: one call that tells a broken setup from a weak model.

    report = check("openai/smollm2", api_base="http://127.0.0.1:8080/v1")
    report["answers"], report["context_window"], report["latency_s"], report["format"]["follows"]

The call asks for one simplification of a four-line kernel in the strict answer format every LLM
path uses (CARRIER / DESCRIPTION / SEARCH-REPLACE, mining/deoptimize.md), and runs the reply
through the same parser and matcher as `skills mine --model` (mining/llm_operator.py). So:

* ``answers`` False: the setup is broken (no server, wrong key, unknown model); ``error`` says
  what, in one line, with its kind (connection, auth, not_found, timeout, ...);
* ``answers`` True, ``format.follows`` False: the endpoint works, the model does not follow the
  format (its answers will be rejected with this reason);
* both True: the paths can use it.

``exit_code(report)``: 0 both, 1 answers but does not follow the format, 2 bad input (no model,
unknown provider), 3 the endpoint does not answer.
"""
from __future__ import annotations

import time
from typing import Any, Optional

from mining.llm_operator import ReplyError, candidate_from_reply
from mining.llm import LLMError, complete, context_window, endpoint_kwargs, server_models

PROBE_KERNEL = """__global__ void scale(const float* __restrict__ x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""

PROBE_PROMPT = """Remove the `__restrict__` qualifier from this CUDA kernel (one simplification).

```cuda
{kernel}```

Answer with exactly this, and nothing before or after it:

CARRIER: restrict
DESCRIPTION: <one line>
<<<<<<< SEARCH
<the line to change, copied exactly>
=======
<the changed line>
>>>>>>> REPLACE
"""


def check(model: Optional[str], *, max_tokens: int = 160, timeout: float = 60.0, **kw: Any) -> dict:
    """One call to `model`; the report described in the module docstring."""
    kw = endpoint_kwargs(kw)
    report: dict[str, Any] = {"model": model or "", "api_base": kw.get("api_base", ""), "answers": False,
                              "latency_s": None, "context_window": None, "context_source": "",
                              "format": {"follows": False, "reason": "not asked"}, "usage": None, "error": None}
    if not model:
        report["error"] = {"kind": "bad_request", "message": "no model given (pass --model or set SKILLS_MODEL)"}
        return report
    if kw.get("api_base"):
        listed = [m.get("id", "") for m in server_models(kw["api_base"], kw.get("api_key", ""))]
        report["server_models"] = listed
        name = model.split("/", 1)[-1]
        if listed and name not in listed:
            report["warning"] = (f"the server lists {', '.join(listed[:5])}, not {name!r}; it may answer with "
                                 "another model or refuse the name")
    t0 = time.monotonic()
    try:
        c = complete(PROBE_PROMPT.format(kernel=PROBE_KERNEL), model, max_tokens=max_tokens, timeout=timeout,
                     retries=0, **kw)
    except LLMError as exc:
        report["latency_s"] = round(time.monotonic() - t0, 3)
        report["error"] = {"kind": exc.kind, "message": str(exc)}
        return report
    report["answers"] = True
    report["latency_s"] = c.seconds
    report["usage"] = c.usage()
    report["reply"] = c.text[:2000]
    w, source = context_window(model, **kw)
    report["context_window"], report["context_source"] = w, source
    if not c.text.strip():
        report["format"] = {"follows": False, "reason": "the model answered nothing"}
        return report
    try:
        cand = candidate_from_reply(PROBE_KERNEL, c.text, model=model)
    except ReplyError as exc:
        why = exc.reason + (f"; the answer was cut at max_tokens={c.max_tokens}" if c.truncated else "")
        report["format"] = {"follows": False, "reason": f"{exc.kind}: {why}"}
        return report
    done = "__restrict__" not in cand.new_source
    report["format"] = {"follows": True, "reason": "parsed and applied" + ("" if done else
                                                                          " (but __restrict__ is still there)"),
                        "did_the_task": done}
    return report


def exit_code(report: dict) -> int:
    err = report.get("error")
    if err:
        msg = err.get("message", "")
        return 2 if err.get("kind") == "bad_request" and ("no model" in msg or "Provider" in msg) else 3
    return 0 if report["format"]["follows"] else 1


def render(report: dict) -> str:
    """The report in a few lines (one line when the endpoint does not answer)."""
    if report.get("error"):
        e = report["error"]
        if exit_code(report) == 2:
            return f"error: {e['message']}"
        return f"error: {report['model']}: endpoint does not answer ({e['kind']}): {e['message']}"
    u = report["usage"] or {}
    w = report["context_window"]
    lines = [f"{report['model']}: answers in {report['latency_s']:.2f} s"
             + (f" at {report['api_base']}" if report["api_base"] else ""),
             f"context window: {w if w else 'unknown'} ({report['context_source']})",
             f"usage: {u.get('prompt_tokens', 0)} prompt + {u.get('completion_tokens', 0)} completion tokens, "
             f"${u.get('cost_usd', 0):.6f}" + ("" if u.get("usage_reported", True) else " (the server reported no usage)"),
             "answer format: " + ("follows it" if report["format"]["follows"] else "does NOT follow it")
             + f" ({report['format']['reason']})"]
    if report.get("warning"):
        lines.append("warning: " + report["warning"])
    return "\n".join(lines)
