"""A user's ``--module`` build function for the tests: (layers, example_input, loss_fn)."""

from __future__ import annotations

import torch
from torch import nn


def build():
    layers = [nn.Embedding(32, 16), nn.Sequential(nn.Linear(16, 16), nn.Tanh()),
              nn.Sequential(nn.Linear(16, 16), nn.Tanh()), nn.Linear(16, 32)]
    example = torch.arange(24).reshape(3, 8) % 32  # one microbatch of 3 sequences

    def loss_fn(logits):
        return logits.square().mean()

    return layers, example, loss_fn
