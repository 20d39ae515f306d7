#!/usr/bin/env bash
# The test suite, offline: no model hub, no LLM cost-map fetch.
# `bash scripts/test.sh` checks the import contracts (lint-imports), then runs every test;
# `bash scripts/test.sh ARGS` hands ARGS to pytest instead (e.g. `tests/test_cli.py -k export`).
# pyproject's addopts already says -q once: a second -q would hide pytest's closing "N passed" line.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
if [ "$#" -eq 0 ]; then
  # the whole suite starts with the import contracts of pyproject.toml (docs/architecture.md, "Layers")
  .venv/bin/lint-imports --no-cache
  set -- tests
fi
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
