"""Gavel's job generator: the workload of an open-ended simulated trace.

Scale factor, duration and job type are drawn from one `random.Random(seed + 2)`
stream in Gavel's order (spec §6.2), inter-arrival gaps from
`random.Random(seed + 3)`, SLO multipliers from `random.Random(seed + 6)`, so a
given seed yields Gavel's jobs one for one (spec §11.2). `seed` is Gavel's
Scheduler seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from planner.errors import InputError
from planner.formats.jobs import Job
from planner.formats.table import JobType, ThroughputTable
from planner.formats.trace import default_reference_type

# Gavel's JobTable order (spec §2); the generator draws templates by index, so
# this order decides which job a seed produces.
GAVEL_JOB_TABLE = (
    [f"ResNet-18 (batch size {b})" for b in (16, 32, 64, 128, 256)]
    + [f"ResNet-50 (batch size {b})" for b in (16, 32, 64, 128)]
    + [f"Transformer (batch size {b})" for b in (16, 32, 64, 128, 256)]
    + [f"LM (batch size {b})" for b in (5, 10, 20, 40, 80)]
    + [f"Recommendation (batch size {b})" for b in (512, 1024, 2048, 4096, 8192)]
    + ["A3C", "CycleGAN"]
)

SCALE_FACTORS = (2, 4, 8)

# Bounds on the work a command line can ask for (rota simulate, sweep, trace generate, compare):
# beyond them a run would exhaust memory or never end, and no real study needs more.
MAX_JOBS = 100_000  # jobs generated or measured (--num-jobs, --window END, --static-jobs, --max-active)
MIN_RATE_PER_HOUR = 1e-6  # a positive input rate below this (one job per 114 years) is refused
MAX_RATE_PER_HOUR = 1e6  # one job every 3.6 ms
MAX_SEED = 2**32 - 1  # seeds are 0 .. 2^32 - 1 (what numpy's generators and Gavel's take)


@dataclass(frozen=True)
class Template:
    """A single-GPU job type and whether it also exists data-parallel (s > 1)."""

    job_type: JobType
    distributed: bool


def job_templates(table: ThroughputTable, reference_type: str) -> list[Template]:
    """Job types to draw from: every s = 1 type with a positive reference throughput.

    Types Gavel knows come first, in its JobTable order, so Gavel's table gives
    Gavel's draws; any other types follow in table order.
    """
    singles = [jt for jt in table.job_types if jt.scale_factor == 1 and table.solo(reference_type, jt) > 0]
    rank = {name: i for i, name in enumerate(GAVEL_JOB_TABLE)}
    singles.sort(key=lambda jt: rank.get(jt.name, len(rank)))  # stable: table order after Gavel's
    out = []
    for jt in singles:
        multi = all(table.solo(reference_type, JobType(jt.model, jt.batch_size, s)) > 0 for s in SCALE_FACTORS)
        out.append(Template(jt, multi))
    return out


def rate_to_lam(rate_per_hour: float) -> float:
    """Mean inter-arrival time in seconds (Gavel's `lam`); rate 0 means a static trace."""
    check_rate(rate_per_hour, field="rate")
    return 0.0 if rate_per_hour == 0 else 3600.0 / rate_per_hour


def check_rate(rate_per_hour: float, *, field: str, zero: bool = True) -> float:
    """An input rate: 0 (a static trace, where `zero`) or MIN_RATE_PER_HOUR .. MAX_RATE_PER_HOUR
    jobs per hour; InputError naming `field` otherwise (a rate of 1e-310 jobs/h made the mean gap
    overflow to infinity)."""
    if rate_per_hour == 0 and zero:
        return rate_per_hour
    if not MIN_RATE_PER_HOUR <= rate_per_hour <= MAX_RATE_PER_HOUR:  # NaN fails too
        low = "0 or " if zero else ""
        raise InputError(
            f"input rate must be {low}{MIN_RATE_PER_HOUR:g} to {MAX_RATE_PER_HOUR:g} jobs per hour, "
            f"got {rate_per_hour}",
            field=field,
        )
    return rate_per_hour


def _scale_factor(r: float) -> int:
    # Philly-like mix (spec §6.2): 70 % 1 GPU, 10 % 2, 15 % 4, 5 % 8; Gavel's boundary tests.
    if 0.7 <= r <= 0.8:
        return 2
    if 0.8 <= r <= 0.95:
        return 4
    if 0.95 <= r:
        return 8
    return 1


def _duration(rng: random.Random) -> float:
    # 20 % long jobs (16.7 h - 166.7 h), 80 % short ones (31.6 min - 16.7 h).
    if rng.random() >= 0.8:
        return 60 * (10 ** rng.uniform(3, 4))
    return 60 * (10 ** rng.uniform(1.5, 3))


def _slo_multiplier(r: float) -> float:
    if r < 0.33:
        return 1.2
    if r < 0.67:
        return 2.0
    return 10.0


@dataclass
class GeneratorConfig:
    seed: int = 0
    rate_per_hour: float = 0.0  # 0: every job arrives at t = 0 (static trace)
    multi_gpu: bool = False
    multi_priority: bool = False
    slos: bool = False
    fixed_duration_s: float | None = None
    reference_type: str | None = None  # default: v100 if present (Gavel)


@dataclass
class JobGenerator:
    """Endless stream of jobs in arrival order; `durations` keeps each job's reference run time."""

    table: ThroughputTable
    config: GeneratorConfig = field(default_factory=GeneratorConfig)
    durations: dict[str, float] = field(default_factory=dict, init=False)

    def __post_init__(self):
        c = self.config
        self.reference_type = c.reference_type or default_reference_type(self.table)
        if self.reference_type not in self.table.worker_types:
            raise InputError(
                f"reference worker type {self.reference_type!r} is not in the table",
                path=self.table.path,
                field="reference_type",
            )
        self.templates = job_templates(self.table, self.reference_type)
        if not self.templates:
            raise InputError(
                f"no single-GPU job type has a positive throughput on {self.reference_type!r}",
                path=self.table.path,
                field="throughput",
            )
        if c.multi_gpu and not any(t.distributed for t in self.templates):
            raise InputError(
                f"multi-GPU generation needs job types measured at scale factors "
                f"{', '.join(map(str, SCALE_FACTORS))} on {self.reference_type!r}",
                path=self.table.path,
                field="scale_factor",
            )
        if c.fixed_duration_s is not None and not c.fixed_duration_s > 0:
            raise InputError(f"fixed duration must be positive, got {c.fixed_duration_s}", field="duration")
        self.lam = rate_to_lam(c.rate_per_hour)
        self._jobs = random.Random(c.seed + 2)
        self._gaps = random.Random(c.seed + 3)
        self._slo = random.Random(c.seed + 6) if c.slos else None
        self._types: dict[tuple[str, int | None, int], tuple[JobType, float]] = {}

    def _job(self, index: int, arrival_s: float) -> Job:
        rng, c = self._jobs, self.config
        scale = _scale_factor(rng.uniform(0, 1))  # drawn even for single-GPU traces
        duration = c.fixed_duration_s if c.fixed_duration_s else _duration(rng)
        if not c.multi_gpu:
            scale = 1
        while True:
            template = rng.choice(self.templates)
            if scale == 1 or template.distributed:
                break
        job_type, reference_rate = self._typed(template.job_type, scale)
        steps = duration * reference_rate
        weight = 1.0
        if c.multi_priority and rng.uniform(0, 1) <= 0.2:
            weight = 5.0
        slo = None if self._slo is None else _slo_multiplier(self._slo.uniform(0, 1)) * duration
        job_id = str(index)
        self.durations[job_id] = duration
        return Job(job_id, job_type, steps, weight, arrival_s, slo_s=slo)

    def _typed(self, jt: JobType, scale: int) -> tuple[JobType, float]:
        """The job type drawn and its steps/s on the reference type, kept for the next draw of
        the same (a trace draws thousands of jobs from a few dozen types)."""
        key = (jt.model, jt.batch_size, scale)  # hashes in C
        typed = self._types.get(key)
        if typed is None:
            job_type = JobType(jt.model, jt.batch_size, scale)
            typed = self._types[key] = (job_type, self.table.solo(self.reference_type, job_type))
        return typed

    def __iter__(self) -> Iterator[Job]:
        arrival, index = 0.0, 0
        while True:
            yield self._job(index, arrival)
            index += 1
            if self.lam > 0:
                # Gavel: -log(1 - U) / rate with rate = 1 / lam (same rounding).
                arrival = arrival + -math.log(1.0 - self._gaps.random()) / (1.0 / self.lam)

    def take(self, n: int) -> list[Job]:
        if not 1 <= n <= MAX_JOBS:
            raise InputError(f"number of jobs must be 1 to {MAX_JOBS}, got {n}", field="jobs")
        out = []
        for job in self:
            out.append(job)
            if len(out) == n:
                return out
        return out
