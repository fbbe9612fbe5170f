"""A ``--module`` model for the step-boundary tests: an embedding, four tanh layers and a head.

No attention: a key bias's gradient is zero in exact arithmetic and rounding noise in practice,
and AdamW turns any such noise into an update of the size of the learning rate, so no two
summation orders (the pipeline's and the reference's) agree on it at rtol 1e-5. Every
parameter here has a real gradient.
"""

from __future__ import annotations

import torch
from torch import nn


def build():
    torch.manual_seed(0)
    layers = [nn.Embedding(32, 16),
              *(nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(4)),
              nn.Linear(16, 32)]
    example = torch.arange(24).reshape(3, 8) % 32  # one microbatch of 3 sequences

    def loss_fn(logits):
        return (logits - 0.5).square().mean()

    return layers, example, loss_fn
