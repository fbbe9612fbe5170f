"""``zbsolve show [INSTANCE] SCHEDULE -o timeline.png``: Gantt chart with memory curves.

The instance may be left out for a schedule that carries its own (``zbsolve solve`` output,
``zbsolve sweep`` schedule files, executor tables).
"""

from __future__ import annotations

from zbsolve.cli.common import (
    add_json,
    given_instance,
    load,
    print_json,
    schedule_and_instance,
    schedule_args,
)


def register(sub) -> None:
    parser = sub.add_parser(
        "show", help="draw a schedule's timeline (Gantt + memory per device) to a PNG")
    schedule_args(
        parser, "schedule JSON, executor table JSON (sends/receives marked) or torch CSV")
    parser.add_argument("-o", "--output", default="timeline.png", help="PNG path to write")
    parser.add_argument("--svg", action="store_true", help="also write an SVG with the same stem")
    parser.add_argument("--title", default=None,
                        help="first title line (default: schedule and instance names)")
    add_json(parser)
    parser.set_defaults(handler=handle)


PICTURE_SUFFIXES = (".png", ".svg", ".pdf")


def handle(args) -> int:
    from zbsolve import size_limits as sizes
    from zbsolve.export.judge import judge, require_ok
    from zbsolve.graph import TaskGraph
    from zbsolve.io import check_output
    from zbsolve.plot import save_timeline

    given = given_instance(args)
    check_output(args.output, inputs=[given, args.schedule], suffixes=PICTURE_SUFFIXES)
    if args.svg and args.output.lower().endswith((".png", ".pdf")):
        check_output(args.output[:-4] + ".svg", inputs=[given, args.schedule], what="--svg")

    def check_size(inst) -> None:  # before the schedule is read where the instance is given
        sizes.check_size("show: ops to draw", TaskGraph(inst).count(), sizes.MAX_SHOW_OPS,
                         "draw a smaller instance (fewer microbatches)")

    if given is not None:
        check_size(load(given))
    file, inst = schedule_and_instance(args.schedule, given)
    check_size(inst)
    require_ok(judge(inst, file), f"{args.schedule} cannot be shown")
    table = file.table if file.kind == "executor" else None  # a CSV has no times for its ticks
    written = save_timeline(inst, file.schedule, args.output, table=table, title=args.title,
                            svg=args.svg)
    if args.json:
        print_json({"schedule": file.schedule.name, "instance": inst.name,
                    "written": [str(p) for p in written]})
        return 0
    for path in written:
        print(f"wrote {path}")
    return 0
