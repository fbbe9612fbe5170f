"""``zbsolve baselines INSTANCE``: every applicable hand-made schedule, judged by the simulator."""

from __future__ import annotations

from zbsolve.cli.common import (
    add_json,
    fmt_list,
    instance_arg,
    load,
    print_json,
    print_schedule_table,
    step_arg,
    with_step,
)
from zbsolve.instance import memory_unit_label


def register(sub) -> None:
    parser = sub.add_parser("baselines", help="table of the hand-made schedules on an instance")
    instance_arg(parser)
    parser.add_argument("--all", action="store_true", help="also list families that do not apply")
    step_arg(parser, "judge every schedule")
    add_json(parser)
    parser.set_defaults(handler=handle)


def rows(inst, include_na: bool = False) -> list[dict]:
    from zbsolve.baselines import evaluate_all

    out = []
    for r in evaluate_all(inst):
        if r.applicable:
            out.append({"name": r.name, **r.result.summary()})
        elif include_na:
            out.append({"name": r.name, "applicable": False, "reason": r.reason})
    return out


def handle(args) -> int:
    inst = with_step(load(args.instance), args)
    table = rows(inst, include_na=args.all)
    if args.json:
        print_json(table)
        return 0
    unit = memory_unit_label(inst)
    print(f"{inst.name}: p={inst.p} m={inst.m} v={inst.v} placement={inst.placement_kind} "
          f"comm={inst.comm:g} limit={fmt_list(list(inst.limit))}{f' {unit}' if unit else ''}"
          + (f" step={inst.step.mode}" if inst.step.active else ""))
    print_schedule_table(table, memory_unit_label(inst))
    return 0
