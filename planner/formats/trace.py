"""Workloads for the simulator: Gavel's job generator and trace files.

Generator (spec §6.2): scale factor, duration and job type are drawn from
one `random.Random(seed + 2)` stream in Gavel's order, inter-arrival gaps from
`random.Random(seed + 3)`, SLO multipliers from `random.Random(seed + 6)`, so a
given seed yields Gavel's jobs one for one (spec §11.2). `seed` is Gavel's
Scheduler seed.

Traces: Gavel's tab-separated `.trace` (10 columns, spec §6.3) is read and
written; rota's own job lists (CSV / JSON) are read with `planner.formats.jobs`.
"""

from __future__ import annotations

import csv
import io
import math
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from planner.errors import InputError
from planner.formats.atomic import write_text_atomic
from planner.formats.cluster import Cluster
from planner.formats.jobs import Job, read_jobs
from planner.formats.table import JobType, ThroughputTable, split_model_label

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

TRACE_COLUMNS = [
    "model",
    "command",
    "working_dir",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "priority_weight",
    "slo",
    "arrival_s",
]
SCALE_FACTORS = (2, 4, 8)


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


def default_reference_type(table: ThroughputTable, cluster: Cluster | None = None) -> str:
    """Gavel sizes jobs by their V100 run time; otherwise the type fastest on average."""
    types = table.worker_types if cluster is None else [w for w in cluster.names if w in table.worker_types]
    if "v100" in types:
        return "v100"
    if not types:
        raise InputError("the table has none of the cluster's worker types", path=table.path, field="worker_type")
    singles = [jt for jt in table.job_types if jt.scale_factor == 1]
    return max(
        types,
        key=lambda w: (
            sum(table.solo(w, jt) > 0 for jt in singles) + sum(math.log1p(table.solo(w, jt)) for jt in singles) * 1e-6
        ),
    )


def rate_to_lam(rate_per_hour: float) -> float:
    """Mean inter-arrival time in seconds (Gavel's `lam`); rate 0 means a static trace."""
    if rate_per_hour < 0 or not math.isfinite(rate_per_hour):
        raise InputError(
            f"input rate must be a non-negative number of jobs per hour, got {rate_per_hour}", field="rate"
        )
    return 0.0 if rate_per_hour == 0 else 3600.0 / rate_per_hour


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
        jt = template.job_type
        job_type = JobType(jt.model, jt.batch_size, scale)
        steps = duration * self.table.solo(self.reference_type, job_type)
        weight = 1.0
        if c.multi_priority and rng.uniform(0, 1) <= 0.2:
            weight = 5.0
        slo = None if self._slo is None else _slo_multiplier(self._slo.uniform(0, 1)) * duration
        job_id = str(index)
        self.durations[job_id] = duration
        return Job(job_id, job_type, steps, weight, arrival_s, slo_s=slo)

    def __iter__(self) -> Iterator[Job]:
        arrival, index = 0.0, 0
        while True:
            yield self._job(index, arrival)
            index += 1
            if self.lam > 0:
                # Gavel: -log(1 - U) / rate with rate = 1 / lam (same rounding).
                arrival = arrival + -math.log(1.0 - self._gaps.random()) / (1.0 / self.lam)

    def take(self, n: int) -> list[Job]:
        if n < 1:
            raise InputError(f"number of jobs must be at least 1, got {n}", field="jobs")
        out = []
        for job in self:
            out.append(job)
            if len(out) == n:
                return out
        return out


# --------------------------------------------------------------------------- Gavel .trace files


def _trace_field(parts: list[str], i: int, kind, *, path, line: int, minimum=None):
    name = TRACE_COLUMNS[i]
    raw = parts[i].strip()
    what = "an integer" if kind is int else "a number"
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"expected {what}, got {raw!r}", path=path, row=line, field=name) from None
    if not math.isfinite(value):
        raise InputError(f"must be finite, got {raw!r}", path=path, row=line, field=name)
    if kind is int:
        if not value.is_integer():
            raise InputError(f"expected {what}, got {raw!r}", path=path, row=line, field=name)
        value = int(value)
    if minimum is not None and value < minimum:
        raise InputError(f"must be >= {minimum}, got {raw!r}", path=path, row=line, field=name)
    return value


