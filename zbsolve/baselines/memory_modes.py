"""1F1B and ZB-H1 with the memory modes people use by hand (issue 13's baselines).

- ``*-recompute``: every microbatch recomputed (Megatron's ``--recompute-granularity full``):
  the R job runs right before its backward, the way activation checkpointing runs it.
- ``*-recompute-fit``: recompute of just as many microbatches as the memory limit needs, the
  same ones on every stage, spread evenly over the microbatches (1F1B's peak is a window of
  consecutive microbatches, so spreading them keeps the fewest kept ones in any window); the
  smallest count that the simulator finds fitting wins.
- ``1f1b-offload``: PipeOffload's rule on 1F1B: offload a microbatch when its F -> backward gap
  in the keep schedule is at least 3 (d2h + h2d). The copy out is written after the compute
  job that follows its F (it runs as soon as F ends; the jobs written after it wait for its
  end, ``zbsolve.simulate``), the copy back after the job two before its backward (a load
  starts when the job before it in the row ends), so the load overlaps the job right before
  the backward.

Every schedule here is a keep baseline plus the mode's ops: the orders of F, I, W and B are
the base family's, so the mode's cost is all that differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from zbsolve.baselines.classic import one_f_one_b
from zbsolve.baselines.common import NotApplicable, require
from zbsolve.baselines.zero_bubble import zb_h1
from zbsolve.instance import Instance
from zbsolve.ops import Entry, Op
from zbsolve.schedule import Schedule
from zbsolve.simulate import simulate

_BACKWARD = ("I", "B")
Unit = tuple[int, int, int]


def with_recompute(sched: Schedule, units: Iterable[Unit], name: str) -> Schedule:
    """``sched`` with an R right before the backward (I or B) of each of ``units``."""
    chosen = set(units)
    rows: list[list[Entry]] = []
    for row in sched.orders:
        out: list[Entry] = []
        for entry in row:
            if isinstance(entry, Op) and entry.kind in _BACKWARD and entry.unit in chosen:
                out.append(entry._replace(kind="R"))
            out.append(entry)
        rows.append(out)
    return Schedule(rows, name=name, meta={"recomputed": len(chosen)})


def spread(k: int, m: int) -> list[int]:
    """``k`` of the microbatches 0..m-1, evenly spaced (the last one of each of k equal runs)."""
    return [j for j in range(m) if (j + 1) * k // m > j * k // m]


def _units(inst: Instance, mbs: Iterable[int]) -> list[Unit]:
    mbs = list(mbs)
    return [(s, j, 0) for s in range(inst.stages) for j in mbs]


def _need_recompute(inst: Instance, name: str) -> None:
    require(inst.recompute is not None, name, "the instance offers no recompute (add "
            "recompute: {R, kept})")


def _recompute_all(base: Callable[[Instance], Schedule], name: str) -> Callable:
    def generate(inst: Instance) -> Schedule:
        _need_recompute(inst, name)
        return with_recompute(base(inst), _units(inst, range(inst.microbatches)), name)
    generate.__doc__ = f"{base.__name__} with every microbatch recomputed."
    return generate


def _recompute_to_fit(base: Callable[[Instance], Schedule], name: str) -> Callable:
    def generate(inst: Instance) -> Schedule:
        _need_recompute(inst, name)
        keep = base(inst)
        if simulate(inst, keep).feasible:
            raise NotApplicable(f"{name}: {keep.name} fits the memory limit without recompute")
        m = inst.microbatches
        for k in range(1, m + 1):
            sched = with_recompute(keep, _units(inst, spread(k, m)), name)
            if simulate(inst, sched).feasible:
                return sched
        raise NotApplicable(f"{name}: even recomputing every microbatch exceeds the memory "
                            "limit")
    generate.__doc__ = f"{base.__name__} recomputing the fewest microbatches that fit."
    return generate


one_f_one_b_recompute = _recompute_all(one_f_one_b, "1f1b-recompute")
zb_h1_recompute = _recompute_all(zb_h1, "zb-h1-recompute")
one_f_one_b_recompute_fit = _recompute_to_fit(one_f_one_b, "1f1b-recompute-fit")
zb_h1_recompute_fit = _recompute_to_fit(zb_h1, "zb-h1-recompute-fit")


def one_f_one_b_offload(inst: Instance) -> Schedule:
    """1F1B offloading each microbatch whose F -> backward gap is >= 3 (d2h + h2d)."""
    name = "1f1b-offload"
    require(inst.offload is not None, name, "the instance offers no offload (add offload: "
            "{fraction, d2h})")
    keep = one_f_one_b(inst)
    sim = simulate(inst, keep)
    off = inst.offload
    rows: list[list[Entry]] = []
    count = 0
    for row in keep.orders:
        loads: dict[int, list[Op]] = {}  # row position of the job a load is written after
        outs: dict[int, list[Op]] = {}  # row position of the job a copy out is written after
        where_f = {e.unit: i for i, e in enumerate(row) if e.kind == "F"}
        for i, entry in enumerate(row):
            if entry.kind not in _BACKWARD:
                continue
            s, j, g = entry.unit
            f = Op("F", s, j, g)
            gap = sim.start[entry] - sim.end[f]
            if gap < 3 * (off.d2h[s] + off.h2d[s]) or i - 2 < where_f[entry.unit] + 1:
                continue
            outs.setdefault(where_f[entry.unit] + 1, []).append(Op("O", s, j, g))
            loads.setdefault(i - 2, []).append(Op("L", s, j, g))
            count += 1
        out: list[Entry] = []
        for i, entry in enumerate(row):
            out.append(entry)
            out += outs.get(i, []) + loads.get(i, [])
        rows.append(out)
    require(count > 0, name, "no microbatch's F -> backward gap reaches 3 (d2h + h2d)")
    return Schedule(rows, name=name, meta={"offloaded": count})
