"""The agent tools (retrieval/agent_tools.py) through the official MCP SDK's stdio client and the HTTP
server: a passing kernel with extra workloads (the same JSON as `skills gate --json`), a failing kernel
(first bad index), an out-of-bounds kernel (the CPU checker's report), a hostile kernel (sandboxed),
profile_kernel on a machine without a GPU, lineage / get_skill errors. The problem is the tiny
y = 2x of tests/fixtures/hostile/scale so each gate run costs a few seconds."""
import asyncio
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from mining.gate.executors import gpu_info
from mining.gate.sandbox import isolation

ROOT = Path(__file__).resolve().parents[2]
SCALE = ROOT / "tests" / "fixtures" / "hostile" / "scale"
HONEST = (SCALE / "kernel.cu").read_text()
WRONG = HONEST.replace("if (i < n)", "if (i < n - 1)")  # the last element is never written
OOB = HONEST.replace("if (i < n)", "if (i <= n)")  # reads and writes one past the end
BARE_KERNEL = HONEST.split("void scale(")[0]  # the __global__ alone, no host entry
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "PATH": os.environ["PATH"]}
needs_sandbox = pytest.mark.skipif(isolation() is None, reason="bubblewrap is not usable here")


def _lineage_store(root: Path) -> None:
    from skills.kernel_store import KernelStore
    from mining.records import Lineage, Step
    from skills.store import Store

    st = Store(root)
    step = Step(lineage_id="lin-test", index=1, accepted=True, operator="fast_math_to_precise", carrier="fast_math",
                before_hash="a", after_hash="b", diff="--- a\n+++ b\n-__expf(x)\n+expf(x)\n", verdict="pass")
    lin = Lineage(lineage_id="lin-test", problem="scale", problem_dir=str(SCALE), kernel="kernel.cu",
                  kernel_hash="a", executor="cpu", strategy="deterministic", termination="complete", steps=[step])
    KernelStore(st).save_lineage(lin, [], {})
    st.close()


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """One MCP stdio session (the server as a subprocess) making every call; the answers, and the store."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    tmp = tmp_path_factory.mktemp("agent_tools")
    store = tmp / "store"
    _lineage_store(store)
    target = tmp / "target"
    target.mkdir()
    token = uuid.uuid4().hex[:12]
    hostile = (SCALE / "write_outside.cu").read_text().replace("@TARGET@", str(target)).replace("@TOKEN@", token)
    params = StdioServerParameters(command=sys.executable, args=["-m", "cli", "serve", "--mcp", "--store", str(store)],
                                   env=ENV, cwd=str(ROOT))
    gate = {"problem": str(SCALE), "executor": "cpu", "seeds": 1, "stages": ["correctness"]}

    async def run():
        out = {"progress": []}

        async def on_progress(p, total, message):
            out["progress"].append((p, message))
        async with Client(params, read_timeout_seconds=300) as c:
            out["tools"] = {t.name: t for t in (await c.list_tools()).tools}
            out["pass"] = await c.call_tool("gate_kernel", {**gate, "source": HONEST, "workloads": [{"axes": {"N": 7}}]},
                                            progress_callback=on_progress)
            out["wrong"] = await c.call_tool("gate_kernel", {**gate, "source": WRONG})
            out["oob"] = await c.call_tool("gate_kernel", {**gate, "source": OOB})
            out["hostile"] = await c.call_tool("gate_kernel", {**gate, "source": hostile})
            out["bad_workload"] = await c.call_tool("gate_kernel", {**gate, "workloads": [{"axes": {"N": "big"}}]})
            out["not_a_problem"] = await c.call_tool("gate_kernel", {**gate, "problem": str(tmp)})
            out["profile"] = await c.call_tool("profile_kernel", {"problem": str(SCALE)})
            out["wrap"] = await c.call_tool("wrap_kernel", {"source": BARE_KERNEL, "name": "scale2", "executor": "cpu",
                                                            "out": str(tmp / "wrapped")})
            out["lineage"] = await c.call_tool("lineage", {"problem": "scale"})
            out["no_lineage"] = await c.call_tool("lineage", {"problem": "nope"})
            out["no_index"] = await c.call_tool("get_skill", {"skill_id": "sk-0"})
        return out

    return {"store": store, "target": target, "token": token, "tmp": tmp, **asyncio.run(run())}


def _err(res) -> dict:
    assert res.is_error
    text = res.content[0].text
    return json.loads(text[text.index("{"):])["error"]


def test_tools_listed_with_their_arguments(session):
    tools = session["tools"]
    assert {"gate_kernel", "profile_kernel", "wrap_kernel", "query_skills", "get_skill", "lineage"} <= set(tools)
    assert {"problem", "source", "kernel", "executor", "workloads"} <= set(tools["gate_kernel"].input_schema["properties"])


def test_passing_kernel_with_extra_workloads_and_progress(session):
    res = session["pass"]
    assert not res.is_error, res.content
    out = res.structured_content
    assert out["verdict"] == "pass" and out["digest"]["failing_case"] is None
    assert out["stages"]["correctness"]["workloads"][-1].endswith("[N=7]")  # the extra workload was checked
    assert str(SCALE) in out["kernel"] and "ks-extra-" not in json.dumps(out)  # names the real folder
    assert any("gating scale" in m for _, m in session["progress"])
    assert [p for p, _ in session["progress"]] == sorted(p for p, _ in session["progress"])


def test_same_json_as_the_cli(session):
    """`skills gate --json` on the same kernel and workloads gives the same verdict and digest."""
    kfile = session["store"].parent / "kernel.cu"
    kfile.write_text(HONEST)
    proc = subprocess.run([sys.executable, "-m", "cli", "gate", str(SCALE), "--kernel", str(kfile), "-e", "cpu",
                           "--seeds", "1", "--stages", "correctness", "--workload", "N=7", "--json",
                           "--store", str(session["store"])], capture_output=True, text=True, env=ENV, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    cli = json.loads(proc.stdout)
    mcp = session["pass"].structured_content
    assert set(cli) == set(mcp)
    assert cli["digest"] == mcp["digest"]
    assert cli["stages"]["correctness"]["workloads"] == mcp["stages"]["correctness"]["workloads"]


def test_failing_kernel_names_the_first_bad_element(session):
    d = session["wrong"].structured_content["digest"]
    assert d["verdict"] == "fail"
    assert d["failing_case"]["output"] == "y" and d["failing_case"]["unwritten"] == 1
    assert d["first_bad_index"] == [999]


def test_out_of_bounds_kernel_reported(session):
    d = session["oob"].structured_content["digest"]
    assert d["verdict"] == "fail"
    assert d["race_oob"] and d["race_oob"][0]["kind"] == "oob" and "out of bounds" in d["race_oob"][0]["message"]


@needs_sandbox
def test_hostile_kernel_is_sandboxed(session):
    out = session["hostile"].structured_content
    assert out["verdict"] == "fail" and "blocked" in out["reason"] and "escaped.txt" in out["reason"]
    assert list(session["target"].iterdir()) == []
    assert not (Path("/tmp") / f"ks_hostile_{session['token']}").exists()


def test_bad_input_is_a_structured_error(session):
    e = _err(session["bad_workload"])
    assert e["kind"] == "bad_input" and "workloads[0]" in e["message"]
    e = _err(session["not_a_problem"])
    assert e["kind"] == "bad_input" and "no definition.json" in e["message"]


@pytest.mark.skipif(gpu_info() is not None, reason="this machine has a GPU")
def test_profile_without_a_gpu_says_so(session):
    e = _err(session["profile"])
    assert e["kind"] == "no_gpu" and "GPU" in e["message"]


def test_wrap_kernel_writes_a_folder_and_says_what_is_missing(session):
    out = session["wrap"].structured_content
    assert not session["wrap"].is_error and out["entry_kind"] == "kernel" and out["kernels"] == ["scale_kernel"]
    assert (session["tmp"] / "wrapped" / "definition.json").is_file()
    assert any("reference" in m for m in out["missing"]) and out["complete"] is False


def test_lineage_is_the_cli_json(session):
    out = session["lineage"].structured_content
    proc = subprocess.run([sys.executable, "-m", "cli", "lineage", "scale", "--json", "--store", str(session["store"])],
                          capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == out
    assert out["steps"][0]["operator"] == "fast_math_to_precise"
    assert _err(session["no_lineage"])["kind"] == "not_found"
    assert _err(session["no_index"])["kind"] in ("no_index", "no_store")


def test_http_server_serves_the_same_tools(session):
    from retrieval.server import request, serve

    info = {}
    ready = threading.Event()
    t = threading.Thread(target=serve, args=(session["store"],), kwargs={"warm": False, "ready": lambda i: (
        info.update(i), ready.set())}, daemon=True)
    t.start()
    assert ready.wait(30)
    try:
        names = [x["name"] for x in request(info, "GET", "/tools")["tools"]]
        assert "gate_kernel" in names and "profile_kernel" in names
        out = request(info, "POST", "/tools/gate_kernel", {"problem": str(SCALE), "source": WRONG, "executor": "cpu",
                                                           "seeds": 1, "stages": ["correctness"]}, timeout=300)
        assert out.pop("_status") == 200
        assert out["digest"] == session["wrong"].structured_content["digest"]
        lin = request(info, "POST", "/tools/lineage", {"problem": "scale"})
        assert lin.pop("_status") == 200 and lin == session["lineage"].structured_content
        bad = request(info, "POST", "/tools/gate_kernel", {"problem": str(SCALE), "bogus": 1})
        assert bad["_status"] == 400 and "bogus" in bad["error"]["message"]
        missing = request(info, "POST", "/tools/gate_kernel", {"source": WRONG})
        assert missing["_status"] == 400 and "problem" in missing["error"]["message"]
        if gpu_info() is None:
            prof = request(info, "POST", "/tools/profile_kernel", {"problem": str(SCALE)})
            assert prof["_status"] == 503 and prof["error"]["kind"] == "no_gpu"
        import http.client

        for headers in ({"Origin": "http://evil.example", "X-Skills-Token": info["token"]}, {}):  # foreign page; no token
            conn = http.client.HTTPConnection(info["host"], info["port"], timeout=30)
            conn.request("POST", "/tools/lineage", body=b'{"problem": "scale"}',
                         headers={"Content-Type": "application/json", **headers})
            assert conn.getresponse().status == 403
            conn.close()
    finally:
        request(info, "POST", "/shutdown")
        t.join(10)
