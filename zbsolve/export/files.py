"""Reading schedule files of every format zbsolve knows, by what they contain.

Our schedule JSON (``zbsolve.schedule``), an executor table (its compute orders; the table
itself is judged by ``zbsolve.export.p2p_check``) and a torch pipelining CSV (by extension).
"""

from __future__ import annotations

import json
from pathlib import Path

from zbsolve.schedule import Schedule


def load_schedule(path: str | Path) -> Schedule:
    """Load a schedule JSON (ours), an executor table, or a torch pipelining CSV."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        from zbsolve.export.torch_csv import read_torch_csv

        return read_torch_csv(path)
    data = json.loads(path.read_text())
    if isinstance(data, dict) and data.get("format") == "zbsolve-executor":
        from zbsolve.export.executor import schedule_from_table

        return schedule_from_table(data)
    sched = Schedule.from_dict(data)
    if sched.name == "schedule":
        sched.name = path.stem
    return sched
