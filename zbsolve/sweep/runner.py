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

import contextlib
import json
import math
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from zbsolve.instance import Instance, InstanceError, memory_unit_label
from zbsolve.io import atomic_write_text
from zbsolve.numeric import fits
from zbsolve.schedule import Schedule
from zbsolve.simulate import validate
from zbsolve.size_limits import MAX_SWEEP_CASES, check_size
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
LIMITED = ("1f1b-recompute-fit", "zb-h1-recompute-fit")
"""Hand-made families made for a memory limit (``zbsolve.baselines.memory_modes``)."""
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
    in_process: bool = False
    """Solve in this process instead of worker processes (jobs must be 1): for solve functions
    that cannot be pickled. Ctrl-C then works only if the solve function lets KeyboardInterrupt
    through; CP-SAT does not (it ends its search and returns), which is why the default runs
    every case in a worker process, where the sweep alone decides what an interrupt keeps."""
    modes: tuple[str, ...] | None = None  # memory modes offered (None: the instance's own)


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
    check_size("sweep cases (layouts x limits)", len(layouts) * len(pairs), MAX_SWEEP_CASES)
    cases = []
    for layout in layouts:
        base = relayout(inst, layout)
        for frac, limit in pairs:
            limited = base.with_(limit=limit)
            cases.append(Case(layout, frac, limit, limited, cache.case_key(limited, params)))
    return cases, ref


def solve_case(case: Case, params: SolverParams, solve_fn: SolveFn,
               hints: list[Schedule] | None = None
               ) -> tuple[dict[str, Any], Schedule | None, bool]:
    """Solve one case: (table row, schedule or None, whether the answer may be cached).

    An infeasible limit is an answer (cacheable); a crash or a wrong schedule is recorded and
    never cached, so a rerun tries again. Runs in a worker process: it writes nothing.
    """
    row = _case_row(case)
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
        return row, None, True
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # recorded, reported, never cached: a rerun tries again
        row.update(status="error", note=f"{type(exc).__name__}: {exc}")
        return row, None, False
    row.update(
        status=outcome.status, gap=outcome.gap, lower_bound=outcome.lower_bound,
        solve_time=outcome.solve_time, hint=outcome.hint, **_figures(sim),
    )
    return row, outcome.schedule, True


def run_case(case: Case, params: SolverParams, cache_dir: Path, solve_fn: SolveFn,
             hints: list[Schedule] | None = None) -> tuple[dict[str, Any], Schedule | None]:
    """Solve one case in this process and cache its answer (see ``solve_case``)."""
    global SOLVER_CALLS
    SOLVER_CALLS += 1
    row, schedule, cacheable = solve_case(case, params, solve_fn, hints)
    if cacheable:
        _store(cache_dir, case, row, schedule)
    return row, schedule


def _figures(sim) -> dict[str, float]:
    """The simulator's figures of a case's schedule: the only numbers a row shows."""
    return dict(makespan=sim.makespan, span=sim.max_span, bubble_makespan=sim.bubble_makespan,
                bubble_span=sim.bubble_span, peak=max(sim.peak_memory))


_NUMERIC = ("makespan", "span", "bubble_makespan", "bubble_span", "peak", "gap", "lower_bound",
            "solve_time", "min_limit")


def _store(cache_dir: Path, case: Case, row: dict[str, Any], schedule: Schedule | None) -> None:
    clean = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
    cache.write_atomic(cache_dir, case.key, {
        "row": clean, "schedule": schedule.to_dict() if schedule is not None else None})


def from_cache(case: Case, entry: dict[str, Any]) -> tuple[dict[str, Any], Schedule | None]:
    """A cache entry checked before use: its schedule is re-simulated on the case (and must
    fit its limit), the figures shown are the simulator's, an infeasible answer must say a
    smallest feasible limit above this one. Raises ValueError (a CacheEntryError) if not."""
    for k in _NUMERIC:
        value = entry["row"].get(k)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise cache.CacheEntryError(f"row.{k}: expected a number or null, got {value!r}")
    if not isinstance(entry["row"].get("status"), str):
        raise cache.CacheEntryError("row.status: expected a string")
    row = {**{k: v for k, v in entry["row"].items() if k not in _NUMERIC},
           **{k: (math.nan if entry["row"].get(k) is None else float(entry["row"][k]))
              for k in _NUMERIC}}
    row.update(_case_row(case, cached=True))
    if entry.get("schedule") is None:
        need = row.get("min_limit")
        if row.get("status") != "infeasible" or not isinstance(need, (int, float)) \
                or not need > case.limit:
            raise cache.CacheEntryError("an entry without a schedule must be an infeasible "
                                        "limit with its smallest feasible limit above it")
        return row, None
    schedule = Schedule.from_dict(entry["schedule"])
    try:
        sim = validate(case.inst, schedule)
    except ValueError as exc:
        raise cache.CacheEntryError(f"its schedule does not pass the simulator: {exc}") from None
    row.update(_figures(sim))
    return row, schedule


