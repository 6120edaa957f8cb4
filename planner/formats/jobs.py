"""Job list (CSV or JSON), validated against the throughput table and cluster.

Columns: job_id, model, batch_size, scale_factor=1, total_steps | duration_s
(+ reference_worker_type, default: the job's fastest type in the cluster),
priority_weight=1, arrival_s=0, entity, slo_s (deadline, seconds after arrival),
steps_done=0, command (what a launcher runs).
JSON: a list of such objects, or {"format": "rota.jobs/v1", "jobs": [...]}.

Every row is checked, also after a bad one (`check_jobs`): `read_jobs` refuses a list with one
fault in one line as always, and a list with several by listing them all, each fault with what
fixes it where something does (`rota jobs validate` prints them with the warnings too).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import shlex
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
    SHORT,
    Where,
    optional_float,
    optional_text,
    required_text,
    short,
    whole,
)
from planner.formats.files import read_csv_records, read_json
from planner.formats.table import JobType, ThroughputTable, is_estimate

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


# --------------------------------------------------------------------------- problems


MAX_LISTED = 20  # problems the error of a job list with several lists (the rest are counted)
MAX_KEPT = 1_000  # distinct problems kept in one check (a hostile list's millions are counted)
ROWS_KEPT = 1_000  # rows kept per problem (the rest are counted)
ROWS_SHOWN = 10  # rows a problem's text names


class JobError(InputError):
    """An InputError of a job list that says what fixes it: `reason` + '; ' + `remedy`."""

    def __init__(self, reason: str, *, path: object, row: int | None, field: str | None, remedy: str | None):
        super().__init__(f"{reason}; {remedy}" if remedy else reason, path=path, row=row, field=field)
        self.reason, self.remedy = reason, remedy


def _fault(at: Where, field: str, reason: str, remedy: str | None = None) -> JobError:
    return JobError(reason, path=at.path, row=at.row, field=field, remedy=remedy)


class ScaleGap(JobError):
    """A row whose job type the table has at other scale factors only: the one fault a table
    extended with estimated rows (planner.estimate.scaling) can lift. `job_type`: the missing one."""

    def __init__(self, job_type: JobType, reason: str, *, at: Where, remedy: str):
        super().__init__(reason, path=at.path, row=at.row, field="scale_factor", remedy=remedy)
        self.job_type = job_type


def _reason(exc: InputError) -> str:
    """The message of an InputError without its file, row and field."""
    if isinstance(exc, JobError):
        return exc.reason
    prefix = str(InputError("", path=exc.path, row=exc.row, field=exc.field))
    text = str(exc)
    return text[len(prefix) :] if text.startswith(prefix) else text


@dataclass
class Problem:
    """One fault of a job list (severity 'error') or a note on it ('warning'), with the rows it
    was found in: rows with the very same fault are one problem."""

    severity: str  # "error": rota refuses the list; "warning": it runs, maybe not as meant
    message: str  # what is wrong, without file, row and field
    field: str | None = None  # the column at fault; None: the row or list as a whole
    remedy: str | None = None  # what fixes it, when a command or edit does
    rows: list[int] = dataclasses.field(default_factory=list)  # data rows (from 1), the first ROWS_KEPT
    row_count: int = 0  # rows with this problem (0: the file as a whole)
    path: object = None  # the file at fault when it is not the job list (the table, the cluster)

    def add_row(self, row: int | None) -> None:
        if row is None:
            return
        self.row_count += 1
        if len(self.rows) < ROWS_KEPT:
            self.rows.append(row)

    @property
    def where(self) -> str:
        """'row 3', 'rows 3, 7', 'rows 1, 2, ..., 10, ... (250 rows)', or '' for the whole file."""
        if not self.row_count:
            return ""
        shown = ", ".join(map(str, self.rows[:ROWS_SHOWN]))
        if self.row_count == 1:
            return f"row {shown}"
        more = f", ... ({self.row_count} rows)" if self.row_count > ROWS_SHOWN else ""
        return f"rows {shown}{more}"

    def text(self, path: object = None, *, remedy: bool = True) -> str:
        """One line: [path: ]rows: field 'f': message[; remedy] (`path`: the job list's)."""
        path = self.path if self.path is not None else path
        parts = [str(path)] if path is not None else []
        parts += [p for p in (self.where, f"field '{self.field}'" if self.field else "") if p]
        line = ": ".join([*parts, self.message])
        return f"{line}; {self.remedy}" if remedy and self.remedy else line

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "rows": list(self.rows),
            "row_count": self.row_count,
            "field": self.field,
            "message": self.message,
            "remedy": self.remedy,
            **({"file": str(self.path)} if self.path is not None else {}),
        }


