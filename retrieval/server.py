"""`skills serve`: a resident query process on loopback that keeps the index and encoders warm.

HTTP/1.1, JSON in and out (docs/query.md documents the API):

    GET  /health            {"ok": true, "pid", "store", "uptime_s", "queries", "index": {...}}
    POST /query             body {"code": "..." | "text": "...", "path", "k", "axes", "mode",
                            "include_filtered"} -> the answer of docs/query.md (400 + {"error"} on bad input)
    GET  /skills/<id>       the full skill record
    POST /reload            re-read the index snapshot now (it is also re-read when `CURRENT` changes)
    GET  /tools             the agent tools (retrieval/agent_tools.py) and their arguments
    POST /tools/<name>      body: the tool's arguments -> its answer (the CLI's --json; 400/404/503 + {"error"});
                            needs the token (X-Skills-Token), as /reload and /shutdown do
    POST /shutdown          stop the server

On start it writes ``<store>/serve.json`` ({"host", "port", "pid", "store", "started_at",
"version", "token"}, mode 0600); `skills query` reads it, checks that the pid is alive and that
``/health`` answers for the same store, and only then sends its query there (else it answers
in-process). The file is removed on shutdown. The server binds 127.0.0.1 only.

Hostile clients (docs/security.md): a request must name the server itself in Host (127.0.0.1,
localhost or ::1 with its port: DNS rebinding), carry no foreign Origin, and POST JSON
(Content-Type application/json: a cross-site form or text/plain POST is refused); /reload and
/shutdown also need the token from serve.json (X-Skills-Token). Connections are served by a
fixed pool of worker threads (a connection beyond it gets 503 at once), each idle connection
is dropped after CONNECTION_TIMEOUT_S, bodies over MAX_BODY get 413 and query code over
MAX_CODE gets 400 before any matching, so one request cannot hold a worker for long.
"""
from __future__ import annotations

import gc
import hmac
import json
import os
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, Optional

SERVE_FILE = "serve.json"
API_VERSION = 1
MAX_BODY = 1 << 20
DRAIN_BODY = 8 << 20  # a body up to this size is read and dropped before the 413; a larger one is cut off
MAX_CODE = 128 << 10  # the largest corpus kernel is under 20 KB; matching time grows with the code
MAX_K = 100
WORKERS = int(os.environ.get("SKILLS_SERVE_WORKERS", "8"))
CONNECTION_TIMEOUT_S = float(os.environ.get("SKILLS_SERVE_CONN_TIMEOUT", "10"))
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


class ServerState:
    def __init__(self, root: Path):
        self.root = root
        self.lock = threading.Lock()
        self.started = time.time()
        self.queries = 0
        self.searcher = None
        self.current = None
        self.error: Optional[dict] = None
        self.stale: tuple[float, Optional[str]] = (0.0, None)
        self.since_freeze = 0
        self.token = secrets.token_urlsafe(24)

    def settle_heap(self, every: int = 0) -> None:
        """Move what is alive now out of the cyclic collector's sight (gc.freeze), after collecting the
        young generations. The index (tens of thousands of objects) otherwise makes every full
        collection a ~25 ms pause inside some query. ``every``: only on every n-th call (after queries,
        once the answer is sent, so the pause is outside anyone's latency)."""
        self.since_freeze += 1
        if every and self.since_freeze < every:
            return
        self.since_freeze = 0
        gc.collect(1)
        gc.freeze()

    def warm(self) -> None:
        """Load the index and both encoders and make the transposed text matrix now, not in the first
        query. Without an index it does nothing: queries get the error, a later index is picked up."""
        try:
            s = self.searcher_now()
            s.index.similarity_rows("t", s.embed_texts(["__global__ void warm(float* x) { x[0] = 1.0f; }"]))
            s._cache = type(s._cache)(s._cache.n)  # the warm-up text is not a real query
            s.stats = {"text_cache_hits": 0, "text_cache_misses": 0}
            s.index.gnn()
        except Exception:
            return  # no usable index yet: /health and the tools say so
        self.settle_heap()

    def _current_token(self) -> Optional[str]:
        from retrieval.snapshot import snapshot_root

        cur = snapshot_root(self.root) / "CURRENT"
        try:
            return cur.read_text().strip()
        except OSError:
            return None

    def searcher_now(self):
        """The searcher for the live snapshot (reloaded when it changed). Raises QueryError."""
        from retrieval.skill_search import Searcher, SkillIndex

        tok = self._current_token()
        with self.lock:
            if self.searcher is None or tok != self.current:
                old = self.searcher
                idx = SkillIndex.open(self.root)
                emb = old._embedder if old is not None else None  # the encoder outlives index builds
                self.searcher = Searcher(idx, embedder=emb)
                self.current = tok
                if old is not None:  # the old index may hold reference cycles: let a full collection see it
                    del old
                    gc.unfreeze()
                    gc.collect()
                gc.freeze()
            return self.searcher

    def stale_warning(self, searcher) -> Optional[str]:
        now = time.monotonic()
        if now - self.stale[0] < 5.0:
            return self.stale[1]
        from retrieval.skill_search import stale_warning

        w = stale_warning(searcher.index)
        self.stale = (now, w)
        return w


