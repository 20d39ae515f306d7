"""`skills query` answered by a running `skills serve`, with nothing heavy imported.

The console entry (skills_entry.py) calls ``fast_query(argv)`` before it loads the CLI framework:
with a live server for the store, a query costs Python's start, two loopback round trips (/health,
/query) and the printing (docs/query.md, "The server"). Anything it does not handle itself (no server, an option it
does not know, --help, a malformed value, a server error) returns None, and the full CLI answers
as always, with its own error messages.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

# option -> (request field, takes a value)
_OPTIONS = {"--code": ("code", True), "--text": ("text", True), "--k": ("k", True), "--axes": ("axes", True),
            "--mode": ("mode", True), "--store": ("store", True), "--json": ("json", False),
            "--rank": ("rank", True), "--plan": ("plan", False), "--op-type": ("op_type", True)}


def parse_axes(text: Optional[str], option: str = "--axes") -> Optional[dict]:
    """"M=4096,N=1000" -> {"M": 4096, "N": 1000}; ValueError naming the option and the bad part."""
    if not text:
        return None
    out = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if not name.strip():
            raise ValueError(f"{option}: expected NAME=INT[,NAME=INT...], got {part!r}")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            raise ValueError(f"{option}: expected NAME=INT[,NAME=INT...], got {part!r}") from None
    return out


def build_request(code: Optional[str], text: Optional[str], path: str, k: int, axes: Optional[dict],
                  mode: str, rank: str = "value", plan: bool = False, op_type: Optional[str] = None) -> dict:
    """The JSON body of POST /query (docs/query.md)."""
    req = {"code": code, "text": text, "path": path, "k": k, "axes": axes, "mode": mode, "include_filtered": True,
           "rank": rank, "plan": plan or None, "op_type": op_type}
    return {key: v for key, v in req.items() if v is not None}


def ask_server(root: Path, req: dict) -> Optional[dict]:
    """The live server's answer for this store, or None when there is none or it failed (HTTP 500,
    connection lost): the caller answers in its own process then."""
    if not (Path(root) / "serve.json").is_file():
        return None
    from retrieval.server import find_server, request

    info = find_server(root)
    if info is None:
        return None
    try:
        ans = request(info, "POST", "/query", req)
    except OSError:
        return None
    if ans.get("_status") == 500:
        return None
    ans.pop("_status", None)
    return ans


def _parse(argv: list[str]) -> Optional[dict]:
    opts: dict = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name not in _OPTIONS:
            return None
        field, takes = _OPTIONS[name]
        if not takes:
            if eq:
                return None
            opts[field] = True
        elif eq:
            opts[field] = value
        elif i + 1 < len(argv):
            i += 1
            opts[field] = argv[i]
        else:
            return None
        i += 1
    return opts


def fast_query(argv: list[str]) -> Optional[int]:
    """Handle `skills query ARGV` through a live server: print the answer and return the exit code
    (0, or 2 for an error the server reports); None when the full CLI must answer instead."""
    opts = _parse(argv)
    if opts is None or ("code" in opts) == ("text" in opts):
        return None
    try:
        k = int(opts.get("k", 5))
        axes = parse_axes(opts.get("axes"))
    except ValueError:
        return None
    if not 1 <= k <= 100:
        return None
    code = None
    if "code" in opts:
        try:
            code = Path(opts["code"]).read_text()
        except (OSError, UnicodeDecodeError):
            return None
    root = Path(opts.get("store") or os.environ.get("SKILLS_STORE") or ".skills")
    ans = ask_server(root, build_request(code, opts.get("text"), opts.get("code", ""), k, axes,
                                         opts.get("mode", "fused"), opts.get("rank", "value"),
                                         bool(opts.get("plan")), opts.get("op_type")))
    if ans is None:
        return None
    as_json = opts.get("json", False)
    if "error" in ans:
        if as_json:
            print(json.dumps({"error": ans["error"]}, indent=2))
        print(f"error: {ans['error'].get('message', 'query failed')}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(ans, indent=2))
    else:
        from retrieval.skill_search import render_text

        print(render_text(ans))
    return 0