class JobListError(InputError):
    """A job list with several faults: every one listed, one per line (at most MAX_LISTED).

    `lines`: the message line by line, the first naming the file ('JOBS: N problems in the job
    list:'); a printer shows each on its own line (str() joins them with line breaks)."""

    def __init__(self, check: JobListCheck, hint: str):
        errors = check.errors
        total = len(errors) + check.unlisted
        header = f"{total} problems in the job list:"
        rest = [f"  {p.text()}" for p in errors[:MAX_LISTED]]
        more = total - min(len(errors), MAX_LISTED)
        if more:
            rest.append(f"  and {more} more ({hint} lists them all)")
        super().__init__("\n".join([header, *rest]), path=check.path)
        self.lines = (str(InputError(header, path=check.path)), *rest)
        self.problems = errors


@dataclass
class JobListCheck:
    """What `check_jobs` found: the valid jobs and every problem, in file order."""

    path: object
    jobs: list[Job] = field(default_factory=list)  # the rows without an error
    rows: list[int] = field(default_factory=list)  # each job's row
    problems: list[Problem] = field(default_factory=list)
    unlisted: int = 0  # faults found after MAX_KEPT problems were kept (counted, not listed)
    first: InputError | None = None  # the first error as raised
    # job types of rows whose fault is a ScaleGap (the table has them at other scale factors only)
    scale_gaps: dict[JobType, None] = field(default_factory=dict)
    _index: dict[tuple[str, str | None, str, str | None], Problem] = field(default_factory=dict, repr=False)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    def add(self, exc: InputError, severity: str = "error") -> None:
        """`exc`'s fault, merged into the problem of the same text when there is one."""
        if severity == "error" and self.first is None:
            self.first = exc
        if isinstance(exc, ScaleGap):
            self.scale_gaps[exc.job_type] = None
        remedy = exc.remedy if isinstance(exc, JobError) else None
        key = (severity, exc.field, _reason(exc), remedy)
        problem = self._index.get(key)
        if problem is None:
            if len(self.problems) >= MAX_KEPT:
                self.unlisted += 1
                return
            problem = self._index[key] = Problem(severity, key[2], exc.field, remedy)
            self.problems.append(problem)
        problem.add_row(exc.row)

    def raise_errors(self, hint: str) -> None:
        """Nothing when no row has an error; else InputError: one fault as its one line, the
        same fault in several rows as one line naming them, several faults as JobListError.
        `hint`: the command that lists them all."""
        errors = self.errors
        if not errors and not self.unlisted:
            return
        if len(errors) == 1 and not self.unlisted:
            only = errors[0]
            if only.row_count <= 1 and self.first is not None:
                raise self.first
            error = InputError(only.text(), path=self.path)  # 'rows 3, 7: field ...': one line
            error.row, error.field = only.rows[0], only.field
            raise error
        raise JobListError(self, hint)


def _fastest_type(table: ThroughputTable, cluster: Cluster, job_type: JobType) -> str | None:
    rates = [(table.solo(w, job_type), w) for w in cluster.names]
    rate, name = max(rates, key=lambda r: r[0])
    return name if rate > 0 else None


