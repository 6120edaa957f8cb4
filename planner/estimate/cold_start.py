"""Estimate the solo throughputs of a job type from a short fingerprint (cold start).

A new job type is usually measured on one or two GPU types, not on all of
them. A job's speed-up from one GPU type to another is largely shared by all
job types (a v100 is "about 3x a k80" for most models), so the solo
throughputs are completed as a matrix:

* **rows** are job families (model, batch size), **columns** are cells
  (worker type, scale factor), an entry is ``log`` steps/s;
* **model**: ``log T[j, c] = a[j] + b[c] + U[j] . V[c]``. The additive part
  (job effect + cell effect) is an exact least-squares fit; the rank-k part is
  fitted on its residuals by the ALS of `planner.estimate.completion`.
* **a sibling first**: batch sizes of one model share most of their profile
  (Gavel's table: 13 % median error against 37 % for the model), so a family
  with another batch size of the same model in the table takes that
  sibling's profile, shifted to match its measured cells (`predict_row`);
  the model fills the cells the sibling lacks.
* **a new row** (1-3 measured cells) gets its job effect ``a`` without any
  shrinkage and its factors ``U`` by ridge regression with penalty ``reg``
  (`SoloModel.fit_rows`). With one cell the residual is zero, so ``U = 0``
  and the estimate is "the measured cell times the average speed ratio
  between the two cells": exact when the log table is additive (rank 1 in
  linear space).
* **uncertainty**: `holdout_band` refits every other job family from the same
  cells only and reports, per estimated cell, the 90th percentile of the
  relative errors of that re-fit (a hold-out band, e.g. "p90 error 23 %").

Measured rows are never changed; rows marked estimated are estimated again.
Measured "cannot run" rows (oom/failed) stay as they are and are not fitted.
Only job types and worker types that already have a row are completed: a job
type with no measured runnable cell, a worker type with no measured row at a
scale factor, and scale factors a job type has no row for are not estimated
(nothing in the data speaks about them; `SoloReport.not_estimable` says why).

Pure numpy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from planner.errors import InputError
from planner.estimate.completion import als_fit
from planner.formats.table import RUNNABLE_STATUSES, JobType, ThroughputTable, is_estimate

METHOD = "log-speed"
DEFAULT_SOLO_RANK = 1
DEFAULT_SOLO_REG = 0.3
BAND_QUANTILE = 0.9
MIN_REFERENCES = 3  # job families needed for a hold-out band

Family = tuple[str, int | None]  # (model, batch size)
Cell = tuple[str, int]  # (worker type, scale factor)


# --------------------------------------------------------------------------- the solo matrix


@dataclass
class SoloMatrix:
    """Log solo throughputs: ``logs[i, j]`` of ``families[i]`` in ``cells[j]``.

    NaN where nothing runnable was measured; ``failed`` marks measured
    "cannot run" rows; ``present`` marks every key with a row that is not an
    estimate (measured, runnable or not)."""

    families: list[Family]
    cells: list[Cell]
    logs: np.ndarray
    failed: np.ndarray
    present: np.ndarray

    @property
    def measured(self) -> np.ndarray:
        return ~np.isnan(self.logs)


def build_solo_matrix(table: ThroughputTable, worker_types: Iterable[str] = ()) -> SoloMatrix:
    """The solo matrix over the table's job families and (worker type, scale
    factor) cells; ``worker_types`` adds columns for types the table lacks."""
    solo_rows = [r for r in table.rows if r["partner_model"] is None]
    families = sorted({(r["model"], r["batch_size"]) for r in solo_rows}, key=lambda f: (f[0], f[1] or 0))
    workers = sorted({r["worker_type"] for r in solo_rows} | set(worker_types))
    scales = sorted({r["scale_factor"] for r in solo_rows})
    cells = [(w, s) for s in scales for w in workers]
    row_of = {f: i for i, f in enumerate(families)}
    col_of = {c: j for j, c in enumerate(cells)}
    shape = (len(families), len(cells))
    logs, failed, present = np.full(shape, np.nan), np.zeros(shape, bool), np.zeros(shape, bool)
    for r in solo_rows:
        if is_estimate(r):
            continue
        i, j = row_of[(r["model"], r["batch_size"])], col_of[(r["worker_type"], r["scale_factor"])]
        present[i, j] = True
        if r["status"] in RUNNABLE_STATUSES:
            logs[i, j] = math.log(r["throughput"])
        else:
            failed[i, j] = True
    return SoloMatrix(families, cells, logs, failed, present)


# --------------------------------------------------------------------------- the model


def additive_fit(logs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares row and column effects ``a, b`` with ``logs ~ a[i] + b[j]``
    on the measured entries (minimum-norm where the data leave them free)."""
    n, m = logs.shape
    rows, cols = np.nonzero(~np.isnan(logs))
    design = np.zeros((len(rows), n + m))
    design[np.arange(len(rows)), rows] = 1.0
    design[np.arange(len(rows)), n + cols] = 1.0
    effects = np.linalg.lstsq(design, logs[rows, cols], rcond=None)[0]
    return effects[:n], effects[n:]


