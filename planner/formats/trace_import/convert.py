"""From a reader's jobs to rota jobs: filters, time window, arrival order, sizing, counts.

The order of decisions (each job is counted once, under the first that leaves it out):
what the reader found (no attempts, still running, ...), --status, --entity, run time
(missing, 0, below --min-duration-s), GPUs (none), the --start-s/--end-s window, then in
arrival order --max-gpus, the job type and steps (`sizing`), and --max-jobs. Arrivals are
shifted so that the first job kept arrives at 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from planner.errors import InputError
from planner.formats.jobs import Job
from planner.formats.table import JobType
from planner.formats.trace_import.common import (
    DROP_REASONS,
    MAX_IMPORT_JOBS,
    ImportOptions,
    ImportSummary,
    SourceJob,
)
from planner.formats.trace_import.sizing import Dropped, Sized, Sizer

TICK = 4096  # jobs read between two progress callbacks


def _first_reason(job: SourceJob, options: ImportOptions, statuses: frozenset[str] | None) -> str | None:
    """Why `job` is left out before sizing, or None."""
    if job.problem is not None:
        return job.problem
    if job.submit_s is None:
        return "no_submit_time"
    if statuses is not None and (job.status or "").lower() not in statuses:
        return "status"
    if options.entities is not None and job.entity not in options.entities:
        return "entity"
    if job.job_type is None:
        if job.duration_s is None:
            return "no_duration"
        if job.duration_s <= 0:
            return "zero_duration"
        if job.duration_s < options.min_duration_s:
            return "short"
    if not job.gpus:
        return "zero_gpus"
    return None


def _screen(
    jobs: Iterable[SourceJob], options: ImportOptions, summary: ImportSummary, tick: Callable[[int], None] | None
) -> list[SourceJob]:
    statuses = None if options.statuses is None else frozenset(s.lower() for s in options.statuses)
    kept: list[SourceJob] = []
    first: float | None = None
    for job in jobs:
        summary.read += 1
        if tick is not None and summary.read % TICK == 0:
            tick(TICK)
        if job.status is not None:
            summary.statuses[job.status] += 1
        if job.submit_s is not None and (first is None or job.submit_s < first):
            first = job.submit_s
        reason = _first_reason(job, options, statuses)
        if reason is None:
            kept.append(job)
        else:
            summary.drop(reason)
    summary.first_submit_s = first
    return kept


def _in_window(jobs: list[SourceJob], options: ImportOptions, summary: ImportSummary) -> list[SourceJob]:
    if options.start_s is None and options.end_s is None:
        return jobs
    first = summary.first_submit_s or 0.0
    start = -float("inf") if options.start_s is None else options.start_s
    end = float("inf") if options.end_s is None else options.end_s
    inside = []
    for job in jobs:
        assert job.submit_s is not None
        if start <= job.submit_s - first < end:
            inside.append(job)
        else:
            summary.drop("window")
    return inside


def _sized(
    jobs: list[SourceJob], sizer: Sizer, options: ImportOptions, summary: ImportSummary
) -> list[tuple[SourceJob, Sized]]:
    limit = options.max_jobs or MAX_IMPORT_JOBS
    out: list[tuple[SourceJob, Sized]] = []
    for index, job in enumerate(jobs):
        if len(out) == limit:
            if options.max_jobs is None:
                raise InputError(
                    f"more than {MAX_IMPORT_JOBS} jobs would be kept: choose some with --max-jobs, "
                    "--start-s/--end-s or --entity",
                    path=job.row.path,
                )
            summary.dropped["max_jobs"] += len(jobs) - index
            break
        assert job.gpus is not None
        try:
            sized = sizer.size(job, sizer.gpus(job.gpus))
        except Dropped as exc:
            summary.drop(exc.reason)
            continue
        except InputError as exc:
            if not options.skip_bad_rows:
                raise
            summary.bad_row(exc)
            continue
        out.append((job, sized))
    return out


def _unique(job_id: str, seen: set[str], summary: ImportSummary) -> str:
    if job_id not in seen:
        seen.add(job_id)
        return job_id
    summary.ids_renamed += 1
    n = 2
    while f"{job_id}~{n}" in seen:
        n += 1
    seen.add(f"{job_id}~{n}")
    return f"{job_id}~{n}"


def _jobs(pairs: list[tuple[SourceJob, Sized]], summary: ImportSummary) -> list[Job]:
    base = pairs[0][0].submit_s
    assert base is not None
    summary.arrival_offset_s = base - (summary.first_submit_s or 0.0)
    seen: set[str] = set()
    jobs = []
    types: Counter[JobType] = Counter()
    for source, sized in pairs:
        assert source.submit_s is not None
        arrival = source.submit_s - base
        job = Job(
            _unique(source.job_id, seen, summary),
            sized.job_type,
            sized.total_steps,
            source.priority_weight,
            arrival,
            entity=source.entity,
            slo_s=sized.slo_s,
        )
        jobs.append(job)
        summary.scale_factors[job.scale_factor] += 1
        types[sized.job_type] += 1
        if source.entity is not None:
            summary.entities[source.entity] += 1
        if source.duration_s is not None:
            summary.total_duration_s += source.duration_s
            summary.with_duration += 1
        summary.last_arrival_s = arrival
    for job_type, n in types.items():
        summary.job_types[job_type.name] += n  # scale factors apart: summed under the model's name
    summary.kept = len(jobs)
    return jobs


def convert(
    jobs: Iterable[SourceJob],
    sizer: Sizer,
    options: ImportOptions,
    summary: ImportSummary,
    *,
    tick: Callable[[int], None] | None = None,
) -> list[Job]:
    """The rota jobs of a trace, in arrival order (the first at 0); `summary` counts every decision.
    `tick(n)`: n more jobs read (a progress bar)."""
    candidates = _in_window(_screen(jobs, options, summary, tick), options, summary)
    candidates.sort(key=lambda j: j.submit_s or 0.0)  # stable: file order among equal submissions
    pairs = _sized(candidates, sizer, options, summary)
    if not pairs:
        reasons = ", ".join(f"{n} {DROP_REASONS[k]}" for k, n in summary.dropped.most_common(3))
        raise InputError(
            f"no job left to write: {summary.read} read" + (f", dropped: {reasons}" if reasons else ""),
            path=summary.inputs[0] if len(summary.inputs) == 1 else None,
        )
    return _jobs(pairs, summary)
