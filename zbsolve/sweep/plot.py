"""The sweep picture: peak memory against step time (left axis) and bubble (right axis).

Bubble is a fixed function of step time for one model (1 - total work / (p * T)), and every layout
of a sweep keeps the model's total work, so one pair of axes shows both. Each layout's solver
front is a step line (the best step time reachable within a memory budget); hand-made schedules
are labelled markers at their own peak; the memory no schedule can fit in is shaded.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from zbsolve.sweep.front import envelope, metric_columns

_MARKERS = "osD^v<>PX*hp"


def sweep_figure(result):
    """The matplotlib Figure for ``result`` (a SweepResult).

    Object API only (no pyplot): nothing global changes, so it is safe inside a notebook's
    inline backend and in worker processes.
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    table = result.table
    step, _ = metric_columns(result.objective)
    fig = Figure(figsize=(9.5, 5.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    solved = table[(table["source"] == "solver") & table[step].notna()]
    hand = table[table["source"] == "hand-made"].drop_duplicates(["layout", "schedule"])
    x_max = float(np.nanmax(table["limit"])) if len(table) else 1.0
    x_max = max(x_max, float(np.nanmax(table["peak"])) if table["peak"].notna().any() else 0.0)

    labels: list[tuple[float, float, str, str]] = []
    for k, layout in enumerate(sorted(table["layout"].unique())):
        color = colors[k % len(colors)]
        pts = solved[solved["layout"] == layout]
        if not pts.empty:
            xs, ys = envelope(pts["peak"].tolist(), pts[step].tolist())
            ax.step(xs + [x_max], ys + [ys[-1]], where="post", color=color, lw=2,
                    label=f"solver front, {layout}")
            ax.plot(pts["peak"], pts[step], ".", color=color, ms=4, alpha=0.6)
        for j, (_, row) in enumerate(hand[hand["layout"] == layout].iterrows()):
            ax.plot(row["peak"], row[step], _MARKERS[j % len(_MARKERS)], color=color, ms=8,
                    mfc="white", mew=1.6)
            labels.append((row["peak"], row[step], row["schedule"], color))

    _label(ax, labels)
    need = table["min_limit"].dropna()
    if not need.empty:
        lo = float(need.max())
        ax.axvspan(0, lo, color="0.85", zorder=0, label=f"no schedule fits (< {lo:g})")
    ax.set_xlim(0, x_max * 1.04)
    unit = getattr(result, "memory_unit", None)
    ax.set_xlabel(f"peak memory per device ({unit or 'memory units of the instance'})")
    ax.set_ylabel(f"step time ({result.objective})")
    ax.grid(alpha=0.3)

    work = result.total_work / result.devices

    def to_bubble(t):
        t = np.asarray(t, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            return 1.0 - work / t

    def to_time(b):
        b = np.asarray(b, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            return work / (1.0 - b)

    right = ax.secondary_yaxis("right", functions=(to_bubble, to_time))
    right.set_ylabel(f"bubble rate ({result.objective})")
    ref = result.reference_peak
    if ref and math.isfinite(ref):
        top = ax.secondary_xaxis("top", functions=(lambda x: x / ref, lambda f: f * ref))
        top.set_xlabel("fraction of the 1F1B peak")
    ax.set_title(f"{result.instance}: memory vs step time; hand-made schedules as markers",
                 fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best", framealpha=0.9)
    return fig


def plot_sweep(result, path: str | Path) -> Path:
    """Draw ``result`` to ``path`` (format from the suffix: .png, .svg, ...)."""
    from zbsolve.io import atomic_path

    path = Path(path)
    with atomic_path(path) as tmp:
        sweep_figure(result).savefig(tmp, dpi=130, format=path.suffix.lstrip(".").lower())
    return path


def _label(ax, labels: list[tuple[float, float, str, str]]) -> None:
    """Name each hand-made marker, stacking the names of markers that sit close together."""
    if not labels:
        return
    x0, x1 = ax.get_xlim()
    y0, y1 = ax.get_ylim()
    xr, yr = (x1 - x0) or 1.0, (y1 - y0) or 1.0  # closeness as a share of the drawn axes
    placed: list[tuple[float, float]] = []
    for x, y, name, color in sorted(labels, key=lambda t: (t[0], t[1])):
        near = sum(1 for px, py in placed if abs(px - x) / xr < 0.08 and abs(py - y) / yr < 0.04)
        placed.append((x, y))
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(7, -3 + 10 * near),
                    fontsize=8, color=color)
