"""``zbsolve show [INSTANCE] SCHEDULE -o timeline.png``: Gantt chart with memory curves.

The instance may be left out for a schedule that carries its own (``zbsolve solve`` output,
``zbsolve sweep`` schedule files, executor tables).
"""

from __future__ import annotations

from zbsolve.cli.common import add_json, given_instance, print_json, schedule_and_instance, schedule_args


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


def handle(args) -> int:
    import json
    from pathlib import Path

    from zbsolve.plot import save_timeline

    table = None
    path = Path(args.schedule)
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON: {exc}") from None
        if isinstance(data, dict) and data.get("format") == "zbsolve-executor":
            from zbsolve.export.executor import ExecutorTable

            table = ExecutorTable.from_dict(data)
    sched, inst = schedule_and_instance(path, given_instance(args))
    if table is not None:
        _check_table_instance(table, inst)
    written = save_timeline(inst, sched, args.output, table=table, title=args.title,
                            svg=args.svg)
    if args.json:
        print_json({"schedule": sched.name, "instance": inst.name,
                    "written": [str(p) for p in written]})
        return 0
    for path in written:
        print(f"wrote {path}")
    return 0


def _check_table_instance(table, inst) -> None:
    """A table's SEND/RECV ticks only make sense on the placement it was lowered for."""
    if list(table.placement) != list(inst.placement):
        raise ValueError(
            f"executor table placement {table.placement} differs from the instance's "
            f"{list(inst.placement)}; show it with the instance it was exported for")
