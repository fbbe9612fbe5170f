"""``zbsolve plan``: the split, the layout, the microbatch count and the schedule, chosen together.

A plan searches cases = microbatch sizes x layouts (chunks per device and their placement). For
each case (a ``SplitProblem``):

1. *search* (a fan-out task, ``search_case``): the smallest split bound over all splits (a
   small CP-SAT model, ``SplitProblem.min_bound``: a proven lower bound for the case), the
   splits within ``slack`` of it (depth-first enumeration; exhaustive unless its budget runs
   out), ranked by bound and then by their largest stage;
2. *evaluate* (fan-out tasks, ``zbsolve.plan.evaluate.solve_split``): the rule splits
   (torchtitan's, the Zero Bubble repository's) and the best ``candidates`` splits are solved by
   ``zbsolve.solver.solve`` under the device memory; a candidate whose bound is not below the
   best step time found so far is skipped (it cannot win).

The plan is the fastest schedule found. Its claim: no case searched has any split and schedule
faster than that case's lower bound (``CaseSearch.claim_lower``), so the gap to the smallest of
those is proven (``zbsolve.plan.split_search`` says why). ``time_limit`` is a hard wall-clock
budget for the whole plan: every solve gets a share of it and the fan-out stops what runs past
it, keeping what finished.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

from zbsolve import fanout
from zbsolve.layers import LayerProfile
from zbsolve.plan.accelerators import Accelerator
from zbsolve.plan.cost_model import analytic_profile
from zbsolve.plan.evaluate import SplitResult, solve_split
from zbsolve.plan.memory import MIXED_ADAM
from zbsolve.plan.rules import RuleError, torchtitan_split, zero_bubble_split
from zbsolve.plan.shapes import ModelShape
from zbsolve.plan.split_search import Split, SplitProblem

RULE_NAMES = ("torchtitan", "zero-bubble")
RENDER_RESERVE = 8.0  # seconds kept from the budget for the picture and the report


@dataclass(frozen=True)
class ChunkLayout:
    """Chunks per device and how the logical stages are placed on the devices."""

    chunks: int
    placement: str | tuple[int, ...] = "loop"

    @property
    def label(self) -> str:
        if self.chunks == 1 and self.placement in ("loop", "v"):
            return "c1"
        kind = self.placement if isinstance(self.placement, str) else "explicit"
        return f"{kind}-c{self.chunks}"


@dataclass
class PlanConfig:
    accelerator: Accelerator
    gpus: int
    global_batch: int
    model: ModelShape | None = None
    profile: LayerProfile | None = None  # a measured profile instead of the cost model
    pp: int | None = None  # pipeline ranks (default: every GPU); the rest is data parallel
    microbatch_size: int | None = None  # None: every size the batch allows is a case
    layouts: list[ChunkLayout] = field(default_factory=lambda: [
        ChunkLayout(1), ChunkLayout(2, "loop"), ChunkLayout(2, "v")])
    efficiency: float | None = None
    memory_fraction: float = 0.9  # of the datasheet capacity (CUDA context, NCCL, allocator)
    time_limit: float = 120.0  # seconds, hard, for the whole plan
    candidates: int = 4  # splits solved per case beside the rule splits
    slack: float = 0.02  # enumerate splits whose bound is within this of the smallest
    jobs: int = 2
    backend: str = "local"
    address: str | None = None
    workers: int = 1  # CP-SAT threads per solve
    seed: int = 0
    progress: bool = False

    def check(self) -> None:
        if (self.model is None) == (self.profile is None):
            raise ValueError("model: give a model shape (--hf/--hf-config) or a --profile")
        for key, least in (("gpus", 1), ("global_batch", 1), ("candidates", 0), ("jobs", 1),
                           ("workers", 1)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"--{key.replace('_', '-')}: expected an integer >= {least}, "
                                 f"got {value!r}")
        if self.pp is not None and (not isinstance(self.pp, int) or self.pp < 1):
            raise ValueError(f"--pp: expected an integer >= 1, got {self.pp!r}")
        if self.gpus % self.pipeline_ranks:
            raise ValueError(f"--pp: {self.pipeline_ranks} does not divide --gpus {self.gpus}")
        if not 0 < self.memory_fraction <= 1:
            raise ValueError(f"--memory-fraction: expected (0, 1], got {self.memory_fraction}")
        if not self.time_limit > 0:
            raise ValueError(f"--time-limit: expected seconds > 0, got {self.time_limit}")
        if not self.layouts:
            raise ValueError("--chunks/--placements: no layout to plan for")

    @property
    def pipeline_ranks(self) -> int:
        return self.pp or self.gpus

    @property
    def data_parallel(self) -> int:
        return self.gpus // self.pipeline_ranks

    @property
    def usable_bytes(self) -> float:
        return self.accelerator.memory_bytes * self.memory_fraction


@dataclass(frozen=True)
class PlanCase:
    key: str
    layout: ChunkLayout
    microbatch_size: int
    problem: SplitProblem
    rules: dict[str, Split | str]  # the rule's split, or why it does not apply
    tokens_per_step: int  # global batch x sequence length (0 when unknown)


@dataclass
class CaseSearch:
    """What the search of one case found before any schedule was solved."""

    lower: float  # proven: no split of this case has a bound below it
    argmin: Split | None
    cutoff: float
    complete: bool  # the enumeration listed every split with bound <= cutoff
    enumerated: list[tuple[float, Split]]  # (bound, split), by bound
    picks: list[Split]  # the candidates to solve, best first
    seconds: float = 0.0

    def claim_lower(self, solved: dict[Split, SplitResult]) -> float:
        """A lower bound on every split and schedule of the case, given the solved splits."""
        lower = self.lower
        if self.complete:
            lbs = [solved[s].lower_bound if s in solved else b for b, s in self.enumerated]
            lower = max(lower, min([self.cutoff, *lbs]))
        return lower


def search_case(problem: SplitProblem, rule_splits: list[Split], candidates: int, slack: float,
                time_limit: float = 10.0, max_nodes: int = 60_000,
                max_results: int = 5_000) -> CaseSearch:
    """Phase 1 of a case (a fan-out task): bounds, enumeration, the candidates to solve."""
    t0 = time.perf_counter()
    lower, argmin = problem.min_bound(time_limit=max(0.5 * time_limit, 0.2),
                                      hints=tuple(rule_splits))
    if not math.isfinite(lower):
        return CaseSearch(lower, None, lower, True, [], [], time.perf_counter() - t0)
    cutoff = lower * (1 + slack)
    left = time_limit - (time.perf_counter() - t0)
    found, complete = problem.enumerate_splits(cutoff, max_nodes=max_nodes,
                                               max_results=max_results,
                                               time_limit=max(0.8 * left, 0.1))
    if argmin is not None and all(s != argmin for _, s in found):
        found.append((problem.bound(argmin), argmin))
    bucket = max(lower * 1e-3, 1e-9)
    ranked = sorted(found, key=lambda bs: (round(bs[0] / bucket), problem.largest_stage(bs[1]),
                                           bs[1]))
    skip = {tuple(s) for s in rule_splits}  # solved anyway
    picks = [s for b, s in ranked if s not in skip and math.isfinite(b)][:candidates]
    found.sort()
    return CaseSearch(lower, argmin, cutoff, complete, found, picks, time.perf_counter() - t0)


# ---------------------------------------------------------------------------- cases
def _microbatch_sizes(cfg: PlanConfig) -> list[int]:
    per_replica, rem = divmod(cfg.global_batch, cfg.data_parallel)
    if rem:
        raise ValueError(f"--global-batch: {cfg.global_batch} sequences do not split over "
                         f"{cfg.data_parallel} data-parallel replicas")
    fixed = cfg.microbatch_size
    if cfg.profile is not None:  # a measured profile is for one microbatch size
        measured = int(cfg.profile.meta.get("microbatch_size", fixed or 1))
        if fixed is not None and fixed != measured:
            raise ValueError(f"--microbatch-size: the profile was measured with microbatches "
                             f"of {measured}, not {fixed}")
        fixed = measured
    if fixed is not None:
        if per_replica % fixed:
            raise ValueError(f"--microbatch-size: {fixed} does not divide the {per_replica} "
                             f"sequences of a replica's batch")
        return [fixed]
    sizes = [b for b in range(1, per_replica + 1) if per_replica % b == 0
             and per_replica // b >= cfg.pipeline_ranks]
    return sizes or [1]


def _profile_for(cfg: PlanConfig, b: int) -> LayerProfile:
    if cfg.profile is not None:
        return cfg.profile
    return analytic_profile(cfg.model, cfg.accelerator, b, cfg.efficiency)


def sequence_length(cfg: PlanConfig) -> int | None:
    """Tokens per sequence (None when a profile does not say)."""
    if cfg.model is not None:
        return cfg.model.seq
    seq = cfg.profile.meta.get("shape", {}).get("seq") or cfg.profile.meta.get("seq")
    return int(seq) if seq else None


def _comm_ms(cfg: PlanConfig, profile: LayerProfile) -> float:
    boundary = max(layer.boundary for layer in profile.layers)
    eta = cfg.accelerator.efficiency if cfg.efficiency is None else cfg.efficiency
    return cfg.accelerator.hop_link(cfg.pipeline_ranks).transfer_ms(boundary, eta)


def _rules(profile: LayerProfile, p: int, layout: ChunkLayout) -> dict[str, Split | str]:
    blocks = len(profile) - 2
    out: dict[str, Split | str] = {}
    for name, make in (("torchtitan", lambda: torchtitan_split(blocks, p * layout.chunks)),
                       ("zero-bubble", lambda: zero_bubble_split(blocks, p, layout.chunks))):
        try:
            out[name] = tuple(make())
        except RuleError as exc:
            out[name] = str(exc)
    return out


def build_cases(cfg: PlanConfig) -> tuple[list[PlanCase], list[str]]:
    """Every (microbatch size, layout) case that can exist, and notes on those that cannot."""
    cases, notes = [], []
    p = cfg.pipeline_ranks
    seq = sequence_length(cfg)
    for b in _microbatch_sizes(cfg):
        profile = _profile_for(cfg, b)
        m = cfg.global_batch // cfg.data_parallel // b
        comm = _comm_ms(cfg, profile)
        for layout in cfg.layouts:
            key = f"b{b}-m{m}-{layout.label}"
            if p * layout.chunks > len(profile):
                notes.append(f"{key}: {p * layout.chunks} stages exceed the {len(profile)} layers")
                continue
            try:
                problem = SplitProblem(profile, p, m, layout.chunks, layout.placement, comm,
                                       cfg.usable_bytes, MIXED_ADAM)
            except ValueError as exc:
                notes.append(f"{key}: {exc}")
                continue
            tokens = cfg.global_batch * seq if seq else 0
            cases.append(PlanCase(key, layout, b, problem, _rules(profile, p, layout), tokens))
    return cases, notes


# ---------------------------------------------------------------------------- the plan
@dataclass
class PlanResult:
    config: PlanConfig
    cases: list[PlanCase]
    searches: dict[str, CaseSearch]
    results: dict[tuple[str, Split], SplitResult]
    notes: list[str]
    best: tuple[PlanCase, SplitResult] | None
    fanout: dict[str, Any]
    seconds: float
    interrupted: bool = False
    # the plan's split re-solved with no more memory than each rule's schedule peaked at
    at_rule_peak: dict[str, SplitResult] = field(default_factory=dict)

    def case(self, key: str) -> PlanCase:
        return next(c for c in self.cases if c.key == key)

    def solved(self, case_key: str) -> dict[Split, SplitResult]:
        return {s: r for (k, s), r in self.results.items() if k == case_key}

    def case_lower(self, case_key: str) -> float:
        search = self.searches.get(case_key)
        if search is None:
            return 0.0
        return search.claim_lower(self.solved(case_key))

    @property
    def lower_bound(self) -> float:
        """No case searched has a split and schedule faster than this."""
        keys = [c.key for c in self.cases]
        return min((self.case_lower(k) for k in keys), default=0.0)


def render_reserve(cases: list[PlanCase], time_limit: float) -> float:
    """Seconds kept from the budget for the report and the timeline picture, which costs
    about 3 ms per op drawn on a loaded 2-core machine."""
    ops = max((3 * c.problem.stages * c.problem.microbatches for c in cases), default=0)
    return min(RENDER_RESERVE + 0.005 * ops, 0.4 * time_limit)


def plan(cfg: PlanConfig, started: float | None = None) -> PlanResult:
    """Search every case (see the module docstring) within ``cfg.time_limit`` seconds from
    ``started`` (a ``time.monotonic()`` value; default: now), the report's time included."""
    cfg.check()
    t0 = time.monotonic() if started is None else started
    cases, notes = build_cases(cfg)
    if not cases:
        raise ValueError("no case to plan: " + "; ".join(notes))
    end = t0 + cfg.time_limit - render_reserve(cases, cfg.time_limit)
    run_kw = dict(progress=cfg.progress, grace=3.0)
    results: dict[tuple[str, Split], SplitResult] = {}
    at_rule_peak: dict[str, SplitResult] = {}
    with fanout.Executor(cfg.jobs, cfg.backend, cfg.address) as pool:
        pool.start(preload=("zbsolve.plan.planner", "zbsolve.plan.evaluate", "zbsolve.solver"))
        searches, interrupted, stats = _search_all(pool, cfg, cases,
                                                   t0 + 0.3 * (end - t0), run_kw)
        if not interrupted:
            interrupted = _evaluate_all(pool, cfg, cases, searches, results,
                                        t0 + 0.85 * (end - t0), run_kw, stats)
        best = _best(cases, results)
        if best is not None and not interrupted:
            interrupted = _at_rule_peaks(pool, cfg, best, results, at_rule_peak, end, run_kw,
                                         stats)
    return PlanResult(cfg, cases, searches, results, notes, best, stats,
                      time.monotonic() - t0, interrupted, at_rule_peak)


