#!/usr/bin/env bash
# The test suite, offline: no model hub, no LLM cost-map fetch.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
exec .venv/bin/python -m pytest -q -p no:cacheprovider tests "$@"
