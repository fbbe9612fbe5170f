"""``zbsolve baselines INSTANCE``: every applicable hand-made schedule, judged by the simulator."""

from __future__ import annotations

from zbsolve.cli.common import add_json, fmt_list, instance_arg, load, print_json


def register(sub) -> None:
    parser = sub.add_parser("baselines", help="table of the hand-made schedules on an instance")
    instance_arg(parser)
    parser.add_argument("--all", action="store_true", help="also list families that do not apply")
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
    import pandas as pd

    inst = load(args.instance)
    table = rows(inst, include_na=args.all)
    if args.json:
        print_json(table)
        return 0
    print(f"{inst.name}: p={inst.p} m={inst.m} v={inst.v} placement={inst.placement_kind} "
          f"comm={inst.comm:g} limit={fmt_list(list(inst.limit))}")
    shown = [
        {
            "schedule": r["name"],
            "makespan": r.get("makespan"),
            "span": r.get("span"),
            "bubble(makespan)": r.get("bubble_makespan"),
            "bubble(span)": r.get("bubble_span"),
            "peak memory": fmt_list(r["peak_memory"]) if "peak_memory" in r else r.get("reason"),
            "feasible": ("yes" if r["feasible"] else "NO") if "feasible" in r else "n/a",
        }
        for r in table
    ]
    with pd.option_context("display.width", 200, "display.max_colwidth", 80,
                           "display.float_format", "{:.4f}".format):
        print(pd.DataFrame(shown).to_string(index=False))
    return 0
