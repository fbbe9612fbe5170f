"""A GPT-style decoder, sized by flags, and its split into pipeline stages.

The runner proves schedules on a real model rather than a toy MLP, so the model has every part
a decoder has: token and positional embeddings, pre-norm blocks (causal self-attention and MLP),
a final norm, an LM head and cross-entropy. Every parameterised op goes through
:mod:`zbsolve.runtime.iw_split`, which runs plain torch ops unless a weight-gradient sink is
active (then the weight gradients are deferred to W). The single-process reference therefore
runs exactly vanilla torch.

Layers are split into S logical stages as evenly as possible (earlier stages take the extra
layer); the embeddings live on stage 0 and the final norm, head and loss on stage S-1.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as Fn
from torch import nn

from zbsolve.runtime import iw_split as iw

if TYPE_CHECKING:
    from zbsolve.runtime.segmented import BlockKV, SegmentKV

PRESETS: dict[str, dict[str, int]] = {
    # small enough for a CPU test suite, large enough that matmuls dominate
    "gpt-tiny": dict(layers=8, hidden=64, heads=4, seq=32, vocab=128, microbatch_size=2),
    "gpt-small": dict(layers=12, hidden=256, heads=8, seq=128, vocab=1024, microbatch_size=4),
    # a GPU-sized model for timing runs (~0.2B parameters)
    "gpt-medium": dict(layers=16, hidden=1024, heads=16, seq=512, vocab=8192, microbatch_size=4),
}


@dataclass(frozen=True)
class GPTConfig:
    layers: int = 8
    hidden: int = 64
    heads: int = 4
    seq: int = 32
    vocab: int = 128
    microbatch_size: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "seq", "vocab", "microbatch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"model {name}: expected an integer >= 1, got {value!r}")
        if self.hidden % self.heads:
            raise ValueError(
                f"model hidden ({self.hidden}) must be divisible by heads ({self.heads}); "
                "change --hidden or --heads"
            )

    @staticmethod
    def preset(name: str, **overrides: int | None) -> GPTConfig:
        if name not in PRESETS:
            raise ValueError(f"unknown model {name!r}; known presets: {', '.join(PRESETS)}")
        fields = dict(PRESETS[name])
        fields.update({k: v for k, v in overrides.items() if v is not None})
        return GPTConfig(**fields)

    def with_(self, **changes: int) -> GPTConfig:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class LayerNorm(nn.Module):
    """LayerNorm whose affine part is a separate op, so its weight gradient can be deferred."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return iw.layer_norm(x, self.weight, self.bias)


