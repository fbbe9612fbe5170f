"""``zbsolve export SCHEDULE [--instance INSTANCE] --format F -o FILE``: hand a schedule to a runtime.

Every export first validates the schedule with the simulator (including memory); the executor
table and the torch CSV with comms are also proven deadlock-free with ``p2p_check``. A file that
carries its own communication (an executor table, a torch CSV with comms) is judged as written
first (``zbsolve.export.judge``): broken comms are refused, not silently rebuilt. The work is
``zbsolve.export.write``; this module only reads the flags.
"""

from __future__ import annotations

from zbsolve.cli.common import add_json, print_json, schedule_and_instance
from zbsolve.export import FORMATS

STACKS = ("torchtitan", "megatron")  # training stacks: zbsolve.export.stacks
SUFFIXES = {"executor": (".json",), "torch-csv": (".csv",), "torch-csv-comms": (".csv",),
            "torch-csv-ext": (".csv",), "chrome-trace": (".json",)}


def register(sub) -> None:
    parser = sub.add_parser("export", help="write a schedule for a runtime or a trace viewer")
    parser.add_argument("schedule", help="schedule JSON, executor table JSON or torch CSV")
    parser.add_argument("--instance", help="instance file (YAML or JSON); optional for schedules "
                        "that carry theirs ('zbsolve solve' output, sweep schedule files, "
                        "executor tables; default: the one the schedule carries)")
    parser.add_argument("--format", required=True, choices=FORMATS + STACKS, dest="fmt",
                        help=" | ".join(FORMATS) + " | torchtitan (a folder: CSV, TOML, CLI "
                             "overrides, command) | megatron (layout flags; its schedule "
                             "cannot be loaded there) (required; torch-csv-ext: our extended "
                             "CSV)")
    parser.add_argument("-o", "--output", required=True,
                        help="file to write (torchtitan: a folder; required)")
    parser.add_argument("--split", help="torchtitan/megatron: layers per logical stage, e.g. "
                        "3,2,2,3 (default: the instance's meta.split)")
    parser.add_argument("--microbatch-size", type=int, default=1,
                        help="torchtitan: sequences per microbatch (1)")
    parser.add_argument("--fuse-bw", action="store_true",
                        help="fuse each I immediately followed by its W into one B")
    add_json(parser)
    parser.set_defaults(handler=handle)


def handle(args) -> int:
    from zbsolve.export import write
    from zbsolve.export.judge import judge, require_ok
    from zbsolve.io import check_output

    if args.fmt not in STACKS:
        check_output(args.output, inputs=[args.schedule, args.instance],
                     suffixes=SUFFIXES[args.fmt], what=f"-o ({args.fmt})")
    else:
        check_output(args.output, inputs=[args.schedule, args.instance],
                     kind="folder" if args.fmt == "torchtitan" else "file", what=f"-o ({args.fmt})")
    file, inst = schedule_and_instance(args.schedule, args.instance)
    if file.has_comms:  # judge the communication the file contains before replacing it
        require_ok(judge(inst, file), f"{args.schedule} cannot run as written")
    sched = file.schedule
    if args.fmt in STACKS:
        return _export_stack(args, inst, sched)
    report = write(inst, sched, args.fmt, args.output, fuse_bw=args.fuse_bw)
    if args.json:
        print_json(report.to_dict())
    else:
        print(report.line())
    return 0


def _export_stack(args, inst, sched) -> int:
    from zbsolve.export import stacks

    if args.fmt == "torchtitan":
        out = stacks.export_torchtitan(inst, sched, args.output, split_text=args.split,
                                       microbatch_size=args.microbatch_size)
        lines = [f"wrote {', '.join(out['files'])}", out["builtin_note"], "run:", out["command"]]
    else:
        out = stacks.export_megatron(inst, sched, args.output, split_text=args.split)
        lines = [out["command_line"], out["note"], out["builtin_note"], f"wrote {args.output}"]
    if args.json:
        print_json(out)
    else:
        print("\n".join(lines))
    return 0
