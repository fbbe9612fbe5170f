"""Argument types for the subcommands' flags: each refuses, at parse time and with the flag's
name, a value the command would otherwise accept silently (``--rtol -1``, ``--nproc 0``) or
crash on later (``--seed 2147483648`` overflows CP-SAT's 32-bit seed)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from zbsolve.size_limits import MAX_SEED


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer in [low, high]."""

    def parse(text: str) -> int:
        value = _integer(text)
        if value < low or (high is not None and value > high):
            span = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise argparse.ArgumentTypeError(f"expected an integer {span}, got {value}")
        return value

    parse.__name__ = f"int>={low}"
    return parse


def number(low: float | None = None, *, strict: bool = False,
           high: float | None = None) -> Callable[[str], float]:
    """A finite number >= low (> low when ``strict``), and <= high when given."""

    def parse(text: str) -> float:
        value = _number(text)
        if low is not None and (value <= low if strict else value < low):
            raise argparse.ArgumentTypeError(
                f"expected a number {'>' if strict else '>='} {low:g}, got {value:g}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"expected a number <= {high:g}, got {value:g}")
        return value

    parse.__name__ = "number"
    return parse


positive_int = int_at_least(1)
nonneg_int = int_at_least(0)
seed = int_at_least(0, MAX_SEED)
positive_number = number(0.0, strict=True)
nonneg_number = number(0.0)
seconds = number(0.0, strict=True)


def margin_fraction(text: str) -> float:
    """``--memory-margin``: a share of each memory limit to keep free, in [0, 1)."""
    value = _number(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(
            f"expected a fraction in [0, 1) of each memory limit to keep free, got {text}")
    return value


def torch_device(text: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N``: the devices the profiler and the runner drive."""
    value = text.strip()
    head, _, index = value.partition(":")
    if head == "cpu" and not index or head == "cuda" and (not index or index.isdigit()):
        return value
    raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")
