"""Estimate missing co-location entries of a throughput table by matrix completion.

Profiling every pair of job types is quadratic, so a table usually holds the
solo rows and only some co-locations. This module fills the rest (issue 6,
gavel_spec.md §7):

1. **Factor matrix**, one per scale factor (co-location only happens between
   job types with equal scale factors): rows are job types, columns are
   (worker type, partner) and an entry is the *normalised co-location factor*
   ``pair throughput of the row job / its solo throughput`` on that worker
   type, in [0, 1]. Columns are laid out from an explicit index, never by a
   stride, which avoids the indexing bug of Gavel's estimator (spec §7, step 3).
2. **Completion** by alternating least squares on a biased low-rank model

       factor(a, (w, b)) ~ mu + row_bias[a] + col_bias[w, b] + U[a] . V[w, b]

   with ridge regularisation weighted by each row's / column's number of
   measurements. The biases capture "how sensitive a job is" and "how
   aggressive a partner is on that GPU", the rank-k term the interactions.
   Row factors are shared over worker types, so a pair measured on one GPU type
   informs the same pair on another.
3. **Output**: for every missing entry whose two job types both have a runnable
   solo row on that worker type, a row with ``throughput = clip(factor, 0, 1) *
   solo``, ``status = source = 'estimated'``, and both mirror rows, so the
   result validates. The table has no method column, so the method, rank and
   evidence go into ``device_name`` (for a measurement it names the device that
   produced the row; for an estimate the "device" is the estimator), e.g.
   ``"estimated: als rank 4 from 712 measured pairs"``. An estimated factor that
   clips to 0 cannot carry status 'estimated' (the table requires a positive
   throughput there) and is written as status 'failed', source 'estimated'.

Measured rows are never changed. Rows already marked estimated are treated as
missing and estimated again, so re-running on an estimated table is stable.

Measured failures (status oom/failed, e.g. Gavel's zeros) are by default
*excluded* from the fit and kept as they are: "cannot co-locate" is usually a
memory limit, a threshold effect that a low-rank model of slow-downs fits badly
(``zeros='zero'`` fits them as factor 0 instead; benchmarks/bench_estimate.py
compares both).

Solo throughputs (including missing scale factors of a job type) are not
estimated: Gavel's multi-GPU throughputs are not even monotone in the scale
factor, and the simple model "speed-up of s GPUs on a worker type is the same
for every job type" is far off on them (docs/estimation.md gives the numbers).
Missing solo rows are listed in the report instead.

Pure numpy; no torch, no solver.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from planner.errors import InputError
from planner.formats.table import (
    COLUMNS,
    RUNNABLE_STATUSES,
    JobType,
    TableRow,
    ThroughputTable,
    is_estimate,
    row_key,
)

METHOD = "als"
MAX_RANK = 100  # --rank: the factors are (job types + partners) x rank; more fits noise
DEFAULT_RANK = 4
DEFAULT_REG = 0.01
DEFAULT_ITERATIONS = 50
ZERO_MODES = ("exclude", "zero")
# With cold_start, job types with fewer measured pairs than this borrow the
# factors of a sibling batch size (or the partner mean) instead of fitting
# their own: one or two pairs fit a row badly (docs/estimation.md).
COLD_START_PAIRS = 3


# --------------------------------------------------------------------------- factor matrix


@dataclass
class FactorMatrix:
    """Normalised co-location factors of one scale factor.

    ``values[i, j]`` is the factor of ``job_types[i]`` with partner
    ``columns[j] = (worker_type, partner)``; NaN where nothing usable was
    measured. ``wanted`` marks the entries to estimate (missing, both members
    runnable alone on that worker type); ``failed`` marks measured "cannot
    co-locate" entries; ``solo[i, j]`` is the row job's solo throughput on the
    column's worker type (0 where it cannot run).
    """

    scale_factor: int
    job_types: list[JobType]
    columns: list[tuple[str, JobType]]
    values: np.ndarray
    wanted: np.ndarray
    failed: np.ndarray
    solo: np.ndarray

    @property
    def measured(self) -> np.ndarray:
        return ~np.isnan(self.values)

    @property
    def worker_types(self) -> list[str]:
        return sorted({w for w, _ in self.columns})

    def mirror(self) -> tuple[np.ndarray, np.ndarray]:
        """Index arrays (rows, cols): entry (a, (w, b)) -> (b, (w, a)); -1 where absent."""
        row_of = {jt: i for i, jt in enumerate(self.job_types)}
        col_of = {c: j for j, c in enumerate(self.columns)}
        mi = np.full(self.values.shape, -1, dtype=int)
        mj = np.full(self.values.shape, -1, dtype=int)
        for i, a in enumerate(self.job_types):
            for j, (w, b) in enumerate(self.columns):
                k = col_of.get((w, a))
                if k is not None:
                    mi[i, j], mj[i, j] = row_of[b], k
        return mi, mj

    def pair_ids(self) -> np.ndarray:
        """One id per (worker type, unordered pair): both mirror entries share it; -1 if none."""
        ids: dict[tuple, int] = {}
        out = np.full(self.values.shape, -1, dtype=int)
        order = {jt: i for i, jt in enumerate(self.job_types)}
        for i, a in enumerate(self.job_types):
            for j, (w, b) in enumerate(self.columns):
                if self.solo[i, j] <= 0:
                    continue
                key = (w, min(order[a], order[b]), max(order[a], order[b]))
                out[i, j] = ids.setdefault(key, len(ids))
        return out

    def label(self, i: int, j: int) -> str:
        w, b = self.columns[j]
        return f"{self.job_types[i].label} with {b.label} on {w}"


def build_factor_matrices(table: ThroughputTable, zeros: str = "exclude") -> list[FactorMatrix]:
    """One factor matrix per scale factor that has job types, in scale-factor order."""
    if zeros not in ZERO_MODES:
        raise ValueError(f"zeros must be one of {ZERO_MODES}, got {zeros!r}")
    pair_rows: dict[tuple[str, JobType, JobType], TableRow] = {}
    for r in table.rows:
        if r["partner_model"] is not None:
            a = JobType(r["model"], r["batch_size"], r["scale_factor"])
            b = JobType(r["partner_model"], r["partner_batch_size"], r["scale_factor"])
            pair_rows[(r["worker_type"], a, b)] = r

    matrices = []
    worker_types = table.worker_types
    for s in sorted({jt.scale_factor for jt in table.job_types}):
        jobs = [jt for jt in table.job_types if jt.scale_factor == s]
        columns = [(w, b) for w in worker_types for b in jobs if table.solo(w, b) > 0]
        shape = (len(jobs), len(columns))
        values = np.full(shape, np.nan)
        wanted = np.zeros(shape, dtype=bool)
        failed = np.zeros(shape, dtype=bool)
        solo = np.zeros(shape)
        for i, a in enumerate(jobs):
            for j, (w, b) in enumerate(columns):
                solo[i, j] = own = table.solo(w, a)
                if own <= 0:
                    continue  # a cannot run alone on w: no pair to estimate
                pair = pair_rows.get((w, a, b))
                if pair is None or is_estimate(pair):
                    wanted[i, j] = True
                elif pair["status"] in RUNNABLE_STATUSES:
                    values[i, j] = pair["throughput"] / own
                else:
                    failed[i, j] = True
                    if zeros == "zero":
                        values[i, j] = 0.0
        matrices.append(FactorMatrix(s, jobs, columns, values, wanted, failed, solo))
    return matrices


# --------------------------------------------------------------------------- ALS


@dataclass
class LowRankModel:
    mu: float
    row_bias: np.ndarray
    col_bias: np.ndarray
    U: np.ndarray
    V: np.ndarray
    iterations: int

    def predict(self) -> np.ndarray:
        return self.mu + self.row_bias[:, None] + self.col_bias[None, :] + self.U @ self.V.T


def _ridge_side(mask: np.ndarray, resid: np.ndarray, other: np.ndarray, reg: float) -> np.ndarray:
    """Solve, for every row i, min sum_j m_ij (r_ij - theta_i . x_j)^2 + reg n_i |theta_i|^2.

    ``other`` holds the features x_j (the fixed side's factors plus a 1 for the
    bias). The penalty grows with the number of measurements n_i
    (weighted-lambda ALS), so sparse and dense rows are shrunk alike.
    """
    k = other.shape[1]
    counts = mask.sum(axis=1)
    gram = np.einsum("ij,jk,jl->ikl", mask.astype(float), other, other)
    gram += (reg * np.maximum(counts, 1))[:, None, None] * np.eye(k)[None]
    rhs = (mask * resid) @ other
    return np.linalg.solve(gram, rhs[:, :, None])[:, :, 0]


def als_fit(
    values: np.ndarray,
    rank: int = DEFAULT_RANK,
    reg: float = DEFAULT_REG,
    n_iter: int = DEFAULT_ITERATIONS,
    seed: int = 0,
    tol: float = 1e-7,
) -> LowRankModel:
    """Fit the biased rank-``rank`` model to the finite entries of ``values``.

    A row or column without measurements keeps zero bias and factors, so its
    prediction falls back to the other side's effect; callers decide whether
    such entries count as estimable (see `estimable_mask`).
    """
    if rank < 0:
        raise ValueError("rank must be >= 0")
    mask = ~np.isnan(values)
    if not mask.any():
        raise ValueError("no measured entries to fit")
    n, m = values.shape
    filled = np.where(mask, values, 0.0)
    mu = float(filled.sum() / mask.sum())
    rng = np.random.default_rng(seed)
    U = rng.normal(0.0, 0.1, (n, rank))
    V = rng.normal(0.0, 0.1, (m, rank))
    br, bc = np.zeros(n), np.zeros(m)
    previous = None
    iterations = 0
    for iterations in range(1, n_iter + 1):  # noqa: B007 (read after the loop)
        # Rows: features [V, 1] -> (U, row bias); target minus mu and column bias.
        theta = _ridge_side(mask, filled - mu - bc[None, :], np.hstack([V, np.ones((m, 1))]), reg)
        U, br = theta[:, :rank], theta[:, rank]
        theta = _ridge_side(mask.T, (filled - mu - br[:, None]).T, np.hstack([U, np.ones((n, 1))]), reg)
        V, bc = theta[:, :rank], theta[:, rank]
        current = mu + br[:, None] + bc[None, :] + U @ V.T
        if previous is not None and np.sqrt(np.mean((current - previous) ** 2)) < tol:
            break
        previous = current
    return LowRankModel(mu, br, bc, U, V, iterations)


def als_complete(
    values: np.ndarray,
    rank: int = DEFAULT_RANK,
    reg: float = DEFAULT_REG,
    n_iter: int = DEFAULT_ITERATIONS,
    seed: int = 0,
) -> np.ndarray:
    """Every entry of ``values`` predicted (unclipped); NaN entries are the unknowns."""
    return als_fit(values, rank=rank, reg=reg, n_iter=n_iter, seed=seed).predict()


# --------------------------------------------------------------------------- coverage


def estimable_mask(
    measured: np.ndarray, wanted: np.ndarray, mirror: tuple[np.ndarray, np.ndarray], min_measured: int = 1
) -> np.ndarray:
    """Wanted entries whose row and column, and whose mirror's row and column,
    each hold at least ``min_measured`` measurements (an entry with an empty
    row or column would carry no information about that job type or partner)."""
    row_ok = measured.sum(axis=1) >= min_measured
    col_ok = measured.sum(axis=0) >= min_measured
    ok = wanted & row_ok[:, None] & col_ok[None, :]
    mi, mj = mirror
    has = mi >= 0
    mirror_ok = np.zeros_like(ok)
    mirror_ok[has] = ok[mi[has], mj[has]]
    return ok & mirror_ok


def suggest_measurements(
    fm: FactorMatrix, measured: np.ndarray, min_measured: int = 1, limit: int = 10_000
) -> list[tuple[int, int]]:
    """A small set of pairs (row, col) to measure so that every wanted entry
    becomes estimable, chosen greedily: each short job type gets the partner
    best covered so far (the natural "reference jobs"), each short column the
    best covered job type. One measured pair fills both mirror entries."""
    measured = measured.copy()
    open_ = fm.wanted & ~measured
    mi, mj = fm.mirror()
    picks: list[tuple[int, int]] = []
    while len(picks) < limit:
        rows = measured.sum(axis=1)
        cols = measured.sum(axis=0)
        short_rows = np.flatnonzero((rows < min_measured) & fm.wanted.any(axis=1))
        short_cols = np.flatnonzero((cols < min_measured) & fm.wanted.any(axis=0))
        if len(short_rows):
            i = int(short_rows[0])
            cand = np.flatnonzero(open_[i] & (mi[i] >= 0))
            if not len(cand):
                break
            j = int(cand[np.argmax(cols[cand])])
        elif len(short_cols):
            j = int(short_cols[0])
            cand = np.flatnonzero(open_[:, j] & (mi[:, j] >= 0))
            if not len(cand):
                break
            i = int(cand[np.argmax(rows[cand])])
            i, j = int(mi[i, j]), int(mj[i, j])  # name the short partner first
        else:
            break
        picks.append((i, j))
        for a, b in ((i, j), (mi[i, j], mj[i, j])):
            measured[a, b], open_[a, b] = True, False
    return picks


def shortages(fm: FactorMatrix, measured: np.ndarray, min_measured: int = 1) -> list[str]:
    """Job types and (worker type, partner) columns with too few measurements."""
    rows = measured.sum(axis=1)
    cols = measured.sum(axis=0)
    out = [
        f"job type {fm.job_types[i].label} has {int(rows[i])}"
        for i in np.flatnonzero((rows < min_measured) & fm.wanted.any(axis=1))
    ]
    out += [
        f"partner {fm.columns[j][1].label} on {fm.columns[j][0]} has {int(cols[j])}"
        for j in np.flatnonzero((cols < min_measured) & fm.wanted.any(axis=0))
    ]
    return out


# --------------------------------------------------------------------------- holdout


@dataclass
class HoldoutError:
    """Absolute error of the normalised factor on hidden measured entries."""

    fraction: float
    entries: int
    median: float
    p90: float


def hide_pairs(
    fm: FactorMatrix, fraction: float, rng: np.random.Generator, values: np.ndarray | None = None
) -> np.ndarray:
    """Boolean mask of measured entries to hide: a random ``fraction`` of the
    measured (worker type, pair)s, both mirror entries together, as one
    co-location run measures both."""
    values = fm.values if values is None else values
    measured = ~np.isnan(values)
    ids = fm.pair_ids()
    measured_ids = np.unique(ids[measured & (ids >= 0)])
    n_hide = int(round(fraction * len(measured_ids)))
    hidden_ids = rng.choice(measured_ids, size=n_hide, replace=False)
    return measured & np.isin(ids, hidden_ids)


def holdout_error(
    fm: FactorMatrix,
    fraction: float = 0.1,
    *,
    rank: int = DEFAULT_RANK,
    reg: float = DEFAULT_REG,
    seed: int = 0,
    min_measured: int = 1,
) -> HoldoutError | None:
    """Hide ``fraction`` of the measured pairs, re-estimate them, compare."""
    rng = np.random.default_rng(seed)
    hidden = hide_pairs(fm, fraction, rng)
    if not hidden.any():
        return None
    train = np.where(hidden, np.nan, fm.values)
    ok = estimable_mask(~np.isnan(train), hidden, fm.mirror(), min_measured)
    if not ok.any():
        return None
    pred = np.clip(als_complete(train, rank=rank, reg=reg, seed=seed), 0.0, 1.0)
    err = np.abs(pred[ok] - fm.values[ok])
    return HoldoutError(fraction, int(ok.sum()), float(np.median(err)), float(np.quantile(err, 0.9)))


# --------------------------------------------------------------------------- cold start


def cold_rows(fm: FactorMatrix, fewer_than: int = 1) -> np.ndarray:
    """Job types with fewer than ``fewer_than`` measured co-locations (as the job)."""
    return np.asarray(fm.measured.sum(axis=1) < fewer_than, dtype=bool)


def _proxies(fm: FactorMatrix, cold: np.ndarray) -> np.ndarray:
    """For each job type, the row whose factors stand in for it: itself if it
    has measured pairs, else the nearest batch size of the same model that has
    (batch sizes of one model interfere alike: docs/estimation.md), else -1."""
    proxy = np.where(cold, -1, np.arange(len(fm.job_types)))
    for i in np.flatnonzero(cold):
        a = fm.job_types[i]
        siblings = [
            k
            for k, b in enumerate(fm.job_types)
            if not cold[k] and b.model == a.model and b.batch_size and a.batch_size and b != a
        ]
        if siblings:
            proxy[i] = min(siblings, key=lambda k: abs(np.log(fm.job_types[k].batch_size / a.batch_size)))  # type: ignore[operator]
    return proxy


def _mean(values: np.ndarray) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.mean()) if len(finite) else float("nan")


def _across_worker_types(fm: FactorMatrix, filled: np.ndarray, empty: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``filled`` with each column without measurements (``empty``, e.g. every
    column of a worker type where no pair was measured) replaced by the mean
    factor of the same pair on the worker types where that partner was
    measured, and where that was done."""
    col_of = {c: j for j, c in enumerate(fm.columns)}
    out, moved = filled.copy(), np.zeros(filled.shape, bool)
    for j in np.flatnonzero(empty):
        w, b = fm.columns[j]
        others = [col_of[(v, b)] for v in fm.worker_types if v != w and (v, b) in col_of]
        others = [k for k in others if not empty[k]]
        if others:
            out[:, j], moved[:, j] = filled[:, others].mean(axis=1), True
    return out, moved


