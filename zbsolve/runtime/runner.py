"""Per-rank executor: run an executor table's action list on the model stages of this rank.

The model is the runner's GPT or any layered model (a Hugging Face causal LM, a user's module
list): :mod:`zbsolve.runtime.workload` hides which.

The rank runs its list in order and nothing else decides anything: F keeps what backward needs;
I computes the input gradient only and keeps what W needs; W accumulates the weight gradients
and frees the rest; B is I then W. A unit in a memory mode (its R or O / L actions) runs it
through :mod:`zbsolve.runtime.stage_modes`: a recomputed F keeps only its input and R re-runs
it; O moves the saved tensors to host and L brings them back before I. Hand-offs between two
stages of this rank stay in memory; the others go through :mod:`zbsolve.runtime.p2p` at the
table's SEND/RECV actions.

After its last action of a step the rank runs the step boundary in the table's step mode
(:mod:`zbsolve.runtime.step_boundary`: local steps, a synchronous global check, or speculative
steps with post-validation and rollback). After the steps, rank 0 gathers every stage's loss,
gradients and parameters and compares them with the single-process reference
(:mod:`zbsolve.runtime.reference`), which takes the same steps synchronously.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from zbsolve.export.executor import MODE_KINDS, PAIR_KIND, Action, ExecutorTable
from zbsolve.graph import TaskGraph
from zbsolve.ops import Op
from zbsolve.runtime.iw_split import MemoryTracker
from zbsolve.runtime.measure import Clock, Timing, chrome_trace, summarize
from zbsolve.runtime.model import GPTConfig, layer_split
from zbsolve.runtime.optim import DEFAULT_LR, OptimizerSpec, TrainSpec, inject_inf
from zbsolve.runtime.overlap import early_sends
from zbsolve.runtime.p2p import P2P
from zbsolve.runtime.reference import Comparison, StepRecord, compare
from zbsolve.runtime.replicas import (
    ReplicaLayout,
    layout_of,
    stage_copies,
    sync_gradients,
    sync_groups,
)
from zbsolve.runtime.stage_modes import SELECTIVE_REFUSAL, HostCopies
from zbsolve.runtime.step_boundary import STEP_HANDLERS, Boundary, StageStep, tail_order
from zbsolve.runtime.workload import Workload, is_layered, workload_for

ENGINES = ("ours", "torch")
_DEBUG = bool(os.environ.get("ZBSOLVE_RUN_DEBUG"))


class TableMismatch(ValueError):
    """The table cannot run on this launch (world size, stage count); says how to fix it."""


class InjectedFailure(RuntimeError):
    """Raised on purpose (tests): one rank failing must stop the whole run with its error."""


@dataclass(frozen=True)
class RunOptions:
    backend: str = "gloo"
    device: str = "cpu"  # cpu | cuda
    steps: int = 2
    lr: float = DEFAULT_LR
    timeout_s: float = 60.0
    rtol: float = 1e-5
    threads: int = 1  # torch intra-op threads per rank on CPU
    allow_over_memory: bool = False  # run a table over its instance's memory limit
    fail_at: tuple[int, int] | None = None  # (rank, action index): raise there (tests)
    hang_at: tuple[int, int] | None = None  # (rank, action index): stall there (tests)
    optimizer: str = "sgd"  # sgd | adamw (zbsolve.runtime.optim)
    clip: float | None = None  # clip gradients to this global norm (needs a step check)
    step_mode: str | None = None  # none | sync | post-validation; None: the table's instance's
    inject_inf: tuple[int, int] | None = None  # (step, stage): Inf into a gradient (tests)

    @property
    def optimizer_spec(self) -> OptimizerSpec:
        return OptimizerSpec(self.optimizer, self.lr, self.clip)


def step_mode_of(table: ExecutorTable, opts: RunOptions) -> str:
    """The step mode a run uses (``opts.step_mode``, else its table's instance's), refusing a
    run whose global decisions would have no global state to come from."""
    from zbsolve.step import MODES

    mode = opts.step_mode or (table.instance.get("step") or {}).get("mode", "none")
    if mode not in MODES:
        raise TableMismatch(f"step mode: expected one of {', '.join(MODES)}, got {mode!r}")
    opts.optimizer_spec.check()
    if mode != "none" and int(table.instance.get("replicas", 1)) != 1:
        raise TableMismatch(f"step mode {mode}: the runner's step boundary covers one model "
                            "replica (with two, each stage's gradients exist twice and the "
                            "global norm would count them twice); run this table with --step none")
    if mode == "none" and (opts.clip is not None or opts.inject_inf is not None):
        raise TableMismatch("clipping by the global gradient norm and the NaN/Inf check need "
                            "the step's global state: run with step mode sync or "
                            "post-validation (--step), not none")
    return mode


@dataclass
class Job:
    """One table to run in an already started process group."""

    table: dict[str, Any]
    model: dict[str, Any]  # GPTConfig fields, or a ModelSpec dict (with "kind")
    engine: str = "ours"
    torch_csv: str | None = None  # engine torch: path of the compute-only torch CSV
    trace: str | None = None  # write the Perfetto trace here (rank 0)
    label: str = ""
    options: dict[str, Any] = field(default_factory=dict)  # RunOptions fields this job changes
    # (optimizer, lr, clip, step_mode, inject_inf): one launch runs several step set-ups
    overlap_function: bool = True  # engine torch: OVERLAP_F_B through our custom function
    # (False: torch's default, the two halves in order; kept to measure the difference)


@dataclass
class RankContext:
    rank: int
    world: int
    device: torch.device
    opts: RunOptions
    groups: dict[tuple[int, ...], Any] = field(default_factory=dict)  # replica sync groups


def check_table(table: ExecutorTable, world: int, cfg: GPTConfig | dict[str, Any],
                engine: str = "ours", *, allow_over_memory: bool = False) -> None:
    """Refuse, before anything runs, a table that cannot run on this launch, model and engine.

    First what the table gets wrong by itself (``zbsolve.export.judge.judge_table``): its
    embedded instance, layout and fused-backward flag, its compute order with its memory modes'
    R / O / L (the simulator: R after F, L after O, the backward after R or L), its own
    SEND/RECV actions (``p2p_check``, blocking and batched) and its instance's memory limit
    (unless ``allow_over_memory``); then what does not fit this launch: the world size, a
    model with fewer layers than the table has stages, segments on torch's engine or a model
    without segment support, memory modes on torch's engine, selective recompute (no model
    of the runner has a selective variant).
    """
    modes = sorted({a.kind for row in table.actions for a in row if a.kind in MODE_KINDS})
    if "RS" in modes:
        raise TableMismatch(f"table {table.schedule_name!r} uses {SELECTIVE_REFUSAL}")
    if modes and engine == "torch":
        raise TableMismatch(f"engine torch: torch's pipelining runtime has no recompute / "
                            f"offload actions ({', '.join(modes)} in table "
                            f"{table.schedule_name!r}); run it with --engine ours")
    from zbsolve.export.judge import judge_table

    verdict = judge_table(table, allow_over_memory=allow_over_memory)
    if not verdict.ok:
        hint = ""
        if verdict.problems[0].startswith("memory:"):
            hint = " (run it anyway with --allow-over-memory)"
        raise TableMismatch(
            f"table {table.schedule_name!r} cannot run: {verdict.summary_line()}{hint}")
    if table.ranks != world:
        raise TableMismatch(
            f"table {table.schedule_name!r} is for {table.ranks} ranks but the launch has world "
            f"size {world}: use --nproc {table.ranks} (or torchrun --nproc-per-node/--nnodes "
            f"giving {table.ranks} ranks), or export the schedule for {world} devices"
        )
    # (a placement naming a rank outside 0..world-1 or leaving one without a stage is refused
    # above: the embedded instance must load, and its placement must be the table's)
    if int(table.instance.get("segments", 1)) > 1:
        if engine == "torch":
            raise TableMismatch("engine torch: torch's pipelining runtime has no sequence "
                                "segments; run segmented tables with --engine ours")
        _check_segmented(table, cfg)
    layout = layout_of(table)
    if layout.replicas > 1 and engine == "torch":
        raise TableMismatch(
            f"table {table.schedule_name!r} runs {layout.replicas} model replicas: torch's "
            "pipelining runtime has one last stage and cannot run them; use --engine ours")
    if isinstance(cfg, dict):
        if not is_layered(cfg):
            cfg = GPTConfig(**cfg)
        else:
            try:  # builds the model once: the split must fit its layers
                workload_for(cfg, layout.model_stages, table.instance)
            except ValueError as exc:
                raise TableMismatch(str(exc)) from None
            return
    try:
        layer_split(cfg.layers, layout.model_stages)
    except ValueError as exc:
        raise TableMismatch(str(exc)) from None


def _check_segmented(table: ExecutorTable, cfg: GPTConfig | dict[str, Any]) -> None:
    from zbsolve.export.executor import instance_of
    from zbsolve.runtime.segmented import check_segments

    kind = cfg.get("kind", "gpt") if isinstance(cfg, dict) else "gpt"
    seq = (cfg.seq if isinstance(cfg, GPTConfig) else cfg.get("seq")) if kind == "gpt" else None
    try:
        check_segments(str(kind), instance_of(table).segment_lengths,
                       int(seq) if seq is not None else GPTConfig().seq)
    except ValueError as exc:
        raise TableMismatch(f"table {table.schedule_name!r}: {exc}") from None


def table_segments(table: ExecutorTable, work: Workload) -> tuple[int, ...] | None:
    """Token lengths of the table's sequence segments (None: whole microbatches); ValueError
    when the model cannot run segments (:mod:`zbsolve.runtime.segmented`)."""
    k = int(table.instance.get("segments", 1))
    if k == 1:
        return None
    from zbsolve.export.executor import instance_of
    from zbsolve.runtime.segmented import check_segments

    seq = work.boundary[1] if work.label == "gpt" else None
    return check_segments(work.label, instance_of(table).segment_lengths, seq)


# ---------------------------------------------------------------------- our engine
Key = tuple[str, int, int, int]  # (direction "F" | "B", stage, mb, seg)


@dataclass
class _RankState:
    """What one rank keeps across the steps of a job."""

    rank: int
    graph: TaskGraph  # who feeds whom: every input and output route is read off it
    runners: dict[int, Any]  # graph stage -> StageRunner, GraphStageRunner or Segmented...
    p2p: P2P
    early: dict[int, int]  # pair action index -> its forward's SEND (overlap.early_sends)
    segmented: bool = False  # the table runs (microbatch, segment) units
    copies: HostCopies | None = None  # offload's host copies (tables with O / L actions)
    local: dict[Key, torch.Tensor] = field(default_factory=dict)  # (dir, consumer stage, ...)
    to_send: dict[Key, torch.Tensor] = field(default_factory=dict)  # (dir, producer stage, ...)
    sent_early: set[Key] = field(default_factory=set)  # sends a pair already posted
    early_count: int = 0  # sends posted inside their pair, all steps


def _direction(producer: Op) -> str:
    """What a hand-off from ``producer`` carries: "F" an activation, "B" an input gradient."""
    return "F" if producer.kind == "F" else "B"


def _piece(work: Workload, runner: Any, t: torch.Tensor, mb: int, seg: int,
           segmented: bool) -> torch.Tensor:
    """Microbatch ``mb``'s rows of a step's tokens or targets (only segment ``seg``'s columns
    when the table runs segments)."""
    t = work.microbatch(t, mb)
    return runner.segment(t, seg) if segmented else t


class _StepLoop:
    """One step of one rank's program: one handler per action kind (``_HANDLERS``)."""

    def __init__(self, ctx: RankContext, st: _RankState, work: Workload, actions: list[Action],
                 tokens: torch.Tensor, targets: torch.Tensor, clock: Clock) -> None:
        self.ctx, self.st, self.work, self.clock = ctx, st, work, clock
        self.actions = actions
        self.tokens, self.targets = tokens, targets
        self.stamps: list[tuple[int, Action | None, str, int, int, Any, Any, bool]] = []

    # ------------------------------------------------------------ routes (from the graph)
    def _input(self, op: Op, index: int) -> torch.Tensor | None:
        """The tensor ``op`` consumes from another stage (None: the first stage's forward takes
        the tokens, the last stage's backward starts from its loss)."""
        g = self.st.graph
        producers = [p for p, _ in g.preds(op) if p.kind != "SYNC" and p.stage != op.stage]
        if not producers:
            return None
        (producer,) = producers
        key = (_direction(producer), op.stage, op.mb, op.seg)
        if g.device(producer) == self.st.rank:
            if key not in self.st.local:
                raise RuntimeError(f"rank {self.st.rank}: {op} runs before {producer}, which "
                                   "feeds it on this rank")
            return self.st.local.pop(key)
        w0 = self.clock.mark()
        x = self.st.p2p.take(key[0], op.stage, op.mb, op.seg)
        self.stamps.append((index, None, "WAIT", op.stage, op.mb, w0, self.clock.mark(), False))
        return x

    def _hand_on(self, op: Op, out: torch.Tensor | None) -> None:
        """Give ``op``'s output to the ops of other stages that consume it: in memory on this
        rank, else to the table's SEND."""
        g = self.st.graph
        for nxt, _ in g.succs(op):
            if nxt.kind in ("W", "SYNC") or nxt.stage == op.stage:
                continue  # not a tensor hand-off
            if out is None:
                raise RuntimeError(f"rank {self.st.rank}: {op} produced nothing for {nxt}")
            d = _direction(op)
            if g.device(nxt) == self.st.rank:
                self.st.local[(d, nxt.stage, nxt.mb, nxt.seg)] = out
            else:
                self.st.to_send[(d, op.stage, op.mb, op.seg)] = out

    def _runner(self, op: Op) -> Any:
        runner = self.st.runners.get(op.stage)
        if runner is None:
            raise RuntimeError(f"rank {self.st.rank}: {op} is for a stage not on this rank")
        return runner

    def _unit(self, op: Op) -> dict[str, int]:
        """The segment keyword of a segmented runner (whole-microbatch runners take none)."""
        return {"seg": op.seg} if self.st.segmented else {}

    def _piece(self, t: torch.Tensor, op: Op) -> torch.Tensor:
        return _piece(self.work, self._runner(op), t, op.mb, op.seg,
                      self.st.segmented).to(self.ctx.device)

    # ------------------------------------------------------------ ops
    def forward(self, op: Op, index: int, action: Action | None, in_pair: bool = False) -> Any:
        runner, g = self._runner(op), self.st.graph
        x = self._input(op, index)
        if x is None:
            x = self._piece(self.tokens, op)
        tgt = self._piece(self.targets, op) if op.stage == g.last[op.stage] else None
        mode = g.mode(*op.unit)
        t0 = self.clock.mark()
        if mode == "keep":
            out = runner.forward(op.mb, x, tgt, **self._unit(op))
        else:  # recompute keeps only x (zbsolve.runtime.stage_modes)
            out = runner.forward_mode(op.mb, x, tgt, mode)
        self._stamp(index, action, op, t0, in_pair)
        if op.stage != g.last[op.stage]:
            self._hand_on(op, out)
        return t0

    def backward(self, op: Op, index: int, action: Action | None, in_pair: bool = False) -> Any:
        runner = self._runner(op)
        grad = self._input(op, index)
        t0 = self.clock.mark()
        grad_in = (runner.backward_input if op.kind == "I" else runner.backward)(
            op.mb, grad, **self._unit(op))
        self._stamp(index, action, op, t0, in_pair)
        self._hand_on(op, grad_in)
        return t0

    def weight(self, op: Op, index: int, action: Action | None, in_pair: bool = False) -> Any:
        t0 = self.clock.mark()
        self._runner(op).backward_weight(op.mb, **self._unit(op))
        self._stamp(index, action, op, t0, in_pair)
        return t0

    def recompute(self, op: Op, index: int, action: Action | None, in_pair: bool = False) -> Any:
        """R: the stage's forward again from the input its F kept."""
        t0 = self.clock.mark()
        self._runner(op).recompute(op.mb)
        self._stamp(index, action, op, t0, in_pair)
        return t0

    def copy(self, op: Op, index: int, action: Action | None, in_pair: bool = False) -> Any:
        """O (saved tensors to host) or L (back); on CUDA only issued here, on the copy stream:
        the stamp is the issue, the backward waits for the load's event."""
        runner, t0 = self._runner(op), self.clock.mark()
        if op.kind == "O":
            assert self.st.copies is not None
            runner.offload(op.mb, self.st.copies)
        else:
            runner.load(op.mb)
        self._stamp(index, action, op, t0, in_pair)
        return t0

    def compute(self, op: Op, index: int, action: Action | None, in_pair: bool = False) -> Any:
        """Run one op (its inputs taken first); returns the clock mark of its compute start."""
        return _OP_HANDLERS[op.kind](self, op, index, action, in_pair)

    # ------------------------------------------------------------ actions
    def single(self, index: int, a: Action) -> None:
        self.compute(a.op, index, a)

    def pair(self, index: int, a: Action) -> None:
        """OVERLAP_F_B: the forward, its activation sent at once, then the backward
        (:mod:`zbsolve.runtime.overlap`). The action is stamped from the forward's compute
        start (after its input arrived, as an unpaired F is) to the backward's end, so it
        includes any wait for the backward's input that the forward did not cover."""
        assert a.pair is not None
        fwd, bwd = a.pair
        t0 = self.compute(fwd, index, None, in_pair=True)
        if index in self.st.early:
            self._send_early(self.actions[self.st.early[index]])
        self.compute(bwd, index, None, in_pair=True)
        self.stamps.append((index, a, PAIR_KIND, a.stage, a.mb, t0, self.clock.mark(), False))

    def _send_early(self, send: Action) -> None:
        key = (send.kind[-1], send.stage, send.mb, send.seg)
        payload = self.st.to_send.pop(key, None)
        self.st.p2p.post([(send.kind, send.stage, send.mb, send.seg, send.peer, payload)])
        self.st.sent_early.add(key)
        self.st.early_count += 1

    def comm_batch(self, actions: list[Action], i: int) -> int:
        """Post one run of consecutive SEND/RECV actions at once; returns the index after it."""
        j = i
        while j < len(actions) and actions[j].is_comm and actions[j].batch == actions[i].batch:
            j += 1
        t0 = self.clock.mark()
        batch = []
        for b in actions[i:j]:
            key = (b.kind[-1], b.stage, b.mb, b.seg)
            if b.is_send and key in self.st.sent_early:
                self.st.sent_early.discard(key)  # posted by its pair already
                continue
            payload = self.st.to_send.pop(key, None) if b.is_send else None
            batch.append((b.kind, b.stage, b.mb, b.seg, b.peer, payload))
        self.st.p2p.post(batch)
        t1 = self.clock.mark()
        for k in range(i, j):
            b = actions[k]
            self.stamps.append((k, b, b.kind, b.stage, b.mb, t0, t1, False))
        return j

    def _stamp(self, index: int, action: Action | None, op: Op, t0: Any, in_pair: bool) -> None:
        self.stamps.append((index, action, op.kind, op.stage, op.mb, t0, self.clock.mark(),
                            in_pair))

    def timings(self, step: int) -> list[Timing]:
        ms = self.clock.ms
        return [Timing(self.st.rank, step, idx, kind, s, mb, ms(t0), ms(t1),
                       a.start if a is not None else None, a.end if a is not None else None,
                       in_pair)
                for idx, a, kind, s, mb, t0, t1, in_pair in self.stamps]


