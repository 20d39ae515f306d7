#!/usr/bin/env bash
# Create .venv and install kernel-skills with the CPU build of torch (constraints-cpu.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! dpkg -s libboost-context-dev >/dev/null 2>&1; then
  echo "installing libboost-context-dev (CPU executor fibers)"; apt-get update -qq && apt-get install -y -qq libboost-context-dev >/dev/null
fi
if ! command -v bwrap >/dev/null 2>&1; then
  echo "installing bubblewrap (the gate's sandbox, docs/security.md)"; apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null
fi
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -c constraints-cpu.txt -e '.[test]'
