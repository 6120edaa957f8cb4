#!/usr/bin/env python3
"""A reference trainer that keeps rota's checkpoint/resume contract (docs/launchers.md). Copy it.

Each start resumes from the latest checkpoint, trains a small model on synthetic data until a stop
signal (SIGTERM, SIGINT, SIGUSR1), the planned steps (--stop-at-planned) or the job's total steps,
then writes a checkpoint and the progress report and exits 0. Alone or under torchrun:

    python examples/train_reference.py --batch-size 64
    torchrun --nnodes=$ROTA_NUM_NODES --node_rank=$ROTA_NODE_RANK --master_addr=$ROTA_MASTER_ADDR \
        --master_port=$ROTA_MASTER_PORT --nproc_per_node=1 examples/train_reference.py

torchrun itself exits 1 after SIGTERM however cleanly its workers stop: see --done-file and
examples/README.md for the command that keeps such a round from failing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time

STARTED = time.monotonic()  # process start, for startup_s: counts the slow `import torch` below

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
FEATURES, CLASSES = 256, 10


def env_int(name: str) -> int | None:
    """A whole-number ROTA_* variable (None when unset); a one-line error and exit 2 otherwise."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if not re.fullmatch(r"[0-9]{1,18}", raw):
        print(
            f"train_reference.py: error: {name} must be a whole number of steps (0 to 18 digits), got {raw!r}",
            file=sys.stderr,
        )
        sys.exit(2)
    return int(raw)