class PooledHTTPServer(HTTPServer):
    """HTTPServer with a fixed pool of handler threads: a connection that finds every worker busy
    gets a 503 right away instead of a thread of its own (300 idle sockets, 300 threads)."""

    daemon_threads = True

    def __init__(self, addr, handler, workers: int = WORKERS):
        super().__init__(addr, handler)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="serve")
        self.slots = threading.BoundedSemaphore(workers)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            try:
                body = b'{"error": {"kind": "busy", "message": "every worker is busy; retry"}}'
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                b"Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
                                str(len(body)).encode() + b"\r\n\r\n" + body)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        self.pool.submit(self._work, request, client_address)

    def _work(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - a broken connection must not take the worker down
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self.slots.release()

    def handle_error(self, request, client_address):  # quiet: timeouts and resets of hostile clients
        if os.environ.get("SKILLS_SERVE_LOG"):
            super().handle_error(request, client_address)

    def server_close(self):
        super().server_close()
        self.pool.shutdown(wait=False, cancel_futures=True)


def _int_field(req: dict, name: str, default: int, low: int, high: int) -> int:
    from retrieval.skill_search import QueryError

    value = req.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise QueryError("bad_input", f"{name} must be an integer from {low} to {high}, got {value!r}")
    return value


def _handler(state: ServerState, server_ref: dict):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = CONNECTION_TIMEOUT_S  # an idle or slow connection lets its worker go
        # headers and body go out as separate writes: without TCP_NODELAY the body can wait for the
        # client's delayed ACK (tens of ms)
        disable_nagle_algorithm = True
        server_version = "kernel-skills/" + str(API_VERSION)

        def log_message(self, fmt, *args):  # quiet: one line per request only with SKILLS_SERVE_LOG=1
            if os.environ.get("SKILLS_SERVE_LOG"):
                super().log_message(fmt, *args)

        def _send(self, code: int, payload: Any) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, code: int, kind: str, message: str) -> None:
            self.close_connection = True
            self._send(code, {"error": {"kind": kind, "message": message}})

        def _allowed(self, post: bool, privileged: bool = False) -> bool:
            """Host and Origin name this server (no DNS rebinding, no cross-site requests); POSTs are
            JSON; state-changing routes carry the token. Answers the refusal itself."""
            port = server_ref["server"].server_address[1]
            host = (self.headers.get("Host") or "").strip().lower()
            if host not in {f"{n}:{port}" for n in LOOPBACK_NAMES} and host not in LOOPBACK_NAMES:
                self._error(403, "forbidden", f"Host {host!r} is not this server")
                return False
            origin = self.headers.get("Origin")
            if origin is not None and origin.lower() not in {f"http://{n}:{port}" for n in LOOPBACK_NAMES}:
                self._error(403, "forbidden", f"cross-origin request from {origin!r} refused")
                return False
            if post and (self.headers.get("Content-Type") or "").split(";")[0].strip().lower() != "application/json":
                self._error(415, "bad_input", "POST bodies must be Content-Type: application/json")
                return False
            if privileged and not hmac.compare_digest((self.headers.get("X-Skills-Token") or "").encode(),
                                                      state.token.encode()):
                self._error(403, "forbidden", f"{self.path} needs the token from {SERVE_FILE} (X-Skills-Token)")
                return False
            return True

        def _body(self) -> Optional[dict]:
            try:
                n = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                n = -1
            if n < 0:
                self._error(400, "bad_input", "bad Content-Length")
                return None
            if n > MAX_BODY:
                if n <= DRAIN_BODY:  # read and drop it, so the client is not cut off mid-send and sees the 413
                    left = n
                    while left > 0:
                        chunk = self.rfile.read(min(left, 1 << 16))
                        if not chunk:
                            break
                        left -= len(chunk)
                self._error(413, "bad_input", f"request body over {MAX_BODY} bytes")
                self.close_connection = True
                return None
            raw = self.rfile.read(n) if n else b"{}"
            try:
                data = json.loads(raw or b"{}")
                if not isinstance(data, dict):
                    raise ValueError("not an object")
                return data
            except ValueError as exc:
                self._send(400, {"error": {"kind": "bad_input", "message": f"request body is not a JSON object: {exc}"}})
                return None

        def do_GET(self):
            from retrieval.skill_search import QueryError

            if not self._allowed(post=False):
                return
            if self.path == "/health":
                info: dict[str, Any] = {"ok": True, "pid": os.getpid(), "store": str(state.root.resolve()),
                                        "api": API_VERSION, "uptime_s": round(time.time() - state.started, 1),
                                        "queries": state.queries}
                try:
                    s = state.searcher_now()
                    info["index"] = s.index.info()
                    info["cache"] = dict(s.stats)
                    info["text_encoder"] = s.encoder_info()
                except QueryError as exc:
                    info["index"] = None
                    info["index_error"] = exc.to_dict()["error"]
                return self._send(200, info)
            if self.path.startswith("/skills/"):
                ident = self.path[len("/skills/"):]
                try:
                    s = state.searcher_now()
                except QueryError as exc:
                    return self._send(503, exc.to_dict())
                i = s.index.find(ident)
                if i is not None:
                    return self._send(200, s.index.record(i))
                return self._send(404, {"error": {"kind": "not_found", "message": f"no skill {ident!r}"}})
            if self.path == "/tools":
                return self._send(200, {"tools": tool_signatures()})
            self._send(404, {"error": {"kind": "not_found", "message": f"no route GET {self.path}"}})

        def _tool(self, name: str):
            """One agent tool call; the same logic and JSON as the MCP tools (retrieval/agent_tools.py)."""
            from retrieval import agent_tools as tools
            from retrieval.skill_search import QueryError

            if name not in tools.TOOL_NAMES:
                return self._send(404, {"error": {"kind": "not_found", "message": f"no tool {name!r} "
                                                  f"({', '.join(tools.TOOL_NAMES)})"}})
            req = self._body()
            if req is None:
                return
            try:
                for key in ("source", "code", "text"):
                    if isinstance(req.get(key), str) and len(req[key]) > MAX_CODE:
                        raise tools.ToolError("bad_input", f"{key} is {len(req[key]) >> 10} KB, over the "
                                              f"{MAX_CODE >> 10} KB limit")
                if name in ("query_skills", "get_skill"):
                    s = state.searcher_now()
                    if name == "get_skill":
                        out = tools.get_skill(s, str(req.get("skill_id", "")))
                    else:
                        out = tools.query_skills(s, **_args(req, tools.query_skills, skip=("searcher",)))
                        w = state.stale_warning(s)
                        out["warnings"] = [w] if w else []
                        out["served_by"] = {"kind": "server", "pid": os.getpid()}
                        state.queries += 1
                else:
                    fn = getattr(tools, name)
                    out = fn(**_args(req, fn, skip=("store", "progress")), store=state.root)
                return self._send(200, out)
            except tools.ToolError as exc:
                return self._send({"bad_input": 400, "parse_error": 400, "not_found": 404}.get(exc.kind, 503),
                                  exc.to_dict())
            except QueryError as exc:
                return self._send(400 if exc.kind in ("bad_input", "parse_error") else 503, exc.to_dict())
            except Exception as exc:  # a bug must not kill the server
                return self._send(500, {"error": {"kind": "internal", "message": f"{exc.__class__.__name__}: {exc}"}})

        def do_POST(self):
            from retrieval.skill_search import QueryError

            # the tools build and run code (sandboxed): like /reload and /shutdown they need the token
            if not self._allowed(post=True, privileged=self.path in ("/reload", "/shutdown")
                                 or self.path.startswith("/tools/")):
                return
            if self.path == "/query":
                req = self._body()
                if req is None:
                    return
                try:
                    code, text = req.get("code"), req.get("text")
                    for name, value in (("code", code), ("text", text)):
                        if value is not None and not isinstance(value, str):
                            raise QueryError("bad_input", f"{name} must be a string")
                    if code is not None and len(code) > MAX_CODE:
                        raise QueryError("bad_input", f"code is {len(code) >> 10} KB, over the {MAX_CODE >> 10} KB limit")
                    if text is not None and len(text) > MAX_CODE:
                        raise QueryError("bad_input", f"text is over the {MAX_CODE >> 10} KB limit")
                    k = _int_field(req, "k", 5, 1, MAX_K)
                    axes = req.get("axes") or None
                    if axes is not None and not (isinstance(axes, dict) and all(
                            isinstance(v, int) and not isinstance(v, bool) for v in axes.values())):
                        raise QueryError("bad_input", "axes must be an object of integers, e.g. {\"N\": 1000}")
                    s = state.searcher_now()
                    op_type = req.get("op_type")
                    if op_type is not None and not isinstance(op_type, str):
                        raise QueryError("bad_input", "op_type must be a string")
                    ans = s.query(code=code, text=text, path=str(req.get("path") or "")[:4096],
                                  k=k, axes=axes, mode=str(req.get("mode") or "fused"),
                                  include_filtered=bool(req.get("include_filtered", True)),
                                  rank=str(req.get("rank") or "value"), plan=bool(req.get("plan", False)),
                                  op_type=op_type or None)
                    w = state.stale_warning(s)
                    ans["warnings"] = [w] if w else []
                    ans["served_by"] = {"kind": "server", "pid": os.getpid()}
                    state.queries += 1
                    self._send(200, ans)
                    state.settle_heap(every=16)
                    return
                except QueryError as exc:
                    return self._send(400 if exc.kind in ("bad_input", "parse_error") else 503, exc.to_dict())
                except Exception as exc:  # a bug must not kill the server; the client falls back
                    return self._send(500, {"error": {"kind": "internal", "message": f"{exc.__class__.__name__}: {exc}"}})
            if self.path.startswith("/tools/"):
                return self._tool(self.path[len("/tools/"):])
            if self.path == "/reload":
                with state.lock:
                    state.searcher, state.current = None, None
                try:
                    s = state.searcher_now()
                    return self._send(200, {"ok": True, "index": s.index.info()})
                except QueryError as exc:
                    return self._send(503, exc.to_dict())
            if self.path == "/shutdown":
                self._send(200, {"ok": True})
                threading.Thread(target=server_ref["server"].shutdown, daemon=True).start()
                return
            self._send(404, {"error": {"kind": "not_found", "message": f"no route POST {self.path}"}})

    return Handler


