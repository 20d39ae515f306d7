"""The one thin LLM client: ``complete(prompt, model, **kw)`` through litellm.

litellm is imported on first use (it costs seconds), with its model cost map read from the
package rather than the network (``LITELLM_LOCAL_MODEL_COST_MAP=True`` unless set). Every call
is counted in ``LEDGER`` (prompt/completion tokens, calls, seconds, cost when litellm knows it),
so a command can report what it spent.

Any litellm model string works: ``openai/gpt-4o``, ``anthropic/claude-...``, a local
``ollama/...`` or ``hosted_vllm/...`` endpoint, or any OpenAI-compatible server as
``openai/<name>`` with ``api_base``. Tests pass ``mock_response=...`` (litellm's own offline mock)
or register a ``litellm.CustomLLM``.

What a real endpoint needs, and this module does (docs/llm.md):

* **Settings from the environment** for every command: ``SKILLS_LLM_API_BASE`` /
  ``SKILLS_LLM_API_KEY`` (an OpenAI-compatible server), ``SKILLS_LLM_MAX_TOKENS`` (cap on the
  completion of every call), ``SKILLS_LLM_TIMEOUT`` (seconds per call), ``SKILLS_LLM_RETRIES``
  (retries of a call that timed out, could not connect, was rate limited or hit a 5xx),
  ``SKILLS_LLM_CONTEXT`` (the context window when the endpoint does not say).
* **The prompt sized against the context window**: the window comes from ``SKILLS_LLM_CONTEXT``,
  litellm's model map (hosted models), the server's ``/models`` entry (vLLM ``max_model_len``,
  llama.cpp ``n_ctx``, ...), or the server's own overflow error (learned once per endpoint, then
  the call is cut and sent again). Prompt tokens are counted by the server's tokenizer when it
  offers one (llama-cpp-python ``/extras/tokenize/count``, llama.cpp ``/tokenize``), else
  estimated by litellm with a margin. A prompt that does not fit is cut deliberately, section by
  section in the order the caller names (``cuttable``: markdown ``## `` headers), each cut marked
  in the prompt and reported in ``Completion.cut``; one that cannot fit is not sent
  (``LLMError`` kind ``context``). The server never truncates silently.
* **Answers as data**: ``None`` content becomes ``""``; text that is not valid UTF-8 (lone
  surrogates from a JSON escape) is repaired with U+FFFD; ``finish_reason`` says whether the answer
  was cut at ``max_tokens``.
"""
from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Sequence


class LLMError(Exception):
    """The model call failed (no endpoint, bad key, refused, prompt too long); one line for the user.

    ``kind``: connection | timeout | auth | not_found | rate_limit | server | context | bad_request | call_error."""

    def __init__(self, message: str, kind: str = "call_error", attempts: int = 1):
        super().__init__(message)
        self.kind = kind
        self.attempts = attempts


@dataclass
class Completion:
    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cost_usd: Optional[float] = None
    finish_reason: str = ""  # stop | length (cut at max_tokens) | ... as the server says
    attempts: int = 1  # calls sent, retries included
    max_tokens: int = 0  # the completion cap sent
    context_window: Optional[int] = None  # the window the prompt was sized against (None: unknown)
    cut: Optional[dict] = None  # how the prompt was cut to fit (None: sent whole)
    usage_reported: bool = True  # False when the server sent no usage (tokens then 0)
    prompt_sent: Optional[str] = None  # the prompt as sent when it was cut (None: sent as given)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    def usage(self) -> dict:
        """The call's usage for a log: tokens, cost, seconds, retries, finish reason, prompt cut."""
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "cost_usd": round(self.cost_usd or 0.0, 6), "seconds": self.seconds, "attempts": self.attempts,
                "finish_reason": self.finish_reason, "max_tokens": self.max_tokens,
                "context_window": self.context_window, "cut": self.cut, "usage_reported": self.usage_reported}

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
# Set to a list to keep every call's prompt as sent, reply and usage (eval/bench_llm.py's examples).
RECORDER: Optional[list] = None

DEFAULT_RETRIES = 2
DEFAULT_TIMEOUT_S = 120.0
CHAT_OVERHEAD = 64  # tokens a chat template may add around one user message (role markers, a default system turn)
ESTIMATE_MARGIN = 1.15  # litellm's estimate vs. an unknown tokenizer: assume more tokens, not fewer


def _litellm():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm


def _env_int(name: str) -> Optional[int]:
    v = os.environ.get(name, "").strip()
    if not v:
        return None
    try:
        return int(v)
    except ValueError:
        raise LLMError(f"${name}: expected an integer, got {v!r}", "bad_request") from None


