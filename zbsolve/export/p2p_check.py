"""Prove that an executor table runs to the end: no rank can block forever on P2P.

Two checks, both on the table alone (no instance needed beyond what the table carries):

1. Static: every action's stage lives on its rank; every cross-rank hand-off of the compute ops
   has exactly one SEND (after its producer, on the producer's rank) and one RECV (before its
   consumer, on the consumer's rank), peers agree with the placement, there is no transfer
   between two stages of one rank, and same-rank dependencies are in order. After this, a
   compute action can only ever wait for data its rank has already received, so only
   communication actions can block.
2. Dynamic: a simulation of the matching of sends and receives across ranks, as a
   communication-validation pass in a pipeline runtime does. Per ordered pair of ranks, the
   k-th SEND matches the k-th RECV (FIFO, no tags), and they must carry the same message.
   ``blocking``: each SEND/RECV is a rendezvous: a rank waits at it until its peer is at the
   matching op (the worst case of a blocking send: no buffering). ``batched``: a rank posts a
   whole run of consecutive communication actions (one ``batch``) at once, as
   batch_isend_irecv does, and waits until every op of the batch has been matched.
A deadlock is reported with each stuck rank's action and what it waits for.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from zbsolve.export.executor import COMPUTE_KINDS, MODE_KINDS, Action, ExecutorTable
from zbsolve.graph import TaskGraph
from zbsolve.ops import Op

MODES = ("blocking", "batched")


class P2PError(ValueError):
    """The table can deadlock or is inconsistent; the message lists what and where."""


@dataclass
class P2PReport:
    mode: str
    errors: list[str] = field(default_factory=list)  # static problems and message mismatches
    stuck: list[str] = field(default_factory=list)  # per stuck rank, when it deadlocks
    transfers: int = 0  # number of matched SEND/RECV pairs

    @property
    def ok(self) -> bool:
        return not self.errors and not self.stuck

    def __str__(self) -> str:
        if self.ok:
            return f"p2p {self.mode}: ok ({self.transfers} transfers matched)"
        lines = [f"p2p {self.mode}: FAILED"]
        lines += [f"  error: {e}" for e in self.errors[:20]]
        if self.stuck:
            lines.append("  deadlock:")
            lines += [f"    {s}" for s in self.stuck]
        return "\n".join(lines)


def check(
    table: ExecutorTable, mode: str = "blocking", *, static: list[str] | None = None
) -> P2PReport:
    """Static consistency, then the matching simulation in ``mode``.

    ``static``: the result of ``static_errors(table)`` if already computed (it does not depend
    on the mode).
    """
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    report = P2PReport(mode)
    report.errors = list(static_errors(table) if static is None else static)
    if report.errors:
        return report
    if mode == "blocking":
        _run_blocking(table, report)
    else:
        _run_batched(table, report)
    return report


def require_safe(table: ExecutorTable, modes: tuple[str, ...] = MODES) -> list[P2PReport]:
    """Raise P2PError unless the table is deadlock-free in every mode given."""
    static = static_errors(table)
    reports = [check(table, mode, static=static) for mode in modes]
    bad = [r for r in reports if not r.ok]
    if bad:
        raise P2PError("executor table failed the P2P check:\n" + "\n".join(map(str, bad)))
    return reports


# ---------------------------------------------------------------------------- static checks
def _where(rank: int, pos: int, a: Action) -> str:
    return f"rank {rank} position {pos} ({a.token})"


def static_errors(table: ExecutorTable) -> list[str]:
    """Structural problems of a table, root causes first (an empty list when there are none)."""
    errors: list[str] = []
    batch_errors: list[str] = []  # a consequence, never a cause: reported after the rest
    place = table.placement
    S, p, m = table.stages, table.ranks, table.microbatches
    if any(not 0 <= d < p for d in place):
        return [f"placement {place} names a rank outside 0..{p - 1}"]
    pos_of: dict[tuple[str, int, int, int], tuple[int, int]] = {}  # (kind, stage, mb, seg)
    for r, row in enumerate(table.actions):
        batch = -1
        prev_comm = False
        for i, a in enumerate(row):
            if not 0 <= a.stage < S or not 0 <= a.mb < m:
                errors.append(f"{_where(r, i, a)}: stage/microbatch out of range "
                              f"(stages 0..{S - 1}, microbatches 0..{m - 1})")
                continue
            if place[a.stage] != r:
                errors.append(f"{_where(r, i, a)}: stage {a.stage} lives on rank {place[a.stage]}")
            if a.end < a.start:
                errors.append(f"{_where(r, i, a)}: end {a.end} before start {a.start}")
            keys = ([(a.kind, a.stage, a.mb, a.seg)] if a.is_comm
                    else [(op.kind, op.stage, op.mb, op.seg) for op in a.ops])
            for key in keys:
                if key in pos_of:
                    errors.append(f"{_where(r, i, a)}: duplicate of rank {pos_of[key][0]} "
                                  f"position {pos_of[key][1]}")
                pos_of[key] = (r, i)
            if a.is_comm:
                if not prev_comm:
                    batch += 1
                if a.batch != batch:
                    batch_errors.append(
                        f"{_where(r, i, a)}: batch {a.batch}, expected {batch} (one batch per "
                        "run of consecutive communication actions)")
            prev_comm = a.is_comm
    if errors:
        return errors + batch_errors
    graph = _graph_of(table)
    if isinstance(graph, str):
        return [graph] + batch_errors

    def at(op: Op) -> tuple[int, int] | None:
        return pos_of.get((op.kind, op.stage, op.mb, op.seg))

    peers: dict[tuple[str, int, int, int], tuple[int, int]] = {}  # comm key -> (peer, its stage)
    for (kind, s, mb, seg), (r, i) in list(pos_of.items()):
        if kind not in COMPUTE_KINDS and kind not in MODE_KINDS:
            continue
        op = Op(kind, s, mb, seg)
        here = f"rank {r} position {i} ({op})"
        for pred, _ in graph.preds(op):
            where = at(pred)
            if where is None:
                errors.append(f"{here}: its input {pred} is never computed")
                continue
            if where[0] == r:
                if where[1] > i:
                    errors.append(f"{here}: runs before {pred} at position {where[1]} on the "
                                  "same rank")
                continue
            direction = "F" if pred.kind == "F" else "B"
            need = (f"RECV_{direction}", s, mb, seg)
            send_key = (f"SEND_{direction}", pred.stage, pred.mb, pred.seg)
            peers[need] = (where[0], pred.stage)
            peers[send_key] = (r, s)
            recv = pos_of.get(need)
            if recv is None:
                token = f"{s}{need[0]}{mb}" + (f".{seg}" if seg else "")  # Action.token's form
                errors.append(f"{here}: needs {token} from rank {where[0]} "
                              "but the rank has no such RECV")
            elif recv[1] > i:
                errors.append(f"{here}: its RECV is at position {recv[1]}, after it")
            send = pos_of.get(send_key)
            if send is None:
                errors.append(f"{here}: rank {where[0]} never sends {pred}'s output")
            elif send[1] < where[1]:
                errors.append(f"rank {where[0]} position {send[1]}: sends {pred}'s output "
                              f"before computing it (position {where[1]})")
    # every comm action must belong to a real cross-rank hand-off of a computed op
    for key, (r, i) in pos_of.items():
        if key[0] in COMPUTE_KINDS or key[0] in MODE_KINDS:
            continue
        a = table.actions[r][i]
        if key not in peers:
            errors.append(f"{_where(r, i, a)}: no matching producer/consumer/peer action")
            continue
        peer, peer_stage = peers[key]
        if (a.peer, a.peer_stage) != (peer, peer_stage):
            errors.append(f"{_where(r, i, a)}: peer should be stage {peer_stage} on rank {peer}, "
                          f"table says stage {a.peer_stage} on rank {a.peer}")
    return errors + batch_errors


def _graph_of(table: ExecutorTable) -> TaskGraph | str:
    """The task graph of the table's own instance in the form its compute actions use (or the
    reason it has none)."""
    from zbsolve.instance import InstanceError, load_instance

    try:
        inst = load_instance(dict(table.instance))
    except InstanceError as exc:
        return f"the table's embedded instance is invalid: {exc}"
    if list(inst.placement) != list(table.placement):
        return (f"placement {table.placement} differs from its embedded instance's "
                f"{list(inst.placement)}")
    return TaskGraph.of(inst, (op for row in table.actions for a in row for op in a.ops))


# ---------------------------------------------------------------------------- matching
def _run_blocking(table: ExecutorTable, report: P2PReport) -> None:
    acts = table.actions
    p = table.ranks
    pos = [0] * p

    def skip_compute(r: int) -> None:
        while pos[r] < len(acts[r]) and not acts[r][pos[r]].is_comm:
            pos[r] += 1

    for r in range(p):
        skip_compute(r)
    progress = True
    while progress:
        progress = False
        for r in range(p):
            if pos[r] >= len(acts[r]):
                continue
            a = acts[r][pos[r]]
            if not a.is_send:
                continue
            q = a.peer
            if pos[q] >= len(acts[q]):
                continue
            b = acts[q][pos[q]]
            if b.is_recv and b.peer == r:
                if a.message != b.message:
                    report.errors.append(
                        f"mismatch: rank {r} sends {a.token} while rank {q} expects {b.token} "
                        "(FIFO matching would deliver the wrong tensor)")
                    return
                report.transfers += 1
                pos[r] += 1
                pos[q] += 1
                skip_compute(r)
                skip_compute(q)
                progress = True
    for r in range(p):
        if pos[r] < len(acts[r]):
            a = acts[r][pos[r]]
            q = a.peer
            there = (f"rank {q} is at position {pos[q]} ({acts[q][pos[q]].token})"
                     if pos[q] < len(acts[q]) else f"rank {q} has finished")
            report.stuck.append(
                f"rank {r} stuck at position {pos[r]}: {a.token} "
                f"({'send to' if a.is_send else 'receive from'} rank {q}); {there}")


def _run_batched(table: ExecutorTable, report: P2PReport) -> None:
    acts = table.actions
    p = table.ranks
    pos = [0] * p
    pending: list[list[int]] = [[] for _ in range(p)]  # positions of the posted batch
    matched: set[tuple[int, int]] = set()
    sends: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)  # (src,dst)->[(r,i)]
    recvs: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    done: dict[tuple[int, int], int] = defaultdict(int)  # matched count per channel

    def advance(r: int) -> bool:
        """Run computes and post the next batch; True if anything was posted."""
        row = acts[r]
        while pos[r] < len(row) and not row[pos[r]].is_comm:
            pos[r] += 1
        if pos[r] >= len(row):
            return False
        batch = row[pos[r]].batch
        i = pos[r]
        while i < len(row) and row[i].is_comm and row[i].batch == batch:
            a = row[i]
            if a.is_send:
                sends[(r, a.peer)].append((r, i))
            else:
                recvs[(a.peer, r)].append((r, i))
            pending[r].append(i)
            i += 1
        return True

    for r in range(p):
        advance(r)
    progress = True
    while progress:
        progress = False
        for ch in set(sends) | set(recvs):
            while done[ch] < min(len(sends[ch]), len(recvs[ch])):
                k = done[ch]
                (rs, i_s), (rr, i_r) = sends[ch][k], recvs[ch][k]
                a, b = acts[rs][i_s], acts[rr][i_r]
                if a.message != b.message:
                    report.errors.append(
                        f"mismatch on channel rank {ch[0]} -> rank {ch[1]}: send #{k} is "
                        f"{a.token} but receive #{k} is {b.token}")
                    return
                matched.add((rs, i_s))
                matched.add((rr, i_r))
                done[ch] += 1
                report.transfers += 1
                progress = True
        for r in range(p):
            if pending[r] and all((r, i) in matched for i in pending[r]):
                pos[r] = pending[r][-1] + 1
                pending[r] = []
                advance(r)
                progress = True
    for r in range(p):
        if pending[r]:
            waiting = [acts[r][i] for i in pending[r] if (r, i) not in matched]
            desc = ", ".join(
                f"{a.token} ({'to' if a.is_send else 'from'} rank {a.peer})" for a in waiting)
            report.stuck.append(
                f"rank {r} stuck in batch {acts[r][pending[r][0]].batch} (positions "
                f"{pending[r][0]}..{pending[r][-1]}), unmatched: {desc}")
