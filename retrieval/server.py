"""`skills serve`: a resident query process on loopback that keeps the index and encoders warm.

HTTP/1.1, JSON in and out (docs/query.md documents the API):

    GET  /health            {"ok": true, "pid", "store", "uptime_s", "queries", "index": {...}}
    POST /query             body {"code": "..." | "text": "...", "path", "k", "axes", "mode",
                            "include_filtered"} -> the answer of docs/query.md (400 + {"error"} on bad input)
    GET  /skills/<id>       the full skill record
    POST /reload            re-read the index snapshot now (it is also re-read when `CURRENT` changes)
    GET  /tools             the agent tools (retrieval/agent_tools.py) and their arguments
    POST /tools/<name>      body: the tool's arguments -> its answer (the CLI's --json; 400/404/503 + {"error"})
    POST /shutdown          stop the server

On start it writes ``<store>/serve.json`` ({"host", "port", "pid", "store", "started_at",
"version"}); `skills query` reads it, checks that the pid is alive and that ``/health``
answers for the same store, and only then sends its query there (else it answers in-process).
The file is removed on shutdown. The server binds 127.0.0.1 only.
"""
from __future__ import annotations

import gc
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

SERVE_FILE = "serve.json"
API_VERSION = 1
MAX_BODY = 8 << 20


class _State:
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
        from retrieval.skill_index import snapshot_root

        cur = snapshot_root(self.root) / "CURRENT"
        try:
            return cur.read_text().strip()
        except OSError:
            return None

    def searcher_now(self):
        """The searcher for the live snapshot (reloaded when it changed). Raises QueryError."""
        from retrieval.skill_search import QueryError, Searcher, SkillIndex

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


def _handler(state: _State, server_ref: dict):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
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

        def _body(self) -> Optional[dict]:
            n = int(self.headers.get("Content-Length") or 0)
            if n > MAX_BODY:
                self._send(413, {"error": {"kind": "bad_input", "message": f"request body over {MAX_BODY} bytes"}})
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

            # code runs behind these routes (sandboxed): refuse what a browser page could send to loopback
            if self.headers.get("Origin") or (self.headers.get("Host") or "").split(":")[0] not in \
                    ("127.0.0.1", "localhost", "[::1]", ""):
                return self._send(403, {"error": {"kind": "forbidden", "message": "tool calls only from local "
                                                  "programs (no Origin header, a loopback Host)"}})
            if name not in tools.TOOL_NAMES:
                return self._send(404, {"error": {"kind": "not_found", "message": f"no tool {name!r} "
                                                  f"({', '.join(tools.TOOL_NAMES)})"}})
            req = self._body()
            if req is None:
                return
            try:
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
            except TypeError as exc:
                return self._send(400, {"error": {"kind": "bad_input", "message": str(exc)}})
            except Exception as exc:  # a bug must not kill the server
                return self._send(500, {"error": {"kind": "internal", "message": f"{exc.__class__.__name__}: {exc}"}})

        def do_POST(self):
            from retrieval.skill_search import QueryError

            if self.path == "/query":
                req = self._body()
                if req is None:
                    return
                try:
                    s = state.searcher_now()
                    axes = req.get("axes") or None
                    if axes is not None and not (isinstance(axes, dict) and all(isinstance(v, int) for v in axes.values())):
                        raise QueryError("bad_input", "axes must be an object of integers, e.g. {\"N\": 1000}")
                    ans = s.query(code=req.get("code"), text=req.get("text"), path=str(req.get("path") or ""),
                                  k=int(req.get("k") or 5), axes=axes, mode=str(req.get("mode") or "fused"),
                                  include_filtered=bool(req.get("include_filtered", True)))
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
    """The request's fields that are parameters of ``fn``; an unknown field is bad input (TypeError)."""
    import inspect

    params = set(inspect.signature(fn).parameters) - set(skip)
    unknown = sorted(set(req) - params)
    if unknown:
        raise TypeError(f"unknown argument(s) {', '.join(unknown)} for {fn.__name__} ({', '.join(sorted(params))})")
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
    state = _State(root)
    if warm:
        state.warm()
    ref: dict = {}
    httpd = ThreadingHTTPServer((host, port), _handler(state, ref))
    httpd.daemon_threads = True
    ref["server"] = httpd
    h, p = httpd.server_address[:2]
    info = {"host": h, "port": p, "pid": os.getpid(), "store": str(root.resolve()), "started_at": time.time(),
            "api": API_VERSION}
    sf = root / SERVE_FILE
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (SERVE_FILE + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(info))
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
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        resp = conn.getresponse()
        data = resp.read()
        out = json.loads(data or b"{}")
        if isinstance(out, dict):
            out["_status"] = resp.status
        return out
    finally:
        conn.close()
