"""`skills serve --mcp`: the skill queries as MCP tools for coding agents, over stdio (official `mcp` SDK).

Tools (answers are the JSON of docs/query.md; a bad query is a tool error whose text is the
``{"error": {...}}`` object of the same document):

    query_skills(code | text, path="", k=5, axes={"N": 1000}, mode="fused", include_filtered=True)
    get_skill(skill_id)          the full record (an id prefix or a skill key also works)
    index_info()                 what is indexed (skills, documents, build, models)

One resident searcher, the HTTP server's own state (retrieval/server.py ``_State``): the index
snapshot is re-read when the store's ``CURRENT`` changes, and the encoders outlive index builds.
stdout carries the protocol, so nothing here prints.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

SERVER_NAME = "kernel-skills"
INSTRUCTIONS = ("Optimization skills mined from expert CUDA kernels. Call query_skills with the code of a kernel "
                "(or a text description) to get the skills that apply to it: where (lines), why, their "
                "preconditions checked against the given axes, measured effects, risks and a before/after exemplar.")


def build_server(root: Path, warm: bool = True):
    """The MCPServer answering for the store at ``root`` (not started)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from retrieval.server import _State
    from retrieval.skill_search import QueryError

    state = _State(Path(root))
    if warm:
        state.warm()  # as `skills serve` does; without an index the tools say how to build one

    def searcher():
        try:
            return state.searcher_now()
        except QueryError as exc:
            raise ToolError(json.dumps(exc.to_dict())) from None

    mcp = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING")

    @mcp.tool()
    def query_skills(code: Optional[str] = None, text: Optional[str] = None, path: str = "", k: int = 5,
                     axes: Optional[dict[str, int]] = None, mode: str = "fused",
                     include_filtered: bool = True) -> dict[str, Any]:
        """Skills that apply to a CUDA kernel (give its source as `code`, and its file name as `path`)
        or to a text description (`text`). `axes`: problem sizes, e.g. {"N": 1000}, to check
        preconditions. Returns hits with the matched lines, why, preconditions, effects, risks and
        exemplar (docs/query.md)."""
        s = searcher()
        try:
            ans = s.query(code=code, text=text, path=path, k=k, axes=axes, mode=mode,
                          include_filtered=include_filtered)
        except QueryError as exc:
            raise ToolError(json.dumps(exc.to_dict())) from None
        w = state.stale_warning(s)
        ans["warnings"] = [w] if w else []
        ans["served_by"] = {"kind": "mcp"}
        state.queries += 1
        return ans

    @mcp.tool()
    def get_skill(skill_id: str) -> dict[str, Any]:
        """The full record of one skill: its id (or an id prefix, or its key) from a query_skills hit."""
        s = searcher()
        i = s.index.find(skill_id)
        if i is not None:
            return s.index.record(i)
        raise ToolError(json.dumps({"error": {"kind": "not_found", "message": f"no skill {skill_id!r}"}}))

    @mcp.tool()
    def index_info() -> dict[str, Any]:
        """What the store's skill index holds: number of skills and documents, build, models."""
        return searcher().index.info()

    return mcp


def serve_mcp(root: Path) -> None:
    """Run the MCP server on stdin/stdout until the client closes it."""
    build_server(root).run("stdio")
