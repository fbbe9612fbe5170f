"""The device check behind ``scripts/gpu_check.sh``: correctness and a timed run of 1F1B,
ZB-H1, ZB-V and a solver schedule on whatever devices this machine has.

- 2+ GPUs: NCCL, one rank per GPU (4 ranks if there are 4), a timing run.
- 1 GPU: NCCL cannot put two ranks on one device, so 2 gloo ranks share it with P2P staged
  through the CPU: a correctness run, labelled so; its times are not representative.
- no GPU: the same on CPU with gloo (a dry run of the script).

The instance the schedules are built for uses per-stage F, I, W times measured here first
(:func:`measure_stage_times`, ms), so "predicted" is in ms and the raw measured/predicted ratios
mean something. Comm is taken as 0 (assumption, stated in the results). Every run is checked
against the single-process reference; the command exits non-zero if any check fails.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import torch

from zbsolve.io import atomic_write_text
from zbsolve.runtime.iw_split import StageRunner
from zbsolve.runtime.model import GPTConfig, build_stage_modules, lm_loss, make_batch, microbatch

SCHEDULES = ("1f1b", "zb-h1", "zb-v", "solver")


@dataclass
class Plan:
    ranks: int
    device: str
    backend: str
    mode: str  # timing | correctness | cpu-dry-run
    model: str


def plan_for_machine(model: str | None) -> Plan:
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus >= 2:
        return Plan(4 if gpus >= 4 else 2, "cuda", "nccl", "timing", model or "gpt-medium")
    if gpus == 1:
        return Plan(2, "cuda", "gloo", "correctness", model or "gpt-small")
    return Plan(2, "cpu", "gloo", "cpu-dry-run", model or "gpt-tiny")


def measure_stage_times(cfg: GPTConfig, n_stages: int, device: torch.device,
                        repeats: int = 3) -> dict[str, list[float]]:
    """Median ms of F, I and W of each stage for one microbatch (a minimal profile).

    On CPU with one thread, as each rank runs (RunOptions.threads)."""
    if device.type == "cpu":
        torch.set_num_threads(1)
    stages = build_stage_modules(cfg, n_stages)
    tokens, targets = make_batch(cfg, 1)
    x0 = microbatch(tokens, cfg, 0).to(device)
    y0 = microbatch(targets, cfg, 0).to(device)
    out: dict[str, list[float]] = {"F": [], "I": [], "W": []}

    def timed(fn, *args) -> tuple[float, Any]:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        result = fn(*args)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return (time.perf_counter() - t0) * 1e3, result

    hidden = torch.randn(cfg.microbatch_size, cfg.seq, cfg.hidden, device=device)
    for s, module in enumerate(stages):
        runner = StageRunner(module.to(device), s, n_stages, lm_loss, 1.0)
        x = x0 if s == 0 else hidden
        samples: dict[str, list[float]] = {"F": [], "I": [], "W": []}
        warmup = 2
        for rep in range(repeats + warmup):
            tf, _ = timed(runner.forward, rep, x, y0 if runner.is_last else None)
            grad = None if runner.is_last else torch.ones_like(hidden)
            ti, _ = timed(runner.backward_input, rep, grad)
            tw, _ = timed(runner.backward_weight, rep)
            if rep >= warmup:
                for k, t in zip("FIW", (tf, ti, tw)):
                    samples[k].append(t)
        for k in "FIW":
            out[k].append(round(median(samples[k]), 4))
        module.to("cpu")
    return out


def build_tables(plan: Plan, cfg: GPTConfig, m: int, device: torch.device,
                 solver_time: float) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    from zbsolve.baselines import generate
    from zbsolve.export.executor import lower
    from zbsolve.instance import load_instance

    p = plan.ranks
    times = {v: measure_stage_times(cfg, p * v, device) for v in (1, 2)}
    instances = {
        v: load_instance(dict(name=f"{plan.model}-p{p}-v{v}-measured", devices=p,
                              microbatches=m, chunks=v, placement="v" if v == 2 else "loop",
                              times=times[v], comm=0.0))
        for v in (1, 2)
    }
    tables = []
    for name in SCHEDULES:
        if name == "solver":
            from zbsolve.solver import SolveOptions, solve

            res = solve(instances[1], SolveOptions(time_limit=solver_time, workers=2, seed=0))
            tables.append(("solver", lower(instances[1], res.schedule)))
        else:
            inst = instances[2 if name == "zb-v" else 1]
            tables.append((name, lower(inst, generate(name, inst))))
    return tables, {f"v={v}": inst.to_dict() for v, inst in instances.items()}


def main(argv: list[str] | None = None) -> int:
    from zbsolve.runtime.launch import RankFailed, run_jobs
    from zbsolve.runtime.runner import Job, RunOptions

    parser = argparse.ArgumentParser(prog="gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="results folder (default results/gpu_check/<mode>)")
    parser.add_argument("--model", help="model preset (default by mode)")
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--solver-time", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)

    plan = plan_for_machine(args.model)
    cfg = GPTConfig.preset(plan.model)
    need = 2 * plan.ranks
    if cfg.layers < need:
        cfg = cfg.with_(layers=need)
    device = torch.device("cuda", 0) if plan.device == "cuda" else torch.device("cpu")
    out = Path(args.out or f"results/gpu_check/{plan.mode}")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tables, instances = build_tables(plan, cfg, args.microbatches, device, args.solver_time)
    jobs = [Job(t.to_dict(), cfg.to_dict(), label=name, trace=str((out / f"{name}.trace.json")
                                                                  .resolve()))
            for name, t in tables]
    opts = RunOptions(backend=plan.backend, device=plan.device, steps=2, timeout_s=args.timeout)
    try:
        reports = run_jobs(jobs, plan.ranks, opts)
    except RankFailed as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 3
    elapsed = time.perf_counter() - t0
    write_results(out, plan, cfg, reports, instances, elapsed, argv)
    ok = all(r["ok"] for r in reports)
    print(f"{'PASS' if ok else 'FAIL'}: {len(reports)} schedules on {plan.ranks} ranks "
          f"({plan.backend}, {plan.device}, {plan.mode}); results in {out}")
    return 0 if ok else 1


def write_results(out: Path, plan: Plan, cfg: GPTConfig, reports: list[dict], instances: dict,
                  elapsed: float, argv: list[str] | None) -> None:
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    label = {"timing": "timing run", "correctness":
             "CORRECTNESS RUN (one GPU shared by gloo ranks, P2P staged through the CPU): "
             "times are not representative", "cpu-dry-run": "CPU dry run (gloo): not a GPU result"}
    command = "scripts/gpu_check.sh " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [
        f"# gpu_check: {label[plan.mode]}",
        "",
        f"- command: `{command.strip()}`",
        f"- host: {platform.node()}; torch {torch.__version__}; GPUs: {gpus or 'none'}",
        f"- ranks {plan.ranks}, backend {plan.backend}, device {plan.device}; model "
        f"{plan.model} {cfg.to_dict()}; fp32 (TF32 off); 2 optimizer steps, step 1 timed",
        "- instance: per-stage F/I/W measured here (ms, one microbatch), comm assumed 0",
        f"- wall time of the whole check: {elapsed:.1f} s",
        "",
        "| schedule | check | max rel diff | step ms (measured) | predicted ms | step ratio | "
        "F ms | I ms | W ms | B ms | peak MiB per rank |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        t = r["timing"]
        mean = t.get("mean_ms", {})
        peaks = r["cuda_max_memory_allocated"] if plan.device == "cuda" \
            else r["peak_activation_bytes"]
        peak = " / ".join(f"{(b or 0) / 2**20:.0f}" for b in peaks)

        f = [f"{mean[k]:.3f}" if k in mean else "-" for k in "FIWB"]
        lines.append(
            f"| {r['label']} | {'PASS' if r['ok'] else 'FAIL'} | {r['max_rel_diff']:.2e} | "
            f"{t['step_ms']:.2f} | {t['predicted_makespan']:.2f} | "
            f"{t.get('ratio_raw', {}).get('step', float('nan')):.3f} | {' | '.join(f)} | "
            f"{peak} |")
    lines.append("")
    lines.append("Peak memory: torch.cuda.max_memory_allocated on GPU, tracked activation bytes "
                 "on CPU. Traces: `<schedule>.trace.json` (Perfetto, measured vs predicted).")
    atomic_write_text(out / "results.md", "\n".join(lines) + "\n")
    atomic_write_text(out / "results.json", json.dumps(
        {"plan": plan.__dict__, "model": cfg.to_dict(), "instances": instances,
         "reports": reports, "elapsed_s": elapsed, "command": command.strip()}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
