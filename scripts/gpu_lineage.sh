#!/usr/bin/env bash
# The real corpus's GPU-only experts (lineage.toml gpu_only = true) on the H200: issue 17's
# bench_lineage on the cuda executor. The GPU machine has no network and no fetched sources, so
# the problem folders are materialized HERE first (third-party code stays in an ignored folder):
#
#   here:    python -m eval.bench_lineage --prepare .carry/lineage --gpu-only --store .skills-real
#            (needs the sources fetched into .skills-real/sources: skills corpora fetch NAME --from/...,
#             and the house store .skills-house-cpu built by a CPU bench_lineage run)
#   device:  run tool, carry [".carry/bwrap", ".carry/lineage", ".whl"] (.carry/bwrap holds the sandbox; .whl holds
#            tree-sitter, pydantic and duckdb for the machine's python):  SKILLS_COMMIT=<this HEAD> bash scripts/gpu_lineage.sh
#            (the device's own git checkout is not this one: without SKILLS_COMMIT the stamp names a stale commit)
#   back:    $OUT/bench_lineage_cuda.json (+ .txt table, .log); commit it as eval/results/bench_lineage_cuda.json
#
# Skills new/merged use the CPU house store's skill ids (skill identity = carrier:operator, the
# same on every executor). STRATEGY=smallest_effect times every passing candidate (slower).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_env.sh || exit 1
OUT=${OUT:-/tmp/ks-out}; mkdir -p "$OUT"
PREP=${LINEAGE_PREP:-.carry/lineage}
if [ ! -d "$PREP" ]; then
  echo "no $PREP: run 'python -m eval.bench_lineage --prepare $PREP --gpu-only' here first" >&2
  exit 2
fi
# without the house store's skill ids, skills new/merged stay empty (scored later with --rescore)
house=(--no-house); [ -f "$PREP/house_skills.json" ] && house=(--house-skills "$PREP/house_skills.json")
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/bench_lineage_cuda.log"
timeout ${LINEAGE_LIMIT:-560} python3 -m eval.bench_lineage --executor cuda --gpu-only \
  --strategy "${STRATEGY:-priority}" --store /tmp/ks-lineage-store --materialized "$PREP" \
  "${house[@]}" --jobs ${LINEAGE_JOBS:-8} --time-limit ${LINEAGE_WALK_S:-400} \
  ${LINEAGE_ONLY:+--only $LINEAGE_ONLY} --out "$OUT/bench_lineage_cuda.json" \
  > "$OUT/bench_lineage_cuda.txt" 2>> "$OUT/bench_lineage_cuda.log"
rc=$?
echo "bench_lineage rc=$rc" | tee -a "$OUT/bench_lineage_cuda.log"
cat "$OUT/bench_lineage_cuda.txt"
exit $rc
