"""Audit what the solver claims against an oracle, on random tiny instances that combine features.

Usage: python results/audit/claims.py SEED COUNT [SOLVE_SECONDS [MAX_OPS]] > OUT.jsonl

Each line of the output is one draw of ``draws.py`` (at most MAX_OPS ops, default 40) and
one objective (makespan or span, drawn). The oracle is ``tests/test_bounds.py``'s
``blind_model``: the model without heads and tails, memory precedences, microbatch order,
bound constraints or pair filtering, proven by CP-SAT (one worker, seed 0, 20 s; 60 s above
40 ops). Checked:

- ``oracle_sim``: the oracle's schedule, read back into device orders and replayed by the
  simulator, is feasible and not longer than the oracle's value (shorter would mean the model
  forbids schedules the simulator runs);
- ``analytic``: the analytic bound is at most the oracle's value;
- ``reduced``: the solver's own model (every reduction on) proves the same value; where it
  does not prove in the oracle's time, its best schedule is not shorter and its bound not
  higher (``"reduced": null`` then, with its figures under ``reduced_open``);
- ``solve``: ``solve()`` with one worker, seed 0 and SOLVE_SECONDS (default 10): its bound is at
  most the oracle's value, its schedule not shorter, and a claim of "optimal" has its value;
- ``crash``: any check raised (the finding names the exception).

A line with ``"bad": [...]`` names each check that failed; the last line counts them. The
instances whose oracle is not proven in its time are counted and skipped.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from draws import SMALL_OPS, run_draws  # noqa: E402
from ortools.sat.python import cp_model  # noqa: E402
from test_bounds import blind_model  # noqa: E402

from zbsolve.schedule import Schedule  # noqa: E402
from zbsolve.simulate import simulate  # noqa: E402
from zbsolve.solver.api import SolveOptions, solve  # noqa: E402
from zbsolve.solver.bounds import analytic_bound  # noqa: E402
from zbsolve.solver.model import build_model  # noqa: E402

TOL = 1e-6


def proven_value(sm, seconds: float) -> tuple[float | None, cp_model.CpSolver]:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = seconds
    if solver.solve(sm.model) != cp_model.OPTIMAL:
        return None, solver
    return solver.objective_value / sm.scale.time, solver


def audit(inst, objective: str, seconds: float, oracle_seconds: float) -> dict:
    out: dict = {"instance": inst.to_dict(), "objective": objective, "bad": []}
    sm = blind_model(inst, objective)
    best, solver = proven_value(sm, oracle_seconds)
    if best is None:
        out["skipped"] = f"oracle not proven in {oracle_seconds:g} s"
        return out
    out["oracle"] = best
    sim = simulate(inst, Schedule(sm.entries(solver), name="oracle"))
    out["oracle_sim"] = sim.value(objective) if sim.feasible else None
    if not sim.feasible or sim.value(objective) < best - TOL:
        out["bad"].append("oracle_sim")
    out["analytic"] = analytic_bound(inst, objective)
    if out["analytic"] > best + TOL:
        out["bad"].append("analytic")
    sm = build_model(inst, objective)
    reduced, solver = proven_value(sm, oracle_seconds)
    out["reduced"] = reduced
    if reduced is None:  # not proven in time: what it found must still be consistent
        unit, status = sm.scale.time, solver.status_name()
        value = solver.objective_value / unit if status == "FEASIBLE" else None
        bound = solver.best_objective_bound / unit if status == "FEASIBLE" else None
        out["reduced_open"] = {"status": status, "value": value, "bound": bound}
        if status == "INFEASIBLE" or (value is not None and (value < best - TOL
                                                              or bound > best + TOL)):
            out["bad"].append("reduced")
    elif abs(reduced - best) > TOL:
        out["bad"].append("reduced")
    res = solve(inst, SolveOptions(time_limit=seconds, workers=1, seed=0, objective=objective))
    out["solve"] = {"status": res.status, "value": res.objective_value,
                    "bound": res.lower_bound, "before_search": res.relaxed_bound}
    if (res.lower_bound > best + TOL or res.objective_value < best - TOL
            or (res.status == "optimal" and res.objective_value > best * (1 + 1e-4) + TOL)):
        out["bad"].append("solve")
    return out


def options(extra: list[str]):
    """SOLVE_SECONDS (default 10) and MAX_OPS (default 40; the oracle gets 20 s, above 40 ops
    60 s)."""
    seconds = float(extra[0]) if extra else 10.0
    max_ops = int(extra[1]) if len(extra) > 1 else SMALL_OPS
    oracle_seconds = 20.0 if max_ops <= SMALL_OPS else 60.0

    def one(inst, rng: random.Random) -> dict:
        return audit(inst, rng.choice(["makespan", "span"]), seconds, oracle_seconds)
    return one, max_ops


if __name__ == "__main__":
    raise SystemExit(run_draws(sys.argv[1:], __doc__.splitlines()[2], options))
