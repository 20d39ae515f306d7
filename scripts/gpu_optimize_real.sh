#!/usr/bin/env bash
# `skills optimize` on the real corpus' naive kernels on the H200 (issue 20): bench_optimize
# --corpus real, deterministic, budget 10, leave-one-source-out, with the two deterministic
# baselines (no_skills_det, flat_memory_det) beside the value plan (deterministic, with the library
# fallback; OPT_ARMS=...,skills_only_det adds the skills alone, the fallback off). One device
# call of at most 10 minutes. The GPU machine has no network, no fetched sources and no duckdb,
# so the problem folders and the skills are prepared HERE (third-party code stays in an ignored
# folder):
#
#   here:    python -m eval.next_step_stores --root /work/wt/ranking-stores carry --dest .carry/optreal
#            (after `... mine`: the materialized folders and the all store's skill records as JSON)
#   device:  run tool, carry [".carry/bwrap", ".carry/optreal", ".whl"]:  SKILLS_COMMIT=<this HEAD> bash scripts/gpu_optimize_real.sh
#            (the device's own git checkout is not this one: without SKILLS_COMMIT the stamp names a stale commit)
#   back:    $OUT/optimize_real_h200.json (+ .md table, part logs); commit it as
#            eval/results/optimize_real_h200.json
#
# The (arm, problem) runs are spread over OPT_PAR processes per GPU (each with OPT_JOBS gate
# workers; GPU timing serialized per GPU through SKILLS_GPU_LOCK), every GPU the machine shows.
# Each arm has its own gate cache: an arm never gets a candidate another arm already built, checked
# and timed for free (session 15's baselines shared one and were faster per attempt for it).
# The loop gates on seed 0 (OPT_SEEDS) and every final kernel is re-gated on seeds 0,1,2. No new
# step starts after OPT_PROBLEM_MIN minutes of a run and no new run after OPT_MAX_MIN minutes: what
# did not run is marked incomplete in the JSON, never guessed.
# Each run's states, attempts and final kernel go under OPT_RUNS (default /tmp/ks-opt-runs/<arm>/<problem>).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_env.sh || exit 1
OUT=${OUT:-/tmp/ks-out}; mkdir -p "$OUT"
PREP=${OPT_PREP:-.carry/optreal}
if [ ! -f "$PREP/skills.json" ] || [ ! -d "$PREP/problems" ]; then
  echo "no $PREP/skills.json or $PREP/problems: run 'python -m eval.next_step_stores --root STORES carry --dest $PREP' here first" >&2
  exit 2
fi
ARMS=${OPT_ARMS:-deterministic,no_skills_det,flat_memory_det}
NGPU=$(nvidia-smi -L | wc -l); [ "$NGPU" -ge 1 ] || { echo "no GPU" >&2; exit 2; }
PAR=${OPT_PAR:-4}
JOBS=${OPT_JOBS:-2}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/optimize_real.log"
echo "arms $ARMS; $NGPU GPU(s) x $PAR processes x $JOBS gate jobs; budget ${OPT_BUDGET:-10}" | tee -a "$OUT/optimize_real.log"
names=$(python3 - "$PREP/problems" <<'EOF'
import json, sys
from pathlib import Path
from corpora.real import list_experts
root = Path(sys.argv[1])
for e in list_experts():
    d = root / e.source / e.problem
    if (d / "definition.json").is_file():
        print(json.loads((d / "definition.json").read_text())["name"])
EOF
)
n=0
pids=()
for arm in ${ARMS//,/ }; do
  for ((g = 0; g < NGPU; g++)); do
    for ((p = 0; p < PAR; p++)); do
      slot=$((g * PAR + p)); nslots=$((NGPU * PAR))
      part=$(echo "$names" | awk -v n=$nslots -v i=$slot '(NR - 1) % n == i' | paste -sd, -)
      [ -n "$part" ] || continue
      CUDA_VISIBLE_DEVICES=$g SKILLS_GPU_LOCK=/tmp/ks-gpu$g.lock timeout ${OPT_LIMIT:-560} \
        python3 -m eval.bench_optimize --executor cuda --corpus real --real-problems "$PREP/problems" \
        --store "$PREP/skills.json" --retrieval scan --arms "$arm" --problems "$part" --jobs $JOBS \
        --seeds ${OPT_SEEDS:-0} --budget ${OPT_BUDGET:-10} --problem-minutes ${OPT_PROBLEM_MIN:-1.5} \
        --max-minutes ${OPT_MAX_MIN:-7} --cache /tmp/ks-opt-cache-$g-$arm --out "$OUT/part-$arm-$slot.json" \
        --out-dir "${OPT_RUNS:-/tmp/ks-opt-runs}" \
        > "$OUT/part-$arm-$slot.md" 2> "$OUT/part-$arm-$slot.log" &
      pids+=($!); n=$((n + 1))
    done
  done
done
echo "$n processes started" | tee -a "$OUT/optimize_real.log"
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
python3 -m eval.bench_optimize --merge "$OUT"/part-*.json --out "$OUT/optimize_real_h200.json" \
  > "$OUT/optimize_real_h200.md" 2>> "$OUT/optimize_real.log"
echo "parts rc=$rc merge rc=$?" | tee -a "$OUT/optimize_real.log"
cat "$OUT/optimize_real_h200.md"
python3 - "$OUT/optimize_real_h200.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for arm, a in d["arms"].items():
    g = a["aggregate"]
    print(arm, "problems", g["problems"], "errors", g["errors"], "all_final_correct", g["all_final_correct"],
          "geomean_log_ratio_share", g.get("geomean_log_ratio_share"), "mean", g.get("mean_log_ratio_share"),
          "geomean_fraction_of_expert", g.get("geomean_fraction_of_expert"))
EOF
exit $rc
