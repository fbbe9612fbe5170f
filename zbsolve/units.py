"""Memory sizes with units: ``2GiB``, ``80GB``, ``512MiB``, ``1e9B``.

An instance may write any memory value with a unit; the instance then records one unit
(``memory.unit``) and holds every value as a number in it, so the solver and the simulator keep
working on plain numbers. Binary units are powers of 1024, decimal ones powers of 1000, as
their names say (80GB is 74.5GiB). Parsing is strict: the unit must be one of ``SIZE_UNITS``,
spelled as there (``gb`` or ``Gb`` is an error, not a guess).
"""

from __future__ import annotations

import math
import re

SIZE_UNITS: dict[str, float] = {
    "B": 1.0,
    "KiB": float(1 << 10), "MiB": float(1 << 20), "GiB": float(1 << 30), "TiB": float(1 << 40),
    "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


class SizeError(ValueError):
    """A size that cannot be read; the message says what is expected (the caller adds the
    field's name)."""


def units_list() -> str:
    return ", ".join(SIZE_UNITS)


def check_unit(unit: str) -> str:
    if unit not in SIZE_UNITS:
        raise SizeError(f"unknown memory unit {unit!r}; expected one of {units_list()}")
    return unit


def parse_size(text: str) -> tuple[float, str]:
    """``'2GiB'`` -> ``(2.0, 'GiB')``. A number without a unit is an error here: what a plain
    number means is the caller's decision."""
    match = _SIZE.match(text)
    if not match:
        raise SizeError(
            f"cannot read {text!r} as a size; write a number and a unit, e.g. 512MiB, 2GiB or "
            f"80GB (units: {units_list()})")
    number, unit = match.groups()
    if not unit:
        raise SizeError(f"{text!r} has no unit; write e.g. {number}GiB (units: {units_list()})")
    check_unit(unit)
    value = float(number)
    if not math.isfinite(value):
        raise SizeError(f"{text!r} is not a finite size")
    return value, unit


def convert(value: float, from_unit: str, to_unit: str) -> float:
    """``value`` in ``from_unit`` expressed in ``to_unit``."""
    if from_unit == to_unit:
        return value
    return value * SIZE_UNITS[check_unit(from_unit)] / SIZE_UNITS[check_unit(to_unit)]
