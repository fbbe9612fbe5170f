"""``zbsolve bench``: run the issue's benchmark cases and write results/bench/ (CSV + markdown)."""

from __future__ import annotations

import shlex
import sys


def register(sub) -> None:
    parser = sub.add_parser(
        "bench", help="benchmark: ZB tables, V-shape, small optimal, p=32 m=256 (one command)"
    )
    parser.add_argument("--cases", action="append", default=[], metavar="PATTERN",
                        help="only cases whose id or family matches (glob or substring); "
                             "repeatable or comma-separated, e.g. 'iclr-2p,small'")
    parser.add_argument("--time-limit", type=float, default=20.0,
                        help="seconds per table case (20); small cases get 60, large 120")
    parser.add_argument("--quick", action="store_true",
                        help="one or two cases per family with short limits (a smoke run)")
    parser.add_argument("--out", default="results/bench", help="output folder (results/bench)")
    parser.add_argument("--reference", default=None,
                        help="folder with the published CSVs (default ../shared/reference)")
    parser.add_argument("--workers", type=int, default=2, help="CP-SAT workers (2)")
    parser.add_argument("--seed", type=int, default=0, help="CP-SAT random seed (0)")
    parser.add_argument("--deterministic", action="store_true",
                        help="limits in CP-SAT deterministic seconds (the same result anywhere)")
    parser.add_argument("--list", action="store_true", help="list the selected cases and exit")
    parser.set_defaults(handler=handle)


def handle(args) -> int:
    from pathlib import Path

    from zbsolve import bench

    if args.time_limit <= 0:
        raise ValueError(f"--time-limit: expected seconds > 0, got {args.time_limit}")
    ref = Path(args.reference) if args.reference else None
    cases = bench.build_cases(ref, time_limit=args.time_limit, quick=args.quick)
    patterns = [p for arg in args.cases for p in arg.split(",") if p]
    cases = bench.select(cases, patterns)
    if not cases:
        raise ValueError(f"--cases: nothing matches {patterns}; families: {bench.FAMILIES}")
    if args.list:
        for c in cases:
            print(f"{c.id}\tops={c.ops}\tlimit={c.time_limit:g}s\t{c.goal}")
        return 0
    command = "zbsolve " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    stem = "bench-quick" if args.quick else ("bench" if not patterns else "bench-partial")
    rows = bench.run(cases, Path(args.out), command, workers=args.workers, seed=args.seed,
                     stem=stem, deterministic=args.deterministic)
    good = sum(bool(r.get("meets")) for r in rows)
    print(f"{good}/{len(rows)} cases meet their goal; results in {args.out}/{stem}.csv and .md")
    return 0
