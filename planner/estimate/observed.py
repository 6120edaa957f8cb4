"""Throughputs observed in production: every progress report is a measurement.

A next-round plan knows each job's assignment (worker type, partner, scale
factor) and how long its rounds last; the launcher's next report says how
many steps the job did. Steps over seconds is the job's rate in that table
cell (`observe`). The rates of a cell are aggregated robustly (`aggregate`:
median, IQR), and `decision_table` puts the medians of cells with enough
reports in place of the table's estimated or missing cells. Measured rows
are never replaced: a profiler's steady-state measurement is authoritative,
while a report also counts restarts and checkpoints.

What is not an observation:
* a job whose assignment changed within the reported rounds (no one cell);
* a report without steps, with 0 steps, or with no time run;
* a finished job without `elapsed_s` (it stopped before the rounds ended);
* a report of exactly the planned steps without `elapsed_s`: a job may stop
  once it has done its planned steps, so the rate is only a lower bound;
* an impossible rate (negative, not finite, or more than `IMPOSSIBLE_FACTOR`
  times the fastest rate the table allows the job type on that worker type,
  `rate_ceiling`): a warning names the job.

Pure functions; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from planner.formats.progress import JobProgress
from planner.formats.state import CellKey, ObservedEntry, WindowEntry
from planner.formats.table import (
    COLUMNS,
    RUNNABLE_STATUSES,
    TableRow,
    ThroughputTable,
    is_estimate,
    model_label,
    row_key,
)

DEFAULT_MIN_OBSERVATIONS = 3  # reports a cell needs before its median is used
IMPOSSIBLE_FACTOR = 3.0  # a rate above this many times the table's fastest for the job type is rejected
KEEP = 50  # latest rates kept per cell (old ones drop out: the cluster may change)
SOURCE = "observed"


@dataclass(frozen=True)
class Observation:
    job_id: str
    cell: CellKey
    rate: float  # steps/s


@dataclass(frozen=True)
class CellStats:
    count: int
    median: float  # steps/s
    iqr: float  # 75th minus 25th percentile (numpy's linear interpolation)

    @property
    def spread(self) -> float:
        """IQR / median: 0 for identical reports."""
        return self.iqr / self.median


@dataclass
class Decision:
    """The table the planner decides with and where its cells come from."""

    table: ThroughputTable
    applied: dict[CellKey, float]  # cells that take an observed median
    measured: int
    observed: int
    estimated: int


def describe(cell: CellKey) -> str:
    worker_type, model, batch, scale, partner, partner_batch = cell
    text = f"{model_label(model, batch)} x{scale} on {worker_type}"
    return text if partner is None else f"{text} with {model_label(partner, partner_batch)}"


# --------------------------------------------------------------------------- observing


def is_replaceable(row: Mapping[str, object]) -> bool:
    """Estimated rows, and observed rows merged in earlier (fresher reports win)."""
    return is_estimate(row) or row["source"] == SOURCE


TypeKey = tuple[str, int | None, int]  # (model, batch size, scale factor)


def runnable_rows(table: ThroughputTable) -> dict[TypeKey, list[TableRow]]:
    """The table's runnable rows by job type, in one pass (the ceilings below read them per cell)."""
    out: dict[TypeKey, list[TableRow]] = {}
    for r in table.rows:
        if r["status"] in RUNNABLE_STATUSES:
            out.setdefault((r["model"], r["batch_size"], r["scale_factor"]), []).append(r)
    return out


def speed_ratios(rows_by_type: Mapping[TypeKey, list[TableRow]]) -> dict[tuple[str, str], float]:
    """(a, b) -> the largest rate on b over rate on a of any job type measured solo on both:
    how much faster b can be than a, as far as the table knows."""
    ratios: dict[tuple[str, str], float] = {}
    for rows in rows_by_type.values():
        rates = {
            r["worker_type"]: r["throughput"]
            for r in rows
            if r["partner_model"] is None and not is_estimate(r) and r["throughput"] > 0
        }
        for a, rate_a in rates.items():
            for b, rate_b in rates.items():
                ratios[(a, b)] = max(ratios.get((a, b), 0.0), rate_b / rate_a)
    return ratios