def _args(req: dict, fn, skip: tuple[str, ...] = ()) -> dict:
    """The request's fields that are parameters of ``fn``; an unknown field is bad input."""
    import inspect

    from retrieval.agent_tools import ToolError

    sig = inspect.signature(fn).parameters
    params = set(sig) - set(skip)
    missing = sorted(p for p in params if sig[p].default is inspect.Parameter.empty and p not in req)
    if missing:
        raise ToolError("bad_input", f"missing argument(s) {', '.join(missing)} for {fn.__name__}")
    unknown = sorted(set(req) - params)
    if unknown:
        raise ToolError("bad_input", f"unknown argument(s) {', '.join(unknown)} for {fn.__name__} ({', '.join(sorted(params))})")
    return dict(req)


def tool_signatures() -> list[dict]:
    import inspect

    from retrieval import agent_tools as tools

    out = []
    for name in tools.TOOL_NAMES:
        fn = getattr(tools, name)
        params = [p for p in inspect.signature(fn).parameters if p not in ("searcher", "store", "progress")]
        out.append({"name": name, "args": params, "doc": (fn.__doc__ or "").strip().splitlines()[0]})
    return out


def serve(root: os.PathLike | str, host: str = "127.0.0.1", port: int = 0, warm: bool = True,
          ready=None) -> None:
    """Run the server until /shutdown, SIGTERM or Ctrl-C. ``ready(info)`` is called once listening."""
    import signal

    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError("the server binds loopback only (127.0.0.1)")
    root = Path(root)
    state = ServerState(root)
    if warm:
        state.warm()
    ref: dict = {}
    httpd = PooledHTTPServer((host, port), _handler(state, ref))
    ref["server"] = httpd
    h, p = httpd.server_address[:2]
    info = {"host": h, "port": p, "pid": os.getpid(), "store": str(root.resolve()), "started_at": time.time(),
            "api": API_VERSION, "token": state.token}
    sf = root / SERVE_FILE
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (SERVE_FILE + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the token is for this user only
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(info))
    os.replace(tmp, sf)

    def _term(*_):
        threading.Thread(target=httpd.shutdown, daemon=True).start()
    try:
        signal.signal(signal.SIGTERM, _term)
    except ValueError:  # not the main thread (tests)
        pass
    if ready:
        ready(info)
    try:
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
        try:
            if json.loads(sf.read_text()).get("pid") == os.getpid():
                sf.unlink()
        except (OSError, ValueError):
            pass


