"""Audit ``zbsolve plan`` on random models, clusters and batches.

Usage: python results/audit/plan.py SEED COUNT [TIME_LIMIT] > OUT.jsonl

Draw k of seed S (``random.Random(S * 100003 + k)``): a family (gpt, llama, mistral, qwen2,
mixtral), 2-48 layers, hidden 256-4096 with heads that divide it (and key/value heads that
divide those), sequence 512-8192, vocabulary 32000 or 128256, 1-16 GPUs of a drawn kind, a
pipeline degree that divides them (or every GPU), a global batch of 1-64, sometimes a
microbatch size, and the chunk choices 1 or 1,2; ``plan --json --time-limit TIME_LIMIT``
(default 10) in one process (``zbsolve.cli.main``). Checked: exit code 0 with a plan, 1 with
no plan and its reason, or 2 with one line (kept under ``refused`` to be read), and one JSON
document on stdout; an exception, another exit code or a plan over the limit is a finding:
the plan's peak memory must fit the usable memory it reports.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli import run  # noqa: E402 - the command line in one process, as the cli audit runs it


def draw(rng: random.Random) -> list[str]:
    hidden = rng.choice([256, 512, 1024, 2048, 4096])
    heads = rng.choice([h for h in (4, 8, 16, 32) if hidden % h == 0])
    gpus = rng.choice([1, 2, 4, 8, 16])
    argv = ["--hf", rng.choice(["gpt", "llama", "mistral", "qwen2", "mixtral"]),
            "--layers", str(rng.randint(2, 48)), "--hidden", str(hidden),
            "--heads", str(heads), "--kv-heads", str(rng.choice([h for h in (1, 2, 4, heads)
                                                                  if heads % h == 0])),
            "--seq", str(rng.choice([512, 2048, 8192])),
            "--vocab", str(rng.choice([32000, 128256])), "--gpus", str(gpus),
            "--gpu", rng.choice(["a100", "h100", "h200"]),
            "--global-batch", str(rng.randint(1, 64)), "--chunks", rng.choice(["1", "1,2"])]
    if rng.random() < 0.5:
        argv += ["--pp", str(rng.choice([d for d in (1, 2, 4, 8, 16) if gpus % d == 0]))]
    if rng.random() < 0.3:
        argv += ["--microbatch-size", str(rng.choice([1, 2, 4]))]
    return argv


def audit(argv: list[str], seconds: float) -> dict:
    bad: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        rc, out, err = run(["plan", *argv, "--time-limit", str(seconds), "--jobs", "1",
                            "--workers", "1", "-o", tmp, "--json"])
    try:
        data = json.loads(out)
    except json.JSONDecodeError:
        return {"bad": [f"exit {rc}: not one JSON document: {(out + err)[-300:]!r}"]}
    row = {"rc": rc, "error": data.get("error"), "step_time_ms": data.get("step_time_ms")}
    if rc == 0:
        peak, usable = data.get("peak_gb_max"), data.get("usable_memory_gb")
        if peak is None or usable is None or peak > usable * (1 + 1e-9):
            bad.append(f"plan over the memory: peak {peak} GB, usable {usable} GB")
    elif rc not in (1, 2):
        bad.append(f"exit {rc}: {(err or out)[-300:]}")
    return {"bad": bad, **row}


def main(argv: list[str]) -> int:
    try:
        seed, count = int(argv[0]), int(argv[1])
        seconds = float(argv[2]) if len(argv) > 2 else 10.0
    except (IndexError, ValueError):
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    tally: Counter = Counter()
    began = time.monotonic()
    for k in range(count):
        args = draw(random.Random(seed * 100003 + k))
        row = {"draw": [seed, k], "argv": args, **audit(args, seconds)}
        tally["runs"] += 1
        tally[f"exit {row.get('rc')}"] += 1
        tally["with findings"] += bool(row["bad"])
        print(json.dumps(row), flush=True)
    tally["seconds"] = round(time.monotonic() - began, 1)
    print(json.dumps({"tally": dict(tally)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
