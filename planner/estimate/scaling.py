"""Estimate a scale factor the throughput table lacks from the job type's other data-parallel rows.

Traces give jobs GPU counts the table has no row for: Gavel's table measures 1, 2, 4 and 8 GPUs,
while its Philly trace has gangs of 12, 16, 32 and 64. A job type (model, batch size) that the
table has at *other* scale factors is estimated at the missing one, per worker type, from its own
measured solo rows there (docs/estimation.md, "Missing scale factors"):

* **model**: a power law ``T(k) = T1 * k**alpha`` (k GPUs, T steps/s of the whole job), fitted by
  least squares in log space (``log T = log T1 + alpha log k``) on every measured runnable scale
  factor, with ``alpha`` clipped to [0, 1]: more GPUs never slow a data-parallel job down and
  never speed it up more than linearly. On Gavel's table, predicting the 8-GPU rows from the 1, 2
  and 4-GPU ones, it is off by 14 % in the median (p90 48 %); Amdahl's law with a fitted serial
  fraction by 20 % (p90 56 %).
* **reach**: never further than `max_factor` times the largest measured scale factor (or below
  the smallest divided by it); default 8 (64 GPUs from 8).
* **one measured scale factor**: a curve needs two. By default such a job type is not estimated
  (the error says so); with an assumed `efficiency` E the estimate is E times linear scaling from
  the measured point, ``T(k) = T(k0) * E * k / k0`` (k > k0), stated in the row as an assumption.
* **uncertainty**: each row's provenance (``device_name``) names the fit and a hold-out band,
  ``p90 error N %``: the 90th percentile of the relative error of such extrapolations on Gavel's
  table (55 % for up to 2x beyond the measured range), growing with log2 of the reach beyond 2x;
  for an assumed efficiency, how far E is from the 10th and 90th percentile efficiencies Gavel's
  table measures at 8 GPUs (0.38 and 0.99).
* **cannot run**: where the largest measured scale factor cannot run (status oom/failed), a larger
  gang with the same per-GPU batch cannot either: the row is ``status failed, source estimated``.

Rows are solo rows with ``status`` and ``source`` ``estimated``; no co-location rows are written
(an estimated job type does not pack). Only measured (not estimated) rows are fitted.

`extend_table` is the library call; `read_jobs_scaled` / `read_trace_scaled` read a job list or
trace, estimate rows for exactly the job types it needs, and read it again against the extended
table (every error of the list at once, as `planner.formats.jobs.check_jobs` gives them).

Pure numpy.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from planner.errors import InputError
from planner.formats.cluster import Cluster
from planner.formats.jobs import Job, JobListCheck, check_jobs, read_job_list, validate_command
from planner.formats.table import RUNNABLE_STATUSES, JobType, TableRow, ThroughputTable, is_estimate
from planner.formats.trace import read_gavel_trace

METHOD = "power law"
DEFAULT_MAX_FACTOR = 8.0  # --max-scale-extrapolation: 64 GPUs from 8
# Hold-out on Gavel's table (k80, p100, v100; docs/estimation.md): p90 relative error of the power
# law extrapolating up to 2x beyond the measured scale factors (8 from 1, 2, 4; 8 from 2, 4; 4 from 1, 2).
HOLDOUT_P90 = 0.55
# T(8) / (8 T(1)) in Gavel's table (k80, p100, v100, 56 job type x worker type): 10th and 90th percentile.
EFFICIENCY_P10 = 0.38
EFFICIENCY_P90 = 0.99

MAX_FACTOR_HELP = (
    "Estimate a job type's missing scale factor (GPU count) from its other scale factors, at most this many "
    "times its largest measured one (default 8: up to 64 GPUs from 8); 1: interpolate only. "
    "--strict-cells estimates nothing."
)
EFFICIENCY_HELP = (
    "Assume a job type measured at one scale factor only scales at E times linear (e.g. 0.7) instead of "
    "refusing it (Gavel's table: 0.71 median at 8 GPUs)."
)


# --------------------------------------------------------------------------- the curve


@dataclass(frozen=True)
class ScalingCurve:
    """Steps/s of a job type on one worker type against its GPU count k: ``exp(log_t1) * k**alpha``
    fitted on `scales`, or, with `efficiency`, E times linear scaling from its one measured point."""

    alpha: float
    log_t1: float  # log steps/s at k = 1 (the fitted intercept; for an assumption, of the linear line)
    scales: tuple[int, ...]  # the measured scale factors it rests on
    residual: float = 0.0  # rms of the fit's log residuals (0 for two points or an assumption)
    efficiency: float | None = None  # an assumed efficiency (one measured scale factor), not fitted

    def throughput(self, k: int) -> float:
        if self.efficiency is None:
            return math.exp(self.log_t1 + self.alpha * math.log(k))
        k0 = self.scales[0]
        linear = math.exp(self.log_t1) * k  # through the measured point: exp(log_t1) = T(k0) / k0
        return linear * self.efficiency if k > k0 else linear  # smaller gangs: linear down (a lower bound)

    def reach(self, k: int) -> float:
        """How far `k` lies outside the measured scale factors (a factor; <= 1 inside them)."""
        return max(k / max(self.scales), min(self.scales) / k)

    def band(self, k: int) -> float:
        """The p90 relative error stated for the estimate at `k` (module docstring)."""
        if self.efficiency is not None:
            return max(self.efficiency / EFFICIENCY_P10 - 1.0, 1.0 - self.efficiency / EFFICIENCY_P90)
        return HOLDOUT_P90 * max(1.0, math.log2(self.reach(k)))

    def describe(self, scales: bool = True) -> str:
        """'k^0.87 from x1, x2, x4' (without `scales`: 'k^0.87')."""
        points = f" from {', '.join(f'x{s}' for s in self.scales)}" if scales else ""
        if self.efficiency is not None:
            return f"assumed {self.efficiency:g} x linear scaling (--scale-efficiency){points}"
        return f"k^{self.alpha:.2f}{points}"


def fit_power_law(scales: Sequence[int], throughputs: Sequence[float]) -> ScalingCurve:
    """Least squares of ``log T = log T1 + alpha log k`` with alpha clipped to [0, 1] (the
    intercept refitted for a clipped alpha). Needs two distinct scale factors, throughputs > 0."""
    x = np.log(np.asarray(scales, dtype=float))
    y = np.log(np.asarray(throughputs, dtype=float))
    if len(set(scales)) < 2 or not np.isfinite(y).all():
        raise ValueError("a power law needs positive throughputs at two distinct scale factors")
    dx = x - x.mean()
    alpha = float(np.clip(dx @ (y - y.mean()) / (dx @ dx), 0.0, 1.0))
    log_t1 = float(np.mean(y - alpha * x))
    residual = float(np.sqrt(np.mean((y - log_t1 - alpha * x) ** 2)))
    return ScalingCurve(alpha, log_t1, tuple(int(s) for s in scales), residual)


def assumed_curve(scale: int, throughput: float, efficiency: float) -> ScalingCurve:
    """E times linear scaling from one measured point (`scale`, `throughput`)."""
    return ScalingCurve(1.0, math.log(throughput / scale), (int(scale),), efficiency=efficiency)


# --------------------------------------------------------------------------- one job type


@dataclass(frozen=True)
class WorkerEstimate:
    """The estimated row of a job type on one worker type, and what it rests on."""

    worker_type: str
    row: TableRow  # status estimated, or failed (cannot run)
    basis: str  # e.g. 'k^0.87 from x1, x2, x4', 'cannot run (x8: oom)'
    scales: tuple[int, ...]  # the measured scale factors it rests on
    band: float | None  # the p90 error stated (None for a row that cannot run)


@dataclass(frozen=True)
class ScaleEstimate:
    """What was estimated for one job type the table lacks at its scale factor."""

    job_type: JobType
    workers: tuple[WorkerEstimate, ...]  # worker types with an estimated row, in name order
    skipped: tuple[tuple[str, str], ...] = ()  # (worker type, why no row) where the job type has rows
    jobs: int = 0  # jobs of the list read that have this job type (0: not from a list)

    @property
    def rows(self) -> list[TableRow]:
        return [w.row for w in self.workers]

    @property
    def band(self) -> float:
        """The largest p90 error of its runnable rows (0 when none runs)."""
        return max((w.band for w in self.workers if w.band is not None), default=0.0)

    def describe(self) -> str:
        """One line, as a warning: what was estimated, from what, how wrong it may be, and the fix."""
        count = "" if not self.jobs else " (1 job)" if self.jobs == 1 else f" ({self.jobs} jobs)"
        return f"{self.job_type.label}{count} {self.message()}; {self.remedy()}"

    def remedy(self) -> str:
        return f"measure it to replace the estimate (rota profile --scale-factors {self.job_type.scale_factor})"

    def message(self) -> str:
        """'has no row in the table: estimated from ...' (after the job type's label)."""
        common = sorted({s for w in self.workers for s in w.scales})
        scales = ", ".join(f"x{s}" for s in common)
        by_basis: dict[str, list[str]] = {}
        for w in self.workers:
            own = "" if list(w.scales) == common else f" (x{', x'.join(map(str, w.scales))})"
            by_basis.setdefault(w.basis + own, []).append(w.worker_type)
        if len(by_basis) == 1:  # an assumption, or rows that cannot run: the same on every worker type
            ((basis, workers),) = by_basis.items()
            fits = f"{basis} on {', '.join(workers)}"
        else:
            fits = f"{METHOD} per worker type: " + ", ".join(f"{w} {b}" for b, ws in by_basis.items() for w in ws)
        band = f"; p90 error {100 * self.band:.0f} %" if any(w.band is not None for w in self.workers) else ""
        skipped = "".join(f"; not on {', '.join(ws)}: {why}" for why, ws in _grouped(self.skipped).items())
        return f"has no row in the table: estimated from its {scales} rows ({fits}{band}){skipped}"

    def to_json(self) -> dict[str, Any]:
        jt = self.job_type
        return {
            "model": jt.model,
            "batch_size": jt.batch_size,
            "scale_factor": jt.scale_factor,
            "jobs": self.jobs,
            "method": METHOD,
            "p90_error": round(self.band, 4),
            "worker_types": {
                w.worker_type: {
                    "throughput": w.row["throughput"],
                    "status": w.row["status"],
                    "from": w.basis,
                    "measured_scale_factors": list(w.scales),
                    "p90_error": None if w.band is None else round(w.band, 4),
                }
                for w in self.workers
            },
            "not_estimated": dict(self.skipped),
        }


def _solo_row(worker: str, jt: JobType, throughput: float, status: str, note: str) -> TableRow:
    row = dict.fromkeys(
        (
            "samples_per_s",
            "step_time_median_s",
            "step_time_iqr_s",
            "n_steps",
            "peak_memory_bytes",
            "host",
            "torch_version",
            "measured_at",
            "startup_s",
            "checkpoint_save_s",
            "checkpoint_load_s",
            "notes",
        )
    )
    row.update(
        worker_type=worker,
        model=jt.model,
        batch_size=jt.batch_size,
        scale_factor=jt.scale_factor,
        partner_model=None,
        partner_batch_size=None,
        throughput=throughput,
        status=status,
        source="estimated",
        device_name=note,
    )
    return row  # type: ignore[return-value]  # every column of TableRow


def _family_rows(table: ThroughputTable, jt: JobType) -> dict[str, dict[int, TableRow]]:
    """Measured (not estimated) solo rows of `jt`'s model and batch size: worker type -> scale -> row."""
    out: dict[str, dict[int, TableRow]] = {}
    for r in table.rows:
        if (
            r["partner_model"] is None
            and r["model"] == jt.model
            and r["batch_size"] == jt.batch_size
            and not is_estimate(r)
        ):
            out.setdefault(r["worker_type"], {})[r["scale_factor"]] = r
    return out


def estimate_scale(
    table: ThroughputTable,
    job_type: JobType,
    *,
    max_factor: float = DEFAULT_MAX_FACTOR,
    efficiency: float | None = None,
    worker_types: Iterable[str] | None = None,
) -> ScaleEstimate:
    """Rows for `job_type` on every worker type (of `worker_types`, if given) where its model and
    batch size have measured solo rows at other scale factors (see the module docstring);
    `skipped` says why not on the others of them."""
    k = job_type.scale_factor
    only = None if worker_types is None else set(worker_types)
    workers: list[WorkerEstimate] = []
    skipped: list[tuple[str, str]] = []
    for worker, by_scale in sorted(_family_rows(table, job_type).items()):
        if only is not None and worker not in only:
            continue
        if k in by_scale:  # measured there (a job type is missing only where no worker type has it)
            continue
        runnable = {s: r["throughput"] for s, r in sorted(by_scale.items()) if r["status"] in RUNNABLE_STATUSES}
        largest = max(by_scale)
        if k > largest and by_scale[largest]["status"] not in RUNNABLE_STATUSES:
            status = by_scale[largest]["status"]
            note = f"estimated: x{largest} cannot run here (status {status}), so neither can x{k}"
            row = _solo_row(worker, job_type, 0.0, "failed", note)
            workers.append(WorkerEstimate(worker, row, f"cannot run (x{largest}: {status})", tuple(by_scale), None))
            continue
        if not runnable:
            skipped.append((worker, "no runnable measured row"))
            continue
        if len(runnable) == 1:
            ((k0, t0),) = runnable.items()
            if efficiency is None:
                skipped.append(
                    (
                        worker,
                        f"measured at x{k0} only, and a scaling curve needs two scale factors (--scale-efficiency E "
                        "assumes E times linear scaling)",
                    )
                )
                continue
            curve = assumed_curve(k0, t0, efficiency)
        else:
            curve = fit_power_law(list(runnable), list(runnable.values()))
        reach = curve.reach(k)
        if reach > max_factor * (1 + 1e-9):
            edge = max(curve.scales) if k > max(curve.scales) else min(curve.scales)
            skipped.append(
                (
                    worker,
                    f"x{k} is {reach:g}x {'beyond' if k > edge else 'below'} its measured x{edge}, more than "
                    f"--max-scale-extrapolation {max_factor:g}",
                )
            )
            continue
        band = curve.band(k)
        residual = f" (fit residual {100 * curve.residual:.0f} %)" if len(curve.scales) > 2 else ""
        note = f"estimated: {METHOD} {curve.describe()}{residual}; p90 error {100 * band:.0f} %"
        row = _solo_row(worker, job_type, curve.throughput(k), "estimated", note)
        workers.append(WorkerEstimate(worker, row, curve.describe(scales=False), curve.scales, band))
    return ScaleEstimate(job_type, tuple(workers), tuple(skipped))


def _grouped(skipped: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """why -> the worker types it holds for."""
    grouped: dict[str, list[str]] = {}
    for worker, why in skipped:
        grouped.setdefault(why, []).append(worker)
    return grouped


def _refusal(estimate: ScaleEstimate, worker_types: Sequence[str] | None = None) -> str:
    """Why no row was estimated for a job type (its worker types' reasons, grouped)."""
    grouped = _grouped(estimate.skipped)
    if not grouped:
        where = "" if worker_types is None else f" on {', '.join(worker_types) or 'no worker type'}"
        return f"no measured row of {estimate.job_type.name} at another scale factor{where}"
    return "; ".join(f"on {', '.join(workers)}: {why}" for why, workers in grouped.items())


# --------------------------------------------------------------------------- the table


@dataclass
class ScaleExtension:
    """A table with rows estimated for the job types asked, and the job types it could not extend."""

    table: ThroughputTable
    estimates: list[ScaleEstimate] = field(default_factory=list)  # job types with at least one row
    refused: dict[JobType, str] = field(default_factory=dict)  # job types with none -> why


def missing_scales(table: ThroughputTable, job_types: Iterable[JobType]) -> list[JobType]:
    """Of `job_types` (in first-seen order), those the table has at other scale factors only."""
    have = set(table.job_types)
    families = {(jt.model, jt.batch_size) for jt in have}
    return list(dict.fromkeys(jt for jt in job_types if jt not in have and (jt.model, jt.batch_size) in families))


def plan_extension(
    table: ThroughputTable,
    needed: Iterable[JobType],
    *,
    max_factor: float = DEFAULT_MAX_FACTOR,
    efficiency: float | None = None,
    worker_types: Iterable[str] | Callable[[JobType], Iterable[str]] | None = None,
) -> ScaleExtension:
    """Estimate rows for each job type of `needed` that the table lacks at its scale factor only
    (the others are left alone), on `worker_types` (default: all the table has; a function: those
    for the job type); never raises for a job type it cannot estimate."""
    check_options(max_factor, efficiency)
    fixed = None if worker_types is None or callable(worker_types) else list(worker_types)
    extension = ScaleExtension(table)
    for jt in missing_scales(table, needed):
        names = list(worker_types(jt)) if callable(worker_types) else fixed
        estimate = estimate_scale(table, jt, max_factor=max_factor, efficiency=efficiency, worker_types=names)
        if estimate.workers:
            extension.estimates.append(estimate)
        else:
            extension.refused[jt] = _refusal(estimate, names)
    if extension.estimates:
        rows = [*table.rows, *(r for e in extension.estimates for r in e.rows)]
        extension.table = ThroughputTable(rows, path=table.path)
    return extension


def extend_table(
    table: ThroughputTable,
    needed: Iterable[JobType],
    max_factor: float = DEFAULT_MAX_FACTOR,
    *,
    efficiency: float | None = None,
    worker_types: Iterable[str] | None = None,
) -> tuple[ThroughputTable, list[ScaleEstimate]]:
    """The table with estimated rows for each job type of `needed` it has at other scale factors
    only (on `worker_types`, default all), and what was estimated; InputError (one line, field
    scale_factor) naming the first job type it cannot estimate."""
    extension = plan_extension(table, needed, max_factor=max_factor, efficiency=efficiency, worker_types=worker_types)
    for jt, why in extension.refused.items():
        raise InputError(f"cannot estimate {jt.label}: {why}", path=table.path, field="scale_factor")
    return extension.table, extension.estimates


def check_options(max_factor: float, efficiency: float | None) -> None:
    if not (math.isfinite(max_factor) and max_factor >= 1.0):
        raise InputError(f"must be a number >= 1, got {max_factor!r}", field="--max-scale-extrapolation")
    if efficiency is not None and not (math.isfinite(efficiency) and 0.0 < efficiency <= 1.0):
        raise InputError(f"must be in (0, 1], got {efficiency!r}", field="--scale-efficiency")


# --------------------------------------------------------------------------- reading job lists and traces


@dataclass(frozen=True)
class ScaleOptions:
    """How the readers treat a job type the table has at other scale factors only."""

    max_factor: float = DEFAULT_MAX_FACTOR  # --max-scale-extrapolation
    efficiency: float | None = None  # --scale-efficiency (None: one measured scale factor is refused)
    strict: bool = False  # --strict-cells: estimate nothing; such a job type stays an error


@dataclass
class JobsRead:
    """Jobs read against `table`: the table given, plus the rows estimated for them (`estimates`)."""

    jobs: list[Job]
    table: ThroughputTable
    estimates: list[ScaleEstimate] = field(default_factory=list)  # with `jobs` counted

    @property
    def warnings(self) -> list[str]:
        """One line per estimated job type (say them as the missing-cell warnings are said)."""
        return [e.describe() for e in self.estimates]

    def to_json(self) -> list[dict[str, Any]]:
        return [e.to_json() for e in self.estimates]


def extend_for(
    table: ThroughputTable, job_types: Iterable[JobType], cluster: Cluster, options: ScaleOptions = ScaleOptions()
) -> ScaleExtension:
    """Rows for those of `job_types` the table has at other scale factors only, on the cluster's
    worker types with room for their gang; under --strict-cells none, every such job type refused
    (saying what it would do)."""

    def room(jt: JobType) -> list[str]:
        return [w for w in cluster.names if cluster.capacity(w) >= jt.scale_factor]

    extension = plan_extension(
        table, job_types, max_factor=options.max_factor, efficiency=options.efficiency, worker_types=room
    )
    if not options.strict:
        return extension
    refused = {e.job_type: f"--strict-cells (without it, {_basis(e)})" for e in extension.estimates}
    return ScaleExtension(table, [], {**refused, **extension.refused})


def _basis(estimate: ScaleEstimate) -> str:
    scales = ", ".join(f"x{s}" for s in sorted({s for w in estimate.workers for s in w.scales}))
    return f"it would be estimated from its {scales} rows"


def _counted(estimates: list[ScaleEstimate], jobs: Iterable[Job]) -> list[ScaleEstimate]:
    counts: dict[JobType, int] = {}
    for job in jobs:
        counts[job.job_type] = counts.get(job.job_type, 0) + 1
    return [replace(e, jobs=counts.get(e.job_type, 0)) for e in estimates]


def check_jobs_scaled(
    records: Sequence[Mapping[str, Any]],
    *,
    table: ThroughputTable,
    cluster: Cluster,
    path: object = "<jobs>",
    columns: Iterable[str] | None = None,
    options: ScaleOptions = ScaleOptions(),
) -> tuple[JobListCheck, JobsRead]:
    """`check_jobs`, with rows estimated for the job types the list needs at scale factors the
    table lacks: the check (every problem of the list, against the extended table) and the jobs
    read (nothing raised)."""
    columns = list(columns) if columns is not None else None
    check = check_jobs(records, table=table, cluster=cluster, path=path, columns=columns)
    if not check.scale_gaps:
        return check, JobsRead(check.jobs, table)
    extension = extend_for(table, check.scale_gaps, cluster, options)
    check = check_jobs(
        records, table=extension.table, cluster=cluster, path=path, columns=columns, unestimated=extension.refused
    )
    return check, JobsRead(check.jobs, extension.table, _counted(extension.estimates, check.jobs))


def read_jobs_scaled(
    path: str | os.PathLike, *, table: ThroughputTable, cluster: Cluster, options: ScaleOptions = ScaleOptions()
) -> JobsRead:
    """`planner.formats.jobs.read_jobs` with missing scale factors estimated: InputError listing
    every fault of the list (a job type it could not estimate among them, saying why)."""
    records, columns = read_job_list(path)
    check, read = check_jobs_scaled(
        records, table=table, cluster=cluster, path=Path(path), columns=columns, options=options
    )
    check.raise_errors(validate_command(path, table, cluster))
    return read


def read_trace_scaled(
    path: str | os.PathLike, table: ThroughputTable, cluster: Cluster, options: ScaleOptions = ScaleOptions()
) -> JobsRead:
    """`planner.formats.trace.read_trace` (a Gavel .trace or a job list, in arrival order) with
    missing scale factors estimated."""
    path = Path(path)
    if path.suffix.lower() != ".trace":
        read = read_jobs_scaled(path, table=table, cluster=cluster, options=options)
    else:
        gaps: dict[JobType, None] = {}
        jobs = read_gavel_trace(path, table, cluster, scale_gaps=gaps)
        read = JobsRead(jobs, table)
        if gaps:
            extension = extend_for(table, gaps, cluster, options)
            jobs = read_gavel_trace(path, extension.table, cluster, unestimated=extension.refused)
            read = JobsRead(jobs, extension.table, _counted(extension.estimates, jobs))
    read.jobs = sorted(read.jobs, key=lambda j: j.arrival_s)  # stable: file order among equal arrivals
    return read


def scale_gaps_of(
    records: Sequence[Mapping[str, Any]], table: ThroughputTable, cluster: Cluster, path: object
) -> list[JobType]:
    """The job types of a job list (its records as read) that the table has at other scale factors
    only: one row checked per distinct (model, batch size, scale factor) as written, so a long
    list costs little."""
    seen: dict[Any, Mapping[str, Any]] = {}
    for rec in records:
        key = (rec.get("model"), rec.get("batch_size"), rec.get("scale_factor"))
        try:
            seen.setdefault(key, rec)
        except TypeError:  # unhashable (a JSON list where a value belongs): an error of its own
            continue
    # a job id of its own, so that no representative is left out for a blank or repeated one
    probes = [{**rec, "job_id": f"probe-{i}"} for i, rec in enumerate(seen.values())]
    return list(check_jobs(probes, table=table, cluster=cluster, path=path).scale_gaps) if probes else []


# --------------------------------------------------------------------------- accuracy


def holdout_errors(
    table: ThroughputTable, train: Sequence[int], target: int, worker_types: Iterable[str] | None = None
) -> np.ndarray:
    """Relative errors |estimate - measured| / measured of the power law fitted on the `train`
    scale factors and read at `target`, over every job family and worker type (of `worker_types`,
    default all) with runnable measured solo rows at all of them (docs/estimation.md: Gavel's
    8-GPU rows predicted from 1, 2 and 4 GPUs)."""
    only = None if worker_types is None else set(worker_types)
    rates: dict[tuple[str, str, int | None], dict[int, float]] = {}
    for r in table.rows:
        if r["partner_model"] is None and not is_estimate(r) and r["status"] in RUNNABLE_STATUSES:
            if only is None or r["worker_type"] in only:
                rates.setdefault((r["worker_type"], r["model"], r["batch_size"]), {})[r["scale_factor"]] = r[
                    "throughput"
                ]
    errors = []
    for by_scale in rates.values():
        if all(s in by_scale for s in (*train, target)):
            curve = fit_power_law(list(train), [by_scale[s] for s in train])
            errors.append(abs(curve.throughput(target) / by_scale[target] - 1.0))
    return np.asarray(errors)
