"""Overlapped F&B pairs (torch's ``OVERLAP_F_B``): what overlaps, in our engine and in torch's.

A pair is a forward of one stage and a backward (I or fused B) of another stage of one rank,
different microbatches, run as one job. Both engines run the halves one after the other,
forward first, and overlap each half's *communication* with the other half's *compute*:

- the backward's incoming gradient (its RECV was posted before the pair, as for any compute)
  is waited for only after the forward has computed, so it travels while the forward runs;
- the forward's activation is sent as soon as the forward ends (when the table's very next
  action is that SEND), so it travels while the backward computes, instead of after the pair.

Both halves compute on one stream: nothing here runs two computations at once (on CPU, a rank
has one thread), so a pair takes about F + B of compute; the runner's timeline measures it.

Sending early keeps the table's proof: the SEND is the pair's next action in the table, so the
rank's sequence of communication posts is unchanged; only its time moves earlier, and posting a
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
    """Pair action index -> index of the SEND of its forward's output, where that SEND is the
    action right after the pair (the only case that leaves the post order unchanged).

    Posting the SEND alone takes it out of its batch. On gloo that is harmless (a send never
    blocks the posts after it). On NCCL a grouped batch is what lets a rank send to and receive
    from one peer at once, so with ``mixed_batches=False`` (the runner passes it for NCCL) only
    a SEND that is its batch's only action is sent early."""
    out = {}
    for i, a in enumerate(actions[:-1]):
        if a.pair is None:
            continue
        fwd, nxt = a.pair.first, actions[i + 1]
        if nxt.kind != "SEND_F" or (nxt.stage, nxt.mb, nxt.seg) != (fwd.stage, fwd.mb, fwd.seg):
            continue
        alone = i + 2 >= len(actions) or actions[i + 2].batch != nxt.batch
        if mixed_batches or alone:
            out[i] = i + 1
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
