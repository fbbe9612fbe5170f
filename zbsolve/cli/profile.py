"""``zbsolve profile --model gpt ... -o instance.yaml``: measure a torch model into an instance.

Prints the measured vs analytic table; writes the instance (times in ms, memory in MiB) with the
spread and the analytic estimate under ``meta``. With ``--round DIGITS`` the file at ``-o`` holds
times rounded to DIGITS significant digits and the unrounded medians are written beside it as
``<name>.measured.yaml``: ``zbsolve solve`` takes either file.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from zbsolve.cli import args as types
from zbsolve.cli.common import add_json, print_json

MODEL_FLAGS = ("layers", "hidden", "heads", "seq", "vocab", "microbatch_size")


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """Model flags shared with ``zbsolve loop`` (same names as ``zbsolve run``'s)."""
    parser.add_argument("--model", default="gpt",
                        help="gpt (sizes from the flags, defaults = gpt-tiny's) or a preset: "
                             "gpt-tiny, gpt-small, gpt-medium (flags override it)")
    parser.add_argument("--layers", type=types.positive_int, help="transformer blocks L")
    parser.add_argument("--hidden", type=types.positive_int, help="hidden size h")
    parser.add_argument("--heads", type=types.positive_int, help="attention heads a")
    parser.add_argument("--seq", type=types.positive_int, help="sequence length s")
    parser.add_argument("--vocab", type=types.positive_int, help="vocabulary size V")
    parser.add_argument("--microbatch-size", type=types.positive_int, help="sequences per microbatch b")


def model_config(args: argparse.Namespace):
    """The runner's GPTConfig from ``--model`` and the size flags."""
    from zbsolve.runtime.model import GPTConfig

    overrides = {k: getattr(args, k) for k in MODEL_FLAGS}
    name = "gpt-tiny" if args.model == "gpt" else args.model
    return GPTConfig.preset(name, **overrides)


def add_profile_args(parser: argparse.ArgumentParser) -> None:
    add_model_args(parser)
    parser.add_argument("--devices", type=types.positive_int, required=True, help="pipeline devices p")
    parser.add_argument("--chunks", type=types.positive_int, default=1, help="chunks per device v (1)")
    parser.add_argument("--microbatches", type=types.positive_int, required=True, help="microbatches m")
    parser.add_argument("--placement", choices=("loop", "v"), default="loop")
    parser.add_argument("--repeats", type=types.positive_int, default=10,
                        help="timed samples per stage (10); the median is written")
    parser.add_argument("--warmup", type=types.nonneg_int, default=3, help="discarded samples first (3)")
    parser.add_argument("--sample-interval", type=types.nonneg_number, default=0.0, metavar="SECONDS",
                        help="sleep between sample rounds, to spread the samples over time on a "
                             "shared machine (0)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="CPU timing: wall clock (default) or the thread's CPU time, which "
                             "ignores preemption by other jobs on a shared machine")
    parser.add_argument("--p2p", choices=("pingpong", "handoff"), default="pingpong",
                        help="comm: ping-pong / 2 (default) or a hand-off to a receiver blocked "
                             "in recv while the sender computes (what a pipeline run pays)")
    parser.add_argument("--threads", type=types.positive_int, default=1,
                        help="torch threads while measuring (1, as the runner uses per rank)")
    parser.add_argument("--device", default="cpu", type=types.torch_device,
                        help="cpu or cuda (cuda:N)")
    parser.add_argument("--memory-limit",
                        help="per-device activation budget, e.g. 512MiB or 4GiB (plain number = "
                             "MiB); default: none on CPU, measured on GPU")
    parser.add_argument("--optimizer-states", type=types.nonneg_int, default=0,
                        help="optimizer tensors per parameter for the GPU budget (0 = the "
                             "runner's SGD; Adam: 2)")
    parser.add_argument("--round", type=types.positive_int, metavar="DIGITS",
                        help="write times rounded to DIGITS significant digits (the unrounded "
                             "file goes beside it as NAME.measured.yaml)")
    parser.add_argument("--name", help="instance name (default from the sizes)")


def register(sub) -> None:
    parser = sub.add_parser("profile", help="measure a GPT model into an instance file")
    add_profile_args(parser)
    parser.add_argument("-o", "--output", required=True,
                        help="instance file to write (.yaml or .json)")
    add_json(parser)
    parser.set_defaults(handler=handle)


def measured_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}.measured{path.suffix}")


def run_profile(args: argparse.Namespace, command: str):
    """Profile as the flags say; returns the ProfileRun."""
    from zbsolve.profiler import profile
    from zbsolve.profiler.units import parse_size

    limit = parse_size(args.memory_limit) if args.memory_limit is not None else None
    if args.round is not None and args.round < 1:
        raise ValueError(f"--round: expected significant digits >= 1, got {args.round}")
    return profile(
        model_config(args), devices=args.devices, chunks=args.chunks,
        microbatches=args.microbatches, placement=args.placement, repeats=args.repeats,
        warmup=args.warmup, memory_limit=limit, threads=args.threads, device=args.device,
        optimizer_states=args.optimizer_states, interval=args.sample_interval, clock=args.clock,
        p2p_mode=args.p2p,
        name=args.name,
        command=command,
    )


def write_instances(run, output: str, round_digits: int | None) -> list[Path]:
    """Write the instance (rounded if asked, plus the measured one); each is loaded back."""
    from zbsolve.instance import load_instance
    from zbsolve.profiler.writer import instance_dict

    path = Path(output)
    written = []
    targets = [(path, round_digits)]
    if round_digits is not None:
        targets.append((measured_path(path), None))
    for target, digits in targets:
        inst = load_instance(instance_dict(run, digits))  # strict loader checks what we write
        inst.dump(target)
        load_instance(target)
        written.append(target)
    return written


def handle(args) -> int:
    from zbsolve.instance import INSTANCE_SUFFIXES
    from zbsolve.io import check_output
    from zbsolve.profiler.writer import analytic, comparison_rows, format_table

    check_output(args.output, suffixes=INSTANCE_SUFFIXES)  # before minutes of measuring
    if args.round is not None:
        check_output(measured_path(Path(args.output)), suffixes=INSTANCE_SUFFIXES)
    command = "zbsolve " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    run = run_profile(args, command)
    written = write_instances(run, args.output, args.round)
    if args.json:
        print_json({"written": [str(p) for p in written], "stages": comparison_rows(run),
                    "comm_ms": run.comm.to_dict(), "analytic": analytic(run)})
        return 0
    print(f"{run.name}: {run.device}, {run.threads} thread(s), {run.clock} clock, median of "
          f"{run.repeats} after {run.warmup} warm-up; analytic = {run.memory_model.label}")
    print(format_table(comparison_rows(run)))
    c = run.comm
    print(f"comm (one-way P2P {run.p2p.get('mode', '')}, {run.p2p.get('bytes', 0)} bytes): "
          f"median {c.median:.4g} ms [min {c.min:.4g}, max {c.max:.4g}]")
    limit = "none" if run.limit_bytes is None else f"{run.limit_bytes[0] / 2**20:.6g} MiB"
    print(f"memory limit per device: {limit} ({run.limit_source})")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