@dataclass
class SoloModel:
    """Column side of the fitted model: ``log T[j, c] = a[j] + offset[c] + U[j] . V[c]``."""

    offset: np.ndarray  # (cells,)
    V: np.ndarray  # (cells, rank)
    reg: float

    @property
    def rank(self) -> int:
        return self.V.shape[1]

    def fit_rows(self, logs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Job effect and factors of every row from its measured cells: ridge on
        the factors only (a row with one cell gets U = 0). NaN effect for a row
        without any measured cell."""
        n, k = logs.shape[0], self.rank
        a, U = np.full(n, np.nan), np.zeros((n, k))
        features = np.hstack([np.ones((len(self.offset), 1)), self.V])
        penalty = np.diag([0.0] + [self.reg] * k)
        for i in range(n):
            seen = ~np.isnan(logs[i])
            if not seen.any():
                continue
            x = features[seen]
            theta = np.linalg.lstsq(x.T @ x + penalty, x.T @ (logs[i, seen] - self.offset[seen]), rcond=None)[0]
            a[i], U[i] = theta[0], theta[1:]
        return a, U

    def predict(self, logs: np.ndarray) -> np.ndarray:
        """Log throughput of every row in every cell (NaN rows stay NaN)."""
        a, U = self.fit_rows(logs)
        return a[:, None] + self.offset[None, :] + U @ self.V.T


def fit_solo_model(
    logs: np.ndarray, rank: int = DEFAULT_SOLO_RANK, reg: float = DEFAULT_SOLO_REG, seed: int = 0
) -> SoloModel:
    """Fit the cell side of the model to the measured entries of ``logs``."""
    if rank < 0:
        raise InputError(f"rank must be >= 0, got {rank}", field="solo-rank")
    measured = ~np.isnan(logs)
    if not measured.any():
        raise InputError("no measured solo throughput to estimate from")
    a, b = additive_fit(logs)
    # Cells without any measurement have no effect to fit: mark them unknown.
    offset = np.where(measured.any(axis=0), b, np.nan)
    V = np.zeros((logs.shape[1], rank))
    resid = logs - a[:, None] - b[None, :]
    if rank > 0 and measured.sum() > logs.shape[0] + logs.shape[1]:
        model = als_fit(resid, rank=rank, reg=reg, seed=seed)
        offset = offset + model.mu + model.col_bias
        V = model.V
    return SoloModel(offset, V, reg)


def relative_error(estimate_log: np.ndarray, true_log: np.ndarray) -> np.ndarray:
    """|estimate - true| / true, from log throughputs."""
    return np.abs(np.expm1(estimate_log - true_log))


def sibling_of(families: list[Family], logs: np.ndarray, family: Family, row: np.ndarray, exclude: int = -1) -> int:
    """Index of the other batch size of the same model nearest (in log) to
    ``family``'s that was measured in at least one of ``row``'s measured cells;
    -1 if none. Batch sizes of one model share most of their profile, so a
    sibling predicts a new batch size far better than the average job type
    (docs/estimation.md)."""
    model, batch = family
    seen = ~np.isnan(row)
    best, distance = -1, math.inf
    for k, (m, b) in enumerate(families):
        if k == exclude or m != model or b == batch or b is None or batch is None:
            continue
        if not (seen & ~np.isnan(logs[k])).any():
            continue
        d = abs(math.log(b / batch))
        if d < distance:
            best, distance = k, d
    return best


def sibling_anchored(logs: np.ndarray, sibling: int, row: np.ndarray) -> np.ndarray:
    """The sibling's log profile shifted to match ``row``'s measured cells."""
    return logs[sibling] + np.nanmean(row - logs[sibling])


def predict_row(
    model: SoloModel, logs: np.ndarray, families: list[Family], family: Family, row: np.ndarray, exclude: int = -1
) -> tuple[np.ndarray, int]:
    """Log estimates of one partially measured row: the sibling's anchored
    profile where it has the cell, the low-rank model elsewhere; and the sibling (-1: none)."""
    estimate = model.predict(row[None, :])[0]
    sibling = sibling_of(families, logs, family, row, exclude)
    if sibling >= 0:
        anchored = sibling_anchored(logs, sibling, row)
        estimate = np.where(np.isnan(anchored), estimate, anchored)
    return estimate, sibling


@dataclass
class Band:
    """Per cell, the p90 relative hold-out error of each way of estimating (NaN: unknown)."""

    model: np.ndarray
    sibling: np.ndarray

    def of(self, cell: int, by_sibling: bool) -> float:
        return float((self.sibling if by_sibling else self.model)[cell])


def holdout_band(
    logs: np.ndarray, families: list[Family], model: SoloModel, seen: np.ndarray, q: float = BAND_QUANTILE
) -> Band:
    """Refit every family measured in all ``seen`` cells from those cells only
    (the model's cell side stays fixed) and take, per cell, the ``q`` quantile
    of the relative errors: of the low-rank model, and of the sibling's
    anchored profile where the family has a sibling. NaN where fewer than
    MIN_REFERENCES families can be checked."""
    cells = np.flatnonzero(seen)
    refs = [i for i in range(len(logs)) if not np.isnan(logs[i, cells]).any()]
    by_model, by_sibling = np.full(logs.shape[1], np.nan), np.full(logs.shape[1], np.nan)
    if not refs:
        return Band(by_model, by_sibling)
    partial = np.full((len(refs), logs.shape[1]), np.nan)
    partial[:, cells] = logs[np.ix_(np.asarray(refs, dtype=int), cells)]
    model_err = relative_error(model.predict(partial), logs[refs])
    sibling_err = np.full_like(model_err, np.nan)
    for n, i in enumerate(refs):
        sibling = sibling_of(families, logs, families[i], partial[n], exclude=i)
        if sibling >= 0:
            sibling_err[n] = relative_error(sibling_anchored(logs, sibling, partial[n]), logs[i])
    for errors, band in ((model_err, by_model), (sibling_err, by_sibling)):
        for j in np.flatnonzero(~seen):
            finite = errors[:, j][~np.isnan(errors[:, j])]
            if len(finite) >= MIN_REFERENCES:
                band[j] = float(np.quantile(finite, q))
    return Band(by_model, by_sibling)


# --------------------------------------------------------------------------- one job type


def fingerprint_logs(cells: list[Cell], measured: Mapping[Cell, float], what: str) -> np.ndarray:
    """One row of log throughputs from measured cells; InputError on a cell
    the table does not know, on NaN / zero / negative values, or on none."""
    if not measured:
        raise InputError(f"{what}: no measured cell; measure its solo throughput on at least one worker type")
    row = np.full(len(cells), np.nan)
    for cell, value in measured.items():
        if cell not in cells:
            raise InputError(
                f"{what}: worker type {cell[0]} at scale factor {cell[1]} has no measured row in the table; "
                "measure some job type there first"
            )
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise InputError(f"{what}: throughput on {cell[0]} x{cell[1]} must be a positive number, got {value!r}")
        row[cells.index(cell)] = math.log(value)
    return row


@dataclass
class JobEstimate:
    """Solo throughputs of one job type in every cell, with hold-out bands."""

    family: Family
    cells: list[Cell]
    throughput: np.ndarray  # steps/s (the measured value in measured cells)
    band: np.ndarray  # p90 relative hold-out error; 0 where measured, NaN where unknown
    measured: np.ndarray  # cells given
    sibling: Family | None  # the batch size of the same model whose profile was used


def estimate_job(
    table: ThroughputTable,
    family: Family,
    measured: Mapping[Cell, float],
    *,
    rank: int = DEFAULT_SOLO_RANK,
    reg: float = DEFAULT_SOLO_REG,
) -> JobEstimate:
    """Solo throughputs of ``family`` = (model, batch size) in every (worker
    type, scale factor) cell of ``table``, from the ``measured`` cells alone
    (any rows of that family in the table are ignored)."""
    sm = build_solo_matrix(table)
    row = fingerprint_logs(sm.cells, measured, JobType(*family).name)
    others = [i for i, f in enumerate(sm.families) if f != family]
    logs, families = sm.logs[others], [sm.families[i] for i in others]
    model = fit_solo_model(logs, rank=rank, reg=reg)
    estimate, sibling = predict_row(model, logs, families, family, row)
    seen = ~np.isnan(row)
    bands = holdout_band(logs, families, model, seen)
    by_sibling = ~np.isnan(logs[sibling]) if sibling >= 0 else np.zeros(len(row), bool)
    band = np.where(by_sibling, bands.sibling, bands.model)
    band[seen] = 0.0
    # Measured cells keep the measured figure itself (exp(log(x)) need not round-trip to x).
    values = np.array([measured[c] if s else math.exp(e) for c, s, e in zip(sm.cells, seen, estimate)])
    return JobEstimate(family, sm.cells, values, band, seen, families[sibling] if sibling >= 0 else None)


# --------------------------------------------------------------------------- the table


@dataclass
class SoloReport:
    method: str
    rank: int
    reg: float
    estimated_rows: int = 0
    job_types: int = 0  # families with at least one estimated row
    by_sibling: int = 0  # rows taken from another batch size of the same model
    worker_bands: dict[str, float] = field(default_factory=dict)  # worker type -> median band of its estimates
    not_estimable: list[str] = field(default_factory=list)


# The band `provenance` writes, as `rota table show` reads it back.
ESTIMATE_BAND = re.compile(r"p90 error (?P<pct>\d+) %")


def provenance(how: str, n_cells: int, band: float) -> str:
    cells = "1 measured cell" if n_cells == 1 else f"{n_cells} measured cells"
    error = "error unknown" if math.isnan(band) else f"p90 error {100 * band:.0f} %"
    return f"estimated: {how} from {cells}; {error}"


def require_worker_types(table: ThroughputTable, worker_types: Iterable[str]) -> None:
    """Every named worker type needs at least one measured solo row."""
    measured = {r["worker_type"] for r in table.rows if r["partner_model"] is None and not is_estimate(r)}
    missing = [w for w in worker_types if w not in measured]
    if missing:
        raise InputError(
            f"worker type(s) {', '.join(missing)} have no measured row, nothing to estimate them from; "
            f"measure at least one job type on each (rota profile on a {missing[0]} node) and add the rows "
            "with rota table merge",
            path=table.path,
            field="worker_type",
        )


def _wanted(table: ThroughputTable, sm: SoloMatrix) -> np.ndarray:
    """Cells without a (non-estimated) row of job types that exist at that scale factor."""
    job_scales = {(jt.model, jt.batch_size, jt.scale_factor) for jt in table.job_types}
    wanted = np.array([[(f[0], f[1], s) in job_scales for (_, s) in sm.cells] for f in sm.families], dtype=bool)
    return wanted.reshape(sm.logs.shape) & ~sm.present


def estimate_solo_rows(
    table: ThroughputTable,
    worker_types: Iterable[str] = (),
    *,
    rank: int = DEFAULT_SOLO_RANK,
    reg: float = DEFAULT_SOLO_REG,
    seed: int = 0,
) -> tuple[list[dict], SoloReport]:
    """Rows for every job type (model, batch size, scale factor) of ``table``
    that lacks a solo row on one of its worker types (plus ``worker_types``).

    Each family is fitted from its own measured cells (through a sibling batch
    size where the table has one), the cell side of the model from all
    families. Returns the new rows (status and source 'estimated', method and
    hold-out band in device_name) and a report.
    """
    worker_types = list(worker_types)
    require_worker_types(table, worker_types)
    sm = build_solo_matrix(table, worker_types)
    report = SoloReport(METHOD, rank, reg)
    wanted = _wanted(table, sm)
    if not wanted.any():
        return [], report
    model = fit_solo_model(sm.logs, rank=rank, reg=reg, seed=seed)
    bands: dict[tuple, Band] = {}
    rows: list[dict] = []
    per_worker: dict[str, list[float]] = {}
    for i in np.flatnonzero(wanted.any(axis=1)):
        family = sm.families[i]
        row, seen = sm.logs[i], sm.measured[i]
        estimate, sibling = predict_row(model, sm.logs, sm.families, family, row)
        key = tuple(np.flatnonzero(seen))
        if seen.any() and key not in bands:  # a row's own target cell is unmeasured: it never counts for itself
            bands[key] = holdout_band(sm.logs, sm.families, model, seen)
        for j in np.flatnonzero(wanted[i]):
            worker, scale = sm.cells[j]
            label = f"{JobType(family[0], family[1], scale).label} on {worker}"
            if not seen.any():
                report.not_estimable.append(f"{label} (no runnable measured row of {JobType(*family).name})")
                continue
            if math.isnan(estimate[j]):
                report.not_estimable.append(f"{label} (no job type measured on {worker} at scale factor {scale})")
                continue
            by_sibling = sibling >= 0 and not math.isnan(sm.logs[sibling, j])
            band = bands[key].of(int(j), by_sibling)
            how = f"profile of {JobType(*sm.families[sibling]).name}" if by_sibling else f"{METHOD} rank {rank}"
            report.by_sibling += by_sibling
            per_worker.setdefault(worker, []).append(band)
            note = provenance(how, int(seen.sum()), band)
            rows.append(_solo_row(worker, family, scale, math.exp(estimate[j]), note))
    report.estimated_rows = len(rows)
    report.job_types = len({(r["model"], r["batch_size"]) for r in rows})
    report.worker_bands = {w: _median(v) for w, v in sorted(per_worker.items())}
    return rows, report


def _median(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.median(finite)) if finite else math.nan


def _solo_row(worker: str, family: Family, scale: int, throughput: float, note: str) -> dict:
    return {
        "worker_type": worker,
        "model": family[0],
        "batch_size": family[1],
        "scale_factor": scale,
        "partner_model": None,
        "partner_batch_size": None,
        "throughput": throughput,
        "status": "estimated",
        "source": "estimated",
        "device_name": note,
    }
