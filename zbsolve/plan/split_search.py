"""The layer split as a decision: which contiguous block of layers each logical stage runs.

A ``SplitProblem`` is a layer profile on a pipeline (devices, chunks, placement, microbatches,
hop latency, usable bytes per device). A split is the number of consecutive profile layers of
each logical stage (``LayerProfile.check_split``); the stage's device follows from the
placement, which is given (loop, V or explicit) and respected, never changed by the search.

Bounds (valid for every schedule of the split's instance, so safe for pruning):

- *device*: every op of device d starts after the first forward of its first stage s0 can
  start, ``head_d = sum(F[t] for t < s0) + hops(s0) * comm`` (every op of d depends on a forward
  of a stage >= s0), and d must run m (F + I + W) of each of its stages:
  ``head_d + m * work_d``;
- *device without W*: the F and I ops alone, with the tail after any of them of at least
  ``sum(I[t] for t < s0) + hops(s0) * comm + W[0]`` (the input-gradient chain down to stage 0
  and stage 0's W): ``head_d + m * (F + I)_d + tail_d``;
- *chain*: one microbatch's forward and backward through every stage, plus W[0];
- *memory*: a device whose static bytes (weights, gradients, Adam states) plus one activation of
  each of its stages exceed its usable bytes has no schedule at all (``min_memory_limit``).

``SplitProblem.bound`` is the largest of these; ``enumerate_splits(cutoff)`` lists, by a depth-
first search that prunes any prefix whose partial device loads or memory already exceed the
cutoff, every split whose bound is at most ``cutoff`` - exhaustively unless its node budget
runs out, which it reports. The outer search (``zbsolve.plan.planner``) then refines bounds with
``zbsolve.solver.bounds.analytic_bound`` and evaluates splits with the hand-made schedules and
``zbsolve.solver.solve``.

**What can be claimed.** Let U be the best simulated step time found and ``cutoff`` the bound
up to which the enumeration was exhaustive. Every split not enumerated has a bound above the
cutoff; every enumerated split has a proven lower bound (the largest of its bound, its analytic
bound and the CP-SAT bound when it was solved). So no split and schedule of this layout and
microbatch count is faster than ``min(cutoff, min over enumerated splits of their lower
bound)``; when that equals U, the split and schedule found are optimal over all contiguous
splits (for the instance model: the simulator's dependencies, hop latency and memory model).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

from zbsolve.instance import Instance, placement_for
from zbsolve.layers import GIB, LayerProfile
from zbsolve.plan.memory import MIXED_ADAM, AdamBytes

Split = tuple[int, ...]


@dataclass(frozen=True)
class SplitProblem:
    profile: LayerProfile
    devices: int
    microbatches: int
    chunks: int = 1
    placement: str | tuple[int, ...] = "loop"
    comm: float = 0.0  # ms per cross-device hand-off
    usable_bytes: float | None = None  # per device, for everything (None: unlimited)
    adam: AdamBytes = MIXED_ADAM
    stage_device: tuple[int, ...] = field(init=False, repr=False)
    _prefix: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        S = self.devices * self.chunks
        if isinstance(self.placement, str):
            devs = placement_for(self.placement, self.devices, self.chunks)
        else:
            devs = tuple(self.placement)
            if len(devs) != S or set(devs) != set(range(self.devices)):
                raise ValueError(f"placement: expected {S} device ids covering all "
                                 f"{self.devices} devices, got {list(devs)}")
        if len(self.profile) < S:
            raise ValueError(f"split: {len(self.profile)} layers cannot fill {S} stages "
                             f"(devices x chunks); use fewer stages")
        object.__setattr__(self, "stage_device", devs)
        prefix = {}
        for key in ("F", "I", "W", "activation", "weight", "params"):
            acc, run = [0.0], 0.0
            for layer in self.profile.layers:
                run += getattr(layer, key)
                acc.append(run)
            prefix[key] = acc
        prefix["work"] = [f + i + w for f, i, w in zip(prefix["F"], prefix["I"], prefix["W"])]
        for key in ("F", "I", "W"):  # layers with a positive time (a stage needs one of each)
            acc, run = [0], 0
            for layer in self.profile.layers:
                run += getattr(layer, key) > 0
                acc.append(run)
            prefix[f"n{key}"] = acc
        hops = [0]
        for s in range(1, S):
            hops.append(hops[-1] + (devs[s] != devs[s - 1]))
        prefix["hops"] = hops
        object.__setattr__(self, "_prefix", prefix)

    # ------------------------------------------------------------------ sums
    @property
    def stages(self) -> int:
        return self.devices * self.chunks

    @property
    def layers(self) -> int:
        return len(self.profile)

    def _sum(self, key: str, lo: int, hi: int) -> float:
        acc = self._prefix[key]
        return acc[hi] - acc[lo]

    def bounds_of(self, split: Split) -> list[tuple[int, int]]:
        """(first layer, end layer) of each stage."""
        out, start = [], 0
        for n in split:
            out.append((start, start + n))
            start += n
        return out

    def largest_stage(self, split: Split) -> float:
        """The largest F + I + W of a stage (the tie-break between splits of equal bound)."""
        return max(self._sum("work", lo, hi) for lo, hi in self.bounds_of(split))

    def static_bytes(self, split: Split) -> list[float]:
        """Per device: weights, gradients and optimizer states of its stages."""
        out = [0.0] * self.devices
        for s, (lo, hi) in enumerate(self.bounds_of(split)):
            out[self.stage_device[s]] += self.adam.static_bytes(self._sum("params", lo, hi))
        return out

    def activation_limits(self, split: Split) -> list[float] | None:
        """Per device: the bytes left for activations (None when memory is unlimited)."""
        if self.usable_bytes is None:
            return None
        return [self.usable_bytes - x for x in self.static_bytes(split)]

    def instance(self, split: Split, name: str | None = None) -> Instance:
        """The split's instance (times in ms, memory in GiB, limits after static memory)."""
        self.profile.check_split(list(split))
        limits = self.activation_limits(split)
        limit_gib = None if limits is None else [max(x, 0.0) / GIB for x in limits]
        label = name or f"{self.profile.meta.get('model', 'model')}-p{self.devices}" \
                        f"-v{self.chunks}-m{self.microbatches}"
        return self.profile.to_instance(
            list(split), devices=self.devices, microbatches=self.microbatches,
            chunks=self.chunks, placement=self.placement if isinstance(self.placement, str)
            else list(self.placement), comm=self.comm, limit_gib=limit_gib, name=label,
            extra={"static_gib": [x / GIB for x in self.static_bytes(split)]})

    # ------------------------------------------------------------------ bounds
    def memory_fits(self, split: Split) -> bool:
        """Whether some schedule fits: one activation of every stage of a device at once."""
        limits = self.activation_limits(split)
        if limits is None:
            return True
        need = [0.0] * self.devices
        for s, (lo, hi) in enumerate(self.bounds_of(split)):
            need[self.stage_device[s]] += self._sum("activation", lo, hi)
        return all(n <= lim * (1 + 1e-12) for n, lim in zip(need, limits))

    def has_work(self, lo: int, hi: int) -> bool:
        """Whether layers lo..hi-1 make a stage: positive F, I and W (an instance needs them;
        the embedding alone has no input gradient)."""
        return all(self._sum(f"n{k}", lo, hi) > 0 for k in ("F", "I", "W"))

    def bound(self, split: Split) -> float:
        """The largest of the device, device-without-W and chain bounds (inf if memory
        cannot fit or a stage has no F, I or W); see the module docstring."""
        if not self.memory_fits(split) or \
                not all(self.has_work(lo, hi) for lo, hi in self.bounds_of(split)):
            return math.inf
        m, c, pre = self.microbatches, self.comm, self._prefix
        spans = self.bounds_of(split)
        w0 = self._sum("W", *spans[0])
        load = [0.0] * self.devices
        fi = [0.0] * self.devices
        first: dict[int, int] = {}
        for s, (lo, hi) in enumerate(spans):
            d = self.stage_device[s]
            first.setdefault(d, s)
            load[d] += self._sum("work", lo, hi)
            fi[d] += self._sum("F", lo, hi) + self._sum("I", lo, hi)
        best = pre["F"][-1] + pre["I"][-1] + w0 + 2 * pre["hops"][-1] * c
        for d in range(self.devices):
            s0 = first[d]
            lo0 = spans[s0][0]
            head = pre["F"][lo0] + pre["hops"][s0] * c
            tail = pre["I"][lo0] + pre["hops"][s0] * c + w0
            best = max(best, head + m * load[d], head + m * fi[d] + tail)
        return best

    # ------------------------------------------------------------------ enumeration
    def enumerate_splits(self, cutoff: float, max_nodes: int = 200_000,
                         max_results: int | None = None, time_limit: float | None = None
                         ) -> tuple[list[tuple[float, Split]], bool]:
        """Every split with ``bound <= cutoff``, sorted by bound, and whether the search was
        exhaustive (False when ``max_nodes``, ``max_results`` or ``time_limit`` seconds
        stopped it)."""
        search = _Enumeration(self, cutoff, max_nodes, max_results, time_limit)
        search.run()
        found = sorted(search.found)
        return found, search.complete

    def min_bound(self, time_limit: float = 10.0, seed: int = 0, hints: tuple = ()
                  ) -> tuple[float, Split | None]:
        """A proven lower bound on ``bound`` over *all* splits, and a split attaining it.

        A small CP-SAT model over the S - 1 stage boundaries (``_min_bound_model``) minimizes
        the largest of the bounds above on integer prefix sums (1 unit = 1 us, rounded down);
        its proven bound less the rounding allowance (stage sums are differences of rounded
        prefix sums, off by less than a unit each) is a valid lower bound even when it stops on
        ``time_limit``; the split it returns is re-bounded exactly here. ``hints`` (e.g. the rule splits) and
        balanced splits seed it; the lower bound is never below ``m * total work / devices``
        (some device does at least its share), which holds even when the model proves little
        in the time given.
        """
        seeds = [tuple(h) for h in hints] + _seed_splits(self.layers, self.stages)
        best = min(((self.bound(sp), sp) for sp in seeds), default=(math.inf, None))
        if not math.isfinite(best[0]):
            best = (math.inf, None)
        lower, split = _min_bound_model(self, time_limit, seed, best)
        if not math.isfinite(lower):
            return lower, None
        share = self._prefix["work"][-1] * self.microbatches / self.devices
        if split is None or (math.isfinite(best[0]) and self.bound(split) > best[0]):
            split = best[1]
        return max(lower, share), split


