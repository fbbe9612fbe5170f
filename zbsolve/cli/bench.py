"""``zbsolve bench``: run the benchmark cases and write CSV + markdown to a new folder.

The output goes to ``./zbsolve-bench-<date>-<time>/`` unless ``--out`` says otherwise, so a run
never overwrites earlier results (``--out results/bench`` refreshes the committed ones, on
purpose). The published tables and instances come from the package (``zbsolve.data``).
"""

from __future__ import annotations

import shlex
import sys

from zbsolve.cli import args as types
from zbsolve.cli.common import add_json, new_output_dir, print_json


def register(sub) -> None:
    parser = sub.add_parser(
        "bench", help="benchmark: ZB tables, V-shape, small optimal, p=32 m=256 (one command)"
    )
    parser.add_argument("--cases", action="append", default=[], metavar="PATTERN",
                        help="only cases whose id or family matches (glob or substring); "
                             "repeatable or comma-separated, e.g. 'iclr-2p,small' "
                             "(default: all)")
    parser.add_argument("--time-limit", type=types.seconds, default=20.0, metavar="SECONDS",
                        help="seconds per table case; small cases get --small-limit, large 120")
    parser.add_argument("--small-limit", type=types.seconds, default=60.0, metavar="SECONDS",
                        help="seconds per small, random and segment case (default: 60); "
                             "e.g. 20 then 60 to see what a longer limit changes")
    parser.add_argument("--quick", action="store_true",
                        help="one or two cases per family with short limits (a smoke run)")
    parser.add_argument("--out", default=None,
                        help="output folder (default: a new ./zbsolve-bench-DATE-TIME/)")
    parser.add_argument("--reference", default=None,
                        help="folder with the published CSVs (default: the tables shipped in "
                             "zbsolve/data/reference/)")
    parser.add_argument("--workers", type=types.positive_int, default=2, help="CP-SAT workers")
    parser.add_argument("--seed", type=types.seed, default=0, help="CP-SAT random seed (default: 0)")
    parser.add_argument("--deterministic", action="store_true",
                        help="limits in CP-SAT deterministic seconds (the same result anywhere)")
    parser.add_argument("--relax", action="store_true",
                        help="give every solve the one-device relaxation phase (solve --relax)")
    parser.add_argument("--list", action="store_true", help="list the selected cases and exit")
    add_json(parser)
    parser.set_defaults(handler=handle)


def handle(args) -> int:
    from pathlib import Path

    from zbsolve import bench
    from zbsolve.io import check_output

    if args.out:
        check_output(args.out, kind="folder", what="--out")
    ref = Path(args.reference) if args.reference else None
    cases = bench.build_cases(ref, time_limit=args.time_limit, quick=args.quick,
                              small_limit=args.small_limit)
    patterns = [p for arg in args.cases for p in arg.split(",") if p]
    cases = bench.select(cases, patterns)
    if not cases:
        raise ValueError(f"--cases: nothing matches {patterns}; families: {bench.FAMILIES}")
    if args.list:
        if args.json:
            print_json([{"case": c.id, "family": c.family, "ops": c.ops,
                         "time_limit": c.time_limit, "goal": c.goal} for c in cases])
            return 0
        for c in cases:
            print(f"{c.id}\tops={c.ops}\tlimit={c.time_limit:g}s\t{c.goal}")
        return 0
    out = Path(args.out) if args.out else new_output_dir("zbsolve-bench")
    command = "zbsolve " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    stem = "bench-quick" if args.quick else ("bench" if not patterns else "bench-partial")
    echo = (lambda line: print(line, file=sys.stderr)) if args.json else print
    rows = bench.run(cases, out, command, workers=args.workers, seed=args.seed, stem=stem,
                     echo=echo, deterministic=args.deterministic, relax=args.relax)
    good = sum(bool(r.get("meets")) for r in rows)
    files = [str(out / f"{stem}.csv"), str(out / f"{stem}.md")]
    if args.json:
        print_json({"cases": len(rows), "meet_goal": good, "files": files, "rows": rows})
    else:
        print(f"{good}/{len(rows)} cases meet their goal; results in {files[0]} and .md")
    return 0
