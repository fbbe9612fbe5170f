"""Timeline pictures: a Gantt chart (one row per device) with each device's memory curve below.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global backend switch), so
it works headless and from threads. The numbers in the title and on the memory panels are the
simulator's. An executor table adds its SEND/RECV actions as ticks on the device rows.

Every bar carries its microbatch number: the figure is made wide enough for the shortest op to
hold its number (written across, or up when the bar is too narrow for that), up to
``MAX_WIDTH``; past it, bars too narrow for a number are left bare and the legend says how many.
Memory is labelled with the instance's unit (``memory.unit``) when it has one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zbsolve.instance import Instance, memory_unit_label
from zbsolve.modes import COPY_KINDS
from zbsolve.ops import Pair, ops_of
from zbsolve.schedule import Schedule

KIND_COLORS = {"F": "#3b7dd8", "I": "#e8833a", "W": "#4aa564", "B": "#8e5cc2",
               "R": "#c9a227", "RS": "#e3cf7a", "O": "#7f7f7f", "L": "#3f3f3f"}
KIND_LABELS = {"F": "F forward", "I": "I input backward", "W": "W weight backward",
               "B": "B full backward", "R": "R recompute", "RS": "RS selective recompute",
               "O": "O copy out (copy stream)", "L": "L load back (copy stream)"}
_COPY_H = 0.16  # a copy-stream bar, in device rows: in the gap under its device's bars
SEND_COLOR, RECV_COLOR = "#222222", "#c0392b"
MAX_WIDTH = 40.0  # inches: wider than this a PNG stops being a picture one can look at
_AXIS_LEFT, _AXIS_RIGHT = 0.07, 0.985  # the axes' horizontal extent, as a share of the width
_BAR_H = 0.8  # bar height, in device rows


class _LabelFit:
    """Whether a bar of a given pixel width can carry a number across or upright."""

    def __init__(self, fontsize: float, dpi: int, bar_px_high: float):
        self.char_px = fontsize * dpi / 72 * 0.62  # a digit's advance, roughly
        self.line_px = fontsize * dpi / 72  # the text's height
        self.bar_px_high = bar_px_high

    def across(self, text: str, px_wide: float) -> bool:
        return px_wide >= self.char_px * len(text) + 3

    def upright(self, text: str, px_wide: float) -> bool:
        return px_wide >= self.line_px + 1 and self.bar_px_high >= self.char_px * len(text) + 3

    def min_px(self, text: str) -> float:
        """The narrowest bar that can carry ``text`` one way or the other."""
        if self.bar_px_high >= self.char_px * len(text) + 3:
            return min(self.char_px * len(text) + 3, self.line_px + 1)
        return self.char_px * len(text) + 3


def _width_for_labels(shortest: float, makespan: float, fit: _LabelFit, digits: int,
                      width: float, dpi: int) -> float:
    """The figure width (inches, ``width`` .. ``MAX_WIDTH``) at which the shortest op can carry
    a number of ``digits`` digits."""
    if shortest <= 0 or makespan <= 0:
        return width
    axis_px = makespan * (fit.min_px("8" * digits) + 0.5) / shortest  # + a rounding margin
    needed = axis_px / (dpi * (_AXIS_RIGHT - _AXIS_LEFT))
    return min(max(width, needed), max(width, MAX_WIDTH))


def _shade(color: str, chunk: int, chunks: int) -> tuple[float, float, float]:
    """Chunk 0 in the full colour, later chunks mixed towards white (up to 55%)."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    mix = 0.55 * chunk / max(chunks - 1, 1) if chunks > 1 else 0.0
    return (r + (1 - r) * mix, g + (1 - g) * mix, b + (1 - b) * mix)


