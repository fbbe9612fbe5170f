"""``zbsolve check INSTANCE SCHEDULE``: judge any schedule file (ours, executor table, torch CSV)."""

from __future__ import annotations

from zbsolve.cli.common import add_json, fmt_list, instance_arg, load, print_json


def register(sub) -> None:
    parser = sub.add_parser("check", help="validate a schedule file and print its figures")
    instance_arg(parser)
    parser.add_argument("schedule", help="schedule JSON, executor table JSON or torch pipelining CSV")
    add_json(parser)
    parser.set_defaults(handler=handle)


def handle(args) -> int:
    from zbsolve.export.files import load_schedule
    from zbsolve.simulate import simulate

    inst = load(args.instance)
    sched = load_schedule(args.schedule)
    result = simulate(inst, sched)
    summary = {"name": sched.name, "valid": True, **result.summary(), "violations": result.violations}
    if args.json:
        print_json(summary)
    else:
        print(f"{sched.name} on {inst.name}: valid order; makespan {result.makespan:.4f}, "
              f"span {result.max_span:.4f}, bubble {result.bubble_makespan:.4f} (makespan) / "
              f"{result.bubble_span:.4f} (span)")
        print(f"peak memory {fmt_list(result.peak_memory)} vs limit {fmt_list(result.limit)}")
        for line in result.violations:
            print(f"MEMORY: {line}")
    return 0 if result.feasible else 1
