"""`skills serve --mcp`: the agent tools over stdio (official `mcp` SDK) for coding agents.

Tools (retrieval/agent_tools.py holds their logic, shared with the HTTP server; docs/agents.md):

    gate_kernel(problem, source | kernel, executor, workloads, seeds, stages, sanitize)
    profile_kernel(problem, source | kernel, workloads)        GPU only (a ``no_gpu`` error elsewhere)
    wrap_kernel(source | kernel_file, out, name, kernel, kernelbench, executor, gate)
    query_skills(code | text, path="", k=5, axes={"N": 1000}, mode="fused", include_filtered=True)
    get_skill(skill_id)          the full record (an id prefix or a skill key also works)
    lineage(problem)             a mined lineage
    index_info()                 what is indexed (skills, documents, build, models)

Answers are the JSON of the CLI's ``--json``; a bad call is a tool error whose text is the
``{"error": {...}}`` object. Long calls (gate, profile, wrap) run in a worker thread and send MCP
progress notifications (elapsed seconds and the phase) to a client that asked for them: each
phase as it starts, and the current one again every second while it runs. One resident searcher (the HTTP server's ``ServerState``) answers queries. stdout
carries the protocol, so nothing here prints.
"""
import json
import threading
import time
from pathlib import Path
from typing import Any, Optional

SERVER_NAME = "kernel-skills"
INSTRUCTIONS = (
    "Tools for optimizing CUDA kernels. gate_kernel is the correctness oracle: run it after every change "
    "(on extra workloads too: odd sizes, tiny sizes) - it builds and runs the kernel in a sandbox against the "
    "problem's reference and returns the verdict, the first failing case and element, race/out-of-bounds "
    "findings and per-arch registers/spills. query_skills gives the optimizations mined from expert kernels "
    "that apply to a kernel (lines, preconditions checked against sizes, measured effects, risks, exemplar). "
    "profile_kernel times a kernel on the GPU (GPU hosts only). wrap_kernel turns an outside .cu file into a "
    "problem folder. lineage shows how an expert kernel was reduced step by step.")


def _tool_error(exc) -> Exception:
    from mcp.server.mcpserver.exceptions import ToolError

    return ToolError(json.dumps(exc.to_dict()))


async def _with_progress(ctx, fn, **kw) -> dict[str, Any]:
    """Run a blocking tool in a thread; a progress notification (elapsed s, phase) per phase and per second."""
    import anyio

    from retrieval.agent_tools import ToolError as AgentToolError

    phases = ["starting"]  # every phase the tool announced, in order: none is lost to the 1 s tick
    t0 = time.monotonic()
    done = threading.Event()
    box: dict[str, Any] = {}

    def work():
        try:
            box["out"] = fn(progress=phases.append, **kw)
        except BaseException as exc:  # handed to the event loop below
            box["exc"] = exc
        finally:
            done.set()

    async def report(msg: str) -> None:
        if ctx is not None:
            try:
                await ctx.report_progress(round(time.monotonic() - t0, 1), None, msg)
            except Exception:  # a client gone away must not kill the call
                pass

    threading.Thread(target=work, daemon=True, name=f"tool-{fn.__name__}").start()
    sent, last_tick = 0, -1.0
    while True:
        finished = done.is_set()  # read before draining, so phases appended before the end are all sent
        while sent < len(phases):  # each new phase once, as it happens
            await report(phases[sent])
            sent += 1
            last_tick = time.monotonic()
        if finished:
            break
        if time.monotonic() - last_tick >= 1.0:  # a heartbeat with the current phase while a phase runs long
            await report(phases[-1])
            last_tick = time.monotonic()
        await anyio.sleep(0.1)
    if "exc" in box:
        if isinstance(box["exc"], AgentToolError):
            raise _tool_error(box["exc"]) from None
        raise box["exc"]
    return box["out"]


