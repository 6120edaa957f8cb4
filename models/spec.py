"""What a reference workload is, seen from the profiler (no torch here).

A `WorkloadSpec` names a model family the way Gavel does and points at a
builder function by "module:function", so the registry can be listed (plans,
dry runs) without importing torch. A builder turns a `BuildContext` into a
`Built`: model, optimizer(s), a batch maker and one training step.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

SCALES = ("full", "tiny")


@dataclass(frozen=True)
class WorkloadSpec:
    """One model family: its table name, batch sizes and data-parallel support."""

    model: str  # the table's `model`, e.g. "ResNet-18"
    family: str  # module under models/, e.g. "image_classification"
    builder: str  # "models.image_classification:build_resnet18"
    batch_sizes: tuple[int, ...]  # empty: Gavel names it without a batch size
    scale_factors: tuple[int, ...] = (1,)
    description: str = ""
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)  # builder kwargs

    @property
    def data_parallel(self) -> bool:
        return max(self.scale_factors) > 1

    @property
    def batch_choices(self) -> tuple[int | None, ...]:
        return self.batch_sizes or (None,)


@dataclass(frozen=True)
class BuildContext:
    """Where and how big: the builder's only input."""

    batch_size: int | None = None  # None for A3C / CycleGAN (fixed by the workload)
    device: str = "cpu"  # "cpu" or "cuda:<index>"
    scale: str = "full"  # "tiny" shrinks inputs and widths for CPU tests
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, got {self.scale!r}")

    @property
    def tiny(self) -> bool:
        return self.scale == "tiny"


@dataclass
class Built:
    """A ready workload. `train_step(model, batch)` takes the model explicitly so
    the profiler can pass a DistributedDataParallel wrapper instead."""

    model: Any
    optimizer: Any
    make_batch: Callable[[], Any]
    train_step: Callable[[Any, Any], Any]
    samples_per_step: int


def load_builder(path: str) -> Callable[[BuildContext], Built]:
    """Import "package.module:function" lazily (this is where torch gets imported)."""
    module_name, _, function_name = path.partition(":")
    if not module_name or not function_name:
        raise ValueError(f"builder must look like 'module:function', got {path!r}")
    return getattr(importlib.import_module(module_name), function_name)


def build(spec: WorkloadSpec, ctx: BuildContext) -> Built:
    options = {**spec.options, **ctx.options}
    ctx = BuildContext(ctx.batch_size, ctx.device, ctx.scale, options)
    return load_builder(spec.builder)(ctx)
