"""Produce docs/agents.md's worked session: gate, query, apply, gate, profile, through the MCP stdio
client against `skills serve --mcp`. The store is the proxy skills of tests/fixtures/kernel_skills
(indexed here) unless --store names a mined one.

    python scripts/agent_transcript.py --out /tmp/transcript.json [--store STORE] [--executor cpu]
"""
import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "corpora" / "kernels" / "softmax"


def proxy_store(root: Path) -> None:
    from retrieval.skill_index import index_skills
    from skills.kernel_store import KernelStore
    from mining.records import Skill
    from skills.store import Store

    st = Store(root)
    ks = KernelStore(st)
    for d in json.loads((ROOT / "tests/fixtures/kernel_skills/proxy_skills.json").read_text()):
        ks.put_skill(Skill.model_validate(d))
    index_skills(st, step_budget=20)
    st.close()


async def session(store: Path, executor: str) -> list[dict]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "cli", "serve", "--mcp", "--store", str(store)],
                                   env={"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PATH": os.environ["PATH"]},
                                   cwd=str(ROOT))
    log: list[dict] = []
    naive = (PROBLEM / "naive.cu").read_text()

    async def call(c, name, args):
        t0 = time.monotonic()
        prog = []

        async def on_progress(p, total, msg):
            prog.append(f"[{p:5.1f}s] {msg}")
        r = await c.call_tool(name, args, progress_callback=on_progress)
        out = json.loads(r.content[0].text[r.content[0].text.index("{"):]) if r.is_error else r.structured_content
        log.append({"tool": name, "args": {k: (v if k != "source" and k != "code" else f"<{len(v)} chars>")
                                          for k, v in args.items()}, "is_error": r.is_error,
                    "wall_s": round(time.monotonic() - t0, 1), "progress": prog[-3:], "result": out})
        return out

    async with Client(params, read_timeout_seconds=600) as c:
        g = {"problem": str(PROBLEM), "executor": executor, "seeds": 1, "stages": ["static", "correctness"]}
        await call(c, "gate_kernel", {**g, "source": naive, "kernel": "naive.cu"})
        await call(c, "query_skills", {"code": naive, "path": "naive.cu", "k": 3, "axes": {"M": 37, "N": 1001}})
        edited = naive.replace("expf(", "__expf(")
        await call(c, "gate_kernel", {**g, "source": edited, "kernel": "naive.cu",
                                      "workloads": [{"axes": {"M": 5, "N": 4097}}]})
        await call(c, "profile_kernel", {"problem": str(PROBLEM), "source": edited, "kernel": "naive.cu"})
    return log


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--store", type=Path)
    ap.add_argument("--executor", default="cpu")
    a = ap.parse_args()
    store = a.store
    if store is None:
        store = a.out.parent / "transcript-store"
        if not (store / "store.duckdb").exists():
            proxy_store(store)
    log = asyncio.run(session(store, a.executor))
    a.out.write_text(json.dumps({"machine": os.uname().nodename, "load": os.getloadavg(), "executor": a.executor,
                                 "store": str(store), "calls": log}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
