"""Which of two schedules is better: step time first, then memory.

Among schedules with the same objective value the solver returns the one that keeps the most
memory free: the lexicographic key is (objective, the peak of the fullest device relative to
its limit, the sum of the devices' peaks). A device without a limit is measured against the
least it can need (``min_memory_limit``: one activation of each of its stages, plus its
params), so "relative" stays meaningful. Equal values are compared up to rounding (10
significant digits), so two figures that differ only by float noise count as a tie.
"""

from __future__ import annotations

from zbsolve.instance import Instance
from zbsolve.simulate import SimResult
from zbsolve.solver.bounds import min_memory_limit


def _rounded(x: float) -> float:
    return float(f"{x:.10g}")


def fullness(inst: Instance, peaks: list[float]) -> float:
    """The peak of the fullest device relative to its limit (or to its least possible need)."""
    need = min_memory_limit(inst)
    refs = [lim if lim is not None else n for lim, n in zip(inst.limit, need)]
    return max(peak / ref if ref > 0 else 0.0 for peak, ref in zip(peaks, refs))


def memory_key(inst: Instance, sim: SimResult) -> tuple[float, float]:
    """(fullest device's peak / its limit, sum of peaks): smaller keeps more memory free."""
    return (_rounded(fullness(inst, sim.peak_memory)), _rounded(sum(sim.peak_memory)))


def rank_key(inst: Instance, sim: SimResult, objective: str) -> tuple[float, float, float, float]:
    """The key schedules are ordered by: objective, memory (``memory_key``), then the other
    time figure (makespan for span, span for makespan) as the last tie-break."""
    other = sim.max_span if objective == "makespan" else sim.makespan
    return (_rounded(sim.value(objective)), *memory_key(inst, sim), _rounded(other))
