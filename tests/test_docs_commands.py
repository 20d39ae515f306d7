"""The README's and docs' commands that a newcomer runs first: they run as written."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _readme_line(start: str) -> str:
    line = next(ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith(start))
    return line.split("   # ", 1)[0].strip()


def test_readme_sql_example_runs_without_a_duckdb_cli(tmp_path):
    """`duckdb` (the CLI) is not installed by setup; the README's SQL line uses the Python package."""
    import skills.kernel_store  # noqa: F401  (registers the kernel tables)
    from skills.store import Store

    st = Store(tmp_path / ".skills")
    st.query("SELECT 1")  # creates the store with its schema
    st.close()
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    cmd = _readme_line(".venv/bin/python -c \"import duckdb")
    r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "operator" in r.stdout and "rejected" in r.stdout


def test_report_default_goes_into_the_store_not_the_working_folder(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from cli import app

    import skills.kernel_store  # noqa: F401
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
    r = subprocess.run(["bash", "scripts/test.sh", "tests/test_skill_retrieval_units.py", "-k",
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
