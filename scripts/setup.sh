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
phase "4/4 pip: kernel-skills and its dependencies, CPU torch (~2.4 GB; log: $log)"
.venv/bin/pip install --progress-bar off -c constraints-cpu.txt -e '.[test]' 2>&1 | pip_progress "$log"
phase "done: .venv ready ($(.venv/bin/python -c 'import importlib.metadata as m; print(len(list(m.distributions())))') distributions)"
