"""Restart cost learnt in production: every report of a round in which a job (re)started is a
measurement of what a restart costs it.

A job that starts on GPUs it did not hold the round before spends the first part of the round
starting: the process, the model build, the checkpoint load. Its report says how many steps it
did and (`elapsed_s`) for how long it ran; the table says its step rate in that cell. What the
steps do not account for is the restart's overhead:

    overhead = (elapsed_s - steps / rate) / starts

with `starts` the (re)starts the plan made in the reported rounds (usually one round, one
start). (The throughput a report shows, planner/estimate/observed.py, leaves out the seconds the
plan charged its restarts.) The overheads of a job type on a worker type are kept (the latest `KEEP`), and their
median is the restart cost the planner charges once `min_count` reports exist
(planner/rounds/restart.py puts it after the table's measured restart columns and before the
cluster's `restart_s` guess).

What is not a measurement:
* a report of a round without a start (a lease extension costs nothing);
* a report without steps, or with steps the rate cannot explain (more steps than the time
  allows: the table's rate is too slow for this job, so the overhead is not visible);
* a report without `elapsed_s` of a job that finished (it stopped before the round ended) or
  that did exactly its planned steps (it may stop once it has: how long it ran is not known);
* a cell the table has no rate for, or only an estimated one (an estimate may be off several
  times over: the cell's observed median, planner/estimate/observed.py, replaces it once
  enough reports exist, and from then on its restarts are measured too).
An overhead above the reported seconds cannot be: it is capped there (the job did no step).

Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from planner.estimate.observed import CellStats, stats
from planner.formats.progress import JobProgress
from planner.formats.state import CellKey, RestartKey, WindowEntry
from planner.formats.table import RUNNABLE_STATUSES, JobType, ThroughputTable, is_estimate, model_label, row_key

KEEP = 50  # latest overheads kept per job type and worker type
MIN_SECONDS = 1e-9


@dataclass(frozen=True)
class Overhead:
    job_id: str
    key: RestartKey  # worker type, model, batch size, scale factor
    seconds: float  # per restart


def trusted_rates(table: ThroughputTable) -> dict[CellKey, float]:
    """Steps/s of the table's cells that are measured or observed, not estimated: an estimate
    may be off several times over, and so would be an overhead measured against it."""
    return {
        row_key(r): r["throughput"]
        for r in table.rows
        if r["status"] in RUNNABLE_STATUSES and not is_estimate(r) and r["throughput"] > 0
    }


def overheads(
    window: Iterable[WindowEntry],
    reports: Mapping[str, JobProgress],
    table: ThroughputTable,
    skip: Iterable[str] = (),
) -> list[Overhead]:
    """The per-restart overheads `reports` show for the window's entries that (re)started."""
    skipped = set(skip)
    rates = trusted_rates(table)
    found = []
    for entry in window:
        report = reports.get(entry.job_id)
        if entry.starts < 1 or report is None or entry.job_id in skipped or report.steps_done is None:
            continue
        steps = report.steps_done - entry.steps_before
        if report.elapsed_s is None and (report.finished or abs(steps - entry.planned_steps) < 1e-9):
            continue  # it may have stopped early, or at its planned steps: how long it ran is not known
        seconds = entry.seconds if report.elapsed_s is None else report.elapsed_s
        rate = rates.get(entry.cell)
        if rate is None or steps < 0 or not seconds > MIN_SECONDS:
            continue
        lost = seconds - steps / rate
        if lost < -1e-6 * seconds:
            continue  # faster than the table: the overhead is hidden in a wrong rate
        # Rounding error of steps / rate is no overhead: a charge of 1e-13 s would cost a step.
        lost = max(0.0, round(lost, 3))
        worker_type, model, batch, scale = entry.cell[:4]
        found.append(Overhead(entry.job_id, (worker_type, model, batch, scale), min(lost, seconds) / entry.starts))
    return found


def record_overheads(
    saved: Mapping[RestartKey, list[float]], found: Iterable[Overhead]
) -> dict[RestartKey, list[float]]:
    """`saved` with the new overheads appended, each key keeping its latest KEEP."""
    out = {key: list(values) for key, values in saved.items()}
    for overhead in found:
        out.setdefault(overhead.key, []).append(overhead.seconds)
    return {key: values[-KEEP:] for key, values in out.items()}


def overhead_stats(samples: Mapping[RestartKey, list[float]]) -> dict[RestartKey, CellStats]:
    """Count, median and IQR of each key's overheads (seconds)."""
    return {key: stats(values) for key, values in samples.items() if values}


def learnt_costs(samples: Mapping[RestartKey, list[float]], min_count: int) -> dict[tuple[str, JobType], float]:
    """The restart cost to charge per (worker type, job type): the median of at least `min_count` overheads."""
    return {
        (key[0], JobType(key[1], key[2], key[3])): s.median
        for key, s in overhead_stats(samples).items()
        if s.count >= max(1, min_count)
    }


def describe_key(key: RestartKey) -> str:
    worker_type, model, batch, scale = key
    return f"{model_label(model, batch)} x{scale} on {worker_type}"


RESTART_CSV_COLUMNS = ["worker_type", "model", "batch_size", "scale_factor", "restarts", "median_s", "iqr_s", "source"]


def restart_rows(samples: Mapping[RestartKey, list[float]], min_count: int) -> list[dict[str, object]]:
    """One row per job type and worker type with at least `min_count` learnt overheads (the
    `rota table observed --restarts` CSV)."""
    rows: list[dict[str, object]] = []
    for key, s in sorted(overhead_stats(samples).items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0, kv[0][3])):
        if s.count < max(1, min_count):
            continue
        worker_type, model, batch, scale = key
        rows.append(
            {
                "worker_type": worker_type,
                "model": model,
                "batch_size": batch,
                "scale_factor": scale,
                "restarts": s.count,
                "median_s": s.median,
                "iqr_s": s.iqr,
                "source": f"learnt: median of {s.count} restart(s) in progress reports",
            }
        )
    return rows
