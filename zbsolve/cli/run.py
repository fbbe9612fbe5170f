"""``zbsolve run TABLE --model gpt-tiny``: execute an executor table on a real model, prove the
gradients against a single-process reference, and measure the timeline.

Spawns one local process per rank, or, under torchrun (RANK/WORLD_SIZE set), runs as the rank
torchrun made it. torch is imported inside the handler only.
"""

from __future__ import annotations

import sys

from zbsolve.cli import args as types
from zbsolve.cli.common import add_json, print_json, report_error

EXIT_MISMATCH = 1
EXIT_RANK_FAILED = 3


def register(sub) -> None:
    parser = sub.add_parser(
        "run", help="run an executor table on a GPT model with torch.distributed; prove gradients")
    parser.add_argument("table", help="executor table JSON (zbsolve export --format executor)")
    parser.add_argument("--model", default=None,
                        help="model preset: gpt-tiny (CPU), gpt-small, gpt-medium (default "
                             "gpt-tiny, or the model the table's instance was profiled from by "
                             "zbsolve profile --hf/--module)")
    for name in ("layers", "hidden", "heads", "seq", "vocab"):
        parser.add_argument(f"--{name}", type=types.positive_int,
                            help=f"override the preset's {name} (default: the preset's)")
    parser.add_argument("--microbatch-size", type=types.positive_int,
                        help="sequences per microbatch (default: the preset's)")
    parser.add_argument("--seed", type=types.seed, default=0, help="model and data seed (default 0)")
    from zbsolve.cli.profile import add_own_model_args

    add_own_model_args(parser)  # --hf / --module: run your model's stages instead of the GPT
    parser.add_argument("--steps", type=types.positive_int, default=2, help="optimizer steps (default 2)")
    parser.add_argument("--lr", type=types.positive_number, default=None,
                        help="the optimizer's learning rate (default 0.05)")
    parser.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd",
                        help="the optimizer every stage steps (default sgd)")
    parser.add_argument("--clip", type=types.positive_number, default=None,
                        help="clip gradients to this global norm (needs --step sync or "
                             "post-validation; default: no clipping)")
    parser.add_argument("--step", choices=("none", "sync", "post-validation"), default=None,
                        help="the step boundary: none (every stage steps alone), sync (a global "
                             "norm/NaN check, then the steps) or post-validation (speculative "
                             "steps, validated along the pipeline, rolled back and redone when "
                             "clipping or a NaN/Inf says so) (default: the table's step.mode)")
    parser.add_argument("--backend", choices=("gloo", "nccl"),
                        help="P2P backend (default: nccl with one GPU per rank, else gloo)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the model runs (default: cuda if available)")
    parser.add_argument("--engine", choices=("ours", "torch"), default="ours",
                        help="ours: this runtime; torch: torch's _PipelineScheduleRuntime "
                             "from our torch CSV")
    parser.add_argument("--nproc", type=types.positive_int,
                        help="local ranks to spawn (default: the table's rank count)")
    parser.add_argument("--timeout", type=types.seconds, default=120.0,
                        help="seconds before a P2P or collective wait fails (default 120)")
    parser.add_argument("--rtol", type=types.nonneg_number, default=1e-5,
                        help="relative tolerance of the gradient check (default 1e-5)")
    parser.add_argument("--threads", type=types.positive_int, default=1, help="torch CPU threads per rank")
    parser.add_argument("--trace", help="write the measured vs predicted Perfetto trace here (default: none)")
    parser.add_argument("--allow-over-memory", action="store_true",
                        help="run a table that exceeds its own instance's memory limit")
    add_json(parser)
    parser.set_defaults(handler=handle)


