"""Cells a job list needs that the throughput table does not have.

A job type with no solo row on a worker type of the cluster cannot run there: the policy gets
throughput 0 for it. A row that says so (status oom or failed) is a measurement; a row that is
simply absent is a gap the user may not know about (a model profiled on some GPUs only, a
hand-written table), so the plan says so once per job type, or refuses with --strict-cells.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from planner.errors import InputError
from planner.formats.cluster import Cluster
from planner.formats.jobs import Job
from planner.formats.table import JobType, ThroughputTable

REMEDY = "measure it (rota profile) or estimate it (rota table estimate --solo)"


@dataclass(frozen=True)
class MissingCells:
    """A job type of the job list with no solo row on some worker types it would fit on."""

    job_type: JobType
    worker_types: tuple[str, ...]  # in cluster order
    jobs: int  # how many jobs of the list have this type

    def describe(self) -> str:
        types = ", ".join(self.worker_types)
        rows = "row" if len(self.worker_types) == 1 else "rows"
        count = "1 job" if self.jobs == 1 else f"{self.jobs} jobs"
        return (
            f"{self.job_type.label} ({count}) has no {types} {rows} in the table: it will not run on {types}; {REMEDY}"
        )

    def to_json(self) -> dict[str, object]:
        jt = self.job_type
        return {
            "model": jt.model,
            "batch_size": jt.batch_size,
            "scale_factor": jt.scale_factor,
            "worker_types": list(self.worker_types),
            "jobs": self.jobs,
        }


def missing_cells(table: ThroughputTable, jobs: Iterable[Job], cluster: Cluster) -> list[MissingCells]:
    """Per job type of `jobs`, in first-seen order: the cluster's worker types with room for its
    gang (scale factor within the type's GPUs) where the table has no solo row for it."""
    counts: dict[JobType, int] = {}
    for job in jobs:
        counts[job.job_type] = counts.get(job.job_type, 0) + 1
    out = []
    for jt, n in counts.items():
        absent = tuple(w for w in cluster.names if cluster.capacity(w) >= jt.scale_factor and not table.has(w, jt))
        if absent:
            out.append(MissingCells(jt, absent, n))
    return out


def refuse_missing(missing: list[MissingCells], table_path: object) -> None:
    """--strict-cells: one error line naming the first gap and counting the rest (nothing when
    there is none)."""
    if not missing:
        return
    first = missing[0].describe()
    more = f" (and {len(missing) - 1} more job type(s) with missing rows)" if len(missing) > 1 else ""
    raise InputError(f"--strict-cells: {first}{more}", path=table_path, field="worker_type")
