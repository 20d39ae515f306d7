# Source on the GPU machine (device tool): install the carried wheels the image lacks
# (tree-sitter, tree-sitter-cuda, pydantic) into /tmp/site and put the repo on PYTHONPATH.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
skills() { python3 -c 'import sys; from cli import app; sys.argv[0] = "skills"; app()' "$@"; }
export -f skills
