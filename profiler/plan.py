"""What to measure: the selection the user asked for, turned into tasks.

Following Gavel's profiler (spec §8): on every worker type, every selected job
type alone at every allowed scale factor, and, at scale factor 1 only, every
unordered pair including a job type with itself. Distributed + co-located
runs are not profiled (Gavel never packs distributed jobs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations_with_replacement

import models
from models.spec import WorkloadSpec
from planner.errors import InputError
from planner.formats.table import model_label, split_model_label
from profiler.command import is_command
from profiler.devices import DeviceType

DEFAULT_SCALE_FACTORS = (1, 2, 4, 8)
# Rough start-up of a measurement (spawn, import torch, build, warm up), for
# estimates; measured on a 2-core CPU, where torchvision's import alone is ~2.5 s.
STARTUP_S = {"image_classification": 7.0}
DEFAULT_STARTUP_S = 5.0
EXTRA_PROCESS_S = 2.0  # processes of one measurement start together and compete


@dataclass(frozen=True)
class JobRef:
    """A job type as the profiler runs it: a workload spec and a batch size."""

    spec: WorkloadSpec
    batch_size: int | None

    @property
    def model(self) -> str:
        return self.spec.model

    @property
    def label(self) -> str:
        return model_label(self.model, self.batch_size)


Key = tuple  # (worker_type, model, batch_size, scale_factor, partner_model, partner_batch_size)


@dataclass(frozen=True)
class Task:
    """One measurement: a job alone (k processes) or a co-located pair."""

    device: DeviceType
    jobs: tuple[JobRef, ...]
    scale_factor: int = 1

    @property
    def is_pair(self) -> bool:
        return len(self.jobs) == 2

    @property
    def mode(self) -> str:
        if self.is_pair:
            return "pair"
        return "data_parallel" if self.scale_factor > 1 else "solo"

    @property
    def processes(self) -> int:
        return 2 if self.is_pair else self.scale_factor

    def row_keys(self) -> list[Key]:
        wt, k = self.device.worker_type, self.scale_factor
        if not self.is_pair:
            (job,) = self.jobs
            return [(wt, job.model, job.batch_size, k, None, None)]
        a, b = self.jobs
        keys = [
            (wt, a.model, a.batch_size, k, b.model, b.batch_size),
            (wt, b.model, b.batch_size, k, a.model, a.batch_size),
        ]
        return keys[:1] if keys[0] == keys[1] else keys  # a job type with itself is one row

    @property
    def label(self) -> str:
        what = " + ".join(j.label for j in self.jobs)
        return f"{self.device.worker_type}: {what}" + (f" x{self.scale_factor}" if self.scale_factor > 1 else "")

    def estimate_s(self, budget_s: float) -> float:
        startup = max(STARTUP_S.get(j.spec.family, DEFAULT_STARTUP_S) for j in self.jobs)
        return startup + EXTRA_PROCESS_S * (self.processes - 1) + budget_s


@dataclass(frozen=True)
class PairSample:
    """Measure part of the pairs, estimate the rest (`rota table estimate`).

    `reference:K`: every job type against K reference job types spread over the
    model families; `budget:SECONDS`: the largest K whose pair measurements fit
    in that many seconds (by the plan's own time estimate).
    """

    kind: str  # "reference" | "budget"
    value: float


@dataclass(frozen=True)
class Selection:
    models: tuple[str, ...] | None = None  # None: every registered model
    batch_sizes: tuple[int, ...] | None = None  # None: every batch size
    pairs: str | tuple[tuple[str, str], ...] | PairSample = "all"  # "all" | "none" | labels | sample
    scale_factors: tuple[int, ...] = DEFAULT_SCALE_FACTORS
    gpt_size: str = "small"
    budget_s: float = 10.0  # timed seconds per measurement: prices pairs for --pairs budget:S
    registry: tuple[WorkloadSpec, ...] = field(default=())  # override, for tests
    user: tuple[WorkloadSpec, ...] = ()  # --workload / --command jobs; alone, they replace the reference set

    def reference(self) -> tuple[WorkloadSpec, ...]:
        return self.registry or models.workloads(self.gpt_size)

    def workloads(self) -> tuple[WorkloadSpec, ...]:
        return (*self.reference(), *self.user)


# --------------------------------------------------------------------------- parsing options


def split_list(text: str | None) -> list[str]:
    return [] if text is None else [part.strip() for part in text.split(",") if part.strip()]


def parse_ints(text: str | None, option: str) -> tuple[int, ...] | None:
    parts = split_list(text)
    if not parts:
        return None
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise InputError(f"expected comma-separated integers, got {text!r}", field=option) from None
    if any(v < 1 for v in values):
        raise InputError(f"values must be >= 1, got {text!r}", field=option)
    return values


_AT_FORM = re.compile(r"^(?P<model>[^@]+?)\s*@\s*(?P<bs>\d+)$")


def parse_job(text: str) -> tuple[str, int | None]:
    """'ResNet-18@16', 'ResNet-18 (batch size 16)' or 'A3C' → (model, batch size)."""
    text = text.strip()
    match = _AT_FORM.match(text)
    if match:
        return match["model"].strip(), int(match["bs"])
    return split_model_label(text)


def parse_pairs(text: str) -> str | tuple[tuple[str, str], ...] | PairSample:
    value = text.strip()
    if value.lower() in ("all", "none"):
        return value.lower()
    kind, _, amount = value.partition(":")
    if kind.strip().lower() in ("reference", "budget") and amount:
        kind = kind.strip().lower()
        try:
            number = int(amount) if kind == "reference" else float(amount)
        except ValueError:
            raise InputError(
                f"expected {kind}:{'K' if kind == 'reference' else 'SECONDS'}, got {value!r}", field="--pairs"
            ) from None
        if number <= 0:
            raise InputError(f"{kind} must be positive, got {value!r}", field="--pairs")
        return PairSample(kind, float(number))
    pairs = []
    for part in split_list(value):
        members = [m for m in part.split("+")]
        if len(members) != 2 or not all(m.strip() for m in members):
            raise InputError(f"expected 'all', 'none' or pairs like 'ResNet-18@16+LM@5', got {part!r}", field="--pairs")
        pairs.append((members[0].strip(), members[1].strip()))
    if not pairs:
        raise InputError("is empty (use 'all', 'none' or a list of pairs)", field="--pairs")
    return tuple(pairs)


# --------------------------------------------------------------------------- building the plan


def _spec(name: str, registry: Sequence[WorkloadSpec], option: str) -> WorkloadSpec:
    for spec in registry:
        if spec.model.lower() == name.strip().lower():
            return spec
    known = ", ".join(s.model for s in registry)
    raise InputError(f"unknown model {name!r} (known: {known})", field=option)


def _job(text: str, registry: Sequence[WorkloadSpec]) -> JobRef:
    model, batch = parse_job(text)
    spec = _spec(model, registry, "--pairs")
    if batch not in spec.batch_choices:
        choices = ", ".join(str(b) for b in spec.batch_sizes) or "none (omit it)"
        raise InputError(f"{spec.model} has no batch size {batch} (choices: {choices})", field="--pairs")
    return JobRef(spec, batch)


def _check_user_names(selection: Selection) -> None:
    taken = {s.model.lower(): "a reference model" for s in selection.reference()}
    for spec in selection.user:
        if spec.model.lower() in taken:
            raise InputError(
                f"name {spec.model!r} is already {taken[spec.model.lower()]}; give another with NAME=...",
                field="--workload/--command",
            )
        taken[spec.model.lower()] = "another --workload/--command"


def selected_jobs(selection: Selection) -> list[JobRef]:
    _check_user_names(selection)
    registry = selection.workloads()
    if selection.models:
        specs = [_spec(m, registry, "--models") for m in selection.models] + list(selection.user)
    else:
        specs = list(selection.user or selection.reference())
    wanted = selection.batch_sizes
    jobs = [
        JobRef(spec, bs)
        for spec in dict.fromkeys(specs)
        for bs in spec.batch_choices
        if bs is None or wanted is None or bs in wanted
    ]
    if wanted is not None and not any(j.batch_size in wanted for j in jobs):
        raise InputError(f"no selected model has any of the batch sizes {list(wanted)}", field="--batch-sizes")
    return jobs


def reference_jobs(jobs: Sequence[JobRef], k: int) -> list[JobRef]:
    """K job types that cover the space: one model after another, middle batch size first."""
    by_model: dict[str, list[JobRef]] = {}
    for job in jobs:
        by_model.setdefault(job.model, []).append(job)
    queues = []
    for members in by_model.values():
        ordered = sorted(members, key=lambda j: j.batch_size or 0)
        middle = len(ordered) // 2
        # middle first, then alternately one step further out on each side
        spread = [ordered[middle]] + [
            ordered[i]
            for step in range(1, len(ordered))
            for i in (middle - step, middle + step)
            if 0 <= i < len(ordered)
        ]
        queues.append(spread)
    picked: list[JobRef] = []
    while len(picked) < min(k, len(jobs)):
        for queue in queues:
            if queue and len(picked) < k:
                picked.append(queue.pop(0))
    return picked


def _against(jobs: Sequence[JobRef], refs: Sequence[JobRef]) -> list[tuple[JobRef, JobRef]]:
    unique: dict[frozenset, tuple[JobRef, JobRef]] = {}
    for job in jobs:
        for ref in refs:
            unique.setdefault(frozenset((job, ref)), (job, ref))
    return list(unique.values())


def _sampled_pairs(
    sample: PairSample, jobs: list[JobRef], devices: Sequence[DeviceType], budget_s: float
) -> list[tuple[JobRef, JobRef]]:
    if sample.kind == "reference":
        return _against(jobs, reference_jobs(jobs, int(sample.value)))
    chosen: list[tuple[JobRef, JobRef]] = []
    for k in range(1, len(jobs) + 1):
        pairs = _against(jobs, reference_jobs(jobs, k))
        cost = sum(Task(device, pair, 1).estimate_s(budget_s) for device in devices for pair in pairs)
        if cost > sample.value:
            if not chosen:
                raise InputError(
                    f"budget {sample.value:g} s is below the {cost:.0f} s that one reference job "
                    f"type needs ({len(pairs)} pairs); raise it or lower --budget",
                    field="--pairs",
                )
            break
        chosen = pairs
    return chosen


def _pair_list(
    selection: Selection, jobs: list[JobRef], devices: Sequence[DeviceType] = ()
) -> list[tuple[JobRef, JobRef]]:
    jobs = [j for j in jobs if not is_command(j.spec)]  # two scripts' steps cannot be lined up: not paired
    if isinstance(selection.pairs, PairSample):
        return _sampled_pairs(selection.pairs, jobs, list(devices), selection.budget_s)
    if selection.pairs == "none":
        return []
    if selection.pairs == "all":
        return list(combinations_with_replacement(jobs, 2))
    registry = selection.workloads()
    assert not isinstance(selection.pairs, str)  # "all" and "none" returned above
    pairs = [(_job(a, registry), _job(b, registry)) for a, b in selection.pairs]
    for pair in pairs:
        for job in pair:
            if is_command(job.spec):
                raise InputError(f"{job.model} is a --command: commands are measured alone", field="--pairs")
    unique: dict[frozenset, tuple[JobRef, JobRef]] = {}
    for a, b in pairs:
        unique.setdefault(frozenset((a, b)), (a, b))
    return list(unique.values())


def fits(job: JobRef, k: int, device: DeviceType) -> bool:
    """k ranks of `job` on `device`: within one node, or (a --command job, which starts its ranks on
    other nodes through the launcher) whole nodes of a multi-node allocation."""
    if k <= device.per_node:
        return True
    return is_command(job.spec) and k <= device.max_processes and k % device.per_node == 0


def build_plan(devices: Iterable[DeviceType], selection: Selection) -> list[Task]:
    """Solo rows first (pairs need them), then data-parallel, then pairs; per device."""
    devices = list(devices)
    jobs = selected_jobs(selection)
    pairs = _pair_list(selection, jobs, devices) if 1 in selection.scale_factors else []
    if selection.pairs not in ("all", "none") and 1 not in selection.scale_factors:
        raise InputError("pairs are measured at scale factor 1; add 1 to --scale-factors", field="--pairs")
    # Every pair member needs its solo row, even if --models did not select it.
    solo_jobs = list(dict.fromkeys([*jobs, *(j for pair in pairs for j in pair)]))
    tasks: list[Task] = []
    for device in devices:
        if 1 in selection.scale_factors:
            tasks += [Task(device, (job,), 1) for job in solo_jobs]
        for k in sorted(set(selection.scale_factors) - {1}):
            tasks += [Task(device, (job,), k) for job in jobs if k in job.spec.scale_factors and fits(job, k, device)]
        tasks += [Task(device, pair, 1) for pair in pairs]
    return tasks


def estimate_s(tasks: Sequence[Task], budget_s: float) -> float:
    """Upper-bound-ish wall time: start-up plus the full budget for every task."""
    return sum(t.estimate_s(budget_s) for t in tasks)
