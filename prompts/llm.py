"""The one thin LLM client: ``complete(prompt, model, **kw)`` through litellm.

litellm is imported on first use (it costs ~4 s), with its model cost map read from the
package rather than the network (``LITELLM_LOCAL_MODEL_COST_MAP=True`` unless set). Every call
is counted in ``LEDGER`` (prompt/completion tokens, calls, seconds, cost when litellm knows it),
so a command can report what it spent.

Any litellm model string works: ``openai/gpt-4o``, ``anthropic/claude-...``, a local
``ollama/...`` or ``hosted_vllm/...`` endpoint. Tests pass ``mock_response=...`` (litellm's own
offline mock) or register a ``litellm.CustomLLM``.
"""
from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional


class LLMError(Exception):
    """The model call failed (no endpoint, bad key, refused); one line for the user."""


@dataclass
class Completion:
    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cost_usd: Optional[float] = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TokenLedger:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cost_usd: float = 0.0
    by_model: dict = field(default_factory=dict)
    _lock: Any = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, c: Completion) -> None:
        with self._lock:
            self.calls += 1
            self.prompt_tokens += c.prompt_tokens
            self.completion_tokens += c.completion_tokens
            self.seconds += c.seconds
            self.cost_usd += c.cost_usd or 0.0
            m = self.by_model.setdefault(c.model, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
            m["calls"] += 1
            m["prompt_tokens"] += c.prompt_tokens
            m["completion_tokens"] += c.completion_tokens

    def to_dict(self) -> dict:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "seconds": round(self.seconds, 3), "cost_usd": round(self.cost_usd, 6), "by_model": self.by_model}


LEDGER = TokenLedger()


def _litellm():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.telemetry = False
    return litellm


def complete(prompt: str, model: str, system: Optional[str] = None, temperature: float = 0.0,
             max_tokens: int = 2048, timeout: float = 120.0, **kw: Any) -> Completion:
    """One chat completion; returns the text and its token counts (also added to ``LEDGER``)."""
    if not model:
        raise LLMError("no model given (pass --model, e.g. openai/gpt-4o or ollama/qwen2.5-coder)")
    litellm = _litellm()
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    started = time.monotonic()
    try:
        resp = litellm.completion(model=model, messages=messages, temperature=temperature, max_tokens=max_tokens,
                                  timeout=timeout, **kw)
    except Exception as exc:  # litellm raises many provider-specific types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LLMError(f"{model}: {first[:300]}") from exc
    text = resp.choices[0].message.content or ""
    usage = getattr(resp, "usage", None)
    pt = int(getattr(usage, "prompt_tokens", 0) or 0)
    ct = int(getattr(usage, "completion_tokens", 0) or 0)
    cost = None
    try:
        cost = float(litellm.completion_cost(completion_response=resp))
    except Exception:
        cost = None
    c = Completion(text=text, model=model, prompt_tokens=pt, completion_tokens=ct,
                   seconds=round(time.monotonic() - started, 3), cost_usd=cost)
    LEDGER.add(c)
    return c


_FENCE = re.compile(r"```[ \t]*(?:c\+\+|cpp|cc|c)?[ \t]*\n(.*?)```", re.S | re.I)


def extract_code(text: str) -> str:
    """The first fenced code block of a reply (the whole reply when there is none)."""
    m = _FENCE.search(text)
    return (m.group(1) if m else text).strip() + "\n"