class Linear(nn.Module):
    def __init__(self, n_in: int, n_out: int, bias: bool = True) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(n_in)
        self.weight = nn.Parameter(torch.empty(n_out, n_in).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.zeros(n_out)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return iw.linear(x, self.weight, self.bias)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln1(x)); x + mlp(ln2(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        h = cfg.hidden
        self.heads = cfg.heads
        self.ln1 = LayerNorm(h)
        self.qkv = Linear(h, 3 * h)
        self.proj = Linear(h, h)
        self.ln2 = LayerNorm(h)
        self.fc = Linear(h, 4 * h)
        self.out = Linear(4 * h, h)

    def forward(self, x: torch.Tensor, kv: BlockKV | None = None) -> torch.Tensor:
        """``kv``: this block's keys and values of the earlier segments of the microbatch (a
        sequence segment's forward, :mod:`zbsolve.runtime.segmented`); None: a whole sequence."""
        b, t, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (z.view(b, t, self.heads, h // self.heads).transpose(1, 2) for z in (q, k, v))
        if kv is None:
            y = Fn.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = kv.attend(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, h))
        return x + self.out(Fn.gelu(self.fc(self.ln2(x))))


class Embedding(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.tok = nn.Parameter(torch.randn(cfg.vocab, cfg.hidden) * 0.02)
        self.pos = nn.Parameter(torch.randn(cfg.seq, cfg.hidden) * 0.02)

    def forward(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``offset``: the position of the first token (a later sequence segment's)."""
        return iw.add_position(iw.embedding(tokens, self.tok), self.pos, offset)


class Head(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.norm = LayerNorm(cfg.hidden)
        self.lm = Linear(cfg.hidden, cfg.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm(self.norm(x))


class StageModule(nn.Module):
    """One logical stage: [embedding] + its blocks + [final norm and LM head].

    ``forward`` takes token ids on stage 0 and hidden states elsewhere, and returns hidden
    states, or logits on the last stage (the loss is applied by the runner, as torch's
    pipelining runtime also does).
    """

    def __init__(self, index: int, embed: Embedding | None, blocks: list[Block],
                 head: Head | None, first_layer: int) -> None:
        super().__init__()
        self.index = index
        self.first_layer = first_layer
        self.embed = embed
        self.blocks = nn.ModuleList(blocks)
        self.head = head

    def forward(self, x: torch.Tensor, kv: SegmentKV | None = None) -> torch.Tensor:
        """``kv``: one sequence segment's view of its microbatch's key/value cache (its offset
        and every block's earlier keys and values); None: the whole sequence."""
        if self.embed is not None:
            x = self.embed(x, kv.start if kv is not None else 0)
        for i, block in enumerate(self.blocks):
            x = block(x, kv.block(i) if kv is not None else None)
        if self.head is not None:
            x = self.head(x)
        return x

    def global_names(self) -> dict[str, nn.Parameter]:
        """Parameters under the names they have in the unsplit model (``blocks.3.fc.weight``)."""
        out = {}
        for name, param in self.named_parameters():
            if name.startswith("blocks."):
                _, i, rest = name.split(".", 2)
                name = f"blocks.{self.first_layer + int(i)}.{rest}"
            out[name] = param
        return out


def layer_split(layers: int, n_stages: int) -> list[range]:
    """Which blocks each stage holds: contiguous, as even as possible, earlier stages larger."""
    if n_stages < 1:
        raise ValueError(f"stages: expected >= 1, got {n_stages}")
    if layers < n_stages:
        raise ValueError(
            f"the model has {layers} layers but the table has {n_stages} logical stages; every "
            f"stage needs at least one layer: pass --layers {n_stages} or more"
        )
    base, extra = divmod(layers, n_stages)
    out, start = [], 0
    for s in range(n_stages):
        size = base + (1 if s < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


class GPT(nn.Module):
    """The unsplit model: the single-process reference runs this."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(cfg.seed)
        try:
            self.embed = Embedding(cfg)
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
            self.head = Head(cfg)
        finally:
            torch.random.set_rng_state(generator_state)
        self.cfg = cfg

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def build_stage_modules(cfg: GPTConfig, n_stages: int) -> list[StageModule]:
    """All S stages of the model initialised from ``cfg.seed`` (identical on every rank).

    Built from the unsplit GPT so that the stages hold exactly the reference's parameters.
    """
    ranges = layer_split(cfg.layers, n_stages)
    full = GPT(cfg)
    stages = []
    for s, layers in enumerate(ranges):
        stages.append(StageModule(
            s,
            full.embed if s == 0 else None,
            [full.blocks[i] for i in layers],
            full.head if s == n_stages - 1 else None,
            layers.start,
        ))
    return stages


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy of one microbatch."""
    return Fn.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make_batch(cfg: GPTConfig, microbatches: int, step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The (tokens, targets) of one optimizer step, the same on every rank (seeded)."""
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + 7919 * (step + 1))
    n = microbatches * cfg.microbatch_size
    data = torch.randint(0, cfg.vocab, (n, cfg.seq + 1), generator=gen)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def microbatch(t: torch.Tensor, cfg: GPTConfig, mb: int) -> torch.Tensor:
    size = cfg.microbatch_size
    return t[mb * size:(mb + 1) * size]