def _env_float(name: str) -> Optional[float]:
    v = os.environ.get(name, "").strip()
    if not v:
        return None
    try:
        return float(v)
    except ValueError:
        raise LLMError(f"${name}: expected a number, got {v!r}", "bad_request") from None


def endpoint_kwargs(kw: dict) -> dict:
    """``api_base`` / ``api_key`` from the arguments, else $SKILLS_LLM_API_BASE / $SKILLS_LLM_API_KEY.
    A local server needs some key for the OpenAI client; "none" is sent when none is set."""
    out = dict(kw)
    base = out.get("api_base") or os.environ.get("SKILLS_LLM_API_BASE", "").strip()
    if base:
        out["api_base"] = base.rstrip("/")
        key = out.get("api_key") or os.environ.get("SKILLS_LLM_API_KEY", "").strip()
        out["api_key"] = key or "none"
    return out


# --------------------------------------------------------------------------- the context window
_WINDOWS: dict[tuple[str, str], int] = {}  # (model, api_base) -> window, learned from the server
_TOKENIZE: dict[str, Optional[str]] = {}  # api_base -> tokenize URL that answered (None: none does)
_WINDOW_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length", "n_ctx",
                "max_input_tokens", "n_ctx_train")


def _http_json(url: str, payload: Optional[dict] = None, key: str = "", timeout: float = 5.0) -> Any:
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET",
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {key}"} if key else {})})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - the user's own endpoint
        return json.loads(resp.read().decode("utf-8", "replace"))


def _root(api_base: str) -> str:
    return re.sub(r"/v1/?$", "", api_base.rstrip("/"))


def _find_window(obj: Any) -> Optional[int]:
    if isinstance(obj, dict):
        for k in _WINDOW_KEYS:
            v = obj.get(k)
            if isinstance(v, int) and v > 0:
                return v
        for v in obj.values():
            got = _find_window(v) if isinstance(v, (dict, list)) else None
            if got:
                return got
    elif isinstance(obj, list):
        for v in obj:
            got = _find_window(v)
            if got:
                return got
    return None


def server_models(api_base: str, api_key: str = "", timeout: float = 5.0) -> list[dict]:
    """The ``/models`` list of an OpenAI-compatible server ([] when it does not answer it)."""
    try:
        got = _http_json(api_base.rstrip("/") + "/models", key=api_key, timeout=timeout)
    except (OSError, ValueError):
        return []
    data = got.get("data") if isinstance(got, dict) else got
    return [m for m in data or [] if isinstance(m, dict)]


_ASKED: dict[tuple[str, str], tuple[Optional[int], str]] = {}  # one lookup per endpoint and process
_OVERHEAD: dict[tuple[str, str], int] = {}  # (model, api_base) -> the chat template's tokens, as measured


def context_window(model: str, **kw: Any) -> tuple[Optional[int], str]:
    """(window in tokens or None, where it came from)."""
    kw = endpoint_kwargs(kw)
    env = _env_int("SKILLS_LLM_CONTEXT")
    if env:
        return env, "$SKILLS_LLM_CONTEXT"
    base = kw.get("api_base", "")
    if (model, base) in _WINDOWS:
        return _WINDOWS[(model, base)], "the server's context-overflow error"
    if (model, base) not in _ASKED:
        _ASKED[(model, base)] = _lookup_window(model, base, kw)
    return _ASKED[(model, base)]


def _lookup_window(model: str, base: str, kw: dict) -> tuple[Optional[int], str]:
    if base:
        models = server_models(base, kw.get("api_key", ""))
        name = model.split("/", 1)[-1]
        mine = [m for m in models if m.get("id") == name] or models[:1]
        w, where = _find_window(mine), f"{base}/models"
        if not w:  # llama.cpp's own server reports the slot context under /props
            where = _root(base) + "/props"
            try:
                w = _find_window(_http_json(where, key=kw.get("api_key", ""), timeout=5.0))
            except (OSError, ValueError):
                w = None
        if w:
            return w, where
        w = _probe_overflow(model, base, kw.get("api_key", ""))
        if w:
            _WINDOWS[(model, base)] = w
            return w, "the server's context-overflow error"
        return None, "unknown (the server does not report it; set $SKILLS_LLM_CONTEXT, or it is learned from an overflow)"
    try:
        info = _litellm().get_model_info(model)
        w = info.get("max_input_tokens") or info.get("max_tokens")
        if w:
            return int(w), "litellm's model map"
    except Exception:  # noqa: BLE001 - a model litellm does not map
        pass
    return None, "unknown (not in litellm's model map; set $SKILLS_LLM_CONTEXT)"


