"""`skills wrap`: a KernelBench-style problem + a torch-bound .cu -> a problem folder that passes
the CPU gate; a bare kernel file -> a folder with what is missing; bad input -> one line, nothing written."""
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from corpora.problem import load_problem
from mining.wrap import WrapError, read_kernelbench, wrap

CUDA = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"  # test kernels too long to read inline

runner = CliRunner()

PROBLEM = """import torch
import torch.nn as nn

N = 2048


class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        return torch.relu(x) * self.alpha + y


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return [0.5]
"""
SOLUTION = (CUDA / "kernelbench_relu_axpy.cu").read_text()
BARE = """__global__ void scale(const float* __restrict__ x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""


def test_kernelbench_problem_and_torch_solution_pass_the_cpu_gate(tmp_path):
    (tmp_path / "problem.py").write_text(PROBLEM)
    (tmp_path / "solution.cu").write_text(SOLUTION)
    out = tmp_path / "relu_axpy"
    r = runner.invoke(app, ["wrap", str(tmp_path / "solution.cu"), "--kernelbench", str(tmp_path / "problem.py"),
                            "--out", str(out), "--executor", "cpu", "--store", str(tmp_path / "store"), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["complete"] and rep["entry_kind"] == "torch_host" and rep["gate"]["passed"], rep
    p = load_problem(out)
    assert list(p.definition.inputs) == ["x", "y"] and list(p.definition.outputs) == ["out"]
    assert list(p.definition.axes) == ["N"]  # named after the problem's module constant
    sizes = sorted(w.axes["N"] for w in p.workloads)
    assert sizes == [128, 2048] and any("large" in w.tags for w in p.workloads)
    kernel = (out / "kernel.cu").read_text()
    assert "torch" not in kernel.replace("torch host function", "") and "PYBIND11" not in kernel
    assert "relu_axpy<<<" in kernel and "void ks_entry(const float* x, const float* y, float* out, int N)" in kernel
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".relu_axpy")]  # no staging folder left


def test_bare_kernel_gets_a_folder_and_the_list_of_what_is_missing(tmp_path):
    (tmp_path / "scale.cu").write_text(BARE)
    rep = wrap(tmp_path / "scale.cu", tmp_path / "scale", run_gate_after=False)
    assert rep.entry_kind == "kernel" and rep.kernels == ["scale"]
    text = " | ".join(rep.missing)
    assert "reference.py: write run()" in text and "launch configuration" in text and "shapes guessed" in text
    p = load_problem(tmp_path / "scale")
    assert set(p.definition.inputs) == {"x", "a"} and p.definition.inputs["a"].shape is None
    assert list(p.definition.outputs) == ["y"]
    # the gate names what is missing: the reference is not written yet
    rep = wrap(tmp_path / "scale.cu", tmp_path / "scale", executor="cpu", force=True, store=tmp_path / "store")
    assert not rep.complete and any("gate:" in m for m in rep.missing)


def test_bad_inputs_name_the_file_and_write_nothing(tmp_path):
    (tmp_path / "host.cu").write_text("int main() { return 0; }\n")
    with pytest.raises(WrapError, match=r"host.cu: no __global__ function found"):
        wrap(tmp_path / "host.cu", tmp_path / "o1", run_gate_after=False)
    (tmp_path / "k.cu").write_text(BARE)
    (tmp_path / "nomodel.py").write_text("import torch\ndef get_inputs():\n    return []\n")
    with pytest.raises(WrapError, match=r"nomodel.py: no Model"):
        wrap(tmp_path / "k.cu", tmp_path / "o2", kernelbench=tmp_path / "nomodel.py", run_gate_after=False)
    (tmp_path / "hang.py").write_text("while True:\n    pass\n")
    with pytest.raises(WrapError, match=r"hang.py: evaluating Model / get_inputs took longer than 3s"):
        read_kernelbench(tmp_path / "hang.py", timeout_s=3)
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o")]
    (tmp_path / "o3").mkdir()
    r = runner.invoke(app, ["wrap", str(tmp_path / "k.cu"), "--out", str(tmp_path / "o3"), "--no-gate"])
    assert r.exit_code == 2 and "o3: already exists (pass --force to replace it)" in r.output


MM_PROBLEM = """import torch
import torch.nn as nn

M = 1024
K = 512
N = 2048


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
"""
MM_SOLUTION = (CUDA / "kernelbench_matmul.cu").read_text()


def test_torch_host_with_2d_launch_translates_to_the_definitions_names(tmp_path):
    (tmp_path / "p.py").write_text(MM_PROBLEM)
    (tmp_path / "s.cu").write_text(MM_SOLUTION)
    rep = wrap(tmp_path / "s.cu", tmp_path / "mm", kernelbench=tmp_path / "p.py", run_gate_after=False)
    assert rep.entry_kind == "torch_host" and rep.missing == []
    kernel = (tmp_path / "mm" / "kernel.cu").read_text()
    shim = kernel.split("void ks_entry", 1)[1]
    assert shim.startswith("(const float* A, const float* B, float* out, int M, int K, int N)")
    assert "mm<<<blocks, threads>>>(A, B, out, M, N, K);" in shim and "int M =" not in shim and "torch" not in shim
    p = load_problem(tmp_path / "mm")
    cpu = next(w for w in p.workloads if "large" not in w.tags)
    assert cpu.axes == {"M": 64, "K": 32, "N": 128}  # rectangular stays rectangular


def test_kernelbench_file_is_refused_without_a_sandbox(tmp_path, monkeypatch):
    """The problem file is untrusted Python: with no isolation it is not run unless --trust (as the gate)."""
    (tmp_path / "k.cu").write_text(BARE)
    marker = tmp_path / "ran"
    (tmp_path / "problem.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n" + PROBLEM)
    monkeypatch.setenv("KS_BWRAP", "none")
    r = runner.invoke(app, ["wrap", str(tmp_path / "k.cu"), "--kernelbench", str(tmp_path / "problem.py"),
                            "--out", str(tmp_path / "o"), "--no-gate"])
    assert r.exit_code == 2 and "no sandbox" in r.stderr and "--trust" in r.stderr, r.output
    assert not marker.exists() and not (tmp_path / "o").exists()
