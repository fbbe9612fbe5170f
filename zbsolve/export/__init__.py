"""Exports of a schedule for runtimes and people.

- ``executor``: per-rank action lists with explicit SEND/RECV (our runtime's format,
  docs/executor-format.md), checked deadlock-free by ``p2p_check``.
- ``torch_csv``: torch.distributed.pipelining CSV (compute-only and with comms), strict reader.
- ``chrome_trace``: Chrome/Perfetto trace JSON.

``write(inst, sched, fmt, path)`` is the one entry point (``zbsolve export`` calls it): it
validates the schedule with the simulator, lowers it to an executor table, proves that table
deadlock-free, then writes the format asked for. Submodules are imported on demand; none of
them imports torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FORMATS = ("executor", "torch-csv", "torch-csv-comms", "torch-csv-ext", "chrome-trace")
"""``torch-csv-ext`` is our compute-only superset of torch's CSV (replica stages r*S+s, and
what torch's runtime has no action for); only our runner reads it."""


@dataclass(frozen=True)
class ExportReport:
    """What ``write`` wrote and what it checked on the way."""

    output: str
    format: str
    schedule: str
    makespan: float  # the simulator's, of the schedule as exported
    compute_ops: int
    transfers: int  # point-to-point messages (one SEND + one RECV each)
    p2p_checks: tuple[str, ...]  # the p2p_check modes that proved the table deadlock-free

    def line(self) -> str:
        checked = ", ".join(f"p2p {mode} ok" for mode in self.p2p_checks)
        return (f"wrote {self.output} ({self.format}): {self.schedule}, makespan "
                f"{self.makespan:.4f}, {self.compute_ops} compute ops, {self.transfers} "
                f"transfers; simulator ok, {checked}")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["p2p_checks"] = list(self.p2p_checks)
        return data


def write(inst, sched, fmt: str, output: str | Path, fuse_bw: bool = False) -> ExportReport:
    """Validate, lower, prove deadlock-free, then write ``sched`` as ``fmt`` to ``output``.

    ``fuse_bw`` fuses each I immediately followed by its W into one B (for runtimes without the
    I/W split). Raises ScheduleError (invalid or over the memory limit), ExecutorError or
    P2PError; nothing is written then.
    """
    from zbsolve.export.executor import lower
    from zbsolve.export.p2p_check import require_safe
    from zbsolve.export.torch_csv import TorchCSVError, cell, torch_refusal
    from zbsolve.schedule import fuse_backward

    if fmt not in FORMATS:
        raise ValueError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    why = torch_refusal(inst) if fmt in ("torch-csv", "torch-csv-comms") else None
    if why:
        raise TorchCSVError(f"--format {fmt}: {why}")
    output = str(output)
    table = lower(inst, sched, fuse_bw=fuse_bw)  # validates with the simulator first
    if fuse_bw:
        sched = fuse_backward(sched)
    reports = require_safe(table)
    if fmt == "executor":
        table.dump(output, check=False)  # checked just above
    elif fmt in ("torch-csv", "torch-csv-ext"):
        from zbsolve.export.torch_csv import write_rows

        write_rows([[cell(e) for e in order] for order in sched.orders], output)
    elif fmt == "torch-csv-comms":
        from zbsolve.export.torch_csv import table_rows, write_rows

        write_rows(table_rows(table), output)  # the table checked above
    else:
        from zbsolve.export.chrome_trace import write_chrome_trace

        write_chrome_trace(inst, sched, output, table=table)
    n_comm = sum(a.is_comm for row in table.actions for a in row)
    return ExportReport(
        output=output, format=fmt, schedule=sched.name,
        makespan=float(table.predicted["makespan"]), compute_ops=len(sched),
        transfers=n_comm // 2, p2p_checks=tuple(r.mode for r in reports),
    )
