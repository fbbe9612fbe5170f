"""Benchmark families of the bidirectional and overlapped schedules (Chimera, DualPipe,
DualPipeV), and the comparisons that decide between them and ZB-V.

Cases (``zbsolve bench``), each at the family's own peak memory per device, anchor = the
family's own step time there (makespan; an anchor met means the solver is at least as fast):

* ``chimera``: two replicas, p = 4, 8 stages, m = 2p, 4p;
* ``dualpipe``: two replicas, p = 4, 8, m = 2p, 4p, with F&B run as F then B and with an
  overlap factor x = 0.8;
* ``dualpipev``: one replica in V on R = 4, 8 ranks (2R stages), the same two overlap settings.

Times are the Zero Bubble paper's 1.5B GPT row (F 18.52, I 18.09, W 9.34, comm 0.60 ms per
stage of p = 8; a V chunk is half a stage), activation 1 per stage, weight 0.366. The weights,
gradients and optimizer state of a stage take about 0.9 of its activation at that model's
microbatch (mixed-precision Adam, 18 bytes per parameter), so ``memory.params`` is 0.9 per
stage (0.45 per V chunk): the two replicas hold twice that on every device.

``equal_memory_rows`` sets DualPipe and the solver on two replicas against ZB-V and the solver
on one copy in V, at the same total memory per device; ``break_even`` finds the F&B time below
which DualPipeV (with overlapped pairs) beats ZB-V.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zbsolve.instance import Instance, load_instance

TIMES = {"F": 18.52, "I": 18.09, "W": 9.34}
COMM = 0.60
PARAMS = 0.9  # per one-chunk stage, in activations (module docstring)
OVERLAPS = (None, 0.8)
FAMILIES = ("chimera", "dualpipe", "dualpipev")


def _two_replicas(p: int, m: int, fb: float | None) -> Instance:
    data: dict[str, Any] = {
        "name": f"bidir-p{p}-m{m}" + (f"-fb{fb:g}" if fb else ""), "devices": p,
        "microbatches": m, "replicas": 2, "times": dict(TIMES), "comm": COMM,
        "memory": {"activation": 1.0, "weight": 0.366, "params": PARAMS}}
    if fb:
        data["overlap"] = {"FB": fb}
    return load_instance(data)


def _v(R: int, m: int, fb: float | None, limit: float | None = None) -> Instance:
    data: dict[str, Any] = {
        "name": f"v-p{R}-m{m}" + (f"-fb{fb:g}" if fb else ""), "devices": R, "microbatches": m,
        "chunks": 2, "placement": "v", "times": {k: t / 2 for k, t in TIMES.items()},
        "comm": COMM,
        "memory": {"activation": 0.5, "weight": 0.183, "params": PARAMS / 2, "limit": limit}}
    if fb:
        data["overlap"] = {"FB": fb}
    return load_instance(data)


def family_instances() -> list[tuple[str, str, Instance]]:
    """(family, case name, instance without a limit) for every case of the families."""
    out = []
    for p in (4, 8):
        for m in (2 * p, 4 * p):
            out.append(("chimera", f"p{p}-m{m}", _two_replicas(p, m, None)))
            for fb in OVERLAPS:
                tag = f"p{p}-m{m}" + (f"-fb{fb:g}" if fb else "")
                out.append(("dualpipe", tag, _two_replicas(p, m, fb)))
                out.append(("dualpipev", tag, _v(p, m, fb)))
    return out


def at_own_peak(family: str, inst: Instance) -> tuple[Instance, float]:
    """The instance limited to the family's own peak per device, and the family's makespan."""
    from zbsolve.baselines import generate
    from zbsolve.simulate import simulate

    sim = simulate(inst, generate(family, inst))
    return inst.with_(limit=list(sim.peak_memory)), sim.makespan


def cases(time_limit: float, case_type: Callable[..., Any]) -> list[Any]:
    """The bench's ``Case`` objects (``case_type`` is ``zbsolve.bench.Case``)."""
    out = []
    for family, name, inst in family_instances():
        limited, value = at_own_peak(family, inst)
        bubble = 1.0 - limited.device_work(0) / value  # so that anchor_time() gives value back
        out.append(case_type(f"{family}/{name}", family, limited, "makespan", time_limit,
                             family, bubble, f"makespan <= {family} at its own peak"))
    return out


def equal_memory_rows(p: int = 8, m: int = 32, fb: float | None = 0.8,
                      time_limit: float = 30.0) -> list[dict[str, Any]]:
    """Two replicas (DualPipe, solver) against one copy in V (ZB-V, solver) at the same total
    memory per device: DualPipe's own peak (its two weight copies included)."""
    from zbsolve.baselines import generate
    from zbsolve.simulate import simulate
    from zbsolve.solver import SolveOptions, solve

    two, dp_value = at_own_peak("dualpipe", _two_replicas(p, m, fb))
    total = max(two.limit)
    one = _v(p, m, fb, limit=total)
    rows = [{"layout": "two replicas", "schedule": "dualpipe", "makespan": dp_value,
             "peak_total": total}]
    zbv = simulate(one, generate("zb-v", one))
    rows.append({"layout": "one copy, V", "schedule": "zb-v", "makespan": zbv.makespan,
                 "peak_total": max(zbv.peak_memory), "fits": zbv.feasible})
    for name, inst in (("two replicas", two), ("one copy, V", one)):
        res = solve(inst, SolveOptions(time_limit=time_limit, workers=2, seed=0))
        rows.append({"layout": name, "schedule": "solver", "makespan": res.objective_value,
                     "peak_total": max(res.sim.peak_memory), "status": res.status,
                     "gap": res.gap})
    return rows


def break_even(R: int = 4, m: int = 16, tol: float = 1e-4) -> dict[str, float]:
    """The F&B time (x (F + B) of one chunk) below which DualPipeV with overlapped pairs has a
    shorter makespan than ZB-V on the same V instance (bisection on x; memory unlimited)."""
    from zbsolve.baselines import generate
    from zbsolve.simulate import simulate

    zbv = simulate(_v(R, m, None), generate("zb-v", _v(R, m, None))).makespan

    def dualpipev(x: float) -> float:
        inst = _v(R, m, x)
        return simulate(inst, generate("dualpipev", inst)).makespan

    lo, hi = 1e-3, 1.0
    if dualpipev(hi) <= zbv:
        lo = hi
    elif dualpipev(lo) > zbv:
        hi = lo
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if dualpipev(mid) <= zbv else (lo, mid)
    chunk = {k: t / 2 for k, t in TIMES.items()}
    fb = lo * (chunk["F"] + chunk["I"] + chunk["W"])
    return {"ranks": R, "microbatches": m, "zb_v_makespan": zbv, "break_even_x": lo,
            "break_even_fb_ms": fb, "F_plus_B_ms": chunk["F"] + chunk["I"] + chunk["W"]}
