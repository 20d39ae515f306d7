#!/usr/bin/env bash
# GPU check of the checker / forward-walk refactor (issue 16 items 2-4): the same small mining and
# optimize runs on the cuda executor, to compare a checkout before and after (kept steps, lineage
# operators, end points; times agree within noise). Writes under $OUT only.
#   usage: bash scripts/gpu_pairs_check.sh      (about 10 minutes on one H200)
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_env.sh || exit 1
OUT=${OUT:-/tmp/ks-out}; mkdir -p "$OUT"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/pairs_check.log"; }
git rev-parse HEAD 2>/dev/null | tee -a "$OUT/pairs_check.log"
log "bench_mining cuda: reduce_sum, transpose"
timeout 330 python3 -m eval.bench_mining --executor cuda --problems reduce_sum,transpose --jobs 4 --time-limit 280 \
  --store /tmp/ks-pairs-store --out "$OUT/pairs_mining_cuda.json" >> "$OUT/pairs_check.log" 2>&1
log "bench_mining rc=$?"
log "bench_optimize cuda: vector_add, reduce_sum, softmax with the proxy skills fixture, budget 3"
timeout 240 python3 -m eval.bench_optimize --executor cuda --problems vector_add,reduce_sum,softmax --budget 3 \
  --store tests/fixtures/kernel_skills/proxy_skills.json --cache /tmp/ks-pairs-opt-cache --fresh \
  --out "$OUT/pairs_optimize_cuda.json" --out-dir "$OUT/pairs_optimize_runs" >> "$OUT/pairs_check.log" 2>&1
log "bench_optimize rc=$?"