def _probe_overflow(model: str, base: str, key: str) -> Optional[int]:
    """The window of a local llama.cpp-family server that does not report it: one request far
    over any CPU server's window, which the server refuses after tokenizing (before evaluating),
    naming its window. Sent only to a server exposing llama-cpp-python's tokenizer extension, so
    never to a hosted endpoint that might accept and bill it."""
    token_counter(model, api_base=base, api_key=key or "none")
    if not (_TOKENIZE.get(base) or "").endswith("/extras/tokenize/count"):
        return None
    body = {"model": model.split("/", 1)[-1], "max_tokens": 1,
            "messages": [{"role": "user", "content": "x " * PROBE_TOKENS}]}
    try:
        _http_json(base.rstrip("/") + "/chat/completions", body, key=key, timeout=30.0)
    except urllib.error.HTTPError as exc:
        try:
            return window_from_error(exc.read().decode("utf-8", "replace"))
        except OSError:
            return None
    except (OSError, ValueError):
        return None
    return None


PROBE_TOKENS = 1 << 18

_OVERFLOW = [re.compile(p, re.I) for p in (r"context window of (\d+)", r"maximum context length is (\d+)",
                                           r"context length of (\d+)", r"n_ctx\D{0,8}(\d+)",
                                           r"exceeds? the available context size \((\d+)")]


def window_from_error(message: str) -> Optional[int]:
    for p in _OVERFLOW:
        m = p.search(message)
        if m:
            return int(m.group(1))
    return None


def token_counter(model: str, **kw: Any) -> Callable[[str], int]:
    """A prompt-token counter: the server's tokenizer when it offers one, else litellm's estimate
    (times a margin, since the model's own tokenizer is unknown)."""
    kw = endpoint_kwargs(kw)
    base = kw.get("api_base", "")
    if base:
        if base not in _TOKENIZE:
            _TOKENIZE[base] = None
            for url, body in ((_root(base) + "/extras/tokenize/count", {"input": "x"}),
                              (_root(base) + "/tokenize", {"content": "x"})):
                try:
                    got = _http_json(url, body, key=kw.get("api_key", ""), timeout=5.0)
                except (OSError, ValueError):
                    continue
                if isinstance(got, dict) and ("count" in got or "tokens" in got):
                    _TOKENIZE[base] = url
                    break
        url = _TOKENIZE[base]
        if url is not None:
            def server_count(text: str) -> int:
                body = {"input": text} if url.endswith("/count") else {"content": text}
                got = _http_json(url, body, key=kw.get("api_key", ""), timeout=30.0)
                return int(got["count"]) if "count" in got else len(got["tokens"])
            return server_count
    litellm = _litellm()
    known = True
    try:
        litellm.get_model_info(model)
    except Exception:  # noqa: BLE001
        known = False

    def estimate(text: str) -> int:
        n = litellm.token_counter(model=model, text=text)
        return n if known else int(n * ESTIMATE_MARGIN) + 1
    return estimate


def billed_prompt_tokens(prompt: str, model: str, **kw: Any) -> int:
    """About how many prompt tokens the endpoint will bill for `prompt` as one user message: its
    tokens plus the chat template's (measured on this endpoint's earlier answers, else a guess)."""
    kw = endpoint_kwargs(kw)
    return token_counter(model, **kw)(prompt) + _OVERHEAD.get((model, kw.get("api_base", "")), CHAT_OVERHEAD)


# --------------------------------------------------------------------------- cutting a prompt to fit
_SECTION = re.compile(r"^## ", re.M)


def fit_prompt(prompt: str, budget: int, count: Callable[[str], int], cuttable: Sequence[str] = ()
               ) -> tuple[str, Optional[dict]]:
    """The prompt within `budget` tokens: the sections whose ``## `` header starts with one of
    `cuttable`, in that order, lose lines from their end (a marker line says how many) until it
    fits. Returns (prompt, cut report or None when nothing was cut); LLMError(kind="context")
    when even every cuttable section emptied does not fit."""
    before = count(prompt)
    if before <= budget:
        return prompt, None
    parts = _split_sections(prompt)
    report = {"budget_tokens": budget, "prompt_tokens_before": before, "sections": []}
    for head in cuttable:
        idx = next((i for i, (h, _) in enumerate(parts) if h.startswith("## " + head)), None)
        if idx is None:
            continue
        h, body = parts[idx]
        lines = body.split("\n")
        # largest number of leading body lines that still fits (binary search on the count)
        lo, hi = 0, len(lines)
        best = None
        while lo <= hi:
            mid = (lo + hi) // 2
            trial = parts[:idx] + [(h, _cut_body(lines, mid))] + parts[idx + 1:]
            if count(_join(trial)) <= budget:
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        keep = best if best is not None else 0
        parts[idx] = (h, _cut_body(lines, keep))
        report["sections"].append({"section": h.strip("# \n"), "lines": len(lines), "lines_kept": keep})
        if best is not None:
            out = _join(parts)
            report["prompt_tokens_after"] = count(out)
            return out, report
    after = count(_join(parts))
    raise LLMError(f"the prompt needs {before} tokens and still {after} after cutting "
                   f"{', '.join(s['section'] for s in report['sections']) or 'nothing cuttable'}; "
                   f"the model's window leaves {budget} for it", "context")