def rate_ceiling(
    table: ThroughputTable,
    cell: CellKey,
    ratios: Mapping[tuple[str, str], float] | None = None,
    rows_by_type: Mapping[TypeKey, list[TableRow]] | None = None,
) -> float | None:
    """IMPOSSIBLE_FACTOR x the fastest rate the table allows the cell's job type on the cell's
    worker type: its fastest runnable row (measured rows when there are any, else every row),
    or a row on a slower worker type scaled by the largest speed ratio of the two types the
    table has measured (a job measured only on a K80 may run 10x faster on a V100). None
    when the table has no runnable row of the job type. `ratios` and `rows_by_type` are what
    `speed_ratios` and `runnable_rows` give for `table` (computed here when not given)."""
    worker_type, model, batch_size, scale_factor = cell[:4]
    rows_by_type = runnable_rows(table) if rows_by_type is None else rows_by_type
    ratios = speed_ratios(rows_by_type) if ratios is None else ratios
    rows = rows_by_type.get((model, batch_size, scale_factor), [])
    measured = [r for r in rows if not is_estimate(r)]
    rates = [r["throughput"] * max(1.0, ratios.get((r["worker_type"], worker_type), 1.0)) for r in (measured or rows)]
    return IMPOSSIBLE_FACTOR * max(rates) if rates else None


def observe(
    window: Iterable[WindowEntry],
    reports: Mapping[str, JobProgress],
    table: ThroughputTable,
    skip: Iterable[str] = (),
) -> tuple[list[Observation], list[str]]:
    """The observations in `reports` on the assignments of `window`; warnings name the
    jobs whose rate is impossible. Jobs in `skip` (cancelled) are left out."""
    skipped = set(skip)
    found: list[Observation] = []
    warnings: list[str] = []
    ceilings: dict[CellKey, float | None] = {}  # per cell, from one pass over the table
    rows_by_type = runnable_rows(table)
    ratios = speed_ratios(rows_by_type)
    for entry in window:
        report = reports.get(entry.job_id)
        if report is None or entry.job_id in skipped or report.steps_done is None:
            continue
        steps = report.steps_done - entry.steps_before
        if report.elapsed_s is None:
            if report.finished or abs(steps - entry.planned_steps) < 1e-9:
                continue  # stopped early, or perhaps at its planned steps: no rate
            seconds = entry.seconds
        else:
            seconds = report.elapsed_s
        seconds -= entry.restart_s  # what the plan charged its (re)starts was not training time
        if steps == 0 or not seconds > 0:
            continue
        rate = steps / seconds
        if entry.cell not in ceilings:
            ceilings[entry.cell] = rate_ceiling(table, entry.cell, ratios, rows_by_type)
        ceiling = ceilings[entry.cell]
        if not math.isfinite(rate) or rate < 0 or (ceiling is not None and rate > ceiling):
            limit = "" if ceiling is None else f"; at most {ceiling:.4g} ({IMPOSSIBLE_FACTOR:g}x the table's fastest)"
            warnings.append(
                f"{entry.job_id}: {steps:g} steps in {seconds:g} s ({rate:.4g} steps/s) on "
                f"{describe(entry.cell)} is not a possible rate{limit}; not used as an observation"
            )
            continue
        found.append(Observation(entry.job_id, entry.cell, rate))
    return found, warnings


def record(cells: Mapping[CellKey, list[float]], observations: Iterable[Observation]) -> dict[CellKey, list[float]]:
    """`cells` with `observations` appended, each cell keeping its latest KEEP rates."""
    out = {cell: list(rates) for cell, rates in cells.items()}
    for obs in observations:
        out.setdefault(obs.cell, []).append(obs.rate)
    return {cell: rates[-KEEP:] for cell, rates in out.items()}


# --------------------------------------------------------------------------- aggregating


def stats(rates: list[float]) -> CellStats:
    q25, median, q75 = np.percentile(np.asarray(rates, dtype=float), [25, 50, 75])
    return CellStats(len(rates), float(median), float(q75 - q25))


def aggregate(cells: Mapping[CellKey, list[float]]) -> dict[CellKey, CellStats]:
    return {cell: stats(rates) for cell, rates in cells.items() if rates}


