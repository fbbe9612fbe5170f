"""Units the profiler writes, and the parser for ``--memory-limit`` (no torch here)."""

from __future__ import annotations

MIB = float(1 << 20)
TIME_UNIT = "ms"
MEMORY_UNIT = "MiB"

_UNITS = {"B": 1.0, "KiB": 1024.0, "MiB": MIB, "GiB": float(1 << 30), "KB": 1e3, "MB": 1e6,
          "GB": 1e9}


def parse_size(text: str | float | int) -> float:
    """Bytes from '512MiB', '4GiB', '1e9B', or a plain number read in MiB.

    A plain number is MiB because MiB is the unit the profiler writes memory in, so the value in
    the instance's ``memory.limit`` equals what was typed.
    """
    if isinstance(text, bool):
        raise ValueError(f"memory limit: expected a size such as 512MiB, got {text!r}")
    if isinstance(text, (int, float)):
        value, unit = float(text), "MiB"
    else:
        s = str(text).strip()
        unit = next((u for u in sorted(_UNITS, key=len, reverse=True) if s.endswith(u)), "")
        number = s[: len(s) - len(unit)].strip() if unit else s
        unit = unit or "MiB"
        try:
            value = float(number)
        except ValueError:
            raise ValueError(
                f"--memory-limit: cannot read {text!r}; write a number with a unit, e.g. 512MiB "
                "or 4GiB (a plain number is MiB)"
            ) from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"--memory-limit: must be a finite size > 0, got {text!r}")
    return value * _UNITS[unit]


def round_significant(x: float, digits: int) -> float:
    """``x`` to ``digits`` significant digits (never rounds a positive time to zero)."""
    if digits < 1:
        raise ValueError(f"--round: expected a number of significant digits >= 1, got {digits}")
    if x == 0:
        return 0.0
    return float(f"{x:.{digits}g}")
