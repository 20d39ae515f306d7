"""The README's and docs' commands that a newcomer runs first: they run as written."""
import os
import re
import subprocess
from pathlib import Path

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
    r = subprocess.run(["bash", "scripts/test.sh", "tests/retrieval/test_skill_retrieval_units.py", "-k",
                        "bm25_save_load_round_trip"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    last = r.stdout.strip().splitlines()[-1]
    assert re.match(r"1 passed, \d+ deselected in ", last), last  # only the selection, and the closing line
