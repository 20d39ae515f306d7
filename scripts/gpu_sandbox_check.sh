#!/usr/bin/env bash
# The gate's sandbox on the GPU machine (device tool, one H200): is bubblewrap usable, does a
# sandboxed cuda gate pass (devices and driver visible), do the attack kernels stay blocked on
# the cuda executor, what does the sandbox cost, and does the no-sandbox refusal work.
#
# bubblewrap is probably not installed there: carry the Debian package and this script unpacks it
# (dpkg -x, no root needed) into /tmp/ks-bwrap and points KS_BWRAP at it. Prepare it here with
#     mkdir -p .carry/bwrap && (cd .carry/bwrap && apt-get download bubblewrap)
# and run on the device with carry [".carry", ".whl"]:
#     bash scripts/gpu_sandbox_check.sh
# Everything lands in $OUT (sandbox_check.log, gate_*.json, attacks_cuda.json, timing.json).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device_env.sh || exit 1
OUT=${OUT:-/tmp/ks-out}; mkdir -p "$OUT"
LOG="$OUT/sandbox_check.log"
log() { echo "[$(date +%T)] $*" | tee -a "$LOG"; }
export SKILLS_STORE=/tmp/ks-sbx-store

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$LOG"
log "uname: $(uname -r); id: $(id -u); userns max: $(cat /proc/sys/user/max_user_namespaces 2>/dev/null)"

# ---- bubblewrap: installed, or unpacked from the carried .deb
if ! command -v bwrap >/dev/null; then
  deb=$(ls .carry/bwrap/bubblewrap_*.deb 2>/dev/null | head -1)
  if [ -n "$deb" ]; then
    rm -rf /tmp/ks-bwrap && dpkg -x "$deb" /tmp/ks-bwrap && export KS_BWRAP=/tmp/ks-bwrap/usr/bin/bwrap
    log "bwrap unpacked from $deb: $($KS_BWRAP --version 2>&1)"
  else
    log "no bwrap and no carried .deb (.carry/bwrap/bubblewrap_*.deb)"
  fi
else
  log "bwrap on PATH: $(bwrap --version)"
fi
python3 - <<'PY' 2>&1 | tee -a "$LOG"
from mining.gate.sandbox import isolation, isolation_problem, run_limited
print("isolation:", isolation(), "|", isolation_problem() or "ok")
if isolation():
    r = run_limited(["sh", "-c", "id; ls /dev | tr '\\n' ' '; echo; ls / | tr '\\n' ' '; echo; ls /proc/driver/nvidia 2>&1 | head -3"],
                    gpu=True, timeout_s=30)
    print("inside (gpu view):", r.returncode, r.stdout.strip(), r.stderr.strip()[-300:])
PY

# ---- a sandboxed cuda gate: static + correctness + profile, plain and under compute-sanitizer
for k in vector_add tiled_matmul; do
  log "gate $k (sandboxed, cold)"
  timeout 300 bash -c "skills gate corpora/kernels/$k --executor cuda --no-cache --json > '$OUT/gate_$k.json' 2>>'$LOG'"
  log "gate $k rc=$? $(python3 -c "import json;d=json.load(open('$OUT/gate_$k.json'));print(d['verdict'],d['reason'][:300])" 2>&1)"
done
log "gate vector_add --sanitize (compute-sanitizer inside the sandbox)"
timeout 300 bash -c "skills gate corpora/kernels/vector_add --executor cuda --stages correctness --sanitize --no-cache --json > '$OUT/gate_sanitize.json' 2>>'$LOG'"
log "sanitize rc=$? $(python3 -c "import json;d=json.load(open('$OUT/gate_sanitize.json'));print(d['verdict'],d['reason'][:300])" 2>&1)"

# ---- the attack kernels of tests/fixtures/hostile on the cuda executor
log "attacks on cuda"
python3 - <<'PY' 2>&1 | tee -a "$LOG"
import json, os, shutil, socket, subprocess, sys, threading, time, uuid
from pathlib import Path
src = Path("tests/fixtures/hostile/scale")
tmp = Path("/tmp/ks-hostile-cuda"); shutil.rmtree(tmp, ignore_errors=True); tmp.mkdir()
prob = tmp / "scale"; shutil.copytree(src, prob)
target = tmp / "target"; target.mkdir()
store = tmp / "store"; (store / "cache" / "gate").mkdir(parents=True)
cpu_cache = Path.home() / ".cache" / "kernel-skills" / "cpu-runtime"; cpu_cache.mkdir(parents=True, exist_ok=True)
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(8); srv.settimeout(0.2)
accepted, done = [], threading.Event()
def loop():
    end = time.time() + 900
    while time.time() < end and not done.is_set():
        try: c, _ = srv.accept(); accepted.append(1); c.close()
        except OSError: pass
