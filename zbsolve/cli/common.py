"""Helpers shared by the subcommands: loading inputs, printing tables or JSON, clean errors."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from zbsolve.instance import Instance, InstanceError, load_instance
from zbsolve.simulate import ScheduleError


class Parser(argparse.ArgumentParser):
    """argparse with two changes: a subcommand's argument error is one line with that
    subcommand's usage (``main`` routes unrecognized arguments to it), and under ``--json`` it
    is one JSON object on stdout, like every other error (see ``report_error``)."""

    json_errors = False  # set by ``zbsolve.cli.main`` when --json is on the command line

    def error(self, message: str):  # type: ignore[override]
        usage = " ".join(self.format_usage().split())  # the subcommand's usage, on one line
        if Parser.json_errors:
            command = self.prog.split()[1] if " " in self.prog else None
            print(json.dumps({"error": message, "command": command, "usage": usage}))
            raise SystemExit(2)
        # one line, like every other zbsolve error: the problem first, then the usage
        self.exit(2, f"{self.prog}: error: {message} ({usage}; see '{self.prog} --help')\n")


class DefaultsFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" to a flag's help unless the help already says its default; flags
    that are off by default (False) or have no default (None) explain themselves in words."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (action.option_strings and default is not None and default is not False
                and default is not argparse.SUPPRESS and "default" not in text):
            text += " (default: %(default)s)"
        return text


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="machine-readable output: one JSON document on stdout (errors too: "
                             '{"error": ..., "command": ...})')


def instance_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("instance", help="instance file (YAML or JSON)")


def schedule_args(parser: argparse.ArgumentParser, schedule_help: str) -> None:
    """``[INSTANCE] SCHEDULE`` plus ``--instance``: the instance may be left out for a schedule
    that carries its own (``zbsolve solve`` output, executor tables, sweep schedule files)."""
    parser.add_argument("instance_pos", nargs="?", metavar="INSTANCE",
                        help="instance file (YAML or JSON); optional when the schedule carries "
                             "its instance")
    parser.add_argument("schedule", metavar="SCHEDULE", help=schedule_help)
    parser.add_argument("--instance", dest="instance",
                        help="instance file, as an option (same as the INSTANCE argument; default: the "
                             "one the schedule carries)")


def given_instance(args: argparse.Namespace) -> str | None:
    """The instance path from ``schedule_args`` (positional or ``--instance``; not both)."""
    pos, opt = getattr(args, "instance_pos", None), getattr(args, "instance", None)
    if pos is not None and opt is not None:
        raise ValueError("INSTANCE and --instance both given; give the instance once")
    return pos if pos is not None else opt


def load(path: str) -> Instance:
    return load_instance(path)


def step_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """``--step MODE``: evaluate with the step boundary in that mode (``zbsolve.step``)."""
    parser.add_argument("--step", choices=("none", "sync", "post-validation"), default=None,
                        help=f"{what} with the step boundary in this mode: the optimizer step, "
                             "the gradient reductions and the global norm/NaN check of the "
                             "instance's step section (default: the instance's step.mode)")


def with_step(inst: Instance, args: argparse.Namespace) -> Instance:
    """The instance in the mode ``--step`` asks for (unchanged without the flag)."""
    from zbsolve.step import StepError, for_mode

    try:
        return for_mode(inst, getattr(args, "step", None))
    except StepError as exc:
        raise InstanceError(str(exc)) from None


def instance_for(path: str | None, sched) -> Instance:
    """The instance a schedule is for: the file given, else the one the schedule carries
    (schedules written by ``zbsolve solve``, ``zbsolve sweep`` and executor tables carry theirs)."""
    if path is not None:
        return load(path)
    if "instance" not in sched.meta:
        raise ValueError(
            "--instance: required for this schedule file, which does not carry its instance "
            "(schedules written by 'zbsolve solve' or 'zbsolve sweep' and executor tables do); "
            "give the instance file"
        )
    return load_instance(sched.meta["instance"])


def schedule_and_instance(path: str, given: str | None):
    """Read a schedule file (``zbsolve.export.judge.read_schedule_file``: any kind, with its
    own communication where it has any) and the instance it is judged against: the one given,
    else the one it carries. A torch CSV's OVERLAP_F_B cells are overlapped pairs; where the
    instance allows no overlap they run as their two halves, forward first, as torch's runtime
    runs them without a custom function (``as_run_on``). Returns (file, instance)."""
    from zbsolve.export.judge import read_schedule_file

    inst = load(given) if given is not None else None
    file = read_schedule_file(path, inst)
    if inst is None:
        inst = instance_for(None, file.schedule)
        if file.kind == "torch-csv-comms":
            file = read_schedule_file(path, inst)
    return as_run_on(file, inst), inst


def as_run_on(file, inst: Instance):
    """``file`` as its compute order runs on ``inst``: a torch CSV's OVERLAP_F_B cells are
    overlapped pairs; where the instance allows no overlap they run as their two halves,
    forward first, as torch's runtime runs them without a custom function."""
    from zbsolve.schedule import unpair

    if file.kind.startswith("torch-csv") and inst.overlap is None:
        file.schedule = unpair(file.schedule)
    return file