_OP_HANDLERS = {"F": _StepLoop.forward, "I": _StepLoop.backward, "B": _StepLoop.backward,
                "W": _StepLoop.weight, "R": _StepLoop.recompute, "O": _StepLoop.copy,
                "L": _StepLoop.copy}
_HANDLERS = {"F": _StepLoop.single, "I": _StepLoop.single, "B": _StepLoop.single,
             "W": _StepLoop.single, "R": _StepLoop.single, "O": _StepLoop.single,
             "L": _StepLoop.single, PAIR_KIND: _StepLoop.pair}


def _run_step(ctx: RankContext, table: ExecutorTable, st: _RankState, work: Workload,
              tokens: torch.Tensor, targets: torch.Tensor, step: int,
              clock: Clock) -> list[Timing]:
    actions = table.actions[ctx.rank]
    loop = _StepLoop(ctx, st, work, actions, tokens, targets, clock)
    i = 0
    while i < len(actions):
        a = actions[i]
        if _DEBUG:
            print(f"[rank {ctx.rank}] step {step} action {i} {a.token}", flush=True)
        if ctx.opts.fail_at == (ctx.rank, i):
            raise InjectedFailure(f"injected failure on rank {ctx.rank} at action {i} ({a.token})")
        if ctx.opts.hang_at == (ctx.rank, i):
            time.sleep(10 * ctx.opts.timeout_s)  # a stuck rank: its peers must time out
        if a.is_comm:
            i = loop.comm_batch(actions, i)
            continue
        handler = _HANDLERS.get(a.kind)
        if handler is None:
            raise RuntimeError(f"rank {ctx.rank}: unknown action kind {a.kind!r}")
        handler(loop, i, a)
        i += 1
    st.p2p.finish()
    leftovers = [f"{k}" for k in (*st.local, *st.to_send, *st.sent_early)]
    leftovers += [u for r in st.runners.values() for u in getattr(r, "mode_leftovers", ())]
    if leftovers or any(r.pending for r in st.runners.values()):
        raise RuntimeError(f"rank {ctx.rank}: step {step} ended with unfinished work {leftovers}")
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
    return loop.timings(step)


