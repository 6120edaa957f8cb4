"""Train the example model as a plain script, reporting each step for `rota profile --command`.

The protocol: after every step, print `ROTA_STEP <steps done so far>` on
stdout and flush. The profiler sets ROTA_DEVICE, ROTA_BATCH_SIZE (when it
measures batch sizes) and ROTA_SCALE, and stops the script when it has
measured enough; run alone, it trains for --steps steps.
"""

from __future__ import annotations

import argparse
import os

import torch
from net import make_model  # this script's folder is on sys.path
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=int(os.environ.get("ROTA_BATCH_SIZE", "32")))
    args = parser.parse_args()
    device = os.environ.get("ROTA_DEVICE", "cpu")
    torch.manual_seed(0)
    model = make_model(tiny=os.environ.get("ROTA_SCALE") == "tiny").to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs = torch.randn(args.batch_size, 64, device=device)
    labels = torch.randint(0, 10, (args.batch_size,), device=device)
    for step in range(1, args.steps + 1):
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
        print(f"ROTA_STEP {step}", flush=True)


if __name__ == "__main__":
    main()
