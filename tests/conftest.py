import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

KERNELS = ROOT / "corpora" / "kernels"

# the real model server for the LLM-path tests, one per session (tests/_llm_support.py, issue 21)
from _llm_support import llm_env, llm_server  # noqa: E402,F401


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A fresh store root per test, so no cached gate result leaks between tests."""
    return tmp_path / "store"


@pytest.fixture
def problem_copy(tmp_path: Path):
    """Copy a shipped problem into tmp so a test can edit it."""
    def _copy(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(KERNELS / name, dst)
        return dst
    return _copy