def _stage_steps(ctx: RankContext, copies: dict[int, Any], table: ExecutorTable
                 ) -> list[StageStep]:
    """One optimizer per (graph) stage of the rank (what the step boundary steps, validates and
    rolls back), in the tail rule's order."""
    spec = ctx.opts.optimizer_spec
    out = []
    for s in tail_order(table.actions[ctx.rank], sorted(copies)):
        params = list(copies[s][1].values())
        out.append(StageStep(s, params, spec.make(params)))
    return out


def _boundary(ctx: RankContext, table: ExecutorTable, steps: list[StageStep], mode: str,
              clock: Clock, step: int, actions: int) -> tuple[Boundary, list[Timing]]:
    """Run the step boundary; its stamps as timings (predicted times: the table's, OPT only)."""
    comm = ctx.device if ctx.opts.backend == "nccl" else torch.device("cpu")
    b = Boundary(ctx.rank, list(table.placement), steps, ctx.opts.clip, clock.mark, comm)
    STEP_HANDLERS[mode](b)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
    pred = {s: (t0, t1) for s, t0, t1 in (table.predicted.get("step") or {}).get("optimizer", [])}
    out = []
    for k, (kind, stage, t0, t1) in enumerate(b.stamps):
        p0, p1 = pred.get(stage, (None, None)) if kind == "OPT" else (None, None)
        out.append(Timing(ctx.rank, step, actions + k, kind, stage, -1, clock.ms(t0),
                          clock.ms(t1), p0, p1))
    return b, out


