"""``zbsolve loop --model gpt-tiny [-o DIR]``: profile -> solve -> export -> run.

Writes, into ``DIR`` (default: a new ``./zbsolve-loop-DATE-TIME/``, so a run never overwrites
earlier results), ``loop.csv``, ``loop.md`` and ``loop.json`` (predicted vs measured step time of the
solver's schedule, 1F1B, ZB-H1 and ZB-V on the same model), the profiled instances and the
executor tables that were run. See docs/profiler.md for the equivalent sequence of commands.
"""

from __future__ import annotations

import shlex
import sys

from zbsolve.cli import args as types
from zbsolve.cli.common import add_json, new_output_dir, print_json
from zbsolve.cli.profile import add_model_args, model_config


def register(sub) -> None:
    parser = sub.add_parser("loop", help="profile, solve, export and run; predicted vs measured")
    add_model_args(parser)
    parser.add_argument("--devices", type=types.positive_int, default=2, help="pipeline ranks p")
    parser.add_argument("--microbatches", type=types.positive_int, default=8, help="microbatches m")
    parser.add_argument("--repeats", type=types.positive_int, default=10, help="profile samples per stage")
    parser.add_argument("--warmup", type=types.nonneg_int, default=3, help="discarded profile samples")
    parser.add_argument("--sample-interval", type=types.nonneg_number, default=0.0, metavar="SECONDS",
                        help="sleep between profile sample rounds (default: 0)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="profile clock: wall (default) or thread CPU time (see profile)")
    parser.add_argument("--p2p", choices=("pingpong", "handoff"), default="pingpong",
                        help="comm measurement (see profile)")
    parser.add_argument("--time-limit", type=types.seconds, default=20.0,
                        help="solver seconds per layout")
    parser.add_argument("--workers", type=types.positive_int, default=1, help="CP-SAT workers")
    parser.add_argument("--seed", type=types.seed, default=0, help="CP-SAT seed (default: 0)")
    parser.add_argument("--runs", type=types.positive_int, default=3,
                        help="timed runs per schedule; the median step time is reported")
    parser.add_argument("--steps", type=types.positive_int, default=2,
                        help="optimizer steps per run; the last one is timed")
    parser.add_argument("--memory-limit", default="baselines",
                        help="per-device budget: baselines (the largest simulated peak of the "
                             "hand-made schedules: all fit; default), 1f1b (1F1B's peak), none, "
                             "or a size such as 2MiB")
    parser.add_argument("--round", type=types.positive_int, metavar="DIGITS",
                        help="solve the instance with times rounded to DIGITS significant digits "
                             "(default: unrounded)")
    parser.add_argument("--step-modes", default="none",
                        help="comma-separated step modes to predict and run every schedule in: "
                             "none, sync, post-validation (sync and post-validation profile the "
                             "optimizer step and the global check too; default none)")
    parser.add_argument("--threads", type=types.positive_int, default=1, help="torch threads per rank")
    parser.add_argument("--device", default="cpu", type=types.torch_device, help="cpu or cuda")
    parser.add_argument("-o", "--output", default=None,
                        help="output folder (default: a new ./zbsolve-loop-DATE-TIME/)")
    add_json(parser)
    parser.set_defaults(handler=handle)


def handle(args) -> int:
    from zbsolve.profiler.loop import LIMIT_POLICIES, LoopOptions, run_loop
    from zbsolve.profiler.units import parse_size

    opts = LoopOptions(
        devices=args.devices, microbatches=args.microbatches, repeats=args.repeats,
        warmup=args.warmup, interval=args.sample_interval, clock=args.clock,
        p2p_mode=args.p2p,
        time_limit=args.time_limit,
        workers=args.workers, seed=args.seed, runs=args.runs, steps=args.steps,
        memory_limit=(args.memory_limit if args.memory_limit in LIMIT_POLICIES
                      else parse_size(args.memory_limit)),
        round_digits=args.round, threads=args.threads, device=args.device,
        step_modes=tuple(m.strip() for m in args.step_modes.split(",") if m.strip()),
    )
    from zbsolve.io import check_output

    if args.output:
        check_output(args.output, kind="folder")
    command = "zbsolve " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    output = args.output or str(new_output_dir("zbsolve-loop"))
    summary = run_loop(model_config(args), opts, output, command)
    if args.json:
        print_json(summary)
    else:
        from zbsolve.profiler.loop import markdown

        print(markdown(summary))
        from pathlib import Path

        out = Path(output)
        print(f"wrote {out / 'loop.csv'}, loop.md, loop.json, instances and tables")
    for q in summary.get("pairs", []):
        if q["verdict"].startswith("NOT"):
            other = q["b"] if q["faster_predicted"] == q["a"] else q["a"]
            print(f"predicted gain not confirmed: {q['faster_predicted']} predicted "
                  f"{q['predicted_gain']:.1%} faster than {other}, measured "
                  f"{q['measured_gain']:+.1%} ({q['measured_gain_min']:+.1%}.."
                  f"{q['measured_gain_max']:+.1%} over {q['runs']} runs)", file=sys.stderr)
    bad = [r["schedule"] + ("" if r["step_mode"] == "none" else f" ({r['step_mode']})")
           for r in summary["rows"] if not r["grads_ok"]]
    if bad:
        print(f"gradients differ from the reference for: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0
