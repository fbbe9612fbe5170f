"""Running a sweep: every (layout, limit) case solved once, in parallel, cached as it finishes.

The main process builds the cases, answers what it can from the cache, and hands the rest to a
pool of worker processes (CP-SAT holds the GIL-free part of the work, but its Python model
building does not, so threads would not help). Each worker writes its case's cache file the
moment the case is done, which is what lets an interrupted sweep keep its finished work.
Hand-made schedules do not depend on the limit, so each layout's are generated once here and
listed under every limit they fit.

Hints chain the cases of one layout: a schedule found for one limit is feasible under every limit
at or above its peak, so each case is handed the best finished schedule of its layout that fits
(from this run or the cache) as a CP-SAT hint, and the solver never returns anything worse than
its hint. Cases run in ascending limit order, so with ``--jobs 1`` a sweep is deterministic and
its per-limit results are monotone; with more jobs a case gets what has finished when it starts.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import sys
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from zbsolve.files import write_text_atomic
from zbsolve.instance import Instance, InstanceError, memory_unit_label
from zbsolve.numeric import fits
from zbsolve.schedule import Schedule
from zbsolve.simulate import validate
from zbsolve.sweep import cache
from zbsolve.sweep.front import metric_columns, pareto_flags
from zbsolve.sweep.layouts import Layout, layouts_for, reference_peak, relayout
from zbsolve.sweep.limits import DIGITS

SOLVER_CALLS = 0
"""Solver calls made in this process (the cache test reads it: a cache hit makes none)."""

COLUMNS = [
    "layout", "chunks", "placement", "segments", "limit_fraction", "limit", "schedule", "source", "status",
    "makespan", "span", "bubble_makespan", "bubble_span", "peak", "peak_fraction", "gap",
    "lower_bound", "solve_time", "hint", "min_limit", "cached", "note", "schedule_file",
    "on_layout_front", "on_front",
]
SCHEDULES = "schedules"
"""Sub-folder of the output with one schedule file per point (``schedule_file`` column)."""


@dataclass(frozen=True)
class SolverParams:
    """What is handed to ``zbsolve.solver.solve`` for every case (and keys the cache)."""

    time_limit: float = 60.0
    gap: float = 0.0
    workers: int = 2
    seed: int = 0
    objective: str = "makespan"
    method: str = "auto"

    def __post_init__(self) -> None:
        metric_columns(self.objective)  # validates the name
        if not self.time_limit > 0:
            raise ValueError(f"--time-limit: must be > 0 seconds, got {self.time_limit}")
        if self.workers < 1:
            raise ValueError(f"--workers: must be >= 1, got {self.workers}")
        if self.gap < 0:
            raise ValueError(f"--gap: must be >= 0, got {self.gap}")


@dataclass
class CaseOutcome:
    """What a solve function returns for one case (the solver's SolveResult, reduced)."""

    schedule: Schedule
    status: str
    gap: float = math.nan
    lower_bound: float = math.nan
    solve_time: float = math.nan
    hint: str | None = None


SolveFn = Callable[[Instance, SolverParams, list[Schedule]], CaseOutcome]
"""(instance with its limit, parameters, hint schedules that fit) -> outcome; raises an
InstanceError with ``.min_limit`` when the limit is below what any schedule needs."""


def solve_with_zbsolve(inst: Instance, params: SolverParams, hints: list[Schedule]
                       ) -> CaseOutcome:
    """The default solve function: zbsolve's CP-SAT solver, quiet."""
    from zbsolve.solver import SolveOptions, solve

    res = solve(inst, SolveOptions(
        time_limit=params.time_limit, gap=params.gap, workers=params.workers, seed=params.seed,
        objective=params.objective, method=params.method, progress=False,
    ), hints=hints)
    return CaseOutcome(
        schedule=res.schedule, status=str(res.status), gap=_num(res.gap),
        lower_bound=_num(res.lower_bound), solve_time=_num(res.solve_time),
        hint=getattr(res, "baseline", None) and str(getattr(res.baseline, "name", res.baseline)),
    )


@dataclass(frozen=True)
class Case:
    layout: Layout
    fraction: float | None  # of the reference peak; None for absolute limits
    limit: float
    inst: Instance  # re-cut to the layout, with the limit on every device
    key: str


@dataclass
class SweepConfig:
    limits: list[float]
    out_dir: Path
    absolute: bool = False
    chunks: list[int] | None = None
    placements: list[str] | None = None
    segments: list[int] | None = None  # sequence segment counts (a layout dimension)
    params: SolverParams = field(default_factory=SolverParams)
    jobs: int = 1
    progress: bool = True
    plot: bool = True


@dataclass
class SweepResult:
    table: pd.DataFrame
    objective: str
    reference_peak: float | None
    total_work: float
    devices: int
    instance: str
    stats: dict[str, int]
    files: dict[str, str]
    interrupted: bool = False
    memory_unit: str | None = None  # of peak and limit columns (None: the instance names none)

    @property
    def front(self) -> pd.DataFrame:
        return self.table[self.table["on_front"]]


def build_cases(inst: Instance, config: SweepConfig) -> tuple[list[Case], float | None]:
    layouts = layouts_for(inst, config.chunks, config.placements, config.segments)
    ref = None
    try:
        ref = reference_peak(inst)
    except InstanceError:
        if not config.absolute:
            raise
    if config.absolute:
        pairs = [(None, x) for x in config.limits]
    else:
        pairs = [(f, round(f * ref, DIGITS)) for f in config.limits]
    params = asdict(config.params)
    cases = []
    for layout in layouts:
        base = relayout(inst, layout)
        for frac, limit in pairs:
            limited = base.with_(limit=limit)
            cases.append(Case(layout, frac, limit, limited, cache.case_key(limited, params)))
    return cases, ref


def run_case(case: Case, params: SolverParams, cache_dir: Path, solve_fn: SolveFn,
             hints: list[Schedule] | None = None) -> tuple[dict[str, Any], Schedule | None]:
    """Solve one case and cache it; an infeasible limit is an answer (cached), a crash is not.

    Returns the table row and the schedule (None when there is none).
    """
    global SOLVER_CALLS
    SOLVER_CALLS += 1
    row = _case_row(case)
    schedule = None
    try:
        outcome = solve_fn(case.inst, params, list(hints or []))
        sim = validate(case.inst, outcome.schedule)  # the simulator's figures, and a re-check
    except InstanceError as exc:
        min_limit = getattr(exc, "min_limit", None)
        if min_limit is None:
            raise
        need = max(min_limit) if isinstance(min_limit, (list, tuple)) else float(min_limit)
        row.update(status="infeasible", min_limit=need,
                   note=f"limit {case.limit:g} is below the smallest feasible limit {need:g}")
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # recorded, reported, never cached: a rerun tries again
        row.update(status="error", note=f"{type(exc).__name__}: {exc}")
        return row, None
    else:
        schedule = outcome.schedule
        row.update(
            status=outcome.status, makespan=sim.makespan, span=sim.max_span,
            bubble_makespan=sim.bubble_makespan, bubble_span=sim.bubble_span,
            peak=max(sim.peak_memory), gap=outcome.gap, lower_bound=outcome.lower_bound,
            solve_time=outcome.solve_time, hint=outcome.hint,
        )
    cache.write_atomic(cache_dir, case.key, {
        "row": row, "schedule": schedule.to_dict() if schedule is not None else None,
    })
    return row, schedule


def run_sweep(inst: Instance, config: SweepConfig, solve_fn: SolveFn | None = None
              ) -> SweepResult:
    """Solve every case (cache first), add the hand-made schedules, mark fronts, write files."""
    solve_fn = solve_fn or solve_with_zbsolve
    if config.jobs < 1:
        raise ValueError(f"--jobs: must be >= 1, got {config.jobs}")
    cases, ref = build_cases(inst, config)
    out_dir = Path(config.out_dir)
    cache_dir = out_dir / "cache"
    rows: dict[str, dict[str, Any]] = {}
    todo: dict[str, Case] = {}
    pool = HintPool(config.params.objective)
    for case in cases:
        hit = cache.read(cache_dir, case.key)
        if hit is not None:
            rows[case.key] = {**hit["row"], **_case_row(case, cached=True)}
            if hit.get("schedule"):
                pool.add(case.layout, rows[case.key], Schedule.from_dict(hit["schedule"]))
        else:
            todo.setdefault(case.key, case)
    if config.jobs * config.params.workers > (os.cpu_count() or 1):
        print(f"zbsolve sweep: warning: --jobs {config.jobs} x --workers "
              f"{config.params.workers} threads exceed the {os.cpu_count()} CPUs",
              file=sys.stderr)
    interrupted = False
    try:
        _solve_all(list(todo.values()), config, cache_dir, solve_fn, rows, pool,
                   len(cases) - len(todo))
    except KeyboardInterrupt:
        interrupted = True
    baselines: dict[Layout, list] = {}
    for case in cases:  # hand-made schedules do not depend on the limit: once per layout
        if case.layout not in baselines:
            baselines[case.layout] = evaluate_baselines(relayout(inst, case.layout))
    table = _table(cases, rows, baselines, ref, config.params.objective)
    table["schedule_file"] = _write_schedules(inst, cases, table, baselines, cache_dir, out_dir)
    stats = {
        "cases": len(cases),
        "solved": sum(1 for k in todo if k in rows),
        "cached": sum(1 for c in cases if rows.get(c.key, {}).get("cached")),
        "infeasible": sum(1 for r in rows.values() if r["status"] == "infeasible"),
        "errors": sum(1 for r in rows.values() if r["status"] == "error"),
        "missing": sum(1 for c in cases if c.key not in rows),
    }
    result = SweepResult(
        table=table, objective=config.params.objective, reference_peak=ref,
        total_work=inst.total_work, devices=inst.devices, instance=inst.name, stats=stats,
        files={}, interrupted=interrupted, memory_unit=memory_unit_label(inst),
    )
    _write(result, out_dir, config.plot)
    return result


class HintPool:
    """Finished schedules per layout, to hint later cases with the best one that fits."""

    def __init__(self, objective: str):
        self.step, _ = metric_columns(objective)
        self.found: dict[Layout, list[tuple[float, float, Schedule]]] = {}

    def add(self, layout: Layout, row: dict[str, Any], schedule: Schedule) -> None:
        value = row.get(self.step)
        if value is None or not math.isfinite(value):
            return
        named = Schedule(schedule.orders, name=f"sweep@{row['limit']:g}")
        self.found.setdefault(layout, []).append((row["peak"], value, named))

    def hints_for(self, case: Case) -> list[Schedule]:
        usable = [(v, pk, s) for pk, v, s in self.found.get(case.layout, [])
                  if fits(pk, case.limit)]
        return [min(usable, key=lambda t: (t[0], t[1]))[2]] if usable else []


def _solve_all(todo: list[Case], config: SweepConfig, cache_dir: Path, solve_fn: SolveFn,
               rows: dict[str, dict[str, Any]], hints: HintPool, done_already: int) -> None:
    from tqdm import tqdm

    todo = sorted(todo, key=lambda c: (c.layout, c.limit))  # smaller limits hint larger ones
    total = done_already + len(todo)
    with tqdm(total=total, initial=done_already, desc="sweep", unit="case", file=sys.stderr,
              disable=not config.progress, dynamic_ncols=True) as bar:
        def finish(case: Case, row: dict[str, Any], schedule: Schedule | None) -> None:
            rows[case.key] = row
            if schedule is not None:
                hints.add(case.layout, row, schedule)
            if row["status"] == "error":
                bar.write(f"zbsolve sweep: {row['layout']} limit {row['limit']:g}: {row['note']}",
                          file=sys.stderr)
            bar.update(1)

        if config.jobs == 1:
            for case in todo:
                finish(case, *run_case(case, config.params, cache_dir, solve_fn,
                                       hints.hints_for(case)))
            return
        # spawn, not fork: the parent may hold threads (tqdm's monitor, CP-SAT's pools).
        # Cases are submitted one per free slot, so each starts with the hints finished by then.
        ctx = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(max_workers=config.jobs, mp_context=ctx)
        queue = list(todo)
        pending: dict[Any, Case] = {}
        try:
            while queue or pending:
                while queue and len(pending) < config.jobs:
                    case = queue.pop(0)
                    fut = pool.submit(run_case, case, config.params, cache_dir, solve_fn,
                                      hints.hints_for(case))
                    pending[fut] = case
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    case = pending.pop(fut)
                    finish(case, *fut.result())
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)