def run_sweep(inst: Instance, config: SweepConfig, solve_fn: SolveFn | None = None
              ) -> SweepResult:
    """Solve every case (cache first), add the hand-made schedules, mark fronts, write files."""
    solve_fn = solve_fn or solve_with_zbsolve
    if config.jobs < 1:
        raise ValueError(f"--jobs: must be >= 1, got {config.jobs}")
    if config.in_process and config.jobs != 1:
        raise ValueError("in_process: runs one case at a time (jobs must be 1)")
    if config.modes is not None:  # what the solver may choose from (and the baselines use)
        inst = inst.with_modes(config.modes)
    cases, ref = build_cases(inst, config)
    out_dir = Path(config.out_dir)
    cache_dir = out_dir / "cache"
    from zbsolve.io import check_output

    check_output(cache_dir, kind="folder", what="cache")
    rows: dict[str, dict[str, Any]] = {}
    todo: dict[str, Case] = {}
    pool = HintPool(config.params.objective)
    for case in cases:
        hit = None
        try:
            entry = cache.read(cache_dir, case.key)
            hit = from_cache(case, entry) if entry is not None else None
        except ValueError as exc:  # corrupt or wrong: say so, solve again, overwrite
            where = "" if str(exc).startswith(str(cache_dir)) else f"{cache_dir / case.key}.json: "
            print(f"zbsolve sweep: warning: ignoring cache entry ({where}{exc}); solving "
                  f"{case.layout.label} limit {case.limit:g} again", file=sys.stderr)
        if hit is not None:
            rows[case.key] = hit[0]
            if hit[1] is not None:
                pool.add(case.layout, rows[case.key], hit[1])
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
    baselines: dict[Layout | str, list] = {}
    for case in cases:  # hand-made schedules do not depend on the limit: once per layout
        if case.layout not in baselines:
            baselines[case.layout] = evaluate_baselines(relayout(inst, case.layout))
        if case.inst.recompute is not None:  # except the recompute-to-fit ones: per case
            baselines[case.key] = evaluate_baselines(case.inst, LIMITED)
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
    """Solve the cases not cached; each is cached by this process the moment it finishes.

    Ctrl-C (KeyboardInterrupt here) stops everything: the worker processes are in their own
    process group (the terminal's SIGINT does not reach them, so no CP-SAT search is cut short
    and handed back as if finished) and are terminated; what finished before is cached, what
    was running is not.
    """
    from tqdm import tqdm

    todo = sorted(todo, key=lambda c: (c.layout, c.limit))  # smaller limits hint larger ones
    total = done_already + len(todo)
    with tqdm(total=total, initial=done_already, desc="sweep", unit="case", file=sys.stderr,
              disable=not config.progress, dynamic_ncols=True) as bar:
        def finish(case: Case, row: dict[str, Any], schedule: Schedule | None,
                   cacheable: bool) -> None:
            if cacheable:
                _store(cache_dir, case, row, schedule)
            rows[case.key] = row
            if schedule is not None:
                hints.add(case.layout, row, schedule)
            if row["status"] == "error":
                bar.write(f"zbsolve sweep: {row['layout']} limit {row['limit']:g}: {row['note']}",
                          file=sys.stderr)
            bar.update(1)

        if config.in_process:
            global SOLVER_CALLS
            for case in todo:
                SOLVER_CALLS += 1
                finish(case, *solve_case(case, config.params, solve_fn, hints.hints_for(case)))
            return
        _solve_in_workers(todo, config, solve_fn, hints, finish)


