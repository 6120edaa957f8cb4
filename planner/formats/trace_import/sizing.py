"""A trace's job as a rota job type and step count: GPU caps, job types drawn from the table, steps.

Traces of real clusters name no model. As Gavel did for Philly, each job gets a job type drawn
(seeded) from the table's single-GPU types (or `--job-types`), redrawn, as Gavel's generator
does, until the type is measured at the job's GPU count; its steps are its run time times that
type's throughput on the reference worker type. A GPU count no allowed type is measured at is
kept, lowered to the largest measured count below it, or dropped (`--unmeasured`).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from planner.errors import InputError
from planner.formats.fields import MAX_STEPS, short
from planner.formats.table import JobType, ThroughputTable
from planner.formats.trace import default_reference_type
from planner.formats.trace_import.common import ImportOptions, ImportSummary, SourceJob


class Dropped(Exception):
    """A job the options leave out; `reason` is a DROP_REASONS key."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Sized:
    job_type: JobType
    total_steps: float
    slo_s: float | None


def allowed_types(table: ThroughputTable, reference: str, names: tuple[str, ...] | None) -> list[JobType]:
    """The single-GPU job types to draw from, in table order: `names` (labels such as
    'ResNet-18 (batch size 32)', or a model name for all its batch sizes), or every
    scale-1 type; each must have a positive throughput on `reference`."""
    singles = [jt for jt in table.job_types if jt.scale_factor == 1]
    if names is None:
        chosen = [jt for jt in singles if table.solo(reference, jt) > 0]
        if not chosen:
            raise InputError(
                f"no single-GPU job type has a positive throughput on {reference!r}",
                path=table.path,
                field="throughput",
            )
        return chosen
    chosen = []
    for name in names:
        matches = [jt for jt in singles if name in (jt.name, jt.model)]
        if not matches:
            known = ", ".join(sorted({jt.model for jt in singles}))
            raise InputError(
                f"{short(name)} is not a single-GPU job type of the table {table.path} (models: {known})",
                field="--job-types",
            )
        for jt in matches:
            if table.solo(reference, jt) <= 0:
                raise InputError(f"{jt.name} has no positive throughput on {reference!r}", field="--job-types")
            if jt not in chosen:
                chosen.append(jt)
    return chosen


