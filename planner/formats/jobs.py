"""Job list (CSV or JSON), validated against the throughput table and cluster.

Columns: job_id, model, batch_size, scale_factor=1, total_steps | duration_s
(+ reference_worker_type, default: the job's fastest type in the cluster),
priority_weight=1, arrival_s=0, entity, slo_s (deadline, seconds after arrival),
steps_done=0, command (what a launcher runs).
JSON: a list of such objects, or {"format": "rota.jobs/v1", "jobs": [...]}.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.formats.cluster import Cluster
from planner.formats.fields import (
    JOB_LIST,
    MAX_ID,
    MAX_STEPS,
    Where,
    optional_float,
    optional_text,
    required_text,
    short,
    whole,
)
from planner.formats.files import read_csv_records, read_json
from planner.formats.table import JobType, ThroughputTable

JOBS_FORMAT = "rota.jobs/v1"

# priority_weight bounds: weights are relative, and a policy's LP divides by them (1e-300 made
# HiGHS refuse the model without saying why).
MIN_WEIGHT = 1e-6
MAX_WEIGHT = 1e6
JOB_COLUMNS = [
    "job_id",
    "model",
    "batch_size",
    "scale_factor",
    "total_steps",
    "duration_s",
    "reference_worker_type",
    "priority_weight",
    "arrival_s",
    "entity",
    "slo_s",
    "steps_done",
    "command",
    "image",  # the job's container image (Kubernetes exports); the planner does not read it
]


@dataclass(frozen=True)
class Job:
    job_id: str
    job_type: JobType
    total_steps: float
    priority_weight: float = 1.0
    arrival_s: float = 0.0
    entity: str | None = None
    slo_s: float | None = None
    steps_done: float = 0.0
    command: str | None = None  # what a launcher runs for this job (exports)

    @property
    def scale_factor(self) -> int:
        return self.job_type.scale_factor

    @property
    def remaining_steps(self) -> float:
        return max(0.0, self.total_steps - self.steps_done)

    def with_progress(self, steps_done: float) -> Job:
        return replace(self, steps_done=steps_done)


def _number(raw: Mapping[str, Any], field: str, at: Where, *, positive: bool = False) -> float | None:
    """A non-negative (or positive) number, None when blank."""
    value = raw.get(field)
    if value is None or value.__class__ is str and not value:
        return None  # the usual absent or empty cell, without the general parser's checks
    return optional_float(value, at, field, minimum=None if positive else 0, positive=positive, wording=JOB_LIST)


def _count(raw: Mapping[str, Any], field: str, at: Where) -> int | None:
    """A positive whole number, None when blank (range checked before wholeness, as always)."""
    number = _number(raw, field, at, positive=True)
    return None if number is None else whole(number, raw.get(field), at, field)


def _fastest_type(table: ThroughputTable, cluster: Cluster, job_type: JobType) -> str | None:
    rates = [(table.solo(w, job_type), w) for w in cluster.names]
    rate, name = max(rates, key=lambda r: r[0])
    return name if rate > 0 else None


def _check_columns(columns: Iterable[str], path: object) -> None:
    for column in columns:
        if column not in JOB_COLUMNS:
            raise InputError(
                f"unknown column (expected a subset of: {', '.join(JOB_COLUMNS)})", path=path, field=column
            )


@dataclass(frozen=True)
class _Inputs:
    """What every row is checked against."""

    table: ThroughputTable
    cluster: Cluster
    models: frozenset[str]  # the table's models
    biggest: int  # GPUs of the largest worker type
    # (model, batch_size, scale_factor) as written -> the job type they were found valid as: a job
    # list has thousands of rows of a few dozen types, and each check scans the table and cluster
    valid_types: dict[tuple[Any, Any, Any], JobType] = field(default_factory=dict)


def _job_type(raw: Mapping[str, Any], at: Where, inputs: _Inputs) -> JobType:
    """The row's model, batch size and scale factor: in the table and runnable in the cluster."""
    key = (raw.get("model"), raw.get("batch_size"), raw.get("scale_factor"))
    try:
        return inputs.valid_types[key]
    except (KeyError, TypeError):  # new, or unhashable (a JSON list where a number belongs)
        pass
    job_type = _checked_job_type(raw, at, inputs)
    try:
        inputs.valid_types[key] = job_type
    except TypeError:
        pass
    return job_type


def _checked_job_type(raw: Mapping[str, Any], at: Where, inputs: _Inputs) -> JobType:
    table, cluster = inputs.table, inputs.cluster
    model = required_text(raw.get("model"), at, "model")
    if model not in inputs.models:
        raise at.error("model", f"unknown model {short(model)}: not in the throughput table {table.path}")
    batch = _count(raw, "batch_size", at)
    scale = _count(raw, "scale_factor", at)
    scale = 1 if scale is None else scale
    if scale > inputs.biggest:
        raise at.error(
            "scale_factor", f"scale factor {scale} is larger than any worker type's GPU count ({inputs.biggest})"
        )
    job_type = JobType(model, batch, scale)
    if not any(table.has(w, job_type) for w in table.worker_types):
        scales = sorted({t.scale_factor for t in table.job_types if (t.model, t.batch_size) == (model, batch)})
        if scales:  # the model and batch size are there: the scale factor is what no row has
            raise at.error(
                "scale_factor",
                f"no row for {short(job_type.label)} in the throughput table {table.path} "
                f"(it has scale factors {', '.join(map(str, scales))})",
            )
        raise at.error(
            "batch_size", f"unknown job type {short(job_type.label)}: no such row in the throughput table {table.path}"
        )
    if not any(table.solo(w, job_type) > 0 and cluster.capacity(w) >= scale for w in cluster.names):
        raise at.error(
            "model",
            f"{job_type.label} cannot run on any worker type of the cluster "
            f"(no positive throughput with {scale} GPU(s))",
        )
    return job_type


