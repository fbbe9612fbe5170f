#!/usr/bin/env bash
# One command, under 8 minutes: correctness check + timed run of 1F1B, ZB-H1, ZB-V and a solver
# schedule on whatever GPUs this machine has, through `zbsolve run`'s runtime.
#   2+ GPUs -> NCCL, one rank per GPU (timing run)
#   1 GPU   -> 2 gloo ranks sharing it, P2P staged through the CPU (correctness run only)
#   no GPU  -> the same on CPU (dry run of this script)
# Writes results/gpu_check/<mode>/results.md (table), results.json and one Perfetto trace per
# schedule; exits non-zero if any gradient check fails. Options: --model, --microbatches,
# --solver-time, --out, --timeout (see python -m zbsolve.runtime.check_suite --help).
#
# --torchtitan: a torchtitan training run on our schedule instead (2 GPUs, not yet run: no GPU was
# available while it was written). It needs a CUDA torch 2.13, torchtitan 0.3.0 with triton, and
# a torchtitan source checkout in TORCHTITAN_DIR (llama3_debugmodel reads its tokenizer and the
# c4_test data from tests/assets there). It solves a ZB-V-placed schedule for the debug model's
# 6 blocks ([embedding + block] [2 blocks] [2 blocks] [block + head]), exports it with
# `zbsolve export --format torchtitan` and trains 4 steps with it.
#
# --modes: the memory modes on the GPU (issue 13; not yet run: no GPU was lent while it was
# written). Profiles the tiny GPT with --modes recompute,offload on cuda (pinned D2H/H2D copy
# times and bandwidth are measured only there), then solves, exports and runs a schedule mixing
# keep, recompute and offload (results/modes/runner-p2.yaml) with `--device cuda` (pinned host
# memory, a separate copy stream, events); exits non-zero if the gradients differ. Without a GPU
# it does the same on CPU (a dry run: copies are then "not measured").
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
ZB="$(dirname "$PY")/zbsolve"
[ -x "$ZB" ] || ZB="zbsolve"
if [ "${1:-}" = "--modes" ]; then
    OUT="${OUT:-results/gpu_check/modes}"
    mkdir -p "$OUT"
    DEV=cpu
    "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" && DEV=cuda
    {
        echo "# memory modes on $DEV ($(date -u +%FT%TZ))"
        timeout 200 "$ZB" profile --layers 4 --hidden 64 --heads 4 --seq 32 --vocab 128 \
            --microbatch-size 2 --devices 2 --microbatches 4 --repeats 5 --warmup 2 \
            --device "$DEV" --modes recompute,offload -o "$OUT/profiled.yaml"
        grep -A4 -E "^(recompute|offload):" "$OUT/profiled.yaml" || true
        "$ZB" solve results/modes/runner-p2.yaml -o "$OUT/sched.json" --time-limit 10 \
            --workers 1 --deterministic
        "$ZB" export --instance results/modes/runner-p2.yaml "$OUT/sched.json" \
            --format executor -o "$OUT/table.json"
        timeout 240 "$ZB" run "$OUT/table.json" --model gpt-tiny --layers 2 --device "$DEV"
    } 2>&1 | tee "$OUT/log.txt"
    exit "${PIPESTATUS[0]}"
fi
if [ "${1:-}" = "--torchtitan" ]; then
    OUT="${OUT:-results/gpu_check/torchtitan}"
    mkdir -p "$OUT"
    "$PY" - "$OUT" <<'PYEOF'
import sys
from zbsolve.instance import load_instance
out = sys.argv[1]
inst = load_instance({"name": "llama3-debug-p2-v2", "devices": 2, "microbatches": 8, "chunks": 2,
                      "placement": "v", "times": {"F": 1.0, "I": 1.0, "W": 0.8}, "comm": 0.05,
                      "meta": {"split": [2, 2, 2, 2]}})
inst.dump(f"{out}/instance.yaml")
PYEOF
    .venv/bin/zbsolve solve "$OUT/instance.yaml" -o "$OUT/sched.json" --time-limit 20
    .venv/bin/zbsolve export "$OUT/sched.json" --format torchtitan -o "$OUT/titan"
    cd "${TORCHTITAN_DIR:?set TORCHTITAN_DIR to a torchtitan checkout (tests/assets)}"
    # shellcheck disable=SC2046
    exec timeout 470 torchrun --nproc-per-node 2 -m torchtitan.train --module llama3 \
        --config llama3_debugmodel --training.steps 4 \
        $(cat "$OLDPWD/$OUT/titan/overrides.txt")
fi
exec timeout --signal=TERM --kill-after=20 470 "$PY" -m zbsolve.runtime.check_suite "$@"