def _split_sections(prompt: str) -> list[tuple[str, str]]:
    """[(header line with newline, body)]; the text before the first header has header ''."""
    starts = [m.start() for m in _SECTION.finditer(prompt)]
    if not starts or starts[0] != 0:
        starts = [0] + starts
    out = []
    for a, b in zip(starts, starts[1:] + [len(prompt)]):
        chunk = prompt[a:b]
        if chunk.startswith("## "):
            nl = chunk.find("\n")
            head, body = (chunk, "") if nl < 0 else (chunk[:nl + 1], chunk[nl + 1:])
        else:
            head, body = "", chunk
        out.append((head, body))
    return out


def _join(parts: list[tuple[str, str]]) -> str:
    return "".join(h + b for h, b in parts)


def _cut_body(lines: list[str], keep: int) -> str:
    if keep >= len(lines):
        return "\n".join(lines)
    kept = lines[:keep]
    if sum(1 for ln in kept if ln.lstrip().startswith("```")) % 2:
        kept.append("```")  # never leave a code fence open
    dropped = len(lines) - keep
    return "\n".join(kept + [f"[... {dropped} line{'s' if dropped != 1 else ''} cut here to fit the model's "
                             "context window ...]", ""])


# --------------------------------------------------------------------------- the call
_RETRYABLE = ("Timeout", "APIConnectionError", "RateLimitError", "ServiceUnavailableError", "InternalServerError")
_KINDS = {"Timeout": "timeout", "APIConnectionError": "connection", "RateLimitError": "rate_limit",
          "ServiceUnavailableError": "server", "InternalServerError": "server", "AuthenticationError": "auth",
          "PermissionDeniedError": "auth", "NotFoundError": "not_found", "ContextWindowExceededError": "context",
          "BadRequestError": "bad_request"}


def _kind(exc: BaseException) -> str:
    if re.search(r"Connection (error|refused)|Failed to establish|Name or service not known", str(exc)):
        return "connection"  # litellm reports a refused connection as a 500 from the provider
    for cls in type(exc).__mro__:
        if cls.__name__ in _KINDS:
            return _KINDS[cls.__name__]
    return "call_error"


def _one_line(exc: BaseException) -> str:
    s = str(exc).strip()
    first = s.splitlines()[0] if s else type(exc).__name__
    return re.sub(r"^litellm\.\w+:\s*", "", first)[:300]


def clean_text(text: Any) -> str:
    """An answer as valid UTF-8 text: None -> '', bytes decoded with replacement, lone surrogates
    (a JSON escape of invalid UTF-8) replaced."""
    if text is None:
        return ""
    if isinstance(text, bytes):
        return text.decode("utf-8", "replace")
    return str(text).encode("utf-8", "replace").decode("utf-8", "replace")


