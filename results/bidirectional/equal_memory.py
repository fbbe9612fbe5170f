"""Issue 12: two replicas vs one copy in V at equal total memory per device, and DualPipeV's
break-even F&B against ZB-V. Writes equal_memory.md next to this file.

    .venv/bin/python results/bidirectional/equal_memory.py
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from zbsolve.bench_bidirectional import break_even, equal_memory_rows
from zbsolve.io import atomic_write_text

HERE = Path(__file__).resolve().parent


def main() -> None:
    t0, load = time.time(), os.getloadavg()[0]
    lines = ["# Two replicas vs one copy (V) at equal total memory; DualPipeV's break-even F&B", "",
             "Command: `.venv/bin/python results/bidirectional/equal_memory.py` "
             f"(run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
             f"{load:.1f} at the start, 2 cores; solver 30 s, 2 workers, seed 0).", ""]
    for p, m in ((4, 16), (8, 32)):
        rows = equal_memory_rows(p=p, m=m, fb=0.8)
        lines += [f"## p = {p}, m = {m}, F&B = 0.8 (F + B); limit = DualPipe's own peak "
                  "(both weight copies counted)", "",
                  "| layout | schedule | makespan | peak (total) | status | gap |",
                  "|---|---|---:|---:|---|---:|"]
        for r in rows:
            gap = f"{100 * r['gap']:.2f} %" if "gap" in r else ""
            status = r.get("status", "fits" if r.get("fits", True) else "does NOT fit")
            lines.append(f"| {r['layout']} | {r['schedule']} | {r['makespan']:.2f} | "
                         f"{r['peak_total']:.3g} | {status} | {gap} |")
        lines.append("")
    lines += ["## Break-even F&B (DualPipeV with pairs vs ZB-V, unlimited memory)", "",
              "| ranks | m | ZB-V makespan | break-even x | F&B at break-even (ms) | F + B (ms) |",
              "|---:|---:|---:|---:|---:|---:|"]
    for R, m in ((4, 16), (8, 32)):
        b = break_even(R, m)
        lines.append(f"| {R} | {m} | {b['zb_v_makespan']:.2f} | {b['break_even_x']:.4f} | "
                     f"{b['break_even_fb_ms']:.2f} | {b['F_plus_B_ms']:.2f} |")
    lines += ["", f"Wall time {time.time() - t0:.0f} s."]
    atomic_write_text(HERE / "equal_memory.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
