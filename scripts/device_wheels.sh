#!/usr/bin/env bash
# Fill .whl (ignored; carried to the GPU machine, installed there by scripts/device_env.sh) with the
# wheels its image lacks, at the versions this venv runs: the parser, the schemas and the store.
#   bash scripts/device_wheels.sh [PYTHON_VERSION]     (the GPU machine's python, default 3.12)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-3.12}
pkgs=$(.venv/bin/python - <<'PY'
from importlib.metadata import version
names = ["tree-sitter", "tree-sitter-cpp", "tree-sitter-cuda", "pydantic", "pydantic-core", "annotated-types",
         "typing-extensions", "typing-inspection", "duckdb"]
print(" ".join(f"{n}=={version(n)}" for n in names))
PY
)
mkdir -p .whl
# shellcheck disable=SC2086
.venv/bin/python -m pip download -q --only-binary=:all: --no-deps --python-version "$py" \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d .whl $pkgs
ls .whl
