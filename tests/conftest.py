"""Shared test fixtures: instances built in code, and a generator of random valid schedules."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from zbsolve.data import reference_dir
from zbsolve.graph import TaskGraph
from zbsolve.instance import Instance, load_instance
from zbsolve.ops import Op
from zbsolve.schedule import Schedule

ROOT = Path(__file__).resolve().parent.parent
INSTANCES = ROOT / "instances"
REFERENCE = reference_dir()  # the published tables, shipped in zbsolve/data/reference/


def moderate_floats(lo: float, hi: float):
    """Hypothesis floats in [lo, hi] rounded to 6 decimals: 0 or at least 1e-6, never the 1e-300
    an unrounded draw can give (instances refuse non-zero values below 1e-12: a unit problem)."""
    from hypothesis import strategies as st

    return st.floats(lo, hi).map(lambda x: round(x, 6))


def make_instance(p=4, m=8, v=1, placement="loop", F=1.0, I=1.0, W=1.0, comm=0.0,
                  activation=1.0, weight=0.0, limit=None, **extra) -> Instance:
    return load_instance({
        "devices": p, "microbatches": m, "chunks": v, "placement": placement,
        "times": {"F": F, "I": I, "W": W}, "comm": comm,
        "memory": {"activation": activation, "weight": weight, "limit": limit}, **extra,
    })


def random_valid_schedule(inst: Instance, rng: random.Random, fuse_prob: float = 0.3) -> Schedule:
    """A random topological order of the task DAG, split per device: deadlock-free by construction.

    Some (stage, mb) backwards are fused into one B op (the W of a fused pair is dropped: the B
    placed where the I stood covers it).
    """
    graph = TaskGraph(inst, {u for u in TaskGraph(inst).units() if rng.random() < fuse_prob})
    indeg = {op: len(graph.preds(op)) for op in graph.ops()}
    ready = [op for op, n in indeg.items() if n == 0]
    orders: list[list[Op]] = [[] for _ in range(inst.devices)]
    while ready:
        op = ready.pop(rng.randrange(len(ready)))
        d = graph.device(op)
        if d is not None and not graph.is_tail(op):  # optimizer steps: the tail rule's
            orders[d].append(op)
        for nxt, _ in graph.succs(op):
            indeg[nxt] -= 1
            if indeg[nxt] == 0:
                ready.append(nxt)
    return Schedule(orders, name="random")


def assert_runs_match_reference(reports: list[dict], labels: list[str], rtol: float = 1e-5
                                ) -> dict[str, float]:
    """Every runner report (``zbsolve.runtime.launch.run_jobs``, one per job in ``labels``)
    matches its single-process reference within ``rtol``: losses, every gradient and every
    final parameter, each checked once. Returns each run's max relative difference."""
    assert [r["label"] for r in reports] == labels
    bad = [(r["label"], r["max_rel_diff"], r["worst"], r["missing"], r["mismatched"])
           for r in reports if not r["ok"] or r["max_rel_diff"] > rtol]
    assert not bad, bad
    for r in reports:
        assert r["losses"] == pytest.approx(r["reference_losses"], rel=rtol)
        assert r["checked"] > 0 and not r["missing"] and not r["nonfinite"]
    return {r["label"]: r["max_rel_diff"] for r in reports}
