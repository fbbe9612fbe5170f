"""Measured timelines: per-action clocks on each rank, and what rank 0 makes of them.

Each rank stamps every action of its program (perf_counter on CPU, CUDA events on GPU, so GPU
time is device time, not launch time), relative to its own step start taken right after a
barrier. Rank 0 gathers the stamps and reports, per op kind, the mean measured time and the
measured / predicted ratio, the step time, and a Perfetto trace that shows the measured and the
predicted timelines side by side.

Predicted times are in the instance's unit (ms for profiled instances, abstract units for the
teaching ones), so two ratios are given: ``raw`` (measured ms / predicted units: meaningful
when the instance was profiled in ms on this machine) and ``calibrated`` (after scaling the
prediction so its total compute equals the measured total compute: says whether the *shape*
of the timeline, i.e. the relative costs and the bubbles, was predicted right).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

import torch

KINDS = ("F", "I", "W", "B", "R")  # compute-stream jobs (R: a memory mode's recompute)
COPY_KINDS = ("O", "L")  # offload's copies: on CUDA the stamp is the issue on the copy stream
BOUNDARY_KINDS = ("OPT", "CHECK", "NORM", "VERDICT", "REDO")
"""The step boundary's stamps (``zbsolve.runtime.step_boundary``): optimizer steps, the global
check, the partial-state chain, the verdict's return, rollbacks with their redone steps."""
PAIR = "OVERLAP_F_B"  # an overlapped F&B action; its halves have rows of their own (in_pair)


