"""The closed loop: profile -> solve -> export -> run, predicted vs measured step time.

For one model on p ranks it profiles two layouts (the stage split differs, so each is profiled
on its own stages): v = 1 with loop placement (the solver's schedule, 1F1B, ZB-H1) and v = 2
with V placement (the solver's schedule, ZB-V, which exists only there). Every schedule is
judged by the simulator on the profiled instance (its makespan in ms is the *prediction*),
lowered to an executor table and run by the runner on a real torch.distributed group, which
checks the gradients against the single-process reference and measures the step time.

The memory limit (per device, the same for both layouts) is by default the largest simulated
peak among the hand-made schedules of the table, so that every one of them fits and the solver
gets no more memory than the hungriest of them; ``1f1b`` takes 1F1B's peak on the v = 1 layout
(the papers' setting: the I/W-split schedules may then not fit, since on this fp32 model what W
keeps is as large as what F saved), ``none`` sets no limit. A hand-made schedule over the limit is
still run (its row says so), lowered without the limit.

Each schedule runs ``runs`` times (interleaved with the others, so a slow patch of a shared
machine hits all of them alike); each run takes ``steps`` optimizer steps and the runner times
the last one. The table reports the median and the range of those step times.

Step modes (``step_modes``, default none only): with sync and/or post-validation the loop also
profiles each stage's step-boundary work (``zbsolve.profiler.step_times``: optimizer step,
local norm, snapshot), gives each layout's instance the mode's ``step`` section, solves for that
mode, and runs every schedule in every mode (the runner's step boundary, SGD, no clipping), so
each row's prediction and measurement include the mode's step; its predicted and measured share
after the pipeline (``boundary``) are columns. Pairs compare schedules within a mode, and one
schedule across modes (what post-validation saves, predicted and measured).
"""

from __future__ import annotations

import csv
import json
import os
import platform
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from zbsolve.instance import Instance, load_instance
from zbsolve.io import atomic_open, atomic_write_text
from zbsolve.profiler.units import MIB
from zbsolve.profiler.writer import instance_dict


@dataclass(frozen=True)
class Layout:
    name: str
    chunks: int
    placement: str
    schedules: tuple[str, ...]  # "zbsolve" = the solver's schedule; others: baselines registry


LAYOUTS = (
    Layout("v1-loop", 1, "loop", ("zbsolve", "1f1b", "zb-h1")),
    Layout("v2-V", 2, "v", ("zbsolve", "zb-v")),
)


LIMIT_POLICIES = ("baselines", "1f1b", "none")


@dataclass(frozen=True)
class LoopOptions:
    devices: int = 2
    microbatches: int = 8
    repeats: int = 10  # profile samples per stage
    warmup: int = 3
    interval: float = 0.0  # seconds between profile sample rounds
    clock: str = "wall"  # profile clock: wall | cpu
    p2p_mode: str = "pingpong"  # comm measurement: pingpong | handoff
    time_limit: float = 20.0  # solver seconds per layout
    workers: int = 1  # CP-SAT workers
    seed: int = 0
    runs: int = 3  # timed runs per schedule
    steps: int = 2  # optimizer steps per run; the last is timed
    memory_limit: str | float = "baselines"  # baselines | 1f1b | none | bytes per device
    round_digits: int | None = None  # solve the rounded instance instead of the measured one
    threads: int = 1
    device: str = "cpu"
    timeout_s: float = 120.0
    step_modes: tuple[str, ...] = ("none",)  # none | sync | post-validation (module docstring)

    def check(self) -> None:
        from zbsolve.step import MODES

        if not self.step_modes or len(set(self.step_modes)) != len(self.step_modes) or any(
                m not in MODES for m in self.step_modes):
            raise ValueError(f"step_modes: expected distinct modes among {', '.join(MODES)}, "
                             f"got {','.join(self.step_modes)!r} (--step-modes)")
        for name in ("devices", "microbatches", "repeats", "runs", "steps", "threads", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value!r} "
                                 f"(--{name.replace('_', '-')})")
        if self.devices < 2:
            raise ValueError("devices: the loop runs a pipeline, expected >= 2 (--devices)")
        if not (isinstance(self.memory_limit, (int, float)) and self.memory_limit > 0) and \
                self.memory_limit not in LIMIT_POLICIES:
            raise ValueError(f"memory_limit: expected one of {LIMIT_POLICIES} or a size, got "
                             f"{self.memory_limit!r} (--memory-limit)")
        if self.time_limit <= 0:
            raise ValueError(f"time_limit: expected seconds > 0, got {self.time_limit}")


