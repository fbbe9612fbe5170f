"""Parsing the ``--limits`` list: a range ``start:stop:step`` or a comma list of numbers."""

from __future__ import annotations

import math

from zbsolve.instance import InstanceError
from zbsolve.size_limits import MAX_SWEEP_LIMITS

DIGITS = 10
"""Rounding of generated values, so 0.33 + 2*0.05 and a later sweep's 0.43 are one cache key."""


def parse_limits(text: str) -> list[float]:
    """``0.33:2.0:0.05`` (stop included when hit) or ``0.5,0.75,1``; sorted, duplicates dropped."""
    text = text.strip()
    if not text:
        raise InstanceError("--limits: empty; give start:stop:step or a comma list, e.g. 0.5,1")
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise InstanceError(
                f"--limits: {text!r} is not start:stop:step (three numbers, e.g. 0.33:2.0:0.05)"
            )
        start, stop, step = (_number(x, "--limits") for x in parts)
        if step <= 0:
            raise InstanceError(f"--limits: step must be > 0, got {step:g}")
        if stop < start:
            raise InstanceError(f"--limits: stop {stop:g} is below start {start:g}")
        count = math.floor((stop - start) / step + 1e-9) + 1
        _check_count(count)  # before listing them: 0.5:2:1e-12 would be 1.5e12 values
        values = [round(start + i * step, DIGITS) for i in range(count)]
    else:
        parts = text.split(",")
        _check_count(len(parts))
        values = [_number(x, "--limits") for x in parts]
    for x in values:
        if x <= 0:
            raise InstanceError(f"--limits: memory limits must be > 0, got {x:g}")
    return sorted(set(values))


def _check_count(count: int) -> None:
    if count > MAX_SWEEP_LIMITS:
        raise InstanceError(
            f"--limits: {count:,} limits is over the limit of {MAX_SWEEP_LIMITS:,} per sweep; "
            "use a larger step")


def parse_int_list(text: str, flag: str) -> list[int]:
    out = []
    for x in text.split(","):
        try:
            out.append(int(x))
        except ValueError:
            raise InstanceError(f"{flag}: expected comma-separated integers, got {x!r}") from None
    return out


def _number(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InstanceError(f"{flag}: expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise InstanceError(f"{flag}: expected a finite number, got {text!r}")
    return value
