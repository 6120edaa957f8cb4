"""Estimated cells at the pessimistic end of their error (`rota capacity`'s sensitivity column).

A row that `rota table estimate` wrote says how far off such estimates were when checked against
held-out measurements ("p90 error N %" in its device_name). A recommendation that rests on
estimated rows is worth re-checking with every estimate lowered by that much: if the answer holds
there, the estimate was good enough to decide on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from planner.estimate.cold_start import ESTIMATE_BAND
from planner.formats.jobs import Job
from planner.formats.table import TableRow, ThroughputTable, is_estimate

UNKNOWN_BAND = 0.25  # an estimate that does not say its error is taken as 25 % off at worst


@dataclass(frozen=True)
class EstimatedCells:
    """Of the job list's job types, how many have an estimated solo row on a worker type."""

    worker_type: str
    estimated: int
    job_types: int
    band: float  # the largest p90 error among them (UNKNOWN_BAND where a row states none)

    def describe(self) -> str:
        return (
            f"{self.worker_type}: {self.estimated} of {self.job_types} job types' rows are estimated "
            f"(p90 error up to {100 * self.band:.0f} %)"
        )


def band(row: TableRow) -> float:
    """The p90 error the row's provenance states (UNKNOWN_BAND when it states none)."""
    found = ESTIMATE_BAND.search(str(row.get("device_name") or ""))
    return int(found["pct"]) / 100.0 if found else UNKNOWN_BAND


def estimated_cells(table: ThroughputTable, jobs: Sequence[Job], worker_types: Iterable[str]) -> list[EstimatedCells]:
    """Per worker type (those with any), the job list's job types whose solo row there is an estimate."""
    wanted = {(j.job_type.model, j.job_type.batch_size, j.job_type.scale_factor) for j in jobs}
    out = []
    for worker in worker_types:
        rows = [
            r
            for r in table.rows
            if r["worker_type"] == worker
            and r["partner_model"] is None
            and (r["model"], r["batch_size"], r["scale_factor"]) in wanted
            and is_estimate(r)
        ]
        if rows:
            out.append(EstimatedCells(worker, len(rows), len(wanted), max(band(r) for r in rows)))
    return out


def pessimistic(table: ThroughputTable) -> ThroughputTable:
    """The table with every estimated throughput lowered by its p90 error (measured rows as they are)."""
    rows = []
    for r in table.rows:
        if is_estimate(r) and r["throughput"] > 0:
            r = {**r, "throughput": r["throughput"] * (1.0 - min(band(r), 0.95))}
        rows.append(r)
    return ThroughputTable(rows, path=f"{table.path} (estimates at their p90 error)")
