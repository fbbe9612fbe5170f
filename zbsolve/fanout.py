"""Fan-out: run independent cases in worker processes or on a Ray cluster, one outcome each.

``run(tasks, jobs=2)`` runs each ``Task`` (a module-level function and its arguments, so it
pickles) and returns a ``FanoutResult`` with one ``Outcome`` per task, in task order, whatever
happened to it:

- ``ok``: the function returned (``value``); ``error``: it raised (the exception's type and
  message, not the traceback); ``died``: its worker process was killed or crashed (only that
  case is lost: a fresh worker takes the next case); ``timeout``: it was still running at the
  hard deadline and was stopped; ``skipped``: never started (pruned by ``prepare``, or no
  time left before the deadline); ``interrupted``: running or queued when Ctrl-C came.

Backends. ``inline``: in this process, one at a time (no isolation: for tests and debugging);
``local``: ``jobs`` worker processes (spawn context: safe when the parent holds threads, as
tqdm and CP-SAT do), each ignoring SIGINT so that Ctrl-C reaches only the parent, which then
stops the workers and returns what finished; ``ray``: ``ray.remote`` tasks with no retries
(a dead worker is that case's loss, reported as ``died``), on the cluster at ``address`` or on a
local Ray started here (and shut down again) when none is running; Ray is imported only then.

Time. ``deadline`` (a ``time.monotonic()`` value) is a hard wall-clock end: nothing starts after
it, and a task still running ``grace`` seconds past it is stopped (its process terminated, or
its Ray task force-cancelled). A task with ``time_limit`` gets
``kwargs["time_limit"] = min(time_limit, seconds left before the deadline)`` when it starts, so
a solver can plan to end in time instead of being stopped.

Dynamic cases. ``prepare(task) -> Task | None`` runs in the parent just before a task starts,
with every earlier outcome already passed to ``on_outcome``: return the task (its arguments may
be updated, e.g. with a hint found by a finished case) or None to skip it (e.g. pruned by a
bound). ``on_outcome(outcome)`` runs in the parent as each task ends.

Several runs can share their workers: ``with Executor(jobs=2) as pool: pool.start(preload=
("zbsolve.solver",)); pool.run(phase1); pool.run(phase2)`` starts the processes (or connects to
Ray) once, and ``preload`` imports modules in every worker before the first task's clock starts.

For ``zbsolve sweep`` (not wired yet): one ``Task(case.key, run_case, (case, params, cache_dir,
solve_fn, []))`` per case, ``prepare`` replacing the hints with ``HintPool.hints_for(case)``,
``on_outcome`` doing what ``finish`` does today; an interrupted run is ``result.interrupted``.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

BACKENDS = ("inline", "local", "ray")
STATUSES = ("ok", "error", "died", "timeout", "skipped", "interrupted")


@dataclass(frozen=True)
class Task:
    key: str
    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    time_limit: float | None = None  # seconds; passed as kwargs["time_limit"] (see module doc)


@dataclass
class Outcome:
    key: str
    status: str  # one of STATUSES
    value: Any = None
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class FanoutResult:
    outcomes: list[Outcome]  # one per task, in task order
    interrupted: bool = False
    backend: str = "local"

    def by_key(self) -> dict[str, Outcome]:
        return {o.key: o for o in self.outcomes}

    def counts(self) -> dict[str, int]:
        return {s: sum(o.status == s for o in self.outcomes) for s in STATUSES}


class _Run:
    """What every backend shares: the queue, the deadline, progress and the outcome table."""

    def __init__(self, tasks: list[Task], deadline: float | None, grace: float,
                 prepare: Callable[[Task], Task | None] | None,
                 on_outcome: Callable[[Outcome], None] | None, progress: bool, desc: str):
        keys = [t.key for t in tasks]
        if len(set(keys)) != len(keys):
            raise ValueError("tasks: every task needs a distinct key")
        self.order = keys
        self.queue: deque[Task] = deque(tasks)
        self.deadline, self.grace = deadline, grace
        self.prepare, self.on_outcome = prepare, on_outcome
        self.done: dict[str, Outcome] = {}
        self.bar = None
        if progress:
            from tqdm import tqdm

            self.bar = tqdm(total=len(tasks), desc=desc, unit="case", file=sys.stderr,
                            dynamic_ncols=True)

    def left(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def finish(self, outcome: Outcome) -> None:
        self.done[outcome.key] = outcome
        if self.bar is not None:
            self.bar.update(1)
            if outcome.status not in ("ok", "skipped"):
                self.bar.write(f"{outcome.key}: {outcome.status} {outcome.error}".rstrip(),
                               file=sys.stderr)
        if self.on_outcome is not None:
            self.on_outcome(outcome)

    def next_task(self) -> Task | None:
        """The next task to start (prepared, with its time limit), skipping what cannot run."""
        while self.queue:
            task = self.queue.popleft()
            if self.left() <= 0:
                self.finish(Outcome(task.key, "skipped", error="no time left before the deadline"))
                continue
            if self.prepare is not None:
                prepared = self.prepare(task)
                if prepared is None:
                    self.finish(Outcome(task.key, "skipped", error="pruned"))
                    continue
                task = prepared
            if task.time_limit is not None:
                limit = min(task.time_limit, self.left())
                task = replace(task, kwargs={**task.kwargs, "time_limit": limit})
            return task
        return None

    def result(self, interrupted: bool, backend: str) -> FanoutResult:
        for task in self.queue:
            self.done.setdefault(task.key, Outcome(task.key, "interrupted" if interrupted
                                                   else "skipped"))
        self.queue.clear()
        if self.bar is not None:
            self.bar.close()
        outcomes = [self.done.get(k, Outcome(k, "interrupted")) for k in self.order]
        return FanoutResult(outcomes, interrupted, backend)


class Executor:
    """Workers kept across several runs: a plan's phases share one set of worker processes
    (or one Ray connection) instead of starting them per phase. Use as a context manager;
    ``close`` stops the workers (and shuts down a Ray started here)."""

    def __init__(self, jobs: int = 1, backend: str = "local", address: str | None = None):
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"--jobs: expected an integer >= 1, got {jobs!r}")
        self.jobs, self.backend, self.address = jobs, backend, address
        self.workers: list[_Worker] = []
        self.ray: Any = None
        self.ray_started_here = False
        self.remote: Any = None

    def __enter__(self) -> Executor:
        return self

    def start(self, preload: tuple[str, ...] = (), timeout: float = 120.0) -> None:
        """Start every local worker now and have it import ``preload`` first, so that the
        first tasks' time limits are not spent on interpreter start-up and imports."""
        if self.backend != "local":
            return
        ctx = multiprocessing.get_context("spawn")
        while len(self.workers) < self.jobs:
            self.workers.append(_Worker(ctx, tuple(preload)))
        for w in self.workers:
            w.wait_ready(timeout)

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for w in self.workers:
            w.stop()
        self.workers.clear()
        if self.ray is not None and self.ray_started_here:
            self.ray.shutdown()
        self.ray = None

    def run(self, tasks: Iterable[Task], *, deadline: float | None = None, grace: float = 5.0,
            prepare: Callable[[Task], Task | None] | None = None,
            on_outcome: Callable[[Outcome], None] | None = None, progress: bool = False,
            desc: str = "cases") -> FanoutResult:
        """Run every task; see the module docstring. Ctrl-C returns the finished outcomes
        with ``interrupted=True`` after the running cases are stopped."""
        state = _Run(list(tasks), deadline, grace, prepare, on_outcome, progress, desc)
        runner = {"inline": _run_inline, "local": _run_local, "ray": _run_ray}[self.backend]
        interrupted = False
        try:
            runner(state, self)
        except KeyboardInterrupt:
            interrupted = True
        return state.result(interrupted, self.backend)