def complete(prompt: str, model: str, system: Optional[str] = None, temperature: float = 0.0,
             max_tokens: int = 2048, timeout: Optional[float] = None, retries: Optional[int] = None,
             cuttable: Sequence[str] = (), **kw: Any) -> Completion:
    """One chat completion; returns the text, its usage and how the prompt was fitted (also
    added to ``LEDGER``). Raises LLMError (with ``kind``) when no answer came back."""
    if not model:
        raise LLMError("no model given (pass --model, e.g. openai/gpt-4o or ollama/qwen2.5-coder)", "bad_request")
    litellm = _litellm()
    kw = endpoint_kwargs(kw)
    cap = _env_int("SKILLS_LLM_MAX_TOKENS")
    max_tokens = max(1, min(int(max_tokens), cap) if cap else int(max_tokens))
    timeout = float(timeout if timeout is not None else (_env_float("SKILLS_LLM_TIMEOUT") or DEFAULT_TIMEOUT_S))
    env_retries = _env_int("SKILLS_LLM_RETRIES")
    retries = max(0, retries if retries is not None else env_retries if env_retries is not None else DEFAULT_RETRIES)
    mocked = "mock_response" in kw  # litellm's offline mock: no window to size against
    window, cut, sent, counted = None, None, prompt, None
    if not mocked:
        window, _ = context_window(model, **kw)
    started = time.monotonic()
    attempt, learned, first_error = 0, False, None
    while True:
        if window:
            sent, cut, max_tokens, counted = _fit(prompt, model, window, max_tokens, system, cuttable, kw)
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": sent}]
        attempt += 1
        try:
            resp = litellm.completion(model=model, messages=messages, temperature=temperature, max_tokens=max_tokens,
                                      timeout=timeout, **kw)
            break
        except Exception as exc:  # noqa: BLE001 - litellm raises many provider-specific types
            kind = _kind(exc)
            w = window_from_error(str(exc)) if kind in ("context", "bad_request") else None
            if w and not learned and not mocked:  # the server told us its window: cut to it, once
                _WINDOWS[(model, kw.get("api_base", ""))] = w
                window, learned = w, True
                continue
            first_error = first_error or _one_line(exc)  # what went wrong first says most
            if type(exc).__name__ in _RETRYABLE and attempt <= retries:
                time.sleep(min(4.0, 0.5 * 2 ** (attempt - 1)))
                continue
            tried = f" (after {attempt} attempts)" if attempt > 1 else ""
            raise LLMError(f"{model}: {first_error}{tried}", kind, attempt) from exc
    choice = resp.choices[0] if getattr(resp, "choices", None) else None
    text = clean_text(getattr(getattr(choice, "message", None), "content", None) if choice else None)
    usage = getattr(resp, "usage", None)
    pt = int(getattr(usage, "prompt_tokens", 0) or 0)
    ct = int(getattr(usage, "completion_tokens", 0) or 0)
    if counted is not None and pt > counted and not system:  # what the template added, exactly
        _OVERHEAD[(model, kw.get("api_base", ""))] = pt - counted + 2
    cost = None
    try:
        cost = float(litellm.completion_cost(completion_response=resp))
    except Exception:  # noqa: BLE001 - a model without a price (local servers): no cost
        cost = None
    c = Completion(text=text, model=model, prompt_tokens=pt, completion_tokens=ct,
                   seconds=round(time.monotonic() - started, 3), cost_usd=cost,
                   finish_reason=str(getattr(choice, "finish_reason", "") or ""), attempts=attempt,
                   max_tokens=max_tokens, context_window=window, cut=cut, usage_reported=usage is not None and pt > 0,
                   prompt_sent=sent if sent != prompt else None)
    LEDGER.add(c)
    if RECORDER is not None:
        RECORDER.append({"model": model, "prompt": sent, "reply": text} | c.usage())
    return c


def _fit(prompt: str, model: str, window: int, max_tokens: int, system: Optional[str], cuttable: Sequence[str],
         kw: dict) -> tuple[str, Optional[dict], int, Optional[int]]:
    """(prompt to send, cut report, completion cap, its exact token count or None) for a window:
    the completion gets at most half of it, the prompt the rest less the chat template's
    overhead (as measured on this endpoint's earlier answers, else a generous guess)."""
    count = token_counter(model, **kw)
    exact = _TOKENIZE.get(kw.get("api_base", "")) is not None
    asked = max_tokens
    max_tokens = max(1, min(max_tokens, window // 2))
    try:
        overhead = _OVERHEAD.get((model, kw.get("api_base", "")), CHAT_OVERHEAD) + (count(system) if system else 0)
        budget = window - max_tokens - overhead
        sent, cut = fit_prompt(prompt, budget, count, cuttable)
        counted = count(sent) if exact else None
    except (OSError, ValueError) as exc:  # the tokenizer endpoint failed mid-way: send uncut, let the server judge
        return prompt, {"error": f"could not count tokens: {exc}"[:200]}, max_tokens, None
    if asked != max_tokens:
        cut = dict(cut or {}) | {"max_tokens_asked": asked, "max_tokens_sent": max_tokens}
    if cut is not None:
        cut["context_window"] = window
    return sent, cut, max_tokens, counted


_FENCE = re.compile(r"```[ \t]*(?:c\+\+|cpp|cc|c)?[ \t]*\n(.*?)```", re.S | re.I)


def extract_code(text: str) -> str:
    """The first fenced code block of a reply (the whole reply when there is none)."""
    m = _FENCE.search(text)
    return (m.group(1) if m else text).strip() + "\n"
