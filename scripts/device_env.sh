# Source on the GPU machine (device tool): install the carried wheels the image lacks
# (tree-sitter, tree-sitter-cuda, pydantic, duckdb; `bash scripts/device_wheels.sh` fills .whl here)
# into /tmp/site and put the repo on PYTHONPATH.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
skills() { python3 -c 'import sys; from cli import app; sys.argv[0] = "skills"; app()' "$@"; }
export -f skills
# The gate builds and runs kernels only inside bubblewrap: the GPU image has none, so a carried
# Debian package (.carry/bwrap/bubblewrap_*.deb, `apt-get download bubblewrap`) is unpacked here
# (dpkg -x, no root needed) and KS_BWRAP points at it.
if ! command -v bwrap >/dev/null && [ -z "${KS_BWRAP:-}" ]; then
  _ks_deb=$(ls .carry/bwrap/bubblewrap_*.deb 2>/dev/null | head -1)
  if [ -n "$_ks_deb" ] && rm -rf /tmp/ks-bwrap && dpkg -x "$_ks_deb" /tmp/ks-bwrap; then
    export KS_BWRAP=/tmp/ks-bwrap/usr/bin/bwrap
  else
    echo "device_env: no bwrap and no carried .carry/bwrap/bubblewrap_*.deb: the gate will refuse untrusted code" >&2
  fi
fi