threading.Thread(target=loop, daemon=True).start()
token = uuid.uuid4().hex[:12]; secret = "s3cret-" + token
vals = {"@TOKEN@": token, "@TARGET@": str(target), "@HOME@": str(Path.home()), "@PORT@": str(srv.getsockname()[1]),
        "@CPU_CACHE@": str(cpu_cache), "@GATE_CACHE@": str(store / "cache" / "gate"), "@SECRET@": secret}
for cu in prob.glob("*.cu"):
    t = cu.read_text()
    for k, v in vals.items(): t = t.replace(k, v)
    cu.write_text(t)
env = {**os.environ, "KS_HOSTILE_SECRET": secret}
t = time.time()
r = subprocess.run([sys.executable, "-c", "import sys; from cli import app; sys.argv[0]='skills'; app()", "gate", str(prob),
                    "--all-kernels", "--executor", "cuda", "--stages", "correctness", "--seeds", "1", "--timeout", "60",
                    "--json", "--store", str(store)], env=env, capture_output=True, text=True, timeout=900)
done.set()
rows = json.loads(r.stdout) if r.stdout.strip().startswith("[") else []
leaks = {"target_files": [p.name for p in target.iterdir()], "home_marker": (Path.home() / f".ks_hostile_{token}").exists(),
         "tmp_marker": Path(f"/tmp/ks_hostile_{token}").exists(), "loopback_accepted": len(accepted),
         "cache_markers": [str(p) for p in list(cpu_cache.glob(f"ks_hostile_{token}*")) + list(store.rglob(f"ks_hostile_{token}*"))],
         "orphans": [p for p in os.listdir("/proc") if p.isdigit() and
                     Path(f"/proc/{p}/comm").exists() and Path(f"/proc/{p}/comm").read_text().strip() == "ks_hostile_orph"]}
out = {"rc": r.returncode, "wall_s": round(time.time() - t, 1), "stderr_tail": r.stderr[-2000:], "leaks": leaks,
       "results": [{"kernel": Path(x.get("kernel", "")).name, "verdict": x.get("verdict"), "reason": x.get("reason", "")[:300]}
                   for x in rows]}
Path(os.environ.get("OUT", "/tmp/ks-out"), "attacks_cuda.json").write_text(json.dumps(out, indent=2))
for x in out["results"]: print(f"  {x['kernel']}: {x['verdict']} {x['reason'][:200]}")
print("  leaks:", leaks)
PY

# ---- cost of the sandbox: cold gate of tiled_matmul, sandboxed vs not (--trust without bwrap)
log "timing: 3 cold gates each way"
python3 - <<'PY' 2>&1 | tee -a "$LOG"
import json, os, statistics, subprocess, sys, tempfile, time
from pathlib import Path
def gate(extra_env, extra_args):
    store = tempfile.mkdtemp(prefix="ks-t-")
    cmd = [sys.executable, "-c", "import sys; from cli import app; sys.argv[0]='skills'; app()", "gate",
           "corpora/kernels/tiled_matmul", "--executor", "cuda", "--json", "--store", store, *extra_args]
    t = time.perf_counter(); r = subprocess.run(cmd, env={**os.environ, **extra_env}, capture_output=True, text=True)
    cold = time.perf_counter() - t
    t = time.perf_counter(); r2 = subprocess.run(cmd, env={**os.environ, **extra_env}, capture_output=True, text=True)
    cached = time.perf_counter() - t
    d = json.loads(r.stdout) if r.stdout.strip() else {}
    return cold, cached, d.get("verdict"), d.get("wall_s")
res = {}
for name, env, args in (("sandboxed", {}, []), ("unsandboxed", {"KS_BWRAP": "none"}, ["--trust"])):
    runs = [gate(env, args) for _ in range(3)]
    res[name] = {"cold_cli_s": statistics.median(r[0] for r in runs), "cold_gate_wall_s": statistics.median(r[3] or 0 for r in runs),
                 "cached_cli_s": statistics.median(r[1] for r in runs), "verdicts": [r[2] for r in runs]}
print(json.dumps(res, indent=1))
Path(os.environ.get("OUT", "/tmp/ks-out"), "timing.json").write_text(json.dumps(res, indent=2))
PY

# ---- no sandbox: one line and exit 2 unless --trust
log "refusal without a sandbox"
env KS_BWRAP=none python3 -c "import sys; from cli import app; sys.argv[0]='skills'; app()" gate corpora/kernels/vector_add --executor cuda --stages correctness 2>&1 | tail -2 | tee -a "$LOG"
log "refusal rc=${PIPESTATUS[0]}"
log "done"
