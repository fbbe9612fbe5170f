"""Sum up audit outputs: their tallies, the features the audited draws had, the findings and
the refusals.

Usage: python results/audit/summarize.py OUT.jsonl [OUT.jsonl ...]
"""

from __future__ import annotations

import json
import sys
from collections import Counter


def features(data: dict) -> list[str]:
    out = [k for k in ("overlap", "recompute", "offload", "step") if k in data]
    out += ["two replicas"] * (data.get("replicas", 1) > 1)
    out += ["two chunks"] * (data.get("chunks", 1) > 1)
    out += ["segments"] * (data.get("segments", 1) > 1)
    out += ["limit"] * (data.get("memory", {}).get("limit") is not None)
    out += ["explicit placement"] * isinstance(data.get("placement"), list)
    out += ["selective recompute"] * ("R_selective" in data.get("recompute", {}))
    out += ["two copy streams"] * (data.get("offload", {}).get("streams") == 2)
    return out


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__.splitlines()[3], file=sys.stderr)
        return 2
    have: Counter = Counter()
    refused: Counter = Counter()
    for path in paths:
        for line in open(path):
            row = json.loads(line)
            if "tally" in row:
                print(f"{path}: {row['tally']}")
                continue
            for finding in row.get("bad", []):
                print(f"  finding {row['draw']}: {finding[:300]}")
            for why, n in row.get("refused", {}).items():
                refused[why[:120]] += n
            if "instance" in row and "skipped" not in row:
                have["audited"] += 1
                have.update(features(row["instance"]))
    print("audited draws with each feature:", dict(have.most_common()))
    for why, n in refused.most_common():
        print(f"  refused {n}: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