def run(tasks: Iterable[Task], *, jobs: int = 1, backend: str = "local",
        address: str | None = None, **kwargs: Any) -> FanoutResult:
    """One run on workers started for it and stopped after (``Executor.run``'s keywords)."""
    with Executor(jobs, backend, address) as executor:
        return executor.run(tasks, **kwargs)


# ---------------------------------------------------------------------------- inline
def _call(task: Task) -> Outcome:
    t0 = time.perf_counter()
    try:
        value = task.fn(*task.args, **task.kwargs)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # an error is the case's outcome, never the run's end
        return Outcome(task.key, "error", error=f"{type(exc).__name__}: {exc}",
                       seconds=time.perf_counter() - t0)
    return Outcome(task.key, "ok", value, seconds=time.perf_counter() - t0)


def _run_inline(state: _Run, ex: Executor) -> None:
    while (task := state.next_task()) is not None:
        state.finish(_call(task))


# ---------------------------------------------------------------------------- local
def _worker_main(conn, preload: tuple[str, ...] = ()) -> None:
    """A worker process: import ``preload``, say so, then run tasks sent over ``conn`` until
    told to stop (None)."""
    import importlib

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    for name in preload:
        importlib.import_module(name)
    conn.send("ready")
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        outcome = _call(task)
        try:
            conn.send(outcome)
        except Exception as exc:  # e.g. a value that does not pickle
            conn.send(Outcome(task.key, "error", error=f"result not sendable: {exc}",
                              seconds=outcome.seconds))


