"""The model's scale (``TimeScale.choose``) of every shipped instance file and every bench
case, one line each: run on two revisions and compared, it shows which instances a change of
the scale rule reaches (thirty-fifth pass: none).

    python results/multichunk/thirtyfifth/scales.py > OUT.txt
"""

import sys
from pathlib import Path

from zbsolve.bench import build_cases
from zbsolve.instance import InstanceError, load_instance
from zbsolve.solver.model import TimeScale

if len(sys.argv) != 1:
    print("usage: scales.py (no arguments; run from the repository root)", file=sys.stderr)
    sys.exit(2)
files = sorted(p for folder in ("instances", "zbsolve/data/instances", "examples")
               for p in Path(folder).rglob("*") if p.suffix in (".yaml", ".json"))
for path in files:
    try:
        inst = load_instance(path)
    except InstanceError:
        continue  # not an instance (a schedule, a layer profile)
    print(path, TimeScale.choose(inst))
for case in build_cases():
    print(case.id, TimeScale.choose(case.inst))
