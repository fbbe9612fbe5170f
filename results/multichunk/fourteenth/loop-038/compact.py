"""Device 0 of the loop-c2 instances at 0.38 (``m*.yaml`` here) alone: a scratch model.

The other devices are replaced by the shortest delays between device 0's ops, written by hand
from the times (stage s on device s mod 8, comm on every hop): F(0) -> F(8) through F(1..7),
F(8) -> I(8) through F(9..15) and I(15..9), I(8) -> I(0) through I(7..1). Device 0 runs its six
ops per microbatch one at a time, its memory (activation 0.5 per stage, 0.183 of it freed by
W) stays within 3.04 (a cumulative), microbatches keep their order per op, and the first F
starts at 0. The objective is the last W's end, a lower bound on the instance's makespan (the
solver's relaxation of device 0, less the other devices' memory precedences).

    python compact.py M SECONDS [lb] [profile]

``lb``: CP-SAT's bound search (``lb_tree_search``). ``profile``: also the memory device 0 holds
in the solution found, integrated over its fill (to the end of its first stage-8 forwards),
its middle and its drain (its last 134 ms, where it no longer holds 3.0), against the limit.
Output of the runs cited in the README: ``compact.txt``.
"""

from __future__ import annotations

import sys

from ortools.sat.python import cp_model

SCALE = 1000  # model units per ms (every time below has at most 3 decimals)
F, I, W, COMM = 9.26, 9.045, 4.67, 0.6
LAG_FF = 7 * F + 8 * COMM  # F(0) end -> F(8) start
LAG_FI = 7 * F + 7 * I + 14 * COMM  # F(8) end -> I(8) start
LAG_II = 7 * I + 8 * COMM  # I(8) end -> I(0) start
FREED_BY_I, FREED_BY_W = 0.317, 0.183  # of each stage's 0.5
ROOM = 3.04 / (1 - 1e-9)  # the simulator's tolerance (numeric.REL_TOL)
HORIZON = 6000.0


def t(x: float) -> int:
    return int(round(x * SCALE))


def held(starts: dict[str, float], m: int, at: float) -> float:
    """What device 0 holds at ``at`` in the solution ``starts`` (ms)."""
    total = 0.0
    for j in range(m):
        for born, freed, dur, amount in (("F0", "I0", I, FREED_BY_I), ("F0", "W0", W, FREED_BY_W),
                                         ("F8", "I8", I, FREED_BY_I), ("F8", "W8", W, FREED_BY_W)):
            if starts[f"{born}.{j}"] <= at < starts[f"{freed}.{j}"] + dur:
                total += amount
    return total


def profile(starts: dict[str, float], m: int, end: float) -> str:
    """Memory-time held and left unused below the limit (3.04) on three windows."""
    fill = max(starts[f"F8.{j}"] + F for j in range(min(m, 3)))
    lines, step = [], 0.005
    for name, a, b in (("fill", 0.0, fill), ("middle", fill, end - 134.0),
                       ("drain", end - 134.0, end)):
        n = max(0, int((b - a) / step))
        area = sum(held(starts, m, a + (k + 0.5) * step) for k in range(n)) * step
        lines.append(f"  {name} [{a:.2f}, {b:.2f}): held {area:.1f}, "
                     f"unused {3.04 * (b - a) - area:.1f}")
    return "\n".join(lines)


def solve(m: int, seconds: float, bound_search: bool, show: bool = False) -> str:
    md = cp_model.CpModel()
    horizon = t(HORIZON)
    ops: dict[str, tuple] = {}

    def op(name: str, duration: float) -> tuple:
        start = md.new_int_var(0, horizon, name)
        end = md.new_int_var(0, horizon, name + ".end")
        ops[name] = (start, end, md.new_interval_var(start, t(duration), end, name + ".iv"))
        return ops[name]

    held, ends = [], []
    for j in range(m):
        f0, f8, i8, i0 = op(f"F0.{j}", F), op(f"F8.{j}", F), op(f"I8.{j}", I), op(f"I0.{j}", I)
        w8, w0 = op(f"W8.{j}", W), op(f"W0.{j}", W)
        md.add(f8[0] >= f0[1] + t(LAG_FF))
        md.add(i8[0] >= f8[1] + t(LAG_FI))
        md.add(i0[0] >= i8[1] + t(LAG_II))
        md.add(w8[0] >= i8[1])
        md.add(w0[0] >= i0[1])
        for born, freed, amount in ((f0, i0, FREED_BY_I), (f0, w0, FREED_BY_W),
                                    (f8, i8, FREED_BY_I), (f8, w8, FREED_BY_W)):
            length = md.new_int_var(0, horizon, "")
            held.append((md.new_interval_var(born[0], length, freed[1], ""),
                         int(round(amount * SCALE))))
        ends += [w8[1], w0[1]]
        if j:
            for kind in ("F0", "F8", "I8", "I0", "W8", "W0"):
                md.add(ops[f"{kind}.{j}"][0] >= ops[f"{kind}.{j - 1}"][0])
    md.add_no_overlap([iv for _, _, iv in ops.values()])
    md.add_cumulative([iv for iv, _ in held], [a for _, a in held], int(ROOM * SCALE))
    md.add(ops["F0.0"][0] == 0)
    makespan = md.new_int_var(0, horizon, "makespan")
    md.add_max_equality(makespan, ends)
    md.minimize(makespan)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.num_workers = 2
    if bound_search:
        solver.parameters.subsolvers.extend(["lb_tree_search"])
    code = solver.solve(md)
    found = code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    value = solver.objective_value / SCALE if found else None
    line = (f"{m} {solver.status_name(code)} bound {solver.best_objective_bound / SCALE} "
            f"value {value} {solver.wall_time:.1f}")
    if show and found:
        starts = {name: solver.value(v[0]) / SCALE for name, v in ops.items()}
        line += "\n" + profile(starts, m, value)
    return line


def main() -> None:
    args = sys.argv[1:]
    try:
        m, seconds = int(args[0]), float(args[1])
    except (IndexError, ValueError):
        sys.exit("usage: compact.py M SECONDS [lb] [profile]")
    flags = args[2:]
    if (len(flags) != len(set(flags)) or not set(flags) <= {"lb", "profile"} or m < 1
            or not 0 < seconds < 1e6):
        sys.exit("usage: compact.py M SECONDS [lb] [profile]")
    print(solve(m, seconds, bound_search="lb" in flags, show="profile" in flags))


if __name__ == "__main__":
    main()
