"""torch.distributed.pipelining CSV schedules: a strict writer and a strict reader.

The format is what torch 2.13's ``_PipelineScheduleRuntime._load_csv`` reads: one CSV row per
rank (row r = rank r), one action per cell, an empty cell = nothing (torch reads it as None).
Torch infers stage -> rank from which row a stage's actions are on. Compute tokens are
``{stage}{F|I|W|B}{mb}`` with B = FULL_BACKWARD (torch's name for our fused backward); the
"compute_comms" form adds ``{stage}{SEND_F|RECV_F|SEND_B|RECV_B}{mb}`` and ``{stage}REDUCE_GRAD``,
and torch's DualPipeV writes ``(0F7;7B3)OVERLAP_F_B`` for a forward and a backward run overlapped.

Strict on purpose: torch's parser matches a token *prefix* (``3F12x`` silently becomes ``3F12``)
and does not reject duplicates, so a typo can run a different schedule than the one written.
Here every cell must match the grammar completely and every op may appear once. The reader
also takes our extended CSV (``--format torch-csv-ext``), whose compute tokens may carry a
sequence segment (``3F12.2``) and whose rows may hold memory-mode cells (``3R12``, ``3RS12``,
``3O12``, ``3L12``: recompute, selective recompute, copy out, load back, in issue order); torch's
own parser reads neither.
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from zbsolve.graph import TaskGraph
from zbsolve.instance import Instance
from zbsolve.ops import Entry, Op, Pair, ops_of
from zbsolve.schedule import Schedule

_COMPUTE = re.compile(r"(\d+)([FIWB])(\d+)(?:\.(\d+))?")  # .g: our extended CSV's segment
_MODE = re.compile(r"(\d+)(RS|[ROL])(\d+)(?:\.(\d+))?")  # our extended CSV's memory-mode cells
_COMM = re.compile(r"(\d+)(SEND_F|RECV_F|SEND_B|RECV_B)(\d+)")
_STAGE_ACTION = re.compile(r"(\d+)(UNSHARD|RESHARD|REDUCE_GRAD)")
_OVERLAP = re.compile(r"\(([^()]*)\)OVERLAP_F_B")
GRAMMAR = (
    "<stage><F|I|W|B><mb> (e.g. 3F12), <stage><R|RS|O|L><mb> (memory modes, torch-csv-ext), "
    "<stage><SEND_F|RECV_F|SEND_B|RECV_B><mb>, "
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
    if m := _COMPUTE.fullmatch(text) or _MODE.fullmatch(text):
        return [Op(m[2], int(m[1]), int(m[3]), int(m[4] or 0))], None
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
            ops.append(Op(sub[2], int(sub[1]), int(sub[3]), int(sub[4] or 0)))
        if len(ops) != 2:
            raise ValueError(f"{text!r}: OVERLAP_F_B holds a forward and a backward (two "
                             f"sub-actions), got {len(ops)}")
        return [Pair(ops[0], ops[1])], None
    raise ValueError(f"bad token {text!r}: expected {GRAMMAR}")


def _read_rows(path: Path) -> list[list[str]]:
    from zbsolve.io import read_text

    text = read_text(path, "torch CSV")
    try:
        return list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise TorchCSVError(f"{path.name}: not a valid CSV: {exc}") from None


def _parse_rows(path: Path) -> list[list[tuple[list[Entry], str | None]]]:
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
            keys: list[object] = [op for e in ops for op in ops_of(e)] if token is None else [token]
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
    """Read a torch pipelining CSV into a Schedule (compute jobs only; an OVERLAP_F_B cell is
    an overlapped ``Pair``, which ``zbsolve.schedule.unpair`` turns into its two halves for an
    instance that allows no overlap, as torch's runtime runs it without a custom function).

    Communication and FSDP/grad-reduction actions are checked against the grammar and for
    duplicates, then skipped here; ``read_torch_csv_table`` reads them as a table to judge.
    """
    path = Path(path)
    orders: list[list[Entry]] = []
    overlapped: list[list[str]] = []
    other = 0
    for cells in _parse_rows(path):
        order: list[Entry] = []
        for ops, token in cells:
            overlapped += [[str(op) for op in e] for e in ops if isinstance(e, Pair)]
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
    from zbsolve.export.executor import PAIR_KIND, Action, ExecutorTable, _number_batches

    path = Path(path)
    rows = _parse_rows(path)
    header: list[str] = []
    if len(rows) != inst.devices:
        header.append(f"{path.name}: {len(rows)} rows (ranks) but the instance has "
                      f"{inst.devices} devices")
    implied: dict[int, int] = {}
    for r, cells in enumerate(rows):
        for entries, _ in cells:
            for op in (op for e in entries for op in ops_of(e)):
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
    graph = TaskGraph.of(inst, (op for cells in rows for entries, _ in cells
                                for e in entries for op in ops_of(e)))
    actions: list[list[Action]] = []
    for cells in rows:
        row: list[Action] = []
        for entries, token in cells:
            for e in entries:
                head = ops_of(e)[0]
                row.append(Action(PAIR_KIND if isinstance(e, Pair) else head.kind, head.stage,
                                  head.mb, 0.0, 0.0, seg=head.seg,
                                  pair=e if isinstance(e, Pair) else None))
            if token is not None and (m := _COMM.fullmatch(token)):
                stage, kind, mb = int(m[1]), m[2], int(m[3])
                peer_stage = _peer_stage(graph, kind, stage, mb)
                ok = peer_stage is not None and 0 <= peer_stage < len(placement)
                peer = placement[peer_stage] if ok else None
                row.append(Action(kind, stage, mb, 0.0, 0.0, peer, peer_stage))
        actions.append(_number_batches(row))
    header += _reduce_grad_errors(path, rows, implied, inst.microbatches)
    table = ExecutorTable(instance=inst.to_dict(), placement=placement, actions=actions,
                          schedule_name=path.stem, fused_bw=False)
    return table, header


def _peer_stage(graph: TaskGraph, kind: str, stage: int, mb: int) -> int | None:
    """The stage at the other end of a comm token: the task graph's neighbour of the op that
    sends or receives (a comm token names no peer; torch infers it the same way)."""
    if not (0 <= stage < graph.inst.stages and 0 <= mb < graph.inst.microbatches):
        return None
    op = Op("F", stage, mb) if kind.endswith("_F") else graph.backward(stage, mb)
    edges = graph.succs(op) if kind.startswith("SEND") else graph.preds(op)
    same = [o.stage for o, _ in edges if o.stage != stage and (o.kind == "F") == (op.kind == "F")]
    return same[0] if same else None


def _reduce_grad_errors(path: Path, rows, implied: dict[int, int], m: int) -> list[str]:
    out = []
    for stage, r in sorted(implied.items()):
        backward_seen = 0
        where = None
        for c, (entries, token) in enumerate(rows[r]):
            backward_seen += sum(op.stage == stage and op.kind in ("W", "B")
                                 for e in entries for op in ops_of(e))
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
def torch_refusal(inst: Instance) -> str | None:
    """Why torch's runtime cannot run schedules of this instance (None when it can)."""
    if inst.replicas > 1:
        return ("torch's pipelining runtime runs one model with one last stage, so it cannot run "
                "two replicas in one schedule; write --format torch-csv-ext (our extended CSV, "
                "replica r's stage s is r*S+s) or --format executor for our runner")
    if inst.segments > 1:
        return (f"the instance splits each microbatch into {inst.segments} sequence segments and "
                "torch's CSV has no segment index (nor its runtime a segment-aware stage); write "
                "--format torch-csv-ext (our extended CSV: 3F12.2 = stage 3, forward, microbatch "
                "12, segment 2) or --format executor for our runner")
    return None


def torch_schedule_refusal(sched: Schedule) -> str | None:
    """Why torch's runtime cannot run this schedule (None when it can): it has no action for
    a memory mode's recompute (``3R12``) or copies (``3O12``, ``3L12``)."""
    used = sorted({op.kind for op in sched.ops() if op.kind in ("R", "RS", "O", "L")})
    if not used:
        return None
    return (f"the schedule uses memory modes ({', '.join(used)} actions: recompute / offload "
            "copies), which torch's pipelining runtime has no action for; write --format "
            "torch-csv-ext (our extended CSV: 3R12, 3O12, 3L12 cells, copies in the order "
            "they are issued) or --format executor")


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

    why = None if extended else (torch_refusal(inst) or torch_schedule_refusal(sched))
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

    why = torch_refusal(inst) or torch_schedule_refusal(sched)
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
    """Write the rows as CSV, atomically (temp file beside it, then rename)."""
    from zbsolve.io import atomic_open

    with atomic_open(path, newline="") as fh:
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
