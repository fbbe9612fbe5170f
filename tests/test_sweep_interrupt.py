"""Ctrl-C on a sweep: everything stops, only finished cases are cached, the partial tables are
written, the exit code is 130, and no traceback (also with --jobs 2).

Each test runs ``zbsolve sweep`` in its own session and sends SIGINT to the whole process group,
as a terminal does on Ctrl-C.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import INSTANCES, make_instance

TESTS = Path(__file__).resolve().parent
DRIVER = """
import sys
sys.path.insert(0, {tests!r})
import sweep_stand_ins
from zbsolve.sweep import runner
runner.solve_with_zbsolve = sweep_stand_ins.slow_except_smallest
from zbsolve.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _wait_for(predicate, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _interrupt(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str]:
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("the sweep did not stop after Ctrl-C") from None
    return proc.returncode, err


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("jobs", [1, 2])
def test_ctrl_c_stops_everything_and_keeps_only_finished_cases(tmp_path, jobs):
    inst = make_instance(p=3, m=4, activation=1.0, weight=0.5, name="tiny")
    path = tmp_path / "tiny.yaml"
    inst.dump(path)
    out, marks = tmp_path / "out", tmp_path / "marks"
    marks.mkdir()
    argv = ["sweep", str(path), "--absolute", "--limits", "3,4,5", "-o", str(out),
            "--no-progress", "--no-plot", "--jobs", str(jobs), "--workers", "1"]
    env = {**os.environ, "ZBSOLVE_TEST_MARKS": str(marks)}
    proc = subprocess.Popen([sys.executable, "-c", DRIVER.format(tests=str(TESTS)), *argv],
                            env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, start_new_session=True)
    _wait_for(lambda: len(list(marks.glob("running-*"))) >= 1, 120, "a slow case to start")
    _wait_for(lambda: any((out / "cache").glob("*.json")), 120, "the fast case to be cached")
    t0 = time.monotonic()
    code, err = _interrupt(proc)
    assert time.monotonic() - t0 < 30, "stopping must not wait for the running cases"
    assert code == 130, err
    assert "Traceback" not in err and "BrokenProcessPool" not in err, err
    assert "interrupted; 2 case(s) not done" in err
    # only the finished case (limit 3) is cached; the partial table lists it
    entries = [json.loads(p.read_text()) for p in (out / "cache").glob("*.json")]
    assert [e["row"]["limit"] for e in entries] == [3.0]
    assert not list((out / "cache").glob(".*"))  # no temporary file left behind
    solver_rows = [r for r in csv.DictReader((out / "pareto.csv").open())
                   if r["source"] == "solver"]
    assert [(r["layout"], r["chunks"], r["placement"], r["limit"]) for r in solver_rows] == [
        ("c1", "1", "loop", "3")]
    for mark in marks.glob("running-*"):  # the worker that was solving is gone
        pid = int(mark.name.split("-")[1])
        _wait_for(lambda pid=pid: not _alive(pid), 10, f"worker {pid} to exit")


def test_ctrl_c_during_a_real_cp_sat_solve_caches_nothing_cut_short(tmp_path):
    """CP-SAT ends its search on SIGINT and returns as if finished: that answer must not be
    cached under the full time limit's key (the worker never sees the SIGINT)."""
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "zbsolve.cli", "sweep", str(INSTANCES / "hetero-p8-m24.yaml"),
            "--limits", "0.5", "--time-limit", "60", "--workers", "1", "-o", str(out),
            "--no-progress", "--no-plot"]
    driver = "import sys; from zbsolve.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", driver, *argv[3:]], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, start_new_session=True)
    time.sleep(8)  # the worker starts and is solving (the case needs the full minute)
    code, err = _interrupt(proc)
    assert code == 130 and "Traceback" not in err, err
    for entry in (out / "cache").glob("*.json"):  # a finished case only: optimal or timed out
        row = json.loads(entry.read_text())["row"]
        assert row["status"] == "optimal" or row["solve_time"] >= 59, row


def _blocked_signals() -> list[int]:
    return sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, set()))


def test_a_worker_is_born_with_sigint_blocked():
    """A Ctrl-C that lands while a spawned worker still imports zbsolve (before its initializer
    ignores SIGINT) must not print a KeyboardInterrupt traceback from it: the worker inherits a
    blocked SIGINT from the submit, and the parent gets its mask back afterwards."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from zbsolve.sweep.runner import _sigint_blocked

    before = _blocked_signals()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        with _sigint_blocked():
            fut = pool.submit(_blocked_signals)
        assert int(signal.SIGINT) in fut.result(timeout=120)
    assert _blocked_signals() == before
