"""Sequence segments on the runner's GPT: F, I, W and B of one (microbatch, segment) unit.

Which models: the runner's GPT (:mod:`zbsolve.runtime.model`) only. A segment's forward has to
reach into every attention layer for the earlier segments' keys and values, which a model we
did not write (a Hugging Face causal LM, a user's module list) does not let us do without a
KV-cache protocol per model; the runner refuses segmented tables for those
(:func:`check_segments`).

How a segment runs on a stage (per block, ``BlockKV``):

- **F** of segment g computes its queries, keys and values, attends over the keys and values
  of segments 0..g-1 of the same microbatch (cached on this stage: the graph's edge F(s, j, g-1)
  -> F(s, j, g)) and its own, with the causal mask shifted by the segment's offset, and caches
  its own keys and values for the later segments as detached leaves. The positional embedding on
  stage 0 starts at the segment's first position; the loss on the last stage is the segment's
  mean token loss times its share of the tokens, so the segments' losses add up to the
  microbatch's.
- **I** of segment g backpropagates from its output gradient *and* from the gradients that the
  later segments' I left on its cached keys and values (their leaves' ``.grad``), in one pass.
  So it must run after the I of every later segment of the microbatch, which is the graph's edge
  I(s, j, g+1) -> I(s, j, g); the runner checks it and refuses otherwise.
- **W** is unchanged: the deferred weight-gradient products of that segment's forward.

Memory: a segment's keys and values are part of its activation (their storage is the QKV
projection's output, which attention saves for backward) and live until its I, after every later
segment's. The CPU attention here is dense: segment g's forward also saves the concatenated prefix
keys and values it attended over (a copy, l_g x prefix in its attention scores too), which is what
``zbsolve profile --segments`` measures per segment; a kernel that reads a KV cache in place
would not keep that copy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as Fn
from torch import nn

from zbsolve.runtime.iw_split import MemoryTracker, WeightGradSink, _count_saved, deferring
from zbsolve.runtime.stage_modes import StagePosition


def token_lengths(lengths: Sequence[float], seq: int) -> tuple[int, ...]:
    """The instance's segment lengths as token counts of a ``seq``-token sequence: as given when
    they are tokens summing to ``seq``, else ``seq`` split in their proportions (largest
    remainders; every segment at least one token)."""
    k = len(lengths)
    if k > seq:
        raise ValueError(f"{k} segments need at least {k} tokens; the model's seq is {seq}")
    if all(float(x).is_integer() for x in lengths) and sum(lengths) == seq:
        return tuple(int(x) for x in lengths)
    total = float(sum(lengths))
    raw = [seq * x / total for x in lengths]
    out = [max(1, int(x)) for x in raw]
    order = sorted(range(k), key=lambda g: raw[g] - int(raw[g]), reverse=True)
    i = 0
    while sum(out) != seq:
        g = order[i % k]
        if sum(out) < seq:
            out[g] += 1
        elif out[g] > 1:
            out[g] -= 1
        i += 1
    return tuple(out)


def check_segments(model_kind: str, lengths: Sequence[float], seq: int | None) -> tuple[int, ...]:
    """Token lengths for a segmented table, or ValueError saying why this model cannot run it."""
    if model_kind != "gpt":
        raise ValueError(f"the table splits microbatches into {len(lengths)} sequence segments; "
                         f"only the runner's GPT runs segments (a segment's attention reads the "
                         f"earlier segments' keys and values), not a {model_kind} model")
    assert seq is not None
    return token_lengths(lengths, seq)


@dataclass
class BlockKV:
    """One block's view for one segment: the earlier segments' cached keys and values (leaves),
    and, after the forward, this segment's own (graph tensors, the roots of its I)."""

    prefix_keys: list[torch.Tensor]
    prefix_values: list[torch.Tensor]
    own: tuple[torch.Tensor, torch.Tensor] | None = None

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention of this segment's queries over the prefix and itself."""
        self.own = (k, v)
        if not self.prefix_keys:
            return Fn.scaled_dot_product_attention(q, k, v, is_causal=True)
        keys = torch.cat([*self.prefix_keys, k], dim=2)
        values = torch.cat([*self.prefix_values, v], dim=2)
        t, total = q.shape[2], keys.shape[2]
        mask = torch.ones(t, total, dtype=torch.bool, device=q.device).tril(total - t)
        return Fn.scaled_dot_product_attention(q, keys, values, attn_mask=mask)


@dataclass
class SegmentKV:
    """What ``StageModule.forward`` reads for one segment: its offset and each block's view."""

    start: int
    blocks: list[BlockKV]

    def block(self, i: int) -> BlockKV:
        return self.blocks[i]


@dataclass
class _Unit:
    x: torch.Tensor | None
    root: torch.Tensor | None
    sink: WeightGradSink
    saved_bytes: int
    own: list[tuple[torch.Tensor, torch.Tensor]]  # per block: this segment's keys, values
    leaves: list[tuple[torch.Tensor, torch.Tensor]]  # per block: their cached detached copies
    held_bytes: int = 0
    done_input: bool = False


