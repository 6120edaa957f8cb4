"""The progress a launcher reports between rounds (`rota.progress/v1`).

One JSON object (format, round, time_s, jobs, new_jobs, cancelled), a CSV with
job_id, steps_done[, finished][, elapsed_s], or a folder of one JSON object per job
(what each job wrote at its checkpoint; the file name is the job id by default).
`elapsed_s` (optional) is the seconds the job trained in the reported rounds: it
makes the report a throughput observation even when the job stopped early.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.formats.fields import (
    MAX_STEPS,
    MAX_TIME_S,
    NON_NEGATIVE_FINITE,
    Where,
    is_blank,
    parse_flag,
    parse_float,
    short,
)
from planner.formats.files import parse_json, read_csv_records, read_text

PROGRESS_FORMAT = "rota.progress/v1"

Gpu = tuple[str, int]  # (node name, GPU index on that node)

_DOCUMENT_KEYS = ("format", "round", "time_s", "jobs", "new_jobs", "cancelled")
_JOB_KEYS = ("job_id", "steps_done", "finished", "gpus", "elapsed_s")


@dataclass
class JobProgress:
    steps_done: float | None = None
    finished: bool = False
    gpus: tuple[Gpu, ...] | None = None  # what the job actually held (lease extension)
    elapsed_s: float | None = None  # seconds it trained in the reported rounds (None: not said)


@dataclass
class Progress:
    """What the launcher saw since the last call."""

    time_s: float | None = None  # the round boundary now (default: end of the planned round)
    round: int | None = None  # the round these reports are for (checked: the last planned one)
    jobs: dict[str, JobProgress] = field(default_factory=dict)
    new_jobs: list[dict[str, Any]] = field(default_factory=list)  # job-list records (same columns)
    cancelled: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Any, path: object = "<progress>") -> Progress:
        if not isinstance(data, dict):
            raise InputError("expected a JSON object", path=path)
        if data.get("format", PROGRESS_FORMAT) != PROGRESS_FORMAT:
            raise InputError(
                f"unsupported format {short(data.get('format'))} (expected {PROGRESS_FORMAT})",
                path=path,
                field="format",
            )
        unknown = set(data) - set(_DOCUMENT_KEYS)
        if unknown:
            raise InputError(f"unknown key (expected {', '.join(_DOCUMENT_KEYS)})", path=path, field=sorted(unknown)[0])
        rnd = data.get("round")
        if rnd is not None and (isinstance(rnd, bool) or not isinstance(rnd, int) or rnd < 0):
            raise InputError(f"expected a round index, got {short(rnd)}", path=path, field="round")
        time_s = data.get("time_s")
        time_s = None if time_s is None else _number(time_s, path, None, "time_s")
        jobs = _job_reports(data.get("jobs", []), path)
        new_jobs = data.get("new_jobs", [])
        if not isinstance(new_jobs, list) or not all(isinstance(r, dict) for r in new_jobs):
            raise InputError("expected a list of job objects (job-list columns)", path=path, field="new_jobs")
        cancelled = data.get("cancelled", [])
        if not isinstance(cancelled, list):
            raise InputError("expected a list of job ids", path=path, field="cancelled")
        return cls(time_s, rnd, jobs, list(new_jobs), [str(c) for c in cancelled])


def _job_reports(raw_jobs: Any, path: object) -> dict[str, JobProgress]:
    if isinstance(raw_jobs, dict):  # {"id": {"steps_done": ..}} or {"id": steps}
        raw_jobs = [{"job_id": k, **(v if isinstance(v, dict) else {"steps_done": v})} for k, v in raw_jobs.items()]
    if not isinstance(raw_jobs, list):
        raise InputError("expected a list of job progress objects", path=path, field="jobs")
    jobs: dict[str, JobProgress] = {}
    for row, raw in enumerate(raw_jobs, start=1):
        jid, prog = job_progress(raw, path=path, row=row)
        if jid in jobs:
            raise InputError(f"job {short(jid)} reported twice", path=path, row=row, field="job_id")
        jobs[jid] = prog
    return jobs


# The largest value each number of a report may have (a typo or a garbage counter must not
# become a clock of 1e308 s or 1e15 steps).
_LIMITS = {"steps_done": MAX_STEPS, "time_s": MAX_TIME_S, "elapsed_s": MAX_TIME_S}


def _number(value: Any, path: object, row: int | None, field: str) -> float:
    number = parse_float(value, Where(path, row), field, minimum=0, wording=NON_NEGATIVE_FINITE)
    limit = _LIMITS[field]
    if number > limit:
        raise InputError(f"{number:g} is more than the {limit:g} a report may say", path=path, row=row, field=field)
    return number


def job_progress(raw: Any, *, path: object, row: int | None) -> tuple[str, JobProgress]:
    """(job id, report) from one job's progress object."""
    if not isinstance(raw, dict) or not str(raw.get("job_id", "")).strip():
        raise InputError("expected an object with job_id", path=path, row=row, field="job_id")
    unknown = set(raw) - set(_JOB_KEYS)
    if unknown:
        raise InputError(f"unknown key (expected {', '.join(_JOB_KEYS)})", path=path, row=row, field=sorted(unknown)[0])
    steps = raw.get("steps_done")
    steps_done = None if is_blank(steps) else _number(steps, path, row, "steps_done")
    gpus: tuple[Gpu, ...] | None = None
    if raw.get("gpus") is not None:
        try:
            gpus = tuple((str(g["node"]), int(g["gpu"])) for g in raw["gpus"])
        except (TypeError, KeyError, ValueError, OverflowError):
            raise InputError("expected a list of {node, gpu}", path=path, row=row, field="gpus") from None
    finished = parse_flag(raw.get("finished", False), Where(path, row), "finished")
    elapsed = raw.get("elapsed_s")
    elapsed_s = None if is_blank(elapsed) else _number(elapsed, path, row, "elapsed_s")
    return str(raw["job_id"]).strip(), JobProgress(steps_done, finished, gpus, elapsed_s)


