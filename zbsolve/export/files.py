"""Reading schedule files of every format zbsolve knows, by what they contain.

Our schedule JSON (``zbsolve.schedule``), an executor table (its compute orders; the table
itself is judged by ``zbsolve.export.p2p_check``) and a torch pipelining CSV (by extension).
"""

from __future__ import annotations

from pathlib import Path

from zbsolve.schedule import Schedule


def load_schedule(path: str | Path) -> Schedule:
    """Load a schedule JSON (ours), an executor table JSON, or a torch pipelining CSV (by
    extension); every error is one line naming the file and the field. (To judge a file's own
    communication too, ``zbsolve.export.judge.read_schedule_file``.)"""
    from zbsolve.export.judge import read_schedule_file

    return read_schedule_file(path).schedule
