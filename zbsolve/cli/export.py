"""``zbsolve export SCHEDULE [--instance INSTANCE] --format F -o FILE``: hand a schedule to a runtime.

Every export first validates the schedule with the simulator (including memory); the executor
table and the torch CSV with comms are also proven deadlock-free with ``p2p_check``. The work is
``zbsolve.export.write``; this module only reads the flags.
"""

from __future__ import annotations

from zbsolve.cli.common import add_json, instance_for, print_json
from zbsolve.export import FORMATS


def register(sub) -> None:
    parser = sub.add_parser("export", help="write a schedule for a runtime or a trace viewer")
    parser.add_argument("schedule", help="schedule JSON, executor table JSON or torch CSV")
    parser.add_argument("--instance", help="instance file (YAML or JSON); optional for schedules "
                        "that carry theirs ('zbsolve solve' output, sweep schedule files, "
                        "executor tables; default: the one the schedule carries)")
    parser.add_argument("--format", required=True, choices=FORMATS, dest="fmt",
                        help=" | ".join(FORMATS) + " (required; torch-csv-ext: our extended CSV)")
    parser.add_argument("-o", "--output", required=True, help="file to write (required)")
    parser.add_argument("--fuse-bw", action="store_true",
                        help="fuse each I immediately followed by its W into one B")
    add_json(parser)
    parser.set_defaults(handler=handle)


def handle(args) -> int:
    from zbsolve.export import write
    from zbsolve.export.files import load_schedule

    sched = load_schedule(args.schedule)
    inst = instance_for(args.instance, sched)
    report = write(inst, sched, args.fmt, args.output, fuse_bw=args.fuse_bw)
    if args.json:
        print_json(report.to_dict())
    else:
        print(report.line())
    return 0
