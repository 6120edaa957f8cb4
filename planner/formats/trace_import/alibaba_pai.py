"""Alibaba PAI's GPU trace: `cluster-trace-gpu-v2020` of https://github.com/alibaba/clusterdata.

Two headerless CSV files (their columns are in the `.header` files beside them):

    pai_job_table.csv   job_name, inst_id, user, status, start_time, end_time
    pai_task_table.csv  job_name, task_name, inst_num, status, start_time, end_time,
                        plan_cpu, plan_mem, plan_gpu, gpu_type

Times are seconds (shifted by a constant). A job's `start_time` is its submission; its tasks'
times are when they ran. `plan_gpu` is the GPUs one instance of a task asks for, in percent
(50 is half a GPU), `inst_num` how many instances the task has. Job statuses are Terminated
(succeeded), Failed, Running and Waiting.

A job's GPUs are the sum over its tasks of inst_num x plan_gpu / 100: each instance's share
rounded up to whole GPUs (`per-instance`), the job's total rounded up (`total`), or a job with
a fractional share dropped (`drop`). Its run time is from its first task's start to its last
task's end (`run`) or the job's own start (submission) to end (`wall`, queueing included).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

from planner.errors import InputError
from planner.formats.fields import Where, number_text, short
from planner.formats.trace_import.common import (
    BadRows,
    SourceJob,
    csv_rows,
    entity_text,
    id_text,
    is_missing,
    parse_time,
    status_text,
)

JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
TASK_COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
STATUSES = ("Terminated", "Failed", "Running", "Waiting")
FRACTIONS = ("per-instance", "total", "drop")
DURATIONS = ("run", "wall")
ENTITY_FROM = ("user", "none")
_EPS = 1e-9  # plan_gpu / 100 is not always exact in binary


@dataclass(slots=True)
class _Tasks:
    """One job's tasks, aggregated."""

    gpus: int = 0  # instances' shares rounded up, summed
    share: float = 0.0  # exact GPU share, summed
    fractional: bool = False
    start: float | None = None
    end: float | None = None

    def add(self, instances: int, per_instance: float, start: float | None, end: float | None) -> None:
        self.gpus += instances * math.ceil(per_instance - _EPS)
        self.share += instances * per_instance
        self.fractional |= instances > 0 and abs(per_instance - round(per_instance)) > _EPS
        if start is not None and (self.start is None or start < self.start):
            self.start = start
        if end is not None and (self.end is None or end > self.end):
            self.end = end


def _number(raw: str, at: Where, field: str, *, default: float = 0.0) -> float:
    if is_missing(raw):
        return default
    value = number_text(raw)
    if value is None or not math.isfinite(value) or value < 0 or value > 1e9:
        raise at.error(field, f"expected a number >= 0, got {short(raw)}")
    return value


def _is_header(cells: list[str], columns: tuple[str, ...]) -> bool:
    return bool(cells) and cells[0].strip() == columns[0] and cells[1:2] == [columns[1]]


def _rows(
    path: str | os.PathLike, columns: tuple[str, ...], bad: BadRows, *, jobs: bool
) -> Iterator[tuple[Where, list[str]]]:
    for at, cells in csv_rows(path, header=False):
        if at.row == 1 and _is_header(cells, columns):
            continue  # a copy with the .header file's line on top
        if len(cells) != len(columns):
            bad.add(at.error(None, f"has {len(cells)} cells, expected {len(columns)} ({', '.join(columns)})"), job=jobs)
            continue
        yield at, cells


def read_tasks(path: str | os.PathLike, bad: BadRows) -> tuple[dict[str, _Tasks], int]:
    """Each job's tasks aggregated, and the number of task rows."""
    tasks: dict[str, _Tasks] = {}
    count = 0
    for at, cells in _rows(path, TASK_COLUMNS, bad, jobs=False):
        try:
            name = id_text(cells[0], at, "job_name")
            instances = _number(cells[2], at, "inst_num", default=1.0)
            if not instances.is_integer():
                raise at.error("inst_num", f"expected a whole number of instances, got {short(cells[2])}")
            per_instance = _number(cells[8], at, "plan_gpu") / 100
            start, end = parse_time(cells[4], at, "start_time"), parse_time(cells[5], at, "end_time")
        except InputError as exc:
            bad.add(exc, job=False)
            continue
        count += 1
        tasks.setdefault(name, _Tasks()).add(int(instances), per_instance, start, end)
    return tasks, count


def _gpus(tasks: _Tasks, fractions: str) -> tuple[int, bool]:
    """(GPUs, rounded?) of a job's tasks."""
    if fractions == "total":
        return math.ceil(tasks.share - _EPS), tasks.fractional
    return tasks.gpus, tasks.fractional


def _job(cells: list[str], at: Where, tasks: dict[str, _Tasks], options: tuple[str, str, str]) -> SourceJob:
    duration_mode, fractions, entity_from = options
    name = id_text(cells[0], at, "job_name")
    status = status_text(cells[3])
    submit, end = parse_time(cells[4], at, "start_time"), parse_time(cells[5], at, "end_time")
    entity = None if entity_from == "none" else entity_text(cells[2], at, "user")
    job = SourceJob(at, name, submit, status=status, entity=entity)
    mine = tasks.get(name)
    if mine is None:
        job.problem = "no_tasks"
        return job
    job.gpus, fractional = _gpus(mine, fractions)
    first, last = (submit, end) if duration_mode == "wall" else (mine.start, mine.end)
    if first is not None and last is not None:
        job.duration_s = last - first
    elif last is None and (status or "").lower() in ("running", "waiting"):
        job.problem = "running"
    if fractional and fractions == "drop":
        job.problem = job.problem or "fractional_gpus"
    return job


def read_pai(
    job_table: str | os.PathLike,
    task_table: str | os.PathLike,
    bad: BadRows,
    *,
    duration: str = "run",
    fractions: str = "per-instance",
    entity_from: str = "user",
    counts: dict[str, int] | None = None,
) -> Iterator[SourceJob]:
    """The jobs of `pai_job_table.csv` in file order, sized by their rows of `pai_task_table.csv`.
    `counts` receives task_rows, orphan_task_jobs (jobs with tasks but no job row) and
    fractional_gpus (jobs whose GPU share was rounded up)."""
    tasks, task_rows = read_tasks(task_table, bad)
    seen: set[str] = set()
    rounded = 0
    for at, cells in _rows(job_table, JOB_COLUMNS, bad, jobs=True):
        try:
            job = _job(cells, at, tasks, (duration, fractions, entity_from))
        except InputError as exc:
            bad.add(exc)
            continue
        seen.add(job.job_id)
        mine = tasks.get(job.job_id)
        rounded += mine is not None and mine.fractional and fractions != "drop"
        yield job
    if counts is not None:
        counts["task_rows"] = task_rows
        counts["orphan_task_jobs"] = len(tasks.keys() - seen)
        counts["fractional_gpus"] = rounded
