"""Judge a schedule file as it will run: its own communication, and its header against the
instance.

A schedule JSON is only an order; an executor table and a ``torch-csv-comms`` file also say
when each rank sends and receives, and that is what a runtime executes. So ``check``,
``export``, ``show`` and ``run`` judge what the file contains, not what zbsolve would have
lowered from its compute order: the header (ranks, stages, microbatches, placement, fused
backward, embedded instance) against the instance, then the compute order with the simulator,
then every SEND/RECV with ``p2p_check`` (partners paired, peers, ranks, duplicates, and the
blocking and batched matching simulations).

Problems are listed root cause first: a table for another instance is reported as that, not as
the hundred transfers that consequently do not match; a compute order that the simulator
rejects is reported before the communication built on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zbsolve import size_limits as sizes
from zbsolve.export.executor import ExecutorError, ExecutorTable, schedule_from_table
from zbsolve.instance import Instance, InstanceError, load_instance
from zbsolve.io import parse_json, read_text
from zbsolve.ops import Op
from zbsolve.schedule import Schedule, ScheduleFileError, parse_schedule_dict
from zbsolve.simulate import ScheduleError, SimResult, simulate

KINDS = ("schedule", "executor", "torch-csv", "torch-csv-comms")
_COMPARED = ("devices", "microbatches", "chunks", "replicas", "placement", "F", "I", "W",
             "comm", "activation", "weight", "limit", "params", "sync", "overlap")
_FIELD_NAMES = {"F": "times.F", "I": "times.I", "W": "times.W", "params": "memory.params",
                "activation": "memory.activation",
                "weight": "memory.weight", "limit": "memory.limit"}


class JudgeError(ValueError):
    """A schedule file that cannot run as written; the message starts with the root cause."""


@dataclass
class ScheduleFile:
    """A schedule file as read: its kind, its compute order, and for the kinds that carry
    communication the table of what each rank runs."""

    path: Path
    kind: str  # one of KINDS
    schedule: Schedule
    table: ExecutorTable | None = None
    header: list[str] = field(default_factory=list)  # problems found while reading

    @property
    def has_comms(self) -> bool:
        return self.table is not None


@dataclass
class Verdict:
    problems: list[str]
    sim: SimResult | None = None
    reports: list[Any] = field(default_factory=list)  # P2PReport per mode, when judged

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary_line(self) -> str:
        """The root cause, and how many more problems there are."""
        if not self.problems:
            return "ok"
        more = len(self.problems) - 1
        return self.problems[0] + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")


# ---------------------------------------------------------------------------- reading
def read_schedule_file(path: str | Path, inst: Instance | None = None) -> ScheduleFile:
    """Read any schedule file zbsolve takes; one-line errors name the file and the field.

    ``inst`` is needed only to read a ``torch-csv-comms`` file as a table (a CSV carries no
    instance): without it such a file is read for its compute order only.
    """
    path = Path(path)
    if path.suffix.lower() == ".csv":
        from zbsolve.export.torch_csv import has_comm_tokens, read_torch_csv, read_torch_csv_table

        sched = read_torch_csv(path)
        if not has_comm_tokens(path):
            return ScheduleFile(path, "torch-csv", sched)
        if inst is None:
            return ScheduleFile(path, "torch-csv-comms", sched)
        table, header = read_torch_csv_table(path, inst)
        return ScheduleFile(path, "torch-csv-comms", sched, table, header)
    data = parse_json(read_text(path, "schedule file"), str(path))
    if isinstance(data, dict) and data.get("format") == "zbsolve-executor":
        table, header = table_from_data(data, str(path))
        sched = schedule_from_table(table)
        return ScheduleFile(path, "executor", sched, table, header)
    try:
        sched = parse_schedule_dict(data)
    except ValueError as exc:
        raise ScheduleFileError(f"{path}: {exc}") from None
    if "name" not in data:
        sched.name = path.stem
    return ScheduleFile(path, "schedule", sched)


def table_from_data(data: dict[str, Any], where: str = "executor table"
                    ) -> tuple[ExecutorTable, list[str]]:
    """Parse a table JSON (schema first), and list what its header says that its body does not
    (counts, per-rank stage lists): ``ExecutorTable`` keeps only the body."""
    ranks = data.get("ranks")
    if isinstance(ranks, list):
        sizes.check_size(f"{where}: ranks", len(ranks), sizes.MAX_DEVICES)
        n = sum(len(r.get("actions", [])) for r in ranks if isinstance(r, dict)
                and isinstance(r.get("actions"), list))
        sizes.check_size(f"{where}: actions", n, 3 * sizes.MAX_OPS)
    try:
        table = ExecutorTable.from_dict(data)
    except ExecutorError as exc:
        raise JudgeError(f"{where}: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:  # what the schema does not pin down
        raise JudgeError(f"{where}: malformed table: {type(exc).__name__}: {exc}") from None
    return table, header_errors(data)


def header_errors(data: dict[str, Any]) -> list[str]:
    """The table JSON's counts and per-rank listings against its own body."""
    out = []
    ranks = data["ranks"]
    placement = data["placement"]
    if data["num_ranks"] != len(ranks):
        out.append(f"header: num_ranks is {data['num_ranks']} but the table lists "
                   f"{len(ranks)} ranks")
    if data["num_stages"] != len(placement):
        out.append(f"header: num_stages is {data['num_stages']} but placement lists "
                   f"{len(placement)} stages")
    embedded_m = data["instance"].get("microbatches")  # the schema makes it an object
    if data["microbatches"] != embedded_m:
        out.append(f"header: microbatches is {data['microbatches']} but the embedded instance "
                   f"has {embedded_m!r}")
    for r, entry in enumerate(ranks):
        if entry["rank"] != r:
            out.append(f"header: ranks[{r}] says rank {entry['rank']}")
        want = [s for s, d in enumerate(placement) if d == r]
        if list(entry["stages"]) != want:
            out.append(f"header: ranks[{r}].stages is {entry['stages']} but placement puts "
                       f"stages {want} on rank {r}")
    return out


