"""Job list (CSV or JSON), validated against the throughput table and cluster.

Columns: job_id, model, batch_size, scale_factor=1, total_steps | duration_s
(+ reference_worker_type, default: the job's fastest type in the cluster),
priority_weight=1, arrival_s=0, entity, slo_s (deadline, seconds after arrival),
steps_done=0, command (what a launcher runs).
JSON: a list of such objects, or {"format": "rota.jobs/v1", "jobs": [...]}.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from planner.errors import InputError
from planner.formats.cluster import Cluster
from planner.formats.table import JobType, ThroughputTable

JOBS_FORMAT = "rota.jobs/v1"
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


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _number(raw, field, *, path, row, default=None, positive=False, integer=False):
    value = raw.get(field)
    if _blank(value):
        if default is None:
            return None
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"expected a number, got {value!r}", path=path, row=row, field=field) from None
    if math.isnan(number):
        raise InputError("is NaN", path=path, row=row, field=field)
    if math.isinf(number):
        raise InputError("is infinite", path=path, row=row, field=field)
    if number < 0 or (positive and number == 0):
        raise InputError(
            f"must be {'positive' if positive else 'non-negative'}, got {value!r}", path=path, row=row, field=field
        )
    if integer:
        if not number.is_integer():
            raise InputError(f"expected an integer, got {value!r}", path=path, row=row, field=field)
        return int(number)
    return number


def _fastest_type(table: ThroughputTable, cluster: Cluster, job_type: JobType) -> str | None:
    rates = [(table.solo(w, job_type), w) for w in cluster.names]
    rate, name = max(rates, key=lambda r: r[0])
    return name if rate > 0 else None


def parse_jobs(
    records: Iterable[Mapping[str, Any]],
    *,
    table: ThroughputTable,
    cluster: Cluster,
    path: object = "<jobs>",
    columns: Iterable[str] | None = None,
) -> list[Job]:
    records = list(records)
    if columns is None:
        columns = {k for rec in records for k in rec}
    for column in columns:
        if column not in JOB_COLUMNS:
            raise InputError(
                f"unknown column (expected a subset of: {', '.join(JOB_COLUMNS)})", path=path, field=column
            )
    if not records:
        raise InputError("no jobs", path=path)
    known_models = {jt.model for jt in table.job_types}
    biggest = max(w.gpus for w in cluster.worker_types.values())
    jobs: list[Job] = []
    seen: dict[str, int] = {}
    for row, raw in enumerate(records, start=1):
        if _blank(raw.get("job_id")):
            raise InputError("is required", path=path, row=row, field="job_id")
        job_id = str(raw["job_id"]).strip()
        if job_id in seen:
            raise InputError(
                f"duplicate job id {job_id!r} (first in row {seen[job_id]})", path=path, row=row, field="job_id"
            )
        seen[job_id] = row
        if _blank(raw.get("model")):
            raise InputError("is required", path=path, row=row, field="model")
        model = str(raw["model"]).strip()
        if model not in known_models:
            raise InputError(
                f"unknown model {model!r}: not in the throughput table {table.path}", path=path, row=row, field="model"
            )
        batch = _number(raw, "batch_size", path=path, row=row, positive=True, integer=True)
        scale = _number(raw, "scale_factor", path=path, row=row, default=1, positive=True, integer=True)
        if scale > biggest:
            raise InputError(
                f"scale factor {scale} is larger than any worker type's GPU count ({biggest})",
                path=path,
                row=row,
                field="scale_factor",
            )
        job_type = JobType(model, batch, scale)
        if not any(table.has(w, job_type) for w in table.worker_types):
            raise InputError(
                f"unknown job type {job_type.label!r}: no such row in the throughput table {table.path}",
                path=path,
                row=row,
                field="batch_size",
            )
        runnable = [w for w in cluster.names if table.solo(w, job_type) > 0 and cluster.capacity(w) >= scale]
        if not runnable:
            raise InputError(
                f"{job_type.label} cannot run on any worker type of the cluster "
                f"(no positive throughput with {scale} GPU(s))",
                path=path,
                row=row,
                field="model",
            )

        steps = _number(raw, "total_steps", path=path, row=row, positive=True)
        duration = _number(raw, "duration_s", path=path, row=row, positive=True)
        if (steps is None) == (duration is None):
            raise InputError("give exactly one of total_steps and duration_s", path=path, row=row, field="total_steps")
        if duration is not None:
            ref = raw.get("reference_worker_type")
            ref = _fastest_type(table, cluster, job_type) if _blank(ref) else str(ref).strip()
            rate = table.solo(ref, job_type)
            if rate <= 0:
                raise InputError(
                    f"{job_type.label} has no positive throughput on {ref!r}",
                    path=path,
                    row=row,
                    field="reference_worker_type",
                )
            steps = duration * rate
        weight = _number(raw, "priority_weight", path=path, row=row, default=1.0, positive=True)
        arrival = _number(raw, "arrival_s", path=path, row=row, default=0.0)
        slo = _number(raw, "slo_s", path=path, row=row, positive=True)
        done = _number(raw, "steps_done", path=path, row=row, default=0.0)
        if done >= steps:
            raise InputError(
                f"steps_done ({done:g}) must be below total_steps ({steps:g})", path=path, row=row, field="steps_done"
            )
        entity = None if _blank(raw.get("entity")) else str(raw["entity"]).strip()
        command = None if _blank(raw.get("command")) else str(raw["command"]).strip()
        jobs.append(
            Job(job_id, job_type, float(steps), float(weight), float(arrival), entity, slo, float(done), command)
        )
    return jobs


def read_jobs(path: str | os.PathLike, *, table: ThroughputTable, cluster: Cluster) -> list[Job]:
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path=path)
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                if data.get("format", JOBS_FORMAT) != JOBS_FORMAT:
                    raise InputError(f"unsupported format {data.get('format')!r}", path=path, field="format")
                data = data.get("jobs")
            if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
                raise InputError("expected a list of job objects", path=path)
            records, columns = data, None
        else:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
            frame.columns = [str(c).strip() for c in frame.columns]
            records, columns = frame.to_dict(orient="records"), list(frame.columns)
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"cannot parse: {str(exc).splitlines()[0]}", path=path) from None
    return parse_jobs(records, table=table, cluster=cluster, path=path, columns=columns)