def run_ours(ctx: RankContext, table: ExecutorTable, work: Workload):
    """Run the table for ``opts.steps`` optimizer steps; returns this rank's records.

    Gradients and parameters are reported per replica ({replica: {name: tensor}}), after the
    replicas' gradient sum: each replica's copy must equal the reference on its own."""
    from zbsolve.export.executor import instance_of

    layout = layout_of(table)
    mode = step_mode_of(table, ctx.opts)
    m = table.microbatches
    inst = instance_of(table)
    graph = TaskGraph.of(inst, (op for row in table.actions for a in row for op in a.ops))
    copies = stage_copies(work, layout, ctx.rank)
    sync_groups(layout, ctx.groups)
    memory = MemoryTracker()
    lengths = table_segments(table, work)
    if lengths is None:
        runners = {
            s: work.make_runner(module.to(ctx.device), layout.model_stage(s),
                                layout.model_stages, work.loss_fn, 1.0 / m, memory)
            for s, (module, _) in copies.items()
        }
        shapes: tuple[tuple[int, ...], ...] = ()
    else:
        from zbsolve.runtime.segmented import SegmentedStageRunner

        runners = {s: SegmentedStageRunner(module.to(ctx.device), layout.model_stage(s),
                                           layout.model_stages, work.loss_fn, 1.0 / m, memory,
                                           lengths)
                   for s, (module, _) in copies.items()}
        b, _, h = work.boundary
        shapes = tuple((b, n, h) for n in lengths)
    params = {s: names for s, (_, names) in copies.items()}
    stage_steps = _stage_steps(ctx, copies, table)
    p2p = P2P(ctx.device, work.boundary, ctx.opts.timeout_s,
              stage_via_host=ctx.opts.backend == "gloo" and ctx.device.type == "cuda",
              segment_shapes=shapes)
    early = early_sends(table.actions[ctx.rank], mixed_batches=ctx.opts.backend == "gloo")
    state = _RankState(ctx.rank, graph, runners, p2p, early, segmented=lengths is not None)
    if any(a.kind == "O" for a in table.actions[ctx.rank]):
        state.copies = HostCopies(ctx.device, inst.offload.streams if inst.offload else 1)
    clock = Clock(ctx.device)
    timings: list[Timing] = []
    steps: list[dict[str, Any]] = []
    cuda_peaks: list[int] = []
    boundary: list[dict[str, Any]] = []
    for step in range(ctx.opts.steps):
        tokens, targets = work.batch(m, step)
        for st in stage_steps:
            st.opt.zero_grad(set_to_none=True)
        for r in runners.values():
            r.losses.clear()
        memory.reset_peak()
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)
            torch.cuda.reset_peak_memory_stats(ctx.device)
        dist.barrier()
        clock.begin()
        timings += _run_step(ctx, table, state, work, tokens, targets, step, clock)
        timings += _sync_step(ctx, layout, copies, step, clock)
        if ctx.device.type == "cuda":
            cuda_peaks.append(int(torch.cuda.max_memory_allocated(ctx.device)))
        losses = {mb: x for s, r in runners.items() if s == graph.last[s]
                  for mb, x in r.losses.items()}
        steps.append({
            "losses": losses,
            "grads": _per_replica(layout, params, lambda p: p.grad),
            "peak_bytes": memory.peak,
        })
        hit = ctx.opts.inject_inf
        if hit is not None and hit[0] == step and hit[1] in copies:
            inject_inf(copies[hit[1]][1], injected_name(work, hit[1]))
        b, stamps = _boundary(ctx, table, stage_steps, mode, clock, step,
                              len(table.actions[ctx.rank]))
        timings += stamps
        boundary.append({"decision": b.decision.label if mode != "none" else "unchecked",
                         "norm": b.decision.norm, "redone": b.redone,
                         "rolled_back": b.rolled_back})
    notes = sorted({n for r in runners.values() for n in getattr(r, "notes", ())})
    pairs = sum(t.kind == PAIR_KIND for t in timings)
    return {"steps": steps, "params": _per_replica(layout, params, lambda p: p),
            "timings": timings, "cuda_peaks": cuda_peaks, "notes": notes,
            "overlap_f_b_ran": pairs, "sent_early": state.early_count, "boundary": boundary}


