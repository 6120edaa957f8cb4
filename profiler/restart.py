"""What a restart costs: saving and restoring a checkpoint of a built workload.

A preempted job pays, on top of the lost round, the time to write its state,
start a new process (measured by the worker as `startup_s`) and read its state
back. Here: `torch.save` of the model and optimizer state dicts to a file in a
temporary folder on local disk (flushed and fsynced, so the bytes are on the
disk), then `torch.load` and `load_state_dict` back into the live objects.
Between the two the file is dropped from the page cache where the OS allows
it (posix_fadvise), so the load reads the disk as a fresh process on a fresh
node would, not memory. Runs inside the measuring worker, after timing.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CheckpointTimes:
    save_s: float
    load_s: float
    size_bytes: int


def stateful_parts(obj: Any) -> list[Any]:
    """The objects with a state dict in a `Built.model` / `Built.optimizer`: one
    object, or a tuple/list/dict of them (CycleGAN has two optimizers)."""
    if obj is None:
        return []
    if hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [part for item in obj for part in stateful_parts(item)]
    return []


def _drop_page_cache(path: str) -> None:
    if not hasattr(os, "posix_fadvise"):
        return  # macOS: the load below may read from memory
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def checkpoint_round_trip(
    model: Any, optimizer: Any, device: str, directory: str | None = None, sync: Callable[[], None] | None = None
) -> CheckpointTimes | None:
    """Seconds to save and to load model + optimizer state; None when there is no
    state to save (a workload given as a bare step callable)."""
    import torch

    models, optimizers = stateful_parts(model), stateful_parts(optimizer)
    if not models:
        return None
    sync = sync or (lambda: None)
    with tempfile.TemporaryDirectory(prefix="rota-checkpoint-", dir=directory) as folder:
        path = os.path.join(folder, "checkpoint.pt")
        sync()
        began = time.perf_counter()
        state = {"model": [m.state_dict() for m in models], "optimizer": [o.state_dict() for o in optimizers]}
        with open(path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        save_s = time.perf_counter() - began
        del state
        size = os.path.getsize(path)
        _drop_page_cache(path)
        began = time.perf_counter()
        loaded = torch.load(path, map_location=device, weights_only=True)
        for part, saved in zip(models, loaded["model"]):
            part.load_state_dict(saved)
        for part, saved in zip(optimizers, loaded["optimizer"]):
            part.load_state_dict(saved)
        sync()
        load_s = time.perf_counter() - began
    return CheckpointTimes(save_s, load_s, size)
