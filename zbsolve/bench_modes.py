"""The memory-modes benchmark (issue 13): the solver choosing recompute / offload per stage and
microbatch against the best hand-made schedule that fits, at memory limits below 1F1B's.

For each limit (a fraction of the 1F1B peak) every baseline is generated and simulated on the
limited instance (the ``-recompute-fit`` families depend on the limit), the best fitting one is
taken, and the solver runs with its time limit; both figures are the simulator's. Also listed:
1F1B with full recompute (Megatron's ``--recompute-granularity full``), the usual way to fit.

    python -m zbsolve.bench_modes INSTANCE --recompute R,KEPT [--offload D2H] \\
        [--fractions 0.25,0.5,...] [--time-limit S] -o results/modes
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from zbsolve.instance import Instance, load_instance
from zbsolve.io import atomic_open, atomic_write_text

FRACTIONS = (0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0)


@dataclass
class ModesPoint:
    fraction: float
    limit: float
    solver: float  # makespan, simulator's
    status: str
    gap: float
    lower_bound: float
    solve_time: float
    recomputed: int  # units the solver's schedule recomputes
    offloaded: int
    baseline: str | None  # best hand-made schedule that fits
    baseline_makespan: float | None
    full_recompute: float | None  # 1F1B with every microbatch recomputed
    vs_baseline: float | None  # 1 - solver / baseline
    vs_full_recompute: float | None


def run_point(inst: Instance, fraction: float, ref: float, time_limit: float) -> ModesPoint:
    from zbsolve.baselines import best_feasible, evaluate_all
    from zbsolve.solver.api import SolveOptions, solve

    limit = round(fraction * ref, 9)
    limited = inst.with_(limit=limit)
    hand = evaluate_all(limited)
    best = best_feasible(limited, "makespan", hand)
    full = next((r for r in hand if r.name == "1f1b-recompute" and r.applicable), None)
    t0 = time.perf_counter()
    res = solve(limited, SolveOptions(time_limit=time_limit, workers=2, seed=0))
    elapsed = time.perf_counter() - t0
    ops = list(res.schedule.ops())
    value = res.objective_value
    base = best.result.makespan if best else None
    full_t = full.result.makespan if full and full.result.feasible else None
    return ModesPoint(
        fraction=fraction, limit=limit, solver=value, status=res.status, gap=res.gap,
        lower_bound=res.lower_bound, solve_time=elapsed,
        recomputed=sum(op.kind == "R" for op in ops), offloaded=sum(op.kind == "O" for op in ops),
        baseline=best.name if best else None, baseline_makespan=base, full_recompute=full_t,
        vs_baseline=None if base is None else 1 - value / base,
        vs_full_recompute=None if full_t is None else 1 - value / full_t)


def markdown(points: list[ModesPoint]) -> str:
    head = ("| limit (x 1F1B) | solver | status | gap | solve s | R | O | best baseline that fits "
            "| its makespan | vs it | 1F1B full recompute | vs it |\n|" + "---|" * 12 + "\n")

    def pct(x):
        return "" if x is None else f"{100 * x:.1f} %"

    def num(x):
        return "" if x is None else f"{x:.2f}"

    return head + "".join(
        f"| {p.fraction:g} ({p.limit:g}) | {p.solver:.2f} | {p.status} | {100 * p.gap:.1f} % | "
        f"{p.solve_time:.0f} | {p.recomputed} | {p.offloaded} | {p.baseline or 'none fits'} | "
        f"{num(p.baseline_makespan)} | {pct(p.vs_baseline)} | {num(p.full_recompute)} | "
        f"{pct(p.vs_full_recompute)} |\n" for p in points)


def main(argv: list[str] | None = None) -> int:
    from zbsolve.sweep.layouts import reference_peak

    ap = argparse.ArgumentParser(prog="python -m zbsolve.bench_modes", description=__doc__)
    ap.add_argument("instance")
    ap.add_argument("--recompute", help="R,KEPT: recompute time (F: each stage's forward "
                    "time) and kept activation (default: the instance's)")
    ap.add_argument("--offload", type=float, help="D2H copy time (h2d the same; default: the "
                    "instance's)")
    ap.add_argument("--fractions", default=",".join(map(str, FRACTIONS)),
                    help="limits as fractions of the 1F1B peak (default: 0.25 .. 1 by 0.125)")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per point (60)")
    ap.add_argument("-o", "--out", required=True, help="output folder")
    args = ap.parse_args(argv)
    inst = load_instance(args.instance)
    changes = {}
    if args.recompute:
        R, kept = args.recompute.split(",")
        # R = F: each stage recomputes in its own forward time (the R = T_F)
        per_stage = list(inst.F[:inst.model_stages]) if R.strip() == "F" else float(R)
        changes["recompute"] = {"R": per_stage, "kept": float(kept)}
    if args.offload is not None:
        changes["offload"] = {"d2h": args.offload}
    inst = inst.with_(**changes) if changes else inst
    ref = reference_peak(inst)
    points = []
    for f in (float(x) for x in args.fractions.split(",")):
        points.append(run_point(inst, f, ref, args.time_limit))
        print(markdown(points[-1:]).splitlines()[-1], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = [asdict(p) for p in points]
    with atomic_open(out / "points.csv", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    atomic_write_text(out / "table.md", markdown(points))
    atomic_write_text(out / "command.txt", "python -m zbsolve.bench_modes "
                      + " ".join(sys.argv[1:] if argv is None else argv) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