@dataclass
class Planned:
    """One schedule of one layout, ready to run."""

    layout: str
    schedule: str
    chunks: int
    table: dict[str, Any]
    predicted_ms: float
    predicted_bubble: float
    predicted_peak_mib: float
    fits_limit: bool
    note: str = ""
    reports: list[dict[str, Any]] = field(default_factory=list)
    mode: str = "none"  # the step mode it is predicted and run in

    @property
    def label(self) -> str:
        base = f"{self.layout}/{self.schedule}"
        return base if self.mode == "none" else f"{base}/{self.mode}"


def _schedule_for(name: str, inst: Instance, opts: LoopOptions):
    """(schedule, note): the solver's schedule or a hand-made one."""
    if name == "zbsolve":
        from zbsolve.solver import SolveOptions, solve

        result = solve(inst, SolveOptions(time_limit=opts.time_limit, workers=opts.workers,
                                          seed=opts.seed))
        sched = result.schedule
        sched.name = "zbsolve"
        return sched, f"solver {result.status}, best hand-made hint {result.baseline}"
    from zbsolve.baselines import generate

    return generate(name, inst), ""


def plan(inst: Instance, layout: Layout, opts: LoopOptions) -> list[Planned]:
    """Schedules of one layout, each judged by the simulator and lowered to an executor table
    (in the instance's step mode: the solver optimizes that mode's step)."""
    from zbsolve.export.executor import lower
    from zbsolve.simulate import simulate

    out = []
    unlimited = inst.with_(limit=None)
    for name in layout.schedules:
        sched, note = _schedule_for(name, inst, opts)
        sim = simulate(inst, sched)  # with the limit: feasibility for the row
        table = lower(unlimited if not sim.feasible else inst, sched)
        if not sim.feasible:
            note = (note + "; " if note else "") + "over the memory limit (run without it)"
        out.append(Planned(layout.name, name, layout.chunks, table.to_dict(), sim.makespan,
                           sim.bubble_makespan, max(sim.peak_memory), sim.feasible, note,
                           mode=inst.step.mode))
    return out


def memory_limit(policy: str | float, instances: dict[str, Instance]) -> tuple[float | None, str]:
    """(limit in MiB per device or None, how it was chosen), per the module docstring."""
    from zbsolve.baselines import generate
    from zbsolve.simulate import simulate

    if isinstance(policy, (int, float)):
        return policy / MIB, "--memory-limit"
    if policy == "none":
        return None, "none"
    if policy == "1f1b":
        inst = instances[LAYOUTS[0].name]
        return max(simulate(inst, generate("1f1b", inst)).peak_memory), "1F1B's simulated peak"
    peaks = []
    for layout in LAYOUTS:
        inst = instances[layout.name]
        for name in layout.schedules:
            if name != "zbsolve":
                peaks.append(max(simulate(inst, generate(name, inst)).peak_memory))
    return max(peaks), "largest simulated peak of the hand-made schedules"


