#!/usr/bin/env bash
# The real corpus on the GPU machine (device tool): materialize every wrapper of corpora/real from
# the carried sources and gate every version (naive .. expert) on the cuda executor (static +
# correctness, the large workloads included), then profile naive and expert. Results under $OUT.
#
# Prepare on this machine (the sources are never committed; only the files the wrappers read travel):
#   bash scripts/gpu_real_corpus.sh --prepare <store>/sources   # writes .carry/real-sources/ (uses .venv)
# then run with the device tool: carry [".whl", ".carry/real-sources"],
#   command: bash scripts/gpu_real_corpus.sh [SOURCE/PROBLEM ...]   (default: every wrapper)
# Comes back: $OUT/real_gate_cuda.jsonl (one gate result per version), $OUT/real_profile_cuda.jsonl
# (naive and expert, profile stage), $OUT/real_summary.txt (one line per version).
if [ "${1:-}" = "--prepare" ]; then
  src=$(realpath "$2"); cd "$(dirname "$0")/.."
  PYTHONPATH=$PWD exec ${PYTHON:-.venv/bin/python} - "$src" <<'PY'
import shutil, sys
from pathlib import Path
from corpora.kernel_sources import SourceMissing
from corpora.real import list_experts, source_files
src, dst = Path(sys.argv[1]), Path(".carry/real-sources")
n = 0
for e in list_experts():
    try:
        needed = source_files(e, src)
    except SourceMissing as exc:
        print(f"{e.source}/{e.problem}: skipped: {exc}"); continue
    for rel in needed:
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, out); n += 1
        meta = src / rel.parts[0] / "SOURCE.json"
        if meta.is_file():
            shutil.copyfile(meta, dst / rel.parts[0] / "SOURCE.json")
print(f"{n} files under {dst}")
PY
fi
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_env.sh || exit 1
OUT=${OUT:-/tmp/ks-out}; mkdir -p "$OUT"
export SKILLS_STORE=/tmp/ks-real-store SOURCES=${SOURCES:-$PWD/.carry/real-sources}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/real_summary.txt"
python3 - "$@" <<'PY' 2>&1 | tee -a "$OUT/real_summary.txt"
import json, os, sys, time
from pathlib import Path
from corpora.real import list_experts, materialize
from mining.gate.gate import GateConfig, run_gate
out, sources = Path(os.environ["OUT"]), Path(os.environ["SOURCES"])
wanted = set(sys.argv[1:])
gate_cfg = GateConfig(executor="cuda", stages=("static", "correctness"), seeds=(0, 1), timeout_s=300,
                      store=Path(os.environ["SKILLS_STORE"]), cpu_skip_tags=())
prof_cfg = GateConfig(executor="cuda", stages=("profile",), seeds=(0,), timeout_s=300, store=Path(os.environ["SKILLS_STORE"]))
with open(out / "real_gate_cuda.jsonl", "w") as g, open(out / "real_profile_cuda.jsonl", "w") as p:
    for e in list_experts():
        name = f"{e.source}/{e.problem}"
        if wanted and name not in wanted:
            continue
        try:
            d = materialize(e, sources, Path("/tmp/ks-real") / e.source / e.problem)
        except Exception as exc:  # a missing carried file: say which and go on
            print(f"{name}: materialize failed: {exc}"); continue
        for i, v in enumerate(e.versions):
            k = d / "versions" / f"{i}_{v.name}.cu"
            t = time.perf_counter()
            r = run_gate(d, k, gate_cfg).to_dict()
            r.update(expert=name, version=v.name, index=i)
            g.write(json.dumps(r) + "\n"); g.flush()
            print(f"{name} {i}_{v.name}: {r['verdict']} {r['reason'][:160]} ({time.perf_counter() - t:.1f}s)")
        for label, k in (("naive", d / "naive.cu"), ("expert", d / "kernel.cu")):
            r = run_gate(d, k, prof_cfg).to_dict()
            r.update(expert=name, role=label)
            p.write(json.dumps(r) + "\n"); p.flush()
            times = {w: m.get("median_ms") for w, m in r["stages"].get("profile", {}).get("workloads", {}).items()}
            print(f"{name} profile {label}: {r['verdict']} {times}")
PY
