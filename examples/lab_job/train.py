"""The example job as a plain torchrun-style script, reporting its steps for `rota profile --command`.

Run it alone (`python train.py`) or as a gang (`torchrun --nproc-per-node 4 train.py`);
`rota profile --command` starts it the way torchrun does. With WORLD_SIZE > 1 it
joins the gang (env:// rendezvous: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)
and trains with DistributedDataParallel. After every step rank 0 prints
`ROTA_STEP <steps done>` and flushes.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from net import batch, loss, make_model  # this script's folder is on sys.path
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=int(os.environ.get("ROTA_BATCH_SIZE", "8")))
    args = parser.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    if world > 1:
        dist.init_process_group(os.environ.get("ROTA_DIST_BACKEND", "nccl" if device != "cpu" else "gloo"))
    torch.manual_seed(0)
    model = make_model(tiny=os.environ.get("ROTA_SCALE") == "tiny").to(device).train()
    if world > 1:
        model = DistributedDataParallel(model, device_ids=[local_rank] if device != "cpu" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = batch(args.batch_size, 64, device)
    for step in range(1, args.steps + 1):
        optimizer.zero_grad(set_to_none=True)
        loss(model, *data).backward()
        optimizer.step()
        if rank == 0:
            print(f"ROTA_STEP {step}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