def read_gavel_trace(path: str | os.PathLike, table: ThroughputTable, cluster: Cluster | None = None) -> list[Job]:
    """Parse a Gavel `.trace` file; job ids are the 0-based line order (Gavel's ids).

    Rows are "line N" in messages (InputError's `row`). Arrival times must not
    decrease, as Gavel asserts.
    """
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path=path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not a text file ({exc.reason})", path=path) from None
    known = {jt for jt in table.job_types}
    biggest = None if cluster is None else max(w.gpus for w in cluster.worker_types.values())
    jobs: list[Job] = []
    previous = -math.inf
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != len(TRACE_COLUMNS):
            hint = " (old 7-column msr format is not supported)" if len(parts) == 7 else ""
            raise InputError(
                f"expected {len(TRACE_COLUMNS)} tab-separated columns "
                f"({', '.join(TRACE_COLUMNS)}), found {len(parts)}{hint}",
                path=path,
                row=line_no,
                field=TRACE_COLUMNS[len(parts)] if len(parts) < len(TRACE_COLUMNS) else None,
            )
        label = parts[0].strip()
        steps = _trace_field(parts, 5, float, path=path, line=line_no, minimum=0)
        scale = _trace_field(parts, 6, int, path=path, line=line_no, minimum=1)
        weight = _trace_field(parts, 7, float, path=path, line=line_no)
        slo = _trace_field(parts, 8, float, path=path, line=line_no)
        arrival = _trace_field(parts, 9, float, path=path, line=line_no, minimum=0)
        _trace_field(parts, 4, int, path=path, line=line_no, minimum=0)  # needs_data_dir: 0/1
        if steps <= 0:
            raise InputError(f"must be positive, got {parts[5].strip()!r}", path=path, row=line_no, field="total_steps")
        if weight <= 0:
            raise InputError(
                f"must be positive, got {parts[7].strip()!r}", path=path, row=line_no, field="priority_weight"
            )
        if arrival < previous:
            raise InputError(
                f"arrival time {arrival:g} is earlier than the previous line's {previous:g} "
                "(a trace must be in arrival order)",
                path=path,
                row=line_no,
                field="arrival_s",
            )
        previous = arrival
        if biggest is not None and scale > biggest:
            raise InputError(
                f"scale factor {scale} is larger than any worker type's GPU count ({biggest})",
                path=path,
                row=line_no,
                field="scale_factor",
            )
        model, batch = split_model_label(label)
        job_type = JobType(model, batch, scale)
        if job_type not in known:
            raise InputError(
                f"job type {job_type.label!r} is not in the throughput table {table.path}",
                path=path,
                row=line_no,
                field="model",
            )
        slo_s = None
        if slo > 0:  # a multiplier of the job's run time on the reference type (Gavel: of its duration)
            ref = default_reference_type(table, cluster)
            rate = table.solo(ref, job_type)
            slo_s = slo * steps / rate if rate > 0 else None
        command = parts[1].strip() or None
        jobs.append(
            Job(str(len(jobs)), job_type, float(steps), float(weight), float(arrival), slo_s=slo_s, command=command)
        )
    if not jobs:
        raise InputError("no jobs (empty trace)", path=path)
    return jobs


def format_gavel_trace(jobs: Sequence[Job], table: ThroughputTable | None = None) -> str:
    """Jobs as Gavel trace lines (total steps truncated to an integer, as Gavel writes them).

    Gavel's columns for the launch command are filled from the job's `command`
    when it has one; otherwise with the model name and neutral placeholders.
    """
    buf = io.StringIO()
    for job in jobs:
        slo = -1.0
        if job.slo_s is not None and table is not None:
            ref = default_reference_type(table)
            rate = table.solo(ref, job.job_type)
            if rate > 0:
                slo = job.slo_s / (job.total_steps / rate)
        command = job.command or job.job_type.name
        fields = [
            job.job_type.name,
            command,
            ".",
            "--num_steps",
            "0",
            f"{int(job.total_steps)}",
            f"{job.scale_factor}",
            f"{int(job.priority_weight)}" if float(job.priority_weight).is_integer() else f"{job.priority_weight:g}",
            f"{slo:f}",
            f"{job.arrival_s:f}",
        ]
        buf.write("\t".join(fields) + "\n")
    return buf.getvalue()


JOB_LIST_COLUMNS = [
    "job_id",
    "model",
    "batch_size",
    "scale_factor",
    "total_steps",
    "priority_weight",
    "arrival_s",
    "slo_s",
]


def format_job_list(jobs: Sequence[Job]) -> str:
    """Jobs as a rota job list CSV (readable by `rota plan` and `rota simulate`)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(JOB_LIST_COLUMNS)
    for job in jobs:
        jt = job.job_type
        writer.writerow(
            [
                job.job_id,
                jt.model,
                "" if jt.batch_size is None else jt.batch_size,
                jt.scale_factor,
                repr(float(job.total_steps)),
                f"{job.priority_weight:g}",
                repr(float(job.arrival_s)),
                "" if job.slo_s is None else repr(float(job.slo_s)),
            ]
        )
    return buf.getvalue()


def write_trace(jobs: Sequence[Job], path: str | os.PathLike, table: ThroughputTable | None = None) -> None:
    """Write jobs by suffix: `.trace` (Gavel), `.csv` (rota job list) or `.json`."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".trace":
        write_text_atomic(path, format_gavel_trace(jobs, table))
    elif suffix == ".csv":
        write_text_atomic(path, format_job_list(jobs))
    elif suffix == ".json":
        import json

        records = []
        for job in jobs:
            jt = job.job_type
            rec = {
                "job_id": job.job_id,
                "model": jt.model,
                "batch_size": jt.batch_size,
                "scale_factor": jt.scale_factor,
                "total_steps": job.total_steps,
                "priority_weight": job.priority_weight,
                "arrival_s": job.arrival_s,
            }
            if job.slo_s is not None:
                rec["slo_s"] = job.slo_s
            records.append(rec)
        write_text_atomic(path, json.dumps({"format": "rota.jobs/v1", "jobs": records}, indent=1) + "\n")
    else:
        raise InputError("unsupported trace format (use .trace, .csv or .json)", path=path)


def read_trace(path: str | os.PathLike, table: ThroughputTable, cluster: Cluster) -> list[Job]:
    """A Gavel `.trace` or a rota job list (.csv / .json), in arrival order."""
    path = Path(path)
    if path.suffix.lower() == ".trace":
        jobs = read_gavel_trace(path, table, cluster)
    elif path.suffix.lower() in (".csv", ".json"):
        jobs = read_jobs(path, table=table, cluster=cluster)
    else:
        raise InputError("unsupported trace format (use a Gavel .trace, or a job list .csv / .json)", path=path)
    return sorted(jobs, key=lambda j: j.arrival_s)  # stable: file order among equal arrivals