def _check_columns(columns: Iterable[str], check: JobListCheck) -> None:
    for column in columns:
        if column not in JOB_COLUMNS:
            close = difflib.get_close_matches(column, JOB_COLUMNS, n=1)
            check.add(
                JobError(
                    f"unknown column (expected a subset of: {', '.join(JOB_COLUMNS)})",
                    path=check.path,
                    row=None,
                    field=column,
                    remedy=f"did you mean {close[0]!r}?" if close else None,
                )
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
    # job types missing only their scale factor -> why no row was estimated for them (said in the error)
    unestimated: Mapping[JobType, str] = field(default_factory=dict)
    scale_texts: dict[tuple[str, int | None], str] = field(default_factory=dict)  # see scale_factors_text


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
        raise _fault(
            at,
            "model",
            f"unknown model {short(model)}: not in the throughput table {table.path}",
            _new_model_remedy(model, _batch_or_none(raw, at), inputs),
        )
    batch = _count(raw, "batch_size", at)
    scale = _count(raw, "scale_factor", at)
    scale = 1 if scale is None else scale
    if scale > inputs.biggest:
        raise _fault(
            at,
            "scale_factor",
            f"scale factor {scale} is larger than any worker type's GPU count ({inputs.biggest})",
            _too_big_remedy(scale, inputs),
        )
    job_type = JobType(model, batch, scale)
    if not any(table.has(w, job_type) for w in table.worker_types):
        scales = inputs.scale_texts.get((model, batch))
        if scales is None:
            scales = inputs.scale_texts[(model, batch)] = scale_factors_text(table, model, batch)
        if scales:  # the model and batch size are there: the scale factor is what no row has
            why = inputs.unestimated.get(job_type)
            raise ScaleGap(
                job_type,
                f"no row for {short(job_type.label)} in the throughput table {table.path} "
                f"(it has scale factors {scales})" + (f"; not estimated: {why}" if why else ""),
                at=at,
                remedy=scale_remedy(job_type, table.path),
            )
        raise _fault(
            at,
            "batch_size",
            f"unknown job type {short(job_type.label)}: no such row in the throughput table {table.path}",
            _batch_remedy(job_type, inputs),
        )
    if not any(table.solo(w, job_type) > 0 and cluster.capacity(w) >= scale for w in cluster.names):
        raise _fault(
            at,
            "model",
            f"{job_type.label} cannot run on any worker type of the cluster "
            f"(no positive throughput with {scale} GPU(s))",
            _nowhere_remedy(job_type, inputs),
        )
    return job_type


def scale_factors_text(table: ThroughputTable, model: str, batch: int | None) -> str:
    """The scale factors the table has solo rows of (model, batch size) for: '1, 2, 4', or with
    those whose rows are all estimates said apart ('1, 2, 4, 8; 16 estimated'); '' for none."""
    measured: set[int] = set()
    estimated: set[int] = set()
    for r in table.rows:
        if r["partner_model"] is None and r["model"] == model and r["batch_size"] == batch:
            (estimated if is_estimate(r) else measured).add(r["scale_factor"])
    text = ", ".join(map(str, sorted(measured)))
    only_estimated = sorted(estimated - measured)
    if not only_estimated:
        return text
    guessed = f"{', '.join(map(str, only_estimated))} estimated"
    return f"{text}; {guessed}" if text else guessed


# --------------------------------------------------------------------------- remedies
# Commands in remedies are shell text: user values in them are quoted.


def _q(value: object) -> str:
    """`value` quoted for a shell, or NAME when too long to repeat (the message quotes it cut)."""
    text = str(value)
    return shlex.quote(text) if len(text) <= SHORT else "NAME"


def _batch_or_none(raw: Mapping[str, Any], at: Where) -> int | None:
    """The row's batch size for a remedy: None when blank or itself at fault."""
    try:
        return _count(raw, "batch_size", at)
    except InputError:
        return None


def _hand_written(table_path: object) -> str:
    return f"add hand-written rows to {_q(table_path)}"


def _new_model_remedy(model: str, batch: int | None, inputs: _Inputs) -> str:
    close = difflib.get_close_matches(model, sorted(inputs.models), n=1) if len(model) <= SHORT else []
    guess = f"did you mean {short(close[0])}? If not, " if close else ""
    t = _q(inputs.table.path)
    sizes = f" --batch-sizes {batch}" if batch is not None else ""
    name = model if len(model) <= SHORT else "NAME"
    return (
        f"{guess}measure it: rota profile --workload {_q(name + '=MODULE:FACTORY')}{sizes} --out {t} "
        f"(or --command {_q(name + '=python train.py ...')}, or --models for a reference model), then "
        f"rota table estimate {t} --out FULL.csv --solo for the worker types it was not measured on; "
        f"or {_hand_written(inputs.table.path)}"
    )


def _batch_remedy(job_type: JobType, inputs: _Inputs) -> str:
    model, batch = job_type.model, job_type.batch_size
    sizes = sorted({t.batch_size for t in inputs.table.job_types if t.model == model and t.batch_size is not None})
    if not sizes:
        return f"the table has {model} without a batch size: leave batch_size empty"
    has = f"the table has {model} with batch sizes {', '.join(map(str, sizes))}"
    if batch is None:
        return f"{has}: give one in batch_size"
    t = _q(inputs.table.path)
    return (
        f"{has}: use one of them, or measure batch size {batch}: rota profile --models {_q(model)} "
        f"--batch-sizes {batch} --out {t} for a reference model that has it (rota profile --list-models), "
        f"--workload or --command with --batch-sizes {batch} for your own; or {_hand_written(inputs.table.path)}"
    )


def scale_remedy(job_type: JobType, table_path: object) -> str:
    sizes = f" --batch-sizes {job_type.batch_size}" if job_type.batch_size is not None else ""
    scale = job_type.scale_factor
    return (
        f"use one of them, or measure scale factor {scale}: rota profile --models {_q(job_type.model)}{sizes} "
        f"--scale-factors {scale} --out {_q(table_path)} (reference models, on a host with {scale} devices of "
        f"the type; your own models are measured at scale factor 1), or {_hand_written(table_path)}"
    )


def _too_big_remedy(scale: int, inputs: _Inputs) -> str:
    largest = max(inputs.cluster.worker_types.values(), key=lambda w: w.gpus)
    return (
        f"the largest worker type of {inputs.cluster.path}, {largest.name}, has {largest.gpus} GPUs: lower "
        f"scale_factor to at most {largest.gpus}, or add a worker type with at least {scale} GPUs to "
        f"{inputs.cluster.path}"
    )


def _nowhere_remedy(job_type: JobType, inputs: _Inputs) -> str:
    table, cluster = inputs.table, inputs.cluster
    reasons, missing = [], False
    for w in cluster.names:
        if cluster.capacity(w) < job_type.scale_factor:
            reasons.append(f"{w} has {cluster.capacity(w)} GPU(s)")
        elif not table.has(w, job_type):
            reasons.append(f"{w} has no row")
            missing = True
        else:
            reasons.append(f"{w}'s row says it cannot run there")
    fixes = ["lower scale_factor", f"add a worker type it runs on to {cluster.path}"]
    if missing:
        fixes.insert(
            0, f"measure or estimate the missing rows (rota table estimate {_q(table.path)} --out FULL.csv --solo)"
        )
    return f"{'; '.join(reasons)}: {', or '.join(fixes)}"


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


def check_jobs(
    records: Iterable[Mapping[str, Any]],
    *,
    table: ThroughputTable,
    cluster: Cluster,
    path: object = "<jobs>",
    columns: Iterable[str] | None = None,
    unestimated: Mapping[JobType, str] | None = None,
) -> JobListCheck:
    """Every row checked, by the same checks `parse_jobs` makes: the valid jobs, and every fault
    (a row with one is left out, and the next row checked; the same fault in several rows is
    one problem naming them). Nothing is raised for a row. The job types of rows the table has at
    other scale factors only are in `scale_gaps` (planner.estimate.scaling can add rows for them);
    `unestimated`: why it did not, per job type, said in those rows' errors."""
    records = list(records)
    check = JobListCheck(path)
    _check_columns(dict.fromkeys(k for rec in records for k in rec) if columns is None else columns, check)
    if not records:
        check.add(InputError("no jobs", path=path))
        return check
    inputs = _Inputs(
        table,
        cluster,
        frozenset(jt.model for jt in table.job_types),
        max(w.gpus for w in cluster.worker_types.values()),
        unestimated=unestimated or {},
    )
    seen: dict[str, int] = {}
    for row, raw in enumerate(records, start=1):
        at = Where(path, row)
        try:
            job_id = check_job_id(required_text(raw.get("job_id"), at, "job_id"), at)
            first = seen.setdefault(job_id, row)
            if first != row:  # said, and the row's other fields still checked
                reason = f"duplicate job id {short(job_id)} (first in row {first})"
                check.add(_fault(at, "job_id", reason, "give each job its own job_id"))
            job = _parse_job(raw, at, inputs, job_id)
        except InputError as exc:
            check.add(exc)
            continue
        if first == row:
            check.jobs.append(job)
            check.rows.append(row)
    return check


def parse_jobs(
    records: Iterable[Mapping[str, Any]],
    *,
    table: ThroughputTable,
    cluster: Cluster,
    path: object = "<jobs>",
    columns: Iterable[str] | None = None,
    hint: str | None = None,
) -> list[Job]:
    """Validated jobs, in file order. InputError when a row has a fault: one fault is one line
    naming its row and field (and its remedy), several are listed one per line (`JobListError`);
    `hint`: the command that lists them all, named when they are too many to list."""
    check = check_jobs(records, table=table, cluster=cluster, path=path, columns=columns)
    check.raise_errors(hint or "rota jobs validate")
    return check.jobs


def validate_command(path: object, table: ThroughputTable, cluster: Cluster) -> str:
    """The `rota jobs validate` command line for a job list and the table and cluster given."""
    return f"rota jobs validate {_q(path)} --table {_q(table.path)} --cluster {_q(cluster.path)}"


def read_job_list(path: str | os.PathLike) -> tuple[list[Mapping[str, Any]], list[str] | None]:
    """The records of a job list file as written (CSV: with its columns), unchecked; InputError
    when the file does not parse."""
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
            return data, None
        columns, records = read_csv_records(path, "jobs")
        return list(records), columns
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"cannot parse: {str(exc).splitlines()[0]}", path=path) from None


