"""A lab's data-parallel job, profiled without touching the project (the factory form).

`rota profile --workload examples.lab_job:build --scale-factors 1,2,4` calls
`build` once per rank. For k > 1 the profiler has already formed the gang
(`torch.distributed` is initialised; RANK, LOCAL_RANK and WORLD_SIZE are set as
torchrun sets them) and wraps the returned model in DistributedDataParallel
itself, so the factory is the same for one process and for many. `train.py`
is the same job as a torchrun-style script (`rota profile --command`).
"""

from __future__ import annotations

import torch

from models.spec import BuildContext, Built

from .net import batch, loss, make_model

DEFAULT_BATCH = 8  # sequences per process when the profiler measures no batch size
SEQUENCE = 64


def build(ctx: BuildContext) -> Built:
    torch.manual_seed(0)
    size = ctx.batch_size or DEFAULT_BATCH
    model = make_model(ctx.tiny).to(ctx.device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def train_step(model, data):
        optimizer.zero_grad(set_to_none=True)
        loss(model, *data).backward()  # under DDP, backward all-reduces the gradients
        optimizer.step()

    return Built(model, optimizer, lambda: batch(size, SEQUENCE, ctx.device), train_step, size)
