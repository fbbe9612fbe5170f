"""Memory modes on a stage (recompute, offload), written once for every stage runner.

:class:`StageModes` is the base that :class:`~zbsolve.runtime.iw_split.StageRunner` (the
runner's GPT, custom-op I/W split) and :class:`~zbsolve.runtime.layered.GraphStageRunner` (any
layered model, graph I/W split) share. A runner provides ``forward``, ``pending[mb]`` (with the
forward's :class:`~zbsolve.runtime.graph_split.SavedTensorCensus` as ``census``, its
``saved_bytes`` and the tensors it holds itself: ``x`` / ``root``, and ``lead`` / ``cut`` on a
graph-split stage 0), ``memory`` and ``index``; this base
adds the ops of the modes (``zbsolve.modes``):

- **recompute** -- F (:meth:`StageModes.forward_mode`) runs the stage under ``torch.no_grad``:
  no autograd graph, no saved tensors; it keeps only its checkpoint, the stage input (and the
  targets on the last stage), and hands its output on as usual. R (:meth:`recompute`) runs the
  stage's own ``forward`` again from the checkpoint, which builds exactly the graph, weight-
  gradient sink and saved tensors a kept forward would have built; I and W then run unchanged,
  so the I/W split stays exact (same ops, same values: the forward is deterministic, there is
  no dropout in the runner's models).
- **offload** -- O (:meth:`offload`) moves the forward's saved tensors to host memory; L
  (:meth:`load`) copies them back; I refuses to run before L (:meth:`before_backward`).

Why the saved-tensor hooks (the census's holders) and not tensors kept explicitly: what a
stage's backward needs lives inside the autograd graph (every node's saved tensors), not in
anything the runner holds; the graph-split runner cannot even name those tensors for a model
we did not write. Every forward already packs each saved tensor into a holder
(``torch.autograd.graph.saved_tensors_hooks``, for the memory census), and autograd asks the
holder for the tensor only when a node runs. So O swaps the holder's device tensor for a host
copy and L swaps it back: the graph, the sink and the I/W split are untouched, and a tensor W
unpacks again after I is the same holder's. Storages are copied once each (views of one
storage, as autograd often saves, come back as views of one copy). The stage input and output
(the boundary tensors the runner holds anyway, and sends) stay on the device, as a recomputed
F keeps its input; so do integer tensors (token ids, targets: slices of the step's batch, which
the caller holds anyway, so a copy would free nothing).

Copies (:class:`HostCopies`): on CPU a copy is a plain clone into a new tensor, so the
original storage is really released once its holders let go; on CUDA the host side is pinned
memory and the copies run on a separate copy stream (one per direction with ``streams: 2``),
ordered by events: O waits for the compute stream's work so far (the forward), L waits for
its O, and I makes the compute stream wait for its L (:meth:`before_backward`), so L finishes
before I reads the tensors; ``record_stream`` keeps the caching allocator from reusing a
storage a copy still reads or writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from zbsolve.runtime.graph_split import SavedTensorCensus

SELECTIVE_REFUSAL = ("selective recompute (RS actions): the runner's models have no selective "
                     "variant (no split of a stage's saved tensors into attention and the rest); "
                     "solve without recompute.R_selective / kept_selective to run the table")


def _nbytes(t: torch.Tensor | None) -> int:
    """The tensor's own bytes (a microbatch slice of the step's batch is a view of it)."""
    return 0 if t is None else t.numel() * t.element_size()


class HostCopies:
    """Device <-> host copies of whole storages for one rank (see the module docstring)."""

    def __init__(self, device: torch.device, streams: int = 1) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        if self.cuda:
            out = torch.cuda.Stream(device)
            self.streams = {"O": out, "L": out if streams == 1 else torch.cuda.Stream(device)}

    def to_host(self, storage: torch.UntypedStorage) -> tuple[torch.Tensor, Any]:
        """(a host byte tensor holding the storage's bytes, the event its copy ends at)."""
        src = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
        if not self.cuda:
            return src.clone(), None
        stream = self.streams["O"]
        stream.wait_stream(torch.cuda.current_stream(self.device))  # after the forward
        host = torch.empty(src.numel(), dtype=torch.uint8, pin_memory=True)
        with torch.cuda.stream(stream):
            host.copy_(src, non_blocking=True)
            src.record_stream(stream)  # not reused before the copy has read it
            done = torch.cuda.Event()
            done.record(stream)
        return host, done

    def to_device(self, host: torch.Tensor, after: Any) -> tuple[torch.Tensor, Any]:
        """(a device byte tensor with the host bytes, the event its copy ends at)."""
        if not self.cuda:
            return host.clone(), None
        stream = self.streams["L"]
        with torch.cuda.stream(stream):
            if after is not None:
                stream.wait_event(after)  # the copy out has finished writing the host bytes
            dev = torch.empty(host.numel(), dtype=torch.uint8, device=self.device)
            dev.copy_(host, non_blocking=True)
            done = torch.cuda.Event()
            done.record(stream)
        return dev, done

    def wait(self, loaded: list[torch.Tensor], event: Any) -> None:
        """Make the compute stream wait for a load before it reads ``loaded``."""
        if self.cuda and event is not None:
            compute = torch.cuda.current_stream(self.device)
            compute.wait_event(event)
            for dev in loaded:
                dev.record_stream(compute)  # freed after I/W, not before the compute used it


@dataclass
class _Checkpoint:
    """What a recomputed forward keeps until its R: the stage input (and targets)."""

    x: torch.Tensor
    targets: torch.Tensor | None
    nbytes: int


@dataclass
class _Offloaded:
    """One unit's saved storages while on host (after O) and back (after L)."""

    moved_bytes: int
    copies: HostCopies
    groups: list[tuple[list[Any], torch.Tensor, Any]] = field(default_factory=list)
    # per storage: (its holders with each one's view as (dtype, offset, size, stride),
    #               the host bytes, the copy-out event)
    loaded: list[torch.Tensor] = field(default_factory=list)  # device bytes after L
    load_event: Any = None
    is_loaded: bool = False


class StagePosition:
    """Where a stage runner sits in the pipeline (``index`` of ``n_stages``): every stage
    runner's first / last test, the segmented one's too."""

    index: int  # what the runner provides
    n_stages: int

    @property
    def is_first(self) -> bool:
        return self.index == 0

    @property
    def is_last(self) -> bool:
        return self.index == self.n_stages - 1


class StageModes(StagePosition):
    """The base both stage runners share: what they do alike (first / last stage, B = I then
    W, the pending unit of a microbatch) and the memory modes' F, R, O and L."""

    memory: Any  # what the runner provides (see the module docstring): MemoryTracker
    pending: dict[int, Any]
    checkpoints: dict[int, _Checkpoint]
    offloaded: dict[int, _Offloaded]

    def forward(self, mb: int, x: torch.Tensor, targets: torch.Tensor | None = None
                ) -> torch.Tensor:
        raise NotImplementedError

    def backward_input(self, mb: int, grad: torch.Tensor | None = None) -> torch.Tensor | None:
        raise NotImplementedError

    def backward_weight(self, mb: int) -> None:
        raise NotImplementedError

    def backward(self, mb: int, grad: torch.Tensor | None = None) -> torch.Tensor | None:
        """B: full backward (I then W); the input gradient leaves only when both are done."""
        grad_in = self.backward_input(mb, grad)
        self.backward_weight(mb)
        return grad_in

    def _get(self, mb: int, what: str) -> Any:
        if mb not in self.pending:
            raise RuntimeError(f"stage {self.index}: {what} of microbatch {mb} without its forward")
        return self.pending[mb]

    def _init_modes(self) -> None:
        self.checkpoints: dict[int, _Checkpoint] = {}
        self.offloaded: dict[int, _Offloaded] = {}

    # ------------------------------------------------------------------ recompute
    def forward_mode(self, mb: int, x: torch.Tensor, targets: torch.Tensor | None = None,
                     mode: str = "keep") -> torch.Tensor:
        """F in the unit's memory mode: keep and offload run the plain forward; recompute runs
        it without a graph and keeps only its input."""
        if mode in ("keep", "offload"):
            return self.forward(mb, x, targets)
        if mode == "selective":
            raise RuntimeError(f"stage {self.index}: {SELECTIVE_REFUSAL}")
        if mode != "recompute":
            raise RuntimeError(f"stage {self.index}: unknown memory mode {mode!r}")
        if mb in self.checkpoints:
            raise RuntimeError(f"stage {self.index}: forward of microbatch {mb} ran twice")
        with torch.no_grad():
            out = self.forward(mb, x, targets)
        st = self.pending.pop(mb)
        self.memory.sub(st.saved_bytes)  # (none saved: no graph)
        kept = _nbytes(x) + (_nbytes(targets) if targets is not None else 0)
        self.checkpoints[mb] = _Checkpoint(x, targets, kept)
        self.memory.add(kept)
        return out

    def recompute(self, mb: int) -> None:
        """R: the stage's forward again from its kept input; rebuilds what I and W need (its
        output was handed on by F already and is dropped here)."""
        ck = self.checkpoints.pop(mb, None)
        if ck is None:
            raise RuntimeError(f"stage {self.index}: R of microbatch {mb} without a recomputed "
                               "forward before it")
        self.memory.sub(ck.nbytes)
        self.forward(mb, ck.x, ck.targets)

    # ------------------------------------------------------------------ offload
    def offload(self, mb: int, copies: HostCopies) -> int:
        """O: the unit's saved tensors to host (boundary tensors stay); returns bytes moved."""
        st = self.pending.get(mb)
        if st is None or mb in self.offloaded:
            what = "without its forward" if st is None else "twice"
            raise RuntimeError(f"stage {self.index}: O of microbatch {mb} {what}")
        census: SavedTensorCensus = st.census
        held_anyway = (getattr(st, name, None) for name in ("x", "root", "lead", "cut"))
        boundary = {t.untyped_storage().data_ptr() for t in held_anyway if t is not None}
        by_storage: dict[int, list[Any]] = {}
        for held in list(census.holders):
            if (held.tensor is not None and held.ptr not in boundary
                    and held.tensor.is_floating_point()):
                by_storage.setdefault(held.ptr, []).append(held)
        record = _Offloaded(0, copies)
        for group in by_storage.values():
            storage = group[0].tensor.untyped_storage()
            host, event = copies.to_host(storage)
            views = []
            for held in group:
                t = held.tensor
                views.append((held, (t.dtype, t.storage_offset(), t.size(), t.stride())))
                held.tensor = None  # the device storage goes with its last holder
            record.groups.append((views, host, event))
            record.moved_bytes += storage.nbytes()
        self.offloaded[mb] = record
        self.memory.sub(record.moved_bytes)
        return record.moved_bytes

    def load(self, mb: int) -> None:
        """L: the unit's saved tensors back to the device (views rebuilt on one copy each)."""
        record = self.offloaded.get(mb)
        if record is None or record.is_loaded:
            what = "without its O" if record is None else "twice"
            raise RuntimeError(f"stage {self.index}: L of microbatch {mb} {what}")
        event = None
        for views, host, out_event in record.groups:
            dev, event = record.copies.to_device(host, out_event)
            record.loaded.append(dev)
            for held, (dtype, offset, size, stride) in views:
                held.tensor = torch.empty(0, dtype=dtype, device=dev.device).set_(
                    dev.untyped_storage(), offset, size, stride)
        record.groups = []  # host copies released
        record.load_event = event
        record.is_loaded = True
        self.memory.add(record.moved_bytes)

    def before_backward(self, mb: int) -> None:
        """Refuse I (or B) of a unit whose tensors are on host or not recomputed; on CUDA make
        the compute stream wait for its load."""
        if mb in self.checkpoints:
            raise RuntimeError(f"stage {self.index}: backward of microbatch {mb} before its R "
                               "(its forward kept only the stage input)")
        record = self.offloaded.pop(mb, None)
        if record is None:
            return
        if not record.is_loaded:
            self.offloaded[mb] = record
            raise RuntimeError(f"stage {self.index}: backward of microbatch {mb} before its L "
                               "(its saved tensors are on host)")
        record.copies.wait(record.loaded, record.load_event)

    @property
    def mode_leftovers(self) -> list[str]:
        """Units whose mode ops did not finish (a step must end without any)."""
        return ([f"stage {self.index} microbatch {mb}: no R" for mb in self.checkpoints]
                + [f"stage {self.index} microbatch {mb}: no backward after O"
                   for mb in self.offloaded])