class _Worker:
    def __init__(self, ctx, preload: tuple[str, ...] = ()):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, preload), daemon=True)
        self.proc.start()
        child.close()
        self.task: Task | None = None
        self.started = 0.0
        self.ready = False

    def wait_ready(self, timeout: float) -> bool:
        """Block until the worker has imported its preload (False if it died or is late)."""
        if not self.ready and self.conn.poll(timeout):
            try:
                self.ready = self.conn.recv() == "ready"
            except (EOFError, OSError):
                return False
        return self.ready

    def start(self, task: Task) -> None:
        self.wait_ready(60.0)
        self.task, self.started = task, time.perf_counter()
        self.conn.send(task)

    def stop(self, timeout: float = 2.0) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(None)
            except (OSError, ValueError):
                pass
            self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def _run_local(state: _Run, ex: Executor) -> None:
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    workers, jobs = ex.workers, ex.jobs
    try:
        while True:
            idle = [w for w in workers if w.task is None]
            while state.queue:
                if not idle and len(workers) < jobs:
                    workers.append(_Worker(ctx))
                    idle = [workers[-1]]
                if not idle:
                    break
                task = state.next_task()
                if task is None:
                    break
                idle.pop().start(task)
            busy = [w for w in workers if w.task is not None]
            if not busy:
                return
            timeout = min(1.0, max(state.left() + state.grace, 0.0))
            wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout)
            for w in busy:
                _collect(state, w, workers)
            if state.left() + state.grace <= 0:
                for w in [w for w in workers if w.task is not None]:
                    _kill(state, w, workers, "timeout", "stopped at the deadline")
    except BaseException:  # Ctrl-C (or a failing callback): stop what runs, keep the rest
        for w in [w for w in workers if w.task is not None]:
            state.finish(Outcome(w.task.key, "interrupted",
                                 seconds=time.perf_counter() - w.started))
            w.task = None
            w.proc.kill()
            w.stop(timeout=1.0)
            workers.remove(w)
        raise


def _collect(state: _Run, w: _Worker, workers: list[_Worker]) -> None:
    """Take a finished worker's outcome, or note that it died (a fresh worker is started for
    the next task)."""
    try:
        if w.conn.poll():
            outcome = w.conn.recv()
            w.task = None
            state.finish(outcome)
            return
    except (EOFError, OSError):
        pass
    if not w.proc.is_alive():
        code = w.proc.exitcode
        _kill(state, w, workers, "died", f"worker process ended (exit code {code})")


def _kill(state: _Run, w: _Worker, workers: list[_Worker], status: str, why: str) -> None:
    task = w.task
    w.task = None
    if w.proc.is_alive():
        w.proc.kill()
    w.stop(timeout=1.0)
    workers.remove(w)
    state.finish(Outcome(task.key, status, error=why, seconds=time.perf_counter() - w.started))


# ---------------------------------------------------------------------------- ray
def _ray_call(task: Task) -> Outcome:
    return _call(task)


def _ray_connect(ex: Executor):
    """Ray, connected once per executor (a local Ray is started when none is running)."""
    if ex.ray is None:
        try:
            import ray
        except ImportError:
            raise ValueError("--ray: Ray is not installed; pip install 'zbsolve[ray]'") from None
        ex.ray_started_here = not ray.is_initialized()
        if ex.ray_started_here:
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if ex.address:
                kwargs["address"] = ex.address
            else:
                kwargs["num_cpus"] = ex.jobs
            ray.init(**kwargs)
        ex.ray = ray
        ex.remote = ray.remote(num_cpus=1, max_retries=0)(_ray_call)
    return ex.ray, ex.remote


def _run_ray(state: _Run, ex: Executor) -> None:
    ray, remote = _ray_connect(ex)
    jobs = ex.jobs
    inflight: dict[Any, tuple[Task, float]] = {}
    try:
        while True:
            while state.queue and len(inflight) < jobs:
                task = state.next_task()
                if task is None:
                    break
                inflight[remote.remote(task)] = (task, time.perf_counter())
            if not inflight:
                return
            timeout = min(1.0, max(state.left() + state.grace, 0.0))
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=timeout)
            for ref in ready:
                task, t0 = inflight.pop(ref)
                state.finish(_ray_outcome(ray, ref, task, t0))
            if state.left() + state.grace <= 0:
                for ref, (task, t0) in list(inflight.items()):
                    ray.cancel(ref, force=True)
                    del inflight[ref]
                    state.finish(Outcome(task.key, "timeout", error="stopped at the deadline",
                                         seconds=time.perf_counter() - t0))
    except BaseException:
        for ref, (task, t0) in inflight.items():
            ray.cancel(ref, force=True)
            state.finish(Outcome(task.key, "interrupted", seconds=time.perf_counter() - t0))
        raise


def _ray_outcome(ray, ref, task: Task, t0: float) -> Outcome:
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:  # raised on the worker, outside the task
        cause = getattr(exc, "cause", None) or exc
        first = (str(cause).splitlines() or [""])[0]
        return Outcome(task.key, "error", error=f"{type(cause).__name__}: {first}",
                       seconds=time.perf_counter() - t0)
    except ray.exceptions.RayError as exc:  # worker crashed or was killed
        return Outcome(task.key, "died", error=f"{type(exc).__name__}",
                       seconds=time.perf_counter() - t0)