def _search_all(pool: fanout.Executor, cfg: PlanConfig, cases: list[PlanCase], deadline: float, run_kw: dict
                ) -> tuple[dict[str, CaseSearch], bool, dict[str, Any]]:
    tasks = [fanout.Task(c.key, search_case,
                         (c.problem, [s for s in c.rules.values() if isinstance(s, tuple)],
                          cfg.candidates, cfg.slack),
                         time_limit=max(0.9 * (deadline - time.monotonic()) * cfg.jobs
                                        / len(cases) - 1.0, 0.5)) for c in cases]
    res = pool.run(tasks, deadline=deadline, desc="plan: bounds", **run_kw)
    searches = {o.key: o.value for o in res.outcomes if o.ok}
    stats = {"backend": res.backend, "search": res.counts(),
             "search_failed": {o.key: f"{o.status}: {o.error}" for o in res.outcomes
                               if not o.ok}}
    return searches, res.interrupted, stats


def _evaluate_all(pool: fanout.Executor, cfg: PlanConfig, cases: list[PlanCase],
                  searches: dict[str, CaseSearch],
                  results: dict[tuple[str, Split], SplitResult], deadline: float, run_kw: dict,
                  stats: dict[str, Any]) -> bool:
    by_key = {c.key: c for c in cases}
    bounds: dict[str, tuple[str, Split, bool]] = {}
    first: list[fanout.Task] = []
    rest: list[fanout.Task] = []
    for case in cases:
        search = searches.get(case.key)
        rule_splits = [s for s in case.rules.values() if isinstance(s, tuple)]
        picks = list(search.picks) if search else []
        for i, split in enumerate(dict.fromkeys([*picks[:1], *rule_splits, *picks[1:]])):
            key = f"{case.key}:{','.join(map(str, split))}"
            bounds[key] = (case.key, split, split in rule_splits)
            (first if i == 0 or split in rule_splits else rest).append(
                fanout.Task(key, solve_split, (case.problem, split),
                            {"workers": cfg.workers, "seed": cfg.seed}))
    tasks = first + rest
    left = max(deadline - time.monotonic(), 1.0)
    share = max(2.0, min(120.0, left * cfg.jobs / max(len(tasks), 1)))
    tasks = [fanout.Task(t.key, t.fn, t.args, t.kwargs, time_limit=share) for t in tasks]
    best = [math.inf]

    def prune(task: fanout.Task) -> fanout.Task | None:
        case_key, split, is_rule = bounds[task.key]
        if not is_rule and by_key[case_key].problem.bound(split) >= best[0] * (1 - 1e-9):
            return None  # cannot beat what is already found
        return task

    def record(outcome: fanout.Outcome) -> None:
        if outcome.ok:
            case_key, split, _ = bounds[outcome.key]
            results[(case_key, split)] = outcome.value
            best[0] = min(best[0], outcome.value.step_ms)

    res = pool.run(tasks, deadline=deadline, prepare=prune, on_outcome=record,
                     desc="plan: solve", **run_kw)
    stats["solve"] = res.counts()
    stats["solve_share_s"] = share
    stats["failed"] = {o.key: f"{o.status}: {o.error}" for o in res.outcomes
                       if o.status in ("error", "died", "timeout")}
    return res.interrupted