def build_server(root: Path, warm: bool = True, tools_only: Optional[list[str]] = None):
    """The MCPServer answering for the store at ``root`` (not started); ``tools_only``: expose just these
    tools (an A/B arm with the gate but not the skills, eval/bench_agent.py)."""
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from retrieval import agent_tools as tools
    from retrieval.server import ServerState
    from retrieval.skill_search import QueryError

    root = Path(root)
    state = ServerState(root)
    if warm:
        state.warm()  # as `skills serve` does; without an index the tools say how to build one

    def searcher():
        try:
            return state.searcher_now()
        except QueryError as exc:
            raise ToolError(json.dumps(exc.to_dict())) from None

    mcp = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING")

    @mcp.tool()
    async def gate_kernel(problem: str, source: Optional[str] = None, kernel: Optional[str] = None,
                          executor: str = "auto", workloads: Optional[list[dict[str, Any]]] = None, seeds: int = 3,
                          stages: Optional[list[str]] = None, sanitize: bool = False,
                          ctx: Context = None) -> dict[str, Any]:
        """Check a kernel against the problem's reference: static (parse, nvcc/ptxas for sm_80/sm_90: registers,
        spills, SASS), correctness (every workload x seeds, in a sandbox; on the CPU executor with the race and
        out-of-bounds checker), profile (GPU only). `problem`: the problem folder; `source`: the kernel's text
        (or `kernel`: a file path; `kernel` also names the file when `source` is given, default kernel.cu);
        `executor`: auto | cpu | cuda; `workloads`: extra sizes to check, e.g. [{"axes": {"N": 1001}}];
        `stages`: e.g. ["correctness"]. Returns `skills gate --json` with a `digest` (verdict, failing case,
        first bad index, race/OOB findings, static figures)."""
        return await _with_progress(ctx, tools.gate_kernel, problem=problem, source=source, kernel=kernel,
                                    executor=executor, workloads=workloads, seeds=seeds, stages=stages,
                                    sanitize=sanitize, store=root)

    @mcp.tool()
    async def profile_kernel(problem: str, source: Optional[str] = None, kernel: Optional[str] = None,
                             workloads: Optional[list[dict[str, Any]]] = None,
                             ctx: Context = None) -> dict[str, Any]:
        """Time a kernel on the GPU (CUDA events, L2 flushed, median of 30 per workload) after checking it is
        correct. GPU hosts only: elsewhere the answer is an error of kind `no_gpu`. Same arguments and answer
        as gate_kernel (digest.median_ms per workload)."""
        return await _with_progress(ctx, tools.profile_kernel, problem=problem, source=source, kernel=kernel,
                                    workloads=workloads, store=root)

    @mcp.tool()
    async def wrap_kernel(source: Optional[str] = None, kernel_file: Optional[str] = None, out: Optional[str] = None,
                          name: Optional[str] = None, kernel: Optional[str] = None,
                          kernelbench: Optional[str] = None, executor: str = "auto", gate: bool = True,
                          force: bool = False, ctx: Context = None) -> dict[str, Any]:
        """Turn a .cu file (`kernel_file`, or its text as `source` with a `name`) into a problem folder
        (`out`; default <store>/wrapped/<name>): definition, workloads, reference; `kernelbench`: a
        KernelBench problem.py for the reference. Gates the folder and lists what is still missing."""
        return await _with_progress(ctx, tools.wrap_kernel, source=source, kernel_file=kernel_file, out=out,
                                    name=name, kernel=kernel, kernelbench=kernelbench, executor=executor,
                                    gate=gate, force=force, store=root)

    @mcp.tool()
    def query_skills(code: Optional[str] = None, text: Optional[str] = None, path: str = "", k: int = 5,
                     axes: Optional[dict[str, int]] = None, mode: str = "fused",
                     include_filtered: bool = True, rank: str = "value", plan: bool = False) -> dict[str, Any]:
        """Skills that apply to a CUDA kernel (give its source as `code`, and its file name as `path`)
        or to a text description (`text`). `axes`: problem sizes, e.g. {"N": 1000}, to check
        preconditions. Returns hits with the matched lines, why, preconditions, effects, risks and
        exemplar (docs/query.md). `rank`: "value" (what each skill is expected to buy on this kernel,
        qualifiers grouped in one "also" entry) or "similarity"; `plan`: add a short applicable plan."""
        s = searcher()
        try:
            ans = tools.query_skills(s, code=code, text=text, path=path, k=k, axes=axes, mode=mode,
                                     include_filtered=include_filtered, rank=rank, plan=plan)
        except tools.ToolError as exc:
            raise _tool_error(exc) from None
        w = state.stale_warning(s)
        ans["warnings"] = [w] if w else []
        ans["served_by"] = {"kind": "mcp"}
        state.queries += 1
        return ans

    @mcp.tool()
    def get_skill(skill_id: str) -> dict[str, Any]:
        """The full record of one skill: its id (or an id prefix, or its key) from a query_skills hit."""
        try:
            return tools.get_skill(searcher(), skill_id)
        except tools.ToolError as exc:
            raise _tool_error(exc) from None

    @mcp.tool()
    def lineage(problem: str) -> dict[str, Any]:
        """How an expert kernel was walked back to a naive one: each accepted step (diff, measured or static
        effect, skill id), the rejected candidates and why, and why the walk stopped."""
        try:
            return tools.lineage(problem, store=root)
        except tools.ToolError as exc:
            raise _tool_error(exc) from None

    @mcp.tool()
    def index_info() -> dict[str, Any]:
        """What the store's skill index holds: number of skills and documents, build, models."""
        return searcher().index.info()

    if tools_only:
        every = {t.name for t in mcp._tool_manager.list_tools()}
        unknown = set(tools_only) - every
        if unknown:
            raise ValueError(f"--tools: no tool {', '.join(sorted(unknown))} ({', '.join(sorted(every))})")
        for name in every - set(tools_only):
            mcp.remove_tool(name)
    return mcp


def serve_mcp(root: Path, tools_only: Optional[list[str]] = None) -> None:
    """Run the MCP server on stdin/stdout until the client closes it."""
    build_server(root, tools_only=tools_only).run("stdio")