def run_loop(cfg, opts: LoopOptions, out_dir: str | Path, command: str = "") -> dict[str, Any]:
    """Profile, solve, export and run; write the table and the artefacts under ``out_dir``."""
    import torch

    from zbsolve.profiler.api import profile
    from zbsolve.profiler.p2p import measure_p2p
    from zbsolve.profiler.step_times import measure_step_times, step_section
    from zbsolve.runtime.launch import run_jobs
    from zbsolve.runtime.runner import Job, RunOptions

    opts.check()
    load_before = os.getloadavg()
    out = Path(out_dir)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    p2p = measure_p2p((cfg.microbatch_size, cfg.seq, cfg.hidden), "float32",
                      threads=opts.threads, mode=opts.p2p_mode)
    instances: dict[str, Instance] = {}
    for layout in LAYOUTS:
        run = profile(cfg, devices=opts.devices, chunks=layout.chunks,
                      microbatches=opts.microbatches, placement=layout.placement,
                      repeats=opts.repeats, warmup=opts.warmup, threads=opts.threads,
                      device=opts.device, interval=opts.interval,
                      clock=opts.clock, p2p=p2p, name=layout.name,
                      command=command)
        instances[layout.name] = load_instance(instance_dict(run, opts.round_digits))
    limit_mib, limit_source = memory_limit(opts.memory_limit, instances)
    planned: list[Planned] = []
    step_times: dict[str, Any] = {}
    for layout in LAYOUTS:
        inst = instances[layout.name].with_(limit=limit_mib)
        instances[layout.name] = inst
        inst.dump(out / f"instance-{layout.name}.yaml")
        if "none" in opts.step_modes:
            planned += plan(inst, layout, opts)
        active = [m for m in opts.step_modes if m != "none"]
        if active:
            times = measure_step_times(cfg.to_dict(), inst.stages, repeats=opts.repeats,
                                       warmup=opts.warmup, threads=opts.threads,
                                       clock=opts.clock)
            step_times[layout.name] = times.to_dict()
        for mode in active:
            stepped = inst.with_(step=step_section(times, mode, inst.placement, inst.comm))
            stepped.dump(out / f"instance-{layout.name}-{mode}.yaml")
            planned += plan(stepped, layout, opts)
    for p in planned:
        name = p.label.replace("/", "-")
        atomic_write_text(out / "tables" / f"{name}.json", json.dumps(p.table))
    jobs = [Job(p.table, cfg.to_dict(), label=p.label, options={"step_mode": p.mode})
            for _ in range(opts.runs) for p in planned]
    backend = "nccl" if opts.device.startswith("cuda") and torch.cuda.device_count() >= \
        opts.devices else "gloo"
    reports = run_jobs(jobs, opts.devices, RunOptions(
        backend=backend, device="cuda" if opts.device.startswith("cuda") else "cpu",
        steps=opts.steps, threads=opts.threads, timeout_s=opts.timeout_s))
    by_label = {p.label: p for p in planned}
    for rep in reports:
        by_label[rep["label"]].reports.append(rep)
    rows = [row_of(p) for p in planned]
    pairs = pair_rows(planned)
    work = {name: inst.total_work / inst.m for name, inst in instances.items()}
    first = work[LAYOUTS[0].name]
    summary = {
        "command": command,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU(s)",
        "load_average_1m": {"before": round(load_before[0], 2),
                            "after": round(os.getloadavg()[0], 2)},
        "device": opts.device,
        "backend": backend,
        "torch": str(torch.__version__),
        "model": cfg.to_dict(),
        "options": asdict(opts),
        "memory_limit_mib": limit_mib,
        "memory_limit_source": limit_source,
        "comm_ms": p2p.one_way_ms.to_dict(),
        "comm_mode": p2p.mode,
        # the layouts cut the same model: their F+I+W per microbatch should agree; a large
        # difference means the machine was disturbed while one of them was profiled
        "work_per_microbatch_ms": work,
        "work_ratio_to_first_layout": {k: v / first for k, v in work.items()},
        "profiles": {name: {k: list(getattr(inst, k)) for k in ("F", "I", "W")}
                     | {"comm": inst.comm, "activation": list(inst.activation),
                        "weight": list(inst.weight)}
                     for name, inst in instances.items()},
        "rows": rows,
        "pairs": pairs,
    }
    if step_times:
        summary["step_times_ms"] = step_times
    write_outputs(out, summary)
    return summary


