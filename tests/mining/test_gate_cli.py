"""`skills gate` end to end through the real CLI: real nvcc, real g++ + CPU runtime."""
import json
import os
import subprocess
import sys
from pathlib import Path


from tests.conftest import KERNELS, ROOT

SKILLS = [sys.executable, "-c", "import sys; from cli import app; sys.argv[0] = 'skills'; app()"]


def skills(*args, store: Path, timeout=300, env=None):
    e = dict(os.environ, SKILLS_STORE=str(store))
    if env:
        e.update(env)
    return subprocess.run([*SKILLS, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=e)


def assert_one_line_error(res, code, *needles):
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_gate_passes_expert_and_naive_cpu(store):
    res = skills("gate", str(KERNELS / "tiled_matmul"), "--all-kernels", "--executor", "cpu", "--json", store=store)
    assert res.returncode == 0, res.stdout + res.stderr
    results = json.loads(res.stdout)
    assert [Path(r["kernel"]).name for r in results] == ["kernel.cu", "naive.cu"]
    for r in results:
        assert r["verdict"] == "pass"
        corr = r["stages"]["correctness"]
        # 3 small workloads x 3 seeds x 2 fiber orders, and the large workload in its reduced
        # form (same N, M and K cut: issue 22) x 1 seed x 2 orders.
        assert corr["cases_passed"] == corr["cases_total"] == 20
        assert "skipped_workloads" not in corr
        assert "w3[M=2,N=2048,K=256]+reduced" in corr["workloads"]
        assert r["stages"]["profile"]["status"] == "skip" and "static only" in r["stages"]["profile"]["reason"]
        sm90 = r["stages"]["static"]["archs"]["sm_90"]["kernels"]
        assert any(k["registers"] > 0 for k in sm90.values())


def test_second_run_is_served_from_cache(store):
    args = ("gate", str(KERNELS / "vector_add"), "--executor", "cpu", "--json")
    first = json.loads(skills(*args, store=store).stdout)
    second = json.loads(skills(*args, store=store).stdout)
    assert not first["stages"]["correctness"]["cached"]
    assert second["stages"]["correctness"]["cached"] and second["stages"]["static"]["cached"]
    assert second["passed"]


def test_wrong_kernel_fails_with_reason(store, problem_copy):
    root = problem_copy("vector_add")
    (root / "bad.cu").write_text((root / "naive.cu").read_text().replace("a[i] + b[i]", "a[i] - b[i]"))
    res = skills("gate", str(root), "--kernel", "bad.cu", "--executor", "cpu", "--json", store=store)
    assert res.returncode == 1
    r = json.loads(res.stdout)
    assert r["verdict"] == "fail" and "wrong" in r["stages"]["correctness"]["reason"]


def test_unwritten_tail_is_reported(store, problem_copy):
    root = problem_copy("vector_add")
    (root / "bad.cu").write_text((root / "naive.cu").read_text().replace("if (i < n)", "if (i < n - 1)"))
    r = json.loads(skills("gate", str(root), "--kernel", "bad.cu", "--executor", "cpu", "--json", store=store).stdout)
    assert "1 unwritten" in r["stages"]["correctness"]["reason"]


def test_compile_error_names_file_and_line(store, problem_copy):
    root = problem_copy("vector_add")
    src = (root / "naive.cu").read_text().replace("y[i] = a[i] + b[i];", "y[i] = a[i] + undefined_thing;")
    (root / "bad.cu").write_text(src)
    res = skills("gate", str(root), "--kernel", "bad.cu", "--executor", "cpu", store=store)
    assert res.returncode == 1
    line = next(i for i, l in enumerate(src.splitlines(), 1) if "undefined_thing" in l)
    assert f"reason: static: {root / 'bad.cu'}:{line}: " in res.stdout
    assert "undefined_thing" in res.stdout
    as_json = json.loads(skills("gate", str(root), "--kernel", "bad.cu", "--executor", "cpu", "--json", store=store).stdout)
    assert as_json["reason"].startswith(f"static: {root / 'bad.cu'}:{line}: ")


def test_hanging_kernel_times_out(store, problem_copy):
    root = problem_copy("vector_add")
    (root / "hang.cu").write_text((root / "naive.cu").read_text().replace(
        "if (i < n) y[i] = a[i] + b[i];", "while (i >= 0) { i = i | 1; } y[0] = 0;"))
    res = skills("gate", str(root), "--kernel", "hang.cu", "--executor", "cpu", "--stages", "correctness",
                 "--timeout", "3", "--json", store=store, timeout=60)
    assert res.returncode == 1
    assert "timed out after 3s" in json.loads(res.stdout)["reason"]


def test_bad_inputs_exit_2_with_one_line(store, problem_copy, tmp_path):
    root = problem_copy("vector_add")
    assert_one_line_error(skills("gate", str(tmp_path / "missing"), store=store), 2, "missing")
    (root / "unbound.cu").write_text((root / "naive.cu").read_text().replace("float* y, int N)", "float* y, int count)"))
    assert_one_line_error(skills("gate", str(root), "--kernel", "unbound.cu", "--executor", "cpu", store=store), 2,
                          "unbound.cu", "parameter 'count'", "binds to no input")
    assert_one_line_error(skills("gate", str(root), "--kernel", "nope.cu", store=store), 2, "nope.cu", "not found")
    (root / "workloads.jsonl").write_text('{"axes": {"N": "x"}}\n')
    assert_one_line_error(skills("gate", str(root), store=store), 2, "workloads.jsonl:1", "axes.N")
    (root / "definition.json").write_text("{")
    assert_one_line_error(skills("gate", str(root), store=store), 2, "definition.json", "invalid JSON")
    assert_one_line_error(skills("gate", str(KERNELS / "vector_add"), "--executor", "tpu", store=store), 2, "--executor")


def test_cli_start_is_light():
    """`skills --help` must not import torch, chromadb, sentence-transformers or litellm."""
    code = ("import sys; from cli import app; heavy = [m for m in ('torch', 'chromadb', 'sentence_transformers', "
            "'litellm', 'torch_geometric') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_every_wire_dtype_round_trips_on_cpu(store):
    """fp16, bf16, int64, int32 inputs, a float scalar and four outputs of four dtypes."""
    res = skills("gate", str(ROOT / "tests" / "fixtures" / "mixed_dtypes"), "--executor", "cpu", "--json", store=store)
    r = json.loads(res.stdout)
    assert r["verdict"] == "pass", r["reason"]
    outputs = r["stages"]["correctness"]["runs"][0]["cases"][0]["outputs"]
    assert set(outputs) == {"y", "h", "b", "z"}
