"""Workloads with known behaviour, for tests and the overhead benchmark.

They follow the builder contract of models/ (`BuildContext` → `Built`) but need
no torch: `busy` spins for a known step time, `oom` runs out of memory, `crash`
dies. Options come through `BuildContext.options`.
"""

from __future__ import annotations

import os
import time

from models.spec import BuildContext, Built


def spin(seconds: float) -> None:
    # Busy-wait rather than sleep: sleep overshoots by a scheduler tick.
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def build_busy(ctx: BuildContext) -> Built:
    step_s = float(ctx.options.get("step_s", 0.005))
    return Built(
        model=None,
        optimizer=None,
        make_batch=lambda: None,
        train_step=lambda model, batch: spin(step_s),
        samples_per_step=ctx.batch_size or 1,
    )


def _out_of_memory(flavour: str) -> BaseException:
    if flavour == "torch":
        import torch

        return torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
    return MemoryError("out of memory (simulated)")


def build_oom(ctx: BuildContext) -> Built:
    """Raises OOM while building (`at="build"`) or on the n-th step (`at="step"`)."""
    flavour = ctx.options.get("flavour", "memory")
    if ctx.options.get("at", "step") == "build":
        raise _out_of_memory(flavour)
    after = int(ctx.options.get("after_steps", 2))
    count = {"steps": 0}

    def train_step(model, batch):
        count["steps"] += 1
        if count["steps"] > after:
            raise _out_of_memory(flavour)
        spin(0.002)

    return Built(None, None, lambda: None, train_step, ctx.batch_size or 1)


def build_crash(ctx: BuildContext) -> Built:
    """Exits hard (like a segfault) after `after_steps` steps: no result is sent."""
    after = int(ctx.options.get("after_steps", 2))
    count = {"steps": 0}

    def train_step(model, batch):
        count["steps"] += 1
        if count["steps"] > after:
            os._exit(int(ctx.options.get("exit_code", 3)))
        spin(0.002)

    return Built(None, None, lambda: None, train_step, ctx.batch_size or 1)


def build_device_alloc(ctx: BuildContext) -> Built:
    """Allocates `gib` GiB on the device at each step: a real out-of-memory where that is too much."""
    import torch

    size = int(float(ctx.options.get("gib", 1.0)) * 2**30)

    def train_step(model, batch):
        block = torch.empty(size, dtype=torch.uint8, device=ctx.device)
        del block

    return Built(None, None, lambda: None, train_step, ctx.batch_size or 1)
