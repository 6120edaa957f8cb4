"""A user's own model, profiled without touching the project.

`build` is the factory `rota profile --workload examples.my_model:build`
calls: it takes a `models.spec.BuildContext` (batch size, device, scale) and
returns a `models.spec.Built`, so the profiler measures it like its reference
models, checkpoint cost included. `train.py` trains the same model as a plain
script reporting its steps (`rota profile --command`).
"""

from __future__ import annotations

import torch
from torch import nn

from models.spec import BuildContext, Built

from .net import make_model

DEFAULT_BATCH = 32  # when the profiler measures no batch size


def build(ctx: BuildContext) -> Built:
    torch.manual_seed(0)
    n = ctx.batch_size or DEFAULT_BATCH
    model = make_model(ctx.tiny).to(ctx.device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def make_batch():
        return torch.randn(n, 64, device=ctx.device), torch.randint(0, 10, (n,), device=ctx.device)

    def train_step(model, batch):
        inputs, labels = batch
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        return loss

    return Built(model, optimizer, make_batch, train_step, n)