def timeline_figure(
    inst: Instance, sched: Schedule, *, table: Any = None, title: str | None = None,
    width: float = 14.0, dpi: int = 120,
):
    """Build the Figure (Gantt on top, one memory panel per device below)."""
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from zbsolve.simulate import simulate

    result = simulate(inst, sched)
    p = inst.devices
    ms = result.makespan
    gantt_h = max(2.0, 0.42 * p + 0.8)
    mem_h = 0.55
    height = gantt_h + mem_h * p + 1.6
    fontsize = 7 if p <= 8 else 6
    # a row of the Gantt chart is about gantt_h / (p + 0.4) inches; a bar is _BAR_H of it
    fit = _LabelFit(fontsize, dpi, _BAR_H * gantt_h * dpi / (p + 0.4) * 0.93)
    durations = [result.end[op] - result.start[op] for op in sched.ops()]
    width = _width_for_labels(min((d for d in durations if d > 0), default=0.0), ms, fit,
                              len(str(max(inst.m - 1, 0))), width, dpi)
    fig = Figure(figsize=(width, height), dpi=dpi)
    # row 1 is an empty spacer that keeps the memory title clear of the Gantt chart
    grid = fig.add_gridspec(p + 2, 1, height_ratios=[gantt_h, 0.2] + [mem_h] * p, hspace=0.12,
                            left=_AXIS_LEFT, right=_AXIS_RIGHT, top=1 - 0.75 / height,
                            bottom=0.55 / height)
    ax = fig.add_subplot(grid[0])
    bar_h = _BAR_H
    px_per_unit = width * dpi * (_AXIS_RIGHT - _AXIS_LEFT) / ms
    kinds_seen: set[str] = set()
    unlabelled = 0
    # one collection for all bars: drawing stays linear and fast at hundreds of thousands of ops
    boxes, colors = [], []
    for d, order in enumerate(sched.orders):
        stages = inst.stages_of(d)
        chunk_of = {s: c for c, s in enumerate(stages)}
        y = p - 1 - d
        for op, half in ((o, k if isinstance(e, Pair) else None) for e in order
                         for k, o in enumerate(ops_of(e))):
            # an overlapped pair is one job: its forward on the upper half, its backward below;
            # an offload copy runs beside the compute, on the copy stream: a thin bar under it
            t0, t1 = result.start[op], result.end[op]
            h = bar_h if half is None else bar_h / 2
            y0 = y - bar_h / 2 if half in (None, 1) else y
            if op.kind in COPY_KINDS:
                h, y0 = _COPY_H, y - bar_h / 2 - _COPY_H - 0.01
            kinds_seen.add(op.kind)
            color = _shade(KIND_COLORS[op.kind], chunk_of[op.stage], len(stages))
            boxes.append(((t0, y0), (t0, y0 + h), (t1, y0 + h), (t1, y0)))
            colors.append(color)
            label, px_wide = str(op.mb), (t1 - t0) * px_per_unit
            rotation = 0 if fit.across(label, px_wide) else 90 if fit.upright(label, px_wide) \
                else None
            if rotation is None or h < bar_h:  # a pair's half bar: its number would not fit
                unlabelled += rotation is None
                continue
            lum = 0.299 * color[0] + 0.587 * color[1] + 0.114 * color[2]
            ax.text((t0 + t1) / 2, y, label, ha="center", va="center", fontsize=fontsize,
                    rotation=rotation, color="black" if lum > 0.6 else "white")
    ax.add_collection(PolyCollection(boxes, facecolors=colors, edgecolors="white",
                                     linewidths=0.4))
    if table is not None:
        for r, row in enumerate(table.actions):
            y = p - 1 - r
            sends = [a.start for a in row if a.is_send]
            recvs = [a.end for a in row if a.is_recv]
            ax.plot(sends, [y + bar_h / 2 + 0.06] * len(sends), linestyle="none", marker="v",
                    markersize=3.2, color=SEND_COLOR, zorder=3)
            ax.plot(recvs, [y - bar_h / 2 - 0.06] * len(recvs), linestyle="none", marker="^",
                    markersize=3.2, color=RECV_COLOR, zorder=3)
    ax.set_xlim(0, ms)
    ax.set_ylim(-0.7, p - 0.3)
    ax.set_yticks(range(p))
    ax.set_yticklabels([f"device {d}" for d in reversed(range(p))], fontsize=8)
    ax.tick_params(axis="x", labelbottom=False, labelsize=8)
    ax.grid(axis="x", linestyle=":", linewidth=0.5, alpha=0.6)
    handles = [Patch(facecolor=KIND_COLORS[k], label=KIND_LABELS[k]) for k in KIND_COLORS
               if k in kinds_seen]
    if inst.chunks > 1:
        handles.append(Patch(facecolor=_shade("#777777", 1, 2), label="lighter = later chunk"))
    if table is not None:
        from matplotlib.lines import Line2D

        handles += [
            Line2D([], [], linestyle="none", marker="v", color=SEND_COLOR, label="SEND"),
            Line2D([], [], linestyle="none", marker="^", color=RECV_COLOR, label="RECV done"),
        ]
    total = sum(len(order) for order in sched.orders)
    numbers = ("numbers = microbatch" if not unlabelled else
               f"numbers = microbatch ({unlabelled} ops too short to number at this width)"
               if unlabelled < total else
               f"all {total} ops too short to carry their microbatch numbers at this width")
    handles.append(Patch(facecolor="none", edgecolor="none", label=numbers))
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=len(handles),
              fontsize=8, frameon=False, borderaxespad=0.2)
    head = title or f"{sched.name} on {inst.name} (p={p}, m={inst.m}, v={inst.v})"
    unit = memory_unit_label(inst)
    in_unit = f" {unit}" if unit else ""
    fig.suptitle(
        f"{head}\nmakespan {ms:.4g}, bubble {result.bubble_makespan:.1%} (makespan) / "
        f"{result.bubble_span:.1%} (span), peak memory max {max(result.peak_memory):.4g}{in_unit}"
        + ("" if result.feasible else "  - OVER THE MEMORY LIMIT"),
        fontsize=10, y=1 - 0.08 / fig.get_figheight(), va="top",
    )

    top = max(
        max(result.peak_memory),
        max((x for x in result.limit if x is not None), default=0.0),
    ) * 1.15 or 1.0
    for d in range(p):
        mx = fig.add_subplot(grid[d + 2], sharex=ax)
        curve = result.memory_curve[d] + [(ms, result.memory_curve[d][-1][1])]
        mx.step([t for t, _ in curve], [v for _, v in curve], where="post", linewidth=1.0,
                color="#333333")
        mx.fill_between([t for t, _ in curve], [v for _, v in curve], step="post",
                        color="#999999", alpha=0.25)
        limit = result.limit[d]
        over = limit is not None and result.peak_memory[d] > limit + 1e-9
        if limit is not None:
            mx.axhline(limit, linestyle="--", linewidth=0.9, color="#c0392b")
        mx.set_ylim(0, top)
        mx.set_yticks([])
        label = f"d{d} {result.peak_memory[d]:.3g}" + (
            f"/{limit:.3g}" if limit is not None else "")
        mx.set_ylabel(label, fontsize=7, rotation=0, ha="right", va="center",
                      color="#c0392b" if over else "#333333")
        mx.tick_params(axis="x", labelbottom=d == p - 1, labelsize=8)
        mx.grid(axis="x", linestyle=":", linewidth=0.5, alpha=0.6)
        if d == 0:
            what = f"memory per device in {unit}" if unit else "memory per device"
            mx.set_title(f"{what} (peak/limit; dashed = limit)", fontsize=8, loc="left", pad=2)
    fig.axes[-1].set_xlabel("time", fontsize=8)
    return fig


def save_timeline(
    inst: Instance, sched: Schedule, path: str | Path, *, table: Any = None,
    title: str | None = None, svg: bool = False,
) -> list[Path]:
    """Write the PNG (and an SVG with the same stem when ``svg``); returns the paths written."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from zbsolve.io import atomic_path

    path = Path(path)
    fig = timeline_figure(inst, sched, table=table, title=title)
    FigureCanvasAgg(fig)
    written = [path]
    if svg and path.suffix.lower() != ".svg":
        written.append(path.with_suffix(".svg"))
    for target in written:  # each picture whole or not at all
        with atomic_path(target) as tmp:
            fig.savefig(tmp, format=target.suffix.lstrip(".").lower())
    return written
