"""Microsoft's Philly trace: `cluster_job_log` of https://github.com/msr-fiddle/philly-traces.

A JSON list of jobs, each {jobid, user, vc, status (Pass / Killed / Failed), submitted_time,
attempts: [{start_time, end_time, detail: [{ip, gpus: [...]}]}]}; times are
'YYYY-MM-DD HH:MM:SS'. Per the trace's README a job may have no attempt, an attempt may lack
its start or end time (a logging error), and a last attempt without an end time was still
running when the trace was taken.

A job's GPUs are those of its first attempt (all servers of its `detail`); its run time is
the sum of its attempts' run times (`sum`), its last attempt's (`last`), or from its first
attempt's start to its last attempt's end (`span`, restarts' waits included).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from planner.errors import InputError
from planner.formats.fields import Where, short
from planner.formats.files import read_json
from planner.formats.trace_import.common import BadRows, SourceJob, entity_text, id_text, parse_time, status_text

STATUSES = ("Pass", "Killed", "Failed")
DURATIONS = ("sum", "last", "span")
ENTITY_FROM = ("vc", "user", "none")


def _attempts(job: dict[str, Any], at: Where) -> list[dict[str, Any]]:
    attempts = job.get("attempts")
    if attempts is None:
        return []
    if not isinstance(attempts, list) or not all(isinstance(a, dict) for a in attempts):
        raise at.error("attempts", f"expected a list of attempts (objects), got {short(attempts)}")
    return attempts


def _gpus(attempt: dict[str, Any], at: Where) -> int:
    detail = attempt.get("detail")
    if detail is None:
        return 0
    if not isinstance(detail, list):
        raise at.error("attempts[0].detail", f"expected a list of servers, got {short(detail)}")
    count = 0
    for server in detail:
        gpus = server.get("gpus") if isinstance(server, dict) else None
        if not isinstance(gpus, list):
            raise at.error("attempts[0].detail", f"expected servers with a list of gpus, got {short(server)}")
        count += len(gpus)
    return count


def _times(attempts: list[dict[str, Any]], at: Where) -> list[tuple[float | None, float | None]]:
    return [
        (
            parse_time(a.get("start_time"), at, f"attempts[{i}].start_time"),
            parse_time(a.get("end_time"), at, f"attempts[{i}].end_time"),
        )
        for i, a in enumerate(attempts)
    ]


def run_time(times: list[tuple[float | None, float | None]], mode: str) -> tuple[float | None, str | None]:
    """(run time, None) or (None, the reason there is none: a DROP_REASONS key)."""
    if not times:
        return None, "no_attempts"
    if times[-1][1] is None and times[-1][0] is not None:
        return None, "running"
    if mode == "last":
        start, end = times[-1]
        return (None, "no_duration") if start is None or end is None else (end - start, None)
    if mode == "span":
        start, end = times[0][0], times[-1][1]
        return (None, "no_duration") if start is None or end is None else (end - start, None)
    runs = [end - start for start, end in times if start is not None and end is not None]
    return (sum(runs), None) if runs else (None, "no_duration")


def _job(raw: Any, at: Where, duration: str, entity_from: str) -> SourceJob:
    if not isinstance(raw, dict):
        raise at.error(None, f"expected a job (an object with jobid, submitted_time, attempts), got {short(raw)}")
    job_id = id_text(raw.get("jobid"), at, "jobid")
    attempts = _attempts(raw, at)
    seconds, problem = run_time(_times(attempts, at), duration)
    status = raw.get("status")
    if status is not None and not isinstance(status, str):
        raise at.error("status", f"expected text, got {short(status)}")
    status = status_text(status)
    entity = None if entity_from == "none" else entity_text(raw.get(entity_from), at, entity_from)
    return SourceJob(
        at,
        job_id,
        parse_time(raw.get("submitted_time"), at, "submitted_time"),
        duration_s=seconds,
        gpus=_gpus(attempts[0], at) if attempts else None,
        status=status,
        entity=entity,
        problem=problem,
    )


def read_philly(
    path: str | os.PathLike, bad: BadRows, *, duration: str = "sum", entity_from: str = "vc"
) -> Iterator[SourceJob]:
    """The jobs of a `cluster_job_log` in file order; rows are the jobs' positions from 1."""
    data = read_json(path, "trace")
    if isinstance(data, dict) and isinstance(data.get("jobs"), list):
        data = data["jobs"]
    if not isinstance(data, list):
        raise InputError("expected a JSON list of jobs (Philly's cluster_job_log)", path=path)
    for row, raw in enumerate(data, start=1):
        at = Where(path, row)
        try:
            job = _job(raw, at, duration, entity_from)
        except InputError as exc:
            bad.add(exc)
            continue
        yield job
