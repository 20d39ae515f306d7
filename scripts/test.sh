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
  # one pytest worker per core, at most 4 (each loads torch and the embedding model); a test module
  # stays on one worker (--dist loadfile) so its module-scoped fixtures (the docs' shared store, a
  # mined corpus) are built once. SKILLS_TEST_WORKERS=0 runs in this process.
  workers=${SKILLS_TEST_WORKERS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}
  set -- tests -n "$workers" --dist loadfile
fi
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