def injected_name(work: Workload, stage: int) -> str:
    """The parameter an injected Inf goes into: the stage's first, by the unsplit model's name
    (one replica: graph stage = model stage)."""
    return next(iter(work.names(work.stages[stage])))


def _sync_step(ctx: RankContext, layout: ReplicaLayout, copies: dict[int, Any], step: int,
               clock: Clock) -> list[Timing]:
    """The replicas' gradient sum after the step's compute, stamped as SYNC of model stage s."""
    stamps = sync_gradients(layout, ctx.rank, copies, ctx.groups, clock)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
    return [Timing(ctx.rank, step, -1, "SYNC", s, -1, clock.ms(t0), clock.ms(t1), None, None)
            for s, t0, t1 in stamps]


def _per_replica(layout: ReplicaLayout, params: dict[int, dict[str, torch.nn.Parameter]],
                 pick) -> dict[int, dict[str, torch.Tensor]]:
    """{replica: {unsplit name: CPU copy of pick(param)}} over this rank's stage copies."""
    out: dict[int, dict[str, torch.Tensor]] = {}
    for s, names in params.items():
        into = out.setdefault(layout.replica(s), {})
        for n, p in names.items():
            t = pick(p)
            if t is not None:
                into[n] = t.detach().cpu().clone()
    return out


