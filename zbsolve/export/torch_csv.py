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
import io
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from zbsolve.instance import Instance
from zbsolve.ops import Op
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
def parse_cell(cell: str) -> tuple[list[Op], str | None]:
    """(compute ops in execution order, comm/other token or None). Raises ValueError."""
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
        if len(ops) < 2:
            raise ValueError(f"{text!r}: OVERLAP_F_B needs at least two sub-actions")
        return ops, None
    raise ValueError(f"bad token {text!r}: expected {GRAMMAR}")


def _read_rows(path: Path) -> list[list[str]]:
    from zbsolve.io import read_text

    text = read_text(path, "torch CSV")
    try:
        return list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise TorchCSVError(f"{path.name}: not a valid CSV: {exc}") from None


def _parse_rows(path: Path) -> list[list[tuple[list[Op], str | None]]]:
    """Every cell parsed, duplicates refused, with row/column in the error."""
    from zbsolve import size_limits as sizes

    rows = _read_rows(path)
    sizes.check_size(f"{path.name}: rows (ranks)", len(rows), sizes.MAX_DEVICES)
    sizes.check_size(f"{path.name}: cells", sum(len(r) for r in rows), 3 * sizes.MAX_OPS)
    seen: dict[object, tuple[int, int]] = {}
    out = []
    for r, row in enumerate(rows):
        cells = []
        for c, cell in enumerate(row):
            where = f"{path.name}: row {r + 1} (rank {r}), column {c + 1}"
            try:
                ops, token = parse_cell(cell)
            except ValueError as exc:
                raise TorchCSVError(f"{where}: {exc}") from None
            keys: list[object] = list(ops) if token is None else [token]
            for key in keys:
                if key in seen:
                    r0, c0 = seen[key]
                    raise TorchCSVError(
                        f"{where}: duplicate action {key} (first at row {r0 + 1}, "
                        f"column {c0 + 1}); each action may appear once")
                seen[key] = (r, c)
            cells.append((ops, token))
        out.append(cells)
    if not out:
        raise TorchCSVError(f"{path.name}: empty file; expected one row per rank")
    return out


def read_torch_csv(path: str | Path) -> Schedule:
    """Read a torch pipelining CSV into a Schedule (compute ops only, OVERLAP_F_B expanded).

    Communication and FSDP/grad-reduction actions are checked against the grammar and for
    duplicates, then skipped here; ``read_torch_csv_table`` reads them as a table to judge.
    """
    path = Path(path)
    orders: list[list[Op]] = []
    overlapped: list[list[str]] = []
    other = 0
    for cells in _parse_rows(path):
        order: list[Op] = []
        for ops, token in cells:
            if len(ops) > 1:
                overlapped.append([str(op) for op in ops])
            other += token is not None
            order.extend(ops)
        orders.append(order)
    meta = {"source": "torch-csv", "path": str(path), "overlap_f_b": overlapped,
            "non_compute_actions_skipped": other}
    return Schedule(orders=orders, name=path.stem, meta=meta)


def has_comm_tokens(path: str | Path) -> bool:
    """Whether the CSV is the ``compute_comms`` form (it has SEND/RECV actions)."""
    return any(token is not None and _COMM.fullmatch(token)
               for cells in _parse_rows(Path(path)) for _, token in cells)


