"""Pareto fronts of memory against step time, and the two questions users ask of them.

A point is (peak memory, step time). It is on the front when no other point uses no more memory
and is strictly faster, or uses strictly less memory and is no slower. Ties (the same hand-made
schedule listed under several limits) are all on the front: they are the same point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

TOL = 1e-9
METRICS = {"makespan": ("makespan", "bubble_makespan"), "span": ("span", "bubble_span")}


def metric_columns(objective: str) -> tuple[str, str]:
    """(step-time column, bubble column) that ``objective`` is judged by."""
    try:
        return METRICS[objective]
    except KeyError:
        raise ValueError(
            f"objective: expected 'makespan' or 'span', got {objective!r}"
        ) from None


def pareto_flags(peaks: Sequence[float], values: Sequence[float]) -> list[bool]:
    """For each point, whether it is on the front; NaN points (no schedule) never are."""
    idx = [i for i in range(len(peaks)) if _finite(peaks[i]) and _finite(values[i])]
    idx.sort(key=lambda i: (peaks[i], values[i]))
    flags = [False] * len(peaks)
    best_before = math.inf  # best value among strictly smaller peaks
    k = 0
    while k < len(idx):
        group = [idx[k]]
        while k + len(group) < len(idx) and peaks[idx[k + len(group)]] <= peaks[idx[k]] + TOL:
            group.append(idx[k + len(group)])
        low = min(values[i] for i in group)
        if low < best_before - TOL:
            for i in group:
                flags[i] = values[i] <= low + TOL
        best_before = min(best_before, low)
        k += len(group)
    return flags


def envelope(peaks: Sequence[float], values: Sequence[float]) -> tuple[list[float], list[float]]:
    """The front as a step function: at each front peak, the best value reachable within it."""
    flags = pareto_flags(peaks, values)
    pts = sorted({(peaks[i], values[i]) for i, f in enumerate(flags) if f})
    xs, ys = [], []
    for x, y in pts:
        if xs and abs(x - xs[-1]) <= TOL:
            continue
        xs.append(x)
        ys.append(y)
    return xs, ys


def smallest_memory_for_bubble(table: pd.DataFrame, target: float, objective: str
                               ) -> dict | None:
    """The row with the least peak memory whose bubble is at most ``target`` (None: none is)."""
    _, bubble = metric_columns(objective)
    ok = table[table[bubble].notna() & (table[bubble] <= target + TOL)]
    if ok.empty:
        return None
    return _first(ok, ["peak", bubble])


def best_bubble_under_memory(table: pd.DataFrame, memory: float, objective: str
                             ) -> dict | None:
    """The row with the smallest bubble whose peak memory fits in ``memory`` (None: none fits)."""
    _, bubble = metric_columns(objective)
    ok = table[table[bubble].notna() & (table["peak"] <= memory + TOL)]
    if ok.empty:
        return None
    return _first(ok, [bubble, "peak"])


def _first(rows: pd.DataFrame, keys: list[str]) -> dict:
    """The best row by ``keys``; on a tie a hand-made schedule wins (nothing new to deploy)."""
    rank = rows.assign(_solver=(rows["source"] == "solver") if "source" in rows else False)
    return rank.sort_values(keys + ["_solver"], kind="stable").iloc[0].drop("_solver").to_dict()


def _finite(x: float) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)