TIME_SCALE = 1000  # integer units per ms in the bound model


def _min_bound_model(prob: SplitProblem, time_limit: float, seed: int,
                     start: tuple[float, Split | None]) -> tuple[float, Split | None]:
    from ortools.sat.python import cp_model

    pre, S, n, m = prob._prefix, prob.stages, prob.layers, prob.microbatches
    ints = {k: [int(math.floor(x * TIME_SCALE)) for x in pre[k]] for k in ("F", "I", "W", "work")}
    comm = int(math.floor(prob.comm * TIME_SCALE))
    model = cp_model.CpModel()
    cut = [model.new_constant(0)] + [model.new_int_var(1, n - 1, f"x{s}") for s in range(1, S)] \
        + [model.new_constant(n)]
    for key in ("nF", "nI", "nW"):  # every stage holds a layer with a positive F, I and W
        count = [_element(model, cut[s], pre[key], f"{key}{s}") for s in range(S + 1)]
        for s in range(S):
            model.add(count[s + 1] >= count[s] + 1)
    top = max(ints["F"][-1] + ints["I"][-1], m * ints["work"][-1]) * 2 + 2 * S * comm + 1

    def at(key: str, s: int):
        var = model.new_int_var(0, max(ints[key][-1], 0), f"{key}{s}")
        model.add_element(cut[s], ints[key], var)
        return var

    F = [at("F", s) for s in range(S + 1)]
    I = [at("I", s) for s in range(S + 1)]
    work = [at("work", s) for s in range(S + 1)]
    Wpre = [at("W", s) for s in (0, 1)]
    w0 = Wpre[1] - Wpre[0]
    z = model.new_int_var(0, top, "bound")
    model.add(z >= ints["F"][-1] + ints["I"][-1] + w0 + 2 * pre["hops"][-1] * comm)
    _memory_constraints(model, prob, cut)
    for d in range(prob.devices):
        stages = [s for s in range(S) if prob.stage_device[s] == d]
        s0 = stages[0]
        load = sum(work[s + 1] - work[s] for s in stages)
        fi = sum(F[s + 1] - F[s] + I[s + 1] - I[s] for s in stages)
        head = F[s0] + pre["hops"][s0] * comm
        model.add(z >= head + m * load)
        model.add(z >= head + m * fi + I[s0] + pre["hops"][s0] * comm + w0)
    # A stage sum is a difference of rounded-down prefix sums, off by less than one unit either
    # way, so a device's m * load (m * (F + I) for the bound without W) can exceed the true
    # value by less than 2 m x (its stages) units: the model's optimum is at most the true minimum
    # plus ``slack``, and ``slack`` comes off its bound.
    slack = 2 * m * max(prob.stage_device.count(d) for d in range(prob.devices)) + 2
    if start[1] is not None and math.isfinite(start[0]):  # a known split: hint and cap
        bounds = [0, *itertools.accumulate(start[1])]
        for c, b in zip(cut[1:-1], bounds[1:-1]):
            model.add_hint(c, b)
        model.add(z <= int(math.floor(start[0] * TIME_SCALE)) + slack)
    model.minimize(z)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(time_limit, 0.1)
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    from zbsolve.solver.cpsat import run  # past OR-Tools' presolve crash on some hints

    code = run(solver, model)
    if code == cp_model.INFEASIBLE:
        # a known split satisfies the (rounded-down) model, so this means no split fits
        return (math.inf, None) if start[1] is None else (0.0, start[1])
    lower = max(solver.best_objective_bound - slack, 0) / TIME_SCALE
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return lower, None
    bounds = [solver.value(c) for c in cut]
    split = tuple(b - a for a, b in zip(bounds, bounds[1:]))
    return lower, split


