"""Point-to-point hand-offs between ranks, as the executor table lists them.

Each run of consecutive communication actions (one ``batch`` of the table) is posted at once
with ``dist.batch_isend_irecv`` (NCCL groups it, so a rank sending to and receiving from one
peer cannot deadlock); receives are waited for right before the compute that consumes them and
sends at the end of the step. This is the table's "non-blocking" mode, which never waits where
the proven "batched" mode would not, so it inherits that proof.

Backends: NCCL moves device tensors; gloo moves CPU tensors, and when the model lives on a GPU
(one shared GPU, the correctness fallback) payloads are staged through host memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist


class P2PTimeout(RuntimeError):
    """A hand-off did not complete in time (the peer failed, or the table does not match)."""


@dataclass
class _Works:
    """The works of one posted batch, waited for at most once: a second wait on a finished
    gloo send/recv waits for *another* completion of its buffer and times out."""

    works: list
    done: bool = False


@dataclass
class _Recv:
    buffer: torch.Tensor
    works: _Works
    what: str


@dataclass
class P2P:
    device: torch.device
    shape: tuple[int, ...]  # every payload is (microbatch size, seq, hidden) fp32
    timeout_s: float
    stage_via_host: bool = False  # gloo with a CUDA model
    segment_shapes: tuple[tuple[int, ...], ...] = ()  # per sequence segment, when there are
    recvs: dict[tuple[str, int, int, int], _Recv] = field(default_factory=dict)
    sends: list[tuple[_Works, torch.Tensor, str]] = field(default_factory=list)

    @property
    def _wire_device(self) -> torch.device:
        return torch.device("cpu") if self.stage_via_host else self.device

    def shape_of(self, seg: int) -> tuple[int, ...]:
        """A payload's shape: a segment's tokens only, (microbatch size, its length, hidden)."""
        return self.segment_shapes[seg] if self.segment_shapes else self.shape

    def post(self, batch: list[tuple[str, int, int, int, int, torch.Tensor | None]]) -> None:
        """Post one batch: (kind, stage, mb, segment, peer, payload for sends) per action."""
        ops, sends, recvs = [], [], []
        for kind, stage, mb, seg, peer, payload in batch:
            what = f"{stage}{kind}{mb}" + (f".{seg}" if seg else "") + f" with rank {peer}"
            if kind.startswith("SEND"):
                if payload is None:
                    raise RuntimeError(f"{what}: nothing to send (its producer has not run)")
                tensor = payload.detach()
                tensor = tensor.cpu() if self.stage_via_host else tensor.contiguous()
                ops.append(dist.P2POp(dist.isend, tensor, peer))
                sends.append((tensor, what))
            else:
                key = (kind[-1], stage, mb, seg)
                if key in self.recvs:
                    raise RuntimeError(f"{what}: received twice before it was used")
                buffer = torch.empty(self.shape_of(seg), dtype=torch.float32,
                                     device=self._wire_device)
                ops.append(dist.P2POp(dist.irecv, buffer, peer))
                recvs.append((key, buffer, what))
        works = _Works(dist.batch_isend_irecv(ops) if ops else [])
        # Coalesced backends may return fewer works than ops: every op waits for all of them.
        self.sends.extend((works, tensor, what) for tensor, what in sends)
        for key, buffer, what in recvs:
            self.recvs[key] = _Recv(buffer, works, what)

    def take(self, direction: str, stage: int, mb: int, seg: int = 0) -> torch.Tensor:
        """The received payload for (direction, consumer stage, mb, segment), waiting for it if
        needed."""
        key = (direction, stage, mb, seg)
        if key not in self.recvs:
            raise RuntimeError(
                f"stage {stage} microbatch {mb}" + (f" segment {seg}" if seg else "")
                + f": needs a RECV_{direction} that the table did not post before this compute"
            )
        recv = self.recvs.pop(key)
        self._wait(recv.works, recv.what)
        out = recv.buffer
        return out.to(self.device, non_blocking=False) if self.stage_via_host else out

    def finish(self) -> None:
        """Wait for every outstanding send (end of step) and check nothing was left unread."""
        for works, _, what in self.sends:
            self._wait(works, what)
        self.sends.clear()
        if self.recvs:
            left = ", ".join(r.what for r in self.recvs.values())
            raise RuntimeError(f"received but never used: {left}")

    def _wait(self, works: _Works, what: str) -> None:
        if works.done:
            return
        for work in works.works:
            try:
                ok = work.wait(timeout=timedelta(seconds=self.timeout_s))
            except RuntimeError as exc:
                raise P2PTimeout(f"P2P {what} failed or timed out after {self.timeout_s:g}s: "
                                 f"{exc}") from None
            if ok is False:
                raise P2PTimeout(f"P2P {what} timed out after {self.timeout_s:g}s")
        works.done = True