def _plan_device(args, world: int) -> tuple[str, str, str]:
    """(device, backend, note): one GPU per rank -> NCCL; fewer GPUs -> gloo, correctness only."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device = args.device
    if device == "auto":
        device = "cuda" if gpus else "cpu"
    if device == "cuda" and not gpus:
        raise ValueError("--device cuda: torch sees no CUDA device; use --device cpu")
    backend = args.backend or ("nccl" if device == "cuda" and gpus >= world else "gloo")
    if backend == "nccl" and device != "cuda":
        raise ValueError("--backend nccl needs --device cuda (NCCL moves GPU tensors only)")
    if backend == "nccl" and gpus < world:
        raise ValueError(
            f"--backend nccl needs one GPU per rank: {world} ranks, {gpus} GPU(s) here; use "
            "--backend gloo (shares the GPU, CPU-staged P2P: a correctness run, not a timing run)")
    note = "timing run"
    if device == "cuda" and backend == "gloo":
        note = "correctness run (ranks share GPUs, P2P staged through the CPU): timings not representative"
    elif device == "cpu":
        note = "CPU run (gloo): correctness; timings are CPU timings"
    return device, backend, note


def handle(args) -> int:
    import os
    import tempfile

    from zbsolve.export.judge import JudgeError, read_schedule_file
    from zbsolve.io import check_output
    from zbsolve.runtime.launch import RankFailed, in_torchrun, run_jobs
    from zbsolve.runtime.optim import DEFAULT_LR
    from zbsolve.runtime.runner import Job, RunOptions, check_table, step_mode_of

    if args.trace and args.engine == "torch":
        raise ValueError("--trace needs --engine ours: torch's runtime gives no per-action "
                         "timings (it reports the step time only)")
    if args.trace:
        check_output(args.trace, inputs=[args.table], suffixes=(".json",), what="--trace")
    file = read_schedule_file(args.table)
    if file.kind != "executor":
        raise JudgeError(f"{args.table}: is a {file.kind} file; zbsolve run takes an executor "
                         "table (zbsolve export --format executor)")
    if file.header:
        raise JudgeError(f"{args.table}: {file.header[0]}")
    table = file.table
    spec, cfg = model_for(args, table)
    world = int(os.environ["WORLD_SIZE"]) if in_torchrun() else (args.nproc or table.ranks)
    # Before anything runs: the table's own problems (compute order, P2P, memory), then the launch
    check_table(table, world, cfg, args.engine, allow_over_memory=args.allow_over_memory)
    device, backend, note = _plan_device(args, world)
    opts = RunOptions(backend=backend, device=device, steps=args.steps,
                      lr=DEFAULT_LR if args.lr is None else args.lr, timeout_s=args.timeout,
                      rtol=args.rtol, threads=args.threads,
                      allow_over_memory=args.allow_over_memory, optimizer=args.optimizer,
                      clip=args.clip, step_mode=args.step)
    step_mode_of(table, opts)  # refuses clipping without a step check before anything spawns
    with tempfile.TemporaryDirectory(prefix="zbsolve-run-csv-") as tmp:
        csv_path = None
        if args.engine == "torch":
            from zbsolve.runtime.torch_engine import write_csv_for

            csv_path = os.path.join(tmp, "schedule.csv")  # never a path from file contents
            write_csv_for(table, csv_path)
        job = Job(table.to_dict(), cfg, engine=args.engine, torch_csv=csv_path,
                  trace=os.path.abspath(args.trace) if args.trace else None,
                  label=table.schedule_name)
        try:
            reports = run_jobs([job], world, opts)
        except RankFailed as exc:
            report_error(args, str(exc))
            return EXIT_RANK_FAILED
    if not reports:  # a non-zero rank under torchrun: rank 0 reports
        return 0
    report = mark_unmeasured(reports[0])
    if args.trace:
        report["trace"] = args.trace  # as given: the ranks were handed the absolute path
    report["note"] = note
    report["model_preset"] = args.model if spec is None else spec.kind
    verdict = verdict_line(report)
    if args.json:
        print_json(report)
        print(verdict, file=sys.stderr)
    else:
        print_report(report)
        print(verdict)
    return 0 if report["ok"] else EXIT_MISMATCH


def mark_unmeasured(report: dict) -> dict:
    """torch's runtime does not count activation memory (our engine's tracker does not run
    inside it): its per-rank figures are unknown, not 0. They become None in the report and
    print as "not measured"."""
    if report.get("engine") == "torch":
        report["peak_activation_bytes"] = [None] * len(report["peak_activation_bytes"])
        report["memory_measured"] = False
    else:
        report["memory_measured"] = True
    return report


def model_for(args, table):
    """(spec or None, the job's model dict): ``--hf``/``--module``; else, with no model flags,
    the model the table's instance was profiled from (``meta.model_spec``); else the GPT."""
    from zbsolve.cli.profile import own_model_spec
    from zbsolve.runtime.model import GPTConfig
    from zbsolve.runtime.models import ModelSpec

    spec = own_model_spec(args)
    carried = (table.instance.get("meta") or {}).get("model_spec")
    sized = any(getattr(args, k) is not None for k in ("layers", "hidden", "heads", "seq",
                                                        "vocab", "microbatch_size"))
    if spec is None and args.model is None and not sized and carried:
        spec = ModelSpec.from_dict(carried)
    args.model = args.model or "gpt-tiny"
    if spec is not None:
        return spec, spec.to_dict()
    return None, GPTConfig.preset(
        args.model, layers=args.layers, hidden=args.hidden, heads=args.heads, seq=args.seq,
        vocab=args.vocab, microbatch_size=args.microbatch_size, seed=args.seed).to_dict()


def verdict_line(report: dict) -> str:
    n = report["checked"]
    what = (f"loss, gradients and parameters over {report['steps']} step(s) ({n} tensors "
            "compared with the single-process reference)")
    if report["ok"]:
        return (f"PASS: {what}; largest relative difference {report['max_rel_diff']:.3g} "
                f"<= rtol {report['rtol']:g}")
    if report.get("nonfinite"):
        return f"FAIL: {what}; non-finite values (NaN or inf) in {', '.join(report['nonfinite'][:5])}"
    if report["missing"]:
        return f"FAIL: {what}; missing {', '.join(report['missing'][:5])}"
    if report.get("mismatched"):
        return f"FAIL: {what}; mismatched {', '.join(report['mismatched'][:5])}"
    return (f"FAIL: {what}; largest relative difference {report['max_rel_diff']:.3g} "
            f"> rtol {report['rtol']:g} at {report['worst']}")


def _fmt(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def print_report(r: dict) -> None:
    m = r["model"]
    print(f"{r['schedule']} on {r['ranks']} ranks ({r['backend']}, {r['device']}), "
          f"{r['stages']} stages, m={r['microbatches']}, engine {r['engine']}, {r['steps']} steps "
          f"- {r['note']}")
    if "layers" in m:
        print(f"model {r['model_preset']}: layers {m['layers']}, hidden {m['hidden']}, heads "
              f"{m['heads']}, seq {m['seq']}, vocab {m['vocab']}, microbatch size "
              f"{m['microbatch_size']}")
    else:
        print(f"model {r['model_preset']}: {m}; layers per stage {r.get('split')}")
    for note in r.get("notes", []):
        print(f"note: {note}")
    print(f"loss per step {[round(x, 6) for x in r['losses']]} (reference "
          f"{[round(x, 6) for x in r['reference_losses']]})")
    t = r["timing"]
    print(f"step {t['step']}: measured {t['step_ms']:.3f} ms, predicted makespan "
          f"{t['predicted_makespan']:g} (instance units)")
    if t.get("mean_ms"):
        means = "  ".join(f"{k} {v:.3f}" for k, v in t["mean_ms"].items())
        print(f"mean op time (ms): {means}")
        print(f"calibration: 1 instance unit = {t['unit_ms']:.4g} ms (measured compute / "
              "predicted compute)")
        print("measured/predicted, raw: " + "  ".join(
            f"{k} {v:.3g}" for k, v in t["ratio_raw"].items()))
        print("measured/predicted, calibrated: " + "  ".join(
            f"{k} {v:.3g}" for k, v in t["ratio_calibrated"].items()))
        print(f"time waiting for received payloads (all ranks): {t['wait_ms_total']:.3f} ms")
    if r.get("replicas", 1) > 1:
        print(f"replicas: {r['replicas']}; gradient sum after the step "
              f"{_fmt(t.get('sync_ms'))} ms (slowest rank); largest |copy 0 - copy 1| of the "
              f"final parameters {_fmt(r.get('copies_max_abs_diff'))}")
    if r.get("overlap_f_b_ran"):
        pairs = t.get("pairs") or {}
        line = f"OVERLAP_F_B: {r['overlap_f_b_ran']} pairs run (all steps)"
        if pairs:
            line += (f"; step {t['step']}: F&B {_fmt(pairs['mean_ms'])} ms (halves "
                     f"{_fmt(pairs['halves_mean_ms'])}), same ops unpaired F + B "
                     f"{_fmt(pairs['unpaired_f_plus_b_mean_ms'])} ms, ratio "
                     f"{_fmt(pairs['ratio'])}")
        print(line + f"; forward activations sent inside their pair: {r['sent_early']}")
    predicted = f"predicted peaks {r['predicted'].get('peak_memory')} (instance units)"
    if any(b is None for b in r["peak_activation_bytes"]):
        print(f"peak tracked activation memory per rank: not measured (engine {r['engine']} "
              f"does not track it); {predicted}")
    else:
        peaks = ", ".join(f"{b / 2**20:.3f}" for b in r["peak_activation_bytes"])
        print(f"peak tracked activation memory per rank (MiB): {peaks}; {predicted}")
    if any(x is not None for x in r["cuda_max_memory_allocated"]):
        cuda = ", ".join("not measured" if x is None else f"{x / 2**20:.1f}"
                         for x in r["cuda_max_memory_allocated"])
        print(f"torch.cuda.max_memory_allocated per rank (MiB): {cuda}")
    sb = r.get("step_boundary") or {}
    if sb.get("mode", "none") != "none":
        print(f"step boundary {sb['mode']}, {sb['optimizer']} lr {sb['lr']:g}, clip "
              f"{sb['clip']}: decisions {sb['decisions']} (reference {sb['reference_decisions']}); "
              f"stages redone per step {sb['redone']}")
    boundary = t.get("step_boundary")
    if boundary:
        per = "  ".join(f"rank {k}: pipeline {v['pipeline_end_ms']:.3f} optimizer {v['opt_ms']:.3f}"
                        f" redo {v['redo_ms']:.3f} end {v['end_ms']:.3f}"
                        for k, v in boundary["per_rank"].items())
        print(f"step boundary (ms): after the pipeline {boundary['boundary_ms']:.3f} "
              f"(predicted {boundary.get('predicted_boundary')} instance units); {per}")
    if r.get("trace"):
        print(f"trace: {r['trace']} (open in https://ui.perfetto.dev)")