def read_torch_csv_table(path: str | Path, inst: Instance) -> tuple[Any, list[str]]:
    """A ``torch-csv-comms`` file as the ExecutorTable it amounts to, so ``p2p_check`` can judge
    its own SEND/RECV actions; and the problems of its implicit header against ``inst``.

    Torch infers stage -> rank from which row a stage's compute ops are on; a comm token names
    no peer, so the peer is the rank of the neighbouring stage in that placement. The table's
    placement is the one the file implies (so a comm token on the wrong row is caught as such);
    times are not in the file and are left at 0. REDUCE_GRAD/UNSHARD/RESHARD are not P2P and
    are left out, after checking that each stage has its one REDUCE_GRAD after its last
    backward, on its own row (torch scales the gradients there).
    """
    from zbsolve.export.executor import Action, ExecutorTable, _number_batches

    path = Path(path)
    rows = _parse_rows(path)
    header: list[str] = []
    if len(rows) != inst.devices:
        header.append(f"{path.name}: {len(rows)} rows (ranks) but the instance has "
                      f"{inst.devices} devices")
    implied: dict[int, int] = {}
    for r, cells in enumerate(rows):
        for ops, _ in cells:
            for op in ops:
                if implied.setdefault(op.stage, r) != r:
                    header.append(f"{path.name}: stage {op.stage} has compute ops on rows "
                                  f"{implied[op.stage]} and {r}; a stage lives on one rank")
    placement = [implied.get(s, inst.placement[s]) for s in range(inst.stages)]
    outside = sorted(s for s in implied if not 0 <= s < inst.stages)
    if outside:
        header.append(f"{path.name}: stage(s) {outside} are outside the instance's 0.."
                      f"{inst.stages - 1}")
    elif placement != list(inst.placement):
        header.append(f"{path.name}: the rows put stages on ranks {placement}, the instance's "
                      f"placement is {list(inst.placement)}")
    actions: list[list[Action]] = []
    for cells in rows:
        row: list[Action] = []
        for ops, token in cells:
            for op in ops:
                row.append(Action(op.kind, op.stage, op.mb, 0.0, 0.0))
            if token is not None and (m := _COMM.fullmatch(token)):
                stage, kind, mb = int(m[1]), m[2], int(m[3])
                peer_stage = stage + (1 if kind in ("SEND_F", "RECV_B") else -1)
                peer = placement[peer_stage] if 0 <= peer_stage < len(placement) else None
                row.append(Action(kind, stage, mb, 0.0, 0.0, peer, peer_stage))
        actions.append(_number_batches(row))
    header += _reduce_grad_errors(path, rows, implied, inst.microbatches)
    table = ExecutorTable(instance=inst.to_dict(), placement=placement, actions=actions,
                          schedule_name=path.stem, fused_bw=False)
    return table, header


def _reduce_grad_errors(path: Path, rows, implied: dict[int, int], m: int) -> list[str]:
    out = []
    for stage, r in sorted(implied.items()):
        backward_seen = 0
        where = None
        for c, (ops, token) in enumerate(rows[r]):
            backward_seen += sum(op.stage == stage and op.kind in ("W", "B") for op in ops)
            if token == f"{stage}REDUCE_GRAD":
                where = (c, backward_seen)
        misplaced = [r2 for r2, cells in enumerate(rows) if r2 != r
                     and any(t == f"{stage}REDUCE_GRAD" for _, t in cells)]
        if misplaced:
            out.append(f"{path.name}: {stage}REDUCE_GRAD is on row {misplaced[0]}, stage "
                       f"{stage} lives on row {r}")
        elif where is None:
            out.append(f"{path.name}: stage {stage} has no {stage}REDUCE_GRAD (torch scales "
                       "the gradients there; write it after the stage's last W or B)")
        elif where[1] < m:
            out.append(f"{path.name}: {stage}REDUCE_GRAD at column {where[0] + 1} comes "
                       f"before the stage's last backward ({where[1]} of {m} done)")
    return out


# ---------------------------------------------------------------------------- writing
def compute_rows(inst: Instance, sched: Schedule, *, fuse_bw: bool = False) -> list[list[str]]:
    """Compute-only rows after validating the schedule with the simulator."""
    from zbsolve.export.executor import fuse_backward
    from zbsolve.simulate import validate

    if fuse_bw:
        sched = fuse_backward(sched)
    validate(inst, sched)
    return [[str(op) for op in order] for order in sched.orders]


def comm_rows(inst: Instance, sched: Schedule, *, fuse_bw: bool = False) -> list[list[str]]:
    """The lowered, P2P-checked table of (inst, sched) in torch's action syntax."""
    from zbsolve.export.executor import lower
    from zbsolve.export.p2p_check import require_safe

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
            if a.kind in ("W", "B"):
                count[a.stage] += 1
                if count[a.stage] == m:
                    out.append(f"{a.stage}REDUCE_GRAD")
        rows.append(out)
    return rows


def write_rows(rows: list[list[str]], path: str | Path) -> None:
    """Write the rows as CSV, atomically (temp file beside it, then rename)."""
    from zbsolve.io import atomic_open

    with atomic_open(path, newline="") as fh:
        csv.writer(fh).writerows(rows)


def write_torch_csv(
    inst: Instance, sched: Schedule, path: str | Path, comms: bool = False, *,
    fuse_bw: bool = False,
) -> list[list[str]]:
    """Write the CSV torch's ``_load_csv`` reads (``format="compute_comms"`` when comms).

    The schedule is validated by the simulator first; with comms the lowered table must also
    pass ``p2p_check``.
    """
    rows = comm_rows(inst, sched, fuse_bw=fuse_bw) if comms else compute_rows(
        inst, sched, fuse_bw=fuse_bw)
    write_rows(rows, path)
    return rows