def _case_row(case: Case, cached: bool = False) -> dict[str, Any]:
    return {
        "layout": case.layout.label, "chunks": case.layout.chunks,
        "placement": case.layout.placement, "segments": case.layout.segments,
        "limit_fraction": case.fraction, "limit": case.limit,
        "schedule": "solver", "source": "solver", "status": "", "makespan": math.nan,
        "span": math.nan, "bubble_makespan": math.nan, "bubble_span": math.nan,
        "peak": math.nan, "gap": math.nan, "lower_bound": math.nan, "solve_time": math.nan,
        "hint": None, "min_limit": math.nan, "cached": cached, "note": "",
    } if not cached else {
        # identity fields come from the case, not the file: a renamed layout stays right
        "layout": case.layout.label, "chunks": case.layout.chunks,
        "placement": case.layout.placement, "segments": case.layout.segments,
        "limit_fraction": case.fraction, "limit": case.limit,
        "cached": True,
    }


def _baseline_rows(case: Case, baselines: list) -> list[dict[str, Any]]:
    out = []
    for b in baselines:
        peaks = b.result.peak_memory
        if not all(fits(pk, case.limit) for pk in peaks):
            continue
        row = _case_row(case)
        row.update(
            schedule=b.name, source="hand-made", status="hand-made",
            makespan=b.result.makespan, span=b.result.max_span,
            bubble_makespan=b.result.bubble_makespan, bubble_span=b.result.bubble_span,
            peak=max(peaks),
        )
        out.append(row)
    return out


