"""torch.distributed.pipelining CSV schedules: a strict writer and a strict reader.

The format is what torch 2.13's ``_PipelineScheduleRuntime._load_csv`` reads: one CSV row per
rank (row r = rank r), one action per cell, an empty cell = nothing (torch reads it as None).
Torch infers stage -> rank from which row a stage's actions are on. Compute tokens are
``{stage}{F|I|W|B}{mb}`` with B = FULL_BACKWARD (torch's name for our fused backward); the
"compute_comms" form adds ``{stage}{SEND_F|RECV_F|SEND_B|RECV_B}{mb}`` and ``{stage}REDUCE_GRAD``,
and torch's DualPipeV writes ``(0F7;7B3)OVERLAP_F_B`` for a forward and a backward run overlapped.

Strict on purpose: torch's parser matches a token *prefix* (``3F12x`` silently becomes ``3F12``)
and does not reject duplicates, so a typo can run a different schedule than the one written.
Here every cell must match the grammar completely and every op may appear once.
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from zbsolve.instance import Instance
from zbsolve.ops import Entry, Op, Pair, ops_of
from zbsolve.schedule import Schedule

_COMPUTE = re.compile(r"(\d+)([FIWB])(\d+)")
_COMM = re.compile(r"(\d+)(SEND_F|RECV_F|SEND_B|RECV_B)(\d+)")
_STAGE_ACTION = re.compile(r"(\d+)(UNSHARD|RESHARD|REDUCE_GRAD)")
_OVERLAP = re.compile(r"\(([^()]*)\)OVERLAP_F_B")
GRAMMAR = (
    "<stage><F|I|W|B><mb> (e.g. 3F12), <stage><SEND_F|RECV_F|SEND_B|RECV_B><mb>, "
    "<stage><UNSHARD|RESHARD|REDUCE_GRAD>, (<compute>;<compute>...)OVERLAP_F_B, or empty"
)


class TorchCSVError(ValueError):
    """A torch CSV cell that does not follow the grammar, or a duplicate; names row/column."""


# ---------------------------------------------------------------------------- reading
def parse_cell(cell: str) -> tuple[list[Entry], str | None]:
    """(the compute job, as a list of at most one entry, or a comm/other token). Raises
    ValueError."""
    text = cell.strip()
    if not text:
        return [], None
    if m := _COMPUTE.fullmatch(text):
        return [Op(m[2], int(m[1]), int(m[3]))], None
    if _COMM.fullmatch(text) or _STAGE_ACTION.fullmatch(text):
        return [], text
    if m := _OVERLAP.fullmatch(text):
        parts = [p.strip() for p in m[1].split(";")]
        ops = []
        for part in parts:
            sub = _COMPUTE.fullmatch(part)
            if sub is None:
                raise ValueError(
                    f"bad sub-action {part!r} in {text!r}: OVERLAP_F_B holds compute tokens "
                    "like 0F7 separated by ';'")
            ops.append(Op(sub[2], int(sub[1]), int(sub[3])))
        if len(ops) != 2:
            raise ValueError(f"{text!r}: OVERLAP_F_B holds a forward and a backward (two "
                             f"sub-actions), got {len(ops)}")
        return [Pair(ops[0], ops[1])], None
    raise ValueError(f"bad token {text!r}: expected {GRAMMAR}")


def read_torch_csv(path: str | Path) -> Schedule:
    """Read a torch pipelining CSV into a Schedule (compute jobs only; an OVERLAP_F_B cell is
    an overlapped ``Pair``, which ``zbsolve.schedule.unpair`` turns into its two halves for an
    instance that allows no overlap, as torch's runtime runs it without a custom function).

    Communication and FSDP/grad-reduction actions are checked against the grammar and for
    duplicates, then skipped: the simulator models transfers itself.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"torch CSV {str(path)!r} does not exist")
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    orders: list[list[Op]] = []
    seen: dict[object, tuple[int, int]] = {}
    overlapped: list[list[str]] = []
    other = 0
    for r, row in enumerate(rows):
        order: list[Op] = []
        for c, cell in enumerate(row):
            where = f"{path.name}: row {r + 1} (rank {r}), column {c + 1}"
            try:
                ops, token = parse_cell(cell)
            except ValueError as exc:
                raise TorchCSVError(f"{where}: {exc}") from None
            keys: list[object] = [op for e in ops for op in ops_of(e)] if token is None else [token]
            for key in keys:
                if key in seen:
                    r0, c0 = seen[key]
                    raise TorchCSVError(
                        f"{where}: duplicate action {key} (first at row {r0 + 1}, "
                        f"column {c0 + 1}); each action may appear once")
                seen[key] = (r, c)
            overlapped += [[str(op) for op in e] for e in ops if isinstance(e, Pair)]
            other += token is not None
            order.extend(ops)
        orders.append(order)
    if not orders:
        raise TorchCSVError(f"{path.name}: empty file; expected one row per rank")
    meta = {"source": "torch-csv", "path": str(path), "overlap_f_b": overlapped,
            "non_compute_actions_skipped": other}
    return Schedule(orders=orders, name=path.stem, meta=meta)