class Clock:
    """Stamps on the device's own timeline; resolved to ms relative to ``begin()``."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._origin: Any = None

    def mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def begin(self) -> None:
        self._origin = self.mark()

    def ms(self, stamp: Any) -> float:
        """Milliseconds since ``begin()`` (CUDA: call after a synchronize)."""
        if self.cuda:
            return float(self._origin.elapsed_time(stamp))
        return (stamp - self._origin) * 1e3


@dataclass
class Timing:
    """One executed action of one rank in one step."""

    rank: int
    step: int
    index: int  # position in the rank's action list
    kind: str  # F I W B OVERLAP_F_B SEND_F RECV_F SEND_B RECV_B; WAIT (for a received
    # payload); SYNC (the replicas' gradient sum of model stage ``stage``); or a step-boundary
    # kind (BOUNDARY_KINDS)
    stage: int
    mb: int
    start_ms: float
    end_ms: float
    pred_start: float | None
    pred_end: float | None
    in_pair: bool = False  # a half of an OVERLAP_F_B action (the action has its own row)

    @property
    def token(self) -> str:
        if self.kind == PAIR:  # named by its forward: the backward half has its own row
            return f"{self.stage}F{self.mb}&B"
        return f"{self.stage}{self.kind}{self.mb}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(timings: list[Timing], step: int, predicted_makespan: float,
              predicted_step: dict[str, Any] | None = None, boundary_counts: bool = False
              ) -> dict[str, Any]:
    """Per-kind means, step time and ratios for one step (usually the last, warmed-up one);
    with a step boundary, also its share per rank, measured and predicted. ``boundary_counts``:
    the step's time runs to its last boundary stamp (modes sync and post-validation), else to
    the pipeline's last action (mode none: what its prediction counts; the optimizer steps are
    still timed, in ``step_boundary``)."""
    rows = [t for t in timings if t.step == step]
    compute = [t for t in rows if (t.kind in KINDS and not t.in_pair) or t.kind == PAIR]
    measured: dict[str, list[float]] = defaultdict(list)
    predicted: dict[str, list[float]] = defaultdict(list)
    for t in compute:
        measured[t.kind].append(t.end_ms - t.start_ms)
        predicted[t.kind].append((t.pred_end or 0.0) - (t.pred_start or 0.0))
    counted = rows if boundary_counts else [t for t in rows if t.kind not in BOUNDARY_KINDS]
    step_ms = max((t.end_ms for t in counted), default=0.0)
    total_measured = sum(sum(v) for v in measured.values())
    total_predicted = sum(sum(v) for v in predicted.values())
    unit_ms = total_measured / total_predicted if total_predicted > 0 else float("nan")

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    per_kind = {k: mean(measured[k]) for k in (*KINDS, PAIR) if measured[k]}
    if "I" in per_kind and "W" in per_kind:
        per_kind["I+W"] = per_kind["I"] + per_kind["W"]
    raw, calibrated = {}, {}
    for k in (*KINDS, PAIR):
        if measured[k] and sum(predicted[k]) > 0:
            raw[k] = sum(measured[k]) / sum(predicted[k])
            calibrated[k] = raw[k] / unit_ms
    if predicted_makespan > 0:
        raw["step"] = step_ms / predicted_makespan
        calibrated["step"] = raw["step"] / unit_ms
    waits = sum(t.end_ms - t.start_ms for t in rows if t.kind == "WAIT")
    out: dict[str, Any] = {
        "step": step,
        "step_ms": step_ms,
        "mean_ms": per_kind,
        "predicted_makespan": predicted_makespan,
        "unit_ms": unit_ms,
        "ratio_raw": raw,
        "ratio_calibrated": calibrated,
        "wait_ms_total": waits,
    }
    copies = {k: [t.end_ms - t.start_ms for t in rows if t.kind == k] for k in COPY_KINDS}
    if any(copies.values()):  # the host side of each copy (CPU: the copy; CUDA: its issue)
        out["copy_ms"] = {k: sum(v) / len(v) for k, v in copies.items() if v}
    syncs = [t for t in rows if t.kind == "SYNC"]
    if syncs:  # the replicas' gradient sum, per rank from its first sync start to its last end
        spans: dict[int, list[Timing]] = defaultdict(list)
        for t in syncs:
            spans[t.rank].append(t)
        out["sync_ms"] = max(max(t.end_ms for t in ts) - min(t.start_ms for t in ts)
                             for ts in spans.values())
    pairs = pair_summary(rows)
    if pairs:
        out["pairs"] = pairs
    if any(t.kind in BOUNDARY_KINDS for t in rows):
        out["step_boundary"] = boundary_summary(rows, predicted_step)
    return out


def pair_summary(rows: list[Timing]) -> dict[str, Any] | None:
    """Measured F&B against F + B: each OVERLAP_F_B action's time, the sum of its two halves,
    and the mean time of the same two ops run unpaired in this step (same kind and stage; a
    fused B that never runs unpaired counts as that stage's unpaired I + W). ``ratio`` =
    total pair time / total unpaired F + B, over the pairs for which both means exist."""
    pair_rows = [t for t in rows if t.kind == PAIR]
    if not pair_rows:
        return None
    alone: dict[tuple[str, int], list[float]] = defaultdict(list)
    for t in rows:
        if t.kind in KINDS and not t.in_pair:
            alone[(t.kind, t.stage)].append(t.end_ms - t.start_ms)
    means = {k: sum(v) / len(v) for k, v in alone.items()}

    def unpaired(kind: str, stage: int) -> float | None:
        if (kind, stage) in means:
            return means[(kind, stage)]
        if kind == "B" and ("I", stage) in means and ("W", stage) in means:
            return means[("I", stage)] + means[("W", stage)]
        return None

    halves: dict[tuple[int, int], list[Timing]] = defaultdict(list)
    for t in rows:
        if t.in_pair:
            halves[(t.rank, t.index)].append(t)
    total, halves_total, paired_total, expected_total, compared = 0.0, 0.0, 0.0, 0.0, 0
    for t in pair_rows:
        took = t.end_ms - t.start_ms
        parts = halves[(t.rank, t.index)]
        total += took
        halves_total += sum(h.end_ms - h.start_ms for h in parts)
        alone_times = [unpaired(h.kind, h.stage) for h in parts]
        if len(parts) == 2 and None not in alone_times:
            paired_total += took
            expected_total += sum(x for x in alone_times if x is not None)
            compared += 1
    n = len(pair_rows)
    return {
        "count": n,
        "mean_ms": total / n,
        "halves_mean_ms": halves_total / n,
        "compared": compared,
        "unpaired_f_plus_b_mean_ms": expected_total / compared if compared else None,
        "ratio": paired_total / expected_total if expected_total > 0 else None,
    }


def boundary_summary(rows: list[Timing], predicted: dict[str, Any] | None) -> dict[str, Any]:
    """Per rank: when its pipeline ended, its optimizer steps' time and the boundary's end;
    the step's share after the pipeline, measured and predicted (instance units)."""
    ranks = sorted({t.rank for t in rows})
    per_rank = {}
    for r in ranks:
        mine = [t for t in rows if t.rank == r]
        pipeline = max((t.end_ms for t in mine if t.kind not in BOUNDARY_KINDS), default=0.0)
        per_rank[r] = {
            "pipeline_end_ms": pipeline,
            "opt_ms": sum(t.end_ms - t.start_ms for t in mine if t.kind == "OPT"),
            "redo_ms": sum(t.end_ms - t.start_ms for t in mine if t.kind == "REDO"),
            "end_ms": max(t.end_ms for t in mine),
        }
    pipeline_end = max(v["pipeline_end_ms"] for v in per_rank.values())
    end = max(v["end_ms"] for v in per_rank.values())
    out: dict[str, Any] = {"per_rank": per_rank, "pipeline_end_ms": pipeline_end,
                           "end_ms": end, "boundary_ms": end - pipeline_end}
    if predicted:
        out["predicted_pipeline_end"] = predicted.get("pipeline_end")
        out["predicted_boundary"] = predicted.get("boundary")
    return out


def chrome_trace(timings: list[Timing], step: int, unit_ms: float,
                 peak_bytes: list[int] | None = None) -> dict[str, Any]:
    """Perfetto/Chrome trace: process "measured" and process "predicted", one track per rank.

    Predicted slices are scaled by ``unit_ms`` (calibrated) so both timelines share an axis.
    """
    events: list[dict[str, Any]] = []
    ranks = sorted({t.rank for t in timings})
    for pid, label in ((0, "measured"), (1, f"predicted (1 unit = {unit_ms:.4g} ms)")):
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": label}})
        for r in ranks:
            events.append({"ph": "M", "pid": pid, "tid": r, "name": "thread_name",
                           "args": {"name": f"rank {r}"}})
    for t in timings:
        if t.step != step:
            continue
        args = {"stage": t.stage, "mb": t.mb, "index": t.index, "kind": t.kind}
        events.append({"ph": "X", "pid": 0, "tid": t.rank, "name": t.token, "cat": t.kind,
                       "ts": t.start_ms * 1e3, "dur": max(t.end_ms - t.start_ms, 0.0) * 1e3,
                       "args": args})
        if t.kind in (*KINDS, PAIR, "OPT") and t.pred_start is not None and t.pred_end is not None:
            events.append({"ph": "X", "pid": 1, "tid": t.rank, "name": t.token, "cat": t.kind,
                           "ts": t.pred_start * unit_ms * 1e3,
                           "dur": (t.pred_end - t.pred_start) * unit_ms * 1e3,
                           "args": {**args, "pred_start": t.pred_start, "pred_end": t.pred_end}})
    if peak_bytes is not None:
        for r, peak in enumerate(peak_bytes):
            events.append({"ph": "C", "pid": 0, "tid": r, "name": f"peak memory rank {r}",
                           "ts": 0, "args": {"bytes": peak}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