def evaluate_baselines(inst: Instance) -> list:
    """Every applicable hand-made schedule of the (unlimited) instance, simulated."""
    from zbsolve.baselines import evaluate_all

    return [r for r in evaluate_all(inst) if r.applicable]


def _table(cases: list[Case], rows: dict[str, dict[str, Any]], baselines: dict[Layout, list],
           ref: float | None, objective: str) -> pd.DataFrame:
    records: list[dict[str, Any]] = []
    for case in cases:
        if case.key not in rows:
            continue  # interrupted before this case finished
        records.append(dict(rows[case.key]))
        records.extend(_baseline_rows(case, baselines[case.layout]))
    table = pd.DataFrame.from_records(records, columns=[c for c in COLUMNS if c not in (
        "peak_fraction", "schedule_file", "on_layout_front", "on_front")])
    table["peak_fraction"] = table["peak"] / ref if ref else math.nan
    step, _ = metric_columns(objective)
    table["on_front"] = pareto_flags(table["peak"].tolist(), table[step].tolist())
    table["on_layout_front"] = False
    for _, group in table.groupby("layout"):
        flags = pareto_flags(group["peak"].tolist(), group[step].tolist())
        table.loc[group.index, "on_layout_front"] = flags
    table["cached"] = table["cached"].astype(bool)
    return table[[c for c in COLUMNS if c != "schedule_file"]]