def make_model(kind: str) -> nn.Module:
    if kind == "cnn":  # a tiny CNN on 16x16 single-channel "images"
        return nn.Sequential(
            nn.Unflatten(1, (1, 16, 16)),
            nn.Conv2d(1, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(8 * 8 * 8, CLASSES),
        )
    return nn.Sequential(nn.Linear(FEATURES, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, CLASSES))


def synthetic_batch(step: int, rank: int, batch_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch `step` of rank `rank`: the same on every restart, so resumed runs see the same data.
    Labels come from a fixed random "teacher", so the loss really falls."""
    teacher = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(0))
    inputs = torch.randn(batch_size, FEATURES, generator=torch.Generator().manual_seed(step * 1009 + rank))
    return inputs.to(device), (inputs @ teacher).argmax(1).to(device)


def checksum(model: nn.Module) -> str:
    """A fingerprint of the parameters, printed at save and at resume (the two must agree)."""
    return f"{sum(p.detach().double().sum().item() for p in model.parameters()):.12g}"


def stop_reason(received: list[str], round_steps: int, step: int, planned: int | None, total: int | None) -> str:
    """Why to stop now ("" to go on)."""
    if received:
        return f"signal received: {received[0]}"
    if total is not None and step >= total:
        return "total steps reached"
    if planned is not None and round_steps >= planned:
        return "planned steps done"
    return ""


def agree(reason: str, world: int, device: torch.device) -> str:
    """Every rank stops at the same step (one tiny all-reduce per step), so that no rank waits
    forever in a collective the others have left."""
    if world == 1:
        return reason
    flag = torch.tensor([int(bool(reason))], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return reason or ("another rank stopped" if flag.item() else "")


def write_atomically(path: str, write) -> None:
    """Write to a temporary file, then rename: a reader never sees half a file."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def setup_device(local_rank: int, world: int) -> torch.device:
    """This process's GPU (or the CPU); joins the process group when there are several processes."""
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return device


def resume(model: nn.Module, optimizer: torch.optim.Optimizer, path: str, device: torch.device, log) -> int:
    """Load the latest checkpoint, if any, into model and optimizer; the step it was taken at."""
    if not os.path.exists(path):
        log(f"no checkpoint at {path}: starting from step 0")
        return 0
    state = torch.load(path, map_location=device)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    log(f"resumed from step {state['step']} (checksum {checksum(model)}) from {path}")
    return int(state["step"])


def save(model: nn.Module, optimizer: torch.optim.Optimizer, step: int, path: str, log) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
    state["checksum"] = checksum(model)
    write_atomically(path, lambda handle: torch.save(state, handle))
    log(f"checkpoint written at step {step} (checksum {state['checksum']}) to {path}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--checkpoint-dir", help="default: $ROTA_CHECKPOINT_DIR or ./checkpoints/<ROTA_JOB_ID>")
    parser.add_argument("--stop-at-planned", action="store_true", help="stop after ROTA_PLANNED_STEPS steps")
    parser.add_argument("--step-time", type=float, default=0.0, help="sleep S seconds per step (a slower model)")
    parser.add_argument("--log-every", type=int, default=100, help="print the loss every N steps (0: never)")
    parser.add_argument("--done-file", help="each node's local rank 0 creates it after a clean stop (torchrun)")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    # 1. Stop signals only set a flag: the current step finishes, then we checkpoint once and exit 0.
    received: list[str] = []
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda number, _frame: received.append(signal.Signals(number).name))

    job_id = os.environ.get("ROTA_JOB_ID", "local")
    total, planned = env_int("ROTA_TOTAL_STEPS") or None, env_int("ROTA_PLANNED_STEPS")  # total 0: unknown
    if not args.stop_at_planned:
        planned = None
    safe_id = re.sub(r"[^A-Za-z0-9_.-]", "_", job_id).lstrip(".") or "job"  # never leaves ./checkpoints
    ckpt_dir = args.checkpoint_dir or os.environ.get("ROTA_CHECKPOINT_DIR") or os.path.join("checkpoints", safe_id)
    ckpt_path = os.path.join(ckpt_dir, "latest.pt")  # one file, replaced atomically: always the latest

    # 2. torch.distributed only for several processes (torchrun sets WORLD_SIZE, RANK, LOCAL_RANK).
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    device = setup_device(local_rank, world)

    def log(message: str) -> None:
        sys.stdout.write(f"[{job_id} rank {rank}] {message}\n")  # one write: ranks' lines never mix
        sys.stdout.flush()

    # 3. Resume: every rank loads the same checkpoint (a multi-node job needs a shared folder).
    torch.manual_seed(0)
    model = make_model(args.model).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    step = resume(model, optimizer, ckpt_path, device, log)
    net = nn.parallel.DistributedDataParallel(model) if world > 1 else model

    # 4. Train until a signal, the planned steps or the total.
    first_step = step
    log(f"training from step {step} (planned {planned}, total {total}, world {world}, device {device})")
    train_start = time.monotonic()
    log(f"startup_s {train_start - STARTED:.3f} (process start to first step)")
    while True:
        reason = agree(stop_reason(received, step - first_step, step, planned, total), world, device)
        if reason:
            break
        inputs, labels = synthetic_batch(step, rank, args.batch_size, device)
        loss = nn.functional.cross_entropy(net(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if args.step_time > 0:
            time.sleep(args.step_time)
        if args.log_every and step % args.log_every == 0:
            log(f"step {step} loss {loss.item():.4f}")
    elapsed_s = time.monotonic() - train_start  # training only: no start-up, no checkpoint writing
    log(f"{reason}: stopping at step {step}")

    # 5. Rank 0 writes the checkpoint, then the report; the barrier keeps the others alive until then.
    if rank == 0:
        save(model, optimizer, step, ckpt_path, log)
        report = {"job_id": job_id, "steps_done": step, "finished": total is not None and step >= total}
        report["elapsed_s"] = round(elapsed_s, 3)  # startup_s is printed: the format refuses unknown keys
        if os.environ.get("ROTA_PROGRESS_FILE"):
            write_atomically(os.environ["ROTA_PROGRESS_FILE"], lambda handle: handle.write(json.dumps(report).encode()))
            log(f"progress reported to {os.environ['ROTA_PROGRESS_FILE']}: {json.dumps(report)}")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if args.done_file and local_rank == 0:  # torchrun exits 1 after SIGTERM even when we stop cleanly
        open(args.done_file, "w").close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