# ---------------------------------------------------------------------- gathering on rank 0
def _merge(gathered: list[dict[str, Any]], n_steps: int, m: int, replicas: int = 1):
    """Per replica: the step records (the shared loss, that copy's gradients) and its final
    parameters."""
    per_replica = []
    for replica in range(replicas):
        records, params = [], {}
        for step in range(n_steps):
            losses: dict[int, float] = {}
            grads: dict[str, torch.Tensor] = {}
            for g in gathered:
                losses.update(g["steps"][step]["losses"])
                grads.update(g["steps"][step]["grads"].get(replica, {}))
            if len(losses) != m:
                raise RuntimeError(f"step {step}: losses of {len(losses)} microbatches, "
                                   f"expected {m}")
            records.append(StepRecord(sum(losses[k] for k in sorted(losses)) / m, grads))
        for g in gathered:
            params.update(g["params"].get(replica, {}))
        per_replica.append((records, params))
    return per_replica


def _compare_replicas(per_replica, ref) -> Comparison:
    """Every replica's copy against the reference; the worst difference over all of them."""
    results = [compare(records, params, ref) for records, params in per_replica]
    if len(results) == 1:
        return results[0]
    worst = max(range(len(results)), key=lambda r: results[r].max_rel)

    def each(field: str) -> list[str]:
        return [f"replica {r}: {x}" for r, c in enumerate(results) for x in getattr(c, field)]

    return Comparison(results[worst].max_rel, f"replica {worst}: {results[worst].worst}",
                      sum(c.checked for c in results), each("missing"),
                      nonfinite=each("nonfinite"), mismatched=each("mismatched"))