def observed_row(cell: CellKey, cell_stats: CellStats) -> TableRow:
    """A table row of an observed cell (status ok, source observed)."""
    row = dict.fromkeys(COLUMNS)
    row.update(zip(("worker_type", "model", "batch_size", "scale_factor", "partner_model", "partner_batch_size"), cell))
    row.update(
        throughput=cell_stats.median,
        status="ok",
        source=SOURCE,
        notes=f"median of {cell_stats.count} progress reports, IQR/median {cell_stats.spread:.3f}",
    )
    return row  # type: ignore[return-value]  # every column of TableRow


def decision_table(
    table: ThroughputTable, observed: ObservedEntry | None, min_count: int = DEFAULT_MIN_OBSERVATIONS
) -> Decision:
    """`table` with every estimated (or earlier observed) or missing cell that has at
    least `min_count` observations taking their median; measured rows stay."""
    ready = {
        cell: s for cell, s in aggregate(observed.cells if observed else {}).items() if s.count >= max(1, min_count)
    }
    rows: list[TableRow] = []
    applied: dict[CellKey, float] = {}
    counts = {"measured": 0, "observed": 0, "estimated": 0}
    for r in table.rows:
        cell = row_key(r)
        if cell in ready and is_replaceable(r):
            r = observed_row(cell, ready[cell])
            applied[cell] = ready[cell].median
        rows.append(r)
    present = {row_key(r) for r in table.rows}
    for cell, s in ready.items():
        if cell not in present:  # a cell the table lacks (e.g. a table changed since)
            rows.append(observed_row(cell, s))
            applied[cell] = s.median
    for r in rows:
        kind = "observed" if r["source"] == SOURCE else "estimated" if is_estimate(r) else "measured"
        counts[kind] += 1
    decided = ThroughputTable(rows, path=table.path) if applied else table
    return Decision(decided, applied, **counts)


def exported_rows(
    observed: ObservedEntry | None, table: ThroughputTable | None, min_count: int
) -> tuple[list[TableRow], int]:
    """Rows of the cells with at least `min_count` observations, leaving out the cells
    `table` measured (a merge must not replace them); returns (rows, cells left out)."""
    authoritative = set() if table is None else {row_key(r) for r in table.rows if not is_replaceable(r)}
    rows, left_out = [], 0
    for cell, s in sorted(aggregate(observed.cells if observed else {}).items(), key=lambda kv: _sort_key(kv[0])):
        if s.count < max(1, min_count):
            continue
        if cell in authoritative:
            left_out += 1
            continue
        rows.append(observed_row(cell, s))
    return rows, left_out


def _sort_key(cell: CellKey) -> tuple:
    worker_type, model, batch, scale, partner, partner_batch = cell
    return (worker_type, model, batch or 0, scale, partner or "", partner_batch or 0)


# --------------------------------------------------------------------------- the window


def window_entries(
    placements: Iterable[tuple[float, tuple[str, ...], str]],
    job_types: Mapping[str, tuple[str, int | None, int]],
    planned_steps: Mapping[str, float],
    steps_before: Mapping[str, float],
    starts: Mapping[str, int] | None = None,
    restart_s: Mapping[str, float] | None = None,
) -> list[WindowEntry]:
    """Each job's one cell over the planned rounds: `placements` are (round seconds, jobs
    of the placement, worker type), round after round. A job placed in two cells gets none.
    `starts`: per job, the (re)starts the plan made in those rounds, and `restart_s` the
    seconds it charged them."""
    starts, restart_s = starts or {}, restart_s or {}
    cells: dict[str, CellKey | None] = {}
    seconds: dict[str, float] = {}
    for length, jobs, worker_type in placements:
        for jid in jobs:
            model, batch, scale = job_types[jid]
            partner: tuple[str | None, int | None] = (None, None)
            for other in jobs:
                if other != jid:
                    partner = job_types[other][:2]
            cell: CellKey = (worker_type, model, batch, scale, *partner)
            cells[jid] = cell if cells.get(jid, cell) == cell else None
            seconds[jid] = seconds.get(jid, 0.0) + length
    return [
        WindowEntry(
            jid,
            cell,
            seconds[jid],
            planned_steps.get(jid, 0.0),
            steps_before[jid],
            starts.get(jid, 0),
            restart_s.get(jid, 0.0),
        )
        for jid, cell in cells.items()
        if cell is not None and seconds[jid] > 0 and jid in steps_before
    ]
