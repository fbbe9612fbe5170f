"""``zbsolve show INSTANCE SCHEDULE -o timeline.png``: Gantt chart with memory curves."""

from __future__ import annotations

from zbsolve.cli.common import instance_arg, load


def register(sub) -> None:
    parser = sub.add_parser(
        "show", help="draw a schedule's timeline (Gantt + memory per device) to a PNG")
    instance_arg(parser)
    parser.add_argument(
        "schedule", help="schedule JSON, executor table JSON (sends/receives marked) or torch CSV")
    parser.add_argument("-o", "--output", default="timeline.png", help="PNG path to write")
    parser.add_argument("--svg", action="store_true", help="also write an SVG with the same stem")
    parser.add_argument("--title", default=None, help="first title line (default: names)")
    parser.set_defaults(handler=handle)


PICTURE_SUFFIXES = (".png", ".svg", ".pdf")


def handle(args) -> int:
    from zbsolve import size_limits as sizes
    from zbsolve.export.judge import judge, read_schedule_file, require_ok
    from zbsolve.io import check_output
    from zbsolve.plot import save_timeline

    check_output(args.output, inputs=[args.instance, args.schedule], suffixes=PICTURE_SUFFIXES)
    if args.svg and args.output.lower().endswith((".png", ".pdf")):
        check_output(args.output[:-4] + ".svg", inputs=[args.instance, args.schedule],
                     what="--svg")
    inst = load(args.instance)
    sizes.check_size("show: ops to draw", 3 * inst.stages * inst.microbatches,
                     sizes.MAX_SHOW_OPS, "draw a smaller instance (fewer microbatches)")
    file = read_schedule_file(args.schedule, inst)
    require_ok(judge(inst, file), f"{args.schedule} cannot be shown")
    table = file.table if file.kind == "executor" else None  # a CSV has no times for its ticks
    for written in save_timeline(inst, file.schedule, args.output, table=table,
                                 title=args.title, svg=args.svg):
        print(f"wrote {written}")
    return 0
