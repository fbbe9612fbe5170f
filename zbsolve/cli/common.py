"""Helpers shared by the subcommands: loading inputs, printing tables or JSON, clean errors."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from zbsolve.instance import Instance, InstanceError, load_instance
from zbsolve.simulate import ScheduleError


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output on stdout")


def instance_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("instance", help="instance file (YAML or JSON)")


def load(path: str) -> Instance:
    return load_instance(path)


def instance_for(path: str | None, sched) -> Instance:
    """The instance a schedule is for: the file given, else the one the schedule carries
    (schedules written by ``zbsolve solve`` and executor tables carry theirs)."""
    if path is not None:
        return load(path)
    if "instance" not in sched.meta:
        raise ValueError(
            "--instance: required for this schedule file (only schedules written by "
            "'zbsolve solve' and executor tables carry their instance)"
        )
    return load_instance(sched.meta["instance"])


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 6)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def print_json(obj: Any) -> None:
    print(json.dumps(_clean(obj), indent=1))


def fmt_list(values: list, digits: int = 3) -> str:
    return "[" + ", ".join("-" if v is None else f"{v:.{digits}g}" for v in values) + "]"


EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


def run_handler(args: argparse.Namespace) -> int:
    """Turn expected user errors into one clear line and exit code 2, not a traceback.

    Also one line: a file the system refuses to read or write (a full disk, a permission) and
    Ctrl-C (exit 130; every write is atomic, so nothing half-written is left behind).
    """
    try:
        return int(args.handler(args) or 0)
    except (InstanceError, ScheduleError, FileNotFoundError, ValueError) as exc:
        print(f"zbsolve {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"zbsolve {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"zbsolve {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _one_line(exc: BaseException) -> str:
    """An error's message on one line (a multi-line report keeps its first lines, joined)."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    return "; ".join(lines[:4]) + (" ..." if len(lines) > 4 else "")


def print_schedule_table(rows: list[dict]) -> None:
    """One table of schedules judged by the simulator (rows: ``name``, optional ``status``, and
    ``SimResult.summary()`` fields, or ``reason`` for a family that does not apply, which is
    listed on one line under the table instead)."""
    import pandas as pd

    shown = [
        {
            "schedule": r["name"],
            **({"status": r["status"]} if "status" in r else {}),
            "makespan": r["makespan"],
            "span": r["span"],
            "bubble(makespan)": r["bubble_makespan"],
            "bubble(span)": r["bubble_span"],
            "peak memory": fmt_list(r["peak_memory"]),
            "fits memory": "yes" if r["feasible"] else "NO",
        }
        for r in rows if "reason" not in r
    ]
    with pd.option_context("display.width", 200, "display.float_format", "{:.4f}".format):
        print(pd.DataFrame(shown).to_string(index=False))
    skipped = [f"{r['name']} ({r['reason'].split(': ', 1)[-1]})" for r in rows if "reason" in r]
    if skipped:
        print("not applicable: " + "; ".join(skipped))