def _solve_in_workers(todo: list[Case], config: SweepConfig, solve_fn: SolveFn,
                      hints: HintPool, finish: Callable[..., None]) -> None:
    # spawn, not fork: the parent may hold threads (tqdm's monitor, CP-SAT's pools).
    # Cases are submitted one per free slot, so each starts with the hints finished by then.
    global SOLVER_CALLS
    ctx = multiprocessing.get_context("spawn")
    queue = list(todo)
    while queue:
        pool = ProcessPoolExecutor(max_workers=config.jobs, mp_context=ctx,
                                   initializer=_worker_init)
        pending: dict[Any, Case] = {}
        try:
            while queue or pending:
                while queue and len(pending) < config.jobs:
                    case = queue.pop(0)
                    SOLVER_CALLS += 1
                    with _sigint_blocked():  # submit may spawn a worker
                        fut = pool.submit(solve_case, case, config.params, solve_fn,
                                          hints.hints_for(case))
                    pending[fut] = case
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    case = pending.pop(fut)
                    try:
                        result = fut.result()
                    except BrokenProcessPool:
                        # a worker died (killed, out of memory): its cases are errors, not
                        # answers; the rest go to a fresh pool
                        lost = [case, *pending.values()]
                        for c in lost:
                            row = _case_row(c)
                            row.update(status="error", note="the worker process solving it died "
                                       "(killed or out of memory)")
                            finish(c, row, None, False)
                        pending.clear()
                        break
                    finish(case, *result)
                else:
                    continue
                break  # the pool broke: start a new one for what is left
        except BaseException:
            _terminate(pool)
            raise
        pool.shutdown(wait=True)


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread while a worker may be spawned.

    A spawned worker inherits the blocked mask across exec, so a Ctrl-C that lands while it is
    still importing (before ``_worker_init`` runs) cannot print a KeyboardInterrupt traceback
    from it. The parent loses nothing: the signal stays pending here and is delivered (as
    KeyboardInterrupt) the moment the block is lifted, or at once through another thread.
    """
    import signal

    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not \
            threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _worker_init() -> None:
    """A sweep worker leaves the terminal's process group and ignores SIGINT: only the main
    process decides what an interrupt keeps (and terminates the workers)."""
    import signal

    if hasattr(os, "setpgid"):
        try:
            os.setpgid(0, 0)
        except OSError:
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stop the workers now (a running CP-SAT search is not waited for)."""
    processes = list(getattr(pool, "_processes", {}).values())  # no public handle to them
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()


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


def evaluate_baselines(inst: Instance, names: tuple[str, ...] | None = None) -> list:
    """Every applicable hand-made schedule of the (unlimited) instance, simulated (or of
    ``names`` only)."""
    from zbsolve.baselines import NAMES, evaluate_all

    return [r for r in evaluate_all(inst, names or NAMES) if r.applicable]


def _table(cases: list[Case], rows: dict[str, dict[str, Any]], baselines: dict[Layout, list],
           ref: float | None, objective: str) -> pd.DataFrame:
    records: list[dict[str, Any]] = []
    for case in cases:
        if case.key not in rows:
            continue  # interrupted before this case finished
        records.append(dict(rows[case.key]))
        records.extend(_baseline_rows(case, _hand_made(baselines, case)))
    table = pd.DataFrame.from_records(records, columns=[c for c in COLUMNS if c not in (
        "peak_fraction", "schedule_file", "on_layout_front", "on_front")])
    table["peak_fraction"] = table["peak"] / ref if ref else math.nan
    step, _ = metric_columns(objective)
    table["on_front"] = pareto_flags(table["peak"].tolist(), table[step].tolist())
    table["on_layout_front"] = False
    for _, group in table.groupby("layout"):
        flags = pareto_flags(group["peak"].tolist(), group[step].tolist())
        table.loc[group.index, "on_layout_front"] = flags
    for column in ("cached", "on_front", "on_layout_front"):  # bool even when empty (a mask)
        table[column] = table[column].astype(bool)
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
            else f"{row['schedule']}-limit-{case.limit:.10g}.json" if row["schedule"] in LIMITED
            else f"{row['schedule']}.json")
        if rel not in written:
            atomic_write_text(out_dir / rel, json.dumps(sched.to_dict(), indent=1))
            written[rel] = None
        column.append(str(rel))
    return column


def _hand_made(baselines: dict, case: Case) -> list:
    """The hand-made schedules of a case: its layout's, and those made for its limit."""
    return baselines[case.layout] + baselines.get(case.key, [])


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
    found = next((b for b in _hand_made(baselines, case) if b.name == row["schedule"]), None)
    if found is None:
        return None
    free = relayout(inst, case.layout).with_(limit=None)
    return Schedule(found.schedule.orders, name=found.name, starts=found.schedule.starts,
                    meta={**found.schedule.meta, "instance": free.to_dict()})


def _write(result: SweepResult, out_dir: Path, plot: bool) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    from zbsolve.io import atomic_path

    table_path = out_dir / "pareto.csv"
    with atomic_path(table_path) as tmp:
        result.table.to_csv(tmp, index=False, float_format="%.6g")
    front_path = out_dir / "front.csv"
    with atomic_path(front_path) as tmp:
        result.front.sort_values("peak").to_csv(tmp, index=False, float_format="%.6g")
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
