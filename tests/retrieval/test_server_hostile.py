"""`skills serve` against hostile clients (docs/security.md): a real server process, no index needed
(every check happens before a query reaches the index)."""
from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve") / "store"
    root.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "SKILLS_SERVE_CONN_TIMEOUT": "1",
           "SKILLS_SERVE_WORKERS": "4"}
    code = "import sys; from cli import app; sys.argv[0] = 'skills'; app()"
    proc = subprocess.Popen([sys.executable, "-c", code, "serve", "--store", str(root)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sf = root / "serve.json"
    deadline = time.time() + 120
    while not sf.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert sf.exists(), proc.stderr.read() if proc.poll() is not None else "no serve.json"
    info = json.loads(sf.read_text())
    yield {"proc": proc, "info": info, "root": root}
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def _req(info, method, path, body=None, headers=None, timeout=10):
    conn = http.client.HTTPConnection(info["host"], info["port"], timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _alive(server) -> bool:
    return server["proc"].poll() is None and _req(server["info"], "GET", "/health")[0] == 200


def test_serve_file_is_private_and_has_a_token(server):
    assert oct((server["root"] / "serve.json").stat().st_mode & 0o777) == "0o600"
    assert len(server["info"]["token"]) >= 24


def test_cross_site_text_plain_post_cannot_shut_it_down(server):
    info = server["info"]
    status, _ = _req(info, "POST", "/shutdown", b"{}", {"Content-Type": "text/plain", "Origin": "http://evil.example"})
    assert status == 403
    status, _ = _req(info, "POST", "/shutdown", b"{}", {"Content-Type": "text/plain"})
    assert status == 415
    status, body = _req(info, "POST", "/shutdown", b"{}", {"Content-Type": "application/json"})
    assert status == 403 and b"token" in body
    assert _alive(server)


def test_foreign_host_header_is_refused(server):
    status, _ = _req(server["info"], "GET", "/health", headers={"Host": "attacker.example:80"})
    assert status == 403


def test_bad_k_is_400_not_500(server):
    for k in ("abc", -1, 10 ** 9, 2.5, True):
        status, body = _req(server["info"], "POST", "/query", json.dumps({"text": "tile", "k": k}),
                            {"Content-Type": "application/json"})
        assert status == 400, (k, body)
        assert json.loads(body)["error"]["kind"] == "bad_input"


def test_big_code_is_refused_before_matching(server):
    t = time.perf_counter()
    status, _ = _req(server["info"], "POST", "/query", json.dumps({"code": "x" * (1 << 20)}),
                     {"Content-Type": "application/json"})
    assert status == 413
    status, body = _req(server["info"], "POST", "/query", json.dumps({"code": "int a;\n" * 40000}),
                        {"Content-Type": "application/json"})
    assert status == 400 and b"KB limit" in body
    assert time.perf_counter() - t < 5


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def test_idle_connections_use_a_bounded_pool_and_time_out(server):
    info, pid = server["info"], server["proc"].pid
    socks = []
    for _ in range(60):
        s = socket.create_connection((info["host"], info["port"]))
        socks.append(s)
    time.sleep(0.5)
    assert _threads(pid) <= 4 + 6  # the pool and the main threads, not one per connection
    time.sleep(2.5)  # idle connections are dropped after 1 s (SKILLS_SERVE_CONN_TIMEOUT)
    assert _alive(server)
    for s in socks:
        s.close()


def test_shutdown_with_the_token(server):
    info = server["info"]
    status, _ = _req(info, "POST", "/shutdown", b"{}", {"Content-Type": "application/json",
                                                         "X-Skills-Token": info["token"]})
    assert status == 200
    server["proc"].wait(20)
    assert not (server["root"] / "serve.json").exists()
