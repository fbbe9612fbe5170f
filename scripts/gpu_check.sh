#!/usr/bin/env bash
# One command, under 8 minutes: correctness check + timed run of 1F1B, ZB-H1, ZB-V and a solver
# schedule on whatever GPUs this machine has, through `zbsolve run`'s runtime.
#   2+ GPUs -> NCCL, one rank per GPU (timing run)
#   1 GPU   -> 2 gloo ranks sharing it, P2P staged through the CPU (correctness run only)
#   no GPU  -> the same on CPU (dry run of this script)
# Writes results/gpu_check/<mode>/results.md (table), results.json and one Perfetto trace per
# schedule; exits non-zero if any gradient check fails. Options: --model, --microbatches,
# --solver-time, --out, --timeout (see python -m zbsolve.runtime.check_suite --help).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
exec timeout --signal=TERM --kill-after=20 470 "$PY" -m zbsolve.runtime.check_suite "$@"