def read_jobs(path: str | os.PathLike, *, table: ThroughputTable, cluster: Cluster) -> list[Job]:
    records, columns = read_job_list(path)
    hint = validate_command(path, table, cluster)
    return parse_jobs(records, table=table, cluster=cluster, path=Path(path), columns=columns, hint=hint)


def node_warnings(check: JobListCheck, table: ThroughputTable, cluster: Cluster) -> list[Problem]:
    """Warnings for the job types whose gang is bigger than every node of the worker types it
    can run on: each run spans several nodes (docs/placement.md)."""
    rows: dict[JobType, list[int]] = {}
    for job, row in zip(check.jobs, check.rows):
        rows.setdefault(job.job_type, []).append(row)
    out = []
    for jt, found in rows.items():
        runs = [cluster.worker_types[w] for w in cluster.names if cluster.capacity(w) >= jt.scale_factor]
        runs = [w for w in runs if table.solo(w.name, jt) > 0]
        per_node = max((w.gpus_per_node for w in runs), default=jt.scale_factor)
        if jt.scale_factor <= per_node:
            continue
        nodes = ", ".join(f"{w.name} {w.gpus_per_node}" for w in runs)
        problem = Problem(
            "warning",
            f"{jt.label} needs {jt.scale_factor} GPUs, more than any node it can run on has (GPUs per node: "
            f"{nodes}): each run spans several nodes (docs/placement.md)",
            "scale_factor",
            f"lower scale_factor to at most {per_node} to keep each run on one node",
        )
        for row in found:
            problem.add_row(row)
        out.append(problem)
    return out
