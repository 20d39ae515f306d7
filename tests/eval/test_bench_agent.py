"""eval/bench_agent.py with the scripted stand-in agent (tests/fixtures/agent_bench/scripted_agent.py) on
the scale4 case: the bare arm keeps an unguarded float4 edit that passes the visible sizes and fails the
hidden N = 1001; the gate arm checks each edit with gate_kernel over MCP on N = 1001 and reverts it.
The harness must see exactly that, read the agent's reported usage, and write JSON only to --out."""
import json
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "agent_bench"


def test_agent_folder_hides_the_expert(tmp_path):
    from eval.bench_agent import agent_folder, load_problem_set

    case = load_problem_set(only=["scale4"])[0]
    d = agent_folder(case, tmp_path)
    assert sorted(p.name for p in d.iterdir()) == ["definition.json", "naive.cu", "optimized.cu", "solution.toml",
                                                   "workloads.jsonl"]
    assert "1001" not in (d / "workloads.jsonl").read_text()  # the hidden odd size
    sol = (d / "solution.toml").read_text()
    assert 'kernel = "optimized.cu"' in sol and "carriers" not in sol


def test_arms_wire_the_tools(tmp_path):
    """bare: no MCP config; gate: the server restricted to gate/profile; skills: every tool and the cards.
    The command sees the placeholders filled (Claude's JSON config, Codex's -c overrides)."""
    from eval.bench_agent import load_problem_set, run_agent

    case = load_problem_set(only=["scale4"])[0]
    cards = tmp_path / "cards"
    cards.mkdir()
    seen = {}
    for arm in ("bare", "gate", "skills"):
        wd = tmp_path / arm
        r = run_agent("printf '%s\\n' {arm} {case} {mcp_config} {skills_dir} {codex_mcp}", case, arm, wd, 30, None, cards)
        assert r["rc"] == 0 and not r["timed_out"]
        seen[arm] = (wd / "agent.stdout").read_text().split("\n")
        cfg = wd / "mcp.json"
        if arm == "bare":
            assert not cfg.exists() and seen[arm][2:4] == ["", ""]
            continue
        args = json.loads(cfg.read_text())["mcpServers"]["kernel-skills"]["args"]
        assert ("--tools" in args) == (arm == "gate") and str(wd / "store") in args
        assert "-c\nmcp_servers.kernel-skills.command=" in "\n".join(seen[arm])
        assert (seen[arm][3] == str(cards)) == (arm == "skills")
        assert ("query_skills" in (wd / "PROMPT.md").read_text()) == (arm == "skills")


def test_parse_usage_formats(tmp_path):
    from eval.bench_agent import parse_usage

    claude = json.dumps({"type": "result", "num_turns": 7, "total_cost_usd": 0.5,
                         "usage": {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 5}})
    assert parse_usage("noise\n" + claude, tmp_path) == {"input_tokens": 100, "output_tokens": 5, "cost_usd": 0.5,
                                                        "turns": 7, "source": "claude result"}
    codex = "\n".join(json.dumps({"type": "turn.completed", "usage": {"input_tokens": i, "output_tokens": 1}})
                      for i in (3, 4))
    assert parse_usage(codex, tmp_path)["input_tokens"] == 7
    assert parse_usage("no usage here", tmp_path) == {}


def test_primary_time_is_the_largest_workload():
    from eval.bench_agent import primary_ms

    assert primary_ms({"median_ms": {"w0[M=64,N=128]": 1.0, "w4[M=32768,N=2048]": 5.0, "w6[M=5,N=1]": 0.1}}) == 5.0
    assert primary_ms({"median_ms": None}) is None


def test_ab_run_with_the_scripted_agent(tmp_path, capsys):
    from eval.bench_agent import main

    before = set((ROOT / "eval" / "results").iterdir())
    template = (f"{{python}} {FIX / 'scripted_agent.py'} --problem {{problem_dir}} --edits {FIX / 'edits.toml'} "
                "--case {case} --mcp-config {mcp_config}")
    out = tmp_path / "res.json"
    rc = main(["--agent", template, "--arms", "bare,gate", "--only", "scale4", "--executor", "cpu",
               "--budget-s", "300", "--keep", str(tmp_path / "work"), "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == res
    assert set((ROOT / "eval" / "results").iterdir()) == before  # nothing written but --out
    p = res["problems"][0]
    assert p["naive"]["verdict"] == "pass" and p["expert"]["verdict"] == "pass"
    assert p["skills_optimize"] == {"skipped": "no store with skills (--store)"}
    bare, gate = p["runs"]["bare"], p["runs"]["gate"]
    assert bare["verdict"] == "fail" and bare["hidden_failure"] is True and bare["failing_workload"] == "w2[N=1001]"
    assert gate["verdict"] == "pass" and gate["hidden_failure"] is False
    assert bare["usage"]["source"] == "claude result" and bare["usage"]["turns"] == 2
    assert res["summary"]["bare"]["passed"] == 0 and res["summary"]["gate"]["passed"] == 1
    assert res["timing"].startswith("none") and p["runs"]["gate"]["speedup_vs_naive"] is None
    kept = (tmp_path / "work").glob("ks-bench-agent-*/scale4-gate/problem/optimized.cu")
    assert "__restrict__" in next(kept).read_text()  # the safe edit was kept, the unguarded one reverted


def test_an_agent_that_never_ran_is_an_error_not_a_pass(tmp_path):
    """optimized.cu starts as naive.cu, which passes: an agent exiting non-zero must not count as passed."""
    from eval.bench_agent import main

    out = tmp_path / "res.json"
    rc = main(["--agent", "{python} -c 'import sys; sys.exit(3)'", "--arms", "bare", "--only", "scale4",
               "--executor", "cpu", "--budget-s", "60", "--keep", str(tmp_path / "work"), "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    bare = res["problems"][0]["runs"]["bare"]
    assert bare["verdict"] == "agent_error" and "exited 3" in bare["reason"] and bare["unchanged"] is True
    assert bare["hidden_failure"] is False
    assert res["summary"]["bare"]["passed"] == 0 and res["summary"]["bare"]["agent_errors"] == 1
