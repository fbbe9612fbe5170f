"""``zbsolve sweep INSTANCE``: the memory-vs-bubble Pareto front over memory limits and layouts."""

from __future__ import annotations

import math
import shlex
import sys

from zbsolve.cli import args as types
from zbsolve.cli.common import add_json, instance_arg, load, print_json

OUTPUT_NAMES = ("pareto.csv", "front.csv", "pareto.png", "pareto.svg", "command.txt")
_SHOWN = ["layout", "limit", "schedule", "status", "makespan", "span", "bubble_makespan",
          "bubble_span", "peak", "peak_fraction", "gap", "schedule_file"]


def register(sub) -> None:
    parser = sub.add_parser(
        "sweep", help="Pareto front of memory against step time and bubble",
        description="Solve the instance under a range of memory limits (and layouts), list every "
        "hand-made schedule that fits, and write pareto.csv, front.csv and pareto.png/.svg. "
        "Solved cases are cached under OUT/cache, so reruns and finer sweeps reuse them.",
    )
    instance_arg(parser)
    parser.add_argument("--limits", default="0.33:2.0:0.05",
                        help="start:stop:step or a comma list; fractions of the 1F1B peak "
                        "(default 0.33:2.0:0.05), absolute memory with --absolute")
    parser.add_argument("--absolute", action="store_true",
                        help="--limits and --memory are absolute memory, not 1F1B fractions")
    parser.add_argument("--chunks", help="comma list of chunks per device, e.g. 1,2 "
                        "(default: the instance's)")
    parser.add_argument("--placements", help="comma list of loop and/or v (default: the "
                        "instance's; one chunk has one layout)")
    parser.add_argument("--segments", help="comma list of sequence segments per microbatch, "
                        "e.g. 1,2,4 (default: the instance's); each is a layout of its own")
    parser.add_argument("--time-limit", type=types.seconds, default=60.0, help="seconds per case")
    parser.add_argument("--gap", type=types.nonneg_number, default=0.0,
                        help="relative gap to stop at, without the memory tie-break once it is "
                             "met (default: 0, prove optimal)")
    parser.add_argument("--workers", type=types.positive_int, default=2, help="CP-SAT threads per case")
    parser.add_argument("--seed", type=types.seed, default=0, help="CP-SAT random seed (default: 0)")
    parser.add_argument("--objective", choices=("makespan", "span"), default="makespan",
                        help="makespan, or span = longest per-device span (the ZB papers')")
    parser.add_argument("--method", default="auto", help="solver method (see zbsolve solve)")
    parser.add_argument("--jobs", type=types.positive_int, default=1,
                        help="cases solved at once in separate processes (jobs x workers "
                        "should not exceed the CPUs)")
    parser.add_argument("-o", "--out", required=True,
                        help="output folder (required; cache under OUT/cache, one schedule file "
                        "per point under OUT/schedules)")
    parser.add_argument("--target-bubble", type=types.nonneg_number,
                        help="print the smallest memory whose bubble is at most this (0..1; default: "
                        "not asked)")
    parser.add_argument("--memory", type=types.positive_number,
                        help="print the best bubble within this memory (a 1F1B fraction, or "
                        "absolute with --absolute; default: not asked)")
    parser.add_argument("--modes", help="comma list of the memory modes the solver may "
                        "choose per stage and microbatch: keep, recompute, selective, offload "
                        "(default: every mode the instance offers with its recompute/offload "
                        "fields; keep alone turns them off)")
    parser.add_argument("--no-plot", action="store_true", help="skip pareto.png/.svg")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_json(parser)
    parser.set_defaults(handler=handle)


