"""A stage made of an ordered list of layers we did not write, and its F / I / W / B.

:class:`LayerStack` is one logical stage: consecutive layers of a model (each takes one tensor
and returns one), run in order. :class:`GraphStageRunner` drives it with the same interface as
:class:`~zbsolve.runtime.iw_split.StageRunner` (the runner and the profiler call either), but
splits the backward on the autograd graph (:mod:`zbsolve.runtime.graph_split`), so any torch
model works.

A stage whose input has no gradient (token ids on stage 0) runs its first layer, cuts the
layer's output from that graph and feeds the cut tensor to the rest: I is the backward of the
rest down to that tensor, W is every weight gradient of the rest plus the first layer's whole
backward (an embedding's backward is a weight gradient only). That is the papers' split on the
first stage and what makes its W real work (see the module docstring of ``graph_split``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from zbsolve.runtime.graph_split import SavedTensorCensus, WeightPass, split_backward_input
from zbsolve.runtime.iw_split import MemoryTracker
from zbsolve.runtime.stage_modes import StageModes


class LayerStack(nn.Module):
    """Consecutive layers ``names`` (FQNs in the unsplit model) run one after the other."""

    def __init__(self, layers: Sequence[nn.Module], names: Sequence[str]) -> None:
        super().__init__()
        if len(layers) != len(names) or not layers:
            raise ValueError("a stage needs one name per layer and at least one layer")
        self.layers = nn.ModuleList(layers)
        self.names = list(names)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def differentiable(x: torch.Tensor) -> bool:
    return x.is_floating_point() or x.is_complex()


@dataclass
class _Pending:
    x: torch.Tensor | None  # the stage input leaf (receives the input gradient), if any
    root: torch.Tensor | None
    census: SavedTensorCensus
    saved_bytes: int
    lead: torch.Tensor | None = None  # first layer's output (graph kept for W) on a cut stage
    cut: torch.Tensor | None = None  # its detached copy, the input of the rest
    weights: WeightPass | None = None
    held_bytes: int = 0
    out_grad: torch.Tensor | None = None  # kept for W when the stage is one uncut first layer


@dataclass
class GraphStageRunner(StageModes):
    """F, I, W and B of one :class:`LayerStack` per microbatch (graph-based I/W split), and
    the memory modes' R, O, L (:class:`~zbsolve.runtime.stage_modes.StageModes`).

    ``loss_fn(output, targets)`` and ``loss_scale`` apply on the last stage only (the microbatch
    loss scaled by 1/m, as torch's runtime does). ``fused`` (a reason) turns the split off: I is
    then the whole backward and W does nothing.
    """

    module: LayerStack
    index: int
    n_stages: int
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    loss_scale: float = 1.0
    memory: MemoryTracker = field(default_factory=MemoryTracker)
    pending: dict[int, _Pending] = field(default_factory=dict)
    losses: dict[int, float] = field(default_factory=dict)
    fused: str = ""
    notes: set[str] = field(default_factory=set)  # fallbacks met, for the report

    def __post_init__(self) -> None:
        self._params = [p for p in self.module.parameters() if p.requires_grad]
        self._param_ptrs = {p.untyped_storage().data_ptr() for p in self.module.parameters()}
        self._init_modes()

    def forward(self, mb: int, x: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        if mb in self.pending:
            raise RuntimeError(f"stage {self.index}: forward of microbatch {mb} ran twice")
        census = SavedTensorCensus(exclude=set(self._param_ptrs))
        layers = list(self.module.layers)
        leaf = lead = cut = None
        with census.recording():
            if differentiable(x):
                leaf = x = x.detach().requires_grad_(True)
            else:
                lead = layers[0](x)
                layers = layers[1:]
                if layers:
                    cut = x = lead.detach().requires_grad_(lead.requires_grad)
                else:
                    x = lead
            for layer in layers:
                x = layer(x)
            out = x
            if self.is_last:
                if self.loss_fn is None or targets is None:
                    raise RuntimeError(f"stage {self.index} is last: it needs loss_fn and targets")
                loss = self.loss_fn(out, targets)
                self.losses[mb] = float(loss.detach())
                out = loss * self.loss_scale
        saved = census.live_bytes
        self.memory.add(saved)
        self.pending[mb] = _Pending(leaf, out, census, saved, lead, cut)
        return loss.detach() if self.is_last else out.detach()

    def backward_input(self, mb: int, grad: torch.Tensor | None = None) -> torch.Tensor | None:
        """I: the input gradient (on a cut stage: the gradient at the first layer's output)."""
        self.before_backward(mb)
        st = self._get(mb, "backward_input")
        if st.weights is not None:
            raise RuntimeError(f"stage {self.index}: input backward of microbatch {mb} ran twice")
        if not self.is_last and grad is None:
            raise RuntimeError(f"stage {self.index}: backward needs the output gradient")
        inputs = [t for t in (st.x, st.cut) if t is not None]
        if st.cut is None and st.lead is not None:  # the stage is its first layer only
            st.weights = WeightPass([], {})
            st.out_grad = grad
        else:
            _, st.weights = split_backward_input([st.root], [grad], inputs, self._params,
                                                 force_fused=self.fused, census=st.census)
        if st.weights.fallback:
            self.notes.add(f"stage {self.index}: backward fused: {st.weights.fallback}")
        grad_in = st.x.grad if st.x is not None else None
        st.x = None
        if st.lead is None or st.cut is not None:
            st.root = None
        st.held_bytes = st.census.live_bytes + st.weights.held_bytes
        self.memory.sub(st.saved_bytes)
        self.memory.add(st.held_bytes)
        return grad_in

    def backward_weight(self, mb: int) -> None:
        """W: the weight gradients (and, on a cut stage, the first layer's backward)."""
        st = self._get(mb, "backward_weight")
        if st.weights is None:
            raise RuntimeError(f"stage {self.index}: W of microbatch {mb} before its I")
        st.weights.run()
        if st.lead is not None and st.lead.requires_grad:
            if st.cut is not None:
                if st.cut.grad is not None:
                    torch.autograd.backward(st.lead, st.cut.grad, inputs=self._params)
            else:  # a one-layer stage on token ids: its whole backward is W
                torch.autograd.backward(st.root, st.out_grad, inputs=self._params)
        self.memory.sub(st.held_bytes)
        del self.pending[mb]
