"""Executor tables: a schedule lowered to one action list per rank, sends and receives explicit.

A schedule says which compute op each device runs next; a runtime also needs to know when to
hand activations and gradients to other ranks. ``lower`` adds one SEND on the producer's rank
and one RECV on the consumer's rank for every cross-rank hand-off, with predicted times from the
simulator. The runtime contract (what each action means, the deadlock-freedom guarantee and the
JSON layout) is in docs/executor-format.md.

Placement rule (why it cannot deadlock): every transfer gets one global key, (time the producer
ends, then a fixed tie-break), and each rank's actions are sorted by time with a transfer placed
at its key time, before any compute that starts at that time. So on every rank the SEND comes
after its producer, the RECV comes before its consumer, and the communication actions of every
rank appear in the same global key order. With blocking rendezvous P2P the transfer of smallest
unfinished key is then always reachable on both of its ranks, so all transfers finish (the
argument is spelled out in the docs, and ``p2p_check`` verifies it on every table written).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zbsolve.graph import TaskGraph
from zbsolve.instance import Instance
from zbsolve.ops import Op, Pair, ops_of, parse_op
from zbsolve.schedule import Schedule, fuse_backward

FORMAT = "zbsolve-executor"
VERSION = 1
COMPUTE_KINDS = ("F", "I", "W", "B")
PAIR_KIND = "OVERLAP_F_B"  # torch's name for a forward and a backward run as one job
COMM_KINDS = ("SEND_F", "RECV_F", "SEND_B", "RECV_B")
KINDS = COMPUTE_KINDS + (PAIR_KIND,) + COMM_KINDS
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "executor.schema.json"


class ExecutorError(ValueError):
    """A table that is malformed or does not belong to its instance; the message says where."""


@dataclass(frozen=True)
class Action:
    """One step of one rank's program.

    ``stage`` is always a stage that lives on this rank (torch's convention): the producer stage
    for a SEND, the consumer stage for a RECV. ``peer``/``peer_stage`` name the other end of a
    transfer (None for compute). ``batch`` numbers the maximal runs of consecutive communication
    actions on a rank (0, 1, ...); a batched runtime posts one run as one batch_isend_irecv.
    ``start``/``end`` are the simulator's predicted times; a transfer gets [producer end,
    producer end + comm] on both of its ranks.
    """

    kind: str
    stage: int
    mb: int
    start: float
    end: float
    peer: int | None = None
    peer_stage: int | None = None
    batch: int | None = None
    seg: int = 0
    pair: Pair | None = None  # the two ops of an OVERLAP_F_B action (stage/mb: its forward's)

    @property
    def is_comm(self) -> bool:
        return self.kind in COMM_KINDS

    @property
    def is_pair(self) -> bool:
        return self.pair is not None

    @property
    def is_send(self) -> bool:
        return self.kind.startswith("SEND")

    @property
    def is_recv(self) -> bool:
        return self.kind.startswith("RECV")

    @property
    def token(self) -> str:
        """torch pipelining syntax: ``3F12``, ``3SEND_F12``, ``4RECV_F12`` (``.g`` segment),
        ``(0F7;7B3)OVERLAP_F_B``."""
        if self.pair is not None:
            return f"({self.pair.first};{self.pair.second}){PAIR_KIND}"
        return f"{self.stage}{self.kind}{self.mb}" + (f".{self.seg}" if self.seg else "")

    @property
    def op(self) -> Op:
        if self.is_comm or self.pair is not None:
            raise ExecutorError(f"{self.token} is not a single compute op")
        return Op(self.kind, self.stage, self.mb, self.seg)

    @property
    def entry(self) -> Op | Pair:
        """The job of a compute action: its op, or its overlapped pair."""
        return self.pair if self.pair is not None else self.op

    @property
    def ops(self) -> tuple[Op, ...]:
        """The compute ops this action runs (none for communication)."""
        if self.is_comm:
            return ()
        return tuple(self.pair) if self.pair is not None else (self.op,)

    @property
    def message(self) -> tuple[str, int | None, int | None, int, int]:
        """What travels: ("F" activation | "B" input gradient, producer stage, consumer stage,
        microbatch, segment). A SEND and the RECV it must match carry the same message."""
        direction = self.kind[-1]
        if self.is_send:
            return (direction, self.stage, self.peer_stage, self.mb, self.seg)
        return (direction, self.peer_stage, self.stage, self.mb, self.seg)

    def to_dict(self) -> dict[str, Any]:
        if self.pair is not None:
            return {"kind": PAIR_KIND, "ops": [str(op) for op in self.pair],
                    "start": self.start, "end": self.end}
        data: dict[str, Any] = {"kind": self.kind, "stage": self.stage, "mb": self.mb}
        if self.seg:
            data["seg"] = self.seg
        if self.is_comm:
            data.update(peer=self.peer, peer_stage=self.peer_stage, batch=self.batch)
        data.update(start=self.start, end=self.end)
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Action:
        if data["kind"] == PAIR_KIND:
            first, second = (parse_op(t) for t in data["ops"])
            return Action(PAIR_KIND, first.stage, first.mb, float(data["start"]),
                          float(data["end"]), seg=first.seg, pair=Pair(first, second))
        return Action(
            kind=data["kind"], stage=int(data["stage"]), mb=int(data["mb"]),
            start=float(data["start"]), end=float(data["end"]),
            peer=data.get("peer"), peer_stage=data.get("peer_stage"), batch=data.get("batch"),
            seg=int(data.get("seg", 0)),
        )


@dataclass
class ExecutorTable:
    """Per-rank programs plus everything a runtime needs to set itself up."""

    instance: dict[str, Any]  # Instance.to_dict() of the instance it was lowered for
    placement: list[int]  # stage -> rank
    actions: list[list[Action]]  # actions[rank], in execution order
    schedule_name: str = "schedule"
    fused_bw: bool = False
    predicted: dict[str, Any] = field(default_factory=dict)  # the simulator's figures

    @property
    def ranks(self) -> int:
        return len(self.actions)

    @property
    def stages(self) -> int:
        return len(self.placement)

    @property
    def microbatches(self) -> int:
        return int(self.instance["microbatches"])

    def compute_orders(self) -> list[list[Op | Pair]]:
        return [[a.entry for a in row if not a.is_comm] for row in self.actions]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "schedule": self.schedule_name,
            "fused_bw": self.fused_bw,
            "num_ranks": self.ranks,
            "num_stages": self.stages,
            "microbatches": self.microbatches,
            "placement": list(self.placement),
            "instance": self.instance,
            "predicted": self.predicted,
            "ranks": [
                {
                    "rank": r,
                    "stages": [s for s, d in enumerate(self.placement) if d == r],
                    "actions": [a.to_dict() for a in row],
                }
                for r, row in enumerate(self.actions)
            ],
        }

    @staticmethod
    def from_dict(data: dict[str, Any]) -> ExecutorTable:
        validate_json(data)
        return ExecutorTable(
            instance=data["instance"],
            placement=list(data["placement"]),
            actions=[[Action.from_dict(a) for a in r["actions"]] for r in data["ranks"]],
            schedule_name=data.get("schedule", "schedule"),
            fused_bw=bool(data.get("fused_bw", False)),
            predicted=data.get("predicted", {}),
        )

    def dump(self, path: str | Path, *, check: bool = True) -> None:
        """Write the JSON; by default only after ``p2p_check`` proves it deadlock-free."""
        if check:
            from zbsolve.export.p2p_check import require_safe

            require_safe(self)
        from zbsolve.io import write_json  # atomic: temp file beside it, then rename

        write_json(path, self.to_dict())


def validate_json(data: dict[str, Any]) -> None:
    """Check a parsed table against the JSON Schema; ExecutorError names the failing field."""
    import jsonschema  # lazy: only needed when reading tables

    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ExecutorError(f"not an executor table: expected \"format\": \"{FORMAT}\"")
    if data.get("version") != VERSION:
        raise ExecutorError(
            f"version: this zbsolve reads executor tables of version {VERSION}, "
            f"got {data.get('version')!r}"
        )
    schema = json.loads(SCHEMA_PATH.read_text())
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(x) for x in exc.absolute_path) or "(top level)"
        raise ExecutorError(f"executor table: {where}: {exc.message}") from None


def load_table(path: str | Path) -> ExecutorTable:
    """Read a table file; one-line errors name the file (missing, a folder, bad or duplicate
    JSON, the schema's field)."""
    from zbsolve.io import InputFileError, parse_json, read_text

    path = Path(path)
    try:
        data = parse_json(read_text(path, "executor table"), str(path))
    except InputFileError as exc:
        raise ExecutorError(str(exc)) from None
    return ExecutorTable.from_dict(data)


def schedule_from_table(data: dict[str, Any] | ExecutorTable) -> Schedule:
    """The compute orders of a table as a Schedule (communication actions dropped)."""
    table = data if isinstance(data, ExecutorTable) else ExecutorTable.from_dict(data)
    starts = {op: a.start for row in table.actions for a in row for op in a.ops}
    return Schedule(
        orders=table.compute_orders(),
        name=table.schedule_name,
        starts=starts,
        meta={"source": FORMAT, "fused_bw": table.fused_bw, "instance": dict(table.instance)},
    )


# ---------------------------------------------------------------------------- lowering
@dataclass(frozen=True)
class Transfer:
    """One cross-rank hand-off: producer op on ``src`` rank feeds a consumer on ``dst``."""

    producer: Op
    consumer: Op
    src: int
    dst: int
    time: float  # producer end = predicted start of the transfer
    latency: float

    @property
    def direction(self) -> str:
        """"F" (activation) or "B" (input gradient)."""
        return "F" if self.producer.kind == "F" else "B"

    @property
    def key(self) -> tuple[float, int, int, int, int]:
        """The global order every rank lists its transfers in."""
        return (self.time, 0 if self.direction == "F" else 1, self.producer.stage,
                self.producer.mb, self.producer.seg)

    def actions(self) -> tuple[Action, Action]:
        t0, t1 = self.time, self.time + self.latency
        p, c = self.producer, self.consumer
        send = Action(f"SEND_{self.direction}", p.stage, p.mb, t0, t1, self.dst, c.stage,
                      seg=p.seg)
        recv = Action(f"RECV_{self.direction}", c.stage, c.mb, t0, t1, self.src, p.stage,
                      seg=c.seg)
        return send, recv


def transfers(inst: Instance, sched: Schedule, end: dict[Op, float]) -> list[Transfer]:
    """Every cross-rank hand-off of the (already simulated) schedule, in global key order.

    Hand-offs between two stages of one rank stay in memory, no P2P (torch does the same).
    """
    graph = TaskGraph.of(inst, sched.ops())
    out = [Transfer(h.src, h.dst, graph.device(h.src), graph.device(h.dst), end[h.src], h.delay)
           for op in sched.ops() for h in graph.handoffs(op)]
    out.sort(key=lambda t: t.key)
    return out


def lower(
    inst: Instance, sched: Schedule, *, fuse_bw: bool = False, placement: str = "ordered"
) -> ExecutorTable:
    """Lower a valid schedule to an executor table (validated by the simulator first).

    placement="ordered" is the deadlock-free rule described in the module docstring.
    placement="adjacent" (RECV right before its consumer, SEND right after its producer) is
    kept only to show, in tests and docs, that the obvious rule can deadlock with blocking P2P;
    never write such a table for a runtime.
    """
    from zbsolve.simulate import validate  # lazy: keeps `import zbsolve.export` light

    if placement not in ("ordered", "adjacent"):
        raise ExecutorError(f"placement: expected 'ordered' or 'adjacent', got {placement!r}")
    if fuse_bw:
        sched = fuse_backward(sched)
    result = validate(inst, sched)
    start, end = result.start, result.end
    xfers = transfers(inst, sched, end)

    rows: list[list[tuple[tuple, Action]]] = [[] for _ in range(inst.devices)]
    where: dict[Op, int] = {}
    for d, order in enumerate(sched.orders):
        for pos, entry in enumerate(order):
            head = ops_of(entry)[0]
            for op in ops_of(entry):
                where[op] = pos
            if isinstance(entry, Pair):
                act = Action(PAIR_KIND, head.stage, head.mb, start[head], end[head], seg=head.seg,
                             pair=entry)
            else:
                act = Action(head.kind, head.stage, head.mb, start[head], end[head], seg=head.seg)
            rows[d].append(((start[head], 1, pos, 0), act))
    for n, x in enumerate(xfers):
        send, recv = x.actions()
        if placement == "ordered":
            rows[x.src].append(((x.time, 0, n, 0), send))
            rows[x.dst].append(((x.time, 0, n, 0), recv))
        else:  # glued to their compute: SEND right after the producer, RECV right before
            rows[x.src].append(((start[x.producer], 1, where[x.producer], 1), send))
            rows[x.dst].append(((start[x.consumer], 1, where[x.consumer], -1), recv))

    actions: list[list[Action]] = []
    for row in rows:
        row.sort(key=lambda item: item[0])
        actions.append(_number_batches([a for _, a in row]))
    predicted = {
        "makespan": result.makespan,
        "span": result.max_span,
        "bubble_makespan": result.bubble_makespan,
        "bubble_span": result.bubble_span,
        "peak_memory": result.peak_memory,
        "memory_limit": result.limit,
        "feasible": result.feasible,
    }
    if result.step_mode != "none":  # the step boundary: when each stage's optimizer step runs
        predicted["step"] = {**result.step_summary(), "optimizer": [
            [op.stage, result.start[op], result.end[op]]
            for op in sorted((op for op in result.start if op.kind == "OPT"),
                             key=lambda o: o.stage)]}
    return ExecutorTable(
        instance=inst.to_dict(),
        placement=list(inst.placement),
        actions=actions,
        schedule_name=sched.name,
        fused_bw=fuse_bw,
        predicted=predicted,
    )


def _number_batches(row: list[Action]) -> list[Action]:
    """Give each maximal run of consecutive communication actions one batch number."""
    out: list[Action] = []
    batch = -1
    prev_comm = False
    for a in row:
        if a.is_comm:
            if not prev_comm:
                batch += 1
            a = dataclasses.replace(a, batch=batch)
        out.append(a)
        prev_comm = a.is_comm
    return out


def instance_of(table: ExecutorTable) -> Instance:
    from zbsolve.instance import load_instance

    return load_instance(dict(table.instance))
