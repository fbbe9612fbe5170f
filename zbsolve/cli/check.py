"""``zbsolve check [INSTANCE] SCHEDULE``: judge any schedule file (ours, executor table, torch CSV).

The instance may be left out for a schedule that carries its own (``zbsolve solve`` output,
``zbsolve sweep`` schedule files, executor tables). A file that carries communication (an
executor table, a ``torch-csv-comms`` CSV) is judged as it would run: its header against the
instance, its compute order by the simulator, and its own SEND/RECV actions by the P2P check
in blocking and batched mode (``zbsolve.export.judge``).
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
    from zbsolve.export.judge import judge, require_ok

    file, inst = schedule_and_instance(args.schedule, given_instance(args))
    verdict = require_ok(judge(inst, file), f"{args.schedule} is not valid")
    result = verdict.sim
    sched = file.schedule
    p2p = [{"mode": r.mode, "ok": r.ok, "transfers": r.transfers} for r in verdict.reports]
    summary = {"name": sched.name, "instance": inst.name, "kind": file.kind, "valid": True,
               **result.summary(), "memory_unit": inst.memory_unit,
               "violations": result.violations, "p2p": p2p}
    if args.json:
        print_json(summary)
    else:
        unit = f" {inst.memory_unit}" if inst.memory_unit else ""
        comms = ""
        if verdict.reports:
            comms = "; its own communication: " + ", ".join(
                f"p2p {r.mode} ok" for r in verdict.reports) + (
                f" ({verdict.reports[0].transfers} transfers)")
        print(f"{sched.name} on {inst.name}: valid order{comms}; makespan {result.makespan:.4f}, "
              f"span {result.max_span:.4f}, bubble {result.bubble_makespan:.4f} (makespan) / "
              f"{result.bubble_span:.4f} (span)")
        print(f"peak memory {fmt_list(result.peak_memory)} vs limit {fmt_list(result.limit)}{unit}")
        for line in result.violations:
            print(f"MEMORY: {line}")
    return 0 if result.feasible else 1