def cold_start_factors(
    fm: FactorMatrix, filled: np.ndarray, cold: np.ndarray, entries: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Factors of the ``entries`` that involve a job type with few or no
    measured pairs (``cold``) or a partner never measured on that worker type,
    and how each was found. ``filled`` is the factor matrix with every other
    entry measured or estimated. A column without measurements takes the same
    pair on the other worker types. A cold job type borrows the factors of its
    proxy (`_proxies`); without one, it gets the partner's mean factor on that
    worker type (as the job) or the job's mean factor there (as the partner):
    the average the data hold about the other member. The few pairs a cold
    job type measured are kept but not fitted: shifting the borrowed factors
    by them made Gavel's hold-out worse (p90 31 % against 22 % with one pair)."""
    row_of = {jt: i for i, jt in enumerate(fm.job_types)}
    col_of = {c: j for j, c in enumerate(fm.columns)}
    proxy = _proxies(fm, cold)
    filled, moved = _across_worker_types(fm, filled, np.asarray(~fm.measured.any(axis=0), dtype=bool))
    measured_values = np.where(fm.measured, fm.values, np.nan)
    out = np.full(fm.values.shape, np.nan)
    how = np.full(fm.values.shape, "", dtype=object)
    for i, j in zip(*np.nonzero(entries)):
        w, b = fm.columns[j]
        on_w = [k for k, (cw, _) in enumerate(fm.columns) if cw == w]
        pi, pb = proxy[i], proxy[row_of[b]]
        k = col_of.get((w, fm.job_types[pb])) if pb >= 0 else None
        if not (cold[i] or cold[row_of[b]]):
            out[i, j], how[i, j] = filled[i, j], ("same pair on other worker types" if moved[i, j] else METHOD)
        elif pi >= 0 and k is not None:
            out[i, j] = filled[pi, k]
            how[i, j] = "as " + " and ".join(fm.job_types[x].label for x, y in ((pi, i), (pb, row_of[b])) if x != y)
        elif k is not None:
            out[i, j], how[i, j] = _mean(measured_values[:, k]), "partner mean"
        elif pi >= 0:
            out[i, j], how[i, j] = _mean(measured_values[pi, on_w]), "job mean"
        if np.isnan(out[i, j]):
            out[i, j], how[i, j] = _mean(measured_values[:, on_w]), f"mean on {w}"
    return np.clip(out, 0.0, 1.0), how


# --------------------------------------------------------------------------- the table


@dataclass
class GroupReport:
    scale_factor: int
    job_types: int
    worker_types: int
    measured_pairs: int
    measured_entries: int
    failed_entries: int
    estimated_entries: int = 0
    unestimable_entries: int = 0
    iterations: int = 0
    provenance: str = ""
    holdout: HoldoutError | None = None
    note: str = ""
    to_measure: list[str] = field(default_factory=list)
    cold_start_entries: int = 0  # entries of job types without measured pairs (cold_start only)
    cold_job_types: list[str] = field(default_factory=list)


@dataclass
class EstimateReport:
    method: str
    rank: int
    reg: float
    seed: int
    zeros: str
    groups: list[GroupReport]
    missing_solo: list[str]
    cold_start: bool = False
    solo: Any = None  # planner.estimate.cold_start.SoloReport when solo rows were estimated

    @property
    def estimated_entries(self) -> int:
        return sum(g.estimated_entries for g in self.groups)

    @property
    def measured_entries(self) -> int:
        return sum(g.measured_entries for g in self.groups)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.cold_start:  # the report of a plain run keeps its shape
            for group in out["groups"]:
                del group["cold_start_entries"], group["cold_job_types"]
            del out["cold_start"], out["solo"]
        out["estimated_entries"] = self.estimated_entries
        out["measured_entries"] = self.measured_entries
        return out


def missing_solo_rows(table: ThroughputTable) -> list[str]:
    """Job types (model, batch size, scale factor) without a solo row on some
    worker type of the table. These are not estimated (see the module docstring)."""
    return [f"{jt.label} on {w}" for jt in table.job_types for w in table.worker_types if not table.has(w, jt)]


def _pairs(n: int) -> str:
    return f"{n} pair" if n == 1 else f"{n} pairs"


def _describe(fm: FactorMatrix, picks: list[tuple[int, int]], limit: int | None = 5) -> list[str]:
    return [fm.label(i, j) for i, j in picks[:limit]]


def provenance(rank: int, measured_pairs: int) -> str:
    return f"estimated: {METHOD} rank {rank} from {measured_pairs} measured pairs"


def estimate_table(
    table: ThroughputTable,
    rank: int = DEFAULT_RANK,
    seed: int = 0,
    *,
    reg: float = DEFAULT_REG,
    zeros: str = "exclude",
    min_measured: int = 1,
    partial: bool = False,
    holdout: float = 0.0,
    n_iter: int = DEFAULT_ITERATIONS,
    cold_start: bool = False,
) -> tuple[ThroughputTable, EstimateReport]:
    """Fill every missing co-location entry of ``table`` that can be estimated.

    Returns the new table (all original rows, previously estimated rows
    replaced) and a report. Raises InputError naming the pairs to measure next
    when a scale factor with some co-location measurements has job types or
    partners without any (unless ``partial``, which estimates the rest), or
    when the table has no co-location measurement at all. A scale factor
    without any co-location measurement is left alone and noted (Gavel never
    packs multi-GPU jobs, so such groups are often unprofiled on purpose).
    ``holdout`` > 0 also reports the error on that fraction of measured pairs,
    hidden and re-estimated (one extra fit per scale factor). ``cold_start``
    also estimates the pairs of job types without any measured pair (from a
    sibling batch size or the partner's mean: `cold_start_factors`) instead of
    asking for measurements.
    """
    _check_arguments(rank, holdout, zeros)
    matrices = build_factor_matrices(table, zeros=zeros)
    groups: list[GroupReport] = []
    new_rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for fm in matrices:
        measured = fm.measured
        ids = fm.pair_ids()
        report = GroupReport(
            scale_factor=fm.scale_factor,
            job_types=len(fm.job_types),
            worker_types=len(fm.worker_types),
            measured_pairs=int(len(np.unique(ids[measured & (ids >= 0)]))),
            measured_entries=int(measured.sum()),
            failed_entries=int(fm.failed.sum()),
        )
        groups.append(report)
        if holdout > 0 and measured.any():
            report.holdout = holdout_error(fm, holdout, rank=rank, reg=reg, seed=seed, min_measured=min_measured)
        if not fm.wanted.any():
            report.note = "complete: nothing to estimate"
            continue
        mirror = fm.mirror()
        if not measured.any():
            picks = suggest_measurements(fm, measured, min_measured)
            report.unestimable_entries = int(fm.wanted.sum())
            report.to_measure = _describe(fm, picks, limit=None)
            report.note = (
                f"no co-location measured at scale factor {fm.scale_factor}: left missing "
                f"(measure {_pairs(len(picks))} to estimate it)"
            )
            continue
        ok = estimable_mask(measured, fm.wanted, mirror, min_measured)
        cold, cold_mask = _cold_entries(fm, cold_start, report)
        ok &= ~cold_mask
        short = fm.wanted & ~ok & ~cold_mask
        if short.any():
            problems.append(_shortage(fm, short, min_measured, report))
        model = als_fit(fm.values, rank=rank, reg=reg, n_iter=n_iter, seed=seed)
        report.iterations = model.iterations
        report.provenance = provenance(rank, report.measured_pairs)
        factors = np.clip(model.predict(), 0.0, 1.0)
        for i, j in zip(*np.nonzero(ok)):
            new_rows.append(_estimated_row(fm, int(i), int(j), float(factors[i, j]), report.provenance))
        report.estimated_entries = int(ok.sum())
        if cold_mask.any():
            new_rows += _cold_start_rows(fm, np.where(measured, fm.values, factors), cold, cold_mask, report)

    if not any(g.measured_entries for g in groups) and any(g.to_measure for g in groups):
        first = next(g for g in groups if g.to_measure)
        raise InputError(
            "no co-location measured, nothing to estimate from; measure next "
            f"({_pairs(len(first.to_measure))} at scale factor {first.scale_factor}): "
            + "; ".join(first.to_measure[:5])
            + (" ..." if len(first.to_measure) > 5 else ""),
            path=table.path,
        )
    if problems and not partial:
        raise InputError(" | ".join(problems) + "; or pass --partial to estimate the rest", path=table.path)

    # Replace re-estimated rows; older estimates that could not be redone stay.
    replaced = {row_key(r) for r in new_rows}
    kept = [r for r in table.rows if row_key(r) not in replaced]
    out = ThroughputTable.from_records([*kept, *new_rows], columns=COLUMNS, path=table.path)
    result = EstimateReport(METHOD, rank, reg, seed, zeros, groups, missing_solo_rows(table), cold_start)
    return out, result


def _check_arguments(rank: int, holdout: float, zeros: str) -> None:
    if not 0 <= rank <= MAX_RANK:
        raise InputError(f"rank must be 0 to {MAX_RANK}, got {rank}", field="rank")
    if not 0.0 <= holdout < 1.0:
        raise InputError(f"holdout must be in [0, 1), got {holdout}", field="holdout")
    if zeros not in ZERO_MODES:
        raise InputError(f"unknown zeros mode {zeros!r} (expected one of {', '.join(ZERO_MODES)})", field="zeros")


def _shortage(fm: FactorMatrix, short: np.ndarray, min_measured: int, report: GroupReport) -> str:
    """The problem line for entries that cannot be estimated; notes them and what to measure in ``report``."""
    measured = fm.measured
    picks = suggest_measurements(fm, measured, min_measured)
    report.unestimable_entries = int(short.sum())
    report.to_measure = _describe(fm, picks, limit=None)
    short_items = shortages(fm, measured, min_measured)
    return (
        f"cannot estimate {int(short.sum())} co-location entries at scale factor {fm.scale_factor} "
        f"(each job type and partner needs at least {_pairs(min_measured)} measured: "
        + ", ".join(short_items[:3])
        + (f" and {len(short_items) - 3} more" if len(short_items) > 3 else "")
        + f"); measure next ({_pairs(len(picks))}): "
        + "; ".join(_describe(fm, picks))
        + (" ..." if len(picks) > 5 else "")
    )


def _cold_entries(fm: FactorMatrix, cold_start: bool, report: GroupReport) -> tuple[np.ndarray, np.ndarray]:
    """Job types without measured pairs (none unless ``cold_start``) and the wanted entries involving them."""
    if not cold_start:
        return np.zeros(len(fm.job_types), bool), np.zeros(fm.values.shape, bool)
    cold = cold_rows(fm, COLD_START_PAIRS)
    report.cold_job_types = [fm.job_types[i].label for i in np.flatnonzero(cold)]
    empty_columns = np.asarray(~fm.measured.any(axis=0), dtype=bool)
    entries = np.asarray(fm.wanted & (cold[:, None] | _partner_is(fm, cold)[None, :] | empty_columns[None, :]))
    mi, mj = fm.mirror()
    both = entries & (mi >= 0)
    entries[mi[both], mj[both]] = True  # an entry and its mirror are estimated the same way
    return cold, entries & fm.wanted


def _cold_start_rows(
    fm: FactorMatrix, filled: np.ndarray, cold: np.ndarray, cold_mask: np.ndarray, report: GroupReport
) -> list[dict[str, Any]]:
    """Rows for the entries of job types without measured pairs (``cold_mask``); counts them in ``report``."""
    factors, how = cold_start_factors(fm, filled, cold, cold_mask)
    rows = []
    for i, j in zip(*np.nonzero(cold_mask & ~np.isnan(factors))):
        note = f"estimated: cold start, {how[i, j]} ({report.measured_pairs} measured pairs)"
        rows.append(_estimated_row(fm, int(i), int(j), float(factors[i, j]), note))
    report.cold_start_entries = len(rows)
    report.estimated_entries += len(rows)
    report.unestimable_entries += int((cold_mask & np.isnan(factors)).sum())
    return rows


def _partner_is(fm: FactorMatrix, jobs: np.ndarray) -> np.ndarray:
    """Per column (worker type, partner): whether the partner is one of ``jobs`` (a row mask)."""
    row_of = {jt: i for i, jt in enumerate(fm.job_types)}
    return np.array([bool(jobs[row_of[b]]) for _, b in fm.columns], dtype=bool)


def _estimated_row(fm: FactorMatrix, i: int, j: int, factor: float, source_note: str) -> dict[str, Any]:
    a = fm.job_types[i]
    w, b = fm.columns[j]
    throughput = factor * fm.solo[i, j]
    runnable = throughput > 0.0
    return {
        "worker_type": w,
        "model": a.model,
        "batch_size": a.batch_size,
        "scale_factor": a.scale_factor,
        "partner_model": b.model,
        "partner_batch_size": b.batch_size,
        "throughput": throughput if runnable else 0.0,
        "status": "estimated" if runnable else "failed",
        "source": "estimated",
        "device_name": source_note,
    }