# ---------------------------------------------------------------------- outputs
def new_output_dir(prefix: str) -> Path:
    """A folder that does not exist yet under the working directory, ``PREFIX-YYYYmmdd-HHMMSS``
    (``-2``, ``-3``, ... if taken): the default output of commands that write many files, so
    they never overwrite earlier results, the shipped ``results/`` least of all."""
    stem = f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = Path.cwd() / stem, 1
    while path.exists():
        n += 1
        path = Path.cwd() / f"{stem}-{n}"
    return path


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
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader went away (``zbsolve ... | head``)


def report_error(args: argparse.Namespace, message: str) -> None:
    """An error for the user: under ``--json`` one JSON object on stdout (so stdout always
    holds exactly one JSON document), otherwise one line on stderr."""
    if getattr(args, "json", False):
        print(json.dumps({"error": message, "command": args.command}))
    else:
        print(f"zbsolve {args.command}: error: {message}", file=sys.stderr)


def run_handler(args: argparse.Namespace) -> int:
    """Turn expected user errors into one clear line and exit code 2, not a traceback.

    Also one line: a file the system refuses to read or write (a full disk, a permission) and
    Ctrl-C (exit 130; every write is atomic, so nothing half-written is left behind). A reader
    that stops reading (``| head``) ends the command quietly, as it does any Unix tool.
    """
    try:
        return int(args.handler(args) or 0)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except (InstanceError, ScheduleError, FileNotFoundError, ValueError) as exc:
        report_error(args, _one_line(exc))
        return 2
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        report_error(args, f"{where}{exc.strerror or exc}")
        return 2
    except KeyboardInterrupt:
        report_error(args, "interrupted")
        return EXIT_INTERRUPTED


def _silence_stdout() -> None:
    """Point stdout at /dev/null: Python flushes it again at exit, and that write would
    raise BrokenPipeError once more, outside any handler."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture)
        pass


def _one_line(exc: BaseException) -> str:
    """An error's message on one line (a multi-line report keeps its first lines, joined)."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    return "; ".join(lines[:4]) + (" ..." if len(lines) > 4 else "")


def print_schedule_table(rows: list[dict], unit: str | None = None) -> None:
    """One table of schedules judged by the simulator (rows: ``name``, optional ``status``, and
    ``SimResult.summary()`` fields, or ``reason`` for a family that does not apply, which is
    listed on one line under the table instead). ``unit``: of the memory column."""
    import pandas as pd

    peak = f"peak memory ({unit})" if unit else "peak memory"

    shown = [
        {
            "schedule": r["name"],
            **({"status": r["status"]} if "status" in r else {}),
            "makespan": r["makespan"],
            "span": r["span"],
            "bubble(makespan)": r["bubble_makespan"],
            "bubble(span)": r["bubble_span"],
            peak: fmt_list(r["peak_memory"]),
            "fits memory": "yes" if r["feasible"] else "NO",
            **({"step boundary": r["step"]["boundary"]} if "step" in r else {}),
        }
        for r in rows if "reason" not in r
    ]
    with pd.option_context("display.width", 200, "display.float_format", "{:.4f}".format):
        print(pd.DataFrame(shown).to_string(index=False))
    skipped = [f"{r['name']} ({r['reason'].split(': ', 1)[-1]})" for r in rows if "reason" in r]
    if skipped:
        print("not applicable: " + "; ".join(skipped))