def _total_steps(raw: Mapping[str, Any], at: Where, inputs: _Inputs, job_type: JobType) -> float:
    """total_steps, or duration_s times the job's rate on its reference worker type."""
    steps = _number(raw, "total_steps", at, positive=True)
    duration = _number(raw, "duration_s", at, positive=True)
    ref = optional_text(raw.get("reference_worker_type"))
    known = inputs.table.worker_types
    if ref is not None and ref not in known:  # a typo is an error even where total_steps makes it unused
        raise at.error("reference_worker_type", f"{short(ref)} is not a worker type of the table ({', '.join(known)})")
    if steps is not None and duration is None:
        return check_steps(steps, raw.get("total_steps"), at)
    if steps is not None or duration is None:
        raise at.error("total_steps", "give exactly one of total_steps and duration_s")
    if ref is None:
        ref = _fastest_type(inputs.table, inputs.cluster, job_type)
    rate = 0.0 if ref is None else inputs.table.solo(ref, job_type)
    if rate <= 0:
        raise at.error("reference_worker_type", f"{job_type.label} has no positive throughput on {short(ref)}")
    # Whole steps, rounded up: trainers count steps in integers, and a job given by its duration
    # must not end a fraction of a step short of it.
    return check_steps(float(math.ceil(duration * rate - 1e-9)), raw.get("duration_s"), at, "duration_s")


def check_steps(steps: float, value: Any, at: Where, field: str = "total_steps") -> float:
    """At most MAX_STEPS (InputError otherwise)."""
    if steps > MAX_STEPS:
        raise at.error(field, f"{short(value)} makes {steps:g} steps, more than the {MAX_STEPS:g} a job may have")
    return steps


def check_job_id(job_id: str, at: Where) -> str:
    """Printable (no line breaks or tabs), at most MAX_ID characters; launchers map it to safe names."""
    if not job_id.isprintable() or len(job_id) > MAX_ID:
        raise at.error("job_id", f"{short(job_id)} is not a valid job id (printable, at most {MAX_ID} characters)")
    return job_id


def _parse_job(raw: Mapping[str, Any], at: Where, inputs: _Inputs, job_id: str) -> Job:
    job_type = _job_type(raw, at, inputs)
    steps = _total_steps(raw, at, inputs, job_type)
    weight = _number(raw, "priority_weight", at, positive=True)
    if weight is not None and not MIN_WEIGHT <= weight <= MAX_WEIGHT:
        raise at.error(
            "priority_weight",
            f"{weight:g} is outside [{MIN_WEIGHT:g}, {MAX_WEIGHT:g}] (weights are relative; rescale them)",
        )
    arrival = _number(raw, "arrival_s", at)
    slo = _number(raw, "slo_s", at, positive=True)
    done = _number(raw, "steps_done", at)
    done = 0.0 if done is None else done
    if done >= steps:
        raise at.error("steps_done", f"steps_done ({done:g}) must be below total_steps ({steps:g})")
    return Job(
        job_id,
        job_type,
        float(steps),
        1.0 if weight is None else float(weight),
        0.0 if arrival is None else float(arrival),
        optional_text(raw.get("entity")),
        slo,
        float(done),
        optional_text(raw.get("command")),
    )


def parse_jobs(
    records: Iterable[Mapping[str, Any]],
    *,
    table: ThroughputTable,
    cluster: Cluster,
    path: object = "<jobs>",
    columns: Iterable[str] | None = None,
) -> list[Job]:
    """Validated jobs, in file order; InputError naming the row and field of the first fault."""
    records = list(records)
    _check_columns({k for rec in records for k in rec} if columns is None else columns, path)
    if not records:
        raise InputError("no jobs", path=path)
    inputs = _Inputs(
        table,
        cluster,
        frozenset(jt.model for jt in table.job_types),
        max(w.gpus for w in cluster.worker_types.values()),
    )
    jobs: list[Job] = []
    seen: dict[str, int] = {}
    for row, raw in enumerate(records, start=1):
        at = Where(path, row)
        job_id = check_job_id(required_text(raw.get("job_id"), at, "job_id"), at)
        if job_id in seen:
            raise at.error("job_id", f"duplicate job id {short(job_id)} (first in row {seen[job_id]})")
        seen[job_id] = row
        jobs.append(_parse_job(raw, at, inputs, job_id))
    return jobs


def read_jobs(path: str | os.PathLike, *, table: ThroughputTable, cluster: Cluster) -> list[Job]:
    path = Path(path)
    try:
        if path.suffix.lower() == ".json":
            data = read_json(path, "jobs")
            if isinstance(data, dict):
                if data.get("format", JOBS_FORMAT) != JOBS_FORMAT:
                    raise InputError(f"unsupported format {short(data.get('format'))}", path=path, field="format")
                data = data.get("jobs")
            if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
                raise InputError("expected a list of job objects", path=path)
            records, columns = data, None
        else:
            columns, records = read_csv_records(path, "jobs")
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"cannot parse: {str(exc).splitlines()[0]}", path=path) from None
    return parse_jobs(records, table=table, cluster=cluster, path=path, columns=columns)