def _write_schedules(inst: Instance, cases: list[Case], table: pd.DataFrame,
                     baselines: dict[Layout, list], cache_dir: Path, out_dir: Path
                     ) -> list[str | None]:
    """One schedule file per point of the table, so every row can be checked, drawn or
    exported (``zbsolve check``, ``show``, ``export`` take it without an instance: each file
    carries the instance it was judged on: the case's, with its limit, for the solver's; the
    layout's without a limit for a hand-made one, which is listed under every limit it fits).
    Returns the ``schedule_file`` column: paths relative to ``out_dir``, None for a case with
    no schedule (infeasible, error)."""
    by_point = {(c.layout.label, c.limit): c for c in cases}
    written: dict[Path, None] = {}
    column: list[str | None] = []
    for _, row in table.iterrows():
        case = by_point.get((row["layout"], row["limit"]))
        sched = None if case is None else _point_schedule(inst, case, row, baselines, cache_dir)
        if sched is None:
            column.append(None)
            continue
        rel = Path(SCHEDULES) / case.layout.label / (
            f"solver-limit-{case.limit:.10g}.json" if row["source"] == "solver"
            else f"{row['schedule']}.json")
        if rel not in written:
            write_text_atomic(out_dir / rel, json.dumps(sched.to_dict(), indent=1))
            written[rel] = None
        column.append(str(rel))
    return column


def _point_schedule(inst: Instance, case: Case, row: pd.Series, baselines: dict[Layout, list],
                    cache_dir: Path) -> Schedule | None:
    """The schedule behind one row, carrying its instance (None when the row has none)."""
    if row["source"] == "solver":
        hit = cache.read(cache_dir, case.key)
        if not hit or not hit.get("schedule"):
            return None
        sched = Schedule.from_dict(hit["schedule"])
        sched.meta = {**sched.meta, "instance": case.inst.to_dict()}
        return sched
    found = next((b for b in baselines[case.layout] if b.name == row["schedule"]), None)
    if found is None:
        return None
    free = relayout(inst, case.layout).with_(limit=None)
    return Schedule(found.schedule.orders, name=found.name, starts=found.schedule.starts,
                    meta={**found.schedule.meta, "instance": free.to_dict()})


def _write(result: SweepResult, out_dir: Path, plot: bool) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    table_path = out_dir / "pareto.csv"
    result.table.to_csv(table_path, index=False, float_format="%.6g")
    front_path = out_dir / "front.csv"
    result.front.sort_values("peak").to_csv(front_path, index=False, float_format="%.6g")
    result.files = {"table": str(table_path), "front": str(front_path)}
    if plot:
        from zbsolve.sweep.plot import plot_sweep

        for ext in ("png", "svg"):
            path = out_dir / f"pareto.{ext}"
            plot_sweep(result, path)
            result.files[ext] = str(path)


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan
