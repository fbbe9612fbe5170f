"""Every bound the benchmark ever reported against every schedule it ever found, per case.

The claims audit checks bounds against an oracle, which proves optima only up to about 100
ops. Above that size the committed benchmark runs check one another: a case's lower bound from
any run (any commit, any option, any time limit) must not exceed the simulator's value of a
schedule from any other run of the same case, and a schedule called optimal must not be beaten
by any run. A case is keyed by its id, limit, objective and op count (a case whose instance
changed between commits has another key where its limit or size changed).

Usage: python results/audit/bounds_across_runs.py [FOLDER]   (default: results/)
Prints one line per violation and a last line with the tally; exit status 1 if any.
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

REL = 1e-6  # the CSVs' figures are printed to about 1e-9 relative


def rows(folder: Path):
    for path in sorted(folder.rglob("*.csv")):
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            if not {"case", "value", "lower_bound"} <= set(reader.fieldnames or ()):
                continue
            for row in reader:
                try:
                    value, bound = float(row["value"]), float(row["lower_bound"])
                except (TypeError, ValueError):  # a case that found no schedule
                    continue
                key = (row["case"], row.get("limit"), row.get("objective"), row.get("ops"))
                yield key, value, bound, row.get("status", ""), path


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else Path(__file__).resolve().parents[1]
    if len(argv) > 1 or not folder.is_dir():
        print(f"bounds_across_runs.py: FOLDER: {folder} is not a folder; give the results "
              "folder (default: results/)", file=sys.stderr)
        return 2
    values: dict[tuple, list[tuple[float, Path]]] = defaultdict(list)
    bounds: dict[tuple, list[tuple[float, Path]]] = defaultdict(list)
    optimal = 0
    seen = set()
    for key, value, bound, status, path in rows(folder):
        values[key].append((value, path))
        bounds[key].append((bound, path))
        optimal += status == "optimal"
        seen.add(path)
    bad = 0
    for key in values:
        (low, where), (high, whence) = min(values[key]), max(bounds[key])
        if high > low * (1 + REL):
            bad += 1
            print(f"{key}: bound {high:g} ({whence}) above the schedule {low:g} ({where})")
    n = sum(len(v) for v in values.values())
    print(f"{n} rows ({optimal} optimal) of {len(values)} cases in {len(seen)} files: "
          f"{bad} bounds above a schedule")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
