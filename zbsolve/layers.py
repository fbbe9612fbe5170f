"""Per-layer costs: what a profiler measures or a cost model estimates, before a layer split.

A pipeline instance has per-*stage* times and memory. Which layers form a stage is a decision
(the layer split), so the costs that come before it are per *layer*: the embedding, each
decoder block and the head are layers with their own costs. ``LayerProfile.to_instance`` sums
contiguous blocks of layers into stages; the profiler (``zbsolve.profiler``) and the analytic
cost model (``zbsolve.plan``) both produce a ``LayerProfile``, so the split search and the
solver never care where the numbers came from.

Units: times in milliseconds, memory in bytes (per microbatch). The instance produced expresses
memory in GiB, so CP-SAT's integer scaling sees numbers of a sensible size.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

GIB = float(2**30)


class LayerProfileError(ValueError):
    """A malformed layer profile or split; the message names the field and the fix."""


@dataclass(frozen=True)
class LayerCost:
    """One layer's costs for one microbatch."""

    name: str  # fully qualified module name(s), e.g. "tok_embeddings" or "layers.3"
    F: float  # forward, ms
    I: float  # noqa: E741 - backward for inputs, ms (the papers' B)
    W: float  # backward for weights, ms
    activation: float  # bytes allocated by F and kept for the backward
    weight: float = 0.0  # bytes of that activation still held after I, until W (<= activation)
    params: float = 0.0  # parameter bytes (weights only; gradients/optimizer state are derived)
    boundary: float = 0.0  # bytes of the output tensor handed to the next layer

    def __post_init__(self) -> None:
        for key in ("F", "I", "W", "activation", "weight", "params", "boundary"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and math.isfinite(value) and value >= 0):
                raise LayerProfileError(f"layer {self.name!r}: {key} must be a finite number "
                                        f">= 0, got {value!r}")
        if self.weight > self.activation * (1 + 1e-9):
            raise LayerProfileError(
                f"layer {self.name!r}: weight {self.weight:g} exceeds activation "
                f"{self.activation:g}; the part kept for W is a part of the activation")

    def __add__(self, other: LayerCost) -> LayerCost:
        """Two consecutive layers as one: costs add, the boundary is the later layer's."""
        return LayerCost(
            name=f"{self.name}+{other.name}", F=self.F + other.F, I=self.I + other.I,
            W=self.W + other.W, activation=self.activation + other.activation,
            weight=self.weight + other.weight, params=self.params + other.params,
            boundary=other.boundary)


@dataclass(frozen=True)
class LayerProfile:
    """The ordered layers of a model (first to last) with their costs."""

    layers: tuple[LayerCost, ...]
    source: str = ""  # how the numbers were obtained ("profiled on cpu", "analytic h100", ...)
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.layers:
            raise LayerProfileError("layers: a profile needs at least one layer")

    def __len__(self) -> int:
        return len(self.layers)

    def check_split(self, split: Sequence[int]) -> None:
        """A split is the number of consecutive layers in each logical stage, in stage order."""
        bad = [i for i, n in enumerate(split)
               if isinstance(n, bool) or not isinstance(n, int) or n < 1]
        if bad:
            raise LayerProfileError(f"split[{bad[0]}]: every stage needs an integer >= 1 layers, "
                                    f"got {split[bad[0]]!r}")
        if sum(split) != len(self.layers):
            raise LayerProfileError(
                f"split: {list(split)} covers {sum(split)} layers, the profile has "
                f"{len(self.layers)}; the counts must add up to the number of layers")

    def stages(self, split: Sequence[int]) -> list[LayerCost]:
        """The summed cost of each stage's block of layers."""
        self.check_split(split)
        out, start = [], 0
        for n in split:
            block = self.layers[start:start + n]
            total = block[0]
            for layer in block[1:]:
                total = total + layer
            out.append(total)
            start += n
        return out

    def to_instance(self, split: Sequence[int], *, devices: int, microbatches: int,
                    chunks: int = 1, placement: str | list[int] = "loop", comm: float = 0.0,
                    limit_gib: float | list[float] | None = None, name: str | None = None,
                    extra: dict[str, Any] | None = None):
        """An instance for this split (times in ms, memory in GiB)."""
        from zbsolve.instance import load_instance  # lazy: keep this module import-light

        stages = self.stages(split)
        if len(stages) != devices * chunks:
            raise LayerProfileError(
                f"split: {len(stages)} stages, but devices x chunks = {devices * chunks}")
        data: dict[str, Any] = {
            "name": name or f"{self.meta.get('model', 'model')}-p{devices}-m{microbatches}",
            "devices": devices, "microbatches": microbatches, "chunks": chunks,
            "placement": placement,
            "times": {k: [getattr(s, k) for s in stages] for k in ("F", "I", "W")},
            "comm": comm,
            "memory": {"activation": [s.activation / GIB for s in stages],
                       "weight": [s.weight / GIB for s in stages], "limit": limit_gib},
            "meta": {"split": list(split), "source": self.source, **(extra or {})},
        }
        return load_instance(data)

    # ------------------------------------------------------------------ io
    def to_dict(self) -> dict[str, Any]:
        return {"format": "zbsolve-layers", "version": 1, "source": self.source,
                "meta": self.meta, "layers": [asdict(layer) for layer in self.layers]}

    @staticmethod
    def from_dict(data: Any, where: str = "layer profile") -> LayerProfile:
        if not isinstance(data, dict) or data.get("format") != "zbsolve-layers":
            raise LayerProfileError(f"{where}: expected \"format\": \"zbsolve-layers\"")
        if data.get("version") != 1:
            raise LayerProfileError(f"{where}: version: expected 1, got {data.get('version')!r}")
        rows = data.get("layers")
        if not isinstance(rows, list):
            raise LayerProfileError(f"{where}: layers: expected a list of layer costs")
        layers = []
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise LayerProfileError(f"{where}: layers[{i}]: expected a mapping")
            try:
                layers.append(LayerCost(**row))
            except TypeError as exc:
                raise LayerProfileError(f"{where}: layers[{i}]: {exc}") from None
            except LayerProfileError as exc:
                raise LayerProfileError(f"{where}: layers[{i}]: {exc}") from None
        return LayerProfile(tuple(layers), str(data.get("source", "")), dict(data.get("meta", {})))

    def dump(self, path: str | Path) -> None:
        """Atomic: a temporary file beside the target, then a rename."""
        from zbsolve.io import atomic_write_text

        atomic_write_text(path, json.dumps(self.to_dict(), indent=1))

    @staticmethod
    def load(path: str | Path) -> LayerProfile:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise LayerProfileError(f"{path}: cannot read a layer profile: {exc}") from None
        return LayerProfile.from_dict(data, str(path))