# ---------------------------------------------------------------------------- writing
def torch_refusal(inst: Instance) -> str | None:
    """Why torch's runtime cannot run schedules of this instance (None when it can)."""
    if inst.replicas > 1:
        return ("torch's pipelining runtime runs one model with one last stage, so it cannot run "
                "two replicas in one schedule; write --format torch-csv-ext (our extended CSV, "
                "replica r's stage s is r*S+s) or --format executor for our runner")
    return None


def cell(entry: Entry) -> str:
    """One job in torch's syntax: an op token, or ``(0F7;7B3)OVERLAP_F_B`` for a pair."""
    return f"({entry.first};{entry.second})OVERLAP_F_B" if isinstance(entry, Pair) else str(entry)


def compute_rows(inst: Instance, sched: Schedule, *, fuse_bw: bool = False,
                 extended: bool = False) -> list[list[str]]:
    """Compute-only rows after validating the schedule with the simulator.

    ``extended``: our superset of torch's grammar (replica stages r*S+s, and later segments
    and memory modes), which only our runner reads; otherwise refuse what torch cannot run.
    """
    from zbsolve.schedule import fuse_backward
    from zbsolve.simulate import validate

    why = None if extended else torch_refusal(inst)
    if why:
        raise TorchCSVError(f"--format torch-csv: {why}")
    if fuse_bw:
        sched = fuse_backward(sched)
    validate(inst, sched)
    return [[cell(e) for e in order] for order in sched.orders]


def comm_rows(inst: Instance, sched: Schedule, *, fuse_bw: bool = False) -> list[list[str]]:
    """The lowered, P2P-checked table of (inst, sched) in torch's action syntax."""
    from zbsolve.export.executor import lower
    from zbsolve.export.p2p_check import require_safe

    why = torch_refusal(inst)
    if why:
        raise TorchCSVError(f"--format torch-csv-comms: {why}")
    table = lower(inst, sched, fuse_bw=fuse_bw)
    require_safe(table)
    return table_rows(table)


def table_rows(table: Any) -> list[list[str]]:
    """An executor table's actions as torch tokens, with torch's REDUCE_GRAD per stage.

    REDUCE_GRAD goes right after the m-th (last) W or B of a stage, where torch's own lowering
    (``_add_reduce_grad``) puts it; torch scales gradients there, so without it a
    compute_comms run would not match a compute_only run.
    """
    m = table.microbatches
    rows = []
    for row in table.actions:
        count: dict[int, int] = defaultdict(int)
        out = []
        for a in row:
            out.append(a.token)
            for op in a.ops:
                if op.kind in ("W", "B"):
                    count[op.stage] += 1
                    if count[op.stage] == m:
                        out.append(f"{op.stage}REDUCE_GRAD")
        rows.append(out)
    return rows


def write_rows(rows: list[list[str]], path: str | Path) -> None:
    with Path(path).open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)


def write_torch_csv(
    inst: Instance, sched: Schedule, path: str | Path, comms: bool = False, *,
    fuse_bw: bool = False, extended: bool = False,
) -> list[list[str]]:
    """Write the CSV torch's ``_load_csv`` reads (``format="compute_comms"`` when comms), or
    with ``extended`` our compute-only superset of it (``--format torch-csv-ext``).

    The schedule is validated by the simulator first; with comms the lowered table must also
    pass ``p2p_check``.
    """
    if comms:
        rows = comm_rows(inst, sched, fuse_bw=fuse_bw)
    else:
        rows = compute_rows(inst, sched, fuse_bw=fuse_bw, extended=extended)
    write_rows(rows, path)
    return rows
