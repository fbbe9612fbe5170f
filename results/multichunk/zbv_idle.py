"""Where a V schedule's devices wait, against the analytic bound (issue 18, ZB-V rows).

Per device: its span, its work, and its idle split into the warm-up (before the device's first
I), the middle, and the cool-down (after its last F); with the bound's warm-up term for the span
(``memory_end_bounds`` minus the device's head minus the work), so one can read whether the
gap between a schedule and the bound is the warm-up the bound already counts or later waits.

    python results/multichunk/zbv_idle.py zbsolve/data/instances/zbv-arxiv/zbv-6.2b-p16-m48.yaml
    python results/multichunk/zbv_idle.py --p 4 --m 16 --solve 300   # 6.2B times, limit 2p

Without ``--solve`` it reads the published ZB-V (``zb-v``); with it, the solver's schedule
after that many seconds (2 workers, seed 0, span objective).
"""

from __future__ import annotations

import argparse

from zbsolve.baselines import generate
from zbsolve.graph import TaskGraph
from zbsolve.instance import Instance, load_instance
from zbsolve.ops import Kind
from zbsolve.simulate import simulate
from zbsolve.solver import bounds


def six_b_times(p: int, m: int) -> Instance:
    """The 6.2B ZB-V row's per-chunk times and memory (limit 2p) at another p and m."""
    return load_instance({
        "name": f"zbv-6.2b-times-p{p}-m{m}", "devices": p, "microbatches": m, "chunks": 2,
        "placement": "v", "times": {"F": 14.41, "I": 14.38, "W": 9.68}, "comm": 1.61,
        "memory": {"activation": 1, "weight": 0.432, "limit": 2 * p}})


def idle_split(inst: Instance, sched) -> list[dict]:
    sim = simulate(inst, sched)
    heads = TaskGraph(inst).device_heads()
    ends = bounds.memory_end_bounds(inst)
    rows = []
    for d, row in enumerate(sched.orders):
        ops = sorted(row, key=lambda o: sim.start[o])
        first_i = min(sim.start[o] for o in ops if o.kind == Kind.I)
        last_f = max(sim.end[o] for o in ops if o.kind == Kind.F)
        parts = {"warm-up": 0.0, "middle": 0.0, "cool-down": 0.0}
        for a, b in zip(ops, ops[1:]):
            wait = sim.start[b] - sim.end[a]
            if wait > 1e-9:
                at = sim.end[a]
                part = ("warm-up" if at < first_i else "cool-down" if at >= last_f
                        else "middle")
                parts[part] += wait
        work = inst.device_work(d)
        warm_term = None if ends[d] is None else ends[d] - heads[d] - work
        rows.append({"device": d, "span": sim.span[d], "work": work, **parts,
                     "bound warm-up term": warm_term})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instance", nargs="?")
    ap.add_argument("--p", type=int)
    ap.add_argument("--m", type=int)
    ap.add_argument("--solve", type=float, help="seconds for the solver (default: read zb-v)")
    args = ap.parse_args()
    inst = load_instance(args.instance) if args.instance else six_b_times(args.p, args.m)
    if args.solve:
        from zbsolve.solver import SolveOptions, solve

        res = solve(inst, SolveOptions(time_limit=args.solve, workers=2, seed=0,
                                       objective="span", progress=False))
        sched = res.schedule
        print(f"solver: {res.status} span {res.objective_value:.2f} "
              f"bound {res.lower_bound:.2f} gap {100 * res.gap:.2f} %")
    else:
        sched = generate("zb-v", inst)
    print(f"analytic span bound {bounds.analytic_bound(inst, 'span'):.2f}")
    print("| device | span | work | warm-up idle | middle idle | cool-down idle | "
          "bound's warm-up term |")
    print("|---|---|---|---|---|---|---|")
    for r in idle_split(inst, sched):
        term = "-" if r["bound warm-up term"] is None else f"{r['bound warm-up term']:.2f}"
        print(f"| {r['device']} | {r['span']:.2f} | {r['work']:.2f} | {r['warm-up']:.2f} | "
              f"{r['middle']:.2f} | {r['cool-down']:.2f} | {term} |")


if __name__ == "__main__":
    main()
