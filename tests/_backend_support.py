"""Shared helpers for the backend tests: the toy LLVM tree and one indexed toy store per session."""
from __future__ import annotations

import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOY = ROOT / "corpora" / "backends" / "llvm-toy"
TOY_TARGETS = TOY / "lib" / "Target"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@lru_cache(maxsize=1)
def indexed_toy_store() -> Path:
    """A store with the three toy targets indexed (small training budgets); built once per
    test session and shared read-mostly. Tests that write make their own store."""
    from retrieval.backend.index import index_backends
    from skills.store import Store

    root = Path(tempfile.mkdtemp(prefix="toy-store-"))
    st = Store(root)
    index_backends(TOY_TARGETS, st, func_epochs=4, target_epochs=30)
    st.close()
    return root


def copy_toy(dst: Path) -> Path:
    """A writable copy of the toy LLVM tree (returns its root, holding lib/Target)."""
    shutil.copytree(TOY, dst)
    return dst


def gate_skip_reason(major: int = 15):
    """None when LLVM ``major``'s gate toolchain is installed (the toy tree is LLVM 15), else why not."""
    from mining.backend.gate import toolchain_available

    missing = toolchain_available(major)
    if missing:
        return f"LOUD SKIP: {missing} (CI installs it: .ci/apt-extra.txt)"
    return None


def fetched_llvm_tree(major: int):
    """(tree, None) for a fetched LLVM ``major`` tree named by ``SKILLS_LLVM<major>_TREE``, else
    (None, why the test skips). Tests never fetch: CI runs offline and has no LLVM tree."""
    import json

    var = f"SKILLS_LLVM{major}_TREE"
    how = (f"set {var} to a tree fetched with `skills corpora fetch llvm --version {major} --dest DIR` "
           "(CI runs offline and has none)")
    value = os.environ.get(var)
    if not value:
        return None, f"LOUD SKIP: needs a fetched LLVM {major} tree: {how}"
    tree = Path(value)
    try:
        version = json.loads((tree / "fetch.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None, f"LOUD SKIP: {var}={tree} holds no fetch.json: {how}"
    if str(version).split(".")[0] != str(major):
        return None, f"LOUD SKIP: {var}={tree} holds LLVM {version}, not {major}"
    return tree, None
