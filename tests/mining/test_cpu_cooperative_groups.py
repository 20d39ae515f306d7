"""Cooperative groups on the CPU executor: thread_block and warp tiles are the runtime's own
barriers and checked shuffles (cuda-samples kernels use them); the rest stays unsupported."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mining.gate import cpu_toolchain
from mining.gate.gate import GateConfig, run_gate

CUDA = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"  # test kernels too long to read inline

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or not Path(
    "/usr/include/boost/context/detail/fcontext.hpp").exists(), reason="needs g++ and libboost-context-dev")

KERNEL = (CUDA / "cooperative_groups.cu").read_text()


def _problem(root: Path, sync: str) -> Path:
    root.mkdir()
    (root / "definition.json").write_text(json.dumps({
        "name": "cg_block_sum", "op_type": "reduction",
        "axes": {"N": {"type": "var"}, "B": {"type": "var"}},
        "inputs": {"x": {"shape": ["N"], "dtype": "float32"}},
        "outputs": {"partial": {"shape": ["B"], "dtype": "float32"}},
        "constraints": ["B * 256 >= N"],
        "reference": "import numpy as np\ndef run(x, B):\n    p = np.zeros(B * 256); p[:x.size] = x\n"
                     "    return p.reshape(B, 256).sum(axis=1).astype(np.float32)\n"}))
    (root / "workloads.jsonl").write_text('{"axes": {"N": 1000, "B": 4}}\n')
    (root / "solution.toml").write_text('entry = "block_sums"\n')
    (root / "kernel.cu").write_text(KERNEL.replace("SYNC_HERE", sync))
    return root


def test_block_and_tile_groups_run_and_check(tmp_path: Path):
    config = GateConfig(executor="cpu", stages=("correctness",), seeds=(0,), store=tmp_path / "store")
    ok = run_gate(_problem(tmp_path / "ok", "cta.sync();"), None, config)
    assert ok.passed, ok.reason
    racy = run_gate(_problem(tmp_path / "racy", ""), None, config)  # cg::sync is a real barrier: dropping it races
    assert not racy.passed and "race" in racy.reason


def test_only_the_groups_the_runtime_lacks_are_unsupported():
    assert cpu_toolchain.unsupported_features(KERNEL) == []
    grid = "#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n" \
           "__global__ void k() { cg::this_grid().sync(); }\n"
    assert any("cooperative groups" in what or "grid" in what for _, what in cpu_toolchain.unsupported_features(grid))
    wide = "__global__ void k() { auto t = cg::tiled_partition<64>(cg::this_thread_block()); }\n"
    assert [w for _, w in cpu_toolchain.unsupported_features(wide)] == ["cooperative groups beyond thread_block and warp tiles"]