def _at_rule_peaks(pool: fanout.Executor, cfg: PlanConfig, best: tuple[PlanCase, SplitResult],
                   results: dict[tuple[str, Split], SplitResult],
                   out: dict[str, SplitResult], deadline: float, run_kw: dict,
                   stats: dict[str, Any]) -> bool:
    """At equal memory in the strict sense: the plan's split solved again with every device
    limited to the largest peak of each rule's schedule (when the plan's own peak is higher)."""
    case, res = best
    tasks = []
    for name in RULE_NAMES:
        split = case.rules.get(name)
        rule = results.get((case.key, split)) if isinstance(split, tuple) else None
        if rule is None or not rule.found:
            continue
        peak = max(rule.peak_gb()) * 1e9
        if max(res.peak_gb()) * 1e9 <= peak * (1 + 1e-9):
            out[name] = res  # the plan already fits in the rule's memory
            continue
        problem = replace(case.problem, usable_bytes=peak)
        tasks.append(fanout.Task(name, solve_split, (problem, res.split),
                                 {"workers": cfg.workers, "seed": cfg.seed},
                                 time_limit=max(deadline - time.monotonic() - 1.0, 1.0)))
    if not tasks:
        return False
    done = pool.run(tasks, deadline=deadline, desc="plan: equal memory", **run_kw)
    out.update({o.key: o.value for o in done.outcomes if o.ok})
    stats["equal_memory"] = done.counts()
    return done.interrupted


def _best(cases: list[PlanCase], results: dict[tuple[str, Split], SplitResult]
          ) -> tuple[PlanCase, SplitResult] | None:
    by_key = {c.key: c for c in cases}
    found = [(r.step_ms, max(r.peak_gb() or [0.0]), k, r) for (k, _), r in results.items()
             if r.found]
    if not found:
        return None
    _, _, key, res = min(found, key=lambda t: (t[0], t[1], t[2]))
    return by_key[key], res
