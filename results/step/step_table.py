"""Step time under each step mode, every schedule family and the solver (zbsolve.step_report).

Run from the repository root (16 solves of TIME_LIMIT s each, 2 CP-SAT workers, seed 0):
    .venv/bin/python results/step/step_table.py [TIME_LIMIT]      # default 30
It writes results/step/step_table.csv and results/step/step_table.md (atomically); the md starts
with this command line and the machine's load average at the start and the end.
"""

import os
import sys
import time
from pathlib import Path

from zbsolve.instance import load_instance
from zbsolve.io import atomic_write_text
from zbsolve.step_report import csv_text, family_rows, layouts, markdown, solver_rows

TIME_LIMIT = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
OUT = Path(__file__).resolve().parent
# The ZB paper's 1.5B GPT (ms per stage), memory unlimited (the step is the question here).
# Step figures are assumptions, not measurements: AdamW on ~190M fp32 parameters per stage moves
# ~28 bytes per parameter, ~3.5 ms at ~1.5 TB/s; the global check (the local norm pass plus a
# scalar all-reduce over 8 ranks) 0.5 ms; no data parallelism (allreduce 0), as the paper's runs.
STEP = {"optimizer": 3.5, "allreduce": 0.0, "check": 0.5}


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


base = load_instance("instances/zb-iclr/1.5b-p8-m24.yaml").with_(limit=None, step=STEP)
load_start, t0 = load(), time.perf_counter()
rows = []
for layout, inst in layouts(base).items():
    rows += family_rows(layout, inst)
    rows += solver_rows(layout, inst, TIME_LIMIT)
wall = time.perf_counter() - t0
command = "  ".join(["    .venv/bin/python results/step/step_table.py", *sys.argv[1:]])
md = (f"# Step time by step mode: {base.name}, step {STEP}, memory unlimited\n\n"
      f"Command (repository root):\n\n{command}\n\n"
      f"Solver: {TIME_LIMIT:g} s per solve, 2 workers, seed 0. Whole run {wall:.0f} s wall on "
      f"the shared 2-core machine; load average (1/5/15 min) {load_start} at the start, "
      f"{load()} at the end.\n\n" + markdown(rows))
atomic_write_text(OUT / "step_table.csv", csv_text(rows))
atomic_write_text(OUT / "step_table.md", md)
print(md)