# ---------------------------------------------------------------------------- judging
def instance_errors(table: ExecutorTable, inst: Instance | None = None) -> list[str]:
    """The embedded instance loads and agrees with the table's layout and, when given, with
    ``inst`` in everything the schedule's timing, memory and layout depend on."""
    try:
        embedded = load_instance(dict(table.instance))
    except (InstanceError, sizes.SizeLimitError) as exc:
        return [f"embedded instance: {exc}"]
    out = []
    if embedded.devices != table.ranks:
        out.append(f"embedded instance has {embedded.devices} devices but the table has "
                   f"{table.ranks} ranks")
    if list(embedded.placement) != list(table.placement):
        out.append(f"placement {list(table.placement)} differs from the embedded instance's "
                   f"{list(embedded.placement)}")
    if inst is not None:
        out += instance_differences(embedded, inst)
    if table.fused_bw:
        for r, order in enumerate(table.compute_orders()):
            for a, b in zip(order, order[1:]):
                if isinstance(a, Op) and a.kind == "I" and b == a._replace(kind="W"):
                    out.append(f"fused_bw is true but rank {r} runs {a} right before {b}, "
                               "which fusing would have made one B")
                    break
    return out


def instance_differences(embedded: Instance, inst: Instance) -> list[str]:
    """Fields in which the instance a file was made for differs from the one given."""
    diffs = []
    for name in _COMPARED:
        a, b = getattr(embedded, name), getattr(inst, name)
        if a != b:
            label = _FIELD_NAMES.get(name, name)
            diffs.append(f"{label} {_short(a)} vs {_short(b)}")
    if not diffs:
        return []
    return [f"the file was made for another instance than {inst.name!r}: "
            + "; ".join(diffs) + " (file vs instance); export it for this instance"]


def _short(value: Any) -> str:
    if isinstance(value, tuple):
        value = list(value)
        if len(set(value)) == 1:
            return f"{value[0]!r} x{len(value)}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def judge(inst: Instance, file: ScheduleFile) -> Verdict:
    """Every problem of ``file`` as it would run on ``inst``, root cause first. Memory over the
    limit is not a problem here: ``verdict.sim`` reports it (``check`` prints it, exit 1)."""
    if file.table is not None:
        return judge_table(file.table, inst, header=file.header,
                           header_first=file.kind == "torch-csv-comms")
    try:
        sim = simulate(inst, file.schedule)
    except ScheduleError as exc:
        return Verdict([f"compute order: {exc}"])
    return Verdict([], sim)


def judge_table(table: ExecutorTable, inst: Instance | None = None, *,
                header: list[str] = (), allow_over_memory: bool = True,
                header_first: bool = False) -> Verdict:
    """A table's header, compute order, communication and (unless allowed) memory.

    ``header``: what reading the file found (a JSON table's counts, a CSV's rows and implied
    placement). A table JSON's embedded instance is its root; a CSV's rows are
    (``header_first``): the table read from it carries the given instance.
    """
    from zbsolve.export.p2p_check import MODES, check, static_errors

    layout = instance_errors(table, inst)
    problems = list(header) + layout if header_first else layout + list(header)
    if problems:
        return Verdict(problems)
    embedded = load_instance(dict(table.instance))  # equal to ``inst`` in all that matters now
    try:
        sim = simulate(embedded, schedule_from_table(table))
    except ScheduleError as exc:
        return Verdict([f"compute order: {exc}"])
    static = _static_root_first(table, static_errors)
    if static:
        return Verdict([f"p2p: {e}" for e in static], sim)
    reports = [check(table, mode, static=[]) for mode in MODES]
    for report in reports:
        problems += [f"p2p {report.mode}: {e}" for e in report.errors]
        problems += [f"p2p {report.mode} deadlock: {s}" for s in report.stuck]
    return Verdict(problems + _memory(sim, allow_over_memory), sim, reports)


def _static_root_first(table: ExecutorTable, static_errors) -> list[str]:
    """``p2p_check.static_errors``, root causes first (batch numbering, a consequence of any
    moved or missing action, last)."""
    return sorted(static_errors(table), key=_static_rank)


_STATIC_ORDER = (
    # root causes first: an action on the wrong rank or out of range, a duplicate, a wrong peer,
    # a missing partner; then what follows from them (order on the rank, batch numbering)
    ("lives on rank", "out of range", "names a rank outside"),
    ("duplicate",),
    ("peer should be", "no stage", "share rank"),
    ("no matching", "no such RECV", "never sends", "never computed", "not local"),
    ("after it", "before computing", "runs before"),
)


def _static_rank(error: str) -> int:
    """Sort key of a p2p static error: its class in _STATIC_ORDER (batch numbering last)."""
    for rank, words in enumerate(_STATIC_ORDER):
        if any(w in error for w in words):
            return rank
    return len(_STATIC_ORDER)


def _memory(sim: SimResult, allow_over_memory: bool) -> list[str]:
    if allow_over_memory:
        return []
    return [f"memory: {v}" for v in sim.violations]


def require_ok(verdict: Verdict, what: str) -> Verdict:
    if not verdict.ok:
        raise JudgeError(f"{what}: {verdict.summary_line()}")
    return verdict