def progress_from_dict(data: Any, path: object = "<progress>") -> Progress:
    return Progress.from_json(data, path)


def read_progress(path: str | os.PathLike) -> Progress:
    """A progress file (JSON, or CSV with job_id, steps_done[, finished]) or a folder of
    one JSON object per job (what each job wrote at its checkpoint)."""
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path=path)
    if path.is_dir():
        return _read_folder(path)
    if path.suffix.lower() == ".csv":
        return _read_csv(path)
    return Progress.from_json(_parse_json(path), path)


def _parse_json(path: Path) -> Any:
    return parse_json(read_text(path, "progress"), path, what="cannot parse")


def _read_folder(folder: Path) -> Progress:
    """One JSON object per job; the file name is the job id, and a job_id inside must agree
    (a report copied to another job's file would credit the wrong job)."""
    jobs: dict[str, JobProgress] = {}
    for item in sorted(folder.glob("*.json")):
        raw = _parse_json(item)
        if isinstance(raw, dict):
            inside = raw.setdefault("job_id", item.stem)
            if str(inside).strip() != item.stem:
                raise InputError(
                    f"job_id {short(inside)} differs from the file name {short(item.stem)} (one file per job, named "
                    "after it)",
                    path=item,
                    field="job_id",
                )
        jid, prog = job_progress(raw, path=item, row=None)
        if jid in jobs:
            raise InputError(f"job {short(jid)} reported twice", path=item, field="job_id")
        jobs[jid] = prog
    return Progress(jobs=jobs)


def _read_csv(path: Path) -> Progress:
    columns, rows = read_csv_records(path, "progress")
    if "job_id" not in columns:
        raise InputError(
            "missing column (expected job_id, steps_done[, finished][, elapsed_s])", path=path, field="job_id"
        )
    records = [
        {k: v for k, v in rec.items() if not (k in ("finished", "gpus", "elapsed_s") and str(v).strip() == "")}
        for rec in rows
    ]
    if any("gpus" in r for r in records):
        raise InputError("gpus can only be reported in JSON progress files", path=path, field="gpus")
    return Progress.from_json({"jobs": records}, path)
