"""The example's network: a small MLP classifier on 64 features, 10 classes (torch only)."""

from __future__ import annotations

from torch import nn


def make_model(tiny: bool) -> nn.Module:
    width = 32 if tiny else 512
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
