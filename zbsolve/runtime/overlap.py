"""Overlapped F&B pairs (torch's ``OVERLAP_F_B``): what overlaps, in our engine and in torch's.

A pair is a forward of one stage and a backward (I or fused B) of another stage of one rank,
different microbatches, run as one job. Both engines run the halves one after the other,
forward first, and overlap each half's *communication* with the other half's *compute*:

- the backward's incoming gradient (its RECV was posted before the pair, as for any compute)
  is waited for only after the forward has computed, so it travels while the forward runs;
- the forward's activation is sent as soon as the forward ends (when its SEND is in the batch
  right after the pair), so it travels while the backward computes, instead of after the pair.

Both halves compute on one stream: nothing here runs two computations at once (on CPU, a rank
has one thread), so a pair takes about F + B of compute; the runner's timeline measures it.

Sending early keeps the table's proof: the SEND is in the batch right after the pair and no
message to the same peer is before it there, so the sequence of messages from this rank to each
peer (what matches SENDs with RECVs) is unchanged; only its time moves earlier, and posting a
send earlier never makes a peer wait longer. It is posted on its own, out of its batch: safe on
gloo, and on NCCL only when the SEND is its batch's only action (``early_sends``).

``early_sends`` is our engine's plan; ``TorchOverlapFB`` is the same policy as the custom
function of torch's ``_PipelineScheduleRuntime`` (``register_custom_function(OVERLAP_F_B, ...)``)
for ``--engine torch``: it takes the paired forwards' SEND_F out of torch's lowered program and
posts them itself right after the forward half.
"""

from __future__ import annotations

from typing import Any

from zbsolve.export.executor import Action


def early_sends(actions: list[Action], mixed_batches: bool = True) -> dict[int, int]:
    """Pair action index -> index of the SEND of its forward's output, where that SEND is in the
    run of communication actions right after the pair (its batch) and no SEND to the same peer
    comes before it there: posted first, it keeps its place in the FIFO order of messages from
    this rank to that peer, which is all that matches a SEND with its RECV.

    Posting the SEND alone takes it out of its batch. On gloo that is harmless (a send never
    blocks the posts after it). On NCCL a grouped batch is what lets a rank send to and receive
    from one peer at once, so with ``mixed_batches=False`` (the runner passes it for NCCL) only
    a SEND that is its batch's only action is sent early."""
    out = {}
    for i, a in enumerate(actions):
        if a.pair is None:
            continue
        fwd, batch = a.pair.first, _batch_after(actions, i)
        sends = [j for j in batch if actions[j].kind == "SEND_F"
                 and (actions[j].stage, actions[j].mb, actions[j].seg)
                 == (fwd.stage, fwd.mb, fwd.seg)]
        if not sends or not (mixed_batches or len(batch) == 1):
            continue
        j = sends[0]
        if not any(actions[k].is_send and actions[k].peer == actions[j].peer
                   for k in batch if k < j):
            out[i] = j
    return out


def _batch_after(actions: list[Action], i: int) -> list[int]:
    """Indices of the run of communication actions (one batch) right after action i."""
    out: list[int] = []
    for j in range(i + 1, len(actions)):
        if not actions[j].is_comm or actions[j].batch != actions[i + 1].batch:
            break
        out.append(j)
    return out


class TorchOverlapFB:
    """torch's custom function for ``OVERLAP_F_B``: forward half, its activation's isend, then
    the backward half (whose gradient's irecv is already posted). ``install`` registers it on a
    ``_PipelineScheduleRuntime`` whose program is loaded; call ``finish`` after every ``step``
    (waits for the sends it posted, as torch waits for its own at the end of ``step``)."""

    def __init__(self) -> None:
        self.early: set[tuple[int, int]] = set()  # (stage, mb) of forwards this sends itself
        self.works: list[Any] = []
        self.ran = 0  # pairs executed (a test reads it: the function really ran)
        self.sent_early = 0  # forward activations posted inside their pair

    def install(self, schedule: Any) -> TorchOverlapFB:
        from torch.distributed.pipelining.schedules import OVERLAP_F_B, SEND_F

        for rank, order in schedule.pipeline_order_with_comms.items():
            kept = []
            for a in order:
                prev = kept[-1] if kept else None
                if (a.computation_type == SEND_F and prev is not None
                        and prev.computation_type == OVERLAP_F_B and prev.sub_actions
                        and (prev.sub_actions[0].stage_index,
                             prev.sub_actions[0].microbatch_index)
                        == (a.stage_index, a.microbatch_index)):
                    if rank == schedule.rank:
                        self.early.add((a.stage_index, a.microbatch_index))
                    continue
                kept.append(a)
            schedule.pipeline_order_with_comms[rank] = kept
        schedule.register_custom_function(OVERLAP_F_B, self)
        return self

    def __call__(self, action: Any, ctx: Any) -> None:
        from torch.distributed.pipelining.schedules import _batch_p2p

        forward, backward = action.sub_actions
        schedule = ctx.schedule_ref
        stages = {st.stage_index: st for st in schedule._stages}
        self._forward(schedule, stages, forward, ctx)
        key = (forward.stage_index, forward.microbatch_index)
        if key in self.early:
            stage = stages[forward.stage_index]
            self.works.append(_batch_p2p(stage.get_fwd_send_ops(forward.microbatch_index)))
            self.sent_early += 1
        self._backward(schedule, stages, backward)
        self.ran += 1

    def finish(self) -> None:
        from torch.distributed.pipelining.schedules import _wait_batch_p2p

        while self.works:
            _wait_batch_p2p(self.works.pop())

    # torch's FORWARD / FULL_BACKWARD / BACKWARD_INPUT steps of _PipelineScheduleRuntime
    @staticmethod
    def _forward(schedule: Any, stages: dict[int, Any], a: Any, ctx: Any) -> None:
        from torch.distributed.pipelining.schedules import _wait_batch_p2p

        idx, mb = a.stage_index, a.microbatch_index
        stage = stages[idx]
        schedule._assert_unsharded(stage)
        if not stage.is_first and idx - 1 not in stages:
            _wait_batch_p2p(schedule.fwd_recv_ops.pop((idx, mb)))
        output = stage.forward_one_chunk(mb, ctx.arg_mbs[mb], ctx.kwarg_mbs[mb],
                                         save_forward_output=True)
        schedule._maybe_compute_loss(stage, output, ctx.target_mbs, mb)
        if idx + 1 in stages:
            stages[idx + 1].set_local_fwd_input(output, mb)

    @staticmethod
    def _backward(schedule: Any, stages: dict[int, Any], a: Any) -> None:
        from torch.distributed.pipelining.schedules import FULL_BACKWARD, _wait_batch_p2p

        idx, mb = a.stage_index, a.microbatch_index
        stage = stages[idx]
        schedule._assert_unsharded(stage)
        if not stage.is_last and idx + 1 not in stages:
            _wait_batch_p2p(schedule.bwd_recv_ops.pop((idx, mb)))
        loss = schedule._maybe_get_loss(stage, mb)
        full = a.computation_type == FULL_BACKWARD
        last = False
        if full:  # torch counts B and W to know the stage's last backward
            schedule.backward_counter[idx] += 1
            last = schedule.backward_counter[idx] == schedule._n_microbatches
        stage.backward_one_chunk(mb, loss=loss, full_backward=full, last_backward=last)
        if idx - 1 in stages:
            stages[idx - 1].set_local_bwd_input(stage.get_local_bwd_output(mb), mb)
