#!/usr/bin/env bash
# One batch on the GPU machine (device tool): gate the corpus and the soundness suite on the cuda
# executor, measure the corpus, and benchmark the gate. Every phase has its own time limit and
# writes under $OUT, so a slow phase cannot hide what the others found.
#   usage: bash scripts/gpu_batch.sh [phases...]   (default: gate soundness corpus bench)
# Every result JSON goes to $OUT by --out (benchmarks write nowhere else); the copy on the device
# has no git (or a checkout of its own), so pass the commit for the stamps: SKILLS_COMMIT=$(git rev-parse HEAD) bash scripts/gpu_batch.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_env.sh || exit 1
OUT=${OUT:-/tmp/ks-out}; mkdir -p "$OUT"
STORE=/tmp/ks-store; export SKILLS_STORE=$STORE
phases=${*:-gate soundness corpus bench}
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/batch.log"; }
nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$OUT/batch.log"
for phase in $phases; do
  case $phase in
    gate)
      log "gate: corpus correctness on cuda (all kernels, 4 at a time)"
      ls -d corpora/kernels/*/ | timeout 200 xargs -P 4 -I{} timeout 180 bash -c \
        'skills gate {} --all-kernels --executor cuda --stages static,correctness --json > /tmp/gate_$(basename {}).json 2>/dev/null; echo "{} rc=$?"' \
        | tee -a "$OUT/batch.log"
      python3 - <<'PY' | tee -a "$OUT/batch.log"
import glob, json
rows = []
for f in sorted(glob.glob("/tmp/gate_*.json")):
    try:
        data = json.load(open(f))
    except Exception as e:
        print(f, "unreadable", e); continue
    for r in (data if isinstance(data, list) else [data]):
        rows.append(r)
        print(f"{r.get('problem')}/{r.get('kernel','').split('/')[-1]}: {r['verdict']} {r['reason'][:200]}")
json.dump(rows, open("/tmp/gate_all.json", "w"))
PY
      cp /tmp/gate_all.json "$OUT/corpus_gate_cuda.json" ;;
    soundness)
      log "soundness on cuda"
      timeout 200 python3 -m eval.gate_soundness --executor cuda --jobs 4 --timeout 20 \
        --out "$OUT/gate_soundness_cuda.json" > "$OUT/soundness_table.txt" 2>>"$OUT/batch.log"
      log "soundness rc=$?" ;;
    corpus)
      log "bench_corpus"
      timeout 330 python3 -m eval.bench_corpus --store "$STORE" --out "$OUT/corpus_h200.json" \
        > "$OUT/corpus_table.md" 2>>"$OUT/batch.log"
      log "bench_corpus rc=$?" ;;
    mine)
      # resumable: lineages finished in an earlier call are reused from the store (.skills-gpu)
      log "bench_mining cuda (priority strategy, ${MINE_PROBLEMS:-all experts})"
      timeout ${MINE_LIMIT:-540} python3 -m eval.bench_mining --executor cuda --strategy priority --jobs ${MINE_JOBS:-12} \
        --parallel-problems ${MINE_PAR:-6} --store "$PWD/.skills-gpu" ${MINE_PROBLEMS:+--problems $MINE_PROBLEMS} \
        --out "$OUT/bench_mining_cuda.json" > "$OUT/bench_mining_table.txt" 2>>"$OUT/batch.log"
      log "bench_mining rc=$?"; cp .skills-gpu/store.duckdb "$OUT/store_gpu.duckdb" 2>/dev/null ;;
    optimize)
      # issue 7 on the H200: OPT_PAR benchmark processes over disjoint problem groups (GPU timing is
      # serialized across them by a file lock in the shared gate cache); each result file resumes
      # (copy $OUT/optimize_part*.json to .carry/optimize/ between calls, carry .carry), then they are merged.
      log "bench_optimize cuda (store ${OPT_STORE:-.carry/optstore}, ${OPT_PAR:-5} processes)"
      names=${OPT_PROBLEMS:-$(ls -d corpora/kernels/*/ | xargs -n1 basename)}; names=${names//,/ }; i=0; pids=()
      for grp in $(python3 -c "import sys; n=sys.argv[1:-1]; k=int(sys.argv[-1]); print(' '.join(','.join(n[j::k]) for j in range(k)))" $names ${OPT_PAR:-5}); do
        mkdir -p .carry/optimize; part=.carry/optimize/optimize_part$i.json
        timeout ${OPT_LIMIT:-540} python3 -m eval.bench_optimize --executor cuda --store ${OPT_STORE:-.carry/optstore} \
          --problems $grp --budget 10 --jobs ${OPT_JOBS:-3} --cache /tmp/ks-opt-cache --retrieval scan \
          --problem-minutes ${OPT_PROBLEM_MIN:-3} --max-minutes ${OPT_MAX_MIN:-7} --out $part --out-dir /tmp/ks-opt-runs \
          > "$OUT/optimize_part$i.log" 2>&1 &
        pids+=($!); i=$((i+1))
      done
      wait "${pids[@]}"; cp .carry/optimize/optimize_part*.json "$OUT/" 2>/dev/null
      tar czf "$OUT/optimize_runs.tgz" -C /tmp ks-opt-runs 2>/dev/null  # one file: final kernels, lineages, attempts
      python3 -m eval.bench_optimize --merge .carry/optimize/optimize_part*.json --out "$OUT/optimize_h200.json" \
        > "$OUT/optimize_table.md" 2>>"$OUT/batch.log"; log "merge rc=$?" ;;
    bench)
      log "bench_gate cuda"
      timeout 280 python3 -m eval.bench_gate --executor cuda --repeats 2 --out "$OUT/bench_gate_cuda.json" \
        >> "$OUT/batch.log" 2>&1
      log "bench_gate rc=$?" ;;
  esac
done
log "done"
