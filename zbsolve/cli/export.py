"""``zbsolve export SCHEDULE [--instance INSTANCE] --format F -o FILE``: hand a schedule to a runtime.

Every export first validates the schedule with the simulator (including memory); the executor
table and the torch CSV with comms are also proven deadlock-free with ``p2p_check``.
"""

from __future__ import annotations

FORMATS = ("executor", "torch-csv", "torch-csv-comms", "chrome-trace")
STACKS = ("torchtitan", "megatron")  # training stacks: zbsolve.export.stacks


def register(sub) -> None:
    parser = sub.add_parser("export", help="write a schedule for a runtime or a trace viewer")
    parser.add_argument("schedule", help="schedule JSON, executor table JSON or torch CSV")
    parser.add_argument("--instance", help="instance file (YAML or JSON); optional for schedules "
                        "written by 'zbsolve solve' and executor tables, which carry theirs")
    parser.add_argument("--format", required=True, choices=FORMATS + STACKS, dest="fmt",
                        help="executor | torch-csv | torch-csv-comms | chrome-trace | "
                             "torchtitan (a folder: CSV, TOML, CLI overrides, command) | "
                             "megatron (layout flags; its schedule cannot be loaded there)")
    parser.add_argument("-o", "--output", required=True,
                        help="file to write (torchtitan: a folder)")
    parser.add_argument("--split", help="torchtitan/megatron: layers per logical stage, e.g. "
                        "3,2,2,3 (default: the instance's meta.split)")
    parser.add_argument("--microbatch-size", type=int, default=1,
                        help="torchtitan: sequences per microbatch (1)")
    parser.add_argument("--json", action="store_true", help="torchtitan/megatron: print JSON")
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
    from zbsolve.cli.common import instance_for
    from zbsolve.schedule import load_schedule

    sched = load_schedule(args.schedule)
    inst = instance_for(args.instance, sched)
    if args.fmt in STACKS:
        return _export_stack(args, inst, sched)
    print(export(inst, sched, args.fmt, args.output, fuse_bw=args.fuse_bw))
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
        import json

        print(json.dumps(out, indent=1))
    else:
        print("\n".join(lines))
    return 0
