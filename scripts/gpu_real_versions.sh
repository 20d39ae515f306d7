#!/usr/bin/env bash
# GPU machine (device tool): gate every version of materialized real-corpus problems on the cuda
# executor (static + correctness, all workloads including the "large" ones).
#   usage: bash scripts/gpu_real_versions.sh MATERIALIZED_DIR [problem ...]
# MATERIALIZED_DIR holds folders written by corpora.real.materialize (each with versions/*.cu);
# make it here (the device has no fetched sources) under the ignored .skills/ and carry that path, e.g.
#   python -c 'from pathlib import Path; from corpora import real; [real.materialize(e, Path(".skills/sources"), Path(".skills/real-mat") / e.problem) for e in real.list_experts() if e.gpu_only]'
# Writes $OUT/real_versions/<problem>/<version>.json and $OUT/real_versions.txt (one line per version).
# (EXECUTOR=cpu runs the same loop on the CPU executor.)
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_env.sh || exit 1
OUT=${OUT:-/tmp/ks-out}; mkdir -p "$OUT/real_versions"
DIR=${1:?usage: gpu_real_versions.sh MATERIALIZED_DIR [problem ...]}; shift
[ -d "$DIR" ] || { echo "gpu_real_versions.sh: $DIR: not a folder" >&2; exit 2; }
problems=${*:-$(ls "$DIR")}
export SKILLS_STORE=/tmp/ks-store
for p in $problems; do
  mkdir -p "$OUT/real_versions/$p"
  for k in "$DIR/$p"/versions/*.cu; do
    v=$(basename "$k" .cu)
    timeout 300 python3 -c 'import sys; from cli import app; sys.argv[0] = "skills"; app()' \
      gate "$DIR/$p" --kernel "$k" --executor "${EXECUTOR:-cuda}" --stages static,correctness --json \
      > "$OUT/real_versions/$p/$v.json" 2>>"$OUT/real_versions.log"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], d["verdict"], d["reason"][:200])' \
      "$OUT/real_versions/$p/$v.json" "$p" "$v" 2>&1 | tee -a "$OUT/real_versions.txt"
  done
done