def _element(model, index, values: list[int], name: str):
    """An integer variable equal to ``values[index]``."""
    var = model.new_int_var(0, max(values), name)
    model.add_element(index, values, var)
    return var


def _memory_constraints(model, prob: SplitProblem, cut: list) -> None:
    """Static bytes plus one activation per stage within each device's usable bytes (needs
    rounded down, the budget up: the model may admit a split that does not fit, never the
    reverse, so its optimum stays a lower bound)."""
    if prob.usable_bytes is None:
        return
    unit = 2.0 ** 20  # MiB
    need = [int(math.floor((prob.adam.static_bytes(p) + a) / unit))
            for p, a in zip(prob._prefix["params"], prob._prefix["activation"])]
    budget = int(math.ceil(prob.usable_bytes / unit))
    pos = []
    for s, c in enumerate(cut):
        var = model.new_int_var(0, max(need[-1], 0), f"mem{s}")
        model.add_element(c, need, var)
        pos.append(var)
    for d in range(prob.devices):
        stages = [s for s in range(prob.stages) if prob.stage_device[s] == d]
        model.add(sum(pos[s + 1] - pos[s] for s in stages) <= budget)


def _seed_splits(layers: int, stages: int) -> list[Split]:
    """Splits balanced by layer count, to seed the bound model."""
    base, extra = divmod(layers, stages)
    if base == 0:
        return []
    front = tuple(base + (1 if s < extra else 0) for s in range(stages))
    return [front, front[::-1]]