def row_of(p: Planned) -> dict[str, Any]:
    """One table row: prediction (simulator on the profile) vs measurement (the runner)."""
    steps = [r["timing"]["step_ms"] for r in p.reports if "timing" in r]
    ok = bool(p.reports) and all(r["ok"] for r in p.reports)
    measured = statistics.median(steps) if steps else float("nan")
    peaks = [max(r["peak_activation_bytes"]) / MIB for r in p.reports]
    units = [r["timing"]["unit_ms"] for r in p.reports if "timing" in r]
    calibrated = [r["timing"]["ratio_calibrated"].get("step", float("nan"))
                  for r in p.reports if "timing" in r]
    boundary = [r["timing"]["step_boundary"]["boundary_ms"] for r in p.reports
                if "step_boundary" in r.get("timing", {})]
    predicted_step = p.table.get("predicted", {}).get("step") or {}
    return {
        "layout": p.layout,
        "schedule": p.schedule,
        "step_mode": p.mode,
        "chunks": p.chunks,
        "predicted_ms": p.predicted_ms,
        "measured_ms": measured,
        "measured_min_ms": min(steps) if steps else float("nan"),
        "measured_max_ms": max(steps) if steps else float("nan"),
        "measured_over_predicted": measured / p.predicted_ms if p.predicted_ms else float("nan"),
        "predicted_boundary_ms": predicted_step.get("boundary", 0.0),
        "measured_boundary_ms": statistics.median(boundary) if boundary else float("nan"),
        "runs": len(steps),
        "compute_ratio": statistics.median(units) if units else float("nan"),
        "step_ratio_calibrated": statistics.median(calibrated) if calibrated else float("nan"),
        "predicted_bubble": p.predicted_bubble,
        "predicted_peak_mib": p.predicted_peak_mib,
        "measured_peak_mib": max(peaks) if peaks else float("nan"),
        "fits_limit": p.fits_limit,
        "grads_ok": ok,
        "max_rel_diff": max((r["max_rel_diff"] for r in p.reports), default=float("nan")),
        "note": p.note,
    }


MIN_RUNS_FOR_SPREAD = 3


def _step_times(p: Planned) -> list[float]:
    return [r["timing"]["step_ms"] for r in p.reports if "timing" in r]


def compared(a: Planned, b: Planned) -> bool:
    """Which pairs get a row: two schedules in one step mode, or one schedule in two modes."""
    return a.mode == b.mode or (a.layout, a.schedule) == (b.layout, b.schedule)


def pair_rows(planned: list[Planned]) -> list[dict[str, Any]]:
    """For each pair (a, b): predicted and measured difference, and whether the gain holds.

    ``diff = (a - b) / b`` (negative: a is faster), predicted from the simulator, measured run
    by run (run i of a against run i of b: the runs are interleaved, so both saw the same
    machine) as the median with its min..max. ``gain`` is the same comparison seen from the
    schedule predicted faster: (slower - faster) / faster, so a confirmed gain is positive. A
    predicted gain is *confirmed* when every run shows it, *not confirmed* when every run shows
    the opposite or the runs straddle zero; with fewer than ``MIN_RUNS_FOR_SPREAD`` runs it is
    not judged.
    """
    out = []
    for i, a in enumerate(planned):
        for b in planned[i + 1:]:
            if not compared(a, b):
                continue
            ta, tb = _step_times(a), _step_times(b)
            n = min(len(ta), len(tb))
            if not n or not b.predicted_ms or not a.predicted_ms:
                continue
            pred = (a.predicted_ms - b.predicted_ms) / b.predicted_ms
            diffs = sorted((ta[k] - tb[k]) / tb[k] for k in range(n))
            a_fast = pred < 0
            fast, slow = (a, b) if a_fast else (b, a)
            t_fast, t_slow = (ta, tb) if a_fast else (tb, ta)
            gains = sorted((t_slow[k] - t_fast[k]) / t_fast[k] for k in range(n))
            pred_gain = (slow.predicted_ms - fast.predicted_ms) / fast.predicted_ms
            if abs(pred) < 1e-9:
                verdict = "tie predicted"
            elif n < MIN_RUNS_FOR_SPREAD:
                verdict = f"not judged ({n} run(s); need {MIN_RUNS_FOR_SPREAD})"
            elif all(g > 0 for g in gains):
                verdict = "confirmed"
            elif all(g < 0 for g in gains):
                verdict = "NOT confirmed: measured the other way in every run"
            else:
                verdict = "NOT confirmed: within run-to-run spread"
            out.append({
                "a": a.label, "b": b.label,
                "predicted_diff": pred,
                "measured_diff": statistics.median(diffs),
                "measured_min": diffs[0], "measured_max": diffs[-1],
                "runs": n,
                "faster_predicted": fast.label if abs(pred) >= 1e-9 else "",
                "predicted_gain": pred_gain if abs(pred) >= 1e-9 else 0.0,
                "measured_gain": statistics.median(gains),
                "measured_gain_min": gains[0], "measured_gain_max": gains[-1],
                "verdict": verdict,
            })
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e-2 and v != 0 else f"{v:.3f}"
    return str(v)


