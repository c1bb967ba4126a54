#!/usr/bin/env bash
# GPU check of the measured profiler: on one H200 with PyTorch preinstalled (no network, no
# other packages), profile llama-3.2-1b and qwen2.5-7b shapes (bf16, random weights, TP1)
# at full depth and as 1-/2-layer fingerprints, compare with the analytic model, then time the
# operators of Llama-2-7B/70B layers at TP 1-8 (vidur's mlp.csv format), and write rows_*.jsonl,
# ops_mlp.csv, summary.md/json (and parquet when pandas+pyarrow exist) to OUT.
#
#   experiments/scripts/device_check.sh [OUT_DIR] [--device cuda|cpu] [--tiny] [--budget-s S] [--loop|--loop-only]
#   OUT_DIR defaults to $OUT. CPU test of the script: device_check.sh DIR --device cpu --tiny
#
# Hard limit 470 s (the check must finish within 8 minutes); the script itself stops
# measuring after --budget-s (default 400 s) and writes what it has. Afterwards, on a
# machine with the project installed:
#   python -m profiler convert OUT/rows_torch.jsonl --out results/profiles/h200-torch.parquet
#   python -m profiler validate --measured results/profiles/h200-torch.parquet
#   python -m profiler calibrate-vidur --ops h200=OUT/ops_mlp.csv   # operator constants of h200
#
# Closed loop (simulator vs live servers on this GPU, harness/closedloop.py), as a second call so
# the profile keeps its budget; first, here: experiments/scripts/device_carry.sh (client libraries
# into results/device/site, carried with the run):
#   experiments/scripts/device_check.sh "$OUT/loop" --loop-only      # loop_summary.md, loop/closed_loop.json
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
command -v "$py" >/dev/null || py=python
exec timeout --signal=TERM --kill-after=10 470 "$py" "$here/device_check.py" "$@"
