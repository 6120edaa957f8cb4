"""Trace files: Gavel's tab-separated `.trace` (10 columns, spec §6.3) and rota's job lists.

Gavel traces are read and written here; rota's own job lists (CSV / JSON) are
read with `planner.formats.jobs`. Durations in a trace are run times on a
reference worker type (`default_reference_type`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import NamedTuple

from planner.errors import InputError
from planner.formats.atomic import write_text_atomic
from planner.formats.cluster import Cluster
from planner.formats.fields import TRACE, Where, check_range, parse_float, parse_int, short
from planner.formats.files import read_text
from planner.formats.jobs import Job, ScaleGap, check_steps, read_jobs, scale_factors_text, scale_remedy
from planner.formats.table import JobType, ThroughputTable, split_model_label

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


# --------------------------------------------------------------------------- Gavel .trace files


# The numeric columns as (whole number?, minimum), parsed in this order.
_NUMERIC_COLUMNS = {
    "total_steps": (False, 0),
    "scale_factor": (True, 1),
    "priority_weight": (False, None),
    "slo": (False, None),
    "arrival_s": (False, 0),
    "needs_data_dir": (True, 0),  # 0/1
}
_POSITIVE_COLUMNS = ("total_steps", "priority_weight")


class _TraceLine(NamedTuple):
    label: str  # Gavel's model name, e.g. 'LM (batch size 5)'
    command: str
    total_steps: float
    scale_factor: int
    priority_weight: float
    slo: float  # a multiple of the job's run time; <= 0: none
    arrival_s: float


def _columns(line: str, at: Where) -> list[str]:
    parts = line.split("\t")
    if len(parts) != len(TRACE_COLUMNS):
        hint = " (Gavel's 7-column msr format: convert it with 'rota trace import gavel')" if len(parts) == 7 else ""
        raise at.error(
            TRACE_COLUMNS[len(parts)] if len(parts) < len(TRACE_COLUMNS) else None,
            f"expected {len(TRACE_COLUMNS)} tab-separated columns "
            f"({', '.join(TRACE_COLUMNS)}), found {len(parts)}{hint}",
        )
    return parts


def _parse_line(parts: list[str], at: Where) -> _TraceLine:
    raw = {name: parts[TRACE_COLUMNS.index(name)].strip() for name in _NUMERIC_COLUMNS}
    value: dict[str, float] = {}
    for name, (integer, minimum) in _NUMERIC_COLUMNS.items():
        parse = parse_int if integer else parse_float
        value[name] = parse(raw[name], at, name, minimum=minimum, wording=TRACE)
    for name in _POSITIVE_COLUMNS:
        check_range(value[name], raw[name], at, name, positive=True, wording=TRACE)
    check_steps(value["total_steps"], raw["total_steps"], at)
    return _TraceLine(
        parts[0].strip(),
        parts[1].strip(),
        value["total_steps"],
        int(value["scale_factor"]),
        value["priority_weight"],
        value["slo"],
        value["arrival_s"],
    )


class _Known(NamedTuple):
    """The table's job types, and its (model, batch size)s."""

    job_types: frozenset[JobType]
    families: frozenset[tuple[str, int | None]]

    @classmethod
    def of(cls, table: ThroughputTable) -> _Known:
        return cls(frozenset(table.job_types), frozenset((jt.model, jt.batch_size) for jt in table.job_types))


def _trace_job(
    line: _TraceLine,
    job_id: str,
    at: Where,
    table: ThroughputTable,
    cluster: Cluster | None,
    known: _Known,
    biggest: int | None,
    unestimated: Mapping[JobType, str],
) -> Job:
    scale = line.scale_factor
    if biggest is not None and scale > biggest:
        raise at.error("scale_factor", f"scale factor {scale} is larger than any worker type's GPU count ({biggest})")
    model, batch = split_model_label(line.label)
    job_type = JobType(model, batch, scale)
    if job_type not in known.job_types:
        if (model, batch) in known.families:  # the model and batch size are there: the scale factor is what no row has
            why = unestimated.get(job_type)
            raise ScaleGap(
                job_type,
                f"no row for {short(job_type.label)} in the throughput table {table.path} "
                f"(it has scale factors {scale_factors_text(table, model, batch)})"
                + (f"; not estimated: {why}" if why else ""),
                at=at,
                remedy=scale_remedy(job_type, table.path),
            )
        raise at.error("model", f"job type {short(job_type.label)} is not in the throughput table {table.path}")
    slo_s = None
    if line.slo > 0:  # a multiplier of the job's run time on the reference type (Gavel: of its duration)
        rate = table.solo(default_reference_type(table, cluster), job_type)
        slo_s = line.slo * line.total_steps / rate if rate > 0 else None
    return Job(
        job_id,
        job_type,
        float(line.total_steps),
        float(line.priority_weight),
        float(line.arrival_s),
        slo_s=slo_s,
        command=line.command or None,
    )


def read_gavel_trace(
    path: str | os.PathLike,
    table: ThroughputTable,
    cluster: Cluster | None = None,
    *,
    scale_gaps: MutableMapping[JobType, None] | None = None,
    unestimated: Mapping[JobType, str] | None = None,
) -> list[Job]:
    """Parse a Gavel `.trace` file; job ids are the 0-based line order (Gavel's ids).

    Rows are "line N" in messages (InputError's `row`). Arrival times must not
    decrease, as Gavel asserts. The first fault is raised, except, with `scale_gaps`, a job
    type the table has at other scale factors only: it is added to `scale_gaps` and its line
    left out (planner.estimate.scaling estimates rows for them and reads the trace again);
    `unestimated`: why no row was estimated, per job type, said in the error of such a line.
    """
    path = Path(path)
    text = read_text(path, "trace")
    known = _Known.of(table)
    biggest = None if cluster is None else max(w.gpus for w in cluster.worker_types.values())
    jobs: list[Job] = []
    number = 0
    previous = -math.inf
    for line_no, text_line in enumerate(text.splitlines(), start=1):
        if not text_line.strip():
            continue
        at = Where(path, line_no)
        line = _parse_line(_columns(text_line, at), at)
        if line.arrival_s < previous:
            raise at.error(
                "arrival_s",
                f"arrival time {line.arrival_s:g} is earlier than the previous line's {previous:g} "
                "(a trace must be in arrival order)",
            )
        previous = line.arrival_s
        job_id = str(number)  # the job's place among the trace's jobs, also when one waits for an estimate
        number += 1
        try:
            jobs.append(_trace_job(line, job_id, at, table, cluster, known, biggest, unestimated or {}))
        except ScaleGap as gap:
            if scale_gaps is None:
                raise
            scale_gaps[gap.job_type] = None
    if not jobs and scale_gaps:
        return jobs  # every line waits for an estimated row
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
    "entity",
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
                str(int(job.total_steps)) if float(job.total_steps).is_integer() else repr(float(job.total_steps)),
                f"{job.priority_weight:g}",
                repr(float(job.arrival_s)),
                "" if job.slo_s is None else repr(float(job.slo_s)),
                "" if job.entity is None else job.entity,
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
            if job.entity is not None:
                rec["entity"] = job.entity
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
