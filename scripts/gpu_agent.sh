#!/bin/bash
# Issue 25 on one H200 (device tool): the agent tools' GPU half, and the agent benchmark's timings.
#   run with carry [".carry", ".whl"]: bash scripts/gpu_agent.sh        (needs $OUT; ~5 min)
# The tools never run code unsandboxed: without bwrap on the device, carry the Debian package
# (mkdir -p .carry/bwrap && (cd .carry/bwrap && apt-get download bubblewrap)), unpacked here as
# scripts/gpu_sandbox_check.sh does.
# Writes $OUT/profile_kernel.json   profile_kernel on corpora/kernels/softmax naive.cu and with __expf
#                                   (retrieval/agent_tools.py, the same logic the MCP/HTTP tools call)
#        $OUT/bench_agent_h200.json eval/bench_agent.py, bare arm, the scripted stand-in agent, on scale4
#                                   and softmax: naive, expert and the scripted agent's kernel gated and timed
#        $OUT/*.log                 stderr of each step
# The device image has no `mcp` SDK, so the gate/skills arms (which start the MCP server) are not run here.
set -u
cd "$(dirname "$0")/.."
source scripts/device_env.sh || { echo "device_env failed" >&2; exit 1; }
: "${OUT:?set OUT}"
if ! command -v bwrap >/dev/null; then
  deb=$(ls .carry/bwrap/bubblewrap_*.deb 2>/dev/null | head -1)
  [ -n "$deb" ] && rm -rf /tmp/ks-bwrap && dpkg -x "$deb" /tmp/ks-bwrap && export KS_BWRAP=/tmp/ks-bwrap/usr/bin/bwrap
fi
python3 -c 'from mining.gate.sandbox import isolation, isolation_problem; print("isolation:", isolation(), isolation_problem())' \
  > "$OUT/sandbox.txt" 2>&1
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader > "$OUT/gpu.txt"
uptime >> "$OUT/gpu.txt"
python3 - > "$OUT/profile_kernel.json" 2> "$OUT/profile_kernel.log" <<'PY'
import json
from pathlib import Path
from retrieval.agent_tools import ToolError, profile_kernel
p = Path("corpora/kernels/softmax")
naive = (p / "naive.cu").read_text()
out = {}
for label, src in (("naive", naive), ("naive+__expf", naive.replace("expf(", "__expf("))):
    try:
        r = profile_kernel(p, source=src, kernel="naive.cu", store=Path("/tmp/ks-agent-store"))
        out[label] = {"verdict": r["verdict"], "digest": r["digest"],
                      "device": r["stages"].get("profile", {}).get("device")}
    except ToolError as exc:
        out[label] = exc.to_dict()
print(json.dumps(out, indent=2))
PY
echo "profile_kernel: rc $?" >&2
python3 -m eval.bench_agent --arms bare --only scale4,softmax --executor cuda --budget-s 600 \
  --agent "{python} $PWD/tests/fixtures/agent_bench/scripted_agent.py --problem {problem_dir} --edits $PWD/tests/fixtures/agent_bench/edits.toml --case {case} --mcp-config {mcp_config}" \
  --out "$OUT/bench_agent_h200.json" > /dev/null 2> "$OUT/bench_agent.log"
echo "bench_agent: rc $?" >&2
