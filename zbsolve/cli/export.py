"""``zbsolve export SCHEDULE [--instance INSTANCE] --format F -o FILE``: hand a schedule to a runtime.

Every export first validates the schedule with the simulator (including memory); the executor
table and the torch CSV with comms are also proven deadlock-free with ``p2p_check``. A file that
carries its own communication (an executor table, a torch CSV with comms) is judged as written
first (``zbsolve.export.judge``): broken comms are refused, not silently rebuilt.
"""

from __future__ import annotations

FORMATS = ("executor", "torch-csv", "torch-csv-comms", "chrome-trace")
SUFFIXES = {"executor": (".json",), "torch-csv": (".csv",), "torch-csv-comms": (".csv",),
            "chrome-trace": (".json",)}


def register(sub) -> None:
    parser = sub.add_parser("export", help="write a schedule for a runtime or a trace viewer")
    parser.add_argument("schedule", help="schedule JSON, executor table JSON or torch CSV")
    parser.add_argument("--instance", help="instance file (YAML or JSON); optional for schedules "
                        "written by 'zbsolve solve' and executor tables, which carry theirs")
    parser.add_argument("--format", required=True, choices=FORMATS, dest="fmt",
                        help="executor | torch-csv | torch-csv-comms | chrome-trace")
    parser.add_argument("-o", "--output", required=True, help="file to write")
    parser.add_argument("--fuse-bw", action="store_true",
                        help="fuse each I immediately followed by its W into one B")
    parser.set_defaults(handler=handle)


def export(inst, sched, fmt: str, output: str, fuse_bw: bool = False) -> str:
    """Write one export; returns a one-line summary. Raises on an invalid schedule."""
    from zbsolve.export.executor import fuse_backward, lower
    from zbsolve.export.p2p_check import require_safe

    if fmt not in FORMATS:
        raise ValueError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    table = lower(inst, sched, fuse_bw=fuse_bw)  # validates with the simulator first
    if fuse_bw:
        sched = fuse_backward(sched)
    reports = require_safe(table)
    checked = ", ".join(f"p2p {r.mode} ok" for r in reports)
    if fmt == "executor":
        table.dump(output, check=False)  # checked just above
    elif fmt == "torch-csv":
        from zbsolve.export.torch_csv import write_rows

        write_rows([[str(op) for op in order] for order in sched.orders], output)
    elif fmt == "torch-csv-comms":
        from zbsolve.export.torch_csv import table_rows, write_rows

        write_rows(table_rows(table), output)  # the table checked above
    else:
        from zbsolve.export.chrome_trace import write_chrome_trace

        write_chrome_trace(inst, sched, output, table=table)
    n_comm = sum(a.is_comm for row in table.actions for a in row)
    return (f"wrote {output} ({fmt}): {sched.name}, makespan {table.predicted['makespan']:.4f}, "
            f"{len(sched)} compute ops, {n_comm // 2} transfers; simulator ok, {checked}")


def handle(args) -> int:
    from zbsolve.cli.common import instance_for, load
    from zbsolve.export.judge import judge, read_schedule_file, require_ok
    from zbsolve.io import check_output

    check_output(args.output, inputs=[args.schedule, args.instance], suffixes=SUFFIXES[args.fmt],
                 what=f"-o ({args.fmt})")
    given = load(args.instance) if args.instance is not None else None
    file = read_schedule_file(args.schedule, given)
    inst = given if given is not None else instance_for(None, file.schedule)
    if file.has_comms:  # judge the communication the file contains before replacing it
        require_ok(judge(inst, file), f"{args.schedule} cannot run as written")
    print(export(inst, file.schedule, args.fmt, args.output, fuse_bw=args.fuse_bw))
    return 0
