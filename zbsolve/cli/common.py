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


def run_handler(args: argparse.Namespace) -> int:
    """Turn expected user errors into one clear line and exit code 2, not a traceback."""
    try:
        return int(args.handler(args) or 0)
    except (InstanceError, ScheduleError, FileNotFoundError, ValueError) as exc:
        print(f"zbsolve {args.command}: error: {exc}", file=sys.stderr)
        return 2
