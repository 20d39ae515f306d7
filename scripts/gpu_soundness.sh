#!/usr/bin/env bash
# Issue 22 on the GPU machine (device tool): the gate soundness suite on the cuda executor, in the
# default mode (plain run with the harness's guard regions) and with --sanitize (plus one
# compute-sanitizer run per tool: memcheck, racecheck, initcheck, synccheck), then a summary of
# which planted bugs each mode missed, written under $OUT.
#   usage: bash scripts/gpu_soundness.sh            (both modes)
#          MODES=default bash scripts/gpu_soundness.sh
# Comes back under $OUT:
#   gate_soundness_cuda.json            default mode (stamped with commit, command, machine)
#   gate_soundness_cuda_sanitize.json   --sanitize
#   parts/, parts_sanitize/             the per-family results they were merged from
#   soundness_gpu_summary.txt           per mode: rejected/planted, false rejects, every missed bug
#   soundness.log                       progress and the sanitizer check
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_env.sh || exit 1
OUT=${OUT:-/tmp/ks-out}; mkdir -p "$OUT"
LOG="$OUT/soundness.log"
log() { echo "[$(date +%T)] $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | tee -a "$LOG"
# The gate runs builds and harnesses only in its bubblewrap sandbox: without bwrap on the device,
# carry the Debian package (mkdir -p .carry/bwrap && (cd .carry/bwrap && apt-get download bubblewrap))
# and pass .carry in the run's carry list; it is unpacked here (dpkg -x, no root needed).
if ! command -v bwrap >/dev/null; then
  deb=$(ls .carry/bwrap/bubblewrap_*.deb 2>/dev/null | head -1)
  if [ -n "$deb" ]; then
    rm -rf /tmp/ks-bwrap && dpkg -x "$deb" /tmp/ks-bwrap && export KS_BWRAP=/tmp/ks-bwrap/usr/bin/bwrap
    log "bwrap unpacked from $deb"
  else
    log "no bwrap and no carried .deb (.carry/bwrap/bubblewrap_*.deb): every gate will refuse to run"
  fi
fi
command -v compute-sanitizer >/dev/null && compute-sanitizer --version | tail -1 | tee -a "$LOG" \
  || log "compute-sanitizer not on PATH: the --sanitize mode will report bad input"
# One gate_soundness call per suite family, each with its own time limit, merged afterwards: a slow
# family (compute-sanitizer's racecheck serializes shared accesses) cannot lose the others' results.
families=$(python3 -c "import json; print(' '.join(sorted({e['problem'] for e in json.load(open('eval/soundness/manifest.json'))})))")
for mode in ${MODES:-default sanitize}; do
  flag=""; suffix=""; jobs=${JOBS:-4}; per_run=${RUN_TIMEOUT:-30}; limit=${FAMILY_LIMIT:-120}
  if [ "$mode" = sanitize ]; then flag="--sanitize"; suffix="_sanitize"; jobs=${JOBS:-4}; per_run=${RUN_TIMEOUT:-60}; limit=${FAMILY_LIMIT:-240}; fi
  mkdir -p "$OUT/parts$suffix"
  for fam in $families; do
    log "soundness on cuda, mode $mode, family $fam (jobs $jobs, ${per_run}s per harness run, ${limit}s in all)"
    timeout "$limit" python3 -m eval.gate_soundness --executor cuda $flag --jobs "$jobs" --timeout "$per_run" \
      --only "^$fam/" --json --out "$OUT/parts$suffix/$fam.json" > /dev/null 2>>"$LOG"
    log "  $fam rc=$?"
  done
  python3 - "$OUT" "$suffix" "$mode" <<'PY' 2>>"$LOG"
import json, sys
from pathlib import Path
from eval.gate_soundness import summarize
from eval.stamp import stamp
out, suffix, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
parts = sorted((out / f"parts{suffix}").glob("*.json"))
entries, not_applicable = [], []
for p in parts:
    d = json.loads(p.read_text())
    entries += d["entries"]
    not_applicable += d.get("not_applicable", [])
argv = ["--executor", "cuda"] + (["--sanitize"] if mode == "sanitize" else []) + ["--only", "^<family>/ (one call per family)"]
summary = {**stamp("eval.gate_soundness", argv), "script": "scripts/gpu_soundness.sh", "families_run": [p.stem for p in parts],
           **summarize(entries), "not_applicable": not_applicable}
(out / f"gate_soundness_cuda{suffix}.json").write_text(json.dumps(summary, indent=1) + "\n")
PY
done
python3 - "$OUT" <<'PY' | tee "$OUT/soundness_gpu_summary.txt"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for name in ("gate_soundness_cuda.json", "gate_soundness_cuda_sanitize.json"):
    path = out / name
    if not path.exists():
        print(f"{name}: missing (the mode did not finish)"); continue
    d = json.loads(path.read_text())
    print(f"{name}: rejected {d['rejected']}/{d['planted']}, false rejects {d['false_rejects']}/{d['correct']}, "
          f"{d.get('wall_s')} s, commit {d.get('commit')}")
    for e in d["entries"]:
        if not e["ok"]:
            tag = "MISSED" if e["expect"] == "reject" else "FALSE-REJECT"
            print(f"  {tag} {e['problem']}/{e['kernel']} ({e['class']}): {e['verdict']} {e.get('reason', '')[:160]}")
    for e in d["entries"]:
        if e["ok"] and e["expect"] == "reject":
            print(f"  caught {e['problem']}/{e['kernel']}: {e['why']}")
PY
log "done"
