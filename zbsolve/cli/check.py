"""``zbsolve check [INSTANCE] SCHEDULE``: judge any schedule file (ours, executor table, torch CSV).

The instance may be left out for a schedule that carries its own (``zbsolve solve`` output,
``zbsolve sweep`` schedule files, executor tables).
"""

from __future__ import annotations

from zbsolve.cli.common import (
    add_json,
    fmt_list,
    given_instance,
    print_json,
    schedule_and_instance,
    schedule_args,
)


def register(sub) -> None:
    parser = sub.add_parser("check", help="validate a schedule file and print its figures",
                            description="Validate a schedule with the simulator (order, "
                            "dependencies, memory) and print its figures; exit code 1 when it "
                            "exceeds the memory limit.")
    schedule_args(parser, "schedule JSON, executor table JSON or torch pipelining CSV")
    add_json(parser)
    parser.set_defaults(handler=handle)


def handle(args) -> int:
    from zbsolve.simulate import simulate

    sched, inst = schedule_and_instance(args.schedule, given_instance(args))
    result = simulate(inst, sched)
    summary = {"name": sched.name, "instance": inst.name, "valid": True, **result.summary(),
               "memory_unit": inst.memory_unit, "violations": result.violations}
    if args.json:
        print_json(summary)
    else:
        unit = f" {inst.memory_unit}" if inst.memory_unit else ""
        print(f"{sched.name} on {inst.name}: valid order; makespan {result.makespan:.4f}, "
              f"span {result.max_span:.4f}, bubble {result.bubble_makespan:.4f} (makespan) / "
              f"{result.bubble_span:.4f} (span)")
        print(f"peak memory {fmt_list(result.peak_memory)} vs limit {fmt_list(result.limit)}{unit}")
        for line in result.violations:
            print(f"MEMORY: {line}")
    return 0 if result.feasible else 1
