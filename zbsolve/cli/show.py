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


def handle(args) -> int:
    import json
    from pathlib import Path

    from zbsolve.export.files import load_schedule
    from zbsolve.plot import save_timeline

    inst = load(args.instance)
    table = None
    path = Path(args.schedule)
    if path.suffix.lower() == ".json":
        data = json.loads(path.read_text())
        if isinstance(data, dict) and data.get("format") == "zbsolve-executor":
            from zbsolve.export.executor import ExecutorTable

            table = ExecutorTable.from_dict(data)
    sched = load_schedule(path)
    if table is not None:
        _check_table_instance(table, inst)
    for written in save_timeline(inst, sched, args.output, table=table, title=args.title,
                                 svg=args.svg):
        print(f"wrote {written}")
    return 0


def _check_table_instance(table, inst) -> None:
    """A table's SEND/RECV ticks only make sense on the placement it was lowered for."""
    if list(table.placement) != list(inst.placement):
        raise ValueError(
            f"executor table placement {table.placement} differs from the instance's "
            f"{list(inst.placement)}; show it with the instance it was exported for")