class Sizer:
    """Job types, GPU counts and steps of the jobs of one import (one seeded stream of draws)."""

    def __init__(self, table: ThroughputTable, options: ImportOptions, summary: ImportSummary):
        self.table, self.options, self.summary = table, options, summary
        self.reference = options.reference_type or default_reference_type(table)
        if self.reference not in table.worker_types:
            raise InputError(
                f"{short(self.reference)} is not a worker type of the table ({', '.join(table.worker_types)})",
                field="--reference-type",
            )
        summary.reference_type = self.reference
        self.known = frozenset(table.job_types)
        self._pool: list[JobType] | None = None  # drawn types: built on first use (Gavel traces need none)
        self._supported: dict[int, frozenset[JobType]] = {}
        self._rates: dict[tuple[JobType, int], float] = {}  # (scale-1 type, GPUs) -> steps/s on the reference
        self.rng = random.Random(options.seed)

    @property
    def pool(self) -> list[JobType]:
        if self._pool is None:
            self._pool = allowed_types(self.table, self.reference, self.options.job_types)
        return self._pool

    # ------------------------------------------------------------------ GPU counts

    def gpus(self, count: int) -> int:
        """The count after --max-gpus (Dropped with --max-gpus-action drop)."""
        cap = self.options.max_gpus
        if cap is None or count <= cap:
            return count
        if self.options.max_gpus_action == "drop":
            raise Dropped("over_max_gpus")
        self.summary.gpus_capped_max += 1
        return cap

    def size(self, job: SourceJob, count: int) -> Sized:
        if job.job_type is not None:
            return self._given(job, count)
        return self._drawn(job, count)

    # ------------------------------------------------------------------ types the trace gives (Gavel)

    def _given(self, job: SourceJob, count: int) -> Sized:
        assert job.job_type is not None and job.total_steps is not None
        base = job.job_type
        job_type = JobType(base.model, base.batch_size, count)
        if job_type not in self.known:
            job_type = self._given_unmeasured(job, job_type)
        slo_s = None
        if job.slo is not None and job.slo > 0:
            rate = self.table.solo(self.reference, job_type)
            slo_s = job.slo * job.total_steps / rate if rate > 0 else None
        return Sized(job_type, job.total_steps, slo_s)

    def _given_unmeasured(self, job: SourceJob, job_type: JobType) -> JobType:
        scales = sorted(
            jt.scale_factor for jt in self.known if (jt.model, jt.batch_size) == (job_type.model, job_type.batch_size)
        )
        if not scales:
            raise job.row.error(
                "job_type", f"job type {short(job_type.name)} is not in the throughput table {self.table.path}"
            )
        action = self.options.unmeasured
        if action == "keep":
            self.summary.unmeasured_kept += 1
            return job_type
        lower = [s for s in scales if s < job_type.scale_factor]
        if action == "drop" or not lower:
            raise Dropped("unmeasured")
        self.summary.gpus_capped_unmeasured += 1
        return JobType(job_type.model, job_type.batch_size, lower[-1])

    # ------------------------------------------------------------------ types drawn from the table

    def supported(self, count: int) -> frozenset[JobType]:
        """The allowed types measured at `count` GPUs with a positive reference throughput (as scale 1)."""
        found = self._supported.get(count)
        if found is None:
            found = frozenset(jt for jt in self.pool if self.rate(jt, count) > 0)
            self._supported[count] = found
        return found

    def rate(self, base: JobType, count: int) -> float:
        """Steps/s of `base` (a scale-1 type) on `count` GPUs on the reference type (0: not measured)."""
        key = (base, count)
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = self.table.solo(self.reference, _at(base, count))
        return rate

    def _draw(self, count: int) -> JobType:
        """Gavel's generator's rule: draw until the type is measured at `count` (one exists)."""
        ok = self.supported(count)
        draws = 0
        while True:
            draws += 1
            base = self.rng.choice(self.pool)
            if base in ok:
                break
        self.summary.types_drawn += 1
        self.summary.types_redrawn += draws > 1
        return base

    def _drawn(self, job: SourceJob, count: int) -> Sized:
        assert job.duration_s is not None
        if self.supported(count):
            base = self._draw(count)
            job_type, rate = _at(base, count), self.rate(base, count)
        elif self.options.unmeasured == "keep":
            base = self.rng.choice(self.pool)
            self.summary.types_drawn += 1
            job_type = _at(base, count)
            rate = self._extrapolated(base, count)
            self.summary.unmeasured_kept += 1
            self.summary.steps_extrapolated += 1
        elif self.options.unmeasured == "drop":
            raise Dropped("unmeasured")
        else:
            lower = max(c for c in self._scales if c < count and self.supported(c))
            self.summary.gpus_capped_unmeasured += 1
            base = self._draw(lower)
            job_type, rate = _at(base, lower), self.rate(base, lower)
        steps = max(1.0, float(round(job.duration_s * rate)))
        if steps > MAX_STEPS:
            raise Dropped("too_many_steps")
        return Sized(job_type, steps, None)

    @functools.cached_property
    def _scales(self) -> tuple[int, ...]:
        """Every scale factor of the table (and 1), ascending."""
        return tuple(sorted({jt.scale_factor for jt in self.known} | {1}))

    def _extrapolated(self, base: JobType, count: int) -> float:
        """Throughput at an unmeasured count: the largest measured count below it, scaled linearly."""
        key = (base, -count)  # cached beside the measured rates
        rate = self._rates.get(key)
        if rate is None:
            measured = [s for s in self._scales if s < count and self.rate(base, s) > 0]
            scale = measured[-1] if measured else 1
            rate = self._rates[key] = self.rate(base, scale) * count / scale
        return rate


def _at(job_type: JobType, count: int) -> JobType:
    return JobType(job_type.model, job_type.batch_size, count)
