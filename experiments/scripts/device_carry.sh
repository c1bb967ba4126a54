#!/usr/bin/env bash
# The closed-loop stage of the GPU check (device_check.py --loop / --loop-only) needs, besides
# PyTorch, a few pure-Python client libraries the GPU machine may lack: pydantic (+ its compiled
# core), pyyaml, httpx and their dependencies. This copies them from this project's virtual
# environment into results/device/site (an ignored folder, ~15 MB), which the device run carries
# and device_check.py puts on sys.path. Same Python minor version and platform as the machine
# (CPython 3.11, x86_64 Linux) are assumed; numpy is expected there already (PyTorch images ship it).
#   experiments/scripts/device_carry.sh [VENV_SITE_PACKAGES]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
site="${1:-$(ls -d "$root"/.venv/lib/python3*/site-packages | head -1)}"
dest="$root/results/device/site"
rm -rf "$dest" && mkdir -p "$dest"
for pkg in pydantic pydantic_core annotated_types typing_inspection typing_extensions.py httpx httpcore h11 anyio \
           sniffio idna certifi yaml _yaml; do
  if [ -e "$site/$pkg" ]; then cp -r "$site/$pkg" "$dest/"; else echo "not in $site: $pkg" >&2; fi
done
find "$dest" -name __pycache__ -prune -exec rm -rf {} +
du -sh "$dest"