def markdown(summary: dict[str, Any]) -> str:
    rows = summary["rows"]
    cols = list(rows[0])
    mib = summary["memory_limit_mib"]
    limit = "none" if mib is None else f"{mib:.4f} MiB"
    lines = [
        "# Closed loop: profile -> solve -> export -> run",
        "",
        f"Command: `{summary['command']}`",
        "",
        f"Model {summary['model']}; device {summary['device']} ({summary['backend']}), torch "
        f"{summary['torch']}; memory limit {limit} per device ({summary['memory_limit_source']}); "
        f"one-way P2P ({summary['comm_mode']}) {summary['comm_ms']['median']:.4f} ms. "
        f"Machine {summary['machine']}, "
        f"1-minute load average {summary['load_average_1m']['before']} before, "
        f"{summary['load_average_1m']['after']} after (the run's own ranks add about their "
        "count; more than that means other jobs shared the machine and timings are noisy).",
        "Predicted = simulator makespan on the profiled instance (ms); measured = the runner's "
        "step time of the last of each run's optimizer steps, median over runs (min..max "
        "beside it); compute_ratio = the run's total op time / the profile's (1 = the profile "
        "predicted the ops; the rest of the gap is hand-offs and waiting); step_ratio_calibrated = "
        "measured / predicted step after scaling the prediction by compute_ratio (1 = the "
        "schedule's shape, its bubbles and hand-offs, was predicted right); peak memory: "
        "simulator vs the runner's tracked activation bytes.",
        *(["Step modes (step_mode): sync and post-validation rows include the step boundary "
           "in both the prediction (the instance's step section from the profiled optimizer "
           "step, local norm and snapshot: step_times_ms in loop.json) and the measurement; "
           "predicted/measured_boundary_ms = the step's time after the pipeline's last op. The "
           "measured post-validation step also holds the verdict's return along the pipeline "
           "(the runner waits for it; the model puts it in the next step's warm-up)."]
          if any(r.get("step_mode", "none") != "none" for r in rows) else []),
        "",
        "| " + " | ".join(cols) + " |",
        "| " + " | ".join("---" for _ in cols) + " |",
    ]
    lines += ["| " + " | ".join(_fmt(r[c]) for c in cols) + " |" for r in rows]
    pairs = summary.get("pairs") or []
    if pairs:
        lines += ["", "Pairs: diff = (a - b) / b, negative = a faster; measured run by run "
                  "(median, min..max over runs). A predicted gain is confirmed only when every "
                  "run shows it.", "",
                  "| a | b | predicted (a-b)/b | measured (a-b)/b | spread | runs | predicted "
                  "faster | its gain: predicted | measured (spread) | verdict |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {q['a']} | {q['b']} | {q['predicted_diff']:+.1%} | "
                  f"{q['measured_diff']:+.1%} | {q['measured_min']:+.1%}..{q['measured_max']:+.1%}"
                  f" | {q['runs']} | {q['faster_predicted'] or '-'} | {q['predicted_gain']:+.1%}"
                  f" | {q['measured_gain']:+.1%} ({q['measured_gain_min']:+.1%}.."
                  f"{q['measured_gain_max']:+.1%}) | {q['verdict']} |" for q in pairs]
    ratio = ", ".join(f"{k} {v:.3f}" for k, v in summary["work_ratio_to_first_layout"].items())
    lines += ["", f"Profile consistency: F+I+W of the whole model per microbatch, relative to "
              f"the first layout: {ratio} (the same model cut two ways; far from 1 = the "
              "machine was disturbed during one profile)."]
    lines += ["", "Profiled per-stage times (ms) and memory (MiB):", ""]
    for name, prof in summary["profiles"].items():
        lines.append(f"- {name}: F {prof['F']}, I {prof['I']}, W {prof['W']}, comm "
                     f"{prof['comm']}, activation {prof['activation']}, weight "
                     f"{prof['weight']}")
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, summary: dict[str, Any]) -> None:
    rows = summary["rows"]
    with atomic_open(out / "loop.csv", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    atomic_write_text(out / "loop.md", markdown(summary))
    atomic_write_text(out / "loop.json", json.dumps(summary, indent=1, default=str))