def _copies_max_abs(per_replica) -> float | None:
    """Largest |copy 0 - copy 1| over the final parameters (None with one replica): the two
    copies of a stage must step identically."""
    if len(per_replica) < 2:
        return None
    first, second = per_replica[0][1], per_replica[1][1]
    return max((float((first[n] - second[n]).abs().max()) for n in first if n in second),
               default=0.0)


_REFERENCE_CACHE: dict[tuple, Any] = {}


def train_spec(work: Workload, opts: RunOptions) -> TrainSpec:
    """What the reference must do to take the run's steps."""
    hit = opts.inject_inf
    return TrainSpec(opts.optimizer_spec,
                     None if hit is None else (hit[0], injected_name(work, hit[1])))


def _reference(work: Workload, m: int, opts: RunOptions, device: torch.device):
    train = train_spec(work, opts)
    key = (work.key, m, opts.steps, train, str(device))
    if key not in _REFERENCE_CACHE:
        _REFERENCE_CACHE[key] = work.reference(m, opts.steps, train, device)
    return _REFERENCE_CACHE[key]


def run_job(ctx: RankContext, job: Job) -> dict[str, Any] | None:
    """Run one job on this rank; rank 0 returns the report, the others None."""
    if job.options:
        ctx = dataclasses.replace(ctx, opts=dataclasses.replace(ctx.opts, **job.options))
    table = ExecutorTable.from_dict(job.table)
    check_table(table, ctx.world, job.model if is_layered(job.model) else GPTConfig(**job.model),
                job.engine, allow_over_memory=ctx.opts.allow_over_memory)
    layout = layout_of(table)
    work = workload_for(job.model, layout.model_stages, table.instance)
    mode = step_mode_of(table, ctx.opts)
    if job.engine == "ours":
        mine = run_ours(ctx, table, work)
    elif job.engine == "torch":
        from zbsolve.runtime.torch_engine import run_torch

        if job.torch_csv is None:
            raise ValueError("engine torch needs the torch CSV path (Job.torch_csv)")
        if mode != "none":
            raise TableMismatch(f"step mode {mode}: engine torch runs torch's own step; the "
                                "step boundary's modes run with engine ours")
        mine = run_torch(ctx, table, work, job.torch_csv, job.overlap_function)
    else:
        raise ValueError(f"engine: expected one of {ENGINES}, got {job.engine!r}")
    timings = mine.pop("timings")
    gathered: list[Any] | None = [None] * ctx.world if ctx.rank == 0 else None
    dist.gather_object(mine, gathered, dst=0)
    all_timings: list[Any] | None = [None] * ctx.world if ctx.rank == 0 else None
    dist.gather_object([t.to_dict() for t in timings], all_timings, dst=0)
    if ctx.rank != 0:
        return None
    assert gathered is not None and all_timings is not None
    per_replica = _merge(gathered, ctx.opts.steps, table.microbatches, layout.replicas)
    records = per_replica[0][0]
    ref = _reference(work, table.microbatches, ctx.opts, ctx.device)
    cmp: Comparison = _compare_replicas(per_replica, ref)
    decisions = [b["decision"] for b in gathered[0].get("boundary", [])]
    decisions_ok = mode == "none" or decisions == ref.decisions
    flat = [Timing(**d) for per_rank in all_timings for d in per_rank]
    last = ctx.opts.steps - 1
    predicted_makespan = float(table.predicted.get("makespan", 0.0))
    report: dict[str, Any] = {
        "label": job.label or table.schedule_name,
        "schedule": table.schedule_name,
        "engine": job.engine,
        "backend": ctx.opts.backend,
        "device": str(ctx.device.type),
        "ranks": ctx.world,
        "stages": table.stages,
        "replicas": layout.replicas,
        "copies_max_abs_diff": _copies_max_abs(per_replica),
        "overlap_f_b_ran": sum(g.get("overlap_f_b_ran", 0) for g in gathered),  # all steps
        "sent_early": sum(g.get("sent_early", 0) for g in gathered),
        "microbatches": table.microbatches,
        "fused_bw": table.fused_bw,
        "model": work.summary,
        "split": work.split,
        "notes": sorted({n for g in gathered for n in g.get("notes", [])}),
        "steps": ctx.opts.steps,
        "losses": [r.loss for r in records],
        "reference_losses": [r.loss for r in ref.steps],
        "max_rel_diff": cmp.max_rel,
        "worst": cmp.worst,
        "checked": cmp.checked,
        "missing": cmp.missing,
        "nonfinite": cmp.nonfinite,
        "mismatched": cmp.mismatched,
        "rtol": ctx.opts.rtol,
        "ok": cmp.ok(ctx.opts.rtol) and decisions_ok,
        "step_boundary": {
            "mode": mode, "optimizer": ctx.opts.optimizer, "lr": ctx.opts.lr,
            "clip": ctx.opts.clip, "inject_inf": ctx.opts.inject_inf,
            "decisions": decisions, "reference_decisions": ref.decisions,
            "decisions_match": decisions_ok,
            "norms": [b["norm"] for b in gathered[0].get("boundary", [])],
            "redone": [sorted(s for g in gathered for s in g["boundary"][k]["redone"])
                       for k in range(len(decisions))],
            "rolled_back": [sorted(s for g in gathered for s in g["boundary"][k]["rolled_back"])
                            for k in range(len(decisions))],
        },
        "peak_activation_bytes": [g["steps"][last]["peak_bytes"] for g in gathered],
        "cuda_max_memory_allocated": [g["cuda_peaks"][last] if g["cuda_peaks"] else None
                                      for g in gathered],
        "predicted": table.predicted,
    }
    if not flat:  # engine torch: the step time only
        step_ms = max(g["steps"][last].get("step_ms", 0.0) for g in gathered)
        report["timing"] = {"step": last, "step_ms": step_ms, "mean_ms": {},
                            "predicted_makespan": predicted_makespan}
    else:
        report["timing"] = summarize(flat, last, predicted_makespan, table.predicted.get("step"),
                                     boundary_counts=mode != "none")
        if job.trace:
            import json

            from zbsolve.io import atomic_write_text

            trace = chrome_trace(flat, last, report["timing"]["unit_ms"],
                                 report["peak_activation_bytes"])
            atomic_write_text(job.trace, json.dumps(trace))
            report["trace"] = job.trace
    return report