def handle(args) -> int:
    from pathlib import Path

    from zbsolve.sweep import (
        SolverParams,
        SweepConfig,
        parse_int_list,
        parse_limits,
        run_sweep,
    )

    if args.target_bubble is not None and not 0 <= args.target_bubble < 1:
        raise ValueError(f"--target-bubble: a bubble rate in [0, 1), got {args.target_bubble}")
    if args.memory is not None and not args.memory > 0:
        raise ValueError(f"--memory: must be > 0, got {args.memory}")
    from zbsolve.io import atomic_write_text, check_inputs_untouched, check_output

    check_output(args.out, kind="folder")
    check_inputs_untouched([Path(args.out) / n for n in OUTPUT_NAMES], [args.instance])
    from zbsolve.modes import parse_modes

    inst = load(args.instance)
    modes = parse_modes(args.modes)
    if modes is not None:
        inst.with_modes(modes)  # refuses, naming the fields, a mode the instance does not offer
    config = SweepConfig(
        modes=modes,
        limits=parse_limits(args.limits), out_dir=Path(args.out), absolute=args.absolute,
        chunks=parse_int_list(args.chunks, "--chunks") if args.chunks else None,
        placements=[x.strip() for x in args.placements.split(",")] if args.placements else None,
        segments=parse_int_list(args.segments, "--segments") if args.segments else None,
        params=SolverParams(time_limit=args.time_limit, gap=args.gap, workers=args.workers,
                            seed=args.seed, objective=args.objective, method=args.method),
        jobs=args.jobs, progress=not args.no_progress, plot=not args.no_plot,
    )
    result = run_sweep(inst, config)
    command = "zbsolve sweep " + " ".join(shlex.quote(a) for a in sys.argv[1:][1:]) \
        if sys.argv[1:2] == ["sweep"] else None
    if command:
        atomic_write_text(Path(args.out) / "command.txt", command + "\n")
    answers = queries(result, args)
    if args.json:
        print_json({
            "instance": result.instance, "objective": result.objective,
            "reference_peak": result.reference_peak, "stats": result.stats,
            "interrupted": result.interrupted, "files": result.files,
            "front": _records(_front(result)), **answers,
        })
    else:
        _print_text(result, answers)
    if result.interrupted:
        print(f"zbsolve sweep: interrupted; {result.stats['missing']} case(s) not done, finished "
              f"ones are cached in {Path(args.out) / 'cache'} (rerun to continue)",
              file=sys.stderr)
        return 130
    failed = result.stats["errors"]
    if failed:  # a sweep with failed cases is not a result to build on (every case: none at all)
        print(f"zbsolve sweep: {failed} of {result.stats['cases']} case(s) failed (see the note "
              f"column of {result.files.get('table', 'pareto.csv')}); they are not cached, a "
              "rerun tries them again", file=sys.stderr)
        return 1
    return 1 if any(a is not None and a.get("found") is False for a in answers.values()) else 0


def queries(result, args) -> dict:
    """Answers to --target-bubble / --memory from the sweep's table (keys only when asked)."""
    from zbsolve.sweep import best_bubble_under_memory, smallest_memory_for_bubble

    out: dict = {}
    if args.target_bubble is not None:
        row = smallest_memory_for_bubble(result.table, args.target_bubble, result.objective)
        out["target_bubble"] = {"target": args.target_bubble, "found": row is not None,
                                "row": _clean(row)}
    if args.memory is not None:
        memory = args.memory
        if not args.absolute:
            if not result.reference_peak:
                raise ValueError("--memory: no 1F1B reference for fractions; use --absolute")
            memory = args.memory * result.reference_peak
        row = best_bubble_under_memory(result.table, memory, result.objective)
        out["memory"] = {"memory": memory, "found": row is not None, "row": _clean(row)}
    return out


def _print_text(result, answers: dict) -> None:
    import pandas as pd

    s = result.stats
    ref = f"{result.reference_peak:g}" if result.reference_peak else "n/a"
    print(f"{result.instance}: {s['cases']} case(s): {s['solved']} solved, {s['cached']} from "
          f"cache, {s['infeasible']} infeasible, {s['errors']} error(s); 1F1B peak {ref}; "
          f"objective {result.objective}")
    # a schedule on the front under several limits is shown once, at the first limit it fits
    front = _front(result)[_SHOWN].drop_duplicates(["layout", "schedule", "peak", "makespan"])
    with pd.option_context("display.width", 200, "display.float_format", "{:.4f}".format):
        print("Pareto front:")
        print(front.to_string(index=False) if not front.empty else "  (no feasible point)")
    bubble = "bubble_makespan" if result.objective == "makespan" else "bubble_span"
    if "target_bubble" in answers:
        a = answers["target_bubble"]
        if a["found"]:
            r = a["row"]
            print(f"bubble <= {a['target']:g}: smallest memory {r['peak']:g} "
                  f"({_frac(r)}) with {r['schedule']} on {r['layout']} "
                  f"(bubble {r[bubble]:.4f}, step time {r[_step(result)]:.4f})")
        else:
            print(f"bubble <= {a['target']:g}: no point of this sweep reaches it "
                  f"(best {result.table[bubble].min():.4f})")
    if "memory" in answers:
        a = answers["memory"]
        if a["found"]:
            r = a["row"]
            print(f"memory <= {a['memory']:g}: best bubble {r[bubble]:.4f} with {r['schedule']} "
                  f"on {r['layout']} (peak {r['peak']:g}, {_frac(r)}, step time "
                  f"{r[_step(result)]:.4f})")
        else:
            print(f"memory <= {a['memory']:g}: no point of this sweep fits")
    print("files: " + ", ".join(result.files.values()))


def _front(result):
    return result.front.sort_values(["peak", _step(result), "limit"], kind="stable")


def _step(result) -> str:
    return "makespan" if result.objective == "makespan" else "span"


def _frac(row: dict) -> str:
    f = row.get("peak_fraction")
    return f"{f:.3f} of the 1F1B peak" if f is not None and not math.isnan(f) else "absolute"


def _clean(row: dict | None) -> dict | None:
    if row is None:
        return None
    return {k: (None if isinstance(v, float) and math.isnan(v) else
                v.item() if hasattr(v, "item") else v) for k, v in row.items()}


def _records(frame) -> list[dict]:
    return [_clean(r) for r in frame.to_dict(orient="records")]