class _Enumeration:
    """Depth-first search over stage sizes with the prefix pruning of ``enumerate_splits``."""

    def __init__(self, prob: SplitProblem, cutoff: float, max_nodes: int,
                 max_results: int | None, time_limit: float | None = None):
        self.prob, self.cutoff = prob, cutoff
        self.stop_at = None if time_limit is None else time.monotonic() + time_limit
        self.max_nodes, self.max_results = max_nodes, max_results
        self.nodes, self.complete = 0, True
        self.found: list[tuple[float, Split]] = []
        p = prob.devices
        self.load = [0.0] * p
        self.act = [0.0] * p
        self.static = [0.0] * p
        self.head: list[float | None] = [None] * p
        self.limits = (None if prob.usable_bytes is None
                       else [prob.usable_bytes] * p)
        self.sizes: list[int] = []

    def run(self) -> None:
        self._visit(0, 0)

    def _stop(self) -> bool:
        if self.max_results is not None and len(self.found) >= self.max_results:
            self.complete = False
            return True
        if self.nodes >= self.max_nodes or (
                self.stop_at is not None and self.nodes % 256 == 0
                and time.monotonic() > self.stop_at):
            self.complete = False
            return True
        return False

    def _room_ok(self, stage: int, unit: int) -> bool:
        """The remaining work fits into what the devices can still take under the cutoff."""
        prob, m = self.prob, self.prob.microbatches
        pre = prob._prefix
        if not math.isfinite(self.cutoff):
            return True
        head_next = pre["F"][unit] + pre["hops"][min(stage, prob.stages - 1)] * prob.comm
        room = 0.0
        for d in range(prob.devices):
            head = self.head[d] if self.head[d] is not None else head_next
            room += max(0.0, (self.cutoff - head) / m - self.load[d])
        return pre["work"][-1] - pre["work"][unit] <= room * (1 + 1e-12) + 1e-12

    def _visit(self, stage: int, unit: int) -> None:
        prob = self.prob
        S, n = prob.stages, prob.layers
        if stage == S:
            split = tuple(self.sizes)
            b = prob.bound(split)
            if b <= self.cutoff:
                self.found.append((b, split))
            return
        if self._stop() or not self._room_ok(stage, unit):
            return
        self.nodes += 1
        d = prob.stage_device[stage]
        m, pre = prob.microbatches, prob._prefix
        new_head = self.head[d] is None
        if new_head:
            self.head[d] = pre["F"][unit] + pre["hops"][stage] * prob.comm
        last = n - (S - stage - 1)  # every later stage keeps at least one layer
        lo_k = last - unit if stage == S - 1 else 1
        fits = []
        for k in range(lo_k, last - unit + 1):
            hi = unit + k
            if not prob.has_work(unit, hi):
                continue  # a bigger block may still take in a layer with the missing time
            work = pre["work"][hi] - pre["work"][unit]
            if self.head[d] + m * (self.load[d] + work) > self.cutoff:
                break  # larger k only adds work
            act = pre["activation"][hi] - pre["activation"][unit]
            static = prob.adam.static_bytes(pre["params"][hi] - pre["params"][unit])
            if self.limits is not None and \
                    self.static[d] + static + self.act[d] + act > self.limits[d] * (1 + 1e-12):
                break  # so does memory
            fits.append((k, work, act, static))
        ideal = (n - unit) / (S - stage)  # balanced sizes first: a capped search keeps those
        for k, work, act, static in sorted(fits, key=lambda f: abs(f[0] - ideal)):
            self.load[d] += work
            self.act[d] += act
            self.static[d] += static
            self.sizes.append(k)
            self._visit(stage + 1, unit + k)
            self.sizes.pop()
            self.load[d] -= work
            self.act[d] -= act
            self.static[d] -= static
            if self._stop():
                break
        if new_head:
            self.head[d] = None