@dataclass
class SegmentedStageRunner(StagePosition):
    """F, I, W, B of one GPT stage per (microbatch, segment); the interface of
    :class:`~zbsolve.runtime.iw_split.StageRunner` with a ``seg`` argument."""

    module: nn.Module
    index: int
    n_stages: int
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None
    loss_scale: float
    memory: MemoryTracker
    lengths: tuple[int, ...]  # tokens per segment
    pending: dict[tuple[int, int], _Unit] = field(default_factory=dict)
    losses: dict[int, float] = field(default_factory=dict)
    kv_bytes: dict[int, int] = field(default_factory=dict)  # per segment: its keys and values
    inputs_done: set[tuple[int, int]] = field(default_factory=set)  # units whose I has run

    def __post_init__(self) -> None:
        self._param_ptrs = {p.untyped_storage().data_ptr() for p in self.module.parameters()}
        self._starts = [sum(self.lengths[:g]) for g in range(len(self.lengths))]

    @property
    def seq(self) -> int:
        return sum(self.lengths)

    def forward(self, mb: int, x: torch.Tensor, targets: torch.Tensor | None = None,
                seg: int = 0) -> torch.Tensor:
        """F of segment ``seg``: attends over the cached keys and values of segments < seg."""
        if (mb, seg) in self.pending:
            raise RuntimeError(f"stage {self.index}: forward of microbatch {mb} segment {seg} "
                               "ran twice")
        earlier = [self.pending.get((mb, h)) for h in range(seg)]
        if any(u is None for u in earlier):
            missing = [h for h, u in zip(range(seg), earlier) if u is None]
            raise RuntimeError(f"stage {self.index}: segment {seg} of microbatch {mb} runs before "
                               f"segment(s) {missing} (it reads their keys and values)")
        n_blocks = len(self.module.blocks)
        views = [BlockKV([u.leaves[b][0] for u in earlier], [u.leaves[b][1] for u in earlier])
                 for b in range(n_blocks)]
        if not self.is_first:
            x = x.detach().requires_grad_(True)
        sink = WeightGradSink()
        seen: dict[int, int] = {}
        with deferring(sink), _count_saved(self._param_ptrs, seen):
            out = self.module(x, SegmentKV(self._starts[seg], views))
            if self.is_last:
                if self.loss_fn is None or targets is None:
                    raise RuntimeError(f"stage {self.index} is last: it needs loss_fn and targets")
                loss = self.loss_fn(out, targets) * (self.lengths[seg] / self.seq)
                self.losses[mb] = self.losses.get(mb, 0.0) + float(loss.detach())
                out = loss * self.loss_scale
        own = [view.own for view in views]
        assert all(pair is not None for pair in own)
        leaves = [(k.detach().requires_grad_(True), v.detach().requires_grad_(True))
                  for k, v in own]  # type: ignore[misc]
        self.kv_bytes[seg] = sum(2 * k.numel() * k.element_size() for k, _ in leaves)
        saved = sum(seen.values())
        self.memory.add(saved)
        self.pending[(mb, seg)] = _Unit(x if not self.is_first else None, out, sink, saved,
                                        own, leaves)  # type: ignore[arg-type]
        return loss.detach() if self.is_last else out.detach()

    def backward_input(self, mb: int, grad: torch.Tensor | None = None, seg: int = 0
                       ) -> torch.Tensor | None:
        """I of segment ``seg``: from its output gradient and the gradients the later segments
        left on its keys and values; so every later segment's I must have run."""
        unit = self._get(mb, seg, "backward_input")
        if unit.done_input:
            raise RuntimeError(f"stage {self.index}: input backward of microbatch {mb} segment "
                               f"{seg} ran twice")
        later = [g for g in range(seg + 1, len(self.lengths)) if (mb, g) not in self.inputs_done]
        if later:
            raise RuntimeError(f"stage {self.index}: I of microbatch {mb} segment {seg} before "
                               f"the I of segment(s) {later}, whose key/value gradients it needs")
        if not self.is_last and grad is None:
            raise RuntimeError(f"stage {self.index}: backward needs the output gradient")
        roots: list[torch.Tensor] = [unit.root]  # type: ignore[list-item]
        grads: list[torch.Tensor | None] = [None if self.is_last else grad]
        for (k, v), (leaf_k, leaf_v) in zip(unit.own, unit.leaves):
            for tensor, leaf in ((k, leaf_k), (v, leaf_v)):
                if leaf.grad is not None:
                    roots.append(tensor)
                    grads.append(leaf.grad)
        torch.autograd.backward(roots, grads)
        grad_in = unit.x.grad if unit.x is not None else None
        unit.x = unit.root = None
        unit.own, unit.leaves = [], []  # the later segments are done with them
        unit.done_input = True
        self.inputs_done.add((mb, seg))
        unit.held_bytes = unit.sink.nbytes
        self.memory.sub(unit.saved_bytes)
        self.memory.add(unit.held_bytes)
        return grad_in

    def backward_weight(self, mb: int, seg: int = 0) -> None:
        unit = self._get(mb, seg, "backward_weight")
        if not unit.done_input:
            raise RuntimeError(f"stage {self.index}: W of microbatch {mb} segment {seg} before "
                               "its I")
        unit.sink.run()
        self.memory.sub(unit.held_bytes)
        del self.pending[(mb, seg)]
        if not any(key[0] == mb for key in self.pending):  # the microbatch is done here
            self.inputs_done -= {(mb, g) for g in range(len(self.lengths))}

    def backward(self, mb: int, grad: torch.Tensor | None = None, seg: int = 0
                 ) -> torch.Tensor | None:
        grad_in = self.backward_input(mb, grad, seg)
        self.backward_weight(mb, seg)
        return grad_in

    def segment(self, t: torch.Tensor, seg: int) -> torch.Tensor:
        """The tokens (or targets) of segment ``seg`` of a microbatch's (batch, seq) tensor."""
        start = self._starts[seg]
        return t[:, start:start + self.lengths[seg]]

    def _get(self, mb: int, seg: int, what: str) -> _Unit:
        if (mb, seg) not in self.pending:
            raise RuntimeError(f"stage {self.index}: {what} of microbatch {mb} segment {seg} "
                               "without its forward")
        return self.pending[(mb, seg)]