# --------------------------------------------------------------------------- client side
def find_server(root: os.PathLike | str, timeout: float = 0.3) -> Optional[dict]:
    """serve.json of a live server for this store, or None (stale files are ignored)."""
    sf = Path(root) / SERVE_FILE
    try:
        info = json.loads(sf.read_text())
        pid = int(info["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    try:
        health = request(info, "GET", "/health", timeout=timeout)
    except OSError:
        return None
    if not health.get("ok") or health.get("pid") != pid or health.get("store") != str(Path(root).resolve()):
        return None
    return info


def request(info: dict, method: str, path: str, payload: Optional[dict] = None, timeout: float = 60.0) -> dict:
    """One HTTP request to a server; returns the decoded JSON (error bodies included)."""
    import http.client

    conn = http.client.HTTPConnection(info["host"], int(info["port"]), timeout=timeout)
    try:
        body = json.dumps(payload).encode() if payload is not None else None
        headers = {"Content-Type": "application/json"} if body is not None or method == "POST" else {}
        if info.get("token"):
            headers["X-Skills-Token"] = str(info["token"])
        conn.request(method, path, body=body if body is not None else (b"{}" if method == "POST" else None),
                     headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        out = json.loads(data or b"{}")
        if isinstance(out, dict):
            out["_status"] = resp.status
        return out
    finally:
        conn.close()
